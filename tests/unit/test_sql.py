"""userdp.sql end to end on small tables: the released columns against the exact DuckDB
answer, parity with userdp.aggregate on the same rows, the budget, EXPLAIN, inputs."""

from __future__ import annotations

import datetime as dt

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import userdp
from userdp import (
    BudgetExceededError,
    DataError,
    InvalidParameterError,
    PrivacyAccountant,
    PrivacyBudget,
)
from userdp.sql import QueryPlan, SqlResult, UnsupportedQueryError


@pytest.fixture(scope="module")
def web():
    """3,000 users; visits over 20 pages (each user visits up to 3, a few times each)."""
    rng = np.random.default_rng(0)
    rows = []
    for u in range(3000):
        for page in rng.choice(20, size=rng.integers(1, 4), replace=False):
            for _ in range(rng.integers(1, 3)):
                rows.append((u, int(page), float(rng.uniform(0, 100))))
    visits = pd.DataFrame(rows, columns=["uid", "page", "secs"])
    pages = pd.DataFrame({"page": np.arange(25), "section": [f"s{p % 3}" for p in range(25)]})
    return visits, pages


def exact(query, **frames):
    con = duckdb.connect()
    for name, frame in frames.items():
        con.register(name, frame)
    return con.execute(query).df()


def run(query, web, **kwargs):
    visits, pages = web
    options = dict(
        tables={"visits": visits, "pages": pages},
        public_tables=["pages"],
        privacy_unit="uid",
        epsilon=4.0,
        delta=1e-5,
        seed=0,
    )
    return userdp.sql(query, **{**options, **kwargs})


def test_counts_over_public_keys_match_the_exact_answer_within_noise(web):
    visits, pages = web
    q = (
        "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(public_keys=pages) page, "
        "COUNT(DISTINCT uid) AS users, COUNT(*) AS n FROM visits GROUP BY page ORDER BY page"
    )
    r = run(q, web)
    assert isinstance(r, SqlResult)
    got = r.to_pandas()
    want = exact(
        "SELECT p.page, COUNT(DISTINCT uid) AS users, COUNT(uid) AS n FROM pages p "
        "LEFT JOIN visits v ON v.page = p.page GROUP BY p.page ORDER BY p.page",
        visits=visits,
        pages=pages,
    )
    assert got["page"].tolist() == list(range(25))  # public keys: absent ones included
    for col in ("users", "n"):
        sd = max(rel.noise_sd[col if col == "users" else "count"] for rel in r.releases)
        err = np.abs(got[col].to_numpy() - want[col].to_numpy())
        assert np.all(err <= 6 * sd + 0.2 * want[col].to_numpy()), col
        assert np.median(err) < 0.1 * want[col].mean(), col
    assert set(r.intervals.column_names) == {"page", "users_low", "users_high", "n_low", "n_high"}
    assert np.all(r.intervals["users_low"].to_numpy() <= got["users"].to_numpy())


def test_the_sql_release_is_the_aggregate_release_of_the_same_rows(web):
    visits, _ = web
    r = run(
        "SELECT page, COUNT(DISTINCT uid) u, SUM(CLAMP(secs, 0, 60)) s, AVG(CLAMP(secs, 0, 60)) m "
        "FROM visits WHERE secs > 5 GROUP BY page",
        web,
        seed=7,
    )
    sub = visits[visits.secs > 5]
    direct = userdp.aggregate(
        {"user": sub.uid.to_numpy(), "key": sub.page.to_numpy(), "v": sub.secs.clip(0, 60)},
        value_column="v",
        bounds=(0.0, 60.0),
        metrics=("users", "sum", "mean"),
        epsilon=4.0,
        delta=1e-5,
        seed=7,
    ).to_pandas()
    got = r.to_pandas()
    assert got["page"].tolist() == direct["key"].tolist()
    np.testing.assert_array_equal(got["u"], direct["users"])
    np.testing.assert_array_equal(got["s"], direct["sum"])
    np.testing.assert_array_equal(got["m"], direct["mean"])


