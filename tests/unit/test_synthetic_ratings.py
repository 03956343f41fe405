"""The MovieLens-shaped synthetic ratings and the multi-task regression of Appendix C."""

from __future__ import annotations

import numpy as np
import pytest

from userdp.data.synthetic import MultiTaskData, lowrank_ratings, multitask_regression
from userdp.data.synthetic.lowrank import _successive_sampling
from userdp.exceptions import InvalidParameterError

SMALL = dict(n_users=3_000, n_items=1_000, n_ratings=180_000)


@pytest.fixture(scope="module")
def small():
    return lowrank_ratings(**SMALL, seed=7)


def test_lowrank_exact_count_no_duplicates_sorted(small):
    r = small
    assert (r.n_users, r.n_items, r.n_ratings) == (3_000, 1_000, 180_000)
    assert r.users.dtype == np.int32 and r.items.dtype == np.int32
    key = r.users.astype(np.int64) * r.n_items + r.items
    assert np.all(np.diff(key) > 0)  # sorted by (user, item) and no duplicate pair
    degrees = r.user_counts()
    assert degrees.min() >= 20 and degrees.max() <= 700  # MovieLens minimum, 70% cap
    assert degrees.mean() == pytest.approx(60.0)


def test_lowrank_values_on_grid_inside_range(small):
    v = small.values
    assert v.min() >= 0.5 and v.max() <= 5.0
    assert np.allclose(v * 2, np.round(v * 2))
    assert 3.2 < v.mean() < 3.8
    r = lowrank_ratings(200, 100, 5_000, rating_range=(1.0, 5.0), step=1.0, seed=1)
    assert set(np.unique(r.values).tolist()) <= {1.0, 2.0, 3.0, 4.0, 5.0}


def test_lowrank_signal_std_is_about_point_nine():
    r = lowrank_ratings(**SMALL, noise=0.0, step=None, seed=3)
    # 0.9 * N(0, 1) around 3.5, barely clipped at 5 (z > 1.67) and 0.5
    assert 0.8 < r.values.std() < 0.92
    assert np.unique(r.values).size > r.n_ratings // 2  # continuous


