"""``aggregate_plan`` and ``userdp aggregate --explain``: the plan before any data is read."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from userdp import aggregate, aggregate_plan
from userdp.cli import main
from userdp.exceptions import InvalidParameterError


def _rows(n_users: int = 3000):
    rng = np.random.default_rng(0)
    user = rng.integers(0, n_users, 4 * n_users)
    return {"user": user, "key": rng.integers(0, 30, user.size), "v": rng.random(user.size)}


@pytest.mark.parametrize("keys", ["select", list(range(30))])
def test_the_plan_is_what_the_run_follows(keys):
    kw = dict(metrics="users,count,mean", bounds=(0.0, 1.0), keys=keys, epsilon=1.0, delta=1e-5)
    plan = aggregate_plan(**kw)
    r = aggregate(_rows(), value_column="v", seed=0, **kw)
    assert plan.noise_multipliers == r.parameters["noise_multipliers"]
    assert plan.histogram_noise_multipliers == r.parameters["histogram_noise_multipliers"]
    for v, sd in r.noise_sd.items():
        assert sd == pytest.approx(plan.noise_sd(v, r.contribution_bounds[v]), rel=1e-12)
    assert (plan.selection is None) == (keys != "select")
    if plan.selection:
        assert plan.selection["epsilon"] == r.parameters["selection_epsilon"]


def test_the_plan_refuses_what_aggregate_refuses():
    with pytest.raises(InvalidParameterError, match="need 'value_column' and 'bounds'"):
        aggregate_plan(metrics="mean", epsilon=1.0, delta=1e-5)
    with pytest.raises(InvalidParameterError, match="'epsilon'"):
        aggregate_plan(metrics="users", epsilon=-1.0, delta=1e-5)


def test_a_given_bound_shows_its_noise_and_the_expected_error_is_z_c_sqrt_2_over_pi():
    plan = aggregate_plan(
        metrics="count", keys=["a"], epsilon=1.0, delta=1e-5, contribution_bounds={"count": 3.0}
    )
    z = plan.noise_multipliers["count"]
    assert plan.expected_error("count", 3.0) == pytest.approx(3.0 * z * np.sqrt(2 / np.pi))
    assert "C=3 (given)" in plan.table()
    assert plan.histogram_noise_multipliers == {}  # nothing to choose


def test_explain_prints_the_plan_without_reading_the_input(tmp_path, capsys):
    missing = tmp_path / "not_there.csv"
    argv = ["aggregate", str(missing), "--epsilon", "1", "--delta", "1e-5", "--explain"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "users" in out and "count" in out and "selected privately" in out
    assert main([*argv, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert set(plan["noise_multipliers"]) == {"users", "count"}
    assert not missing.exists() and list(tmp_path.iterdir()) == []


def test_every_local_input_select_partitions_takes_gives_the_same_release(tmp_path):
    """Polars frames, Arrow tables and record-batch readers, CSV, Parquet and JSON Lines files:
    the same rows give the same release for a seed."""
    import pandas as pd
    import polars as pl
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = _rows(300)
    frame = pd.DataFrame({"user": rows["user"], "key": rows["key"], "v": rows["v"]})
    table = pa.Table.from_pandas(frame, preserve_index=False)
    frame.to_csv(tmp_path / "r.csv", index=False)
    pq.write_table(table, tmp_path / "r.parquet")
    frame.to_json(tmp_path / "r.jsonl", orient="records", lines=True)
    kw = dict(value_column="v", bounds=(0.0, 1.0), metrics="users,count,sum", epsilon=1.0)
    kw.update(delta=1e-5, keys=list(range(30)), seed=4)
    want = aggregate(table, **kw).to_pandas()
    inputs = [
        pl.from_pandas(frame),
        pl.from_pandas(frame).lazy(),
        pa.RecordBatchReader.from_batches(table.schema, table.to_batches()),
        str(tmp_path / "r.parquet"),
        tmp_path / "r.jsonl",
    ]
    for data in inputs:
        pd.testing.assert_frame_equal(aggregate(data, **kw).to_pandas(), want)
    # a CSV's columns are text: its keys are the text of the numbers
    got = aggregate(tmp_path / "r.csv", **{**kw, "keys": [str(k) for k in range(30)]})
    np.testing.assert_array_equal(got.to_pandas()["count"], want["count"])


def test_hard_limits_whose_noise_swamps_every_key_are_warned_about_before_any_read():
    """Limits of 1e9 give noise of ~1e10 rows per key: a warning from the plan (public inputs
    only), none at the usual limits."""
    kw = dict(metrics="users,count", keys=list(range(30)), epsilon=1.0, delta=1e-5)
    with pytest.warns(UserWarning, match="noise of standard deviation up to .* rows per key"):
        aggregate_plan(
            bounding="limit",
            max_partitions_contributed=10**9,
            max_contributions_per_partition=10**9,
            **kw,
        )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        aggregate_plan(
            bounding="limit",
            max_partitions_contributed=10,
            max_contributions_per_partition=10,
            **kw,
        )