def test_sums_and_means_of_two_expressions_share_one_key_set_and_one_budget(web):
    acc = PrivacyAccountant(PrivacyBudget(4.0, 1e-5))
    r = run(
        "SELECT p.section, SUM(CLAMP(secs, 0, 100)) AS total, AVG(CLAMP(secs / 60, 0, 2)) AS m, "
        "COUNT(*) AS n FROM visits v JOIN pages p ON v.page = p.page GROUP BY p.section",
        web,
        accountant=acc,
    )
    assert len(r.releases) == 2 and r.plan.selection is not None
    assert sorted(r.to_pandas()["section"]) == ["s0", "s1", "s2"]
    assert r.budget.epsilon <= 4.0 * (1 + 1e-9) and r.budget.delta <= 1e-5 * (1 + 1e-9)
    assert r.budget.epsilon > 3.9  # the split is scaled up to the whole budget
    assert len(acc.ledger) == 3  # the selection and two GROUP BY calls, on one accountant
    assert acc.spent().epsilon <= 4.0 * (1 + 1e-9)


def test_several_group_by_columns_come_back_with_their_types():
    rows = pd.DataFrame(
        {
            "uid": np.arange(4000) % 2000,
            "day": [dt.date(2024, 1, 1 + (i % 2)) for i in range(4000)],
            "tag": np.where(np.arange(4000) % 4 < 2, "a|b!", "c"),
        }
    )
    r = userdp.sql(
        "SELECT day, tag, COUNT(*) AS n FROM t GROUP BY day, tag ORDER BY day, tag",
        tables={"t": rows},
        privacy_unit="uid",
        epsilon=2.0,
        delta=1e-5,
        seed=1,
    )
    table = r.to_arrow()
    assert table.schema.field("day").type == pa.date32()
    assert table.column("tag").to_pylist() == ["a|b!", "c", "a|b!", "c"]
    assert table.column("day").to_pylist()[0] == dt.date(2024, 1, 1)


def test_no_group_by_releases_one_row(web):
    r = run(
        "SELECT COUNT(DISTINCT uid) AS users, MEDIAN(CLAMP(secs, 0, 100)) AS med FROM visits", web
    )
    assert len(r) == 1 and r.to_arrow().column_names == ["users", "med"]
    assert abs(r.to_pandas()["users"][0] - 3000) < 300
    assert 30 < r.to_pandas()["med"][0] < 70


def test_having_order_and_limit_are_applied_to_the_released_values(web):
    r = run(
        "SELECT page, COUNT(*) AS n, COUNT(*) * 2 AS twice FROM visits GROUP BY page "
        "HAVING n > 300 ORDER BY n DESC LIMIT 4",
        web,
    )
    full = run("SELECT page, COUNT(*) AS n FROM visits GROUP BY page", web).to_pandas()
    want = full[full.n > 300].sort_values("n", ascending=False).head(4)
    got = r.to_pandas()
    assert got["page"].tolist() == want["page"].tolist()
    np.testing.assert_allclose(got["twice"], 2 * got["n"])


def test_explain_reads_nothing_and_charges_nothing(tmp_path):
    acc = PrivacyAccountant(PrivacyBudget(1.0, 1e-5))
    plan = userdp.sql(
        "SELECT page, COUNT(DISTINCT uid), SUM(CLAMP(secs, 0, 10)), AVG(CLAMP(x, 0, 1)) "
        "FROM visits GROUP BY page",
        tables={"visits": str(tmp_path / "absent.parquet")},  # never opened
        privacy_unit="uid",
        epsilon=1.0,
        delta=1e-5,
        accountant=acc,
        explain=True,
    )
    assert isinstance(plan, QueryPlan)
    assert acc.ledger == ()
    text = plan.text
    for fact in ("private, privacy unit 'uid'", "key selection", "noise per cell", "z="):
        assert fact in text
    assert len(plan.releases) == 2


