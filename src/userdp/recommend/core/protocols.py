"""Benchmark protocols as code: the ML10M and ML20M splits of the DP recommendation papers.

* ML10M (Lee et al. 2013, used by Jain et al. 2018, Chien et al. 2021 and the multi-task DP
  paper): a random 80/10/10 split of the rating rows, scored by RMSE; test users are projected
  from their train + validation ratings.
* ML20M (Liang et al. 2018): ratings above 3.5, users with at least 5 of them, held-out users
  whose ratings are split into a history (80%) and targets (20%), scored by Recall@20 with the
  history excluded from ranking; training keeps the top 10% most-rated items.

Every part is a :class:`~userdp.data.Ratings` with the parent's code books, so the same user
and item codes index all parts. Splits are seeded NumPy permutations, reproducible from the
seed but not bit-identical to the references' pandas/NumPy-global-state sampling.

:func:`protocol_task` turns a split into what models are scored on (an
:class:`EvaluationTask`), :func:`score_model` scores a released model on it and
:func:`baseline_scores` the non-private references (global mean, popularity); the CLI's
``userdp recommend evaluate`` and ``benchmarks/recommend.py`` share them, and the ML20M
protocol's model settings (:data:`ML20M_MODEL_DEFAULTS`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from userdp._validation import check_choice, check_fractions, check_int, check_real
from userdp.data.ratings import Ratings
from userdp.exceptions import DataError, InvalidParameterError
from userdp.recommend.core.metrics import (
    frequency_buckets,
    popularity_scores,
    ranking_metrics_at_k,
    rmse,
    sliced_rmse,
)

__all__ = [
    "ML20M_MODEL_DEFAULTS",
    "N_BUCKETS",
    "PROTOCOL_METRIC",
    "EvaluationTask",
    "HeldOutSplit",
    "RatingSplit",
    "baseline_scores",
    "compact_users",
    "holdout_rmse",
    "ml10m_split",
    "ml20m_split",
    "protocol_task",
    "restrict_items",
    "score_model",
]

#: Item-frequency buckets of the sliced metrics: bucket 0 holds the least-rated items.
N_BUCKETS = 5
#: Each protocol's metric: RMSE for ML10M, Recall@k for ML20M.
PROTOCOL_METRIC = {"ml10m": "rmse", "ml20m": "recall"}
#: Model settings of the ML20M protocol (Liang et al. 2018; Krichene et al. 2023, Section 6):
#: implicit 0/1 feedback centred on 0, training on the 10% most-rated items (by released
#: counts), with the implicit term on unrated items.
ML20M_MODEL_DEFAULTS: dict[str, Any] = {
    "rating_range": (0.0, 1.0),
    "center": 0.0,
    "top_items": 0.1,
    "unobserved_weight": 1.0,
}


@dataclass(frozen=True)
class RatingSplit:
    """A split of rating rows into train, validation and test parts (same code books)."""

    train: Ratings
    validation: Ratings
    test: Ratings


@dataclass(frozen=True)
class HeldOutSplit:
    """Training users, and held-out users whose ratings are split into history and targets.

    ``validation_history`` / ``validation_targets`` hold the validation users' ratings and
    ``test_history`` / ``test_targets`` the test users'; ``train`` holds the other users'. All
    parts share the parent's code books.
    """

    train: Ratings
    validation_history: Ratings
    validation_targets: Ratings
    test_history: Ratings
    test_targets: Ratings


def _check_ratings(ratings: Any, caller: str) -> Ratings:
    if not isinstance(ratings, Ratings):
        raise InvalidParameterError(
            f"The 'ratings' parameter of {caller} must be a Ratings. Got "
            f"{type(ratings).__name__} instead. Build one with userdp.data.as_ratings."
        )
    return ratings


def ml10m_split(
    ratings: Ratings, *, fractions: tuple[float, float, float] = (0.8, 0.1, 0.1), seed: int = 1234
) -> RatingSplit:
    """Random split of the rating rows into train / validation / test (the ML10M protocol).

    A NumPy ``Generator`` permutation of the rows (seeded) is cut at
    ``round(fractions[0] * n)`` and ``round((fractions[0] + fractions[1]) * n)``, so every
    part's size is within one row of its fraction. The reference code samples with pandas
    (``DataFrame.sample(frac=0.8, random_state=1234)``), so the rows drawn here are not
    bit-identical to it, only identically distributed. Evaluate test users by projecting them
    from their train + validation ratings (billboard model).

    Parameters
    ----------
    ratings : Ratings
    fractions : (float, float, float), default (0.8, 0.1, 0.1)
        Positive, summing to 1.
    seed : int, default 1234

    Returns
    -------
    RatingSplit
        Disjoint parts whose union is ``ratings``, each sorted by (user, item).
    """
    caller = "ml10m_split"
    ratings = _check_ratings(ratings, caller)
    parts = check_fractions(fractions, "fractions", caller)
    if len(parts) != 3:
        raise InvalidParameterError(
            f"The 'fractions' parameter of {caller} must be three positive floats (train, "
            f"validation, test) summing to 1. Got {fractions!r} instead."
        )
    n = ratings.n_ratings
    cut1 = round(parts[0] * n)
    cut2 = max(cut1, round((parts[0] + parts[1]) * n))
    perm = np.random.default_rng(seed).permutation(n)
    label = np.empty(n, dtype=np.int8)
    label[perm[:cut1]] = 0
    label[perm[cut1:cut2]] = 1
    label[perm[cut2:]] = 2
    return RatingSplit(*(ratings.subset(label == j) for j in range(3)))


def _split_history_targets(
    r: Ratings, users_mask: np.ndarray, history_fraction: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Row masks (history, targets) of the users in ``users_mask``: a random split per user.

    A user with ``n`` ratings gets ``floor((1 - history_fraction) * n)`` targets, at least 1
    and at most ``n - 1``; the targets are a uniformly random subset of the user's ratings.
    """
    rows = np.flatnonzero(users_mask[r.users])
    u = r.users[rows]
    n_u = np.bincount(u, minlength=r.n_users)
    n_targets = np.floor((1.0 - history_fraction) * n_u + 1e-9).astype(np.int64)
    np.clip(n_targets, 1, np.maximum(n_u - 1, 1), out=n_targets)
    order = np.lexsort((rng.random(rows.size), u))  # random order within each user
    start = np.zeros(r.n_users + 1, dtype=np.int64)
    np.cumsum(n_u, out=start[1:])
    rank = np.empty(rows.size, dtype=np.int64)
    rank[order] = np.arange(rows.size) - start[u[order]]
    is_target = rank < n_targets[u]
    history = np.zeros(r.n_ratings, dtype=bool)
    targets = np.zeros(r.n_ratings, dtype=bool)
    history[rows[~is_target]] = True
    targets[rows[is_target]] = True
    return history, targets


