"""userdp.aggregate on the local engine: the table, the budget, the options and the errors."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import userdp
from userdp import BudgetExceededError, DataError, InvalidParameterError
from userdp.aggregate import AggregateResult, aggregate
from userdp.aggregate.local import bin_of, choose_bound, limit_keep, user_weights
from userdp.privacy import PrivacyAccountant, PrivacyBudget, event_cost


def _rows(n_users=4000, n_keys=30, seed=0):
    rng = np.random.default_rng(seed)
    per_user = rng.integers(1, 6, n_users)
    user = np.repeat(np.arange(n_users), per_user)
    key = np.minimum(rng.zipf(1.6, user.size), n_keys) - 1
    value = rng.uniform(0.0, 10.0, user.size)
    return {"user": user, "key": key, "v": value}


ALL = "users,count,sum,mean,quantiles"


def test_the_table_has_key_then_one_column_per_metric():
    r = aggregate(
        _rows(), value_column="v", bounds=(0, 10), metrics=ALL, epsilon=1.0, delta=1e-5, seed=0
    )
    assert isinstance(r, AggregateResult)
    cells = [c for m in ("users", "count", "sum", "mean") for c in (m, f"{m}_low", f"{m}_high")]
    assert r.table.column_names == ["key", *cells, "q0.5"]
    assert len(r) == r.table.num_rows > 0
    rows = list(r)
    assert rows[0].keys() == {"key", *cells, "q0.5"}
    assert isinstance(r.to_pandas(), pd.DataFrame)
    assert r.to_arrow() is r.table
    assert set(r.noise_sd) == {"users", "count", "value_count", "sum"}
    assert {"users", "count", "sum"} <= set(r.contribution_bounds)
    means = r.to_arrow().column("mean").to_numpy()
    assert np.all((means >= 0) & (means <= 10))


def test_the_whole_run_fits_the_budget_and_the_accounting_matches_a_pld_computation():
    r = aggregate(
        _rows(), metrics="users,count", keys=list(range(30)), epsilon=1.0, delta=1e-5, seed=0
    )
    assert r.budget.epsilon <= 1.0 * (1 + 1e-9) and r.budget.delta <= 1e-5 * (1 + 1e-9)
    # public keys: the ledger is Gaussian only, so dp_accounting's PLD composes it directly
    pld = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    pld.compose(r.dp_event)
    assert pld.get_epsilon(1e-5) == pytest.approx(1.0, rel=2e-3)


def test_selection_and_metrics_compose_as_one_gaussian_plus_the_threshold_deltas():
    r = aggregate(_rows(), metrics="users,count", epsilon=1.0, delta=1e-5, seed=0)
    cost = event_cost(r.dp_event)
    assert cost.epsilon == 0 and 0 < cost.delta < 1e-5
    # independent check: the Gaussian parts in a PLD accountant at the delta left
    gaussians = []
    for e in r.dp_event.events:
        inner = e.events if isinstance(e, dp_accounting.ComposedDpEvent) else [e]
        for g in inner:
            gaussians.append(dp_accounting.GaussianDpEvent(g.noise_multiplier))
    pld = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    pld.compose(dp_accounting.ComposedDpEvent(gaussians))
    assert pld.get_epsilon(1e-5 - cost.delta) == pytest.approx(1.0, rel=2e-3)
    assert math.isclose(r.budget.epsilon, 1.0, rel_tol=1e-6)


def test_public_keys_cost_no_selection_and_include_absent_keys():
    r = aggregate(_rows(), metrics=("count",), keys=[0, 1, 999], epsilon=1.0, delta=1e-5, seed=0)
    assert r.to_arrow().column("key").to_pylist() == [0, 1, 999]
    assert "selection_epsilon" not in r.parameters
    count = r.to_arrow().column("count").to_numpy()
    assert abs(count[2]) < 6 * r.noise_sd["count"]  # noise only


def test_counts_are_close_to_the_truth_when_bounds_are_not_binding():
    data = _rows()
    r = aggregate(
        data,
        metrics="users,count",
        keys=[0, 1, 2],
        epsilon=4.0,
        delta=1e-5,
        seed=1,
        contribution_bounds={"users": 10.0, "count": 50.0},
    )
    df = pd.DataFrame(data)
    true_users = df.groupby("key").user.nunique().loc[[0, 1, 2]].to_numpy()
    true_count = df.groupby("key").size().loc[[0, 1, 2]].to_numpy()
    t = r.to_arrow()
    assert np.all(np.abs(t.column("users").to_numpy() - true_users) < 6 * r.noise_sd["users"])
    assert np.all(np.abs(t.column("count").to_numpy() - true_count) < 6 * r.noise_sd["count"])


def test_one_key_is_the_whole_table_mean():
    data = _rows()
    r = aggregate(
        {"user": data["user"], "v": data["v"]},
        key_column=None,
        value_column="v",
        bounds=(0, 10),
        metrics="mean,quantiles",
        epsilon=1.0,
        delta=1e-5,
        seed=0,
    )
    (row,) = list(r)
    assert row["key"] is None
    assert row["mean"] == pytest.approx(np.mean(data["v"]), abs=0.2)
    assert row["q0.5"] == pytest.approx(np.median(data["v"]), abs=0.5)


def test_per_key_quantiles_are_points_of_the_public_grid():
    # An exponential-mechanism draw must name a grid point fixed by the bounds alone: a float
    # drawn inside an interval cut at the data's values would leak them through its low bits.
    from userdp.estimate.quantile import default_resolution

    data = _rows(600)
    r = aggregate(
        data,
        value_column="v",
        bounds=(0, 10),
        metrics="quantiles",
        keys=[0, 1, 2],
        epsilon=1.0,
        delta=1e-5,
        seed=4,
    )
    step = default_resolution((0.0, 10.0))
    q = r.to_arrow().column("q0.5").to_numpy()
    assert np.all(np.isfinite(q)) and np.all((q >= 0) & (q <= 10))
    assert np.array_equal(q / step, np.round(q / step))


def test_inputs_pyarrow_pandas_and_dict_give_the_same_release():
    data = _rows(500)
    kw = dict(metrics="users,count", keys=[0, 1], epsilon=1.0, delta=1e-5, seed=3)
    a = aggregate(data, **kw).table
    b = aggregate(pd.DataFrame(data), **kw).table
    c = aggregate(pa.table(data), **kw).table
    assert a.equals(b) and a.equals(c)


def test_a_shared_accountant_refuses_before_any_data_is_read():
    acc = PrivacyAccountant(PrivacyBudget(0.5, 1e-5))
    with pytest.raises(BudgetExceededError):
        aggregate({"no such column": [1]}, epsilon=1.0, delta=1e-5, accountant=acc)
    assert acc.ledger == ()
    acc = PrivacyAccountant(PrivacyBudget(2.0, 2e-5))
    aggregate(_rows(300), keys=[0], epsilon=1.0, delta=1e-5, accountant=acc, seed=0)
    assert acc.spent().epsilon > 0


def test_hard_limits_report_their_bounds():
    r = aggregate(
        _rows(),
        value_column="v",
        bounds=(0, 10),
        metrics="users,count,sum",
        keys=[0, 1],
        epsilon=1.0,
        delta=1e-5,
        seed=0,
        bounding="limit",
        max_partitions_contributed=4,
        max_contributions_per_partition=2,
    )
    # at most |K| = 2 keys are kept whatever max_partitions_contributed says: sqrt(2), not 2
    root = np.sqrt(2.0)
    assert r.contribution_bounds == pytest.approx(
        {"users": root, "count": 2 * root, "sum": 20 * root}
    )


def test_limit_keep_keeps_at_most_l0_keys_and_linf_rows():
    rng = np.random.default_rng(0)
    user = rng.integers(0, 20, 2000)
    key = rng.integers(0, 15, 2000)
    keep = limit_keep(user, key, rng.integers(0, 2**62, 2000), 3, 2)
    df = pd.DataFrame({"u": user[keep], "k": key[keep]})
    assert df.groupby("u").k.nunique().max() <= 3
    assert df.groupby(["u", "k"]).size().max() <= 2
    assert df.groupby("u").k.nunique().min() == 3  # every user had more than 3 keys


def test_user_weights_bound_the_norm_by_c():
    norms = np.array([0.0, 0.5, 1.0, 3.0, 100.0])
    w = user_weights(norms, 2.0)
    assert np.all(w * norms <= 2.0 + 1e-12)
    assert w.tolist()[:3] == [1.0, 1.0, 1.0]


def test_bound_choice_ignores_empty_bins_and_follows_the_mass():
    z = 5.0
    empty = np.zeros(194)
    assert choose_bound(empty, z, 1.0, 8.0, 100) == 1.0
    hist = np.zeros(194)
    hist[bin_of(np.array([4.0]), 1.0)] = 10_000  # every user at norm 4
    c = choose_bound(hist, z, 1.0, 8.0, 10)
    assert 2.0 <= c <= 6.0


def test_bound_choice_never_exceeds_the_public_cap_and_falls_back_on_noise():
    z = 5.0
    hist = np.zeros(194)
    hist[bin_of(np.array([50.0]), 1.0)] = 10_000  # every user far above the cap
    assert choose_bound(hist, z, 1.0, 0.01, 10, cap=3.0) == 3.0
    # mostly noise: one bin barely over the threshold (4.5 sd) decides nothing
    weak = np.zeros(194)
    weak[bin_of(np.array([1.0]), 1.0)] = 5.0 * z
    assert choose_bound(weak, z, 1.0, 8.0, 10, cap=3.0) == 3.0
    assert choose_bound(weak, z, 1.0, 8.0, 10, cap=3.0, fallback=2.0) == 2.0
    assert choose_bound(weak, z, 1.0, 8.0, 10) == 1.0  # no cap: the unit


def test_users_bound_is_capped_by_the_released_key_count():
    rng = np.random.default_rng(3)
    n = 400  # few users: the norm histogram is mostly noise at this budget
    user = np.repeat(np.arange(n), 3)
    key = np.tile(np.array(["a", "b", "c"]), n)
    rows = {"user": user, "key": key, "value": rng.uniform(0, 1, user.size)}
    for seed in range(4):
        r = aggregate(
            rows,
            metrics="users,mean",
            value_column="value",
            bounds=(0, 1),
            keys=["a", "b"],
            epsilon=0.5,
            delta=1e-5,
            seed=seed,
        )
        # two public keys: every users vector has norm <= sqrt(2), and no noise decides less
        assert r.contribution_bounds["users"] == pytest.approx(np.sqrt(2))
    given = aggregate(
        rows, keys=["a"], contribution_bounds={"users": 5.0}, epsilon=1.0, delta=1e-5, seed=0
    )
    assert given.contribution_bounds["users"] == 1.0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"metrics": "users,median"},
        {"metrics": "sum"},  # no value column, no bounds
        {"keys": "all"},
        {"bounding": "sample"},
        {"nonsense": 1},
        {"metrics": "mean", "value_column": "v", "bounds": (3, 1)},
    ],
)
def test_bad_parameters_fail_with_one_line(kwargs):
    with pytest.raises(InvalidParameterError) as err:
        aggregate(_rows(50), epsilon=1.0, delta=1e-5, **kwargs)
    assert "\n" not in str(err.value)


def test_a_missing_column_is_a_data_error():
    with pytest.raises(DataError, match="key column"):
        aggregate({"user": [1, 2]}, keys=["a"], epsilon=1.0, delta=1e-5)


def test_userdp_aggregate_is_callable_from_the_top_level():
    r = userdp.aggregate(_rows(200), keys=[0], epsilon=1.0, delta=1e-5, seed=0)
    assert r.table.num_rows == 1 and "NOT PRIVATE" in r.diagnostics.describe()
    assert "NOT PRIVATE" not in r.summary() and "rows" not in r.summary()


def test_a_seed_makes_the_release_reproducible():
    a = aggregate(_rows(), metrics="users,count", epsilon=1.0, delta=1e-5, seed=5).table
    b = aggregate(_rows(), metrics="users,count", epsilon=1.0, delta=1e-5, seed=5).table
    assert a.equals(b)


def test_size_counts_from_distinct_sizes_equal_those_from_every_user():
    from userdp.estimate.weighting import _size_counts

    sizes = np.random.default_rng(0).zipf(1.5, 5000) % 10**6 + 1
    values, counts = np.unique(sizes, return_counts=True)
    np.testing.assert_array_equal(_size_counts(values, counts), _size_counts(sizes))


def test_an_empty_or_differently_typed_key_list():
    d = {"user": [1, 2, 3], "key": [1, 2, 3]}
    assert aggregate(d, keys=[], epsilon=1.0, delta=1e-5, seed=0).table.num_rows == 0
    r = aggregate(d, keys=[1.0, 2.0], epsilon=1.0, delta=1e-5, seed=0)
    assert r.to_arrow().column("key").to_pylist() == [1, 2]
    with pytest.raises(DataError, match="public keys"):
        aggregate(d, keys=["x"], epsilon=1.0, delta=1e-5)


@pytest.mark.parametrize("bounding", ["smooth", "limit"])
def test_every_metric_together_spends_exactly_the_budget(bounding):
    r = aggregate(
        _rows(),
        value_column="v",
        bounds=(0, 10),
        metrics=ALL,
        epsilon=1.0,
        delta=1e-5,
        seed=0,
        bounding=bounding,
    )
    acc = PrivacyAccountant(PrivacyBudget(1.0, 1e-5))
    acc.compose(r.dp_event)  # would raise if the run went over
    assert r.budget.epsilon == pytest.approx(1.0, rel=1e-6)
    assert r.budget.delta == pytest.approx(1e-5, rel=1e-6)
    assert event_cost(r.dp_event).epsilon == pytest.approx(0.25)  # the quantiles' share


@pytest.mark.parametrize("role", ["user", "key"])
@pytest.mark.parametrize("keys", ["select", ["a"]])
def test_a_column_of_lists_is_refused_by_the_user_s_column_name(role, keys):
    """The selection renamed the key column to 'item' and the message named that, a column
    the user never had; the refusal comes before any budget is spent."""
    rows = {"visitor": ["u1", "u2"], "page": ["a", "b"]}
    rows["visitor" if role == "user" else "page"] = [["a"], ["b"]]
    acc = PrivacyAccountant(PrivacyBudget(1.0, 1e-5))
    name = "visitor" if role == "user" else "page"
    with pytest.raises(DataError, match=f"the {role} column '{name}' holds list"):
        aggregate(
            pa.table(rows),
            user_column="visitor",
            key_column="page",
            keys=keys,
            epsilon=1.0,
            delta=1e-5,
            accountant=acc,
        )
    assert acc.spent() == PrivacyAccountant(PrivacyBudget(1.0, 1e-5)).spent()  # nothing charged


@pytest.mark.parametrize("others", [(), ("users",), ("users", "mean"), ("sum", "quantiles")])
def test_a_metric_s_histogram_noise_does_not_depend_on_the_others_asked(others):
    """COUNT beside MEAN estimates what COUNT alone does: each family's norm histogram gets
    its own share of the precision, so the histogram count's bound is read from is as noisy
    whatever else is asked (both plans here spend the same quantiles, if any, off the top)."""
    from userdp.aggregate.plan import DEFAULT_SHARES, make_plan

    def plan(families):
        return make_plan(
            1.0,
            1e-5,
            select=False,
            vectors=families,
            families=families,
            quantile_levels=(0.5,) if "quantiles" in others else (),
            smooth=True,
            size_histogram=True,
            shares=DEFAULT_SHARES,
            selection_options={},
        )

    fams = {"users": ["users"], "mean": ["value_count", "sum"], "sum": ["sum"], "quantiles": []}
    alone, beside = plan(["count"]), plan(["count", *[f for o in others for f in fams[o]]])
    assert beside.histogram_z["count"] == alone.histogram_z["count"]
    assert beside.metric_z["count"] >= alone.metric_z["count"]


def test_count_s_bound_is_the_same_beside_a_sum_for_a_seed():
    """The same seed draws the count histogram's noise first either way, at the same scale:
    the chosen count bound is equal, run by run, here (it moved down by up to 5x beside a sum
    when the histograms split one share)."""
    rows = _rows()
    for seed in range(4):
        kw = dict(value_column="v", bounds=(0, 10), keys=list(range(30)), epsilon=1.0)
        alone = aggregate(rows, metrics="count", delta=1e-5, seed=seed, **kw)
        beside = aggregate(rows, metrics="count,sum", delta=1e-5, seed=seed, **kw)
        assert beside.contribution_bounds["count"] == alone.contribution_bounds["count"]
