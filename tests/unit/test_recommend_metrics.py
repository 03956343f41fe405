"""Recommendation metrics (RMSE, Recall@k, frequency buckets) and the ML10M/ML20M protocols."""

from __future__ import annotations

import math

import numpy as np
import pytest

from userdp.data.ratings import Ratings
from userdp.exceptions import DataError, InvalidParameterError
from userdp.recommend.core.metrics import (
    frequency_buckets,
    popularity_scores,
    ranking_metrics_at_k,
    rmse,
    sliced_rmse,
    top_k_items,
)
from userdp.recommend.core.protocols import (
    HeldOutSplit,
    RatingSplit,
    ml10m_split,
    ml20m_split,
    restrict_items,
)


def keys(r: Ratings) -> np.ndarray:
    return r.users.astype(np.int64) * r.n_items + r.items


# -- RMSE and buckets ---------------------------------------------------------------------------
def test_rmse_of_known_vectors():
    assert rmse([1.0, 2.0, 3.0], [1.0, 2.0, 5.0]) == pytest.approx(math.sqrt(4 / 3))
    assert rmse([0.0, 0.0], [3.0, 4.0]) == pytest.approx(math.sqrt(12.5))
    assert rmse(np.arange(5.0), np.arange(5.0)) == 0.0


def test_rmse_rejects_bad_input():
    with pytest.raises(DataError, match="same length"):
        rmse([1.0, 2.0], [1.0])
    with pytest.raises(DataError, match="empty"):
        rmse([], [])


def test_frequency_buckets_hand_case_and_ties_by_code():
    # increasing count: item 1 (0), 3 (1), 5 (2), 4 (3), 0 (5), 2 (9)
    assert frequency_buckets([5, 0, 9, 1, 3, 2], n_buckets=3).tolist() == [2, 0, 2, 0, 1, 1]
    assert frequency_buckets([1, 1, 1, 1], n_buckets=2).tolist() == [0, 0, 1, 1]
    # 7 items in 3 buckets: sizes 3, 2, 2 as np.array_split
    assert np.bincount(frequency_buckets(np.zeros(7), 3)).tolist() == [3, 2, 2]


def test_frequency_buckets_equal_size_and_ordered_by_count():
    counts = np.random.default_rng(3).poisson(20, size=1003)
    counts[:50] = 0  # never-rated items are included, in the tail
    b = frequency_buckets(counts, n_buckets=5)
    sizes = np.bincount(b, minlength=5)
    assert sizes.max() - sizes.min() <= 1 and sizes.sum() == 1003
    for j in range(4):
        assert counts[b == j].max() <= counts[b == j + 1].min()
    assert np.all(b[:50] == 0)


def test_frequency_buckets_accepts_ratings():
    r = Ratings.from_codes([0, 0, 1, 1, 2], [0, 1, 1, 2, 1], np.ones(5), n_items=4)
    assert frequency_buckets(r, n_buckets=2).tolist() == frequency_buckets([1, 3, 1, 0], 2).tolist()


def test_sliced_rmse_by_bucket_and_nan_for_empty():
    items = [0, 1, 2, 2]
    y_true = [1.0, 1.0, 1.0, 1.0]
    y_pred = [2.0, 3.0, 1.0, 3.0]
    out = sliced_rmse(items, y_true, y_pred, buckets=[0, 1, 1], n_buckets=3)
    assert out[0] == pytest.approx(1.0)
    assert out[1] == pytest.approx(math.sqrt(8 / 3))
    assert math.isnan(out[2])
    with pytest.raises(DataError, match="buckets"):
        sliced_rmse(items, y_true, y_pred, buckets=[0, 1, 3], n_buckets=3)


def test_top_k_items_best_first():
    scores = np.array([[0.1, 0.9, 0.5, 0.7], [4.0, 3.0, 2.0, 1.0]])
    assert top_k_items(scores, 2).tolist() == [[1, 3], [0, 1]]
    assert top_k_items(scores, 10).tolist() == [[1, 3, 2, 0], [0, 1, 2, 3]]


