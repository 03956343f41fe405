"""Quality metrics of recommenders: RMSE and Recall@k, overall and sliced by item frequency.

The definitions follow the multi-task DP paper (Appendix D):

* ``RMSE = sqrt(mean over test ratings of (prediction - rating)^2)``;
* ``Recall@k = mean over users j of |test_j ∩ topk_j| / min(k, |test_j|)``, where ``topk_j``
  ranks every item outside the user's history (items the user already rated are excluded);
* sliced metrics: items sorted by increasing training count and cut into equal-size buckets
  (bucket 0 = the tail), a metric computed on each bucket.

Everything is vectorized with NumPy; ranking runs over batches of users. The metrics read test
data in the clear: they are for evaluation, not for release.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from userdp._validation import check_int
from userdp.data.ratings import Ratings
from userdp.exceptions import DataError, InvalidParameterError

__all__ = [
    "frequency_buckets",
    "popularity_scores",
    "ranking_metrics_at_k",
    "rmse",
    "sliced_rmse",
    "top_k_items",
]

ScoreFn = Callable[[np.ndarray], np.ndarray]


def _as_1d(a: Any, name: str, caller: str, dtype: Any = np.float64) -> np.ndarray:
    arr = np.asarray(a, dtype=dtype)
    if arr.ndim != 1:
        raise DataError(f"{caller}: {name!r} must be one-dimensional; got shape {arr.shape}.")
    return arr


def _same_length(caller: str, **arrays: np.ndarray) -> None:
    sizes = {name: a.size for name, a in arrays.items()}
    if len(set(sizes.values())) != 1:
        listed = ", ".join(f"{n}={s}" for n, s in sizes.items())
        raise DataError(f"{caller}: the inputs must have the same length; got {listed}.")


def rmse(y_true: Any, y_pred: Any) -> float:
    """Root mean squared error ``sqrt(mean((y_pred - y_true)^2))``.

    Examples
    --------
    >>> rmse([1.0, 2.0, 3.0], [1.0, 2.0, 5.0])  # sqrt(4 / 3)
    1.1547005383792515
    """
    t = _as_1d(y_true, "y_true", "rmse")
    p = _as_1d(y_pred, "y_pred", "rmse")
    _same_length("rmse", y_true=t, y_pred=p)
    if t.size == 0:
        raise DataError("rmse: the inputs are empty.")
    return float(np.sqrt(np.mean(np.square(p - t))))


def frequency_buckets(train_counts: Any, n_buckets: int = 5) -> np.ndarray:
    """Bucket of every item code by training frequency: 0 = least frequent (the tail).

    Items are sorted by increasing count (ties by code) and cut into ``n_buckets`` groups of
    equal size (sizes as ``np.array_split``: the first ``n_items % n_buckets`` groups hold one
    item more). Items with no training rating are included and land in bucket 0.

    Parameters
    ----------
    train_counts : array-like of int, shape (n_items,), or Ratings
        Training ratings per item code (``train.item_counts()``), or the training Ratings.
    n_buckets : int, default 5
        Number of buckets, >= 1 (the paper uses 5).

    Returns
    -------
    ndarray of int64, shape (n_items,)

    Examples
    --------
    >>> frequency_buckets([5, 0, 9, 1, 3, 2], n_buckets=3).tolist()
    [2, 0, 2, 0, 1, 1]
    """
    caller = "frequency_buckets"
    n_buckets = check_int(n_buckets, "n_buckets", caller, low=1)
    if isinstance(train_counts, Ratings):
        train_counts = train_counts.item_counts()
    counts = _as_1d(train_counts, "train_counts", caller)
    order = np.argsort(counts, kind="stable")
    sizes = [part.size for part in np.array_split(order, n_buckets)]
    buckets = np.empty(counts.size, dtype=np.int64)
    buckets[order] = np.repeat(np.arange(n_buckets), sizes)
    return buckets


def _check_buckets(buckets: Any, n_items: int, n_buckets: int, caller: str) -> np.ndarray:
    b = np.asarray(buckets)
    if b.ndim != 1 or b.size != n_items or not np.issubdtype(b.dtype, np.integer):
        raise DataError(
            f"{caller}: 'buckets' must be one integer bucket per item code ({n_items}); got "
            f"shape {b.shape} and dtype {b.dtype}. Build it with frequency_buckets."
        )
    if b.size and (b.min() < 0 or b.max() >= n_buckets):
        raise DataError(
            f"{caller}: 'buckets' must lie in [0, {n_buckets - 1}] for n_buckets={n_buckets}; "
            f"got values in [{b.min()}, {b.max()}]."
        )
    return b.astype(np.int64, copy=False)


def sliced_rmse(
    items: Any, y_true: Any, y_pred: Any, buckets: Any, n_buckets: int = 5
) -> np.ndarray:
    """RMSE of the test ratings of each item bucket; NaN for a bucket without test ratings.

    Parameters
    ----------
    items : array-like of int, shape (n_ratings,)
        Item code of every test rating (``test.items``).
    y_true, y_pred : array-like of float, shape (n_ratings,)
        Ratings and predictions.
    buckets : array-like of int, shape (n_items,)
        Bucket of every item code, from :func:`frequency_buckets`.
    n_buckets : int, default 5

    Returns
    -------
    ndarray of float64, shape (n_buckets,)
    """
    caller = "sliced_rmse"
    n_buckets = check_int(n_buckets, "n_buckets", caller, low=1)
    it = _as_1d(items, "items", caller, dtype=None)
    t = _as_1d(y_true, "y_true", caller)
    p = _as_1d(y_pred, "y_pred", caller)
    _same_length(caller, items=it, y_true=t, y_pred=p)
    b = np.asarray(buckets)
    if it.size and (not np.issubdtype(it.dtype, np.integer) or it.min() < 0 or it.max() >= b.size):
        raise DataError(f"{caller}: 'items' must be item codes in [0, {b.size - 1}].")
    b = _check_buckets(b, b.size, n_buckets, caller)
    item_bucket = b[it]
    sq = np.bincount(item_bucket, weights=np.square(p - t), minlength=n_buckets)
    n = np.bincount(item_bucket, minlength=n_buckets)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.sqrt(np.where(n > 0, sq / np.maximum(n, 1), np.nan))


def top_k_items(scores: np.ndarray, k: int) -> np.ndarray:
    """Columns of the ``k`` largest scores of every row, best first (``np.argpartition``).

    Ties are broken arbitrarily. ``k`` larger than the number of columns returns all columns.
    """
    scores = np.asarray(scores)
    k = min(check_int(k, "k", "top_k_items", low=1), scores.shape[1])
    if k < scores.shape[1]:
        part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    else:
        part = np.broadcast_to(np.arange(scores.shape[1]), scores.shape).copy()
    rows = np.arange(scores.shape[0])[:, None]
    order = np.argsort(-scores[rows, part], axis=1, kind="stable")
    return part[rows, order]


def _rows_of(offsets: np.ndarray, users: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row indices of ``users`` in a CSR table and the batch position of each row."""
    starts = offsets[users]
    lengths = offsets[users + 1] - starts
    pos = np.repeat(np.arange(users.size), lengths)
    first = np.cumsum(lengths) - lengths
    rows = np.arange(int(lengths.sum())) - np.repeat(first - starts, lengths)
    return rows, pos


