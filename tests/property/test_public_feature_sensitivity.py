"""Sensitivity of PublicFeatureRecommender's released item statistics with and without item
biases, under adding one user, on random small inputs.

The released statistics are built by the same steps ``fit`` composes: the user solve
(:func:`user_solve_inputs`), the split into factors, item-side vectors and targets
(:func:`item_update_inputs`), the clip of the targets to the half width, the adaptive weights
and the per-item sums (:func:`segment_statistics`). The bounds asserted are the ones stated in
``PublicFeatureRecommender.fit``'s Privacy section, written out here: Gram ``max_norm^2``
(``2 max_norm^2`` with biases), moment ``max_norm * half`` (``sqrt(2) max_norm * half``), and
AM-DPSGD's clipped gradient sum ``clip_norm``. Each test also builds a user that reaches its
bound, so a bound stated half as large fails.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from userdp.multitask.allocation import adaptive_weights  # noqa: E402
from userdp.multitask.kernels import segment_offsets, segment_statistics  # noqa: E402
from userdp.recommend.core.model import solve_users  # noqa: E402
from userdp.recommend.public.encoders import FeatureFamily, IdEncoder, PublicFeatureEncoder  # noqa: E402
from userdp.recommend.public.steps import (  # noqa: E402
    BiasedEncoder,
    clipped_user_gradients,
    item_bias_encoder,
    item_update_inputs,
    user_solve_inputs,
)

FAST = settings(max_examples=40, deadline=None, derandomize=True)
N_ITEMS, D = 7, 3


def _stated(biased: bool, max_norm: float, half: float) -> tuple[float, float]:
    """The fit docstring's bounds: (Gram, moment)."""
    if biased:
        return 2.0 * max_norm**2, math.sqrt(2.0) * max_norm * half
    return max_norm**2, max_norm * half


def _released(users, items, y, U, counts, biased, max_norm, half):
    """The item statistics one SSP release perturbs, from the user solve's output ``U``."""
    beta = max_norm if biased else None
    weights = adaptive_weights(users, items, counts, mu=0.25, beta=1.0)
    _, X, target = item_update_inputs(U, users, y, beta, max_norm)
    target = np.clip(target, -half, half)
    order, offsets = segment_offsets(items, N_ITEMS)
    return segment_statistics(offsets, order, users, X, weights, target)


def _solve(users, items, y, V_items, biased, max_norm, n_users):
    """The exact user solve of ``fit`` (never released)."""
    Z, t = user_solve_inputs(V_items, y, items, max_norm if biased else None)
    order, offsets = segment_offsets(users, n_users)
    gram, moment = segment_statistics(offsets, order, items, Z, None, t)
    return solve_users(gram, moment, 0.02 * np.maximum(np.diff(offsets), 1).astype(float))


def _data(rng, n_users):
    rows = [
        np.sort(rng.choice(N_ITEMS, int(rng.integers(1, N_ITEMS + 1)), replace=False))
        for _ in range(n_users)
    ]
    users = np.concatenate([np.full(r.size, u) for u, r in enumerate(rows)]).astype(np.int64)
    items = np.concatenate(rows).astype(np.int64)
    lo, hi = 0.5, 5.0
    values = rng.choice([lo, hi, 2.7], users.size)  # the range's ends and inside
    return users, items, values


@FAST
@given(
    st.integers(0, 2**32 - 1),
    st.booleans(),
    st.floats(0.1, 3.0),
    st.floats(0.2, 10.0),
    st.integers(1, 10),
)
def test_the_ssp_statistics_of_a_full_user_solve_move_within_the_stated_bounds(
    seed, biased, max_norm, scale, n_old
):
    rng = np.random.default_rng(seed)
    users, items, values = _data(rng, n_old + 1)
    y = values - 2.75  # centred; half width 2.25 of the range (0.5, 5)
    half = 2.25
    counts = rng.uniform(0.0, 20.0, N_ITEMS)  # released counts: public, the same for D, D'
    V_items = rng.normal(0.0, scale, (N_ITEMS, D + (1 if biased else 0)))  # released encoder
    old = users < n_old
    U_new = _solve(users, items, y, V_items, biased, max_norm, n_old + 1)
    U_old = _solve(users[old], items[old], y[old], V_items, biased, max_norm, n_old)
    np.testing.assert_array_equal(U_new[:n_old], U_old)  # the others' solves do not move
    a = _released(users[old], items[old], y[old], U_old, counts, biased, max_norm, half)
    b = _released(users, items, y, U_new, counts, biased, max_norm, half)
    gram_bound, moment_bound = _stated(biased, max_norm, half)
    assert np.linalg.norm(b[0] - a[0]) <= gram_bound * (1 + 1e-9)
    assert np.linalg.norm(b[1] - a[1]) <= moment_bound * (1 + 1e-9)


