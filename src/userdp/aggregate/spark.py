"""The Spark engine of :func:`userdp.aggregate`: the local engine's statistics as DataFrames.

Answers the questions of :class:`userdp.aggregate.local.LocalEngine` with the same functions
where floating point could differ (per-pair statistics and user norms by the local engine's
NumPy arithmetic and norm bins by :func:`~userdp.aggregate.local.bin_of`, in pandas UDFs on the
executors; user weights by the same two IEEE operations as
:func:`~userdp.aggregate.local.user_weights`, as Spark columns), so its pre-noise statistics
equal the local ones up to the order of floating-point sums.

Steps: the input's columns are cached once (the selection reads them); the pairs are computed
by one shuffle of the rows on K by user and one pandas call per partition (a partition holds
its users whole), and cached; the norm histograms and the weighted per-key sums are each one
aggregation over that cache, with no further shuffle of rows or pairs.

What reaches the driver: counts (rows, users), the public key set (released keys or the
public list, broadcast back to the executors), one histogram of at most
:data:`~userdp.aggregate.local.HISTOGRAM_BINS` bins per family and one vector over the keys per
metric: nothing proportional to users or rows. Per-key quantiles run on the executors, each key
drawing from its own noise sub-stream, as locally.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from userdp.aggregate.local import (
    HISTOGRAM_BINS,
    Columns,
    bin_of,
    draw_key_quantile,
    pair_stats,
    user_norms,
)
from userdp.data.encoding import run_bounds, run_starts
from userdp.exceptions import DataError
from userdp.spark import python_partitions, require_pyspark, whole_partition

__all__ = ["SparkEngine"]

_U, _K, _V, _X = "_agg_u", "_agg_k", "_agg_v", "_agg_x"
#: Rows of one pandas call at most (about 100 MB of input columns and as much again while
#: it computes), when the input's row count sets the number of partitions.
_TASK_ROWS = 2_000_000
_PAIR_SCHEMA = (
    f"{_X} long, n double, s double, r_users double, r_count double, r_sum double, first boolean"
)


def _weight(norm: Any, c: float) -> Any:
    """:func:`~userdp.aggregate.local.user_weights` as a Spark column: ``min(C, r) / r`` for a
    norm ``r > 0``, else 1. The same two IEEE-754 operations (a minimum, a correctly rounded
    division) as ``smooth_weights``' ``np.minimum(h, s) / s``, so the same double per user."""
    from pyspark.sql import functions as F

    return F.when(norm > 0, F.least(F.lit(float(c)), norm) / norm).otherwise(F.lit(1.0))


def _pair_stats(
    pdf: pd.DataFrame, n_keys: int, centre: float, units: dict[str, float]
) -> pd.DataFrame:
    """One partition's (user, key) pairs (its users whole): row counts, centred value sums and
    the user's norms over K, by :class:`~userdp.aggregate.local.LocalEngine`'s arithmetic
    (pairs ordered by user, then key code), and the user's norm bin (:func:`bin_of`) for each
    family of ``units``."""
    user = pd.factorize(pdf[_U])[0].astype(np.int64)
    pu, pk, n, s = pair_stats(
        user, pdf[_X].to_numpy(np.int64), pdf[_V].to_numpy(np.float64), n_keys, centre
    )
    norms = user_norms(pu, n, s, int(pu[-1]) + 1 if pu.size else 0)
    first = run_starts(pu)  # one pair per user (the partition is not empty)
    out = {_X: pk, "n": n, "s": s, **{f"r_{f}": r[pu] for f, r in norms.items()}}
    out["first"] = first
    out.update({f"b_{f}": bin_of(norms[f], unit)[pu] for f, unit in units.items()})
    return pd.DataFrame(out)