def ml20m_split(
    ratings: Ratings,
    *,
    min_rating: float = 3.5,
    min_user_ratings: int = 5,
    heldout_users: int = 10_000,
    history_fraction: float = 0.8,
    seed: int = 98765,
) -> HeldOutSplit:
    """Held-out-users split of Liang et al. (2018) used for ML20M Recall@20.

    1. Keep ratings strictly above ``min_rating`` (implicit feedback: "liked"); the values are
       kept, and implicit models may set them to 1.
    2. Keep users with at least ``min_user_ratings`` such ratings.
    3. Permute those users with ``numpy.random.default_rng(seed)``: the first ones are training
       users, then ``heldout_users`` validation users, then ``heldout_users`` test users. With
       fewer than ``3 * heldout_users`` users, each held-out group has ``int(0.1 * n_users)``
       users instead (so small data sets keep 80% of users for training).
    4. Split every held-out user's ratings at random into history (a fraction
       ``history_fraction``, at least 1) and targets (``floor((1 - history_fraction) * n)``,
       at least 1). Score with Recall@k on the targets, excluding the history from ranking.

    The reference then trains on the top 10% most-rated items and drops the other items from
    every part. Choosing those items from exact counts is a data-dependent release (the public
    reference does not charge it); choose them with private counts and apply the choice with
    :func:`restrict_items`. The reference also keeps only items seen in training:
    ``restrict_items(split, split.train.item_counts() > 0)``, again a data-dependent choice.

    The user permutation and the per-user splits come from a NumPy ``Generator``, not the
    reference's ``np.random.seed(98765)`` global state, so they are not bit-identical to it.

    Parameters
    ----------
    ratings : Ratings
    min_rating : float, default 3.5
    min_user_ratings : int, default 5
        >= 2, so that every held-out user has a history and a target.
    heldout_users : int, default 10,000
        Users in each of the validation and test groups, >= 1.
    history_fraction : float, default 0.8
        In (0, 1).
    seed : int, default 98765

    Returns
    -------
    HeldOutSplit

    Raises
    ------
    DataError
        If fewer than 10 users are left after filtering (no held-out user).
    """
    caller = "ml20m_split"
    ratings = _check_ratings(ratings, caller)
    min_rating = check_real(min_rating, "min_rating", caller)
    min_user_ratings = check_int(min_user_ratings, "min_user_ratings", caller, low=2)
    heldout_users = check_int(heldout_users, "heldout_users", caller, low=1)
    history_fraction = check_real(
        history_fraction,
        "history_fraction",
        caller,
        low=0.0,
        high=1.0,
        low_open=True,
        high_open=True,
    )
    liked = ratings.subset(ratings.values > min_rating)
    counts = liked.user_counts()
    kept = liked.subset(counts[liked.users] >= min_user_ratings)
    present = np.flatnonzero(counts >= min_user_ratings)
    n = present.size
    n_held = heldout_users if n >= 3 * heldout_users else int(0.1 * n)
    if n_held < 1:
        raise DataError(
            f"{caller}: only {n} users have at least {min_user_ratings} ratings above "
            f"{min_rating}; at least 10 are needed to hold out users."
        )
    rng = np.random.default_rng(seed)
    perm = present[rng.permutation(n)]
    group = np.full(kept.n_users, -1, dtype=np.int8)  # -1: no kept rating
    group[perm[: n - 2 * n_held]] = 0
    group[perm[n - 2 * n_held : n - n_held]] = 1
    group[perm[n - n_held :]] = 2
    vh, vt = _split_history_targets(kept, group == 1, history_fraction, rng)
    th, tt = _split_history_targets(kept, group == 2, history_fraction, rng)
    return HeldOutSplit(
        train=kept.subset(group[kept.users] == 0),
        validation_history=kept.subset(vh),
        validation_targets=kept.subset(vt),
        test_history=kept.subset(th),
        test_targets=kept.subset(tt),
    )