@FAST
@given(
    st.integers(0, 2**32 - 1),
    st.booleans(),
    st.floats(0.1, 3.0),
    st.floats(0.1, 3.0),
    st.floats(0.01, 1e4),
)
def test_any_user_solve_output_moves_the_statistics_within_the_bounds_and_can_reach_them(
    seed, biased, max_norm, half, size
):
    # The bound must hold whatever the added user's solve returns (its factor and bias depend
    # on their ratings only): draw that output at any scale.
    rng = np.random.default_rng(seed)
    n_old = int(rng.integers(0, 6))
    users, items, _ = _data(rng, n_old + 1)
    y = rng.uniform(-3 * half, 3 * half, users.size)  # targets beyond the half width too
    counts = rng.uniform(0.0, 20.0, N_ITEMS)
    U = rng.normal(0.0, size, (n_old + 1, D + (1 if biased else 0)))
    old = users < n_old
    a = _released(users[old], items[old], y[old], U[:n_old], counts, biased, max_norm, half)
    b = _released(users, items, y, U, counts, biased, max_norm, half)
    gram_bound, moment_bound = _stated(biased, max_norm, half)
    assert np.linalg.norm(b[0] - a[0]) <= gram_bound * (1 + 1e-9)
    assert np.linalg.norm(b[1] - a[1]) <= moment_bound * (1 + 1e-9)
    # A user with one rating (weight 1), a factor longer than max_norm and a target beyond the
    # half width (for biases: a user bias far below it) reaches both bounds.
    worst = np.zeros((1, U.shape[1]))
    worst[0, 0] = 10.0 * max_norm
    if biased:
        worst[0, -1] = -100.0 * half
    users2 = np.append(users[old], n_old)
    items2 = np.append(items[old], 0)
    y2 = np.append(y[old], 2.0 * half)
    c = _released(users2, items2, y2, np.vstack([U[:n_old], worst]), counts, biased, max_norm, half)
    assert np.linalg.norm(c[0] - a[0]) == pytest.approx(gram_bound, rel=1e-6)
    assert np.linalg.norm(c[1] - a[1]) == pytest.approx(moment_bound, rel=1e-6)
    assert np.linalg.norm(c[0] - a[0]) > 0.5 * gram_bound  # a halved bound would fail


def _encoder(kind: str) -> BiasedEncoder:
    if kind == "id":
        factors = IdEncoder(N_ITEMS, D, seed=0, init_scale=1.0)
    else:
        rng = np.random.default_rng(11)
        fam = FeatureFamily("g", sp.csr_matrix((rng.random((N_ITEMS, 4)) < 0.5).astype(float)))
        factors = PublicFeatureEncoder([fam], D, seed=0, init_scale=1.0)
    return BiasedEncoder(factors, item_bias_encoder(factors))


@FAST
@given(st.integers(0, 2**32 - 1), st.floats(0.01, 10.0), st.sampled_from(["id", "features"]))
def test_the_biased_am_dpsgd_gradient_sum_moves_by_at_most_the_clip_norm(seed, clip, kind):
    # With biases the per-user gradient covers the bias encoder's parameters too (user vectors
    # [u_k, beta]); clipping the whole of it bounds the sum's change by clip_norm.
    rng = np.random.default_rng(seed)
    enc = _encoder(kind)
    params = enc.init_params() + rng.normal(0, 0.5, enc.n_params)
    n_users = int(rng.integers(1, 6))
    users, items, _ = _data(rng, n_users + 1)
    resid = rng.normal(0, 5, users.size)
    max_norm = float(rng.uniform(0.1, 3.0))
    X = np.column_stack([rng.normal(0, 3, (n_users + 1, D)), np.full(n_users + 1, max_norm)])

    def total(n, r):
        keep = users < n
        order, offsets = segment_offsets(users[keep], n)
        return clipped_user_gradients(enc, params, X, items[keep], r[keep], order, offsets, clip)

    assert np.linalg.norm(total(n_users + 1, resid) - total(n_users, resid)) <= clip * (1 + 1e-9)
    # A residual large enough that the added user's gradient exceeds the clip: moves by clip.
    loud = resid.copy()
    loud[users == n_users] = 1e6
    moved = np.linalg.norm(total(n_users + 1, loud) - total(n_users, loud))
    assert moved == pytest.approx(clip, rel=1e-6)
    # ... and the bias parameters are part of what was clipped (they received gradient).
    split = enc.factors.n_params
    keep = users == n_users
    order, offsets = segment_offsets(np.zeros(int(keep.sum()), np.int64), 1)
    one = clipped_user_gradients(
        enc, params, X[n_users:], items[keep], loud[keep], order, offsets, None
    )
    assert np.linalg.norm(one[split:]) > 0
