"""Private GROUP BY on neighbouring datasets: every noised statistic moves by at most its
declared l2 bound (replayed at the same released history), and a user's novel keys are never
released."""

from __future__ import annotations

import os

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from userdp.aggregate import aggregate  # noqa: E402
from userdp.privacy import recording  # noqa: E402

N_EXAMPLES = int(os.environ.get("USERDP_PROPERTY_EXAMPLES", "150"))
TOL = 1e-9


@st.composite
def neighbours(draw):
    """D: users with rows over a few shared keys; the added user has shared and novel keys."""
    n_users = draw(st.integers(1, 60))
    vocab = list(range(draw(st.integers(1, 6))))
    rows = []
    for u in range(n_users):
        for _ in range(draw(st.integers(1, 8))):
            rows.append((u, draw(st.sampled_from(vocab)), draw(st.floats(-5, 15))))
    added = [(-1, 100 + k, draw(st.floats(-5, 15))) for k in range(draw(st.integers(0, 30)))]
    added += [
        (-1, draw(st.sampled_from(vocab)), draw(st.floats(-5, 15)))
        for _ in range(draw(st.integers(0, 40)))
    ]
    return rows, rows + added


def _table(rows):
    u, k, v = zip(*rows, strict=True)
    return {"user": np.array(u), "key": np.array(k), "v": np.array(v)}


def _check(before, after):
    """Every statistic of ``after`` (run replaying ``before``'s outputs) is within its bound."""
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


@pytest.mark.slow
@settings(
    max_examples=max(N_EXAMPLES // 3, 10),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(neighbours(), st.booleans(), st.integers(0, 99))
def test_every_noised_statistic_moves_by_at_most_its_declared_bound(pair, select, seed):
    d, d2 = pair
    kw = dict(
        value_column="v",
        bounds=(0.0, 10.0),
        metrics="users,count,sum,mean",
        keys="select" if select else [*list(range(6)), 100],
        epsilon=1.0,
        delta=1e-5,
        seed=seed,
    )
    with recording() as before:
        aggregate(_table(d), **kw)
    with recording(replay=before) as after:
        aggregate(_table(d2), **kw)
    assert _check(before, after) >= 3


@settings(
    max_examples=max(N_EXAMPLES // 5, 10),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(neighbours(), st.integers(0, 99))
def test_hard_limited_statistics_move_by_at_most_their_bound(pair, seed):
    # The limit form samples rows with random keys: compare D' with D' minus the added user's
    # rows under the same random keys (the kept rows of the others do not depend on the user).
    from userdp.aggregate.local import limit_keep

    _, d2 = pair
    t = _table(d2)
    rng = np.random.default_rng(seed)
    rand = rng.integers(0, 2**62, t["user"].size)
    keep = limit_keep(t["user"], t["key"], rand, 2, 3)
    mine = t["user"] == -1
    ones = np.zeros(7)
    counts = np.zeros(7)
    keys = [*list(range(6)), 100]
    for k_i, key in enumerate(keys):
        sel = keep & mine & (t["key"] == key)
        counts[k_i] = sel.sum()
        ones[k_i] = float(sel.any())
    assert np.linalg.norm(ones) <= np.sqrt(2) + TOL
    assert np.linalg.norm(counts) <= np.sqrt(2) * 3 + TOL


@pytest.mark.parametrize("metrics", ["users", "users,count,sum,mean,quantiles"])
def test_a_user_with_novel_keys_never_has_them_released(metrics):
    rng = np.random.default_rng(0)
    user = np.repeat(np.arange(2000), 2)
    key = np.tile(["common", "other"], 2000).astype(object)
    novel_user = np.full(500, 10**6)
    novel_key = np.array([f"novel{k}" for k in range(500)], dtype=object)
    data = {
        "user": np.concatenate([user, novel_user]),
        "key": np.concatenate([key, novel_key]),
        "v": rng.uniform(0, 1, user.size + 500),
    }
    for seed in range(5):
        r = aggregate(
            data,
            value_column="v",
            bounds=(0, 1),
            metrics=metrics,
            epsilon=1.0,
            delta=1e-5,
            seed=seed,
        )
        released = set(r.to_arrow().column("key").to_pylist())
        assert not any(str(k).startswith("novel") for k in released)
        assert "common" in released
