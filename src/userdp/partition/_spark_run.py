"""One Spark selection's DataFrame work, for :class:`userdp.partition.spark.SparkRunner`: the
pairs prepared and ranked, capping, each round's noise and release, and the final result, with
the caches, checkpoints and job timings that go with them (docs/partition.md, "How the Spark
runner runs").
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import dp_accounting
import numpy as np

from userdp._validation import check_int
from userdp.data.hashing import canonical_column, is_integral
from userdp.exceptions import DataError
from userdp.partition._spark_noise import _add_noise, _ExecutorNoise, _TapNoise
from userdp.partition._spark_weights import (
    _BASE,
    _HI,
    _HU,
    _I,
    _IB,
    _ITEM,
    _U,
    BROADCAST_ROWS,
    _functions,
)
from userdp.partition.result import SelectionDiagnostics, SparkSelectionResult
from userdp.partition.rounds import PooledTest, Round, check_item_count
from userdp.partition.runner import Tap
from userdp.privacy import NoiseSource, PrivacyAccountant, PrivacyBudget
from userdp.spark import python_partitions, require_pyspark, whole_partition

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame

logger = logging.getLogger("userdp.spark")

#: Pairs one pandas call may hold at most (its partition of the input's pairs; about 2 GB at
#: the peak of the biased UserWeights pass): below it, a pandas pass runs one task per core.
PAIRS_PER_CALL = 8_000_000


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
        for name, col in (("user", user_column), ("item", item_column)):
            if stats[name]:
                raise DataError(
                    f"Column {col!r} has {stats[name]} null or NaN value(s); drop or fill them "
                    "before selecting."
                )
        # an empty input observes no row: its sums are null (zero pairs are a data set)
        self.n_users = int(stats["users"] or 0)
        self.n_pairs = int(stats["pairs"] or 0)
        self.items_estimate = int(stats["items"] or 0)
        self._dropped_at = {self.cap: int(stats["dropped"] or 0)}  # cap -> pairs it drops
        return ranked, int(stats["rows"] or 0)

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
        plan nests the earlier rounds' plans (docs/partition.md, "How the Spark runner runs").
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


class _ColumnOps:
    """What a between-rounds ``decide`` may call, on Spark columns (NumPy's names)."""

    @staticmethod
    def maximum(a: Any, b: Any) -> Any:
        F = _functions()
        return F.greatest(*(x if hasattr(x, "alias") else F.lit(x) for x in (a, b)))

    @staticmethod
    def abs(a: Any) -> Any:
        return _functions().abs(a)