def restrict_items(split: HeldOutSplit, keep: Any) -> HeldOutSplit:
    """Drop the ratings of items not in ``keep`` from every part of a split (codes unchanged).

    ``keep`` is a boolean mask over item codes, for example the top 10% items by *private*
    counts (the ML20M protocol). A held-out user may lose all history (then nothing is
    excluded from ranking) or all targets (then the user is not scored).
    """
    if not isinstance(split, HeldOutSplit):
        raise InvalidParameterError(
            "The 'split' parameter of restrict_items must be a HeldOutSplit. Got "
            f"{type(split).__name__} instead."
        )
    mask = np.asarray(keep)
    n_items = split.train.n_items
    if mask.dtype != bool or mask.shape != (n_items,):
        raise DataError(
            f"restrict_items: 'keep' must be a boolean mask over the {n_items} item codes; got "
            f"dtype {mask.dtype} and shape {mask.shape}."
        )
    parts = {f.name: getattr(split, f.name) for f in fields(split)}
    return HeldOutSplit(**{name: r.subset(mask[r.items]) for name, r in parts.items()})


def holdout_rmse(model: Any, history: Ratings, test: Ratings, buckets: Any) -> dict[str, Any]:
    """ML10M protocol score: test RMSE overall and per item bucket (:func:`sliced_rmse`).

    ``model`` predicts by item id (anything with ``predict(history, users, item_ids)``), so a
    model trained on its own item set (a privately selected one) is scored on the test items
    it does not know through its centre.
    """
    pred = model.predict(history, test.users, test.item_labels.take(test.items))
    return {
        "rmse": rmse(test.values, pred),
        "buckets": sliced_rmse(test.items, test.values, pred, buckets).tolist(),
    }


# -- scoring on a protocol ---------------------------------------------------------------------
@dataclass(frozen=True)
class EvaluationTask:
    """What every model is scored on; the three parts share their code books.

    ``history``: the test users' known ratings (their embeddings come from them; excluded from
    ranking); ``targets``: their held-out ratings; ``train``: what the frequency buckets and
    the baselines use. ``metrics`` holds ``"rmse"`` and/or ``"recall"``, ``k`` the cut-off of
    Recall@k. The metrics read the test data in the clear: evaluation, not release.
    """

    history: Ratings
    targets: Ratings
    train: Ratings
    metrics: tuple[str, ...]
    k: int = 20

    @property
    def buckets(self) -> np.ndarray:
        """Item buckets by number of training ratings (:func:`frequency_buckets`)."""
        return frequency_buckets(self.train.item_counts(), N_BUCKETS)


