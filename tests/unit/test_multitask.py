"""Unit tests of the multi-task core and the private matrix factorization built on it.

Krichene, Jain, Song, Sundararajan, Thakurta, Zhang (2023), "Multi-Task Differential Privacy
Under Distribution Skew": Theorem 3.3 (per-user budget sum_i w_ij^2 <= beta), Algorithm 1
(task-weighted SSP), Algorithm 2 (task-weighted noisy GD), eq. (11)-(12) (adaptive weights).

Reference values come from independent computations named in each test: a plain loop over rows
(``segment_statistics_reference``), ``np.linalg.solve`` per task, closed-form eq. (11),
dp-accounting's analytic Gaussian, PLD and RDP accountants. Statistical checks use fixed seeds
and tolerances derived from the sample size (false-alarm probability about 1e-6 each).
"""

from __future__ import annotations

import math
import warnings
from itertools import combinations

import dp_accounting
import numpy as np
import pyarrow as pa
import pytest
from dp_accounting import pld, rdp
from scipy import stats

import userdp.multitask.kernels as kernels
from userdp.data.ratings import Ratings
from userdp.data.synthetic import lowrank_ratings
from userdp.exceptions import (
    BudgetExceededError,
    DataError,
    InvalidParameterError,
    UnsupportedEventError,
)
from userdp.multitask import (
    adaptive_weights,
    noisy_gd_mechanism,
    private_counts,
    sample_per_user,
    ssp_mechanism,
    tail_sampling,
    task_weighted_noisy_gd,
    task_weighted_ssp,
    uniform_sampling,
)
from userdp.multitask.kernels import (
    segment_offsets,
    segment_statistics,
    segment_statistics_reference,
)
from userdp.privacy import NoiseSource, PrivacyAccountant, PrivacyBudget, calibrate_noise_scale
from userdp.recommend.als.estimator import METHODS, MatrixFactorization, plan_noise

P_FALSE_ALARM = 1e-6  # per statistical assertion
PRIVATE_METHODS = [m for m in METHODS if m != "als"]


def _loads(users: np.ndarray, w: np.ndarray) -> dict[int, float]:
    """Exactly rounded sum of squared weights of every user (math.fsum)."""
    return {int(u): math.fsum(float(x) ** 2 for x in w[users == u]) for u in np.unique(users)}


def _random_rows(rng: np.random.Generator, n_users: int, n_tasks: int, max_deg: int):
    """Distinct (user, task) rows, users in random order (not sorted)."""
    users, tasks = [], []
    for u in range(n_users):
        deg = int(rng.integers(1, max_deg + 1))
        users += [u] * deg
        tasks += list(rng.choice(n_tasks, deg, replace=False))
    perm = rng.permutation(len(users))
    return np.array(users, dtype=np.int64)[perm], np.array(tasks, dtype=np.int64)[perm]


def _stat_eps(scale: float, make, delta: float) -> float:
    return PrivacyAccountant().compose(make(scale)).spent(gaussian_delta=delta).epsilon


# -- segment statistics -------------------------------------------------------------------------
def _segments(seed: int, n_seg: int, max_len: int, d: int, long_len: int = 0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, max_len + 1, n_seg)
    lengths[: min(4, n_seg)] = [0, 1, 2, 4][: min(4, n_seg)]  # empty and class boundaries
    if long_len:
        lengths[-1] = long_len
    codes = np.repeat(np.arange(n_seg), lengths)
    rng.shuffle(codes)
    n_feat = 25
    index = rng.integers(0, n_feat, codes.size)
    features = rng.normal(size=(n_feat, d))
    weights = rng.uniform(0.0, 2.0, codes.size)
    weights[::7] = 0.0
    labels = rng.normal(size=codes.size)
    return codes, n_seg, index, features, weights, labels


@pytest.mark.parametrize("with_weights", [True, False])
@pytest.mark.parametrize("with_labels", [True, False])
@pytest.mark.parametrize(
    ("direct", "block", "long_len"),
    [(None, None, 700), (8, 16, 40), (3, 5, 0), (1, 1, 9)],
    ids=["default-with-long-segment", "small-direct-small-block", "tiny", "all-direct-1-float"],
)
def test_segment_statistics_equal_the_row_loop_reference(
    monkeypatch, with_weights, with_labels, direct, block, long_len
):
    if direct is not None:
        monkeypatch.setattr(kernels, "_DIRECT", direct)
        monkeypatch.setattr(kernels, "_BLOCK", block)
    codes, n_seg, index, features, weights, labels = _segments(3, 40, 20, 3, long_len)
    w = weights if with_weights else None
    y = labels if with_labels else None
    order, offsets = segment_offsets(codes, n_seg)
    A_ref, b_ref = segment_statistics_reference(codes, n_seg, index, features, w, y)
    results = []
    for threads in (1, 2):
        A, b = segment_statistics(offsets, order, index, features, w, y, n_threads=threads)
        np.testing.assert_allclose(A, A_ref, rtol=1e-12, atol=1e-12)
        if with_labels:
            np.testing.assert_allclose(b, b_ref, rtol=1e-12, atol=1e-12)
        else:
            assert b is None
        results.append((A, b))
    # one thread and two threads compute every segment the same way: bitwise equal
    assert np.array_equal(results[0][0], results[1][0])
    if with_labels:
        assert np.array_equal(results[0][1], results[1][1])


def test_segment_statistics_without_gram_returns_only_the_moments():
    codes, n_seg, index, features, weights, labels = _segments(5, 12, 10, 2)
    order, offsets = segment_offsets(codes, n_seg)
    A, b = segment_statistics(offsets, order, index, features, weights, labels, gram=False)
    _, b_ref = segment_statistics_reference(codes, n_seg, index, features, weights, labels)
    assert A is None
    np.testing.assert_allclose(b, b_ref, rtol=1e-12, atol=1e-12)


def test_segment_offsets_group_equal_codes_in_a_stable_order():
    codes = np.array([2, 0, 2, 1, 0, 2])
    order, offsets = segment_offsets(codes, 4)
    assert offsets.tolist() == [0, 2, 3, 6, 6]
    assert order.tolist() == [1, 4, 3, 0, 2, 5]


# -- sampling rules ---------------------------------------------------------------------------
@pytest.mark.parametrize("k", [1, 3, 6])
def test_sample_per_user_keeps_exactly_min_k_and_n_rows_of_every_user(k):
    rng = np.random.default_rng(7)
    users, _ = _random_rows(rng, 50, 12, 10)
    keep = sample_per_user(users, k, NoiseSource(1))
    n = np.bincount(users)
    kept = np.bincount(users[keep], minlength=n.size)
    assert np.array_equal(kept, np.minimum(k, n))


