"""The Spark runner of :class:`~userdp.recommend.MatrixFactorization` (``engine="spark"``) and
of the AM-SSP statistics of :class:`~userdp.recommend.PublicFeatureRecommender`.

It computes, from a Spark DataFrame of ``(user, item, rating)`` rows, the exact statistics the
training loop of :mod:`userdp.recommend.engines.local` asks for, for every method; the noise is
drawn on the driver as locally, so a seed releases the same model on both engines. The
per-partition kernels are :mod:`userdp.recommend.engines._spark_kernels`'s; docs/recommend.md
("On Apache Spark") says what runs where and what the driver holds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from userdp.exceptions import DataError, InvalidParameterError
from userdp.multitask.allocation import release_counts
from userdp.privacy.noise import NoiseSource
from userdp.recommend.core.centring import centre_cap, release_mean
from userdp.recommend.core.items import ItemSet
from userdp.recommend.core.spec import Allocation, ItemUpdateSpec, RunSpec
from userdp.recommend.engines._spark_kernels import (
    _B,
    _C,
    _D,
    _I,
    _J,
    _N,
    _PARTIAL,
    _PREPARED,
    _R,
    _S,
    _TRAINING,
    _gradient_bucket,
    _prepare_bucket,
    _step_bucket,
    _sum_partials,
    _training_bucket,
)
from userdp.recommend.engines.local import Preamble, UserSolve
from userdp.spark import require_pyspark, whole_partition

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from pyspark.sql import DataFrame

__all__ = ["MAX_DRIVER_BYTES", "SparkRunner"]

#: The most bytes of item statistics (m x d'^2 float64) the driver is asked to hold.
MAX_DRIVER_BYTES = 2 << 30


class _SparkGradient:
    """``gradient(U, V, clip)`` as :class:`~userdp.recommend.core.steps.GradientOperator`
    offers it, computed by a Spark pass (``V`` lives on the executors and is ignored)."""

    def __init__(self, runner: SparkRunner) -> None:
        self.runner = runner

    def gradient(self, U: np.ndarray, V: np.ndarray, clip: float) -> np.ndarray:
        return self.runner._gradient(U, clip)


class SparkRunner:
    """Statistics of :class:`~userdp.recommend.MatrixFactorization` from a Spark DataFrame.

    Parameters
    ----------
    data : pyspark.sql.DataFrame
        One row per (user, item) pair, distinct pairs; ratings finite.
    user_column, item_column, rating_column : str
        Column names (defaults ``user``, ``item``, ``rating``).
    buckets : int or None, default=None
        Partitions of users (tasks of every pass) and buckets of items; None: twice the
        default parallelism.

    docs/recommend.md ("On Apache Spark") says what runs where and what the driver holds.
    """

    def __init__(
        self,
        data: Any,
        *,
        user_column: str = "user",
        item_column: str = "item",
        rating_column: str = "rating",
        buckets: int | None = None,
    ) -> None:
        require_pyspark()
        from pyspark.sql import DataFrame

        if not isinstance(data, DataFrame):
            raise DataError(
                f"The Spark engine takes a pyspark.sql.DataFrame; got {type(data).__name__}. "
                "Use the local engine for in-memory tables."
            )
        for col in (user_column, item_column, rating_column):
            if col not in data.columns:
                raise DataError(
                    f"Column {col!r} not found; the input has columns {data.columns!r}. Name "
                    "the columns user, item and rating (CLI: --user-column/--item-column/"
                    "--rating-column)."
                )
        self.data = data
        self.columns = (user_column, item_column, rating_column)
        self.spark = data.sparkSession
        self.buckets = buckets or 2 * self.spark.sparkContext.defaultParallelism
        self._frames: list[DataFrame] = []

    # -- preamble -------------------------------------------------------------------------------
    def check(self, spec: RunSpec, item_set: ItemSet | None) -> None:
        """Refuse an item set whose statistics the driver cannot hold (m x d'^2 floats over
        :data:`MAX_DRIVER_BYTES`), before anything is charged or read."""
        if item_set is None:  # the data's items: checked in prepare, once they are known
            return
        m = len(item_set)
        d = int(spec.dim) + (1 if spec.biased else 0)
        if m * d * d * 8 > MAX_DRIVER_BYTES:
            raise InvalidParameterError(
                f"The Spark engine collects the item statistics (m x d'^2 floats) to the "
                f"driver: {m} items x {d}^2 x 8 bytes exceed MAX_DRIVER_BYTES "
                f"({MAX_DRIVER_BYTES} bytes). Use a smaller dim or item set."
            )

    def prepare(
        self,
        spec: RunSpec,
        item_set: ItemSet | None,
        noise: NoiseSource,
        *,
        count_noise: float | None,
        center_noise: float | None,
    ) -> Preamble:
        """Code the rows on the fixed item set, release the counts and the centre."""
        from pyspark.sql import functions as F

        user, item, rating = self.columns
        if item_set is None:  # non-private training on the data's items (sorted)
            rows = self.data.select(item).distinct().collect()
            labels = pa.array(sorted(r[0] for r in rows if r[0] is not None))
            item_set = ItemSet(labels, "data")
        vocab = item_set.labels.to_pylist()
        m = len(vocab)
        self.check(spec, item_set)
        codes = self.spark.createDataFrame([(v, c) for c, v in enumerate(vocab)], ["_v", "_code"])
        df = self.data.select(
            F.col(f"`{user}`").alias("_u"),
            F.col(f"`{item}`").alias("_l"),
            F.col(f"`{rating}`").cast("double").alias(_R),
        )
        bad = df.filter(
            F.col("_u").isNull()
            | F.col("_l").isNull()
            | F.col(_R).isNull()
            | F.isnan(_R)
            | F.col(_R).isin(float("inf"), float("-inf"))
        ).count()
        if bad:
            raise DataError(
                f"{bad} row(s) have an empty user or item, or a non-finite rating; drop them first."
            )
        df = (
            df.join(F.broadcast(codes), F.col("_l") == F.col("_v"), "left")
            .select("_u", "_l", _R, F.coalesce(F.col("_code"), F.lit(-1)).alias(_I))
            .repartition(self.buckets, "_u")  # whole users per partition, balanced
            .withColumn(_B, F.spark_partition_id().cast("long"))
        )
        salt, cs = noise.salt, int(spec.count_sample)

        def prep(pdf: pd.DataFrame) -> pd.DataFrame:
            return _prepare_bucket(vocab, salt, cs, pdf)

        self.prepared = self._keep(df.mapInPandas(whole_partition(prep), _PREPARED))
        inside = F.col(_I) >= 0
        row = self.prepared.agg(
            F.sum(F.when(~inside, 1).otherwise(0)).alias("dropped"),
            F.min(F.when(inside, F.col(_R))).alias("lo"),
            F.max(F.when(inside, F.col(_R))).alias("hi"),
            F.countDistinct(F.when(inside, F.struct(_B, _J))).alias("users_inside"),
            F.countDistinct(_B, _J).alias("users"),
            F.sum(F.col(_D).cast("long")).alias("repeated"),
        ).collect()[0]
        if row["repeated"]:
            raise DataError(
                f"The ratings repeat {row['repeated']} (user, item) pair(s); every pair must "
                "appear once (aggregate repeated rows first, e.g. keep each pair's last rating)."
            )
        self.n_users = int(row["users"])
        lo, hi = spec.rating_range if spec.rating_range is not None else (row["lo"], row["hi"])
        lo, hi = float(lo), float(hi)
        private = count_noise is not None
        counted = inside & F.col(_C) if private else inside
        per_item = self.prepared.filter(counted).groupBy(_I).count().collect()
        exact = np.zeros(m)
        for r in per_item:
            exact[int(r[_I])] = float(r["count"])
        counts = released_total = None
        if private:
            assert count_noise is not None  # private
            counts = release_counts(
                exact, float(row["users_inside"]), cs, count_noise, noise
            ).counts
            released_total = float(np.sum(counts))
        center = self._centre(spec, lo, hi, center_noise, noise, released_total)
        self._range = (lo, hi, center)
        return Preamble(
            item_set,
            item_set.labels,
            m,
            int(row["dropped"]),
            lo,
            hi,
            counts,
            None if private else exact,
            center,
        )

    def _centre(
        self,
        spec: RunSpec,
        lo: float,
        hi: float,
        noise_multiplier: float | None,
        noise: NoiseSource,
        released_total: float | None,
    ) -> float:
        """The centre over every rating (items outside the set too), as ``centre_all``."""
        from pyspark.sql import functions as F

        center = spec.center
        if not isinstance(center, str):
            return float(np.clip(center, lo, hi))
        mid, hw = 0.5 * (lo + hi), 0.5 * (hi - lo)
        if center == "midpoint":
            return mid
        r = F.least(F.greatest(F.col(_R), F.lit(lo)), F.lit(hi))
        if noise_multiplier is None:
            value = self.prepared.agg(F.avg(r)).collect()[0][0]
            return mid if value is None else float(value)
        if center == "sampled-mean":
            k = float(spec.count_sample)
            w = F.when(F.col(_S), 1.0).otherwise(0.0)
        else:
            k = centre_cap(released_total, spec.count_sample, noise_multiplier, lo, hi)
            w = F.least(F.lit(1.0), F.lit(k) / F.greatest(F.col(_N), F.lit(1)))
        row = self.prepared.agg(
            F.sum(w * (r - F.lit(mid))).alias("total"), F.sum(w).alias("count")
        ).collect()[0]
        statistic = np.array([(row["total"] or 0.0) / (k * hw), (row["count"] or 0.0) / k])
        return release_mean(statistic, lo, hi, noise_multiplier, noise)

    # -- training rows --------------------------------------------------------------------------
    def restrict(self, trained: np.ndarray) -> None:
        """Train on the rows of ``trained`` items only (decided from released counts)."""
        self.trained = np.asarray(trained, dtype=bool)
        self.rule: Allocation | None = None
        self.counts: np.ndarray | None = None
        self.training: DataFrame | None = None

    def allocate(self, rule: Allocation, counts: np.ndarray | None, noise: NoiseSource) -> None:
        """The training rows and their allocation weights, per partition of users, from the row
        keys and the released ``counts`` (no noise drawn; None: not private, weight 1)."""
        if counts is not None:
            self.rule = rule
            self.counts = np.asarray(counts, dtype=np.float64)
        self._training()

    def _training(self) -> DataFrame:
        if self.training is None:
            trained, rule, counts = self.trained, self.rule, self.counts

            def rows(pdf: pd.DataFrame) -> pd.DataFrame:
                return _training_bucket(trained, rule, counts, pdf)

            frame = self.prepared.mapInPandas(whole_partition(rows), _TRAINING)
            self.training = self._keep(frame)
        return self.training

    # -- one step -------------------------------------------------------------------------------
    def solve_users(self, U: np.ndarray, how: UserSolve, reg: float) -> None:
        """Record the step's user solve; it runs on the executors with the item statistics."""
        self._solve = (np.ascontiguousarray(U), how, float(reg))
        self._result: dict[bool, tuple] = {}

    def _step(self, weighted: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if weighted in self._result:
            return self._result[weighted]

        U, how, reg = self._solve
        lo, hi, center = self._range
        k = U.shape[1]
        n_tri = k * (k + 1) // 2
        zz = self._items_gram(U, how)
        n_groups = self.buckets

        def step(pdf: pd.DataFrame) -> pd.DataFrame:
            return _step_bucket(U, how, reg, lo, hi, center, weighted, zz, n_groups, pdf)

        # col : (item bucket, item codes, upper(A_i) and b_i of those items), partial per
        # partition of users, then summed per item bucket.
        partial = self._training().mapInPandas(whole_partition(step), _PARTIAL)
        rows = partial.groupBy("_g").applyInPandas(_sum_partials, _PARTIAL).collect()
        m = self.trained.size
        tri, moment = np.zeros((m, n_tri)), np.zeros((m, k))
        gravity = np.zeros(k * k + 1)
        for r in rows:
            x = np.frombuffer(r["_x"], dtype=np.float64)
            if r["_g"] < 0:
                gravity = x
            else:
                codes = np.frombuffer(r["_c"], dtype=np.int64)
                x = x.reshape(codes.size, n_tri + k)
                tri[codes], moment[codes] = x[:, :n_tri], x[:, n_tri:]
        gram = np.empty((m, k, k))
        iu = np.triu_indices(k)
        gram[:, iu[0], iu[1]] = tri
        gram[:, iu[1], iu[0]] = tri
        g = gravity[:-1].reshape(k, k).copy()
        if how.biased:  # users without trained rows: v = 0, x = [0, beta]
            g[k - 1, k - 1] += (self.n_users - gravity[-1]) * how.beta**2
        self._result[weighted] = (gram, moment, g)
        return self._result[weighted]

    def gravity(self) -> np.ndarray:
        """``sum_j x_j x_j^T`` over all users (exact; the caller releases it)."""
        return self._step(self.rule is not None)[2]

    def item_statistics(self, weighted: bool) -> tuple[np.ndarray, np.ndarray]:
        """Every item's ``(A_i, b_i)``, summed over the partitions of users."""
        gram, moment, _ = self._step(weighted)
        return gram, moment

    def gd_update(
        self,
        model: ItemUpdateSpec,
        U: np.ndarray,
        freq: np.ndarray,
        plan: Any,
        noise: NoiseSource,
        gravity: np.ndarray | None,
        labels: Any,
    ) -> np.ndarray:
        """The DPSGD family's item update (:func:`~userdp.recommend.core.steps.gd_update`):
        every gradient is one pass (user solves against the step's factors, then clipped
        per-user gradients summed per item); the noise is added on the driver."""
        from userdp.recommend.core.steps import gd_update

        k = U.shape[1]
        return gd_update(
            model, U, np.empty((0, k)), _SparkGradient(self), freq, plan, noise, gravity, labels
        )

    def _gradient(self, U: np.ndarray, clip: float) -> np.ndarray:
        U0, how, reg = self._solve
        lo, hi, center = self._range
        zz, n_groups = self._items_gram(U0, how), self.buckets
        U = np.ascontiguousarray(U)

        def grad(pdf: pd.DataFrame) -> pd.DataFrame:
            return _gradient_bucket(U0, how, reg, lo, hi, center, zz, U, clip, n_groups, pdf)

        partial = self._training().mapInPandas(whole_partition(grad), _PARTIAL)
        out = np.zeros_like(U)
        for r in partial.groupBy("_g").applyInPandas(_sum_partials, _PARTIAL).collect():
            codes = np.frombuffer(r["_c"], dtype=np.int64)
            out[codes] = np.frombuffer(r["_x"], dtype=np.float64).reshape(codes.size, -1)
        return out

    @staticmethod
    def _items_gram(U: np.ndarray, how: UserSolve) -> np.ndarray | None:
        """The implicit term's ``Z^T Z`` over ALL items (released factors: public)."""
        if not how.alpha:
            return None
        Z = np.column_stack([U[:, : how.d], np.ones(U.shape[0])]) if how.biased else U
        return Z.T @ Z

    # -- book-keeping ---------------------------------------------------------------------------
    def _keep(self, frame: DataFrame) -> DataFrame:
        """Cache ``frame`` and cut its lineage (each later pass starts from it)."""
        kept = frame.localCheckpoint(eager=True)
        self._frames.append(kept)
        return kept

    def close(self) -> None:
        """Release the cached frames."""
        for frame in self._frames:
            frame.unpersist()
        self._frames.clear()