class SparkEngine:
    """Rows held as a Spark DataFrame; statistics over a public key array."""

    name = "spark"

    def __init__(self, df: Any, cols: Columns) -> None:
        require_pyspark()
        from pyspark.sql import functions as F

        for role, name in (("user", cols.user), ("key", cols.key), ("value", cols.value)):
            if name is not None and name not in df.columns:
                raise DataError(
                    f"aggregate: the {role} column {name!r} is not in the data (columns: "
                    f"{', '.join(df.columns)})."
                )
        self.cols = cols
        self.spark = df.sparkSession
        sel = [F.col(f"`{cols.user}`").alias(_U)]
        sel.append(F.col(f"`{cols.key}`").alias(_K) if cols.key is not None else F.lit(0).alias(_K))
        if cols.value is not None:
            lo, hi = cols.bounds  # type: ignore[misc]
            v = F.col(f"`{cols.value}`").cast("double")
            sel.append(F.least(F.greatest(v, F.lit(lo)), F.lit(hi)).alias(_V))
        else:
            sel.append(F.lit(0.0).alias(_V))
        self._rows = df.select(*sel).cache()
        self._cached = [self._rows]  # every frame this run caches, freed by finish()
        stats = self._rows.agg(
            F.count(F.lit(1)).alias("n"),
            F.sum(F.when(F.col(_U).isNull(), 1).otherwise(0)).alias("bad"),
        )
        row = stats.collect()[0]
        if row["bad"]:
            raise DataError(f"aggregate: the user column {cols.user!r} has null values.")
        self._n_rows: int | None
        self.total_rows = self._n_rows = int(row["n"])
        self._n_users: int | None = None  # a job of its own, only if asked for
        self._memo: dict[tuple[str, float], Any] = {}  # cached frames of the current rows
        self._pair_units: dict[str, float] = {}  # the norm bins the cached pairs carry
        self.key_type = dict(df.dtypes).get(cols.key) if cols.key is not None else None
        self.n_keys = 0

    # -- selection input and the key set ------------------------------------------------------
    def selection_input(self) -> Any:
        from pyspark.sql import functions as F

        return self._rows.select(F.col(_U).alias("user"), F.col(_K).alias("item"))

    def set_keys(self, keys: pa.Array | None) -> None:
        from pyspark.sql import functions as F

        if keys is None:
            self.keys = None
            self.n_keys = 1
            self._rows = self._rows.withColumn(_X, F.lit(0).cast("long"))
            return
        self.n_keys = len(keys)
        self.keys = keys
        values = keys.to_pylist()
        key_field = self._rows.schema[_K].dataType
        given = "string" if all(isinstance(v, str) for v in values) else key_field.simpleString()
        frame = self.spark.createDataFrame(
            pd.DataFrame({_K: pd.Series(values, dtype=object), _X: np.arange(len(values))}),
            schema=f"{_K} {given}, {_X} long",
        ).withColumn(_K, F.col(_K).cast(key_field))  # a key list read as text, int keys
        self._rows = self._rows.join(F.broadcast(frame), on=_K, how="left")

    def restrict(self) -> None:
        """Drop rows outside K: a filter after the broadcast join, over the cached rows (no
        copy of its own: the pairs read it once, the quantiles' rows and sizes once each)."""
        from pyspark.sql import functions as F

        self._replace_rows(self._rows.where(F.col(_X).isNotNull()))

    def _replace_rows(self, rows: Any, *, cache: bool = False) -> None:
        """New rows (``cache``: cached once, materialised by the next job that needs them):
        every frame derived from the old rows is dropped, and the row count is left to that
        next job."""
        for frame in self._memo.values():
            frame.unpersist()
        self._memo = {}
        if cache:
            rows = rows.cache()
            self._cached.append(rows)
        self._rows = rows
        self._n_rows = None

    @property
    def n_users(self) -> int:
        """Distinct users of the input (a diagnostic; the key selection counts them too, so
        the driver asks for it only when keys are public)."""
        if self._n_users is None:
            from pyspark.sql import functions as F

            row = self._cached[0].agg(F.countDistinct(_U).alias("m")).collect()[0]
            self._n_users = int(row["m"])
        return self._n_users

    @property
    def n_rows(self) -> int:
        """Rows on K (a by-product of :meth:`weighted_sums`; a job of its own otherwise)."""
        if self._n_rows is None:
            self._n_rows = int(self._rows.count())
        return self._n_rows

    def random_keep(self, salt: int, l0: int, linf: int) -> None:
        """Hard limits with Spark's own per-row random numbers (seeded from the run's salt):
        the same distribution as locally, not the same rows (the local engine's keyed row
        keys need each row's input order, which a Spark DataFrame does not have)."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        self.restrict()
        seed = int(salt) % (2**31)
        rows = self._rows.withColumn("_r", F.rand(seed))
        rows = rows.withColumn(
            "_rr", F.row_number().over(Window.partitionBy(_U, _X).orderBy("_r"))
        ).where(F.col("_rr") <= linf)
        pair_rank = rows.groupBy(_U, _X).agg(F.min("_r").alias("_pr"))
        pair_rank = pair_rank.withColumn(
            "_pk", F.row_number().over(Window.partitionBy(_U).orderBy("_pr"))
        ).where(F.col("_pk") <= l0)
        self._replace_rows(
            rows.join(pair_rank.select(_U, _X), on=[_U, _X]).select(_U, _K, _V, _X), cache=True
        )

    def _partitions(self) -> int:
        """Partitions for a pandas pass over the rows: one per core, in more waves when a
        partition would otherwise exceed :data:`_TASK_ROWS` rows
        (:func:`~userdp.spark.python_partitions`)."""
        return python_partitions(self.spark, self.total_rows, _TASK_ROWS)

    # -- per-(user, key) aggregates -----------------------------------------------------------
    def _pairs(self, centre: float, units: dict[str, float] | None = None) -> Any:
        """Per-(user, key) row counts ``n`` and centred sums ``s``, each with its user's three
        norms (``r_users``, ``r_count``, ``r_sum``), its user's norm bin per family of
        ``units`` (``b_<family>``) and a flag on one pair per user (``first``): one shuffle of
        the rows by user, then one pandas call per partition (a partition holds its users
        whole), computed as :class:`LocalEngine` computes them. Cached once per run: the norm
        histograms and the weighted sums each read it with one aggregation and no Python."""
        units = dict(units or {})
        memo = self._memo.get(("pairs", centre))
        if memo is None or not units.items() <= self._pair_units.items():
            if memo is not None:  # bins for other units: computed again (the driver never asks)
                memo.unpersist()
            n_keys = max(self.n_keys, 1)

            def body(pdf: pd.DataFrame) -> pd.DataFrame:
                return _pair_stats(pdf, n_keys, centre, units)

            schema = _PAIR_SCHEMA + "".join(f", b_{f} long" for f in units)
            rows = self._rows.select(_U, _X, _V).repartition(self._partitions(), _U)
            self._memo["pairs", centre] = rows.mapInPandas(whole_partition(body), schema).cache()
            self._pair_units = units
        return self._memo["pairs", centre]

    def norm_histograms(self, units: dict[str, float], centre: float) -> dict[str, np.ndarray]:
        """Exact users per norm bin, bins computed by :func:`bin_of` on the executors with the
        pairs (:meth:`_pairs`): one aggregation over the users' first pairs, at most families x
        bins rows to the driver."""
        from pyspark.sql import functions as F

        families = list(units)
        bins = F.array(
            *[
                F.struct(F.lit(i).alias("f"), F.col(f"b_{f}").alias("b"))
                for i, f in enumerate(families)
            ]
        )
        counts = (
            self._pairs(centre, units)
            .where(F.col("first"))
            .select(F.explode(bins).alias("fb"))
            .groupBy("fb.f", "fb.b")
            .count()
        )
        out = {f: np.zeros(HISTOGRAM_BINS) for f in families}
        for row in counts.collect():
            out[families[int(row["f"])]][int(row["b"])] = float(row["count"])
        return out

    def weighted_sums(
        self, bounds_c: dict[str, float], vectors: dict[str, tuple[str, ...]], centre: float
    ) -> dict[str, np.ndarray]:
        """Per-key sums of ``w_u x_uk``, with the row count on K, by one aggregation over the
        cached pairs (no Python call: :func:`_weight` is
        :func:`~userdp.aggregate.local.user_weights`' arithmetic)."""
        from pyspark.sql import functions as F

        names = list(vectors)
        value = {"users": F.lit(1.0), "count": F.col("n"), "sum": F.col("s")}
        sums = []
        for v in names:
            w = F.lit(1.0)
            for f in vectors[v]:
                w = F.least(w, _weight(F.col(f"r_{f}"), bounds_c[f]))
            sums.append(F.sum(w * value[v]).alias(v))
        total = self._pairs(centre).groupBy(_X).agg(F.sum("n").alias("_rows"), *sums)
        out = {v: np.zeros(self.n_keys) for v in names}
        rows = 0.0
        for row in total.collect():  # one row per key
            rows += row["_rows"]
            for v in names:
                out[v][int(row[_X])] = row[v]
        self._n_rows = int(rows)
        return out

    def quantile_sizes(self) -> tuple[np.ndarray, np.ndarray]:
        """Distinct row counts on K and how many users have each (at most sqrt(2 rows) pairs:
        never one entry per user)."""
        from pyspark.sql import functions as F

        per_user = self._rows.groupBy(_U).agg(F.count(F.lit(1)).alias("s"))
        rows = per_user.groupBy("s").count().collect()
        return (
            np.array([r["s"] for r in rows], dtype=np.int64),
            np.array([r["count"] for r in rows], dtype=np.int64),
        )

    def _key_rows(self) -> Any:
        """The rows on K as (key code, value, the user's rows on K ``_s``), partitioned by key
        code and cached for every quantile level: one shuffle by user (a pandas call per
        partition counts each user's rows), one by key."""
        if ("key_rows", 0.0) not in self._memo:

            def sizes(pdf: pd.DataFrame) -> pd.DataFrame:
                user = pd.factorize(pdf[_U])[0]
                s = np.bincount(user)[user].astype(np.float64)
                return pd.DataFrame({_X: pdf[_X], _V: pdf[_V], "_s": s})

            parts = self._partitions()
            rows = self._rows.select(_U, _X, _V).repartition(parts, _U)
            self._memo["key_rows", 0.0] = (
                rows.mapInPandas(whole_partition(sizes), f"{_X} long, {_V} double, _s double")
                .repartition(parts, _X)
                .cache()
            )
        return self._memo["key_rows", 0.0]

    def key_quantiles(
        self,
        q: float,
        level: int,
        h: float,
        smooth: bool,
        *,
        epsilon: float,
        sensitivity: float,
        bounds: tuple[float, float],
        entropy: int,
    ) -> np.ndarray:
        """One exponential-mechanism draw per key, on the executors (stream per key): one
        pandas call per partition of :meth:`_key_rows`, drawing for each of its keys."""
        lo, hi = bounds

        kw: dict[str, Any] = dict(
            level=level,
            h=h,
            smooth=smooth,
            epsilon=epsilon,
            sensitivity=sensitivity,
            bounds=(lo, hi),
            entropy=entropy,
        )

        def draw(pdf: pd.DataFrame) -> pd.DataFrame:
            code = pdf[_X].to_numpy(np.int64)
            order = np.argsort(code, kind="stable")
            code = code[order]
            y = pdf[_V].to_numpy(np.float64)[order]
            s = pdf["_s"].to_numpy(np.float64)[order]
            starts, ends = run_bounds(code)
            x = [
                draw_key_quantile(y[a:b], s[a:b], int(code[a]), q, **kw)
                for a, b in zip(starts, ends, strict=True)
            ]
            return pd.DataFrame({_X: code[starts], "x": np.asarray(x, dtype=np.float64)})

        out = np.empty(self.n_keys)
        seen = np.zeros(self.n_keys, dtype=bool)
        res = self._key_rows().mapInPandas(whole_partition(draw), f"{_X} long, x double")
        for row in res.collect():  # one row per key with rows
            out[int(row[_X])] = row["x"]
            seen[int(row[_X])] = True
        for k in np.flatnonzero(~seen):  # keys without rows: the mechanism on no values
            out[k] = draw_key_quantile(np.zeros(0), np.zeros(0), int(k), q, **kw)
        return out

    def finish(self, table: pa.Table) -> Any:
        """The released table (one row per key) as a Spark DataFrame."""
        for frame in self._memo.values():
            frame.unpersist()
        self._memo = {}
        for frame in self._cached:
            frame.unpersist()
        self._cached = []
        return self.spark.createDataFrame(table.to_pandas())
