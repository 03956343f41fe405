"""The Spark engine computes what the local engine computes.

For random small inputs and a fixed seed (hence the same capping salt), the pre-noise weights of
every round agree to 1e-9 and, given the same noise, the selected sets are equal: Basic, DP-SIPS,
MAD and MAD2R (whose round 2 sees the same round-1 noise, hence the same removed items and
biases).
"""

from __future__ import annotations

import os
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from userdp.partition import select_partitions
from userdp.partition import spark as engine
from userdp.partition.rounds import Round
from userdp.partition.runner import Tap
from userdp.privacy import PrivacyBudget


def _run(data, algorithm, engine_name, tap=None, **options):
    return select_partitions(data, algorithm=algorithm, engine=engine_name, _tap=tap, **options)


pytestmark = [
    pytest.mark.spark,
    # the small random inputs need a large budget for anything to pass the threshold
    pytest.mark.filterwarnings("ignore:epsilon=.*weak guarantee:UserWarning"),
    pytest.mark.filterwarnings("ignore:delta=.*is large:UserWarning"),
]

# Random datasets per parity case: 11 cases x 4 keep the suite under its 10-minute budget (8 took
# 6 of its 12 minutes); USERDP_SPARK_EXAMPLES=50 for a deeper run before touching the engine.
EXAMPLES = int(os.environ.get("USERDP_SPARK_EXAMPLES", "4"))


def _noise(scale: float = 3.0):
    """Per-item pseudo-noise in [-scale sigma, scale sigma]: the same on both engines."""

    def noise(round_index, items, sigma):
        out = np.empty(len(items))
        for k, item in enumerate(items):
            h = zlib.crc32(f"{round_index}|{type(item).__name__}|{item}".encode())
            out[k] = sigma * scale * (2.0 * h / 0xFFFFFFFF - 1.0)
        return out

    return noise


@st.composite
def datasets(draw):
    """(user, item) pairs: up to 40 users, skewed degrees, int or str ids, some duplicates."""
    n_users = draw(st.integers(1, 40))
    n_items = draw(st.integers(1, 25))
    item_kind = draw(st.sampled_from(["int", "str"]))
    user_kind = draw(st.sampled_from(["int", "str"]))
    pairs = []
    for u in range(n_users):
        degree = draw(st.integers(1, 12))
        for _ in range(degree):
            # skewed: low item ids are popular
            i = min(draw(st.integers(0, n_items - 1)), draw(st.integers(0, n_items - 1)))
            pairs.append(
                (
                    u * 7919 if user_kind == "int" else f"user-{u}",
                    i * 31 if item_kind == "int" else f"ítem {i}",
                )
            )
    return pairs


def _frame(spark, pairs):
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    def kind(v):
        return StringType() if isinstance(v, str) else LongType()

    schema = StructType(
        [
            StructField("user", kind(pairs[0][0]), False),
            StructField("item", kind(pairs[0][1]), False),
        ]
    )
    return spark.createDataFrame(pairs, schema)


def _collect(weights_frame) -> dict:
    return {row["_i"]: row["_w"] for row in weights_frame.collect()}


def _same_weights(local: dict, spark: dict) -> None:
    assert set(local) == set(spark)
    for item, w in local.items():
        assert spark[item] == pytest.approx(w, rel=1e-9, abs=1e-9), item


COMMON = {"epsilon": 40.0, "delta": 0.05, "max_items_per_user": 5}
CASES = {
    # no case per composition: the runners never see it (the driver's noise plan only)
    "basic": ("basic", {}),
    "dp-sips": ("dp-sips", {"fractions": (0.2, 0.3, 0.5)}),
    "dp-sips-no-recap": ("dp-sips", {"recap": False}),
    "dp-sips-pooled": ("dp-sips", {"rounds": 3, "pooled": True}),
    "mad": ("mad", {"d_max": 4}),
    "mad2r": ("mad2r", {"d_max": 4}),  # the default: pooled, 4 rounds, capped once
    "mad2r-unpooled": ("mad2r", {"d_max": 4, "pooled": False}),
    "mad2r-3-rounds": ("mad2r", {"d_max": 4, "rounds": 3}),
    # unpooled rounds re-cap by default: these keep the first capped sets instead
    "mad2r-no-recap": ("mad2r", {"d_max": 5, "pooled": False, "recap": False}),
    "mad2r-3-rounds-no-recap": (
        "mad2r",
        {"d_max": 5, "pooled": False, "recap": False, "rounds": 3},
    ),
    "mad2r-auto-cap": ("mad2r", {"max_items_per_user": "auto"}),
}


