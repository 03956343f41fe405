"""Private SQL on neighbouring datasets: the GROUP BY's neighbour properties hold through the
SQL layer (WHERE, public joins that repeat rows, two private tables joined on the unit), and a
hostile query either runs or fails closed with one line."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

hypothesis = pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import userdp  # noqa: E402
from userdp.cli import main  # noqa: E402
from userdp.exceptions import UserDPError  # noqa: E402
from userdp.privacy import recording  # noqa: E402
from userdp.sql import parse_query  # noqa: E402

N_EXAMPLES = int(os.environ.get("USERDP_PROPERTY_EXAMPLES", "150"))
TOL = 1e-9

#: A public page table in which some pages have several rows: a join repeats a visit.
PAGES = pd.DataFrame(
    {
        "page": [0, 0, 0, 1, 2, 2, 3, 4, 5, 100, 101, 102],
        "section": ["a", "a", "b", "b", "a", "c", "c", "a", "b", "n", "n", "n"],
    }
)

QUERIES = {
    "counts, WHERE, a public join that repeats rows": (
        "SELECT p.section, COUNT(DISTINCT v.uid) AS users, COUNT(*) AS n, "
        "SUM(CLAMP(v.x, 0, 10)) AS s, AVG(CLAMP(v.x, 0, 10)) AS m FROM visits v "
        "JOIN pages p ON v.page = p.page WHERE v.x > 1 GROUP BY p.section"
    ),
    "two private tables joined on the unit, two value expressions": (
        "SELECT v.page, COUNT(*) AS n, SUM(CLAMP(o.amount, 0, 5)) AS spent, "
        "AVG(CLAMP(v.x, 0, 10)) AS m FROM visits v JOIN orders o ON v.uid = o.uid "
        "GROUP BY v.page"
    ),
    "COUNT of an expression beside COUNT(*)": (
        "SELECT page, COUNT(*) AS n, COUNT(NULLIF(v.x, 5)) AS valued FROM visits v GROUP BY page"
    ),
    "public keys, two GROUP BY columns": (
        "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(public_keys=pages) page, section, "
        "COUNT(*) AS n FROM visits JOIN pages USING (page) GROUP BY page, section"
    ),
}


@st.composite
def neighbours(draw):
    """D: users with visits over a few pages and orders; D': D plus one user who has shared
    and novel pages (present in the public table) and orders of their own."""
    n_users = draw(st.integers(1, 40))
    visits, orders = [(1000, 0, 5.0)], [(1000, 1.0)]  # a row passes every WHERE and join
    for u in range(n_users):
        for _ in range(draw(st.integers(1, 6))):
            visits.append((u, draw(st.integers(0, 5)), draw(st.floats(-2, 12))))
        for _ in range(draw(st.integers(0, 3))):
            orders.append((u, draw(st.floats(-1, 8))))
    added = [(-1, 100 + k % 3, draw(st.floats(-2, 12))) for k in range(draw(st.integers(0, 20)))]
    added += [(-1, draw(st.integers(0, 5)), 5.0) for _ in range(draw(st.integers(0, 20)))]
    extra = [(-1, draw(st.floats(-1, 8))) for _ in range(draw(st.integers(0, 10)))]
    return (visits, orders), (visits + added, orders + extra)


def _tables(pair):
    visits, orders = pair
    v = pd.DataFrame(visits or [(0, 0, 1.0)], columns=["uid", "page", "x"])
    o = pd.DataFrame(orders or [(0, 1.0)], columns=["uid", "amount"])
    return {"visits": v, "orders": o, "pages": PAGES}


def _check(before, after):
    """Every statistic of ``after`` (replaying ``before``'s outputs) is within its l2 bound."""
    by_name = {}
    for rel in before:
        by_name.setdefault(rel.statistic, []).append(rel)
    seen = {}
    checked = 0
    for rel in after:
        k = seen.get(rel.statistic, 0)
        seen[rel.statistic] = k + 1
        old = by_name[rel.statistic][k]
        if rel.l2 is None:
            continue
        if rel.index is not None and old.index is not None:
            pos = {x: i for i, x in enumerate(old.index.tolist())}
            prev = np.array([old.value[pos[x]] if x in pos else 0.0 for x in rel.index.tolist()])
            gone = [x for x in old.index.tolist() if x not in set(rel.index.tolist())]
            extra = np.array([old.value[pos[x]] for x in gone])
            diff = np.concatenate([rel.value - prev, extra])
        else:
            diff = rel.value - old.value
        assert np.linalg.norm(diff) <= rel.l2 * (1 + TOL) + 1e-12, rel.statistic
        checked += 1
    return checked


def _run(query, tables, seed):
    return userdp.sql(
        query,
        tables=tables,
        public_tables=["pages"],
        privacy_unit="uid",
        epsilon=1.0,
        delta=1e-5,
        seed=seed,
    )


@pytest.mark.slow
@settings(
    max_examples=max(N_EXAMPLES // 5, 10),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(neighbours(), st.sampled_from(sorted(QUERIES)), st.integers(0, 99))
def test_every_noised_statistic_of_a_query_moves_by_at_most_its_bound(pair, name, seed):
    d, d2 = pair
    with recording() as before:
        _run(QUERIES[name], _tables(d), seed)
    with recording(replay=before) as after:
        _run(QUERIES[name], _tables(d2), seed)
    assert _check(before, after) >= 2


def test_a_public_join_that_repeats_a_users_rows_stays_within_the_bound():
    # One heavy user whose every visit joins 200 rows of the public table: their vector grows
    # 200-fold, and the declared bound of every statistic still holds when they are added.
    rng = np.random.default_rng(0)
    pages = pd.DataFrame({"page": np.repeat([0, 1], [200, 1]), "section": "s"})
    visits = pd.DataFrame({"uid": np.arange(400), "page": rng.integers(0, 2, 400), "x": 1.0})
    heavy = pd.DataFrame({"uid": -1, "page": np.zeros(50, int), "x": 9.0})
    query = "SELECT page, COUNT(*) AS n, SUM(CLAMP(x, 0, 10)) AS s FROM v JOIN p USING (page) "
    query += "GROUP BY page"
    kwargs = dict(public_tables=["p"], privacy_unit="uid", epsilon=1.0, delta=1e-5, seed=4)
    with recording() as before:
        userdp.sql(query, tables={"v": visits, "p": pages}, **kwargs)
    with recording(replay=before) as after:
        userdp.sql(query, tables={"v": pd.concat([visits, heavy]), "p": pages}, **kwargs)
    assert _check(before, after) >= 3
    metric = next(r for r in after if r.statistic == "aggregate.count")
    old = next(r for r in before if r.statistic == "aggregate.count")
    # the heavy user's raw contribution (50 * 200 rows) was scaled down to at most the bound
    assert np.linalg.norm(metric.value - old.value) <= metric.l2 * (1 + TOL)
    assert metric.l2 < 50 * 200


@pytest.mark.parametrize("name", [q for q in sorted(QUERIES) if "public keys" not in q])
def test_a_user_with_novel_keys_in_a_filtered_joined_query_never_has_them_released(name):
    rng = np.random.default_rng(1)
    n = 3000
    visits = pd.DataFrame(
        {"uid": np.arange(n), "page": rng.integers(0, 6, n), "x": rng.uniform(2, 9, n)}
    )
    novel = pd.DataFrame({"uid": -1, "page": np.arange(100, 103).repeat(50), "x": 5.0})
    orders = pd.DataFrame({"uid": np.concatenate([np.arange(n), [-1] * 20]), "amount": 1.0})
    # the novel user's pages are 100-102 (section "n" and the pages' own keys)
    for seed in range(4):
        r = _run(
            QUERIES[name],
            {"visits": pd.concat([visits, novel]), "orders": orders, "pages": PAGES},
            seed,
        )
        keys = set(r.to_arrow().column(0).to_pylist())
        assert not keys & {"n", 100, 101, 102}
        assert keys  # the common keys are released


# --- hostile queries ---------------------------------------------------------------------------

FRAGMENTS = [
    "SELECT", "WITH", "DIFFERENTIAL_PRIVACY", "OPTIONS(epsilon=1)", "OPTIONS(", "page", "uid",
    "x", "COUNT(*)", "COUNT(DISTINCT uid)", "SUM(x)", "SUM(CLAMP(x, 0, 1))", "AVG(", "MEDIAN(x)",
    "FROM", "visits", "pages", "v", "JOIN", "LEFT", "ON", "USING (page)", "v.uid = p.uid",
    "WHERE", "x > 1", "GROUP BY", "HAVING", "ORDER BY", "LIMIT 3", "UNION", "(", ")", ",", ";",
    "*", "'", '"', "--", "/*", "OVER ()", "DISTINCT", "read_csv('/etc/passwd')", "1", "-1e308",
    "NULL", "CAST(x AS INT)", "error('x')", "AS", "n", "contribution_bounds_per_group =>",
    "(0, 1)", "\x00", "é", "ATTACH 'x.db'", "COPY", "PRAGMA", "SELECT 1 FROM visits",
]  # fmt: skip


def hostile():
    words = st.lists(st.sampled_from(FRAGMENTS), min_size=0, max_size=14).map(" ".join)
    valid_prefix = words.map(lambda w: "SELECT page, COUNT(*) FROM visits " + w)
    return st.one_of(words, valid_prefix, st.text(max_size=80))


TINY = {
    "visits": pd.DataFrame({"uid": [1, 2, 3], "page": [0, 1, 0], "x": [0.5, 1.5, 2.0]}),
    "pages": pd.DataFrame({"page": [0, 1], "uid": [1, 2]}),
}


@settings(max_examples=N_EXAMPLES * 2, deadline=None)
@given(hostile())
def test_a_hostile_query_parses_or_fails_closed_with_one_line(query):
    try:
        parse_query(query, tables=TINY, public_tables=["pages"], privacy_unit="uid")
    except UserDPError as err:
        assert "\n" not in str(err)


@settings(max_examples=max(N_EXAMPLES // 3, 10), deadline=None)
@given(hostile())
def test_a_hostile_query_runs_or_raises_one_userdp_error(query):
    try:
        userdp.sql(
            query,
            tables=TINY,
            public_tables=["pages"],
            privacy_unit="uid",
            epsilon=1.0,
            delta=1e-5,
            seed=0,
        )
    except UserDPError as err:
        assert "\n" not in str(err)


@pytest.fixture(scope="module")
def visits_csv(tmp_path_factory):
    path = tmp_path_factory.mktemp("sql") / "visits.csv"
    path.write_text("uid,page,x\n1,0,0.5\n2,1,1.5\n3,0,2\n")
    return path


@settings(
    max_examples=max(N_EXAMPLES // 5, 10),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(query=hostile())
def test_a_hostile_query_on_the_command_line_is_exit_0_or_one_line_and_exit_2(
    query, visits_csv, capsys
):
    args = ["sql", query, "--table", f"visits={visits_csv}", "--privacy-unit", "uid"]
    code = main([*args, "--epsilon", "1", "--delta", "1e-5", "--seed", "0", "-q"])
    err = capsys.readouterr().err
    assert code in (0, 2), err
    if code == 2:
        assert err.startswith("userdp sql: error: ") and err.count("\n") == 1, err
