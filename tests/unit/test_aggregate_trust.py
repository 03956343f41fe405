"""The GROUP BY releases nothing that depends on a non-finite value or on an exact-data branch,
and the regression tests for the bug classes found in peer DP libraries (one test each, named
for the class)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from userdp.aggregate import aggregate
from userdp.aggregate.local import clip_values
from userdp.exceptions import DataError, InvalidParameterError
from userdp.privacy import recording

ALL = "users,count,sum,mean,quantiles"


def _two_keys(n_users: int = 2000, seed: int = 0) -> dict[str, np.ndarray]:
    """Every user holds one row on "a" and one on "b", values U(0, 1)."""
    rng = np.random.default_rng(seed)
    return {
        "user": np.repeat(np.arange(n_users), 2),
        "key": np.tile(np.array(["a", "b"], dtype=object), n_users),
        "v": rng.random(2 * n_users),
    }


def _plus(rows: dict[str, np.ndarray], key: list[str], value: list[float]) -> dict:
    """``rows`` plus one new user holding the given rows."""
    uid = int(rows["user"].max()) + 1
    return {
        "user": np.append(rows["user"], np.full(len(key), uid)),
        "key": np.append(rows["key"], np.array(key, dtype=object)),
        "v": np.append(rows["v"], np.array(value, dtype=np.float64)),
    }


def _run(rows, metrics, seed, **kw):
    return aggregate(
        rows,
        value_column="v",
        bounds=(0.0, 1.0),
        metrics=metrics,
        keys=["a", "b"],
        epsilon=1.0,
        delta=1e-5,
        seed=seed,
        **kw,
    )


# -- the non-finite policy -----------------------------------------------------------------------
def test_a_nan_value_never_moves_a_key_quantile():
    """D' = D plus one user with the row (a, NaN): that user holds no value, so every quantile
    draw is the same function of the same rows on both (before the policy, q0.5 of key a
    landed on the top of the grid in every run on D' and in none on D)."""
    d = _two_keys()
    d2 = _plus(d, ["a"], [np.nan])
    for seed in range(5):
        a = _run(d, "quantiles", seed).to_pandas()
        b = _run(d2, "quantiles", seed).to_pandas()
        pd.testing.assert_frame_equal(a, b)
        assert a["q0.5"].iloc[0] < 0.999


@pytest.mark.parametrize("metrics", ["sum", "mean", ALL])
def test_nan_or_inf_paths_never_fail_only_because_a_user_holds_one(metrics):
    """No error appears only because one user holds a NaN or an infinite value (a refusal that
    depends on one user's data is a release too); +-inf is clipped like any value."""
    d = _two_keys(400)
    _run(d, metrics, 0)
    _run(_plus(d, ["a", "b"], [np.nan, np.inf]), metrics, 0)
    inf = _run(_plus(d, ["a", "b"], [np.inf, -np.inf]), metrics, 1).to_pandas()
    ends = _run(_plus(d, ["a", "b"], [1.0, 0.0]), metrics, 1).to_pandas()
    pd.testing.assert_frame_equal(inf, ends)


def test_a_missing_value_counts_as_a_row_but_not_as_a_value():
    """users and count see the row; sum, mean and quantiles do not: the NaN row and a null
    give the same release, and the sum equals the release on the row's valued twin."""
    d = _two_keys(400)
    nan = _run(_plus(d, ["a", "a"], [np.nan, 0.5]), ALL, 2).to_pandas()
    null = _plus(d, ["a", "a"], [0.0, 0.5])
    null_v = pd.array(null["v"], dtype="Float64")
    null_v[-2] = pd.NA
    null = pd.DataFrame({"user": null["user"], "key": null["key"], "v": null_v})
    pd.testing.assert_frame_equal(nan, _run(null, ALL, 2).to_pandas())
    np.testing.assert_array_equal(
        clip_values(np.array([np.nan, 2.0, -np.inf]), (0.0, 1.0))[1:], [1.0, 0.0]
    )
    assert np.isnan(clip_values(np.array([np.nan]), (0.0, 1.0))[0])


def test_a_value_column_is_refused_by_its_type_never_by_its_rows():
    """Text is read as numbers (a cell that is not one is a missing value, as Spark's cast
    and the file readers read it); a column of another type is refused by that type."""
    d = _two_keys(50)
    as_text = dict(d, v=np.array([str(float(x)) for x in d["v"]], dtype=object))
    as_text["v"][0] = "not a number"
    twin = dict(d, v=d["v"].copy())
    twin["v"][0] = np.nan
    pd.testing.assert_frame_equal(
        _run(as_text, "sum", 0).to_pandas(), _run(twin, "sum", 0).to_pandas()
    )
    dates = dict(d, v=np.full(d["user"].size, np.datetime64("2026-01-01")))
    with pytest.raises(DataError, match="value column 'v' holds date"):
        _run(dates, "sum", 0)


# -- released parameters come from noisy statistics only -----------------------------------------
@pytest.mark.filterwarnings("ignore:epsilon=1000.0 gives a very weak guarantee")
def test_h_is_a_function_of_the_released_size_histogram_whether_or_not_users_exist():
    """Public keys nobody in D holds; D' adds a user with 40 rows on "a". Replaying D''s
    released histogram on D must give D''s h (h from the noisy histogram in every case:
    before, an exact-data branch set h = 1 on D whatever the histogram said)."""
    d = {"user": np.array([0]), "key": np.array(["zz"], dtype=object), "v": np.array([0.5])}
    d2 = _plus(d, ["a"] * 40, [0.5] * 40)
    # a budget large enough for the histogram to see the one user (a test, not a setting)
    kw = dict(value_column="v", bounds=(0.0, 1.0), metrics="quantiles", keys=["a", "b"])
    kw.update(epsilon=1000.0, delta=1e-5, seed=3, shares={"quantiles": 0.9})
    with recording() as base:
        r2 = aggregate(d2, **kw)
    assert r2.contribution_bounds["h(q0.5)"] > 1.0  # the histogram saw the user
    with recording(replay=base):
        r = aggregate(d, **kw)
    assert r.contribution_bounds == r2.contribution_bounds
    assert r.to_dict(rows=False) == r2.to_dict(rows=False)


# -- bug classes found in peer libraries ---------------------------------------------------------
def test_clipping_applies_per_user_before_a_key_sum_not_after():
    """One user with a huge total on a key moves the sum by at most its bound: values are
    clipped per row and each user's vector is scaled before the key's sum is taken."""
    d = _two_keys(400)
    heavy = _plus(d, ["a"] * 500, [1.0] * 500)
    given = dict(contribution_bounds={"sum": 2.0})
    with recording() as rel:
        _run(heavy, "sum", 0, **given)
    (s,) = [r for r in rel if r.statistic == "aggregate.sum"]
    with recording() as rel0:
        _run(d, "sum", 0, **given)
    (s0,) = [r for r in rel0 if r.statistic == "aggregate.sum"]
    assert s.l2 == 2.0 and np.linalg.norm(s.value - s0.value) <= 2.0 + 1e-9


def test_vector_sensitivity_is_bounded_across_coordinates():
    """A user on every key moves the whole vector by at most C in l2, not C per key."""
    keys = [f"k{j}" for j in range(50)]
    rng = np.random.default_rng(1)
    d = {
        "user": np.arange(300),
        "key": np.array(rng.choice(keys, 300), dtype=object),
        "v": rng.random(300),
    }
    d2 = _plus(d, keys, [1.0] * 50)
    kw = dict(value_column="v", bounds=(0.0, 1.0), keys=keys, epsilon=1.0, delta=1e-5)
    given = dict(contribution_bounds={"users": 1.5, "count": 1.5})
    with recording() as a:
        aggregate(d, metrics="users,count", seed=0, **kw, **given)
    with recording() as b:
        aggregate(d2, metrics="users,count", seed=0, **kw, **given)
    for x, y in zip(a, b, strict=True):
        if x.statistic in ("aggregate.users", "aggregate.count"):
            assert np.linalg.norm(x.value - y.value) <= 1.5 + 1e-9


def test_missing_bounds_fail_closed_never_no_noise():
    """A SUM or MEAN without public bounds is refused before any data is read."""
    d = _two_keys(50)
    for metrics in ("sum", "mean", "quantiles"):
        with pytest.raises(InvalidParameterError, match="need 'value_column' and 'bounds'"):
            aggregate(d, value_column="v", metrics=metrics, keys=["a"], epsilon=1.0, delta=1e-5)


def test_a_result_read_twice_does_not_release_again():
    """Reading a result (table, dict, summary, iteration) twice gives the same values and
    draws no noise: the release happened once, inside aggregate."""
    r = _run(_two_keys(200), ALL, 4)
    with recording() as rel:
        first = (r.to_pandas(), r.to_dict(), r.summary(), list(r))
        second = (r.to_pandas(), r.to_dict(), r.summary(), list(r))
    assert rel == []
    pd.testing.assert_frame_equal(first[0], second[0])
    assert first[1:] == second[1:]


def test_randomness_comes_from_the_cryptographic_generator_not_the_engine():
    """Unseeded releases draw from the CSPRNG: two unseeded runs differ, and the noise
    source's generator is the AES-CTR bit generator, not NumPy's default PCG64."""
    from userdp.privacy import NoiseSource

    d = _two_keys(200)
    a = aggregate(d, metrics="count", keys=["a", "b"], epsilon=1.0, delta=1e-5).to_pandas()
    b = aggregate(d, metrics="count", keys=["a", "b"], epsilon=1.0, delta=1e-5).to_pandas()
    assert not a.equals(b)
    source = NoiseSource(None)
    assert not source.seeded
    bitgen = type(source.stream(0).bit_generator).__name__
    assert "PCG" not in bitgen and "AES" in bitgen.upper(), bitgen


def test_an_empty_group_of_a_public_key_is_returned_with_noise():
    """A public key nobody holds is a row of the table (noise only), never NULL or absent."""
    keys = ["a", "b", "nobody"]
    r = aggregate(
        _two_keys(200),
        value_column="v",
        bounds=(0.0, 1.0),
        metrics=ALL,
        keys=keys,
        epsilon=1.0,
        delta=1e-5,
        seed=5,
    ).to_pandas()
    assert r["key"].tolist() == keys
    assert r.loc[2].notna().all() and r.loc[2, "count_high"] > 0  # noise, not a NULL


def test_a_truncation_is_not_undone_by_a_later_transform():
    """Hard limits keep at most L0 keys and Linf rows per user: the released count moves by
    at most the declared bound when a heavy user is added, after every later step."""
    d = _two_keys(300)
    heavy = _plus(d, ["a"] * 30 + ["b"] * 30, [1.0] * 60)
    kw = dict(bounding="limit", max_partitions_contributed=1, max_contributions_per_partition=2)
    with recording() as a:
        _run(d, "count", 0, **kw)
    with recording() as b:
        _run(heavy, "count", 0, **kw)
    (x,), (y,) = ([r for r in rel if r.statistic == "aggregate.count"] for rel in (a, b))
    assert x.l2 == 2.0 and np.linalg.norm(y.value - x.value) <= 2.0


def test_a_seed_is_refused_on_a_second_release_charged_to_one_accountant():
    """Two counts with seed=11 on one accountant carried the same noise (3 r1 - 2 r2 gave the
    exact counts back); the second is now refused before any data is read."""
    from userdp.privacy import PrivacyAccountant, PrivacyBudget

    acc = PrivacyAccountant(PrivacyBudget(10.0, 1e-4))
    kw = dict(metrics="count", keys=["a", "b"], epsilon=1.0, delta=1e-5, accountant=acc)
    aggregate(_two_keys(200), seed=11, **kw)
    with pytest.raises(InvalidParameterError, match="'seed' parameter of aggregate"):
        aggregate(_two_keys(200), seed=11, **kw)
    aggregate(_two_keys(200), seed=12, **kw)
    aggregate(_two_keys(200), seed=None, **kw)


def test_a_bound_lands_on_a_norm_users_can_have_not_a_bin_edge_above_it():
    """One key per user: every users/count norm is 1, so C is 1, not the bin edge above it."""
    n = 20_000
    d = {"user": np.arange(n), "key": np.arange(n) % 50, "v": np.zeros(n)}
    r = aggregate(d, metrics="users,count", keys=list(range(50)), epsilon=1.0, delta=1e-5, seed=0)
    assert r.contribution_bounds["users"] == 1.0 and r.contribution_bounds["count"] == 1.0