def _both(spark, pairs, name, seed, noise_scale=3.0):
    algorithm, extra = CASES[name]
    options = {**COMMON, **extra, "seed": seed}
    noise = _noise(noise_scale)
    lp, sp = Tap(noise=noise), Tap(noise=noise)
    local = _run(pairs, algorithm, "local", lp, **options)
    remote = _run(_frame(spark, pairs), algorithm, "spark", sp, **options)
    return local, lp, remote, sp


@pytest.mark.parametrize("name", CASES)
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(pairs=datasets(), seed=st.integers(0, 2**32))
def test_weights_and_selection_match_local(spark, name, pairs, seed):
    _assert_same_run(*_both(spark, pairs, name, seed))


def test_default_selection_matches_local_under_production_settings(spark_defaults):
    """The suite's session uses settings for tiny frames (tests/conftest.py); the default
    selection is compared once more under what users run: adaptive execution, compiled
    expressions, several shuffle partitions.

    Run again, it compiles no new class: ``spark_session()`` keeps
    :data:`~userdp.spark.CODEGEN_CACHE_ENTRIES` generated classes (a static setting, checked
    here; the constant says why Spark's default is too small)."""
    from userdp.spark import CODEGEN_CACHE_ENTRIES

    spark = spark_defaults
    assert spark.conf.get("spark.sql.codegen.cache.maxEntries") == str(CODEGEN_CACHE_ENTRIES)
    rng = np.random.default_rng(11)
    pairs = [
        (f"u{u}", int(i)) for u in range(60) for i in rng.zipf(1.5, size=int(rng.integers(1, 12)))
    ]
    _assert_same_run(*_both(spark, pairs, "mad2r", seed=4))
    if spark.sparkContext.master.startswith("local["):  # classes compiled in this JVM
        codegen = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics
        compiled = codegen.METRIC_COMPILATION_TIME()  # counts one per class compiled
        before = compiled.getCount()
        _both(spark, pairs, "mad2r", seed=4)
        assert compiled.getCount() == before