def _recall_sums(
    scores: np.ndarray, is_target: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per-row recall of the top-k (0 for rows without a target) and the has-target mask.

    Selected columns scored -inf (history or other buckets) never count as hits.
    """
    n_targets = is_target.sum(axis=1)
    top = top_k_items(scores, k)
    rows = np.arange(scores.shape[0])[:, None]
    hit = is_target[rows, top] & (scores[rows, top] > -np.inf)
    has = n_targets > 0
    recall = hit.sum(axis=1) / np.maximum(np.minimum(k, n_targets), 1)
    return recall, has


def _check_score_matrix(scores: Any, n_rows: int, n_items: int) -> np.ndarray:
    s = np.array(scores, dtype=np.float64)  # a copy: history is masked in place
    if s.shape != (n_rows, n_items):
        raise DataError(
            f"ranking_metrics_at_k: score_fn must return an array of shape (len(user_codes), "
            f"n_items) = ({n_rows}, {n_items}); got shape {s.shape}."
        )
    if np.isnan(s).any():
        raise DataError("ranking_metrics_at_k: score_fn returned NaN scores.")
    return s


def ranking_metrics_at_k(
    score_fn: ScoreFn,
    history: Ratings,
    targets: Ratings,
    k: int = 20,
    *,
    buckets: Any = None,
    n_buckets: int = 5,
    bucket_ks: Sequence[int] | None = None,
    batch_size: int = 1024,
) -> dict[str, Any]:
    """Recall@k over the users with at least one target, overall and by item bucket.

    For every user with a target, the user's history items are excluded (scored -inf), the
    ``k`` best-scored items are taken and ``recall_j = |topk_j ∩ targets_j| / min(k,
    |targets_j|)``; the result is the mean over users (paper, Appendix D).

    With ``buckets``, the recall of bucket ``b`` ranks only the items of bucket ``b``, counts
    only the targets in bucket ``b``, averages over the users with at least one target there,
    and uses ``k_b = bucket_ks[b]`` (default ``k``). Recall is naturally lower on tail buckets,
    so the paper reports larger ``k`` for them: ``k = 20`` on the most popular bucket, 40 on
    the second, 60 on the third and so on, i.e. ``bucket_ks=(100, 80, 60, 40, 20)`` for 5
    buckets ordered tail first.

    Parameters
    ----------
    score_fn : callable
        ``score_fn(user_codes) -> scores`` of shape ``(len(user_codes), n_items)``, higher is
        better; called once per batch of users (int32 codes, increasing).
    history, targets : Ratings
        The users' known items (excluded from ranking) and held-out items, with the same code
        books (for example two subsets of one Ratings).
    k : int, default 20
        Cut-off, >= 1.
    buckets : array-like of int, shape (n_items,), optional
        Item buckets from :func:`frequency_buckets` (computed on training counts).
    n_buckets : int, default 5
        Number of buckets when ``buckets`` is given.
    bucket_ks : sequence of int, optional
        Cut-off of each bucket, bucket 0 first.
    batch_size : int, default 1024
        Users scored at once; memory is about ``3 * 8 * batch_size * n_items`` bytes.

    Returns
    -------
    dict
        ``"recall"`` (float, NaN without users), ``"users"`` (int) and, with ``buckets``,
        ``"recall_by_bucket"`` (ndarray of shape (n_buckets,), NaN for a bucket no user has a
        target in) and ``"users_by_bucket"`` (ndarray of int).

    Examples
    --------
    >>> h = Ratings.from_codes([0, 1], [0, 1], [1.0, 1.0], n_items=4)
    >>> t = Ratings.from_codes([0, 1], [1, 3], [1.0, 1.0], n_items=4)
    >>> scores = lambda users: np.tile([4.0, 3.0, 2.0, 1.0], (len(users), 1))
    >>> ranking_metrics_at_k(scores, h, t, k=1)
    {'recall': 0.5, 'users': 2}
    """
    caller = "ranking_metrics_at_k"
    if not callable(score_fn):
        raise InvalidParameterError(
            f"The 'score_fn' parameter of {caller} must be a callable. Got {score_fn!r} instead."
        )
    k = check_int(k, "k", caller, low=1)
    batch_size = check_int(batch_size, "batch_size", caller, low=1)
    for name, r in (("history", history), ("targets", targets)):
        if not isinstance(r, Ratings):
            raise InvalidParameterError(
                f"The {name!r} parameter of {caller} must be a Ratings. Got "
                f"{type(r).__name__} instead."
            )
    if history.n_items != targets.n_items or history.n_users != targets.n_users:
        raise DataError(
            f"{caller}: history and targets must share code books; got (n_users, n_items) = "
            f"({history.n_users}, {history.n_items}) and ({targets.n_users}, "
            f"{targets.n_items}). Split one Ratings with subset()."
        )
    n_items = targets.n_items
    sliced = buckets is not None
    if sliced:
        n_buckets = check_int(n_buckets, "n_buckets", caller, low=1)
        b = _check_buckets(buckets, n_items, n_buckets, caller)
        if bucket_ks is None:
            ks = [k] * n_buckets
        else:
            if isinstance(bucket_ks, str | bytes) or len(bucket_ks) != n_buckets:
                raise InvalidParameterError(
                    f"The 'bucket_ks' parameter of {caller} must be a sequence of {n_buckets} "
                    f"ints >= 1. Got {bucket_ks!r} instead."
                )
            ks = [check_int(v, "bucket_ks", caller, low=1) for v in bucket_ks]
        bucket_cols = [np.flatnonzero(b == j) for j in range(n_buckets)]
        sums = np.zeros(n_buckets)
        counts = np.zeros(n_buckets, dtype=np.int64)
    h_off = history.user_offsets()
    t_off = targets.user_offsets()
    users = np.flatnonzero(np.diff(t_off) > 0).astype(np.int32)
    total, n_users = 0.0, 0
    for s in range(0, users.size, batch_size):
        batch = users[s : s + batch_size]
        scores = _check_score_matrix(score_fn(batch), batch.size, n_items)
        rows, pos = _rows_of(h_off, batch)
        scores[pos, history.items[rows]] = -np.inf
        is_target = np.zeros((batch.size, n_items), dtype=bool)
        rows, pos = _rows_of(t_off, batch)
        is_target[pos, targets.items[rows]] = True
        recall, has = _recall_sums(scores, is_target, k)
        total += float(recall[has].sum())
        n_users += int(has.sum())
        if sliced:
            for j, cols in enumerate(bucket_cols):
                if cols.size == 0:
                    continue
                recall, has = _recall_sums(scores[:, cols], is_target[:, cols], ks[j])
                sums[j] += recall[has].sum()
                counts[j] += int(has.sum())
    out: dict[str, Any] = {"recall": total / n_users if n_users else float("nan")}
    out["users"] = n_users
    if sliced:
        with np.errstate(invalid="ignore", divide="ignore"):
            out["recall_by_bucket"] = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
        out["users_by_bucket"] = counts
    return out


def popularity_scores(train: Ratings) -> ScoreFn:
    """The popularity baseline: every user gets items ranked by their training count.

    This is a **non-private** reference: it uses the exact item counts of ``train``, which are
    data-dependent and never released by userdp's private methods. Report it beside every DP
    method's Recall (as the global mean beside RMSE) to show what a model must beat; a private
    variant would rank by noisy counts.

    Returns
    -------
    callable
        ``score_fn(user_codes) -> ndarray`` of shape ``(len(user_codes), n_items)`` holding the
        training counts (as float64) in every row, for :func:`ranking_metrics_at_k`.
    """
    if not isinstance(train, Ratings):
        raise InvalidParameterError(
            "The 'train' parameter of popularity_scores must be a Ratings. Got "
            f"{type(train).__name__} instead."
        )
    counts = train.item_counts().astype(np.float64)

    def score_fn(user_codes: np.ndarray) -> np.ndarray:
        return np.tile(counts, (np.asarray(user_codes).size, 1))

    return score_fn
