"""The Spark engine of :func:`userdp.aggregate`: the local engine's statistics as DataFrames.

Answers the questions of :class:`userdp.aggregate.local.LocalEngine` with the same functions
(per-pair statistics, user norms, norm bins, user weights and per-key sums by the local
engine's NumPy code, run on each partition of whole users in a pandas call on the executors),
so its pre-noise statistics equal the local ones up to the order of floating-point sums: the
partitions' histograms and per-key sums are added by Spark.

Steps: the input's columns are cached once (the selection reads them); the rows on K are
shuffled by user once and cached so partitioned; the norm histograms and the weighted per-key
sums are then each one pandas pass over that cache (no shuffle: a partition holds its users
whole), which sends back per partition only a histogram or one row per key present. Computing
a user's pairs twice in Python costs less than sending every pair and its user's norms back
to the JVM, caching them and aggregating them there (measured in benchmarks/README.md).

What reaches the driver: counts (rows, users), the public key set (released keys or the
public list, broadcast back to the executors), one histogram of at most
:data:`~userdp.aggregate.local.HISTOGRAM_BINS` bins per family and one vector over the keys per
metric: nothing proportional to users or rows. Per-key quantiles run on the executors, each key
drawing from its own noise sub-stream, as locally.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from userdp.aggregate.local import (
    HISTOGRAM_BINS,
    Columns,
    draw_key_quantile,
    key_sums,
    norm_counts,
    not_scalar,
    pair_stats,
    user_norms,
)
from userdp.data.encoding import run_bounds
from userdp.exceptions import DataError
from userdp.spark import python_partitions, require_pyspark, whole_partition

__all__ = ["SparkEngine"]

_U, _K, _V, _X = "_agg_u", "_agg_k", "_agg_v", "_agg_x"
#: Spark's type names (``DataFrame.dtypes``) a value column may have: numbers, booleans and
#: text (cast to double: a cell that is not a number is null, a missing value, as locally).
_NUMERIC = re.compile(r"^(tinyint|smallint|int|bigint|float|double|boolean|decimal\(.*\)|string)$")
#: Rows of one pandas call at most (about 100 MB of input columns and as much again while
#: it computes), when the input's row count sets the number of partitions.
_TASK_ROWS = 2_000_000


def _pairs_and_norms(
    pdf: pd.DataFrame, n_keys: int, centre: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """One partition's (user, key) pairs (its users whole) and its users' norms over K, by
    :class:`~userdp.aggregate.local.LocalEngine`'s arithmetic: :func:`pair_stats` (pairs
    ordered by user, then key code) and :func:`user_norms`."""
    user = pd.factorize(pdf[_U])[0].astype(np.int64)
    pu, pk, n, s, m = pair_stats(
        user, pdf[_X].to_numpy(np.int64), pdf[_V].to_numpy(np.float64), n_keys, centre
    )
    return pu, pk, n, s, m, user_norms(pu, n, s, m, int(pu[-1]) + 1)


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
        kinds = dict(df.dtypes)
        for role, name in (("user", cols.user), ("key", cols.key)):
            if name is not None and kinds[name].startswith(("array", "map", "struct")):
                raise DataError(not_scalar(role, name, kinds[name]))
        self.cols = cols
        self.spark = df.sparkSession
        sel = [F.col(f"`{cols.user}`").alias(_U)]
        sel.append(F.col(f"`{cols.key}`").alias(_K) if cols.key is not None else F.lit(0).alias(_K))
        if cols.value is not None:
            lo, hi = cols.bounds  # type: ignore[misc]
            kind = dict(df.dtypes)[cols.value]
            if not _NUMERIC.match(kind):
                raise DataError(
                    f"aggregate: the value column {cols.value!r} holds {kind}; it must hold "
                    "numbers (a null or NaN value is a row without a value)."
                )
            v = F.col(f"`{cols.value}`").cast("double")
            # clip_values' policy in SQL: null and NaN stay missing (NaN; Spark's greatest()
            # and least() skip nulls and order NaN above every number), +-inf are clipped
            clipped = F.least(F.greatest(v, F.lit(lo)), F.lit(hi))
            missing = v.isNull() | F.isnan(v)
            sel.append(F.when(missing, F.lit(float("nan"))).otherwise(clipped).alias(_V))
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
        self._memo: dict[str, Any] = {}  # cached frames of the current rows
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

    def _on_keys(self) -> Any:
        """The rows on K: a filter after the broadcast join, over the cached rows."""
        from pyspark.sql import functions as F

        return self._rows.where(F.col(_X).isNotNull())

    def restrict(self) -> None:
        """Drop rows outside K, shuffle the rest by user once and cache them so partitioned
        (:meth:`_by_user`): every later pass reads them with no shuffle of its own."""
        self._replace_rows(self._by_user(self._on_keys()), cache=True)

    def _replace_rows(self, rows: Any, *, cache: bool = False) -> None:
        """New rows (``cache``: cached once, materialised by the next job that needs them):
        every frame derived from the old rows is dropped, and the row count is left to that
        next job. Old rows this method cached are dropped too (nothing reads them again; if no
        job has filled them yet, none will)."""
        for frame in self._memo.values():
            frame.unpersist()
        self._memo = {}
        if len(self._cached) > 1 and self._rows is self._cached[-1]:
            self._cached.pop().unpersist()
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

        seed = int(salt) % (2**31)
        rows = self._on_keys().withColumn("_r", F.rand(seed))
        rows = rows.withColumn(
            "_rr", F.row_number().over(Window.partitionBy(_U, _X).orderBy("_r"))
        ).where(F.col("_rr") <= linf)
        pair_rank = rows.groupBy(_U, _X).agg(F.min("_r").alias("_pr"))
        pair_rank = pair_rank.withColumn(
            "_pk", F.row_number().over(Window.partitionBy(_U).orderBy("_pr"))
        ).where(F.col("_pk") <= l0)
        kept = rows.join(pair_rank.select(_U, _X), on=[_U, _X])
        self._replace_rows(self._by_user(kept), cache=True)

    def _partitions(self) -> int:
        """Partitions for a pandas pass over the rows: one per core, in more waves when a
        partition would otherwise exceed :data:`_TASK_ROWS` rows
        (:func:`~userdp.spark.python_partitions`)."""
        return python_partitions(self.spark, self.total_rows, _TASK_ROWS)

    def _by_user(self, rows: Any) -> Any:
        """``rows``' user, key code and value, hash-partitioned by user into
        :meth:`_partitions` partitions (a shuffle, which Spark leaves out where ``rows`` are
        already so partitioned, as the cached rows on K are)."""
        return rows.select(_U, _X, _V).repartition(self._partitions(), _U)

    def _user_pass(self, body: Any, schema: str) -> Any:
        """``body`` once per partition of the rows on K (whole users), as a pandas call."""
        return self._by_user(self._rows).mapInPandas(whole_partition(body), schema)

    # -- per-(user, key) aggregates -----------------------------------------------------------
    def norm_histograms(self, units: dict[str, float], centre: float) -> dict[str, np.ndarray]:
        """Exact users per norm bin (:func:`norm_counts` on each partition's users, added up):
        one pandas pass, at most families x bins rows per partition back to the JVM and to
        the driver."""
        from pyspark.sql import functions as F

        families = list(units)
        n_keys = max(self.n_keys, 1)

        def body(pdf: pd.DataFrame) -> pd.DataFrame:
            *_, norms = _pairs_and_norms(pdf, n_keys, centre)
            counts = norm_counts(norms, units)
            flat = np.concatenate([counts[f] for f in families])  # family i: bins i*B...
            at = np.flatnonzero(flat)
            return pd.DataFrame({"_fb": at, "_c": flat[at]})

        total = self._user_pass(body, "_fb long, _c double").groupBy("_fb").agg(F.sum("_c"))
        flat = np.zeros(len(families) * HISTOGRAM_BINS)
        for fb, c in total.collect():
            flat[int(fb)] = float(c)
        return {
            f: flat[i * HISTOGRAM_BINS : (i + 1) * HISTOGRAM_BINS] for i, f in enumerate(families)
        }

    def weighted_sums(
        self, bounds_c: dict[str, float], vectors: dict[str, tuple[str, ...]], centre: float
    ) -> dict[str, np.ndarray]:
        """Per-key sums of ``w_u x_uk`` (:func:`key_sums` on each partition's users, added up
        per key), with the row count on K: one pandas pass, one row per key present in a
        partition back to the JVM, one per key to the driver."""
        from pyspark.sql import functions as F

        names = list(vectors)
        n_keys = max(self.n_keys, 1)

        def body(pdf: pd.DataFrame) -> pd.DataFrame:
            pu, pk, n, s, m, norms = _pairs_and_norms(pdf, n_keys, centre)
            sums = key_sums(pu, pk, n, s, m, norms, bounds_c, vectors, n_keys)
            rows = np.bincount(pk, weights=n, minlength=n_keys)
            at = np.flatnonzero(rows)
            return pd.DataFrame({_X: at, "_rows": rows[at], **{v: sums[v][at] for v in names}})

        schema = f"{_X} long, _rows double" + "".join(f", {v} double" for v in names)
        total = (
            self._user_pass(body, schema)
            .groupBy(_X)
            .agg(*[F.sum(c).alias(c) for c in ("_rows", *names)])
        )
        got = total.toPandas()  # one row per key with rows, as columns
        at = got[_X].to_numpy(np.int64)
        out = {v: np.zeros(self.n_keys) for v in names}
        for v in names:
            out[v][at] = got[v].to_numpy(np.float64)
        self._n_rows = int(got["_rows"].sum())
        return out

    def quantile_sizes(self) -> tuple[np.ndarray, np.ndarray]:
        """Distinct row counts on K and how many users have each (at most sqrt(2 rows) pairs:
        never one entry per user)."""
        from pyspark.sql import functions as F

        valued = self._rows.where(~F.isnan(_V))  # the rows of quantiles: with a value
        per_user = valued.groupBy(_U).agg(F.count(F.lit(1)).alias("s"))
        rows = per_user.groupBy("s").count().collect()
        return (
            np.array([r["s"] for r in rows], dtype=np.int64),
            np.array([r["count"] for r in rows], dtype=np.int64),
        )

    def _key_rows(self) -> Any:
        """The rows on K as (key code, value, the user's rows on K ``_s``), partitioned by key
        code and cached for every quantile level: a pandas call per partition of the rows on K
        (whole users) counts each user's rows, then one shuffle by key."""
        if "key_rows" not in self._memo:

            def sizes(pdf: pd.DataFrame) -> pd.DataFrame:
                pdf = pdf[~np.isnan(pdf[_V].to_numpy(np.float64))]  # rows with a value only
                user = pd.factorize(pdf[_U])[0]
                s = np.bincount(user)[user].astype(np.float64)
                return pd.DataFrame({_X: pdf[_X], _V: pdf[_V], "_s": s})

            self._memo["key_rows"] = (
                self._user_pass(sizes, f"{_X} long, {_V} double, _s double")
                .repartition(self._partitions(), _X)
                .cache()
            )
        return self._memo["key_rows"]

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
        from pyspark.sql.pandas.types import from_arrow_schema

        # the schema from Arrow: a release of no keys is an empty frame with the columns, not a
        # frame Spark cannot infer a schema for
        return self.spark.createDataFrame(table.to_pandas(), schema=from_arrow_schema(table.schema))
