"""The Spark runner of MatrixFactorization computes what the local runner computes.

Pre-noise statistics (exact counts, item Grams and moments, the implicit term's Gram) agree to
1e-9 on random small data for every method the Spark engine runs; the seeded end-to-end model
agrees to 1e-9 (the noise is drawn on the driver from the same stream, in the same order); and a
user whose items are all outside the fixed item set changes no released shape or label.
"""

from __future__ import annotations

import warnings

import numpy as np
import pyarrow as pa
import pytest

from userdp.data import Ratings
from userdp.exceptions import DataError, InvalidParameterError
from userdp.privacy.noise import NoiseSource
from userdp.recommend import MatrixFactorization
from userdp.recommend.core.plans import plan_noise
from userdp.recommend.core.spec import Allocation
from userdp.recommend.engines.local import LocalRunner, UserSolve

pytestmark = [pytest.mark.spark, pytest.mark.filterwarnings("ignore::UserWarning")]

SSP_METHODS = ("dpals-uniform", "dpals-tail", "adadpals")


def _random_ratings(seed: int, kind: str = "str") -> tuple[pa.Table, list]:
    """Skewed degrees, ratings in [0, 6] (outside the declared [1, 5] too), and items outside
    the item set; returns the table and the item set (a public catalogue with unrated items)."""
    rng = np.random.default_rng(seed)
    n_users, n_items = int(rng.integers(15, 40)), int(rng.integers(5, 14))
    rows = set()
    for u in range(n_users):
        degree = int(rng.integers(1, 12))
        for i in rng.choice(n_items + 3, size=min(degree, n_items + 3), replace=False):
            rows.add((u, int(i)))
    users, items = zip(*sorted(rows), strict=True)
    name = (lambda i: f"i{i}") if kind == "str" else (lambda i: 100 + i)
    table = pa.table(
        {
            "user": [f"u{u}" for u in users] if kind == "str" else list(users),
            "item": [name(i) for i in items],
            "rating": rng.uniform(0.0, 6.0, len(users)).round(1),
        }
    )
    catalogue = [name(i) for i in range(n_items + 2)]  # item n_items + 2 is outside it
    return table, catalogue


def _frame(spark, table: pa.Table):
    return spark.createDataFrame(table.to_pandas())


def _options(method: str, items: list, biases: bool, **extra) -> dict:
    budget = {} if method == "als" else {"epsilon": 4.0, "delta": 1e-5}
    return dict(
        method=method,
        items=items,
        dim=3,
        steps=2,
        rating_range=(1.0, 5.0),
        biases=biases,
        seed=7,
        **budget,
        **extra,
    )


def _statistics(runner, model: MatrixFactorization, U: np.ndarray):
    """The exact statistics a runner hands to fit, for one step at item factors ``U``."""
    private = model.method != "als"
    plan = None
    if private:
        plan = plan_noise(
            model._validate(),
            solver="ssp",
            steps=model.steps,
            center_fraction=model._center_fraction(),
            grouped=True,
        )
    noise = NoiseSource(model.seed)
    item_set = model._item_set(private)
    spec = model._run_spec(model.dim, model._biased)
    prep = runner.prepare(
        spec,
        item_set,
        noise,
        count_noise=None if plan is None else plan.counts,
        center_noise=None if plan is None else plan.center,
    )
    trained = np.ones(prep.n_items, dtype=bool)
    trained[-1] = False  # one item not trained: its rows must drop out on both engines
    runner.restrict(trained)
    runner.allocate(model._spec().allocation, prep.counts if private else None, noise)
    half = max(prep.hi - prep.center, prep.center - prep.lo)
    d = int(model.dim)
    how = UserSolve(
        d, model._biased, 1.0, float(model.unobserved_weight), 1.0 if private else None, half
    )
    runner.solve_users(U, how, model.reg)
    gravity = runner.gravity()
    gram, moment = runner.item_statistics(weighted=private)
    exact = prep.exact_counts if not private else prep.counts
    return prep, exact, gravity, gram, moment


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("biases", [True, False])
@pytest.mark.parametrize("method", ["als", *SSP_METHODS])
def test_pre_noise_statistics_match_local(spark, method, biases, seed):
    table, items = _random_ratings(seed, kind="str" if seed % 2 == 0 else "int")
    model = MatrixFactorization(**_options(method, items, biases, unobserved_weight=0.3))
    rng = np.random.default_rng(seed)
    U = rng.normal(size=(len(items), 3 + biases))
    local = _statistics(LocalRunner(Ratings.from_table(table)), model, U)
    from userdp.recommend.engines.spark import SparkRunner

    remote = _statistics(SparkRunner(_frame(spark, table)), model, U)
    lp, rp = local[0], remote[0]
    assert (lp.dropped, lp.lo, lp.hi) == (rp.dropped, rp.lo, rp.hi)
    assert rp.center == pytest.approx(lp.center, abs=1e-9)
    assert lp.labels.equals(rp.labels)
    for a, b in zip(local[1:], remote[1:], strict=True):
        assert a.shape == b.shape
        np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-9)
    assert np.abs(local[3]).sum() > 0  # the statistics are not trivially 0


