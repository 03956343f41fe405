"""The Spark runner of :class:`~userdp.recommend.MatrixFactorization` (``engine="spark"``) and
of the AM-SSP statistics of :class:`~userdp.recommend.PublicFeatureRecommender`.

The training algorithm is :meth:`MatrixFactorization.fit`'s, written once over a runner
(:mod:`userdp.recommend.engines.local`); this module computes its exact statistics from a Spark
DataFrame of ``(user, item, rating)`` rows, for every method: ``als``, the DPALS family (uniform,
tail and adaptive allocation; item statistics ``A_i``, ``b_i``) and the DPSGD family (clipped
per-user gradient sums, one pass per gradient step), with or without biases, the implicit term,
``top_items`` and ``min_item_count``. The same calls give AM-SSP's statistics (Krichene et al.
2023b) to :meth:`PublicFeatureRecommender.fit <userdp.recommend.PublicFeatureRecommender.fit>`
(variants ssp2, ssp1, minibatch, with or without biases): user solves against the encoder's
item vectors, then the adaptive-weight ``A_j``, ``b_j`` with the targets clipped
(``UserSolve(clip_target=True)``, or ``y - c_k`` clipped with biases); the encoder's steps run
on the driver. Tested equal to the local engine (``tests/spark/test_recommend_spark_public.py``).

Layout. The rows are shuffled once by user into ``buckets`` partitions (hash of the user id), so
every partition holds whole users; every per-user computation then runs in a ``mapInPandas`` UDF
over a whole partition with the local NumPy kernels (the same functions the local runner calls:
:func:`~userdp.multitask.allocation.row_keys`, the sampling and adaptive rules, the per-user solves
of :class:`~userdp.recommend.engines.local.LocalRunner`). Per user, these depend only on the user's
own rows and on released values (counts, item factors), so a partition computes exactly what the
local runner computes for those users. The prepared rows and the training rows (with their
allocation weights) are cached and their lineage cut (``localCheckpoint``, which keeps the
partitions), so no later pass shuffles the ratings or re-runs the preamble.

One step (Algorithm 3, lines 4-5) is one pass: each partition solves its users against the
released item factors (in the UDF's closure), then emits, per bucket of items (item code mod
``buckets``), the codes of the items its users rated and their partial sums ``sum_j w_ij x_j
x_j^T`` (upper triangle) and ``sum_j w_ij t_ij x_j`` as Arrow binary columns; a grouped-map UDF
per item bucket adds the partials (one shuffle of at most ``buckets`` x m statistics). The
driver collects one row per item bucket, m x (d'(d'+1)/2 + d') floats in all (d' = dim + 1 with
biases), and the Gram matrix of the implicit term (d' x d'): nothing proportional to users or
ratings. It cannot hold them when ``m * d'^2 * 8`` bytes exceed :data:`MAX_DRIVER_BYTES`
(2 GiB): ``prepare`` then raises before any pass, naming the fix (a smaller ``dim`` or item
set).

Noise. The counts, the centre and the item statistics are released on the driver by the
caller's :class:`~userdp.privacy.NoiseSource`, in the local runner's order, so for a given seed
the Spark engine releases the same model as the local engine (to the float round-off of sums
taken in another order). The per-rating random choices (count sampling, uniform and tail
allocation) are keyed hashes of (salt, user label, item label), as on the local engine. The
item statistics are m x d'^2 floats, which the driver holds anyway for the solve, so drawing
their noise there costs no more than the collection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from userdp.data.encoding import run_bounds
from userdp.exceptions import DataError, InvalidParameterError
from userdp.multitask.allocation import release_counts, row_keys, sample_per_user
from userdp.privacy.noise import NoiseSource
from userdp.recommend.core.centring import centre_cap, release_mean
from userdp.recommend.core.items import ItemSet
from userdp.recommend.core.spec import Allocation, ItemUpdateSpec, RunSpec
from userdp.recommend.engines.local import LocalRunner, Preamble, UserSolve
from userdp.spark import require_pyspark, whole_partition

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from pyspark.sql import DataFrame

__all__ = ["MAX_DRIVER_BYTES", "SparkRunner"]

#: The most bytes of item statistics (m x d'^2 float64) the driver is asked to hold.
MAX_DRIVER_BYTES = 2 << 30

# Column names of the prepared frame: user partition, user code within it, item code
# (-1: outside the item set), rating, row key, counted in the private counts, kept by the
# sampled mean, the user's number of ratings, allocation weight; a repeated pair.
_B, _J, _I, _R, _K, _C, _S, _N, _W = "_b", "_j", "_i", "_r", "_k", "_c", "_s", "_n", "_w"
_D = "_d"  # the row repeats an earlier (user, item) pair
_PREPARED = (
    f"{_B} long, {_J} long, {_I} long, {_R} double, {_K} long, {_C} boolean, {_S} boolean, "
    f"{_N} long, {_D} boolean"
)
_TRAINING = f"{_B} long, {_J} long, {_I} long, {_R} double, {_W} double"
_PARTIAL = "_g long, _c binary, _x binary"  # item bucket, item codes, statistics


def _prepare_bucket(vocab: list, salt: int, count_sample: int, pdf: pd.DataFrame) -> pd.DataFrame:
    """One partition of users: user codes, row keys, the count and mean samples (per user)."""
    users, user_labels = _codes(pa.Array.from_pandas(pdf["_u"]).to_pylist())
    items = pdf[_I].to_numpy(dtype=np.int64)
    inside = items >= 0
    item_labels = pa.Array.from_pandas(pdf["_l"]).to_pylist()
    # The item's vocabulary label inside the item set (as the local runner hashes it), its own
    # label outside (as the local centre hashes the full ratings).
    keyed = [vocab[i] if i >= 0 else v for i, v in zip(items.tolist(), item_labels, strict=True)]
    codes, item_keys = _codes(keyed)
    keys = row_keys(users, codes, user_labels, item_keys, salt)
    pair = users * (len(item_keys) + 1) + codes
    order = np.argsort(pair, kind="stable")
    repeated = np.zeros(users.size, dtype=bool)  # reported by the driver, which raises
    repeated[order[1:]] = pair[order[1:]] == pair[order[:-1]]
    counted = np.zeros(users.size, dtype=bool)
    counted[inside] = sample_per_user(users[inside], count_sample, None, keys=keys[inside])
    sampled = sample_per_user(users, count_sample, None, keys=keys)
    n_u = np.bincount(users)[users]
    return pd_frame(
        {
            _B: pdf[_B].to_numpy(),
            _J: users,
            _I: items,
            _R: pdf[_R].to_numpy(dtype=np.float64),
            _K: keys.view(np.int64),
            _C: counted,
            _S: sampled,
            _N: n_u,
            _D: repeated,
        }
    )


def _codes(labels: list) -> tuple[np.ndarray, list]:
    """Codes of hashable labels by first appearance, and the distinct labels."""
    book: dict[Any, int] = {}
    codes = np.fromiter(
        (book.setdefault((type(v), v), len(book)) for v in labels), np.int64, len(labels)
    )
    return codes, [v for _, v in book]


def pd_frame(columns: dict[str, Any]) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(columns)


def _user_codes(pdf: pd.DataFrame) -> np.ndarray:
    """Codes 0..n-1 of the users of a partition (unique by (partition, code within it))."""
    key = (pdf[_B].to_numpy(dtype=np.int64) << 32) | pdf[_J].to_numpy(dtype=np.int64)
    return np.unique(key, return_inverse=True)[1].astype(np.int64).reshape(-1)


def _training_bucket(
    trained: np.ndarray, rule: Any, counts: np.ndarray | None, pdf: pd.DataFrame
) -> pd.DataFrame:
    """One partition's rows of trained items with their allocation weights (Table 2)."""
    from userdp.recommend.core.steps import user_weights

    items = pdf[_I].to_numpy(dtype=np.int64)
    pdf = pdf[(items >= 0) & trained[np.maximum(items, 0)]]
    users = _user_codes(pdf)
    items = pdf[_I].to_numpy(dtype=np.int64)
    if rule is None or users.size == 0:
        w = np.ones(users.size)
    else:
        keys = pdf[_K].to_numpy(dtype=np.int64).view(np.uint64)
        assert counts is not None  # released with the rule
        w = user_weights(rule, users, items, counts, None, keys)
    return pd_frame({_B: pdf[_B].to_numpy(), _J: users, _I: items, _R: pdf[_R].to_numpy(), _W: w})