# -- Recall@k -----------------------------------------------------------------------------------
# 4 users, 6 items. History: user 0 {0}, user 2 {3, 5}, user 3 {1}. Targets: user 0 {1, 2},
# user 1 {4}, user 2 {0, 1, 2}; user 3 has no target and is not scored.
HIST = [(0, 0), (2, 3), (2, 5), (3, 1)]
TARG = [(0, 1), (0, 2), (1, 4), (2, 0), (2, 1), (2, 2)]
SCORES = np.array(
    [
        [9.0, 8.0, 1.0, 7.0, 0.0, 2.0],
        [5.0, 4.0, 3.0, 2.0, 1.0, 0.0],
        [1.0, 2.0, 3.0, 9.0, 0.0, 8.0],
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    ]
)


@pytest.fixture
def hand_split() -> tuple[Ratings, Ratings]:
    pairs = HIST + TARG
    parent = Ratings.from_codes(
        [u for u, _ in pairs], [i for _, i in pairs], np.ones(len(pairs)), n_items=6
    )
    in_hist = np.isin(keys(parent), [u * 6 + i for u, i in HIST])
    return parent.subset(in_hist), parent.subset(~in_hist)


def scorer(users: np.ndarray) -> np.ndarray:
    return SCORES[users]


def test_recall_hand_example(hand_split):
    history, targets = hand_split
    # k=2: user 0 ranks 1, 3 (0 excluded): 1 hit / min(2, 2) = 0.5; user 1 ranks 0, 1: 0;
    # user 2 ranks 2, 1 (3 and 5 excluded): 2 hits / min(2, 3) = 1.
    out = ranking_metrics_at_k(scorer, history, targets, k=2)
    assert out == {"recall": pytest.approx(0.5), "users": 3}
    # k=5: user 0 gets both targets, user 1 its only one, user 2 all three (only 4 items are
    # rankable: the fifth pick is an excluded item and is not a hit).
    assert ranking_metrics_at_k(scorer, history, targets, k=5)["recall"] == pytest.approx(1.0)
    # batching does not change the result, and the scorer's array is not modified
    before = SCORES.copy()
    assert ranking_metrics_at_k(scorer, history, targets, k=2, batch_size=1)["recall"] == (
        pytest.approx(0.5)
    )
    assert np.array_equal(SCORES, before)


def test_recall_without_history_exclusion_is_lower(hand_split):
    history, targets = hand_split
    empty = history.subset(np.zeros(history.n_ratings, dtype=bool))
    # not excluding: user 0 ranks 0, 1 (0.5); user 1: 0; user 2 ranks 3, 5 (0)
    out = ranking_metrics_at_k(scorer, empty, targets, k=2)
    assert out["recall"] == pytest.approx(0.5 / 3)


def test_perfect_and_reversed_scorers():
    rng = np.random.default_rng(5)
    n_users, n_items = 60, 40
    u = np.repeat(np.arange(n_users), 12)
    i = np.concatenate([rng.choice(n_items, 12, replace=False) for _ in range(n_users)])
    parent = Ratings.from_codes(u, i, np.ones(u.size), n_items=n_items)
    is_hist = rng.random(parent.n_ratings) < 0.6
    history, targets = parent.subset(is_hist), parent.subset(~is_hist)
    dense = np.zeros((n_users, n_items))
    dense[targets.users, targets.items] = 1.0
    noise = rng.random((n_users, n_items)) * 0.5

    def perfect(users):
        return dense[users] + noise[users]

    def reversed_(users):
        return -dense[users] + noise[users]

    for k in (1, 5, 20):
        assert ranking_metrics_at_k(perfect, history, targets, k=k)["recall"] == 1.0
        # 40 items - at most 12 rated: k <= 20 never reaches the targets ranked last
        assert ranking_metrics_at_k(reversed_, history, targets, k=k)["recall"] == 0.0


def test_target_also_in_history_is_never_a_hit():
    history = Ratings.from_codes([0], [0], [1.0], n_items=3)
    targets = Ratings.from_codes([0], [0], [1.0], n_items=3)
    out = ranking_metrics_at_k(lambda u: np.ones((len(u), 3)), history, targets, k=3)
    assert out["recall"] == 0.0