def compact_users(r: Ratings) -> Ratings:
    """The same ratings without user codes that have none (item codes unchanged).

    Protocol splits keep the parent's code books, so a training part holds the held-out users'
    codes with no ratings; a trainer need not see them.
    """
    if r.n_ratings and np.all(r.user_counts() > 0):
        return r
    return Ratings.from_codes(
        r.users,
        r.items,
        r.values,
        n_users=r.n_users,
        n_items=r.n_items,
        user_labels=r.user_labels,
        item_labels=r.item_labels,
    )


def protocol_task(
    ratings: Ratings,
    protocol: str,
    *,
    metrics: tuple[str, ...] | None = None,
    k: int = 20,
    seed: int | None = None,
) -> tuple[Ratings, EvaluationTask]:
    """Split ``ratings`` with a benchmark protocol: the training part and the scoring task.

    ``"ml10m"``: :func:`ml10m_split`; models train on the 80%, test users are projected from
    train + validation, scored on the test ratings. ``"ml20m"``: :func:`ml20m_split`, every
    part as implicit feedback (train models with :data:`ML20M_MODEL_DEFAULTS`); scored on the
    held-out users' targets from their history. ``metrics`` defaults to the protocol's
    (:data:`PROTOCOL_METRIC`); ``seed`` to the split's own.
    """
    protocol = check_choice(protocol, "protocol", "protocol_task", list(PROTOCOL_METRIC))
    metrics = (PROTOCOL_METRIC[protocol],) if metrics is None else tuple(metrics)
    if protocol == "ml20m" and "rmse" in metrics:
        raise InvalidParameterError(
            "The ml20m protocol is implicit feedback (liked or not) and has no RMSE; score it "
            "by recall, or use the ml10m protocol for RMSE."
        )
    kw: dict[str, Any] = {} if seed is None else {"seed": seed}
    if protocol == "ml10m":
        split = ml10m_split(ratings, **kw)
        train, history, targets = split.train, split.train.union(split.validation), split.test
    else:
        held = ml20m_split(ratings, **kw)
        train = held.train.implicit()
        history, targets = held.test_history.implicit(), held.test_targets.implicit()
    if train.n_ratings == 0 or targets.n_ratings == 0:
        raise DataError(f"The {protocol} split leaves no training or test data.")
    return train, EvaluationTask(history, targets, train, metrics, k)


def score_model(model: Any, task: EvaluationTask) -> list[tuple[str, float, list[float]]]:
    """``(metric, value, value per bucket)`` of a released model on ``task``.

    RMSE predicts every target rating (items the model does not know predict its centre);
    Recall@k ranks every item the user has not rated in the history, items the model has no
    embedding for never recommended. ``model``: a :class:`~userdp.recommend.RecommenderModel`.
    """
    out = []
    buckets = task.buckets
    h, t = task.history, task.targets
    if "rmse" in task.metrics:
        pred = model.predict(h, t.users, h.item_values(t.items))
        sliced = sliced_rmse(t.items, t.values, pred, buckets, N_BUCKETS)
        out.append(("rmse", rmse(t.values, pred), list(sliced)))
    if "recall" in task.metrics:
        V = model.user_factors(h)
        codes = model.item_codes(h.item_labels)
        known = codes >= 0  # items the model has no embedding for are never recommended
        U = np.zeros((h.n_items, V.shape[1]))
        U[known] = model.item_factors[codes[known]]

        def score(users: np.ndarray) -> np.ndarray:
            s = V[users] @ U.T
            s[:, ~known] = -np.inf
            return s

        out.append(_recall(score, task, buckets))
    return out


def _recall(
    score: Callable[[np.ndarray], np.ndarray], task: EvaluationTask, buckets: np.ndarray
) -> tuple[str, float, list[float]]:
    res = ranking_metrics_at_k(
        score, task.history, task.targets, task.k, buckets=buckets, n_buckets=N_BUCKETS
    )
    return f"recall@{task.k}", res["recall"], list(res["recall_by_bucket"])


def baseline_scores(task: EvaluationTask) -> list[tuple[str, str, float, list[float]]]:
    """``(name, metric, value, per bucket)`` of the NON-PRIVATE references: the global mean of
    the training ratings (RMSE) and the items ranked by exact training counts (Recall)."""
    rows = []
    buckets = task.buckets
    t = task.targets
    if "rmse" in task.metrics:
        pred = np.full(t.n_ratings, float(task.train.values.mean()))
        sliced = list(sliced_rmse(t.items, t.values, pred, buckets, N_BUCKETS))
        rows.append(("global-mean", "rmse", rmse(t.values, pred), sliced))
    if "recall" in task.metrics:
        metric, value, sliced = _recall(popularity_scores(task.train), task, buckets)
        rows.append(("popularity", metric, value, sliced))
    return rows