def test_a_query_that_would_go_over_the_accountant_is_refused_before_any_release(web):
    acc = PrivacyAccountant(PrivacyBudget(1.0, 1e-5))
    with pytest.raises(BudgetExceededError):
        run(
            "SELECT page, SUM(CLAMP(secs, 0, 100)), AVG(CLAMP(secs, 0, 9)) FROM visits "
            "GROUP BY page",
            web,
            accountant=acc,
        )
    assert acc.ledger == ()


def test_a_repeated_seed_on_one_accountant_is_refused(web):
    acc = PrivacyAccountant()
    run("SELECT page, COUNT(*) FROM visits GROUP BY page", web, accountant=acc, seed=3)
    with pytest.raises(InvalidParameterError, match="seed"):
        run("SELECT page, COUNT(*) FROM visits GROUP BY page", web, accountant=acc, seed=3)


def test_the_budget_comes_from_the_query_or_the_arguments_never_two_values(web):
    q = "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=2, delta=1e-6) COUNT(*) FROM visits"
    assert run(q, web, epsilon=None, delta=None).budget.epsilon == pytest.approx(2.0)
    with pytest.raises(InvalidParameterError, match="differs"):
        run(q, web, epsilon=1.0)
    with pytest.raises(InvalidParameterError, match="needs epsilon"):
        run("SELECT COUNT(*) FROM visits", web, epsilon=None)


def test_a_non_numeric_value_expression_is_refused_by_its_type(web):
    with pytest.raises(InvalidParameterError, match="type VARCHAR"):
        run(
            "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(bounds=(0, 1)) SUM(p.section) "
            "FROM visits v JOIN pages p USING (page)",
            web,
        )


def test_an_engine_error_on_a_row_never_shows_the_value(web):
    visits, _ = web
    names = visits.assign(name="alice-secret")
    with pytest.raises(DataError, match="withheld") as info:
        userdp.sql(
            "SELECT SUM(CLAMP(CASE WHEN secs > 99.99 THEN error(name) ELSE 1 END, 0, 1)) FROM v",
            tables={"v": names},
            privacy_unit="uid",
            epsilon=1.0,
            delta=1e-5,
        )
    assert "alice" not in str(info.value)


def test_a_cast_that_fails_on_a_value_is_a_missing_value_not_an_error():
    rows = {"uid": np.arange(3000), "s": np.where(np.arange(3000) % 2 == 0, "5", "five")}
    r = userdp.sql(
        "SELECT COUNT(*) AS n, SUM(CLAMP(CAST(s AS INT), 0, 10)) AS total FROM t",
        tables={"t": rows},
        privacy_unit="uid",
        epsilon=2.0,
        delta=1e-5,
        seed=0,
    )
    assert abs(r.to_pandas()["total"][0] - 7500) < 1000


def test_a_column_the_table_lacks_is_named_in_the_error(web):
    with pytest.raises(UnsupportedQueryError, match="nope"):
        run("SELECT COUNT(*) FROM visits WHERE nope > 1", web)


def test_files_polars_and_arrow_are_read_alike(web, tmp_path):
    visits, _ = web
    pq.write_table(pa.Table.from_pandas(visits), tmp_path / "v.parquet")
    visits.to_csv(tmp_path / "v.csv", index=False)
    pl = pytest.importorskip("polars")
    q = "SELECT page, COUNT(*) AS n FROM visits GROUP BY page ORDER BY page"
    outs = [
        userdp.sql(
            q, tables={"visits": t}, privacy_unit="uid", epsilon=1.0, delta=1e-5, seed=5
        ).to_pandas()
        for t in (
            str(tmp_path / "v.parquet"),
            tmp_path / "v.csv",
            pl.from_pandas(visits),
            pa.Table.from_pandas(visits),
        )
    ]
    for other in outs[1:]:
        pd.testing.assert_frame_equal(outs[0], other)
    r = userdp.sql(q, tables={"visits": visits}, privacy_unit="uid", epsilon=1, delta=1e-5)
    assert r.to_polars().columns == ["page", "n"]
    with pytest.raises(InvalidParameterError, match="Spark"):
        r.to_spark()