def test_sliced_recall_restricted_to_buckets(hand_split):
    history, targets = hand_split
    buckets = np.array([0, 0, 1, 1, 2, 2])
    # k=1. Bucket 0 {0, 1}: user 0 -> 1 (hit), user 2 -> 1 (hit). Bucket 1 {2, 3}: user 0 -> 3
    # (miss), user 2 -> 2 (3 excluded; hit). Bucket 2 {4, 5}: only user 1 has a target, 4 (hit).
    out = ranking_metrics_at_k(scorer, history, targets, k=1, buckets=buckets, n_buckets=3)
    assert out["recall_by_bucket"].tolist() == [1.0, 0.5, 1.0]
    assert out["users_by_bucket"].tolist() == [2, 2, 1]
    assert out["recall"] == pytest.approx(2 / 3)  # top-1 of all: users 0, 2 hit; user 1 misses
    # a larger k on bucket 1 turns user 0's miss into a hit
    out = ranking_metrics_at_k(
        scorer, history, targets, k=1, buckets=buckets, n_buckets=3, bucket_ks=(1, 2, 1)
    )
    assert out["recall_by_bucket"].tolist() == [1.0, 1.0, 1.0]
    # a bucket without targets gives NaN
    out = ranking_metrics_at_k(
        scorer, history, targets, k=1, buckets=np.array([0, 0, 1, 1, 1, 1]), n_buckets=3
    )
    assert math.isnan(out["recall_by_bucket"][2]) and out["users_by_bucket"][2] == 0


def test_ranking_metrics_validation(hand_split):
    history, targets = hand_split
    with pytest.raises(InvalidParameterError, match="'k' parameter of ranking_metrics_at_k"):
        ranking_metrics_at_k(scorer, history, targets, k=0)
    with pytest.raises(DataError, match="shape"):
        ranking_metrics_at_k(lambda u: np.ones((len(u), 5)), history, targets)
    with pytest.raises(InvalidParameterError, match="bucket_ks"):
        ranking_metrics_at_k(scorer, history, targets, buckets=np.zeros(6, int), bucket_ks=[1])
    other = Ratings.from_codes([0], [0], [1.0], n_items=7)
    with pytest.raises(DataError, match="code books"):
        ranking_metrics_at_k(scorer, other, targets)


def test_popularity_baseline(hand_split):
    history, targets = hand_split
    train = Ratings.from_codes([0, 1, 2, 3, 0, 1, 2], [4, 4, 4, 4, 2, 2, 0], np.ones(7), n_items=6)
    fn = popularity_scores(train)
    s = fn(np.array([0, 2]))
    assert s.shape == (2, 6) and s[0].tolist() == [1.0, 0.0, 2.0, 0.0, 4.0, 0.0]
    # top-1 by popularity is item 4 for everyone: only user 1 (target 4) is hit
    assert ranking_metrics_at_k(fn, history, targets, k=1)["recall"] == pytest.approx(1 / 3)


# -- protocols ----------------------------------------------------------------------------------
def random_ratings(n_users: int = 300, n_items: int = 60, seed: int = 0) -> Ratings:
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 30, n_users)
    u = np.repeat(np.arange(n_users), sizes)
    i = np.concatenate([rng.choice(n_items, s, replace=False) for s in sizes])
    v = rng.integers(1, 11, u.size) * 0.5
    return Ratings.from_codes(u, i, v, n_items=n_items)


def test_ml10m_split_partitions_rows():
    r = random_ratings()
    split = ml10m_split(r)
    assert isinstance(split, RatingSplit)
    parts = [split.train, split.validation, split.test]
    all_keys = np.concatenate([keys(p) for p in parts])
    assert all_keys.size == r.n_ratings  # disjoint ...
    assert np.array_equal(np.sort(all_keys), keys(r))  # ... and the union is everything
    for p, f in zip(parts, (0.8, 0.1, 0.1), strict=True):
        assert abs(p.n_ratings - f * r.n_ratings) <= 1
        assert (p.n_users, p.n_items) == (r.n_users, r.n_items)
        assert np.all(np.diff(keys(p)) > 0)  # sorted by (user, item)
    # values travel with their rows
    lookup = dict(zip(keys(r).tolist(), r.values.tolist(), strict=True))
    assert all(
        lookup[k] == v for k, v in zip(keys(split.test).tolist(), split.test.values, strict=True)
    )
    again = ml10m_split(r)
    assert np.array_equal(keys(again.test), keys(split.test))
    assert not np.array_equal(keys(ml10m_split(r, seed=1).test), keys(split.test))
    with pytest.raises(InvalidParameterError, match="fractions"):
        ml10m_split(r, fractions=(0.5, 0.5))


