"""The Spark runner of partition selection (and :func:`read`); no algorithms of its own.

:func:`userdp.partition.select_partitions` runs the algorithms of
:mod:`userdp.partition.algorithms` on a :class:`SparkRunner` for a Spark DataFrame, with the
same parameters, guarantees and weights as the local runner: for a given seed both engines cap
every user to the same items (keyed hash of (salt, user, item), Spark's ``xxhash64``), so their
pre-noise weights agree to float round-off.

Every step is a DataFrame operation except ``mapInPandas`` UDFs that run on the executors once
per partition (:func:`userdp.spark.whole_partition`): biased UserWeights (MAD2R from round 2),
on the partitions of the window by user that counts each user's pairs (whole users, no
shuffle), summed per item of the partition before they leave Python, and the noise, drawn per
hash bucket of items from ``SeedSequence(entropy, spawn_key=(round, bucket))`` over the
bucket's items still in play in hash order, on a frame shuffled by bucket (whole buckets), so
that no single stream runs over all items and a seeded run gives the same release on any
cluster (safe noise on the run's one weight grid, :class:`_ExecutorNoise`); items removed in
earlier rounds, whose noisy weight nothing reads, skip it. The driver collects counts only;
item sets that filters make small (MAD's heavy items, MAD2R's removed or biased items, DP-SIPS's
released items) are broadcast to the tasks holding the pairs when they have at most
:data:`BROADCAST_ROWS` rows, and joined by a shuffle otherwise (counted only when the input's
estimated number of distinct items does not already bound them well below that).

Actions: one de-duplicates, hashes and ranks the pairs (each user's capping order, whatever
the cap) and caches them, observing on the way what the checks and diagnostics count (no
second pass over the cache); each round then runs one for its weights and noise, which
checkpoints the noisy item frame and counts the round's release on the way (an observation:
the released items stay a filter of that checkpoint, with no job or cache of their own). A
biased MAD round (MAD2R from round 2) computes its weights with every item's w_init in the
same job: a pandas call per partition of pairs sums both per item of the partition, and the
noise's pandas call, after the shuffle by bucket it needs anyway, adds those partial sums up
before it noises them (no aggregation by item and no checkpoint of the weights of their own),
and the same job observes the largest w_init on the way: no item is truncated in the usual
case (then no w_init aggregation, heavy-item join or excess window, see
``_biased_partials``); otherwise that noisy frame and its release are dropped (nothing
composed or counted) and the round runs the full Alg. 3 and its noise again. Without
re-capping, the first round that removes items caches the pairs that survive (the first capped
sets minus the removed items, with their degrees), filled by that round's own pass as it reads
them; later rounds read that cache (28% of the capped pairs at 10M rows) instead of every
capped pair, minus their own removals.

Python passes (the biased UserWeights and the noise) run one task per core, more only when a
call would hold more than :data:`PAIRS_PER_CALL` pairs (:func:`~userdp.spark.python_partitions`):
a pandas task costs more than its rows.

Lineage: rounds meet only in item frames, cut (checkpointed) as each round computes them, and
(without re-capping) in the first round's capped pairs. A round that noises every item (every
round but the last of MAD2R, and of a pooled DP-SIPS) checkpoints its noisy frame with what
the next round needs: the items removed so far (``_gone``) and the earlier rounds' noisy
weights (``_x0, _x1, ...``, for the pooled test), so the next round's removals and biases are a
filter of it and the pooled test reads one frame. Otherwise each round's plan nests all earlier
rounds' cached plans several times, and Spark expands them into the plan text and graph of
every job (~25x per round: 165M characters for one job of a 3-round MAD2R on 40 users, past a
3 GiB driver heap).

Shuffles: the pairs once by user (de-duplication, capping and every per-user window share that
partitioning, and one sort, on :attr:`_SparkRun.user_keys`, an order the cached pairs keep);
item-level partial aggregates by item (round 1, and the full Alg. 3); item-level
frames by noise bucket (a round's weights, or a biased round's partial sums, together with the
items it carries over, as one union added up and joined in the noise's pandas call, not a join
or aggregation shuffle of its own); and the pairs by item only when an item set is too large to
broadcast.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import dp_accounting
import numpy as np

from userdp._validation import check_int
from userdp.data.encoding import run_bounds
from userdp.data.hashing import canonical_column, is_integral
from userdp.exceptions import DataError, InvalidParameterError
from userdp.partition._spark_weights import (
    _BASE,
    _HI,
    _HU,
    _I,
    _IB,
    _ITEM,
    _U,
    BROADCAST_ROWS,
    _basic_weights,
    _functions,
    _mad_weights,
    sum_per_item,
    with_bucket,
)
from userdp.partition.cap import DEGREE_EDGES, HISTOGRAM_STREAM
from userdp.partition.result import SelectionDiagnostics, SparkSelectionResult
from userdp.partition.rounds import (
    WEIGHT_GRID,
    WEIGHT_GRID_ITEMS,
    Plan,
    PooledTest,
    Round,
    check_item_count,
)
from userdp.partition.runner import Basic, Decide, Mad, Tap
from userdp.privacy import NoiseSource, PrivacyAccountant, PrivacyBudget
from userdp.privacy.noise import add_on_grid, gaussian_on_grid, spawn_generator
from userdp.spark import python_partitions, require_pyspark, whole_partition

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from pyspark.sql import DataFrame

__all__ = ["SparkRunner", "read"]

logger = logging.getLogger("userdp.spark")

#: Pairs one pandas call may hold at most (its partition of the input's pairs; about 2 GB at
#: the peak of the biased UserWeights pass): below it, a pandas pass runs one task per core.
PAIRS_PER_CALL = 8_000_000


class _ExecutorNoise:
    """Safe Gaussian noise for one bucket of items, drawn on an executor.

    Picklable (it holds only the run's 128-bit entropy); bucket ``b`` of round ``r`` uses its own
    PCG64DXSM stream ``SeedSequence(entropy, spawn_key=(r, b))``. Every bucket releases its
    weights with the pure :func:`~userdp.privacy.gaussian_on_grid` on the ONE grid of the run,
    fixed for :data:`~userdp.partition.rounds.WEIGHT_GRID_ITEMS` coordinates (not for the
    bucket's size), exactly as the local runner does for all items at once.
    """

    def __init__(self, entropy: int) -> None:
        self.entropy = entropy

    def __call__(
        self, round_index: int, bucket: int, items: pd.Series, weights: np.ndarray, sigma: float
    ) -> np.ndarray:
        rng = spawn_generator(self.entropy, (round_index, bucket))
        return gaussian_on_grid(rng, weights, sigma, l2=1.0, size=WEIGHT_GRID_ITEMS)


class _TapNoise:
    """Noise from a test tap's per-item function (see :class:`userdp.partition.runner.Tap`),
    added on the run's grid as the local runner adds it."""

    def __init__(self, noise: Any) -> None:
        self.noise = noise

    def __call__(
        self, round_index: int, bucket: int, items: pd.Series, weights: np.ndarray, sigma: float
    ) -> np.ndarray:
        noise = np.asarray(self.noise(round_index, items.tolist(), sigma), dtype=float)
        return add_on_grid(weights, noise, WEIGHT_GRID)


def _join_sides(
    how: str, carried: Sequence[str], pdf: pd.DataFrame, partial: bool = False
) -> pd.DataFrame:
    """One partition's round weights (rows with ``_side`` 0: ``_i, _hi, _ib, _w``) joined on
    the item with its carried item rows (``_side`` 1: ``_i, _hi, _ib`` and ``carried``), as
    ``_i, _hi, _ib, _w, _present, *carried``: every carried item, with weight 0 and
    ``_present`` false when the round does not hold it (``how="left"``), or the round's items
    that are carried (``how="inner"``). The partition holds whole noise buckets, so both rows
    of an item. ``partial``: the weights are partial sums with their w_init (``_wi``), added
    up per item first (:func:`sum_per_item`); ``_wi`` joins the output (0 when absent)."""
    side = pdf["_side"].to_numpy()
    own = ["_w", "_wi"] if partial else ["_w"]
    weights = pdf.loc[side == 0, [*_ITEM, *own]]
    if partial:
        weights = sum_per_item(weights)
    items = pdf.loc[side == 1, [*_ITEM, *carried]]
    if how == "left":
        out = items.merge(weights[[_I, *own]], on=_I, how="left", sort=False)
        out["_present"] = out["_w"].notna().to_numpy()
        for c in own:
            out[c] = out[c].fillna(0.0)
    else:
        out = weights.merge(items[[_I, *carried]], on=_I, how="inner", sort=False)
        out["_present"] = True
    return out[[*_ITEM, "_w", "_present", *carried, *own[1:]]].reset_index(drop=True)


def _add_noise(
    noise: Any,
    round_index: int,
    sigma: float,
    pdf: pd.DataFrame,
    join: tuple[str, Sequence[str]] | None = None,
    partial: bool = False,
) -> pd.DataFrame:
    """``mapInPandas`` body (via :func:`~userdp.spark.whole_partition`): noisy weight of every
    item of the partition (Alg. 1 line 7), whose buckets are whole (a shuffle by bucket just
    before). Each bucket draws from its own stream over its items in ``_hi`` order, so an item's
    noise does not depend on which buckets share its partition. ``join`` (how, carried
    columns): the partition holds the round's weights and the carried items as two sides of a
    union, joined here first (:func:`_join_sides`): the one shuffle by bucket serves the join
    and the noise. ``partial``: the weights are partial sums with their w_init, added up per
    item here first (:func:`sum_per_item`; the output keeps ``_wi`` for the caller's check)."""
    if join is not None:
        pdf = _join_sides(join[0], join[1], pdf, partial)
        if pdf.empty:  # no item of the round among the carried items of these buckets
            return pdf.assign(_noisy=np.zeros(0))
    elif partial:
        pdf = sum_per_item(pdf)
    order = np.lexsort((pdf[_HI].to_numpy(), pdf[_IB].to_numpy()))  # by bucket, then item hash
    pdf = pdf.iloc[order].reset_index(drop=True)
    buckets = pdf[_IB].to_numpy()
    weights = pdf["_w"].to_numpy(dtype=float)
    noisy = np.empty(len(pdf))
    for a, b in zip(*run_bounds(buckets), strict=True):
        items = pdf[_I].iloc[a:b]
        noisy[a:b] = noise(round_index, int(buckets[a]), items, weights[a:b], sigma)
    return pdf.assign(_noisy=noisy)


class _SparkRun:
    """Book-keeping of one Spark selection: input, salt and noise, accountant, diagnostics."""

    def __init__(
        self,
        data: Any,
        caller: str,
        user_column: str,
        item_column: str,
        max_items_per_user: int,
        seed: int | None,
    ) -> None:
        require_pyspark()
        from pyspark import StorageLevel
        from pyspark.sql import DataFrame

        self.start = time.perf_counter()
        self.caller = caller
        self.cap = check_int(max_items_per_user, "max_items_per_user", caller, low=1)
        source = NoiseSource(seed)
        self.salt = source.salt
        self.entropy = source.entropy
        self.accountant = PrivacyAccountant()
        self.tap: Tap | None = None
        self.dropped: list[int] = []
        self.round_sizes: list[int] = []
        self._cached: list[DataFrame] = []
        self._views: list[tuple[DataFrame, DataFrame]] = []  # (projection, its cached frame)
        self._storage = StorageLevel.MEMORY_AND_DISK
        if not isinstance(data, DataFrame):
            raise DataError(
                f"The Spark engine takes a pyspark.sql.DataFrame; got {type(data).__name__}. "
                "Read files with userdp.partition.spark.read (or spark.read), or use the local "
                "engine."
            )
        self.item_column = item_column
        self._degrees: tuple[np.ndarray, np.ndarray] | None = None  # (degree, users), exact
        #: The keys of every window by user: ``[_U]`` for an integral user column, else
        #: ``[_HU, _U]`` (set by :meth:`_prepare`, which explains why).
        self.user_keys: list[str] = [_U]
        self.pairs, self.n_rows = self._prepare(data, user_column, item_column)

    def user_window(self) -> Any:
        """The window of one user's pairs, partitioned by :attr:`user_keys` (the user itself,
        or (user hash, user): the same groups either way), in the order the cached pairs keep."""
        from pyspark.sql import Window

        return Window.partitionBy(*self.user_keys)

    def pair_columns(self) -> list[str]:
        """A cached pair's own columns: user, item, :attr:`user_keys` (the user's hash only
        where it orders the windows by user) and the item's hash."""
        return list(dict.fromkeys([_U, _I, *self.user_keys, _HI]))

    # -- input ----------------------------------------------------------------------------------
    def _prepare(self, df: DataFrame, user_column: str, item_column: str) -> tuple[DataFrame, int]:
        """Distinct (user, item) pairs with salted hashes, partitioned by user (one shuffle) and
        sorted by :attr:`user_keys`, each user's pairs ranked in the capping order (``_rn``, see
        :meth:`capped`) with the user's degree ``_n``: cached (in that order), and checked and
        counted by the job that fills the cache.

        The ranking does not depend on the cap, so round 1's capped sets are a filter of this
        frame (no second copy of the pairs is cached), and the degree histogram reads ``_n``.
        That job counts (an observation of the rows it caches) the input's rows (``_c``: copies
        of each pair), its null or NaN users and items, its users and pairs, the pairs a cap of
        :attr:`cap` drops, and estimates its distinct items (HyperLogLog; :meth:`join_items`
        decides on it whether item frames are small enough to broadcast).
        """
        F = _functions()
        from pyspark.sql import Observation
        from pyspark.sql.types import DoubleType, FloatType

        for col in (user_column, item_column):
            if col not in df.columns:
                raise DataError(
                    f"Column {col!r} not found; the input has columns {df.columns!r}. Name the "
                    "columns with user_column= / item_column= (CLI: --user-column/--item-column)."
                )
        if user_column == item_column:
            raise DataError(f"The user and item columns are the same column ({user_column!r}).")
        types = {f.name: f.dataType for f in df.schema.fields}
        salt = F.lit(self.salt).cast("long")
        hu = F.xxhash64(salt, canonical_column(F.col(_U), types[user_column]))
        # Every window by user sorts each partition by its keys. Spark sorts on one key that
        # fits 64 bits by radix, in linear time, and n log n comparisons otherwise (each a
        # string comparison for string ids), far slower on input in random order. So the pairs
        # are first sorted on one such key, and the windows' own sort then only orders rows
        # within a user: an integral user is that key itself; any other user is preceded by
        # its 64-bit hash (windows by (hash, user), the same groups), which the cache then
        # holds so that later windows find the pairs in their order (docs/spark.md).
        self.user_keys = [_U] if is_integral(types[user_column]) else [_HU, _U]
        pairs = (
            df.select(F.col(f"`{user_column}`").alias(_U), F.col(f"`{item_column}`").alias(_I))
            .repartition(_U)
            .groupBy(_U, _I)  # distinct pairs, keeping each one's number of copies
            .agg(F.count(F.lit(1)).alias("_c"))
            .withColumn(_HI, F.xxhash64(salt, canonical_column(F.col(_I), types[item_column])))
            .withColumn(_HU, hu)
            .sortWithinPartitions(self.user_keys[0])
        )
        user = self.user_window()
        order = user.orderBy(F.xxhash64(F.col(_HU), F.col(_HI)), F.col(_HI))
        ranked = pairs.withColumn("_rn", F.row_number().over(order)).withColumn(
            "_n", F.count(F.lit(1)).over(user)
        )
        first = F.col("_rn") == 1
        checks = [
            F.sum("_c").alias("rows"),
            F.sum(F.when(first, 1).otherwise(0)).alias("users"),
            F.count(F.lit(1)).alias("pairs"),
            F.sum(F.when(first, F.greatest(F.col("_n") - self.cap, F.lit(0))).otherwise(0)).alias(
                "dropped"
            ),
            F.approx_count_distinct(_I).alias("items"),
        ]
        for name, col, c in (("user", user_column, F.col(_U)), ("item", item_column, F.col(_I))):
            bad = c.isNull()
            if isinstance(types[col], (FloatType, DoubleType)):
                bad = bad | F.isnan(c)
            checks.append(F.sum(F.when(bad, F.col("_c")).otherwise(0)).alias(name))
        # The checks are observed as the job that fills the cache computes its rows (no
        # second pass over the cached pairs). The cache holds what cannot be recomputed from
        # a row, and the user's hash only where it orders the pairs for the windows by user:
        # the item's noise bucket and otherwise the user's hash are projections over it (a
        # narrower cache is cheaper to fill than a column is to compute again).
        observation = Observation()
        kept = [*self.pair_columns(), "_rn", "_n"]
        cached = self.cache(ranked.observe(observation, *checks).select(*kept))
        with self.timed("prepare, rank and check the pairs"):
            cached.count()
            stats = observation.get
        ranked = cached if _HU in kept else cached.withColumn(_HU, hu)
        if not stats["rows"]:
            raise DataError("The input has no (user, item) pairs; nothing to select from.")
        for name, col in (("user", user_column), ("item", item_column)):
            if stats[name]:
                raise DataError(
                    f"Column {col!r} has {stats[name]} null or NaN value(s); drop or fill them "
                    "before selecting."
                )
        self.n_users = int(stats["users"])
        self.n_pairs = int(stats["pairs"])
        self.items_estimate = int(stats["items"])
        self._dropped_at = {self.cap: int(stats["dropped"] or 0)}  # cap -> pairs it drops
        return ranked, int(stats["rows"])

    def degree_counts(self) -> tuple[np.ndarray, np.ndarray]:
        """(degree, number of users) of every degree present (at most sqrt(2 pairs) rows;
        exact, for the driver's noisy histogram); records the pairs every cap drops."""
        F = _functions()
        with self.timed("degree histogram"):
            rows = self.pairs.where(F.col("_rn") == 1).groupBy("_n").count().collect()
        degree = np.array([r["_n"] for r in rows], dtype=np.int64)
        users = np.array([r["count"] for r in rows], dtype=np.int64)
        self._degrees = (degree, users)
        return degree, users

    def dropped_by(self, cap: int) -> int:
        """Pairs a cap of ``cap`` drops from the input (a count of the prepare job, or the
        degree histogram's, or a job of its own)."""
        F = _functions()
        if cap not in self._dropped_at:
            if self._degrees is not None:
                degree, users = self._degrees
                n = int((np.maximum(degree - cap, 0) * users).sum())
            else:
                first = F.col("_rn") == 1
                with self.timed("count the pairs capping drops"):
                    n = self.pairs.agg(
                        F.sum(F.when(first, F.greatest(F.col("_n") - cap, F.lit(0))).otherwise(0))
                    ).collect()[0][0]
            self._dropped_at[cap] = int(n or 0)
        return self._dropped_at[cap]

    @contextlib.contextmanager
    def timed(self, what: str) -> Iterator[None]:
        """Log the seconds a Spark job takes (``userdp.spark`` logger at INFO)."""
        start = time.perf_counter()
        yield
        logger.info("%s: %s took %.1f s", self.caller, what, time.perf_counter() - start)

    def join_items(self, pairs: DataFrame, items: DataFrame, how: str) -> DataFrame:
        """Join an item-level frame (a subset of the input's items) to the pairs on the item,
        broadcasting it when small.

        Broadcasting keeps the pairs where they are (partitioned by user, so the per-user
        windows that follow need no shuffle); a larger frame is joined by shuffling. The size
        is known, not estimated from the plan (adaptive execution cannot see through the
        filters that make these frames small): at most the input's distinct items, which the
        prepare job estimates; only when that estimate is not well below
        :data:`BROADCAST_ROWS` is the frame itself counted (a job of its own).
        """
        F = _functions()
        if self.items_estimate <= BROADCAST_ROWS // 2:  # HyperLogLog errs by a few percent
            return pairs.join(F.broadcast(items), _I, how)
        items = self.cache(items)
        with self.timed("count a small item set"):
            n = items.count()
        return pairs.join(F.broadcast(items) if n <= BROADCAST_ROWS else items, _I, how)

    def python_partitions(self) -> int:
        """Tasks of a pandas pass over the pairs or an item frame: one per core, more only
        when a call would hold more than :data:`PAIRS_PER_CALL` of the input's pairs
        (:func:`~userdp.spark.python_partitions`; a round's pairs and item frames are at most
        the input's pairs)."""
        return python_partitions(self.pairs.sparkSession, self.n_pairs, PAIRS_PER_CALL)

    def cut(self, df: DataFrame, what: str = "cut the lineage of an item set") -> DataFrame:
        """``df`` materialized with its lineage cut (an eager local checkpoint, kept in the
        executors' block stores; Spark frees it when the driver drops the frame). For item
        frames only: a checkpoint forgets the pairs' partitioning by user."""
        with self.timed(what):
            return df.localCheckpoint(eager=True)

    def uncache(self, df: DataFrame) -> None:
        """Free a cached frame nothing uncached depends on any more (or the cached frame a
        projection returned by :meth:`capped` reads: unpersisting a projection frees nothing)."""
        gone = [df, *(cached for view, cached in self._views if view is df)]
        for frame in gone:
            frame.unpersist()
        self._cached = [c for c in self._cached if all(c is not g for g in gone)]
        self._views = [(v, c) for v, c in self._views if v is not df]

    def cache(self, df: DataFrame) -> DataFrame:
        """Persist ``df`` (memory, spilling to disk) until the run finishes."""
        df = df.persist(self._storage)
        self._cached.append(df)
        return df

    # -- capping (Alg. 1 lines 3-5) -------------------------------------------------------------
    def capped(self, pairs: DataFrame, rank: bool = True) -> DataFrame:
        """Each user's ``cap`` pairs of smallest key ``xxhash64(hu, hi)``, with degree ``_deg``.

        The order (signed key, then item hash) is the local engine's (:func:`cap_degrees`).
        ``rank=False`` keeps every pair and only recomputes degrees (no re-capping; not cached:
        a round reads them once, except the full Alg. 3 of a biased round that truncates). The
        input itself (:attr:`pairs`) is ranked already: its capped sets are a filter of it.
        """
        F = _functions()

        user = self.user_window()
        n = F.count(F.lit(1)).over(user)
        if not rank:  # no capping: the local engine records nothing either
            return pairs.withColumn("_deg", n.cast("double"))
        if pairs is self.pairs:
            self.dropped.append(self.dropped_by(self.cap))
            return pairs.where(F.col("_rn") <= self.cap).select(
                *_BASE, F.least(F.col("_n"), F.lit(self.cap)).cast("double").alias("_deg")
            )
        order = user.orderBy(F.xxhash64(F.col(_HU), F.col(_HI)), F.col(_HI))
        ranked = pairs.withColumn("_rn", F.row_number().over(order)).withColumn("_n", n)
        kept = self.cache(
            ranked.where(F.col("_rn") <= self.cap).withColumn(
                "_deg", F.least(F.col("_n"), F.lit(self.cap)).cast("double")
            )
        )
        first = F.col("_rn") == 1
        with self.timed(f"cap round {len(self.dropped) + 1}"):
            row = kept.agg(
                F.sum(
                    F.when(first, F.greatest(F.col("_n") - self.cap, F.lit(0))).otherwise(0)
                ).alias("dropped"),
            ).collect()[0]
        self.dropped.append(int(row["dropped"] or 0))
        view = kept.drop("_rn", "_n")
        self._views.append((view, kept))
        return view

    # -- release (Alg. 1 lines 6-9) -------------------------------------------------------------
    def release(
        self,
        rnd: Round,
        weights: DataFrame,
        all_items: DataFrame | None = None,
        pooled: PooledTest | None = None,
        carry: bool = False,
        tau: float | None = None,
    ) -> tuple[DataFrame, DataFrame] | None:
        """Noisy weights (``_noisy``) and the released items of one round.

        ``weights`` has one row per item present in the round (``_i, _hi, _ib, _w``). With
        ``all_items``, every item of the input gets noisy weight (pure noise when absent: the
        w_ext of line 9, queried by MAD2R's round 2); only present items can be released, and
        the other columns of ``all_items`` (the earlier rounds' noisy weights ``_x0, _x1, ...``
        and ``_gone``, removed so far) are carried into the result. ``pooled``: ``all_items``
        carries every earlier round's noisy weight, and the present items that pass the pooled
        test on them and this round's are released (the same float operations, in the same
        order, as the local runner). ``carry`` without ``all_items``: the round's items are every
        item a later round can hold (rounds that keep the first capped sets), so this frame
        starts the carried columns (``_gone`` false).

        ``tau``: ``weights`` are a biased round's partial sums with their w_init (``_wi``,
        :func:`~userdp.partition._spark_weights._biased_partials`), added up in the noise's
        pandas call; if an item's w_init exceeds ``tau`` (the largest is observed by the job
        that checkpoints the noisy frame), they are not the round's weights: the noisy frame
        and its release are dropped, nothing is composed or counted, and the result is None
        (the caller computes the full Alg. 3 and calls again; the noise is a function of the
        run's entropy, round, bucket and items, so it draws the same noise).

        The noisy frame is checkpointed (its lineage cut) as the round's job computes it: the
        next round's item frames and removals are filters and projections of it, so no round's
        plan nests the earlier rounds' plans (see the module docstring).
        """
        F = _functions()
        from pyspark.sql.types import BooleanType, DoubleType, StructField, StructType

        round_index = len(self.round_sizes)
        tap = self.tap
        noise: Any = _ExecutorNoise(self.entropy)
        if tap is not None and tap.noise is not None:  # tests only
            noise = _TapNoise(tap.noise)
        partial = tau is not None
        own = [F.col("_wi")] if partial else []
        join: tuple[str, list[str]] | None = None
        bypass: DataFrame | None = None  # carried items that need no noise (see below)
        if all_items is None:
            gone = [F.lit(False).alias("_gone")] if carry else []
            frame = weights.select(*_ITEM, "_w", F.lit(True).alias("_present"), *gone, *own)
            fields = [f for f in frame.schema.fields if f.name != "_wi"]
        else:
            # every item of ``all_items`` (left) or the present ones (inner), with the columns
            # it carries: a union of the two sides, joined in the noise's pandas call (one
            # shuffle, by bucket, instead of two for a join and one for the noise)
            if pooled is None:
                join = ("left", [c for c in all_items.columns if c not in _ITEM])
            else:  # only present items are noised and tested, with their earlier noisy weights
                join = ("inner", [c for c in all_items.columns if c.startswith("_x")])
            given = {f.name: f for f in all_items.schema.fields}
            if "_gone" in given:
                # Items removed in earlier rounds hold no pair of this round or any later one:
                # their noisy weight would never be read (never present, so never released,
                # tested or biased; ``_gone`` keeps them removed). They skip the noise's shuffle
                # and pandas call, and join its output with no noise drawn (NaN).
                if join[0] == "left":
                    bypass = all_items.where(F.col("_gone")).select(
                        *_ITEM,
                        F.lit(0.0).alias("_w"),
                        F.lit(False).alias("_present"),
                        *join[1],
                        *([F.lit(0.0).alias("_wi")] if partial else []),
                        F.lit(float("nan")).alias("_noisy"),
                    )
                all_items = all_items.where(~F.col("_gone"))
            fields = [
                *(given[c] for c in _ITEM),
                StructField("_w", DoubleType(), True),
                StructField("_present", BooleanType(), False),
                *(given[c] for c in join[1]),
            ]
            nulls = [F.lit(None).cast(given[c].dataType).alias(c) for c in join[1]]
            no_wi = [F.lit(None).cast("double").alias("_wi")] if partial else []
            frame = weights.select(*_ITEM, "_w", *nulls, F.lit(0).alias("_side"), *own).unionByName(
                all_items.select(
                    *_ITEM,
                    F.lit(None).cast("double").alias("_w"),
                    *join[1],
                    F.lit(1).alias("_side"),
                    *no_wi,
                )
            )
        schema = StructType(
            [
                *fields[:3],
                StructField("_w", DoubleType(), False),
                StructField("_present", BooleanType(), False),
                *fields[5:],
                *([StructField("_wi", DoubleType(), False)] if partial else []),
                StructField("_noisy", DoubleType(), False),
            ]
        )
        body = functools.partial(
            _add_noise, noise, round_index, rnd.sigma, join=join, partial=partial
        )
        shuffled = frame.repartition(self.python_partitions(), _IB)  # whole buckets
        noisy = shuffled.mapInPandas(whole_partition(body), schema)
        if bypass is not None:
            noisy = noisy.unionByName(bypass)
        if pooled is None:
            passed = F.col("_noisy") >= rnd.rho
        else:
            assert join is not None  # the pooled test reads the carried noisy weights
            history = sorted(join[1], key=lambda c: int(c[2:]))
            xs = [F.col(c) for c in history] + [F.col("_noisy")]
            passed = pooled.passes(xs, _ColumnOps)
        found = F.col("_present") & passed
        # The job that computes and checkpoints the noisy frame counts, on the way, the items
        # it releases and all its items, and finds the largest w_init of partial sums: no job
        # of its own, and the released items stay a filter of the checkpoint (not cached).
        from pyspark.sql import Observation

        counts = Observation()
        metrics = [
            F.sum(F.when(found, 1).otherwise(0)).alias("released"),
            F.count(F.lit(1)).alias("items"),
        ]
        if partial:
            metrics.append(F.max("_wi").alias("wi"))
        noisy = self.cut(
            noisy.observe(counts, *metrics), f"weights and noise of round {round_index + 1}"
        )
        stats = counts.get
        if tau is not None:
            if (stats["wi"] or 0.0) > tau:  # an item is truncated: not the weights
                return None
            noisy = noisy.drop("_wi")
        released = noisy.where(found).select(*_ITEM)
        size = int(stats["released"] or 0)
        if tap is not None:  # tests only: the round's weights, one row per item
            per_item = weights.groupBy(_I).agg(F.sum("_w").alias("_w")) if partial else weights
            tap.weights.append(per_item.select(_I, "_w"))
        check_item_count(int(stats["items"]))
        self.accountant.compose(rnd.event)
        self.round_sizes.append(size)
        return noisy, released

    def finish(
        self,
        released: Sequence[DataFrame],
        algorithm: str,
        parameters: dict[str, Any],
        total: PrivacyBudget,
        gaussian_delta: float = 0.0,
    ) -> SparkSelectionResult:
        F = _functions()
        spent = self.accountant.spent(gaussian_delta)
        if not total.covers(spent):  # pragma: no cover - a bug, never user input
            raise RuntimeError(f"{algorithm} spent {spent}, more than its budget {total}.")
        union = functools.reduce(lambda a, b: a.unionByName(b), released)
        items = union.select(F.col(_I).alias(self.item_column)).persist(self._storage)
        with self.timed("collect the released items"):
            items.count()  # materialize before the intermediate frames go
        for df in self._cached:
            df.unpersist()
        self._cached.clear()
        self._views.clear()
        return SparkSelectionResult(
            dataframe=items,
            algorithm=algorithm,
            budget=spent,
            parameters=parameters,
            dp_event=dp_accounting.ComposedDpEvent(list(self.accountant.ledger)),
            diagnostics=SelectionDiagnostics(
                n_users=self.n_users,
                n_pairs=self.n_pairs,
                duplicates_dropped=self.n_rows - self.n_pairs,
                pairs_dropped_by_capping=tuple(self.dropped),
                round_sizes=tuple(self.round_sizes),
                seconds=time.perf_counter() - self.start,
            ),
        )

    def abort(self) -> None:
        for df in self._cached:
            df.unpersist()
        self._cached.clear()
        self._views.clear()


def _without(run: _SparkRun, pairs: DataFrame, items: DataFrame) -> DataFrame:
    """Pairs whose item is not in ``items``."""
    return run.join_items(pairs, items.select(_I), "left_anti")


# -- the runner ---------------------------------------------------------------------------------
class _ColumnOps:
    """What a between-rounds ``decide`` may call, on Spark columns (NumPy's names)."""

    @staticmethod
    def maximum(a: Any, b: Any) -> Any:
        F = _functions()
        return F.greatest(*(x if hasattr(x, "alias") else F.lit(x) for x in (a, b)))

    @staticmethod
    def abs(a: Any) -> Any:
        return _functions().abs(a)


class SparkRunner:
    """:class:`~userdp.partition.runner.Runner` on Spark DataFrames.

    Same steps and weights as the local runner: for a given seed both cap every user to the
    same items, so their pre-noise weights agree to float round-off. Items removed so far and
    the next round's biases are one small item frame (``_i, _removed, _b``), broadcast to the
    pairs when small.
    """

    def __init__(
        self,
        data: Any,
        *,
        caller: str,
        max_items_per_user: int,
        seed: int | None = None,
        user_column: str = "user",
        item_column: str = "item",
        _tap: Tap | None = None,
    ) -> None:
        self.run = _SparkRun(data, caller, user_column, item_column, max_items_per_user, seed)
        self.run.tap = _tap
        self.max_items_per_user = self.run.cap
        self.capped_pairs: DataFrame | None = None
        self.info: DataFrame | None = None  # items removed (_removed) or biased (_b < 1)
        self._first_capped: DataFrame | None = None
        # without re-capping: the pairs left after the first removals, cached (see ``cap``)
        self._survivors: DataFrame | None = None
        self._items: DataFrame | None = None  # every item of the input, cached, ``_gone`` false
        # the last every-item round's noisy frame and what ``remove`` removed from it (or None)
        self._noisy_all: tuple[DataFrame, Any] | None = None
        self._gone_tracks_all = True  # ``_gone`` holds every removal so far
        self._recap: bool | None = None  # the first cap's choice, which every round keeps
        # a biased MAD round's rule while its weights are partial sums (see ``_noised``)
        self._partial_rule: Mad | None = None

    def release_degree_histogram(self, sigma: float) -> np.ndarray:
        """As the local runner's: the driver collects (degree, number of users) only."""
        degree, users = self.run.degree_counts()
        # degree_counts over the users, from (degree, users) without one entry per user
        bins = np.searchsorted(DEGREE_EDGES, degree, side="right") - 1
        exact = np.bincount(bins, weights=users, minlength=DEGREE_EDGES.size)
        rng = spawn_generator(self.run.entropy, HISTOGRAM_STREAM)
        self.run.accountant.compose(dp_accounting.GaussianDpEvent(sigma))
        return gaussian_on_grid(rng, exact, sigma, l2=1.0)

    def set_cap(self, cap: int) -> None:
        self.run.cap = self.max_items_per_user = cap

    def cap(self, *, recap: bool = True) -> None:
        run, F = self.run, _functions()
        if self.capped_pairs is None:
            self._recap = recap
            self.capped_pairs = self._first_capped = run.capped(run.pairs)
            return
        if recap != self._recap:  # pragma: no cover - a bug, never user input
            raise RuntimeError("A run re-caps in every round after the first, or in none.")
        # Without re-capping: the first capped sets minus every item removed so far (``info``
        # keeps them all), as the previous round's sets minus the new removals would be, with a
        # plan that does not nest every earlier round's (see the module docstring).
        assert self._first_capped is not None  # set with capped_pairs by the first call
        source = self._first_capped if self._survivors is None else self._survivors
        # without re-capping no round orders by the user's hash: the survivors' cache holds it
        # only where the windows by user need it (:attr:`_SparkRun.user_keys`)
        base = run.pairs.select(*_BASE) if recap else source.select(*run.pair_columns())
        left = base
        if self.info is not None:
            left = (
                run.join_items(base, self.info, "left")
                .where(~F.coalesce(F.col("_removed"), F.lit(False)))  # Alg. 4 line 13
                .withColumn("_b", F.coalesce(F.col("_b"), F.lit(1.0)))
                .drop("_removed")
            )
        kept = (self._first_capped, self._survivors)  # cached for every later round
        if recap or all(self.capped_pairs is not k for k in kept):
            run.uncache(self.capped_pairs)  # done: their weights are computed and cached
        self.capped_pairs = run.capped(left, rank=recap)
        if not recap and self.info is not None and self._survivors is None:
            # The first round that removes items keeps the pairs that survive (28% of the
            # 9.5M capped pairs at 10M rows), cached by the round's own job as it reads them
            # (after the window that counts degrees, whose partitioning by user the cache keeps
            # for the later rounds' windows); later rounds read them instead of every capped
            # pair (their removals include this round's, so the result is the same).
            self.capped_pairs = self._survivors = run.cache(self.capped_pairs)

    def weights(self, rule: Basic | Mad, *, partials: bool = True) -> DataFrame:
        """A round's item weights; a biased MAD round's as partial sums (``partials``), added
        up and checked for truncation where they are noised (:meth:`_noised`)."""
        F = _functions()
        capped = self.capped_pairs
        assert capped is not None  # cap() runs before every round's weights
        self._partial_rule = None
        if isinstance(rule, Basic):
            return _basic_weights(capped)
        if rule.biased and "_b" not in capped.columns:
            capped = capped.withColumn("_b", F.lit(1.0))
        if rule.biased and partials:
            self._partial_rule = rule
        return _mad_weights(
            self.run,
            capped,
            tau=rule.tau,
            d_max=rule.d_max,
            biased=rule.biased,
            b_min=rule.b_min,
            b_max=rule.b_max,
            partials=rule.biased and partials,
        )

    def _noised(
        self, weights: DataFrame, call: Callable[..., tuple[DataFrame, DataFrame] | None]
    ) -> tuple[DataFrame, DataFrame]:
        """``call(weights, tau=...)``, a :meth:`_SparkRun.release`: for a biased MAD round's
        partial sums with the rule's tau to check, and when an item is truncated once more
        with the full Alg. 3's weights (the partial sums are those weights only when no item's
        w_init exceeds tau; the two paths give the same weights, so which one ran reveals
        nothing the release does not)."""
        rule, self._partial_rule = self._partial_rule, None
        if rule is None:
            out = call(weights)
        else:
            out = call(weights, tau=rule.tau)
            if out is None:
                out = call(self.weights(rule, partials=False))
        assert out is not None  # only a partial sums' check returns None
        return out

    def _carried(self) -> DataFrame:
        """Every item a later round can hold (of the input; of round 1 without re-capping) with
        ``_gone`` (removed so far) and the noisy weights of the earlier every-item rounds
        (``_x0, _x1, ...``): a projection of the last such round's checkpointed noisy frame
        (cached distinct items of the input before the first)."""
        F = _functions()
        if self._noisy_all is None:
            if self._items is None:
                self._items = self.run.cache(
                    with_bucket(self.run.pairs.select(_I, _HI).distinct()).withColumn(
                        "_gone", F.lit(False)
                    )
                )
            return self._items
        noisy, removed = self._noisy_all
        xs = [c for c in noisy.columns if c.startswith("_x")]
        gone = F.col("_gone") if removed is None else removed
        return noisy.select(*_ITEM, gone.alias("_gone"), *xs, F.col("_noisy").alias(f"_x{len(xs)}"))

    def release(
        self, weights: DataFrame, rnd: Round, *, every_item: bool = False
    ) -> tuple[DataFrame, DataFrame]:
        run = self.run
        if not every_item:
            return self._noised(weights, functools.partial(run.release, rnd))
        if self._noisy_all is None and self._recap is False:
            # Without re-capping, a later round holds only items of the first capped sets, all
            # present now: the other items' pure noise would never be read (nor released), so
            # this round noises its own items, with no distinct pass and join over the input.
            call = functools.partial(run.release, rnd, carry=True)
        else:
            call = functools.partial(run.release, rnd, all_items=self._carried())
        noisy, released = self._noised(weights, call)
        self._noisy_all = (noisy, None)
        return noisy, released

    def release_pooled(
        self, weights: DataFrame, rnd: Round, history: Sequence[DataFrame], test: PooledTest
    ) -> tuple[DataFrame, DataFrame]:
        items = self._carried()
        if sum(c.startswith("_x") for c in items.columns) != len(history):
            raise RuntimeError(  # pragma: no cover - a bug, never user input
                "The pooled test needs every earlier round's noisy weight of every item."
            )
        call = functools.partial(self.run.release, rnd, all_items=items, pooled=test)
        return self._noised(weights, call)

    def remove(self, noisy: DataFrame, decide: Decide) -> None:
        F = _functions()
        removed, bias = decide(F.col("_noisy"), F.col("_present"), _ColumnOps)
        bias = F.lit(1.0) if bias is None else bias
        if "_gone" in noisy.columns and self._gone_tracks_all:
            # an every-item round: its (checkpointed) frame knows every earlier removal
            removed = F.col("_gone") | removed
            if self._noisy_all is not None and self._noisy_all[0] is noisy:
                self._noisy_all = (noisy, removed)
            self.info = (
                noisy.select(_I, removed.alias("_removed"), bias.alias("_b"))
                .where(F.col("_removed") | (F.col("_b") < 1.0))
                .withColumn("_b", F.when(F.col("_removed"), 1.0).otherwise(F.col("_b")))
            )
            return
        self._gone_tracks_all = False
        info = noisy.select(_I, removed.alias("_removed"), bias.alias("_b")).where(
            F.col("_removed") | (F.col("_b") < 1.0)
        )
        if self.info is not None:  # items removed in earlier rounds stay removed
            info = (
                self.info.where(F.col("_removed"))
                .unionByName(info)
                .groupBy(_I)
                .agg(F.max("_removed").alias("_removed"), F.min("_b").alias("_b"))
            )
        info = info.withColumn("_b", F.when(F.col("_removed"), 1.0).otherwise(F.col("_b")))
        # the next rounds' plans start here, not at every earlier round (see the module docstring)
        self.info = self.run.cut(info)

    def finish(
        self, released: Sequence[DataFrame], algorithm: str, parameters: dict[str, Any], plan: Plan
    ) -> SparkSelectionResult:
        return self.run.finish(released, algorithm, parameters, plan.budget, plan.gaussian_delta)

    def abort(self) -> None:
        self.run.abort()


def read(
    path: str | os.PathLike[str],
    *,
    format: str | None = None,
    header: bool = True,
    spark: Any = None,
) -> DataFrame:
    """Read a CSV/TSV/Parquet/JSON Lines file or directory of part files as a DataFrame.

    CSV/TSV columns are strings, as in :func:`userdp.data.read`: no schema inference and no
    null markers, so "", "NA" and "01" are distinct items on both engines.
    """
    from userdp.data.io import FORMATS, infer_format
    from userdp.spark import spark_session

    session = spark or spark_session()
    fmt = format or infer_format(path)
    if fmt not in FORMATS:
        raise InvalidParameterError(
            f"The 'format' parameter of read must be one of {', '.join(FORMATS)}. Got {fmt!r}."
        )
    path = os.fspath(path)
    if "://" not in path and not path.startswith("file:"):
        # Spark resolves relative paths against the JVM's directory, not Python's
        path = os.path.abspath(path)
    reader = session.read
    try:
        if fmt in ("csv", "tsv"):
            frame = reader.csv(
                path,
                sep="\t" if fmt == "tsv" else ",",
                header=header,
                inferSchema=False,
                # a row with more or fewer fields than the header fails, as on the local engine
                mode="FAILFAST",
            )
            # Spark reads an empty field as null; the local engine reads it as the empty
            # string, which is what the file holds. No other value is a null marker.
            return frame.na.fill("")
        if fmt == "parquet":
            return reader.parquet(path)
        return reader.json(path)
    except Exception as err:  # AnalysisException (missing path, bad file) has no stable import
        raise DataError(f"Spark cannot read {path!r} as {fmt}: {err}") from err
