"""The Spark runner's column names and weight rules as DataFrame operations (Basic, MAD and
biased UserWeights): :mod:`userdp.partition.spark` composes them into rounds.

Each mirrors its local counterpart in :mod:`userdp.partition.weights` step by step (the parity
tests compare the two runners' weights to 1e-9); the privacy statements are there.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from userdp.data.encoding import run_starts
from userdp.partition.weights import user_weights
from userdp.spark import whole_partition

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from pyspark.sql import DataFrame

#: Hash buckets of items (noise streams). Fixed, so that a seeded run draws the same noise
#: whatever the number of partitions or executors.
BUCKETS = 256
#: Item sets up to this many rows are broadcast to the pair-holding tasks instead of shuffling
#: the pairs by item (heavy items of MAD, items removed or biased in MAD2R's round 2).
BROADCAST_ROWS = 2_000_000

# Internal column names: user, item, their salted hashes, item noise bucket.
_U, _I, _HU, _HI, _IB = "_u", "_i", "_hu", "_hi", "_ib"
_BASE = [_U, _I, _HU, _HI]  # a pair's columns; buckets only on item frames (with_bucket)
_ITEM = [_I, _HI, _IB]


def with_bucket(items: DataFrame) -> DataFrame:
    """``items`` with each item's noise bucket ``_ib`` (of its hash ``_hi``). Item-level
    frames get it after their aggregation by item (by ``_i, _hi``): a grouping key fewer,
    and no bucket computed for every pair."""
    F = _functions()
    return items.withColumn(_IB, F.pmod(F.col(_HI), F.lit(BUCKETS)))


def _functions() -> Any:
    from pyspark.sql import functions

    return functions


def _sorted_user_weights(
    pdf: pd.DataFrame, b_min: float, b_max: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """UserWeights (Alg. 2, the local :func:`user_weights`) for every user of one partition's
    pairs at once: ``(order, users, degrees, weights)``, the pairs in ``order`` (by user, as
    ``user_weights`` needs), their user codes and weights in that order, and each user's
    degree. Checks that the partition holds whole users (each user's pair count is the degree
    ``_deg`` that the window by user gave its pairs)."""
    import pandas as pd

    codes, uniques = pd.factorize(pdf[_U])
    order = np.argsort(codes, kind="stable")
    users = codes.take(order).astype(np.intp)
    ideg = np.bincount(users, minlength=len(uniques))
    starts = np.flatnonzero(run_starts(users))  # whole_partition never passes an empty one
    if not np.array_equal(ideg, pdf["_deg"].to_numpy().take(order.take(starts))):
        raise RuntimeError(  # a bug of the runner's partitioning, never user input
            "A partition does not hold its users' pairs whole."
        )
    # user_weights indexes ``biases`` by item code: give each pair its own code.
    wb = user_weights(
        users,
        np.arange(users.size),
        len(uniques),
        biases=pdf["_b"].to_numpy(dtype=float).take(order),
        b_min=b_min,
        b_max=b_max,
        degrees=ideg,
    )
    return order, users, ideg, wb


def _partition_user_weights(b_min: float, b_max: float, pdf: pd.DataFrame) -> pd.DataFrame:
    """``mapInPandas`` body (via :func:`~userdp.spark.whole_partition`): UserWeights (Alg. 2)
    of every pair of one partition (the partition holds whole users)."""
    order, _, _, wb = _sorted_user_weights(pdf, b_min, b_max)
    return pdf.take(order).reset_index(drop=True).assign(_wb=wb)


def _partition_biased_sums(
    b_min: float, b_max: float, d_max: int, pdf: pd.DataFrame
) -> pd.DataFrame:
    """``mapInPandas`` body (via :func:`~userdp.spark.whole_partition`): for one partition's
    pairs (whole users, with the round's degree ``_deg`` and bias ``_b``), each pair's
    UserWeights weight (Alg. 2) and its share of w_init (1/|S_u| for an adaptive user, Alg. 3
    lines 3-5), summed per item of the partition: one row per item (``_w``, ``_wi``) instead
    of one per pair."""
    order, users, ideg, wb = _sorted_user_weights(pdf, b_min, b_max)
    deg = ideg.astype(np.float64)
    adaptive = (deg >= math.ceil(1.0 / b_min**2)) & (deg <= d_max)  # line 3
    inv_adaptive = np.where(adaptive, 1.0 / deg, 0.0)  # every user here has pairs
    pairs = pdf[[_I, _HI]].take(order).reset_index(drop=True)
    return sum_per_item(pairs.assign(_w=wb, _wi=inv_adaptive.take(users)))


def sum_per_item(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows' ``_w`` and ``_wi`` added up per item (``_i``), in row order: one row per item, in
    first-appearance order, with the other columns of its first row. Turns a partition's pairs
    into its partial sums (:func:`_partition_biased_sums`), and the partitions' partial sums
    into the round's weights where they are noised (the Spark runner's noise call)."""
    import pandas as pd

    codes, uniques = pd.factorize(rows[_I])
    m, n = len(uniques), codes.size
    first = np.empty(m, dtype=np.intp)
    first[codes[::-1]] = np.arange(n - 1, -1, -1, dtype=np.intp)  # each item's first row
    return (
        rows.take(first)
        .reset_index(drop=True)
        .assign(
            _w=np.bincount(codes, weights=rows["_w"].to_numpy(float), minlength=m),
            _wi=np.bincount(codes, weights=rows["_wi"].to_numpy(float), minlength=m),
        )
    )


# -- weights ------------------------------------------------------------------------------------
def _basic_weights(capped: DataFrame) -> DataFrame:
    """Basic weights (Alg. 5): w(i) = sum over users holding i of 1/sqrt(|S_u|)."""
    F = _functions()
    return with_bucket(capped.groupBy(_I, _HI).agg(F.sum(1.0 / F.sqrt(F.col("_deg"))).alias("_w")))


def _user_weights(pairs: DataFrame, b_min: float, b_max: float) -> DataFrame:
    """Add UserWeights ``_wb`` (Alg. 2) to every pair, given per-pair biases ``_b``: a
    ``mapInPandas`` UDF runs the local engine's vectorized :func:`user_weights` once per
    partition, as :func:`_biased_partials` does. The caller's last window by user (in
    :func:`_mad_weights`, the one for e_u) leaves every user's pairs in one partition, which
    the UDF checks against ``_deg``.
    """
    from pyspark.sql.types import DoubleType, StructField, StructType

    schema = StructType([*pairs.schema.fields, StructField("_wb", DoubleType(), False)])
    body = functools.partial(_partition_user_weights, b_min, b_max)
    return pairs.mapInPandas(whole_partition(body), schema)


def _mad_weights(
    run: Any,  # the run's book-keeping (spark._SparkRun): its join_items, user_window
    capped: DataFrame,
    *,
    tau: float,
    d_max: int,
    biased: bool = False,
    b_min: float = 1.0,
    b_max: float = 1.0,
    partials: bool = False,
) -> DataFrame:
    """MaxAdaptiveDegree weights (Alg. 3, with the ``max`` erratum of line 6), as DataFrames.

    Mirrors :func:`userdp.partition.mad_weights` step by step; see it for the privacy
    statement. ``biased`` uses the pairs' ``_b`` column as b(i); with ``partials`` too, the
    weights are :func:`_biased_partials`' partition sums, valid only if no item is truncated
    (the caller checks).
    """
    F = _functions()

    if biased and partials:
        return _biased_partials(capped, d_max, b_min, b_max, run.python_partitions())
    deg = F.col("_deg")
    adaptive = (deg >= math.ceil(1.0 / b_min**2)) & (deg <= d_max)  # line 3
    p = capped.withColumn("_init", F.when(adaptive, 1.0 / deg).otherwise(0.0))
    w_init = p.where(adaptive).groupBy(_I).agg(F.sum("_init").alias("_wi"))  # line 5
    heavy = w_init.where(F.col("_wi") > tau).select(  # line 6 (erratum: max)
        _I, ((F.col("_wi") - tau) / F.col("_wi")).alias("_r")
    )
    p = run.join_items(p, heavy, "left")
    # line 10: e_u = (1/|S_u|) sum r(i) over the adaptive user's items
    r_sum = F.sum(F.coalesce(F.col("_r"), F.lit(0.0))).over(run.user_window())
    excess = F.when(adaptive, r_sum / deg).otherwise(0.0)
    alpha = b_min - 1.0 / (2.0 * math.sqrt(d_max))  # line 2
    p = p.withColumn("_c", F.lit(alpha / d_max) * excess - F.col("_init")).drop("_r")
    if biased:
        p = _user_weights(p, b_min, b_max)  # line 13
    else:
        p = p.withColumn("_wb", 1.0 / F.sqrt(deg))
    # lines 8, 11, 14-17: min(w_init, tau) + rerouted + (w_b - 1/|S_u| if adaptive else w_b)
    return with_bucket(
        p.groupBy(_I, _HI).agg(
            (F.sum(F.col("_c") + F.col("_wb")) + F.least(F.sum("_init"), F.lit(tau))).alias("_w")
        )
    )


def _biased_partials(
    capped: DataFrame, d_max: int, b_min: float, b_max: float, partitions: int
) -> DataFrame:
    """Biased MAD's item weights when no item's w_init exceeds tau, as *partial sums*: one row
    per item of each partition (``_i, _hi, _ib, _w, _wi``), the UserWeights weights and the
    w_init shares of the partition's pairs (the local ``_untruncated``'s shortcut: r = 0,
    e_u = 0). One ``mapInPandas`` pass over the round's pairs (whole users per partition: the
    window that counts the round's degrees, ``_deg``, leaves them so); no w_init aggregation,
    heavy-item join or excess window, and no pair-level frame of the round to cache.

    The caller adds the partitions' rows up where it noises them (the noise's pandas call,
    after the one shuffle by bucket that it needs anyway) and checks, exactly, that no item's
    w_init exceeds tau; if one does, that noisy frame and its release are dropped before
    anything is composed or counted, and the full Alg. 3 runs (later rounds almost never
    truncate).

    ``partitions``: the pass runs in at most that many tasks, whole partitions of the pairs
    merged (``coalesce``, no shuffle: users stay whole), as a pandas pass costs per task
    (:func:`~userdp.spark.python_partitions`)."""
    from pyspark.sql.types import DoubleType, StructField, StructType

    pairs = capped.select(_U, _I, _HI, "_deg", "_b").coalesce(partitions)
    fields = {f.name: f for f in pairs.schema.fields}
    schema = StructType(
        [
            *(fields[c] for c in (_I, _HI)),
            StructField("_w", DoubleType(), False),
            StructField("_wi", DoubleType(), False),
        ]
    )
    body = functools.partial(_partition_biased_sums, b_min, b_max, d_max)
    return with_bucket(pairs.mapInPandas(whole_partition(body), schema))  # line 13, line 5