def test_lowrank_heavy_tail(small):
    counts = np.sort(small.item_counts())[::-1]
    n = counts.size
    top10 = counts[: n // 10].sum() / counts.sum()
    bottom50 = counts[n - n // 2 :].sum() / counts.sum()
    assert top10 > 0.4
    assert top10 > 5 * bottom50
    degrees = np.sort(small.user_counts())
    assert degrees[-1] > 5 * np.median(degrees)  # heavy-tailed activity


def test_lowrank_seeded():
    a = lowrank_ratings(300, 100, 9_000, seed=5)
    b = lowrank_ratings(300, 100, 9_000, seed=5)
    c = lowrank_ratings(300, 100, 9_000, seed=6)
    assert np.array_equal(a.items, b.items) and np.array_equal(a.values, b.values)
    assert not np.array_equal(a.items, c.items)


def test_lowrank_validation():
    with pytest.raises(InvalidParameterError, match="'n_ratings' parameter of lowrank_ratings"):
        lowrank_ratings(10, 10, 71)  # more than 70% of the items per user
    with pytest.raises(InvalidParameterError, match="n_ratings"):
        lowrank_ratings(10, 10, 9)  # fewer than one per user
    with pytest.raises(InvalidParameterError, match="rating_range"):
        lowrank_ratings(10, 10, 50, rating_range=(5.0, 1.0))
    r = lowrank_ratings(10, 10, 70)  # the densest allowed: every user at the cap
    assert np.all(r.user_counts() == 7)


@pytest.mark.parametrize("max_rounds", [8, 1, 0])
def test_successive_sampling_is_exact_weighted_without_replacement(max_rounds):
    """Inclusion frequencies of a 2-item sample match the Plackett-Luce formula on every path.

    max_rounds=0 uses only the Gumbel-top-k finish; 1 mixes a round and the finish.
    """
    weights = np.array([8.0, 4.0, 2.0, 1.0, 1.0])
    p = weights / weights.sum()
    exact = np.array(
        [p[j] + sum(p[i] * p[j] / (1 - p[i]) for i in range(5) if i != j) for j in range(5)]
    )
    n_users = 20_000
    rng = np.random.default_rng(11)
    u, i = _successive_sampling(rng, np.full(n_users, 2), weights, max_rounds=max_rounds)
    assert u.size == 2 * n_users
    assert np.unique(u * 5 + i).size == u.size  # no duplicate within a user
    freq = np.bincount(i, minlength=5) / n_users
    assert np.all(np.abs(freq - exact) < 4.5 * np.sqrt(exact * (1 - exact) / n_users))


def test_successive_sampling_fills_heavy_users():
    rng = np.random.default_rng(0)
    weights = np.arange(1, 201, dtype=float) ** -2.0
    degrees = np.array([1, 50, 140, 199, 200])
    u, i = _successive_sampling(rng, degrees, weights, max_rounds=2)
    assert np.array_equal(np.bincount(u, minlength=5), degrees)
    assert np.unique(u * 200 + i).size == u.size


# -- multi-task regression ---------------------------------------------------------------------
def test_multitask_regression_shapes_and_ball():
    d = multitask_regression(n_tasks=50, dim=4, n_users=2_000, tasks_per_user=10, seed=1)
    assert isinstance(d, MultiTaskData)
    assert d.user_features.shape == (2_000, 4) and d.task_parameters.shape == (50, 4)
    assert d.tasks.dtype == np.int32 and d.users.dtype == np.int32
    assert d.labels.shape == d.tasks.shape == d.users.shape == (d.n_observations,)
    assert np.all(np.linalg.norm(d.user_features, axis=1) <= 1 + 1e-12)
    assert np.all(np.linalg.norm(d.task_parameters, axis=1) <= 1 + 1e-12)
    # most N(0, I_4) draws lie outside the unit ball and are projected onto its sphere
    assert np.mean(np.isclose(np.linalg.norm(d.user_features, axis=1), 1.0)) > 0.8
    key = d.users.astype(np.int64) * 50 + d.tasks
    assert np.all(np.diff(key) > 0)  # sorted by (user, task), each pair once
    clean = np.einsum("ij,ij->i", d.task_parameters[d.tasks], d.user_features[d.users])
    assert np.abs(d.labels - clean).max() < 1e-2  # noise 1e-3
    assert 1e-4 < np.std(d.labels - clean) < 1e-2


@pytest.mark.parametrize("power", [1.0, 2.0])
def test_multitask_regression_tasks_per_user(power):
    n_users = 5_000
    d = multitask_regression(n_users=n_users, power=power, seed=2)
    q = d.task_probabilities
    assert q.sum() == pytest.approx(20.0) and q.max() <= 1.0
    per_user = d.n_observations / n_users
    sd = np.sqrt(np.sum(q * (1 - q)) / n_users)  # sum of independent Bernoulli(q_i)
    assert abs(per_user - 20.0) < 5 * sd
    # every task's count is Binomial(n_users, q_i)
    counts = np.bincount(d.tasks, minlength=100)
    z = (counts - n_users * q) / np.sqrt(n_users * q * (1 - q) + 1e-12)
    assert np.abs(z).max() < 5


def test_multitask_regression_clips_probabilities():
    d = multitask_regression(n_tasks=10, n_users=100, tasks_per_user=9, power=3.0, seed=0)
    assert d.task_probabilities.max() <= 1.0
    with pytest.raises(InvalidParameterError, match="tasks_per_user"):
        multitask_regression(n_tasks=10, tasks_per_user=11)


def test_ratings_with_features_are_the_same_ratings_plus_informative_features():
    from userdp.data.synthetic import lowrank_ratings_with_features

    plain = lowrank_ratings(800, 120, 24_000, seed=3)
    ratings, (genres, year) = lowrank_ratings_with_features(800, 120, 24_000, seed=3)
    np.testing.assert_array_equal(ratings.values, plain.values)
    np.testing.assert_array_equal(ratings.items, plain.items)
    assert genres.matrix.shape == (120, 20) and year.matrix.shape == (120, 10)
    assert np.all(year.matrix.sum(axis=1) == 1)  # one year bucket per item
    # Genres follow the hidden factors: items sharing a genre have positively correlated
    # (centred) ratings from common users, items sharing none slightly negatively.
    r = np.zeros((800, 120))
    r[ratings.users, ratings.items] = ratings.values - ratings.values.mean()
    norms = np.sqrt((r**2).sum(axis=0))
    corr = (r.T @ r) / (np.outer(norms, norms) + 1e-12)  # unrated items: 0
    m = genres.matrix.toarray()
    share = (m @ m.T) > 0
    off = ~np.eye(120, dtype=bool)
    assert corr[share & off].mean() > 0.01 > 0 > corr[~share & off].mean()