def _solved_partition(
    U: np.ndarray,
    how: UserSolve,
    reg: float,
    lo: float,
    hi: float,
    center: float,
    weighted: bool,
    zz: np.ndarray | None,
    pdf: pd.DataFrame,
) -> tuple[LocalRunner, np.ndarray]:
    """A local runner over one partition's rows with its users solved (line 4), and the
    partition's item codes."""
    codes = _user_codes(pdf)
    items, icodes = np.unique(pdf[_I].to_numpy(dtype=np.int64), return_inverse=True)
    y = np.clip(pdf[_R].to_numpy(dtype=np.float64), lo, hi) - center
    w = pdf[_W].to_numpy(dtype=np.float64) if weighted else None
    local = LocalRunner.from_codes(codes, icodes, y, w, int(codes.max()) + 1, items.size)
    local.solve_users(U[items], how, reg, items_gram=zz)
    return local, items


def _step_bucket(
    U: np.ndarray,
    how: UserSolve,
    reg: float,
    lo: float,
    hi: float,
    center: float,
    weighted: bool,
    zz: np.ndarray | None,
    n_groups: int,
    pdf: pd.DataFrame,
) -> pd.DataFrame:
    """One partition: its users' exact solves, then their partial item statistics."""
    local, items = _solved_partition(U, how, reg, lo, hi, center, weighted, zz, pdf)
    gram, moment = local.item_statistics(weighted)
    k = gram.shape[1]
    iu = np.triu_indices(k)
    stats = np.concatenate([gram[:, iu[0], iu[1]], moment], axis=1)
    gravity = np.append(local.gravity().ravel(), float(local.n_users))
    return _pack(items, stats, n_groups, gravity)