def test_sample_per_user_picks_every_subset_with_equal_probability():
    # User 0 holds 4 rows (C(4, 2) = 6 subsets of size 2), user 1 holds 2 (always both kept).
    users = np.array([0, 1, 0, 0, 1, 0])
    rows0 = np.flatnonzero(users == 0)
    subsets = {s: 0 for s in combinations(rows0.tolist(), 2)}
    n_seeds = 3000
    for seed in range(n_seeds):
        keep = sample_per_user(users, 2, NoiseSource(seed))
        assert keep[users == 1].all()
        subsets[tuple(np.flatnonzero(keep & (users == 0)).tolist())] += 1
    observed = np.array(list(subsets.values()))
    assert observed.sum() == n_seeds
    chi2 = stats.chisquare(observed).statistic
    assert chi2 < stats.chi2.isf(P_FALSE_ALARM, df=len(subsets) - 1), observed


def test_tail_sampling_keeps_each_users_k_smallest_count_tasks():
    rng = np.random.default_rng(8)
    n_tasks = 15
    users, tasks = _random_rows(rng, 40, n_tasks, 9)
    counts = rng.permutation(n_tasks).astype(float) * 3.5 - 10.0  # distinct, some negative
    k = 3
    w = tail_sampling(users, tasks, counts, k, NoiseSource(2))
    assert set(np.unique(w).tolist()) <= {0.0, 1.0}
    for u in np.unique(users):
        mine = users == u
        expected = set(np.sort(counts[tasks[mine]])[:k].tolist())
        assert set(counts[tasks[mine & (w == 1.0)]].tolist()) == expected


def test_tail_sampling_breaks_ties_uniformly_at_random():
    users = np.zeros(3, dtype=np.int64)
    tasks = np.array([0, 1, 2])
    counts = np.array([5.0, 5.0, 5.0])
    n_seeds = 1500
    hits = np.zeros(3)
    for seed in range(n_seeds):
        hits += tail_sampling(users, tasks, counts, 1, NoiseSource(seed))
    assert hits.sum() == n_seeds
    assert stats.chisquare(hits).statistic < stats.chi2.isf(P_FALSE_ALARM, df=2), hits


def test_uniform_sampling_weights_are_zero_or_one_with_min_k_and_n_ones_per_user():
    rng = np.random.default_rng(9)
    users, _ = _random_rows(rng, 30, 10, 8)
    w = uniform_sampling(users, 4, NoiseSource(3))
    assert w.dtype == np.float64
    assert set(np.unique(w).tolist()) == {0.0, 1.0}
    assert np.array_equal(np.bincount(users, weights=w), np.minimum(4, np.bincount(users)))


@pytest.mark.parametrize("k", [1, 2, 3, 6, 12, 18, 21])
def test_sampling_weights_for_a_budget_pass_the_exact_budget_check(k):
    # Plain 1/sqrt(k) gives k * (1/sqrt(k))^2 = 1 + 2^-52 for k = 3, 6, 12, ...
    users, tasks, x, y = _regression(23)
    for w in (
        uniform_sampling(users, k, NoiseSource(0), beta=1.0),
        tail_sampling(users, tasks, np.arange(5.0), k, NoiseSource(0), beta=1.0),
    ):
        assert all(load <= 1.0 for load in _loads(users, w).values())
        ssp_mechanism(
            users,
            tasks,
            x,
            y,
            w,
            n_tasks=5,
            feature_bound=1.0,
            label_bound=1.0,
            ridge=1.0,
            noise_multiplier=1.0,
            noise=NoiseSource(1),
            beta=1.0,
        )


# -- adaptive weights ----------------------------------------------------------------------------
@pytest.mark.parametrize("mu", [0.0, 0.25, 0.5, 1.0])
@pytest.mark.parametrize("beta", [0.3, 1.0, 7.0])
def test_user_normalised_adaptive_weights_spend_beta_and_never_more(mu, beta):
    rng = np.random.default_rng(10)
    n_tasks = 20
    users, tasks = _random_rows(rng, 60, n_tasks, 15)
    counts = rng.uniform(-3.0, 500.0, n_tasks)
    w = adaptive_weights(users, tasks, counts, mu=mu, beta=beta, normalization="user")
    assert np.all(w > 0) and np.all(np.isfinite(w))
    for load in _loads(users, w).values():
        assert beta * (1 - 1e-8) <= load <= beta
    # inside a user, w_ij is proportional to n_hat_i^-mu (n_hat = max(count, min_count = 1))
    n_hat = np.maximum(counts, 1.0)
    ratio = w * n_hat[tasks] ** mu
    for u in np.unique(users):
        r = ratio[users == u]
        np.testing.assert_allclose(r, r[0], rtol=1e-12)


def test_adaptive_weights_with_mu_zero_are_uniform_within_each_user():
    rng = np.random.default_rng(11)
    users, tasks = _random_rows(rng, 25, 10, 8)
    counts = rng.uniform(1.0, 100.0, 10)
    w = adaptive_weights(users, tasks, counts, mu=0.0, beta=2.0)
    n = np.bincount(users)
    np.testing.assert_allclose(w, np.sqrt(2.0 / n[users]), rtol=1e-8)


def _global_reference(counts, tasks, users, mu, beta, n_users, load_factor, min_count=1.0):
    """Eq. (11) in the Section 5 form, then eq. (12), written out with Python floats."""
    n_hat = np.maximum(counts, min_count)
    beta_bar = beta / load_factor
    denom = math.sqrt(math.fsum(float(c) ** (1 - 2 * mu) for c in n_hat) / (n_users * beta_bar))
    omega = np.array([float(c) ** -mu / denom for c in n_hat])
    w = omega[tasks]
    loads = _loads(users, w)
    return w, loads


@pytest.mark.parametrize("mu", [0.0, 0.25, 0.5])
@pytest.mark.parametrize("load_factor", [1.0, 2.5])
def test_global_adaptive_weights_follow_eq_11_and_clip_heavy_users_by_eq_12(mu, load_factor):
    rng = np.random.default_rng(12)
    n_tasks = 30
    # Light users (1-3 tasks) and heavy users (15-25 tasks).
    users, tasks = [], []
    for u in range(80):
        deg = int(rng.integers(1, 4)) if u % 4 else int(rng.integers(15, 26))
        users += [u] * deg
        tasks += list(rng.choice(n_tasks, deg, replace=False))
    users, tasks = np.array(users), np.array(tasks)
    exact = np.bincount(tasks, minlength=n_tasks).astype(float)
    counts = exact + rng.normal(0, 2.0, n_tasks)
    counts[:2] = [-4.0, 0.0]  # below min_count
    beta, n_users = 1.5, 80.0 + 1.7
    w = adaptive_weights(
        users,
        tasks,
        counts,
        mu=mu,
        beta=beta,
        normalization="global",
        n_users=n_users,
        load_factor=load_factor,
    )
    w_ref, loads_ref = _global_reference(counts, tasks, users, mu, beta, n_users, load_factor)
    got = _loads(users, w)
    clipped = [u for u, load in loads_ref.items() if load > beta]
    free = [u for u, load in loads_ref.items() if load < beta * (1 - 1e-6)]
    assert clipped and free, "the dataset must exercise both branches"
    for u in free:
        np.testing.assert_allclose(w[users == u], w_ref[users == u], rtol=1e-12)
    for u in clipped:
        assert beta * (1 - 1e-8) <= got[u] <= beta
        mine = users == u
        np.testing.assert_allclose(w[mine], w_ref[mine] * math.sqrt(beta / loads_ref[u]), rtol=1e-8)
    assert max(got.values()) <= beta


