"""Sensitivity of the recommenders' other releases under adding one user: the private mean's
statistic, the AM-DPSGD clipped gradient sum and the implicit-feedback (gravity) Gram."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from userdp.multitask.kernels import segment_offsets  # noqa: E402
from userdp.multitask.ssp import clip_rows  # noqa: E402
from userdp.recommend.als.estimator import mean_statistics  # noqa: E402
from userdp.recommend.core.centring import smooth_mean_statistics  # noqa: E402
from userdp.recommend.public.encoders import IdEncoder  # noqa: E402
from userdp.recommend.public.estimator import (  # noqa: E402
    clipped_user_gradients,
    user_feature_matrix,
    user_prior_statistics,
)

FAST = settings(max_examples=50, deadline=None, derandomize=True)


def _ratings(rng, n, lo, hi):
    """Ratings at the range's ends and inside it."""
    v = rng.uniform(lo, hi, n)
    ends = rng.random(n) < 0.5
    v[ends] = rng.choice([lo, hi], int(ends.sum()))
    return v


@FAST
@given(st.integers(0, 2**32 - 1), st.integers(1, 12), st.integers(0, 60))
def test_the_private_means_statistic_moves_by_at_most_sqrt2(seed, k, n_old):
    rng = np.random.default_rng(seed)
    lo, hi = -1.0, 4.0
    old = _ratings(rng, n_old, lo, hi)
    new = _ratings(rng, int(rng.integers(1, k + 1)), lo, hi)  # the new user's <= k kept ratings
    a = mean_statistics(old, lo, hi, k)
    b = mean_statistics(np.concatenate([old, new]), lo, hi, k)
    assert np.linalg.norm(b - a) <= math.sqrt(2) + 1e-12
    assert np.all(np.abs(b - a) <= 1 + 1e-12)


@FAST
@given(st.integers(0, 2**32 - 1), st.floats(1.0, 40.0), st.integers(0, 8))
def test_the_smoothly_bounded_means_statistic_moves_by_at_most_sqrt2(seed, k, n_old_users):
    # center="private-mean": user u's ratings weigh min(1, k / n_u); an added user brings any
    # number of ratings (more than k too); the others' weights depend on their own counts.
    rng = np.random.default_rng(seed)
    lo, hi = 0.5, 5.0
    sizes = rng.integers(1, 60, n_old_users)
    users = np.repeat(np.arange(n_old_users), sizes)
    old = _ratings(rng, users.size, lo, hi)
    n_new = int(rng.integers(1, 80))
    new = _ratings(rng, n_new, lo, hi)
    a = smooth_mean_statistics(old, users, lo, hi, k)
    b = smooth_mean_statistics(
        np.concatenate([old, new]),
        np.concatenate([users, np.full(n_new, n_old_users)]),
        lo,
        hi,
        k,
    )
    assert np.linalg.norm(b - a) <= math.sqrt(2) + 1e-12
    assert np.all(np.abs(b - a) <= 1 + 1e-12)
    # The bound is reached: a user with at least k ratings, all at the top of the range.
    top = np.full(math.ceil(k), hi)
    c = smooth_mean_statistics(
        np.concatenate([old, top]),
        np.concatenate([users, np.full(top.size, n_old_users)]),
        lo,
        hi,
        k,
    )
    assert np.linalg.norm(c - a) == pytest.approx(math.sqrt(2))


@FAST
@given(st.integers(0, 2**32 - 1), st.floats(0.01, 10.0))
def test_the_am_dpsgd_clipped_gradient_sum_moves_by_at_most_the_clip_norm(seed, clip):
    rng = np.random.default_rng(seed)
    n_users, n_items, d = int(rng.integers(1, 8)), 10, 3
    enc = IdEncoder(n_items, d, seed=0, init_scale=1.0)
    params = enc.init_params()
    rows = [
        np.sort(rng.choice(n_items, int(rng.integers(1, 6)), replace=False))
        for _ in range(n_users + 1)
    ]
    users = np.concatenate([np.full(r.size, u) for u, r in enumerate(rows)])
    items = np.concatenate(rows)
    resid = rng.normal(0, 5, users.size)
    U = rng.normal(0, 3, (n_users + 1, d))

    def total(n):
        keep = users < n
        order, offsets = segment_offsets(users[keep], n)
        return clipped_user_gradients(
            enc, params, U, items[keep], resid[keep], order, offsets, clip
        )

    assert np.linalg.norm(total(n_users + 1) - total(n_users)) <= clip * (1 + 1e-9)


@FAST
@given(st.integers(0, 2**32 - 1), st.floats(0.1, 3.0))
def test_the_implicit_terms_all_users_gram_moves_by_at_most_max_norm_squared(seed, max_norm):
    rng = np.random.default_rng(seed)
    V = clip_rows(rng.normal(0, 3, (int(rng.integers(1, 20)) + 1, 4)), max_norm)
    # MatrixFactorization._gravity releases V^T V of the clipped user factors.
    delta = V.T @ V - V[:-1].T @ V[:-1]
    assert np.linalg.norm(delta) <= max_norm**2 * (1 + 1e-12)


@FAST
@given(st.integers(0, 2**32 - 1), st.integers(1, 4), st.floats(0.1, 3.0))
def test_the_user_feature_prior_statistics_move_by_at_most_sqrt_f(seed, n_families, max_norm):
    # Adding a user adds phi_k u_k^T to the sums and phi_k to the counts, with
    # ||phi_k||^2 <= F (each family's row averaged) and ||u_k|| <= max_norm.
    rng = np.random.default_rng(seed)
    n_old = int(rng.integers(0, 20))
    fams = []
    for _ in range(n_families):
        m = (rng.random((n_old + 1, int(rng.integers(1, 6)))) < 0.5).astype(float)
        m *= rng.uniform(0.1, 5.0, m.shape)  # bag-of-words repetitions
        fams.append(sp.csr_matrix(m))
    U = clip_rows(rng.standard_normal((n_old + 1, 3)) * 5.0, max_norm)
    phi_new, f = user_feature_matrix(fams, n_old + 1)
    phi_old, _ = user_feature_matrix([sp.csr_matrix(m.toarray()[:n_old]) for m in fams], n_old)
    s_new, c_new = user_prior_statistics(phi_new, U)
    s_old, c_old = user_prior_statistics(phi_old, U[:n_old])
    assert np.linalg.norm(s_new - s_old) <= math.sqrt(f) * max_norm * (1 + 1e-12)
    assert np.linalg.norm(c_new - c_old) <= math.sqrt(f) * (1 + 1e-12)