def _gradient_bucket(
    U0: np.ndarray,
    how: UserSolve,
    reg: float,
    lo: float,
    hi: float,
    center: float,
    zz: np.ndarray | None,
    U: np.ndarray,
    clip: float,
    n_groups: int,
    pdf: pd.DataFrame,
) -> pd.DataFrame:
    """One partition: its users solved against the step's ``U0``, then their item gradient
    at ``U``, each user's whole gradient clipped to ``clip`` (Algorithm 2; the rows of a user
    are all in this partition, so the clipping is the local runner's)."""
    from userdp.recommend.core.steps import GradientOperator

    local, items = _solved_partition(U0, how, reg, lo, hi, center, True, zz, pdf)
    assert local.weights is not None  # weighted rows, asked for above
    op = GradientOperator(
        local.users,
        local.items,
        local.target,
        local.weights,
        local.item_order,
        local.item_offsets,
        local.n_items,
        local.n_users,
    )
    return _pack(items, op.gradient(U[items], local.V, clip), n_groups, None)


def _pack(
    items: np.ndarray, stats: np.ndarray, n_groups: int, extra: np.ndarray | None
) -> pd.DataFrame:
    """One row per item bucket (item code mod ``n_groups``): its item codes and their
    statistics; ``extra`` (the implicit term's Gram) as bucket -1."""
    group = items % n_groups
    order = np.argsort(group, kind="stable")
    rows = (
        [order[a:b] for a, b in zip(*run_bounds(group[order]), strict=True)] if order.size else []
    )
    tail = [] if extra is None else [(-1, b"", extra.tobytes())]
    return pd_frame(
        {
            "_g": [int(group[r[0]]) for r in rows] + [t[0] for t in tail],
            "_c": [items[r].tobytes() for r in rows] + [t[1] for t in tail],
            "_x": [stats[r].tobytes() for r in rows] + [t[2] for t in tail],
        }
    )


def _sum_partials(pdf: pd.DataFrame) -> pd.DataFrame:
    """Add the partial statistics of one item bucket's items over the user partitions (or the
    gravity rows, bucket -1)."""
    group = int(pdf["_g"].iloc[0])
    parts = [np.frombuffer(b, dtype=np.float64) for b in pdf["_x"]]
    if group < 0:
        return pd_frame({"_g": [group], "_c": [b""], "_x": [np.sum(parts, axis=0).tobytes()]})
    codes = np.concatenate([np.frombuffer(b, dtype=np.int64) for b in pdf["_c"]])
    x = np.concatenate(parts).reshape(codes.size, -1)
    order = np.argsort(codes, kind="stable")
    codes, x = codes[order], x[order]
    starts, _ = run_bounds(codes)
    total = np.add.reduceat(x, starts, axis=0)
    return pd_frame({"_g": [group], "_c": [codes[starts].tobytes()], "_x": [total.tobytes()]})


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

    See the module docstring for what runs where and what the driver holds.
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
