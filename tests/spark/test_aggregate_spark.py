"""aggregate on Spark: the same pre-noise statistics as the local engine (to 1e-9) and the same
release for the same seed, with public keys, one key, and selected keys."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from userdp import DataError
from userdp.aggregate import aggregate
from userdp.privacy import recording

pytestmark = pytest.mark.spark


def _rows(seed: int, n_users: int = 300):
    rng = np.random.default_rng(seed)
    per_user = rng.integers(1, 12, n_users)
    user = np.repeat(np.arange(n_users), per_user)
    key = (np.minimum(rng.zipf(1.4, user.size), 12) - 1).astype(np.int64)
    return pd.DataFrame({"user": user, "key": key, "v": rng.uniform(-1.0, 11.0, user.size)})


def _released(kw, data):
    with recording() as rel:
        r = aggregate(data, **kw)
    return r, {(x.statistic, i): x for i, x in enumerate(rel) if x.statistic.startswith("aggr")}


@pytest.mark.parametrize("seed", range(2))
def test_pre_noise_statistics_and_releases_equal_the_local_engine(spark, seed):
    pdf = _rows(seed)
    kw = dict(
        value_column="v",
        bounds=(0.0, 10.0),
        metrics="users,count,sum,mean,quantiles",
        keys=[*range(12), 99],
        epsilon=1.0,
        delta=1e-5,
        seed=seed,
    )
    local, rel_local = _released(kw, pdf)
    remote, rel_spark = _released(kw, spark.createDataFrame(pdf))
    assert rel_local.keys() == rel_spark.keys()
    for k, a in rel_local.items():
        np.testing.assert_allclose(rel_spark[k].value, a.value, rtol=1e-9, atol=1e-9)
    assert remote.engine == "spark" and remote.to_spark() is remote.table
    a, b = local.to_pandas(), remote.to_pandas()
    pd.testing.assert_frame_equal(a, b, rtol=1e-9)
    assert local.contribution_bounds == remote.contribution_bounds
    for r in (local, remote):
        assert r.diagnostics.n_users == pdf["user"].nunique()
        assert r.diagnostics.n_rows == len(pdf)


def test_one_key_runs_on_spark_like_the_estimate_layer(spark):
    pdf = _rows(3).drop(columns="key")
    kw = dict(
        key_column=None,
        value_column="v",
        bounds=(0.0, 10.0),
        metrics="mean,quantiles",
        epsilon=1.0,
        delta=1e-5,
        seed=1,
    )
    a = aggregate(pdf, **kw).to_pandas()
    b = aggregate(spark.createDataFrame(pdf), **kw).to_pandas()
    pd.testing.assert_frame_equal(a, b, rtol=1e-9)


def test_selected_keys_on_spark_never_include_a_users_novel_keys(spark):
    user = np.concatenate([np.repeat(np.arange(1500), 2), np.full(200, 10**6)])
    key = np.concatenate([np.tile(["common", "other"], 1500), [f"novel{k}" for k in range(200)]])
    df = spark.createDataFrame(pd.DataFrame({"user": user, "key": key}))
    r = aggregate(df, metrics="users,count", epsilon=1.0, delta=1e-5, seed=0)
    released = set(r.to_arrow().column("key").to_pylist())
    assert "common" in released and not any(k.startswith("novel") for k in released)


def test_a_release_of_no_keys_is_an_empty_spark_frame_with_the_local_columns(spark):
    """Three users per key: no key passes the selection, and the Spark result is an empty
    frame with the local engine's columns (Spark cannot infer a schema from no rows)."""
    pdf = pd.DataFrame({"user": np.arange(183), "key": np.arange(183) % 61})
    kw = dict(metrics="users,count", epsilon=1.0, delta=1e-5, seed=0)
    remote = aggregate(spark.createDataFrame(pdf), **kw)
    local = aggregate(pdf, **kw)
    assert local.to_arrow().num_rows == 0
    assert remote.to_spark().count() == 0
    assert remote.to_spark().columns == local.to_arrow().column_names


def test_hard_limits_on_spark_keep_their_bounds(spark):
    df = spark.createDataFrame(_rows(4))
    r = aggregate(
        df,
        metrics="users,count",
        keys=list(range(12)),
        epsilon=1.0,
        delta=1e-5,
        seed=0,
        bounding="limit",
        max_partitions_contributed=2,
        max_contributions_per_partition=3,
    )
    assert r.contribution_bounds == {"users": 2**0.5, "count": 3 * 2**0.5}
    assert r.to_arrow().num_rows == 12