@pytest.mark.parametrize(
    ("method", "biases", "extra"),
    [
        *[(m, b, {}) for m in SSP_METHODS for b in (True, False)],
        ("als", True, {}),
        ("adadpals", False, {"unobserved_weight": 0.5, "top_items": 0.6}),
        ("dpals-tail", True, {"center": "sampled-mean", "unobserved_weight": 0.2}),
        ("adadpals", True, {"min_item_count": "auto", "center": "midpoint"}),
    ],
)
def test_seeded_model_equals_the_local_model(spark, method, biases, extra):
    table, items = _random_ratings(3)
    options = _options(method, items, biases, **extra)
    local = MatrixFactorization(**options).fit(table)
    remote = MatrixFactorization(**options).fit(_frame(spark, table), engine="spark")
    np.testing.assert_allclose(remote.item_factors_, local.item_factors_, rtol=1e-9, atol=1e-9)
    if biases:
        np.testing.assert_allclose(remote.item_biases_, local.item_biases_, atol=1e-9)
    else:
        assert remote.item_biases_ is None and local.item_biases_ is None
    assert remote.center_ == pytest.approx(local.center_, abs=1e-9)
    assert remote.item_labels_.equals(local.item_labels_)
    np.testing.assert_array_equal(remote.trained_items_, local.trained_items_)
    if method != "als":
        np.testing.assert_array_equal(remote.item_counts_, local.item_counts_)
        assert remote.budget_ == local.budget_
    assert (
        remote.diagnostics_["ratings_outside_item_set"]
        == (local.diagnostics_["ratings_outside_item_set"])
    )


@pytest.mark.parametrize("kind", ["str", "int"])
def test_keyed_samples_are_the_local_ones(spark, kind):
    # Samples smaller than most users' degrees: the count, allocation and centre samples are
    # chosen by row keys (keyed hashes of the user's and the item's labels), so both engines
    # keep the same rows whether the labels are strings or integers.
    table, items = _random_ratings(4, kind=kind)
    options = _options(
        "dpals-uniform", items, True, sample_size=2, count_sample=3, center="sampled-mean"
    )
    local = MatrixFactorization(**options).fit(table)
    remote = MatrixFactorization(**options).fit(_frame(spark, table), engine="spark")
    np.testing.assert_array_equal(remote.item_counts_, local.item_counts_)
    assert remote.center_ == pytest.approx(local.center_, abs=1e-9)
    np.testing.assert_allclose(remote.item_factors_, local.item_factors_, rtol=1e-9, atol=1e-9)


def test_a_user_with_only_new_items_changes_no_released_shape(spark):
    """On the Spark path: the item set is fixed before training."""
    table, items = _random_ratings(4)
    new = pa.table(
        {"user": ["intruder"] * 4, "item": [f"new{k}" for k in range(4)], "rating": [5.0] * 4}
    )
    options = _options("adadpals", items, True, unobserved_weight=0.2)
    without = MatrixFactorization(**options).fit(_frame(spark, table))
    with_user = MatrixFactorization(**options).fit(_frame(spark, pa.concat_tables([table, new])))
    assert with_user.item_labels_.to_pylist() == items == without.item_labels_.to_pylist()
    assert with_user.item_factors_.shape == without.item_factors_.shape == (len(items), 3)
    assert with_user.item_counts_.shape == (len(items),)
    assert not set(with_user.model_.item_labels.to_pylist()) & {f"new{k}" for k in range(4)}
    dropped = with_user.diagnostics_["ratings_outside_item_set"]
    assert dropped == without.diagnostics_["ratings_outside_item_set"] + 4