def test_global_adaptive_weights_need_the_released_user_count():
    with pytest.raises(DataError, match="n_users"):
        adaptive_weights(
            np.array([0, 1]), np.array([0, 0]), np.array([2.0]), normalization="global"
        )


def test_adaptive_weights_raise_counts_at_or_below_zero_to_min_count():
    users = np.array([0, 0, 0, 1, 1])
    tasks = np.array([0, 1, 2, 1, 2])
    counts = np.array([-5.0, 0.0, 9.0])
    w = adaptive_weights(users, tasks, counts, mu=0.5, min_count=2.0)
    w_same = adaptive_weights(users, tasks, np.array([2.0, 2.0, 9.0]), mu=0.5, min_count=2.0)
    assert np.all(np.isfinite(w)) and np.all(w > 0)
    np.testing.assert_array_equal(w, w_same)
    np.testing.assert_allclose(w[0] / w[2], (2.0 / 9.0) ** -0.5, rtol=1e-12)


def test_adaptive_weights_meet_the_budget_for_large_exponents():
    users = np.array([0, 1, 1])
    tasks = np.array([0, 0, 1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        w = adaptive_weights(users, tasks, np.array([1e8, 3e7]), mu=8.0)
    assert np.all(np.isfinite(w)) and np.all(w > 0)
    assert all(load <= 1.0 for load in _loads(users, w).values())
    with pytest.raises(InvalidParameterError, match="mu"):
        adaptive_weights(users, tasks, np.array([1e8, 3e7]), mu=20.0)


def test_adaptive_weights_of_user_codes_with_gaps_warn_nothing():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        w = adaptive_weights(np.array([0, 2]), np.array([0, 1]), np.array([3.0, 4.0]))
    assert np.all(np.isfinite(w))


# -- private counts -----------------------------------------------------------------------------
def test_private_counts_add_gaussian_noise_of_the_stated_scale():
    rng = np.random.default_rng(13)
    n_tasks = 12
    users, tasks = _random_rows(rng, 30, n_tasks, 6)
    k, z = 6, 0.7  # k >= every degree: the counted rows are all rows
    exact = np.append(np.bincount(tasks, minlength=n_tasks), 30).astype(float)
    residuals = []
    for seed in range(300):
        pc = private_counts(
            users, tasks, n_tasks, count_sample=k, noise_multiplier=z, noise=NoiseSource(seed)
        )
        residuals.append(np.append(pc.counts, pc.n_users) - exact)
    r = np.concatenate(residuals)
    n, sd = r.size, z * math.sqrt(k + 1)
    z_crit = stats.norm.isf(P_FALSE_ALARM / 2)
    assert abs(r.mean()) <= z_crit * sd / math.sqrt(n)
    ratio = np.sum(r**2) / sd**2  # chi-square with n degrees of freedom (mean known: 0)
    assert stats.chi2.ppf(P_FALSE_ALARM / 2, n) <= ratio <= stats.chi2.isf(P_FALSE_ALARM / 2, n)
    # the noise is not the same from seed to seed (the release is random)
    assert not np.allclose(residuals[0], residuals[1])


def test_private_counts_event_and_sensitivity():
    pc = private_counts(
        np.array([0, 0, 1]),
        np.array([0, 1, 1]),
        2,
        count_sample=4,
        noise_multiplier=1.3,
        noise=NoiseSource(0),
    )
    assert pc.dp_event == dp_accounting.GaussianDpEvent(1.3)
    assert pc.noise_multiplier == 1.3 and pc.count_sample == 4
    assert pc.sensitivity == math.sqrt(5)


def test_private_counts_count_at_most_count_sample_tasks_per_user():
    rng = np.random.default_rng(14)
    n_tasks, k = 20, 3
    users, tasks = _random_rows(rng, 40, n_tasks, 12)
    pc = private_counts(
        users, tasks, n_tasks, count_sample=k, noise_multiplier=1e-9, noise=NoiseSource(5)
    )
    counts = np.round(pc.counts)
    np.testing.assert_allclose(pc.counts, counts, atol=1e-6)
    assert counts.sum() == np.minimum(k, np.bincount(users)).sum()
    assert np.all(counts <= np.bincount(tasks, minlength=n_tasks))
    assert round(pc.n_users) == 40
    # Adding one user with 10 tasks (rows appended) moves at most k counts by one each.
    new_tasks = rng.choice(n_tasks, 10, replace=False)
    users2 = np.concatenate([users, np.full(10, 40)])
    tasks2 = np.concatenate([tasks, new_tasks])
    pc2 = private_counts(
        users2, tasks2, n_tasks, count_sample=k, noise_multiplier=1e-9, noise=NoiseSource(5)
    )
    delta = np.round(pc2.counts) - counts
    assert set(np.unique(delta).tolist()) <= {0.0, 1.0}
    assert delta.sum() == k
    assert np.all(delta[np.setdiff1d(np.arange(n_tasks), new_tasks)] == 0)
    assert round(pc2.n_users) - round(pc.n_users) == 1


# -- task-weighted SSP ------------------------------------------------------------------------
def _regression(seed: int, n_users: int = 40, n_tasks: int = 5, d: int = 3):
    rng = np.random.default_rng(seed)
    users, tasks = _random_rows(rng, n_users, n_tasks, n_tasks)
    n = users.size
    x = rng.normal(size=(n, d)) * rng.uniform(0.2, 0.9, (n, 1))  # norms from about 0.1 to 2.5
    y = rng.normal(0.0, 1.5, n)
    return users, tasks, x, y


def _weighted_ridge(tasks, x, y, w, n_tasks, ridge):
    """theta_i = (sum w x x^T + ridge I)^-1 sum w y x, one np.linalg.solve per task."""
    d = x.shape[1]
    out = np.zeros((n_tasks, d))
    for i in range(n_tasks):
        m = tasks == i
        A = (x[m] * w[m, None]).T @ x[m] + ridge * np.eye(d)
        out[i] = np.linalg.solve(A, (w[m] * y[m]) @ x[m])
    return out


def test_task_weighted_ssp_without_noise_is_the_clipped_weighted_ridge_solution():
    users, tasks, x, y = _regression(20)
    n_tasks, gx, gy, ridge, beta = 5, 1.0, 2.0, 0.3, 2.0
    w = adaptive_weights(users, tasks, np.bincount(tasks).astype(float), mu=0.5, beta=beta)
    res = ssp_mechanism(
        users,
        tasks,
        x,
        y,
        w,
        n_tasks=n_tasks,
        feature_bound=gx,
        label_bound=gy,
        ridge=ridge,
        noise_multiplier=1e-12,
        noise=NoiseSource(0),
        beta=beta,
    )
    norms = np.linalg.norm(x, axis=1)
    assert (norms > gx).any() and (np.abs(y) > gy).any(), "clipping must be exercised"
    xc = x * np.minimum(1.0, gx / norms)[:, None]
    yc = np.clip(y, -gy, gy)
    expected = _weighted_ridge(tasks, xc, yc, w, n_tasks, ridge)
    # The statistics are snapped to the safe-noise grid (spacing set by the sensitivity, about
    # 2^-15 here), so the solution agrees to the grid's precision, not to rounding error.
    np.testing.assert_allclose(res.parameters, expected, rtol=0, atol=2e-4)
    unclipped = _weighted_ridge(tasks, x, y, w, n_tasks, ridge)
    assert np.max(np.abs(unclipped - expected)) > 1e-2
    assert res.gram_sensitivity == pytest.approx(gx * gx * math.sqrt(beta), rel=1e-15)
    assert res.moment_sensitivity == pytest.approx(gx * gy * math.sqrt(beta), rel=1e-15)
    assert res.dp_event == dp_accounting.ComposedDpEvent(
        [dp_accounting.GaussianDpEvent(1e-12), dp_accounting.GaussianDpEvent(1e-12)]
    )


def test_task_weighted_ssp_event_uses_the_moment_noise_multiplier():
    users, tasks, x, y = _regression(21)
    w = uniform_sampling(users, 1, NoiseSource(0))
    res = ssp_mechanism(
        users,
        tasks,
        x,
        y,
        w,
        n_tasks=5,
        feature_bound=1.0,
        label_bound=1.0,
        ridge=1.0,
        noise_multiplier=2.0,
        moment_noise_multiplier=3.0,
        noise=NoiseSource(1),
    )
    assert res.dp_event == dp_accounting.ComposedDpEvent(
        [dp_accounting.GaussianDpEvent(2.0), dp_accounting.GaussianDpEvent(3.0)]
    )


def test_task_weighted_ssp_rejects_weights_over_the_user_budget():
    users, tasks, x, y = _regression(22)
    w = np.ones(users.size)  # users with two or more tasks spend > 1
    assert np.bincount(users).max() >= 2
    with pytest.raises(DataError, match="more than beta=1"):
        ssp_mechanism(
            users,
            tasks,
            x,
            y,
            w,
            n_tasks=5,
            feature_bound=1.0,
            label_bound=1.0,
            ridge=1.0,
            noise_multiplier=1.0,
            noise=NoiseSource(0),
        )
    w = np.full(users.size, 0.1)
    w[0] = -0.1
    with pytest.raises(DataError, match=">= 0"):
        ssp_mechanism(
            users,
            tasks,
            x,
            y,
            w,
            n_tasks=5,
            feature_bound=1.0,
            label_bound=1.0,
            ridge=1.0,
            noise_multiplier=1.0,
            noise=NoiseSource(0),
        )


# -- task-weighted noisy GD -----------------------------------------------------------------------
def test_noisy_gd_without_noise_converges_to_the_weighted_ridge_solution():
    users, tasks, x, y = _regression(30, n_users=30, n_tasks=3, d=2)
    x = x / np.maximum(np.linalg.norm(x, axis=1), 1.0)[:, None]
    y = np.clip(y, -1.0, 1.0)
    n_tasks, ridge = 3, 0.5
    w = adaptive_weights(users, tasks, np.bincount(tasks).astype(float), mu=0.25)
    # objective sum_j w_ij (theta.x - y)^2 + ridge/2 ||theta||^2: minimiser (A + ridge/2 I)^-1 b
    expected = _weighted_ridge(tasks, x, y, w, n_tasks, ridge / 2)
    lipschitz = np.array(
        [
            2 * np.linalg.eigvalsh((x[tasks == i] * w[tasks == i, None]).T @ x[tasks == i])[-1]
            + ridge
            for i in range(n_tasks)
        ]
    )
    res = noisy_gd_mechanism(
        users,
        tasks,
        x,
        y,
        w,
        n_tasks=n_tasks,
        clip_norm=10.0,
        steps=400,
        learning_rate=1.0 / lipschitz,
        noise_multiplier=1e-15,
        noise=NoiseSource(0),
        ridge=ridge,
    )
    # No example reaches the clip (|gradient| <= 4 here). Each released gradient is snapped to
    # the safe-noise grid, whose spacing scales with the sensitivity: agreement to the grid.
    np.testing.assert_allclose(res.parameters, expected, rtol=0, atol=1e-3)
    assert res.dp_event == dp_accounting.SelfComposedDpEvent(
        dp_accounting.GaussianDpEvent(1e-15), 400
    )
    assert res.sensitivity == 10.0


def test_noisy_gd_with_logistic_loss_rejects_labels_outside_minus_one_one():
    users, tasks, x, _ = _regression(31, n_tasks=3)
    w = uniform_sampling(users, 1, NoiseSource(0))
    y = np.where(np.arange(users.size) % 2, 1.0, 0.0)
    with pytest.raises(DataError, match="logistic loss needs labels"):
        noisy_gd_mechanism(
            users,
            tasks,
            x,
            y,
            w,
            n_tasks=3,
            clip_norm=1.0,
            steps=1,
            learning_rate=0.1,
            noise_multiplier=1.0,
            noise=NoiseSource(0),
            loss="logistic",
        )


def test_noisy_gd_clips_every_example_gradient_so_one_step_is_bounded():
    users, tasks, x, y = _regression(32, n_users=25, n_tasks=4)
    x, y = 5.0 * x, 10.0 * y  # every example gradient is far above the clip norm
    n_tasks, clip, beta = 4, 0.1, 1.0
    w = adaptive_weights(users, tasks, np.bincount(tasks).astype(float), mu=0.5, beta=beta)
    kw = dict(
        n_tasks=n_tasks,
        clip_norm=clip,
        steps=1,
        learning_rate=1.0,
        noise_multiplier=1e-12,
        beta=beta,
    )
    theta = noisy_gd_mechanism(users, tasks, x, y, w, noise=NoiseSource(4), **kw).parameters
    # theta_1 = -grad: task i's gradient is a sum of clipped terms w_ij * (norm <= clip)
    bound = clip * np.bincount(tasks, weights=w, minlength=n_tasks)
    assert np.all(np.linalg.norm(theta, axis=1) <= bound + 1e-9)
    unclipped = np.zeros_like(theta)
    np.add.at(unclipped, tasks, (w * 2 * (0 - y))[:, None] * x)
    assert np.all(np.linalg.norm(unclipped, axis=1) > 10 * bound)
    # One more user (rows appended, same noise draws): the step moves by <= clip * sqrt(beta).
    rng = np.random.default_rng(33)
    new_tasks = np.array([0, 1, 2, 3])
    users2 = np.concatenate([users, np.full(4, users.max() + 1)])
    tasks2 = np.concatenate([tasks, new_tasks])
    x2 = np.vstack([x, 50.0 * rng.normal(size=(4, x.shape[1]))])
    y2 = np.concatenate([y, [40.0, -40.0, 40.0, -40.0]])
    w2 = np.concatenate([w, np.full(4, 0.5)])  # the new user spends exactly beta = 1
    theta2 = noisy_gd_mechanism(users2, tasks2, x2, y2, w2, noise=NoiseSource(4), **kw).parameters
    change = np.linalg.norm(theta2 - theta)
    assert change <= clip * math.sqrt(beta) + 1e-9
    assert change >= 0.5 * clip  # the bound is not vacuous here


# -- the budget-taking entry points (epsilon, delta and a shared accountant) -----------
def _entry(kind: str, users, tasks, x, y, w, **kw):
    if kind == "ssp":
        return task_weighted_ssp(
            users, tasks, x, y, w, n_tasks=5, feature_bound=1.0, label_bound=1.0, ridge=1.0, **kw
        )
    return task_weighted_noisy_gd(
        users, tasks, x, y, w, n_tasks=5, clip_norm=1.0, steps=3, learning_rate=0.1, **kw
    )


@pytest.mark.parametrize("kind", ["ssp", "gd"])
def test_an_entry_point_spends_its_epsilon_and_is_charged_to_a_shared_accountant(kind):
    users, tasks, x, y = _regression(40)
    w = uniform_sampling(users, 1, NoiseSource(0))
    accountant = PrivacyAccountant(PrivacyBudget(3.0, 1e-5))
    accountant.compose(dp_accounting.LaplaceDpEvent(1.0))  # another release: epsilon 1
    res = _entry(
        kind, users, tasks, x, y, w, epsilon=2.0, delta=1e-5, accountant=accountant, seed=1
    )
    assert res.budget.epsilon == pytest.approx(2.0, rel=1e-5) and res.budget.epsilon <= 2.0
    assert accountant.ledger[1] == res.dp_event
    assert accountant.spent(1e-5).epsilon == pytest.approx(3.0, rel=1e-5)
    assert "epsilon" in res.summary()
    with pytest.raises(BudgetExceededError):  # refused before reading: None is never read
        _entry(kind, None, None, None, None, None, epsilon=0.5, delta=1e-5, accountant=accountant)
    assert len(accountant.ledger) == 2


@pytest.mark.parametrize("kind", ["ssp", "gd"])
@pytest.mark.parametrize(
    ("kw", "match"),
    [({"epsilon": 0.0}, "'epsilon'"), ({"delta": 1.0}, "'delta'"), ({"seed": -1}, "'seed'")],
)
def test_an_entry_point_checks_its_budget_keywords(kind, kw, match):
    users, tasks, x, y = _regression(41)
    w = uniform_sampling(users, 1, NoiseSource(0))
    with pytest.raises(InvalidParameterError, match=match):
        _entry(kind, users, tasks, x, y, w, **{"epsilon": 1.0, "delta": 1e-5, **kw})


# -- calibration ----------------------------------------------------------------------------------
EVENTS = {
    "single": (lambda s: dp_accounting.GaussianDpEvent(s), 1.0),
    "composed-with-shares": (
        lambda s: dp_accounting.ComposedDpEvent(
            [
                dp_accounting.GaussianDpEvent(s / math.sqrt(0.2)),
                dp_accounting.GaussianDpEvent(s / math.sqrt(0.3)),
                dp_accounting.SelfComposedDpEvent(
                    dp_accounting.GaussianDpEvent(s * math.sqrt(4 / 0.5)), 4
                ),
            ]
        ),
        1.0,
    ),
    "self-composed": (
        lambda s: dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(s), 10),
        1.0 / math.sqrt(10),
    ),
}


@pytest.mark.filterwarnings("ignore:divide by zero encountered in log1p:RuntimeWarning")
@pytest.mark.parametrize("shape", list(EVENTS))
@pytest.mark.parametrize(("epsilon", "delta"), [(0.3, 1e-6), (1.0, 1e-5), (8.0, 1e-4)])
def test_calibrated_noise_scale_meets_the_target_and_a_hair_less_does_not(shape, epsilon, delta):
    make, total_per_scale = EVENTS[shape]
    scale = calibrate_noise_scale(make, epsilon, delta)
    assert _stat_eps(scale, make, delta) <= epsilon
    assert _stat_eps(scale * (1 - 1e-5), make, delta) > epsilon
    # independent: every event composes to one Gaussian of scale * total_per_scale
    sigma = dp_accounting.get_sigma_gaussian(epsilon, delta)
    assert scale * total_per_scale == pytest.approx(sigma, rel=1e-6)


@pytest.mark.filterwarnings("ignore:divide by zero encountered in log1p:RuntimeWarning")
def test_calibration_reports_an_unreachable_target():
    with pytest.raises(InvalidParameterError, match="No noise scale up to"):
        calibrate_noise_scale(lambda s: dp_accounting.GaussianDpEvent(s), 1e-9, 1e-12)


# -- the training plan against dp-accounting ----------------------------------------------------
@pytest.mark.parametrize("solver", ["ssp", "gd"])
@pytest.mark.parametrize("epsilon", [1.0, 5.0, 20.0])
def test_training_plan_meets_its_budget_by_independent_accountants(solver, epsilon):
    delta = 1e-5
    plan = plan_noise(
        PrivacyBudget(epsilon, delta),
        solver=solver,
        steps=3,
        releases_per_step=4 if solver == "gd" else 1,
        grouped=True,
    )
    event = plan.event()
    eps_pld = pld.PLDAccountant(value_discretization_interval=1e-4).compose(event)
    eps_pld = eps_pld.get_epsilon(delta)
    assert epsilon * (1 - 1e-3) <= eps_pld <= epsilon * 1.02
    eps_rdp = rdp.RdpAccountant().compose(event).get_epsilon(delta)
    assert eps_rdp >= epsilon
    # By hand: Gaussians compose to one Gaussian with precision sum_k count_k / z_k^2.
    releases = [(1, plan.counts), (1, plan.center)]
    if solver == "ssp":
        releases += [(plan.steps, plan.gram), (plan.steps, plan.moment)]
        assert plan.gradient is None
    else:
        releases += [(plan.steps * plan.sgd_steps, plan.gradient)]
        assert plan.gram is None and plan.moment is None
    sigma_total = math.fsum(c / z**2 for c, z in releases) ** -0.5
    assert dp_accounting.get_epsilon_gaussian(sigma_total, delta) == pytest.approx(
        epsilon, rel=1e-6
    )
    # the count release gets count_fraction = 15 % of the precision
    assert plan.counts**-2 / sigma_total**-2 == pytest.approx(0.15, rel=1e-9)


# -- MatrixFactorization -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def synthetic():
    return lowrank_ratings(n_users=300, n_items=80, n_ratings=6000, seed=4)


@pytest.mark.parametrize("method", PRIVATE_METHODS)
def test_private_fit_spends_its_budget_and_releases_only_noisy_counts(synthetic, method):
    target = PrivacyBudget(2.0, 1e-5)
    model = MatrixFactorization(
        method=method,
        dim=4,
        steps=2,
        sgd_steps=2,
        sample_size=10,
        count_sample=10,
        rating_range=(0.5, 5.0),
        seed=7,
        items=synthetic.item_labels,
        epsilon=target.epsilon,
        delta=target.delta,
    ).fit(synthetic)
    assert target.epsilon * (1 - 1e-4) <= model.budget_.epsilon <= target.epsilon * (1 + 1e-9)
    assert model.budget_.delta == target.delta
    assert model.dp_event_ == model.plan_.event()  # a public item set costs nothing
    assert model.item_factors_.shape == (synthetic.n_items, 4)
    assert np.all(np.isfinite(model.item_factors_))
    exact = synthetic.item_counts().astype(float)
    assert np.any(np.abs(model.item_counts_ - exact) > 0.5)
    assert np.any(np.abs(model.item_counts_ - np.round(model.item_counts_)) > 1e-3)
    for name, value in vars(model).items():
        if isinstance(value, np.ndarray) and value.shape == exact.shape:
            assert not np.allclose(value, exact), name


def test_non_private_als_refuses_a_budget():
    with pytest.raises(InvalidParameterError, match="not private"):
        MatrixFactorization(method="als", epsilon=1.0, delta=1e-5).fit(([1, 2], [1, 2], [3.0, 4.0]))


@pytest.mark.parametrize("method", PRIVATE_METHODS)
def test_a_private_method_without_a_budget_is_refused(method):
    with pytest.raises(InvalidParameterError, match=r"epsilon=\.\.\., delta=\.\.\."):
        MatrixFactorization(method=method, rating_range=(1, 5), epsilon=1.0).fit(
            ([1, 2], [1, 2], [3.0, 4.0])
        )


@pytest.mark.parametrize("method", PRIVATE_METHODS)
def test_private_fit_without_a_declared_rating_range_is_refused(method):
    with pytest.raises(InvalidParameterError, match="rating range"):
        MatrixFactorization(method=method, epsilon=1.0, delta=1e-5).fit(
            ([1, 2], [1, 2], [3.0, 4.0])
        )


def test_unknown_method_is_refused_with_the_list_of_methods():
    with pytest.raises(InvalidParameterError, match="'method' parameter") as info:
        MatrixFactorization(method="dpfoo", rating_range=(1, 5), epsilon=1.0, delta=1e-5).fit(
            ([1, 2], [1, 2], [3.0, 4.0])
        )
    for m in METHODS:
        assert repr(m) in str(info.value)


def _rank3(seed: int = 11):
    """Exactly rank 3 including the constant direction, so centring keeps rank 3."""
    rng = np.random.default_rng(seed)
    nu, ni = 200, 60
    X = np.column_stack([np.ones(nu), rng.normal(size=(nu, 2))])
    Y = rng.normal(size=(ni, 3)) * 0.5
    M = 3.0 + X @ Y.T
    u, i = np.nonzero(rng.random((nu, ni)) < 0.5)
    test = rng.random(u.size) < 0.1
    train = Ratings.from_codes(
        u[~test], i[~test], M[u[~test], i[~test]], n_users=nu, n_items=ni, keep_empty_users=True
    )
    rating_range = (float(np.floor(M.min())), float(np.ceil(M.max())))
    return train, u[test], i[test], M[u[test], i[test]], rating_range


@pytest.mark.parametrize(("dim", "recovers"), [(3, True), (1, False)])
def test_als_recovers_an_exactly_rank_three_matrix_only_with_three_dimensions(dim, recovers):
    train, tu, ti, truth, rating_range = _rank3()
    model = MatrixFactorization(
        method="als", dim=dim, steps=30, reg=1e-4, rating_range=rating_range, seed=0
    ).fit(train)
    rmse = float(np.sqrt(np.mean((model.predict(train, tu, ti) - truth) ** 2)))
    if recovers:
        assert rmse < 0.05 * truth.std()
    else:
        assert rmse > 0.3 * truth.std()
    assert model.budget_ is None and model.dp_event_ is None and model.item_counts_ is None


@pytest.fixture(scope="module")
def string_labelled():
    rng = np.random.default_rng(12)
    users = [f"user-{u}" for u in rng.integers(0, 40, 600)]
    items = [f"item-{i}" for i in rng.integers(0, 25, 600)]
    return Ratings.from_columns(users, items, rng.integers(1, 6, 600).astype(float))


def test_save_and_load_keep_factors_int_labels_center_and_budget(synthetic, tmp_path):
    model = MatrixFactorization(
        method="adadpals",
        dim=3,
        steps=1,
        rating_range=(0.5, 5.0),
        seed=2,
        items=synthetic.item_labels,
        epsilon=3.0,
        delta=1e-6,
    ).fit(synthetic)
    path = tmp_path / "model.npz"
    model.save(path)
    back = MatrixFactorization.load(path)
    np.testing.assert_array_equal(back.item_factors, model.item_factors_)
    np.testing.assert_array_equal(back.item_counts, model.item_counts_)
    assert back.item_labels.equals(model.item_labels_)
    assert back.center == model.center_
    assert back.rating_range == model.rating_range_ == (0.5, 5.0)
    assert (back.budget.epsilon, back.budget.delta) == (
        model.budget_.epsilon,
        model.budget_.delta,
    )
    assert back.dp_event == model.dp_event_
    assert (back.method, back.dim, back.params["rating_range"]) == ("adadpals", 3, [0.5, 5.0])
    assert "seed" not in back.params  # a saved seed would let anyone regenerate the noise
    assert back.item_source == "public"
    ids, scores = model.recommend(np.arange(5), synthetic, N=4)
    ids2, scores2 = back.recommend(np.arange(5), synthetic, N=4)
    assert ids.shape == scores.shape == (5, 4)
    np.testing.assert_array_equal(ids, ids2)
    np.testing.assert_array_equal(scores, scores2)


def test_save_and_load_keep_string_labels(string_labelled, tmp_path):
    model = MatrixFactorization(method="als", dim=2, steps=2, rating_range=(1, 5), seed=1)
    model.fit(string_labelled)
    model.save(tmp_path / "m.npz")
    back = MatrixFactorization.load(tmp_path / "m.npz")
    assert pa.types.is_string(back.item_labels.type) or pa.types.is_large_string(
        back.item_labels.type
    )
    assert back.item_labels.to_pylist() == model.item_labels_.to_pylist()
    assert back.budget is None and back.item_counts is None
    np.testing.assert_array_equal(back.item_factors, model.item_factors_)
    a, _ = model.similar_items(model.item_codes(["item-3"]), N=3)
    b, _ = back.similar_items(back.item_codes(["item-3"]), N=3)
    np.testing.assert_array_equal(a, b)


def test_recommend_excludes_history_items_and_returns_the_n_best_in_order(string_labelled):
    model = MatrixFactorization(method="als", dim=3, steps=3, rating_range=(1, 5), seed=3)
    model.fit(string_labelled)
    # A history with its own code book (different item order from the model's).
    history = Ratings.from_columns(
        ["x", "x", "x", "y", "y"],
        ["item-7", "item-1", "item-20", "item-1", "item-4"],
        [5.0, 1.0, 4.0, 2.0, 5.0],
    )
    codes, scores = model.recommend(np.arange(2), history, N=6)
    ids = [model.item_labels_.take(pa.array(row)) for row in codes]
    V = model.user_factors(history)
    labels = model.item_labels_.to_pylist()
    for u, rated in ((0, {"item-7", "item-1", "item-20"}), (1, {"item-1", "item-4"})):
        c = model.model_.user_biases(history)[u]  # the user's own bias: a constant shift
        s = V[u] @ model.item_factors_.T + model.item_biases_ + c
        ranked = [labels[c] for c in np.argsort(-s, kind="stable") if labels[c] not in rated][:6]
        assert ids[u].to_pylist() == ranked
        assert not rated & set(ids[u].to_pylist())
        assert np.all(np.diff(scores[u]) <= 0)
        np.testing.assert_allclose(scores[u], np.sort(s[[labels.index(x) for x in ranked]])[::-1])


def test_recommend_never_returns_rated_items_even_when_n_exceeds_the_unrated_ones(
    string_labelled,
):
    model = MatrixFactorization(method="als", dim=2, steps=2, rating_range=(1, 5), seed=3)
    model.fit(string_labelled)
    labels = model.item_labels_.to_pylist()
    rated = labels[:-2]  # all but two items
    history = Ratings.from_columns(["x"] * len(rated), rated, [3.0] * len(rated))
    codes, scores = model.recommend(0, history, N=5)
    assert codes.shape == scores.shape == (5,)  # one user: shape (N,), padded past the unrated
    found = model.item_labels_.take(pa.array(codes[codes >= 0])).to_pylist()
    assert not set(rated) & set(found) and len(found) == 2
    assert np.all(np.isfinite(scores[:2])) and np.all(scores[2:] == -np.inf)
    assert np.all(codes[2:] == -1)


def test_similar_items_exclude_the_item_itself_and_rank_by_cosine(string_labelled):
    model = MatrixFactorization(method="als", dim=3, steps=3, rating_range=(1, 5), seed=3)
    model.fit(string_labelled)
    labels = model.item_labels_.to_pylist()
    codes, scores = model.similar_items(model.item_codes(["item-2", "item-9"]), N=5)
    ids = [model.item_labels_.take(pa.array(row)) for row in codes]
    U = model.item_factors_ / np.linalg.norm(model.item_factors_, axis=1, keepdims=True)
    for row, item in enumerate(["item-2", "item-9"]):
        c = labels.index(item)
        assert item not in ids[row].to_pylist() and len(ids[row]) == 5
        sims = U @ U[c]
        sims[c] = -np.inf
        assert ids[row].to_pylist() == [labels[j] for j in np.argsort(-sims, kind="stable")[:5]]
        np.testing.assert_allclose(scores[row], np.sort(sims)[::-1][:5], rtol=1e-12)


def test_similar_items_of_an_unknown_item_raise_data_error(string_labelled):
    model = MatrixFactorization(method="als", dim=2, steps=1, rating_range=(1, 5), seed=3)
    model.fit(string_labelled)
    with pytest.raises(DataError, match="Unknown item code"):
        model.similar_items(model.item_codes(["item-2", "no-such-item"]))
    with pytest.raises(InvalidParameterError, match=r"similar_items\(model.item_codes\(ids\)\)"):
        model.similar_items(["item-2"])


def test_accountant_reports_gaussian_runs_with_dp_accounting_pld_and_rdp_too():
    plan = plan_noise(
        PrivacyBudget(2.0, 1e-5), solver="gd", steps=3, releases_per_step=4, grouped=True
    )
    acc = PrivacyAccountant().compose(plan.event())
    exact = acc.spent(1e-5).epsilon
    pld_eps = acc.spent(1e-5, accounting="pld").epsilon
    rdp_eps = acc.spent(1e-5, accounting="rdp").epsilon
    assert exact == pytest.approx(2.0, rel=1e-6)
    assert pld_eps == pytest.approx(exact, rel=2e-3)  # PLD discretises the same composition
    assert rdp_eps > exact * 1.01  # RDP's conversion is looser
    with pytest.raises(InvalidParameterError, match="'accounting' parameter"):
        acc.spent(1e-5, accounting="moments")


def test_pld_accounting_refuses_a_ledger_with_approximate_dp_events():
    from userdp.privacy import WeightAndThresholdDpEvent

    acc = PrivacyAccountant().compose(dp_accounting.GaussianDpEvent(3.0))
    acc.compose(WeightAndThresholdDpEvent(0.5, 1e-6, 4.0, 20.0, 100))
    with pytest.raises(UnsupportedEventError, match="Gaussian events only"):
        acc.spent(1e-5, accounting="pld")
    assert acc.spent(1e-5).epsilon > 0.5


# -- top_items and the implicit-feedback term ----------------------------------------------------
def test_top_items_trains_only_the_items_with_the_largest_released_counts():
    data = lowrank_ratings(n_users=300, n_items=80, n_ratings=6000, seed=5)
    model = MatrixFactorization(
        method="adadpals",
        dim=3,
        steps=2,
        rating_range=(0.5, 5.0),
        top_items=0.25,
        seed=4,
        items=data.item_labels,
        epsilon=2.0,
        delta=1e-5,
    )
    model.fit(data)
    kept = np.flatnonzero(model.trained_items_)
    assert kept.size == 20
    # chosen by the released counts, not the exact ones
    assert set(kept) == set(np.argsort(-model.item_counts_, kind="stable")[:20])
    assert np.all(model.item_factors_[~model.trained_items_] == 0)
    assert np.all(np.linalg.norm(model.item_factors_[kept], axis=1) > 0)
    assert model.budget_.epsilon == pytest.approx(2.0, rel=1e-4)  # selection costs nothing more


def test_the_implicit_term_is_a_charged_release_and_meets_the_budget():
    data = lowrank_ratings(n_users=300, n_items=80, n_ratings=6000, seed=6)
    plain = MatrixFactorization(
        method="adadpals",
        dim=3,
        steps=2,
        rating_range=(0.5, 5.0),
        seed=1,
        items=data.item_labels,
        epsilon=3.0,
        delta=1e-5,
    )
    grav = MatrixFactorization(**{**plain.get_params(), "unobserved_weight": 0.5})
    for m in (plain, grav):
        m.fit(data)
        assert m.budget_.epsilon == pytest.approx(3.0, rel=1e-4)
    assert plain.plan_.gravity is None and grav.plan_.gravity is not None
    # The extra release is paid for with more noise on the other releases.
    assert grav.plan_.gram > plain.plan_.gram and grav.plan_.moment > plain.plan_.moment
    n_gauss = str(grav.dp_event_).count("GaussianDpEvent")
    assert n_gauss == str(plain.dp_event_).count("GaussianDpEvent") + 1


@pytest.mark.parametrize("method", ["als", "adadpals", "adadpsgd"])
def test_the_unobserved_items_term_pulls_unrated_scores_to_zero(method):
    # Two groups of users, each liking 8 of its own 20 items (0/1 feedback). Fitting only the
    # observed 1s leaves the other group's items at arbitrary scores; the implicit term of
    # unobserved_weight pulls them to 0 while users still get their own group's items first.
    rng = np.random.default_rng(8)
    users = np.repeat(np.arange(2000), 8)
    items = np.concatenate(
        [rng.choice(20, 8, replace=False) + (20 if u % 2 else 0) for u in range(2000)]
    )
    data = Ratings.from_codes(users, items, np.ones(users.size))
    other = (np.arange(2000) % 2 == 0)[:, None] == (np.arange(40) >= 20)[None, :]
    budget = {} if method == "als" else {"epsilon": 20.0, "delta": 1e-5}
    mean_other = {}
    for alpha in (0.0, 1.0):
        # biases=False: all-ones data is explained by biases alone (the default's "auto"
        # turns them off with the implicit term, not without it).
        model = MatrixFactorization(
            method=method,
            dim=4,
            steps=4,
            rating_range=(0.0, 1.0),
            center=0.0,
            unobserved_weight=alpha,
            seed=2,
            items=data.item_labels,
            biases=False,
            **budget,
        )
        model.fit(data)
        scores = model.user_factors(data) @ model.item_factors_.T
        mean_other[alpha] = float(scores[other].mean())
        codes, _ = model.recommend(np.arange(200), data, N=5)
        ids = model.item_labels_.take(pa.array(codes.ravel())).to_numpy().reshape(codes.shape)
        own = [np.mean((ids[u] >= 20) == (u % 2 == 1)) for u in range(200)]
        assert np.mean(own) > 0.9
    assert abs(mean_other[1.0]) < 0.1 < 0.3 < abs(mean_other[0.0])


def test_auto_item_cutoff_trains_the_items_whose_private_count_clears_the_noise():
    from userdp.recommend.als.estimator import AUTO_CUTOFF

    data = lowrank_ratings(n_users=2000, n_items=150, n_ratings=60_000, seed=9)
    model = MatrixFactorization(
        method="adadpals",
        dim=4,
        steps=2,
        rating_range=(0.5, 5.0),
        min_item_count="auto",
        seed=3,
        items=data.item_labels,
        epsilon=5.0,
        delta=1e-5,
    )
    model.fit(data)
    cutoff = AUTO_CUTOFF * model.plan_.moment * math.sqrt(4)
    np.testing.assert_array_equal(model.trained_items_, model.item_counts_ >= cutoff)
    assert 0 < model.trained_items_.sum() < 150  # the test data has items on both sides
    assert np.all(model.item_factors_[~model.trained_items_] == 0)
    assert model.budget_.epsilon == pytest.approx(5.0, rel=1e-4)
    with pytest.raises(InvalidParameterError, match="calibrated for the SSP methods"):
        MatrixFactorization(
            method="adadpsgd",
            rating_range=(0.5, 5.0),
            min_item_count="auto",
            epsilon=5.0,
            delta=1e-5,
        ).fit(data)


def test_a_cutoff_no_item_reaches_gives_a_zero_model_that_predicts_the_centre():
    data = lowrank_ratings(n_users=300, n_items=80, n_ratings=6000, seed=5)
    model = MatrixFactorization(
        method="adadpals",
        dim=3,
        steps=1,
        rating_range=(0.5, 5.0),
        min_item_count=1e9,
        seed=4,
        items=data.item_labels,
        epsilon=1.0,
        delta=1e-5,
    )
    with pytest.warns(UserWarning, match="no item reaches"):
        model.fit(data)
    assert not model.trained_items_.any() and np.all(model.item_factors_ == 0)
    pred = model.predict(data, data.users[:5], data.item_labels.take(pa.array(data.items[:5])))
    np.testing.assert_allclose(pred, model.center_)


# -- per-user random choices keyed by the user's own rows (the auditor relies on it) ---------------
def test_row_keys_are_the_librarys_one_keyed_hash_of_the_labels():
    # The pair key of the labels' salted hashes (userdp.data.hashing, as partition selection
    # keys its pairs), the item side under a fixed offset of the salt; the same keys from the
    # Arrow code books of a local table and from the Python lists a Spark partition holds.
    from userdp.data.hashing import pair_key, salted_hash
    from userdp.multitask.allocation import row_keys

    users, items = np.array([0, 0, 1, 2, 2]), np.array([1, 0, 2, 2, 1])
    user_labels, item_labels = pa.array(["a", "b", "c"]), pa.array([7, 8, 9], pa.int32())
    salt = -12345
    keys = row_keys(users, items, user_labels, item_labels, salt)
    expected = pair_key(
        salted_hash(user_labels, salt)[users], salted_hash(item_labels, salt ^ 0x7A5C)[items]
    )
    np.testing.assert_array_equal(keys, expected.view(np.uint64))
    as_lists = row_keys(users, items, ["a", "b", "c"], [7, 8, 9], salt)
    np.testing.assert_array_equal(as_lists, keys)
    assert not np.array_equal(row_keys(users, items, user_labels, item_labels, salt + 1), keys)


@pytest.mark.parametrize("rule", ["sample", "uniform", "tail"])
def test_keyed_choices_of_other_users_do_not_change_when_a_user_is_added(rule):
    from userdp.multitask.allocation import row_keys

    rng = np.random.default_rng(3)
    rows = [(f"u{u:03d}", f"i{i}") for u in range(60) for i in rng.choice(40, 12, replace=False)]
    added = [("u025x", f"i{i}") for i in range(15)]  # sorts between u025 and u026: codes shift

    def kept(pairs):
        r = Ratings.from_columns([p[0] for p in pairs], [p[1] for p in pairs], np.ones(len(pairs)))
        noise = NoiseSource(11)
        keys = row_keys(r.users, r.items, r.user_labels, r.item_labels, noise.salt)
        # "released" counts, fixed by item label (tail sampling ranks by them)
        counts = np.array([float(label[1:]) for label in r.item_labels.to_pylist()])
        if rule == "sample":
            mask = sample_per_user(r.users, 4, noise, keys=keys)
        elif rule == "uniform":
            mask = uniform_sampling(r.users, 4, noise, keys=keys) > 0
        else:
            mask = tail_sampling(r.users, r.items, counts, 4, noise, keys=keys) > 0
        users = r.user_labels.take(r.users[mask]).to_pylist()
        items = r.item_labels.take(r.items[mask]).to_pylist()
        return {(u, i) for u, i in zip(users, items, strict=True) if u != "u025x"}

    before, after = kept(rows), kept(rows + added)
    assert before == after
    assert len(before) == 60 * 4
