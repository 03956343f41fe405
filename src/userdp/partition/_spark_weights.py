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
_BASE = [_U, _I, _HU, _HI, _IB]
_ITEM = [_I, _HI, _IB]


def _functions() -> Any:
    from pyspark.sql import functions

    return functions


def _partition_user_weights(b_min: float, b_max: float, pdf: pd.DataFrame) -> pd.DataFrame:
    """``mapInPandas`` body (via :func:`~userdp.spark.whole_partition`): UserWeights (Alg. 2)
    for every user of one partition at once (the partition holds whole users)."""
    import pandas as pd

    codes, uniques = pd.factorize(pdf[_U])
    order = np.argsort(codes, kind="stable")
    pdf = pdf.iloc[order].reset_index(drop=True)
    n = len(pdf)
    # user_weights indexes ``biases`` by item code: give each pair its own code.
    wb = user_weights(
        codes[order].astype(np.int64),
        np.arange(n),
        len(uniques),
        biases=pdf["_b"].to_numpy(dtype=float),
        b_min=b_min,
        b_max=b_max,
    )
    return pdf.assign(_wb=wb)


# -- weights ------------------------------------------------------------------------------------
def _basic_weights(capped: DataFrame) -> DataFrame:
    """Basic weights (Alg. 5): w(i) = sum over users holding i of 1/sqrt(|S_u|)."""
    F = _functions()
    return capped.groupBy(*_ITEM).agg(F.sum(1.0 / F.sqrt(F.col("_deg"))).alias("_w"))


def _user_weights(pairs: DataFrame, b_min: float, b_max: float) -> DataFrame:
    """Add UserWeights ``_wb`` (Alg. 2) to every pair, given per-pair biases ``_b``.

    Users with no biased item get 1/sqrt(|S_u|) by a column expression (what Alg. 2 gives them);
    the others go through a ``mapInPandas`` UDF that runs the local engine's vectorized
    :func:`user_weights` once per partition. No shuffle: the window over users that flags them
    leaves every user's pairs in one partition, and only a filter stands between the two.
    """
    F = _functions()
    from pyspark.sql import Window
    from pyspark.sql.types import DoubleType, StructField, StructType

    flagged = pairs.withColumn("_minb", F.min(F.col("_b")).over(Window.partitionBy(_U)))
    plain = flagged.where(F.col("_minb") >= 1.0).withColumn("_wb", 1.0 / F.sqrt(F.col("_deg")))
    biased = flagged.where(F.col("_minb") < 1.0)
    schema = StructType([*biased.schema.fields, StructField("_wb", DoubleType(), False)])
    body = functools.partial(_partition_user_weights, b_min, b_max)
    biased = biased.mapInPandas(whole_partition(body), schema)
    return plain.unionByName(biased).drop("_minb")


def _mad_weights(
    run: Any,  # the run's book-keeping (spark._SparkRun): its join_items and cut
    capped: DataFrame,
    *,
    tau: float,
    d_max: int,
    biased: bool = False,
    b_min: float = 1.0,
    b_max: float = 1.0,
) -> DataFrame:
    """MaxAdaptiveDegree weights (Alg. 3, with the ``max`` erratum of line 6), as DataFrames.

    Mirrors :func:`userdp.partition.mad_weights` step by step; see it for the privacy
    statement. ``biased`` uses the pairs' ``_b`` column as b(i).
    """
    F = _functions()
    from pyspark.sql import Window

    deg = F.col("_deg")
    adaptive = (deg >= math.ceil(1.0 / b_min**2)) & (deg <= d_max)  # line 3
    p = capped.withColumn("_init", F.when(adaptive, 1.0 / deg).otherwise(0.0))
    if biased:
        untruncated = _untruncated(run, p, tau, b_min, b_max)
        if untruncated is not None:
            return untruncated
    w_init = p.where(adaptive).groupBy(_I).agg(F.sum("_init").alias("_wi"))  # line 5
    heavy = w_init.where(F.col("_wi") > tau).select(  # line 6 (erratum: max)
        _I, ((F.col("_wi") - tau) / F.col("_wi")).alias("_r")
    )
    p = run.join_items(p, heavy, "left")
    # line 10: e_u = (1/|S_u|) sum r(i) over the adaptive user's items
    r_sum = F.sum(F.coalesce(F.col("_r"), F.lit(0.0))).over(Window.partitionBy(_U))
    excess = F.when(adaptive, r_sum / deg).otherwise(0.0)
    alpha = b_min - 1.0 / (2.0 * math.sqrt(d_max))  # line 2
    p = p.withColumn("_c", F.lit(alpha / d_max) * excess - F.col("_init")).drop("_r")
    if biased:
        p = _user_weights(p, b_min, b_max)  # line 13
    else:
        p = p.withColumn("_wb", 1.0 / F.sqrt(deg))
    # lines 8, 11, 14-17: min(w_init, tau) + rerouted + (w_b - 1/|S_u| if adaptive else w_b)
    return p.groupBy(*_ITEM).agg(
        (F.sum(F.col("_c") + F.col("_wb")) + F.least(F.sum("_init"), F.lit(tau))).alias("_w")
    )


def _untruncated(
    run: Any, pairs: DataFrame, tau: float, b_min: float, b_max: float
) -> DataFrame | None:
    """Biased MAD's item weights when no item's w_init exceeds ``tau``, else None (the local
    ``_untruncated``'s shortcut, checked exactly here).

    Then the weights are the sums of the UserWeights weights (r = 0, e_u = 0), and one
    aggregation gives them with every item's w_init: no w_init aggregation before it, no join
    of heavy items and no window for e_u. Its item frame is cut (a job), and a job over that
    small frame checks w_init <= tau; later rounds almost never truncate.
    """
    F = _functions()
    weights = _user_weights(pairs, b_min, b_max)  # line 13
    total = weights.groupBy(*_ITEM).agg(F.sum("_wb").alias("_w"), F.sum("_init").alias("_wi"))
    total = run.cut(total, "weights of a biased round")
    if not total.where(F.col("_wi") > tau).isEmpty():
        return None
    return total.select(*_ITEM, "_w")