def test_python_batches_are_bounded_by_rows_without_the_byte_check(spark):
    """``spark_session()`` turns off Spark's check of an Arrow batch's bytes after every row sent
    to Python (it cost more CPU than writing the rows). What bounds each batch (the JVM's Arrow
    buffer, each piece a pandas UDF receives) is then the row limit alone: a partition of 2.5
    batches' worth of rows arrives as two full batches and the rest."""
    import pandas as pd

    from userdp.spark import ARROW_BATCH_BYTES

    assert spark.conf.get("spark.sql.execution.arrow.maxBytesPerBatch") == str(ARROW_BATCH_BYTES)
    limit = int(spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch"))
    frame = spark.range(0, 2 * limit + limit // 2, numPartitions=1)

    def sizes(batches):
        for batch in batches:
            yield pd.DataFrame({"n": [len(batch)]})

    got = sorted(row["n"] for row in frame.mapInPandas(sizes, "n long").collect())
    assert got == [limit // 2, limit, limit]


def test_items_removed_earlier_draw_no_noise(spark, tmp_path):
    """The Spark runner noises, each round, only the items still in play: an item removed in
    an earlier round holds no pair of a later one, and its noisy weight would never be read.
    With the default (capped once), those are the items the round holds, which the local
    runner's weights list; the release is the local one."""
    rng = np.random.default_rng(3)
    pairs = [(u, int(i)) for u in range(60) for i in rng.zipf(1.5, size=int(rng.integers(1, 12)))]
    log = str(tmp_path / "noised")
    base = _noise()

    def noise(round_index, items, sigma):  # runs on the executors: appends what it noises
        with open(log, "a") as f:
            f.write("".join(f"{round_index} {item}\n" for item in items))
        return base(round_index, items, sigma)

    options = {**COMMON, "d_max": 4, "seed": 5}
    lp, sp = Tap(noise=base), Tap(noise=noise)
    local = _run(pairs, "mad2r", "local", lp, **options)
    remote = _run(_frame(spark, pairs), "mad2r", "spark", sp, **options)
    noised: dict[int, list[int]] = {}
    with open(log) as f:
        for line in f:
            r, item = line.split()
            noised.setdefault(int(r), []).append(int(item))
    assert sorted(noised) == list(range(len(lp.weights)))
    for r, weights in enumerate(lp.weights):
        assert len(noised[r]) == len(set(noised[r]))  # one draw per item
        assert set(noised[r]) == set(weights), r
    assert len(noised[1]) < len(noised[0])  # items were removed after round 1
    assert sorted(local.items) == remote.items
    remote.dataframe.unpersist()


def _assert_same_run(local, lp, remote, sp):
    """Equal weights every round (1e-9), equal releases, budgets and diagnostics."""
    assert len(lp.weights) == len(sp.weights) == len(local.diagnostics.round_sizes)
    for lw, sw in zip(lp.weights, sp.weights, strict=True):
        _same_weights(lw, _collect(sw))
    assert sorted(local.items) == remote.items
    assert remote.budget == local.budget
    assert remote.diagnostics.round_sizes == local.diagnostics.round_sizes
    d, r = local.diagnostics, remote.diagnostics
    assert (r.n_users, r.n_pairs, r.duplicates_dropped) == (
        d.n_users,
        d.n_pairs,
        d.duplicates_dropped,
    )
    assert r.pairs_dropped_by_capping == d.pairs_dropped_by_capping
    remote.dataframe.unpersist()


@pytest.mark.parametrize("recap", [True, False])
def test_query_plans_do_not_grow_with_the_rounds(spark, capsys, recap):
    """Regression: each round's plan nested every earlier round's cached plans, ~25x
    larger per round, and Spark expands plans into text for every job: 3 rounds exhausted a
    3 GiB driver heap. Rounds now meet in a checkpointed item frame, so round 3's weights have
    a plan no larger than round 2's."""
    rng = np.random.default_rng(7)
    pairs = [(u, int(i)) for u in range(40) for i in rng.zipf(1.6, size=int(rng.integers(1, 12)))]
    tap = Tap(noise=_noise())
    # re-capping is an option of the unpooled rounds (the pooled default caps once)
    options = {**COMMON, "d_max": 5, "rounds": 3, "recap": recap, "pooled": not recap, "seed": 1}
    remote = _run(_frame(spark, pairs), "mad2r", "spark", tap, **options)
    sizes = []
    for frame in tap.weights:
        capsys.readouterr()
        frame.explain(mode="extended")
        sizes.append(len(capsys.readouterr().out))
    assert len(sizes) == 3
    assert sizes[2] < 1.5 * sizes[1], sizes
    remote.dataframe.unpersist()


def test_biased_mad_weights_match_on_both_sides_of_truncation(spark):
    # Biased MAD on Spark takes one aggregation when no item's w_init exceeds tau and the full
    # Alg. 3 otherwise: both must give the local engine's weights. Item 0 is held by every
    # user (degree 5, adaptive), so w_init(0) = 60/5 = 12: tau = 10 truncates, tau = 50 does not.
    from userdp.partition import mad_weights
    from userdp.partition._spark_weights import _mad_weights

    rng = np.random.default_rng(8)
    others = [rng.choice(np.arange(1, 20), 4, replace=False).tolist() for _ in range(60)]
    pairs = [(u, i) for u in range(60) for i in [0, *others[u]]]
    users, items = np.array(pairs).T
    biases = np.where(rng.random(20) < 0.5, rng.uniform(0.1, 0.9, 20), 1.0)
    biases[0] = 0.7
    w_init = np.bincount(items, weights=np.full(items.size, 1 / 5))  # every user has degree 5
    assert 10.0 < w_init.max() < 50.0
    run = engine._SparkRun(_frame(spark, pairs), "test", "user", "item", 100, 0)
    try:
        b = spark.createDataFrame(
            [(i, float(x)) for i, x in enumerate(biases)], "_i long, _b double"
        )
        capped = run.capped(run.pairs).join(b, "_i")
        rnd = Round.calibrate(PrivacyBudget(1.0, 1e-5), cap=100)
        for tau in (10.0, 50.0):
            options = {"tau": tau, "d_max": 8, "b_min": 0.5, "b_max": 1.25}
            local = mad_weights(users, items, 60, 20, biases=biases, **options)
            expected = {int(i): local[i] for i in np.unique(items)}
            remote = _collect(_mad_weights(run, capped, biased=True, **options))
            _same_weights(expected, remote)
            # the partial sums reach the noise, which adds them up and checks w_init there:
            # they are the weights without truncation, and refused (None) with it
            partial = _mad_weights(run, capped, biased=True, partials=True, **options)
            rounds, events = len(run.round_sizes), len(run.accountant.ledger)
            out = run.release(rnd, partial, tau=tau)
            if tau < w_init.max():
                assert out is None
                assert (len(run.round_sizes), len(run.accountant.ledger)) == (rounds, events)
            else:
                noisy, _ = out
                assert "_wi" not in noisy.columns
                _same_weights(expected, _collect(noisy))
                assert len(run.round_sizes) == rounds + 1
    finally:
        run.abort()


def test_mad2r_round_two_biases_match(spark):
    """Round-1 noise chosen to bias half the items: exercises the pandas UserWeights path."""
    rng = np.random.default_rng(3)
    pairs = []
    for u in range(60):
        degree = int(rng.integers(2, 12))
        items = rng.choice(30, size=degree, replace=False, p=np.r_[[8.0] * 5, [1.0] * 25] / 65)
        pairs += [(f"u{u}", f"i{i}") for i in items]
    # the papers' split: the biased band below exists when rho_2 + sigma_1 < rho_1
    options = {**COMMON, "d_max": 4, "seed": 11, "composition": "basic"}
    first = Tap()
    plain = _run(pairs, "mad2r", "local", first, **options)
    (r1, r2), w1 = plain.parameters["rounds"], first.weights[0]
    # biased band of line 14: rho_2 + c_lb sigma_1 < noisy_1 < rho_1 (not released, w_lb > rho_2)
    low, high = r2["rho"] + r1["sigma"], r1["rho"]
    assert low < high
    target = {i: (low + high) / 2 - w for k, (i, w) in enumerate(sorted(w1.items())) if k % 2}

    def noise(round_index, items, sigma):
        return np.array([target.get(i, 0.0) if round_index == 0 else 0.0 for i in items])

    lp, sp = Tap(noise=noise), Tap(noise=noise)
    local = _run(pairs, "mad2r", "local", lp, **options)
    remote = _run(_frame(spark, pairs), "mad2r", "spark", sp, **options)
    assert len(target) >= 5
    for lw, sw in zip(lp.weights, sp.weights, strict=True):
        _same_weights(lw, _collect(sw))
    assert sorted(local.items) == remote.items
    assert sum(local.diagnostics.pairs_dropped_by_capping) > 0
    remote.dataframe.unpersist()


@pytest.mark.parametrize("name", ["mad2r", "dp-sips"])
def test_shuffle_joins_match_broadcast_joins(spark, monkeypatch, name):
    """Item sets too large to broadcast are joined by shuffling: same weights, same items."""
    from userdp.partition import _spark_run  # where the runner's joins read it

    monkeypatch.setattr(_spark_run, "BROADCAST_ROWS", 0)
    rng = np.random.default_rng(5)
    pairs = [(u, int(i)) for u in range(80) for i in rng.zipf(1.6, size=int(rng.integers(1, 14)))]
    local, lp, remote, sp = _both(spark, pairs, name, seed=2)
    for lw, sw in zip(lp.weights, sp.weights, strict=True):
        _same_weights(lw, _collect(sw))
    assert sorted(local.items) == remote.items
    remote.dataframe.unpersist()


def _sorts(plan: str) -> list[list[str]]:
    """The sort keys of every Sort in a physical plan's text, outside cached frames (the
    subtree under an ``InMemoryRelation``, computed once by the job that filled it)."""
    import re

    out, skip = [], None
    for line in plan.splitlines():
        depth = len(line) - len(line.lstrip(" :+-"))
        if skip is not None and depth > skip:
            continue
        skip = depth if "InMemoryRelation" in line else None
        match = re.match(r"[ :+-]*Sort \[(.*?)\], ", line)
        if match:
            out.append([re.sub(r"#\d+L?", "", key).split()[0] for key in match[1].split(", ")])
    return out


@pytest.mark.parametrize("user_kind", ["int", "str"])
@pytest.mark.parametrize("name", ["mad", "mad2r", "mad2r-no-recap"])
def test_pairs_are_sorted_once_on_a_64_bit_key(spark, monkeypatch, name, user_kind):
    """Every window by user sorts its partitions by the user first: on input in random order
    that sort was most of the first job. The pairs are now sorted first on one 64-bit key
    (Spark sorts such a key by radix): the user where it is integral, else the user's hash,
    which then leads every window's keys. The first job sorts twice (that key, then the
    window's capping order, within users); every round's windows by user (the degrees of
    the surviving pairs, MAD's excess per user) read the cached pairs in their order and
    sort nothing."""
    keys = ["_u"] if user_kind == "int" else ["_hu", "_u"]
    plans = {"cache": [], "cut": []}
    for method in plans:
        original = getattr(engine._SparkRun, method)

        def spy(self, df, *args, _original=original, _seen=plans[method]):
            _seen.append(df._jdf.queryExecution().executedPlan().toString())
            return _original(self, df, *args)

        monkeypatch.setattr(engine._SparkRun, method, spy)
    rng = np.random.default_rng(3)
    pairs = [
        (int(u) if user_kind == "int" else f"user {u}", int(i))
        for u in rng.permutation(60)
        for i in rng.zipf(1.5, size=int(rng.integers(1, 14)))
    ]
    algorithm, extra = CASES[name]
    remote = _run(_frame(spark, pairs), algorithm, "spark", **COMMON, **extra, seed=1)
    prepare = _sorts(plans["cache"][0])
    assert len(prepare) == 2, plans["cache"][0]
    window, lower = prepare  # a plan's text lists its nodes from the top
    assert lower == keys[:1]  # one 64-bit key
    assert window[: len(keys)] == keys and len(window) > len(keys)  # then the capping order
    assert len(plans["cut"]) >= (1 if name == "mad" else 2)  # every round checkpoints
    for plan in plans["cut"]:
        assert _sorts(plan) == [], plan
    remote.dataframe.unpersist()


def test_seeded_run_is_reproducible_across_partitionings(spark):
    pairs = [(u, f"w{(u * i) % 37}") for u in range(300) for i in range(1, 9)]
    df = _frame(spark, pairs)
    before = spark.conf.get("spark.sql.shuffle.partitions")
    try:
        spark.conf.set("spark.sql.shuffle.partitions", "3")
        a = select_partitions(df, epsilon=3.0, delta=1e-4, seed=5)
        spark.conf.set("spark.sql.shuffle.partitions", "7")
        b = select_partitions(df.repartition(5), epsilon=3.0, delta=1e-4, seed=5)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", before)
    assert a.items == b.items
    assert len(a) == len(a.items) > 0


def test_unseeded_runs_draw_fresh_noise(spark):
    # items sit at the threshold, so the noise decides: two unseeded runs must differ
    pairs = [(u, f"w{u % 40}") for u in range(800)]
    df = _frame(spark, pairs)
    rho = select_partitions(df, epsilon=1.0, delta=1e-5, algorithm="basic", seed=0).parameters[
        "rho"
    ]
    assert 800 / 40 < rho + 5  # weights 20 near rho ~ 21: about half are released
    runs = {
        tuple(select_partitions(df, epsilon=1.0, delta=1e-5, algorithm="basic").items)
        for _ in range(3)
    }
    assert len(runs) > 1


def test_result_metadata_matches_local(spark):
    pairs = [(u, f"w{i}") for u in range(500) for i in range(u % 7 + 1)] + [(1, "w0")]
    local = select_partitions(pairs, epsilon=1.0, delta=1e-5, seed=4)
    remote = select_partitions(_frame(spark, pairs), epsilon=1.0, delta=1e-5, seed=4)
    assert remote.parameters == local.parameters
    assert remote.budget == local.budget
    assert remote.dp_event == local.dp_event
    assert remote.diagnostics.duplicates_dropped == 1
    assert remote.diagnostics.n_users == 500
    assert remote.dataframe.columns == ["item"]
    assert set(remote.items) <= {f"w{i}" for i in range(7)}
    assert remote.to_arrow().to_pylist() == remote.items
    assert "mad2r: selected" in remote.summary()
    assert "users" not in remote.summary()


def test_select_partitions_picks_the_spark_engine(spark):
    from userdp.exceptions import InvalidParameterError
    from userdp.partition import SparkSelectionResult

    df = _frame(spark, [(u, "common") for u in range(3000)])
    result = select_partitions(df, epsilon=1.0, delta=1e-5, algorithm="mad", seed=1)
    assert isinstance(result, SparkSelectionResult)
    assert result.items == ["common"]
    with pytest.raises(InvalidParameterError, match="sequential"):
        select_partitions(df, epsilon=1.0, delta=1e-5, algorithm="policy-gaussian")
    with pytest.raises(InvalidParameterError, match="does not take"):
        select_partitions(df, epsilon=1.0, delta=1e-5, algorithm="basic", beta=2.0)


def test_bad_input_is_refused(spark):
    from userdp.exceptions import DataError

    df = spark.createDataFrame([(1, "a"), (2, None)], "user long, item string")
    kw = {"epsilon": 1.0, "delta": 1e-5, "algorithm": "basic", "engine": "spark"}
    with pytest.raises(DataError, match="null"):
        select_partitions(df, **kw)
    with pytest.raises(DataError, match="not found"):
        select_partitions(df, item_column="query", **kw)
    with pytest.raises(DataError, match="DataFrame"):
        select_partitions([(1, "a")], **kw)
    empty = spark.createDataFrame([], "user long, item string")  # a data set, not bad input
    assert select_partitions(empty, **{**kw, "algorithm": "mad"}).dataframe.count() == 0


def test_python_workers_import_the_driver_s_userdp(spark):
    """Executors must run the same userdp as the driver (a worktree on PYTHONPATH, not a copy
    installed elsewhere), or parity tests would compare the driver's code with another one."""
    from pathlib import Path

    import userdp

    def where(_):
        import userdp as worker_userdp

        yield Path(worker_userdp.__file__).resolve().as_posix()

    paths = set(spark.sparkContext.parallelize([0, 1], 2).mapPartitions(where).collect())
    assert paths == {Path(userdp.__file__).resolve().as_posix()}


@pytest.mark.parametrize(
    "name", ["basic", "dp-sips", "dp-sips-pooled", "mad", "mad2r", "mad2r-unpooled"]
)
def test_a_user_s_novel_items_are_never_released(spark, name):
    """End to end on the Spark engine with its own noise: shared items held by many users are
    released, while one user's 300 items that nobody else holds never are (the default MAD2R
    noises only round 1's items in every-item rounds and carries them into the pooled test)."""
    import pandas as pd

    algorithm, extra = CASES[name]
    rng = np.random.default_rng(7)
    users = np.repeat(np.arange(400), 8)
    shared = pd.DataFrame({"user": users, "item": rng.integers(0, 40, users.size)})
    lone = pd.DataFrame({"user": -1, "item": np.arange(10_000, 10_300)})
    frame = spark.createDataFrame(pd.concat([shared, lone], ignore_index=True))
    options = {**extra, "max_items_per_user": 20}
    for seed in range(2):
        r = _run(frame, algorithm, "spark", epsilon=8.0, delta=1e-6, seed=seed, **options)
        released = {row[0] for row in r.dataframe.collect()}
        assert released, "nothing released: the test would not see a leak"
        assert not released & set(range(10_000, 10_300)), sorted(released)[-5:]


def test_an_empty_frame_is_selected_from_like_one_user_s(spark):
    """No error on zero rows (the neighbour of one user's rows): nothing released, the same
    event as the one user's release."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    schema = StructType([StructField("user", LongType()), StructField("item", StringType())])
    empty = spark.createDataFrame([], schema)
    one = spark.createDataFrame([(0, "a"), (0, "b")], schema)
    a, b = (select_partitions(d, epsilon=1.0, delta=1e-5, seed=1) for d in (empty, one))
    assert a.dataframe.count() == b.dataframe.count() == 0
    assert a.dp_event == b.dp_event and a.budget == b.budget