def test_am_ssp_statistics_match_local(spark):
    """PublicFeatureRecommender's exact A_j, b_j (its fit's computation, written out here)."""
    from userdp.multitask.allocation import adaptive_weights
    from userdp.multitask.kernels import segment_offsets, segment_statistics
    from userdp.multitask.ssp import clip_rows
    from userdp.recommend import PublicFeatureRecommender
    from userdp.recommend.core.model import solve_users
    from userdp.recommend.core.plans import plan_ssp_noise
    from userdp.recommend.engines.spark import SparkRunner
    from userdp.recommend.public.id_encoder import IdEncoder

    table, items = _random_ratings(5)
    enc = IdEncoder(len(items), 3, seed=1)
    model = PublicFeatureRecommender(
        encoder=enc,
        items=items,
        epsilon=4.0,
        delta=1e-5,
        rating_range=(1.0, 5.0),
        rating_clip=1.5,
        seed=3,
    )
    plan = plan_ssp_noise(
        model._validate(), steps=model.steps, center_fraction=model._center_fraction()
    )
    item_set = model._item_set(True)
    prep = model._prepare(
        Ratings.from_table(table),
        item_set,
        NoiseSource(3),
        count_noise=plan.counts,
        center_noise=plan.center,
    )
    data = prep.data
    w = adaptive_weights(data.users, data.items, prep.counts, mu=model.mu, beta=1.0)
    y = prep.values - prep.center
    half = min(max(prep.hi - prep.center, prep.center - prep.lo), 1.5)
    V_items = enc.forward(enc.init_params(), None)[0]
    uo, uoff = segment_offsets(data.users, data.n_users)
    io, ioff = segment_offsets(data.items, data.n_items)
    g, mo = segment_statistics(uoff, uo, data.items, V_items, None, y)
    U = solve_users(g, mo, model.reg * np.maximum(np.diff(uoff), 1).astype(float))
    U = clip_rows(U, model.max_norm)
    exact_a, exact_b = segment_statistics(ioff, io, data.users, U, w, np.clip(y, -half, half))

    noise = NoiseSource(3)
    runner = SparkRunner(_frame(spark, table))
    spec = model._run_spec(model.encoder.dim, model._biased)
    rp = runner.prepare(spec, item_set, noise, count_noise=plan.counts, center_noise=plan.center)
    np.testing.assert_array_equal(rp.counts, prep.counts)
    runner.restrict(np.ones(rp.n_items, dtype=bool))
    rule = Allocation("adaptive", 1, model.mu)
    runner.allocate(rule, rp.counts, noise)
    how = UserSolve(3, False, 0.0, 0.0, model.max_norm, half, clip_target=True)
    runner.solve_users(V_items, how, model.reg)
    gram, moment = runner.item_statistics(weighted=True)
    np.testing.assert_allclose(gram, exact_a, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(moment, exact_b, rtol=1e-9, atol=1e-9)
    assert np.abs(exact_b).sum() > 0


@pytest.mark.parametrize(
    ("method", "biases", "extra"),
    [
        ("adadpsgd", True, {}),
        ("dpsgd-tail", False, {"unobserved_weight": 0.3}),
        ("dpsgd-uniform", True, {"sgd_steps": 2}),
    ],
)
def test_dpsgd_seeded_model_equals_the_local_model(spark, method, biases, extra):
    """The clipped per-user gradient sums agree, so the noisy steps do too."""
    table, items = _random_ratings(6, kind="int")
    options = _options(method, items, biases, **extra)
    local = MatrixFactorization(**options).fit(table)
    remote = MatrixFactorization(**options).fit(_frame(spark, table))
    np.testing.assert_allclose(remote.item_factors_, local.item_factors_, rtol=1e-9, atol=1e-9)
    assert np.abs(local.item_factors_).sum() > 0
    if biases:
        np.testing.assert_allclose(remote.item_biases_, local.item_biases_, atol=1e-9)


def test_repeated_pairs_and_missing_columns_are_data_errors(spark):
    table, items = _random_ratings(0)
    twice = pa.concat_tables([table, table.slice(0, 1)])
    model = MatrixFactorization(**_options("adadpals", items, False))
    with pytest.raises(DataError, match=r"repeat 1 \(user, item\) pair"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(_frame(spark, twice))
    with pytest.raises(DataError, match="Column 'rating' not found"):
        model.fit(_frame(spark, table.drop(["rating"])))


def test_statistics_too_large_for_the_driver_are_refused_before_any_charge(spark, monkeypatch):
    from userdp.privacy import PrivacyAccountant, PrivacyBudget
    from userdp.recommend.engines import spark as engine

    table, items = _random_ratings(0)
    monkeypatch.setattr(engine, "MAX_DRIVER_BYTES", 8 * 16 * len(items) - 1)  # d' = 4
    accountant = PrivacyAccountant(PrivacyBudget(10.0, 1e-4))
    model = MatrixFactorization(**_options("adadpals", items, True))
    with pytest.raises(InvalidParameterError, match="exceed MAX_DRIVER_BYTES"):
        model.fit(_frame(spark, table), accountant=accountant)
    assert accountant.ledger == ()


def test_spark_engine_refuses_an_in_memory_table(spark):
    table, items = _random_ratings(0)
    with pytest.raises(DataError, match=r"takes a pyspark\.sql\.DataFrame"):
        MatrixFactorization(**_options("adadpals", items, False)).fit(table, engine="spark")