def test_userdp_sql_is_the_function_and_the_package():
    import userdp.sql as package

    assert callable(userdp.sql) and callable(package)
    assert package.sql.__name__ == "sql"


def test_count_of_an_expression_counts_its_non_null_rows(web):
    """COUNT(e) is the rows where e is not NULL: a sum of 0/1 indicators with the public range
    [0, 1] (no bounds to give), released as a non-negative integer with its interval."""
    q = (
        "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(public_keys=pages) page, COUNT(*) AS n, "
        "COUNT(NULLIF(secs > 50, TRUE)) AS short FROM visits JOIN pages USING (page) GROUP BY page"
    )
    result = run(q, web)
    released = result.to_pandas().set_index("page").sort_index()
    bands = result.intervals.to_pandas().set_index("page").sort_index()
    truth = exact(
        "SELECT page, COUNT(*) AS n, COUNT(NULLIF(secs > 50, TRUE)) AS short FROM visits "
        "GROUP BY page",
        visits=web[0],
    ).set_index("page")
    truth = truth.reindex(range(25), fill_value=0)
    assert (truth["short"] < truth["n"]).loc[truth["n"] > 0].all()  # the filter bites
    assert released["short"].dtype.kind == "i" and (released["short"] >= 0).all()
    assert bands["short_low"].dtype.kind == "i" and (bands["short_low"] >= 0).all()
    assert (bands["short_low"] <= released["short"]).all()
    assert (released["short"] <= bands["short_high"]).all()
    err = (released["short"] - truth["short"]).abs()
    assert err.median() < 0.1 * truth["short"][truth["short"] > 0].median()


def test_a_where_that_keeps_no_row_releases_like_an_empty_input(web):
    """Zero rows after WHERE are a data set (no user): released, never refused (a refusal
    only on no rows would tell them apart from one user's rows)."""
    q = "SELECT page, COUNT(*) AS n FROM visits WHERE secs > 1000 GROUP BY page"
    assert len(run(q, web)) == 0
    total = run("SELECT COUNT(*) AS n FROM visits WHERE secs > 1000", web, seed=1)
    assert len(total) == 1 and total.to_pandas()["n"].iloc[0] >= 0


# -- progress and stdout ------------------------------------------------------------------------
def test_duckdb_never_prints_its_own_progress_bar():
    """DuckDB draws a bar on stdout once a query runs 2 s, where ``userdp sql`` writes CSV."""
    from userdp.sql import rows as rowsql

    con = rowsql.connect_duckdb()
    assert con.execute("SELECT current_setting('enable_progress_bar')").fetchone() == (False,)
    with rowsql.duckdb_connection({"t": pa.table({"x": [1]})}, ["t"]) as con:
        setting = con.execute("SELECT current_setting('enable_progress_bar')").fetchone()
        assert setting == (False,)
        assert con.execute("SELECT 1 // 0").fetchone() == (None,)  # NULL, not an error


def test_progress_reports_the_row_query_and_changes_no_release(web, monkeypatch):
    from userdp.sql import rows as rowsql

    monkeypatch.setattr(rowsql, "PROGRESS_POLL_S", 0.001)
    calls = []
    q = "SELECT page, COUNT(DISTINCT uid) AS users, SUM(CLAMP(secs, 0, 100)) AS s FROM visits "
    q += "GROUP BY page"
    with_bar = run(q, web, progress=lambda done, total: calls.append((done, total)))
    assert calls and calls[-1] == (100, 100)  # the query's end, once
    assert all(total == 100 and 0 <= done < 100 for done, total in calls[:-1])
    assert with_bar.to_arrow().equals(run(q, web).to_arrow())  # counts only: same release