def test_ml20m_split_filters_and_holds_out_users():
    r = random_ratings(n_users=400, seed=2)
    split = ml20m_split(r, heldout_users=10_000)  # fewer than 30,000 users: 10% each
    assert isinstance(split, HeldOutSplit)
    liked = r.values > 3.5
    n_liked = np.bincount(r.users[liked], minlength=r.n_users)
    kept_users = np.flatnonzero(n_liked >= 5)
    kept = liked & (n_liked[r.users] >= 5)
    parts = [
        split.train,
        split.validation_history,
        split.validation_targets,
        split.test_history,
        split.test_targets,
    ]
    for p in parts:
        assert np.all(p.values > 3.5)
        assert (p.n_users, p.n_items) == (r.n_users, r.n_items)
    union = np.sort(np.concatenate([keys(p) for p in parts]))
    assert np.array_equal(union, keys(r)[kept])  # exactly the kept ratings, each once
    train_u = set(np.unique(split.train.users).tolist())
    val_u = set(np.unique(split.validation_history.users).tolist())
    test_u = set(np.unique(split.test_history.users).tolist())
    n_held = int(0.1 * kept_users.size)
    assert len(val_u) == len(test_u) == n_held
    assert set(np.unique(split.validation_targets.users).tolist()) == val_u
    assert set(np.unique(split.test_targets.users).tolist()) == test_u
    assert not (train_u & val_u or train_u & test_u or val_u & test_u)
    assert train_u | val_u | test_u == set(kept_users.tolist())
    for hist, targ in (
        (split.validation_history, split.validation_targets),
        (split.test_history, split.test_targets),
    ):
        nh = hist.user_counts()
        nt = targ.user_counts()
        held = nt > 0
        n = nh + nt
        assert np.all(nh[held] >= 1)
        assert np.array_equal(nt[held], np.maximum(1, np.floor(0.2 * n[held] + 1e-9)))
        assert not np.intersect1d(keys(hist), keys(targ)).size


def test_ml20m_split_thresholds_are_strict_and_inclusive():
    # user 0: five ratings > 3.5 (kept); user 1: four > 3.5 and one = 3.5 (dropped);
    # users 2..11: filler so that 10% of users can be held out
    u = [0] * 5 + [1] * 5
    i = list(range(5)) * 2
    v = [4.0] * 5 + [4.0] * 4 + [3.5]
    for user in range(2, 12):
        u += [user] * 5
        i += list(range(5))
        v += [5.0] * 5
    r = Ratings.from_codes(u, i, v)
    split = ml20m_split(r, heldout_users=5)  # 11 users < 15: int(1.1) = 1 user each
    users = np.concatenate(
        [
            split.train.users,
            split.validation_history.users,
            split.validation_targets.users,
            split.test_history.users,
            split.test_targets.users,
        ]
    )
    assert 1 not in users and 0 in users
    assert np.unique(split.test_history.users).size == 1
    # a held-out user with 5 ratings: 4 history, 1 target
    assert split.test_history.n_ratings == 4 and split.test_targets.n_ratings == 1
    with pytest.raises(DataError, match="at least 10"):
        ml20m_split(r.subset(r.users < 5))
    with pytest.raises(InvalidParameterError, match="min_user_ratings"):
        ml20m_split(r, min_user_ratings=1)


def test_ml20m_split_heldout_count_and_seed():
    r = random_ratings(n_users=400, seed=4)
    a = ml20m_split(r, heldout_users=20)
    b = ml20m_split(r, heldout_users=20)
    assert np.unique(a.validation_history.users).size == 20
    assert np.unique(a.test_targets.users).size == 20
    assert np.array_equal(keys(a.test_targets), keys(b.test_targets))


def test_restrict_items_drops_items_everywhere():
    r = random_ratings(n_users=400, seed=6)
    split = ml20m_split(r)
    keep = np.zeros(r.n_items, dtype=bool)
    keep[::3] = True
    out = restrict_items(split, keep)
    for name in ("train", "validation_history", "validation_targets", "test_targets"):
        before, after = getattr(split, name), getattr(out, name)
        assert np.all(keep[after.items])
        assert after.n_ratings == int(keep[before.items].sum())
        assert after.n_items == r.n_items
    with pytest.raises(DataError, match="boolean mask"):
        restrict_items(split, keep[:-1])