def test_selected_keys_differ_between_engines_only_by_the_selections_draws(spark, monkeypatch):
    """The Spark selection draws its noise on the executors (one stream per bucket of keys), the
    local one from one stream: the released key sets differ for the same seed, identically
    distributed. Given the same selection draws (here the local selection on both engines), the
    whole release is equal."""
    import pyarrow as pa

    import userdp.aggregate.api as api
    from userdp.aggregate.local import Columns, LocalEngine

    pdf = _rows(5, n_users=3000)
    real = api._select

    def local_selection(eng, plan, options, seed):
        local = LocalEngine(pa.Table.from_pandas(pdf), Columns("user", "key", None, None))
        return real(local, plan, options, seed)

    monkeypatch.setattr(api, "_select", local_selection)
    kw = dict(
        value_column="v",
        bounds=(0.0, 10.0),
        metrics="users,count,mean",
        epsilon=1.0,
        delta=1e-5,
        seed=7,
        selection={"max_items_per_user": 4},
    )
    a = aggregate(pdf, **kw)
    b = aggregate(spark.createDataFrame(pdf), **kw)
    assert a.to_arrow().num_rows > 0
    pd.testing.assert_frame_equal(a.to_pandas(), b.to_pandas(), rtol=1e-9)
    assert a.contribution_bounds == b.contribution_bounds
    # the selection's count of users stands in for the engine's own
    assert a.diagnostics.n_users == b.diagnostics.n_users == pdf["user"].nunique()


def test_engine_statistics_added_over_many_partitions_equal_the_local_engine(spark, monkeypatch):
    """The Spark engine runs the local engine's functions on each partition of whole users and
    adds the partitions' histograms and per-key sums: with the rows spread over many
    partitions (a few hundred rows per pandas call), the norm histograms are the local ones
    exactly and the per-key sums equal them up to the order of the additions, for smooth
    bounds (C at a user's norm exactly included) and the hard-limit form (weight 1)."""
    import pyarrow as pa

    import userdp.aggregate.spark as spark_engine
    from userdp.aggregate.local import Columns, LocalEngine

    monkeypatch.setattr(spark_engine, "_TASK_ROWS", 300)
    pdf = _rows(6, n_users=800)
    cols = Columns("user", "key", "v", (0.0, 10.0))
    local = LocalEngine(pa.Table.from_pandas(pdf), cols)
    remote = spark_engine.SparkEngine(spark.createDataFrame(pdf), cols)
    assert remote._partitions() >= 8
    keys = pa.array([*range(0, 12, 2), 99])
    units = {"users": 1.0, "count": 1.0, "sum": 5.0}
    for eng in (local, remote):
        eng.set_keys(keys)
        eng.restrict()
    h_local, h_spark = local.norm_histograms(units, 5.0), remote.norm_histograms(units, 5.0)
    for f in units:
        np.testing.assert_array_equal(h_spark[f], h_local[f])
        assert h_local[f].sum() == local.present_users().sum()
    tie = float(local.norms(5.0)["count"][0])  # C equal to a user's norm
    smooth = {"users": ("users",), "count": ("count", "sum"), "sum": ("count", "sum")}
    for bounds_c, vectors in (
        ({"users": 1.5, "count": tie, "sum": 7.0}, smooth),
        ({"users": 1.0, "count": 1.0, "sum": 1.0}, {"users": (), "count": (), "sum": ()}),
    ):
        a = local.weighted_sums(bounds_c, vectors, 5.0)
        b = remote.weighted_sums(bounds_c, vectors, 5.0)
        for v in vectors:
            np.testing.assert_allclose(b[v], a[v], rtol=1e-12, atol=1e-12)
    assert remote.n_rows == local.n_rows == int(pdf["key"].isin(keys.to_pylist()).sum())
    remote.finish(pa.table({"key": keys}))


def test_missing_and_infinite_values_follow_the_local_engine_s_policy(spark):
    """NaN, null and +-inf: the Spark release equals the local one for the same seed (Spark
    once clipped NaN to the upper bound and null to the lower), and a user whose only row has
    no value leaves every quantile unchanged."""
    pdf = _rows(4, 120)
    v = pdf["v"].to_numpy().copy()
    v[:6] = [np.nan, np.inf, -np.inf, np.nan, 5.0, np.inf]
    pdf = pdf.assign(v=pd.array(v, dtype="Float64"))
    pdf.loc[6, "v"] = pd.NA
    kw = dict(
        value_column="v",
        bounds=(0.0, 10.0),
        metrics="users,count,sum,mean,quantiles",
        keys=[*range(12)],
        epsilon=1.0,
        delta=1e-5,
        seed=2,
    )
    local = aggregate(pdf.assign(v=pdf["v"].astype("float64")), **kw).to_pandas()
    remote = aggregate(spark.createDataFrame(pdf.assign(v=pdf["v"].astype(object))), **kw)
    pd.testing.assert_frame_equal(local, remote.to_pandas(), rtol=1e-9)
    extra = pd.DataFrame({"user": [10_000], "key": [0], "v": [np.nan]})
    more = pd.concat([pdf.assign(v=pdf["v"].astype("float64")), extra], ignore_index=True)
    q = dict(kw, metrics="quantiles")
    a = aggregate(spark.createDataFrame(pdf.assign(v=pdf["v"].astype("float64"))), **q)
    b = aggregate(spark.createDataFrame(more), **q)
    pd.testing.assert_frame_equal(a.to_pandas(), b.to_pandas())


def test_a_key_column_of_lists_on_spark_is_refused_like_the_local_engine(spark):
    pdf = pd.DataFrame({"user": ["u1", "u2"], "page": [["a"], ["b"]]})
    with pytest.raises(DataError, match="the key column 'page' holds array"):
        aggregate(spark.createDataFrame(pdf), key_column="page", epsilon=1.0, delta=1e-5)
