"""Property tests of the sensitivities behind userdp.estimate.mean and .quantile.

Epasto et al. 2020 (Lemma 1, Lemma 3; sample limiting, Section 3.2) and the weighted
exponential mechanism of userdp.estimate.quantile:

(a) adding one user moves the mean's released statistics ``S`` by <= h hw and ``N`` by <= h;
(b) adding one user moves the quantile utility by <= max(q, 1 - q) h at every x;
(c) with public sizes, replacing one user's values moves the weighted average by
    <= B max_l sum_{S_l} c_i, and the normalised quantile utility by <= max_l sum_{S_l} c_i.

Neighbours: D' = D plus user ``m`` (code m, appended), so existing codes are unchanged; h is
fixed, and the weights of existing users must not depend on the added user.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from userdp.estimate.mean import _mean_statistics  # noqa: E402
from userdp.estimate.quantile import grid_utility, make_grid  # noqa: E402
from userdp.estimate.weighting import smooth_weights  # noqa: E402

TOL = 1e-9
FAST = settings(
    max_examples=int(os.environ.get("USERDP_PROPERTY_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@st.composite
def neighbours(draw):
    """(codes, values, sizes) for D and D' = D + one user, bounds and h."""
    lo = draw(st.floats(-10, 10))
    width = draw(st.floats(0.1, 20))
    hi = lo + width
    unit = st.floats(0, 1)
    sizes = draw(st.lists(st.integers(1, 20), min_size=1, max_size=10))
    codes = np.repeat(np.arange(len(sizes)), sizes)
    fractions = draw(st.lists(unit, min_size=codes.size, max_size=codes.size))
    values = lo + width * np.array(fractions)
    new_size = draw(st.integers(1, 50))
    # The new user's values sit at the range ends (the worst case) or anywhere.
    new_fracs = draw(
        st.lists(st.sampled_from([0.0, 1.0]) | unit, min_size=new_size, max_size=new_size)
    )
    codes2 = np.concatenate([codes, np.full(new_size, len(sizes))])
    values2 = np.concatenate([values, lo + width * np.array(new_fracs)])
    sizes2 = np.array([*sizes, new_size])
    h = draw(st.floats(0.5, 60))
    return (codes, values, np.array(sizes)), (codes2, values2, sizes2), (lo, hi), h


def shuffle_records(data, seed):
    """The same dataset with records in another order (codes are per record)."""
    codes, values, sizes = data
    perm = np.random.default_rng(seed).permutation(codes.size)
    return codes[perm], values[perm], sizes


# -- (a) the mean's statistics under adding a user -----------------------------------------------
@FAST
@given(neighbours(), st.integers(0, 2**32 - 1))
def test_adding_a_user_moves_s_by_h_hw_and_n_by_h(case, seed):
    d, d2, bounds, h = case
    hw = 0.5 * (bounds[1] - bounds[0])
    s1, n1 = _mean_statistics(*shuffle_records(d, seed), h, bounds)
    s2, n2 = _mean_statistics(*d2, h, bounds)
    assert abs(s2 - s1) <= h * hw * (1 + TOL) + TOL
    assert abs(n2 - n1) <= h * (1 + TOL)
    # Existing users keep their weights: only h and their own sizes enter.
    w1 = smooth_weights(d[0], d[2], h)
    w2 = smooth_weights(d2[0], d2[2], h)
    np.testing.assert_array_equal(w2[: w1.size], w1)


@FAST
@given(neighbours())
def test_sample_limited_statistics_move_by_h_hw_and_h(case):
    # Sample limiting keeps min(floor h, s_l) records per user; the existing users' kept
    # records are fixed (the coupling of the random choice), the new user keeps a prefix.
    _, d2, bounds, h = case
    k = max(1, math.floor(h))
    hw = 0.5 * (bounds[1] - bounds[0])
    codes, values, sizes = d2
    first = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    keep = np.arange(codes.size) - first[codes] < k
    kept_sizes = np.minimum(sizes, k)
    m = sizes.size - 1
    old = codes < m
    s1, n1 = _mean_statistics(codes[keep & old], values[keep & old], kept_sizes[:m], k, bounds)
    s2, n2 = _mean_statistics(codes[keep], values[keep], kept_sizes, k, bounds)
    assert abs(s2 - s1) <= k * hw * (1 + TOL) + TOL
    assert abs(n2 - n1) <= k


def test_the_mean_bound_is_attained():
    # A user with >= h records all at the upper end moves S by exactly h hw: the bound is tight.
    codes, values, sizes = np.array([0, 0]), np.array([1.0, 2.0]), np.array([2])
    bounds, h = (0.0, 4.0), 3.0
    s1, n1 = _mean_statistics(codes, values, sizes, h, bounds)
    s2, n2 = _mean_statistics(
        np.array([0, 0, 1, 1, 1, 1]), np.array([1.0, 2.0, 4, 4, 4, 4]), np.array([2, 4]), h, bounds
    )
    assert s2 - s1 == pytest.approx(h * 2.0) and n2 - n1 == pytest.approx(h)


# -- (b) the quantile utility under adding a user ------------------------------------------------
def utility_on_grid(codes, values, weights, q, grid):
    """The exponential mechanism's utility at the output-grid points nearest ``grid``'s values
    (the mechanism scores grid points: a value counts at every point at or above it)."""
    bounds = (float(np.min(grid)), float(np.max(grid)))
    g = make_grid(bounds, None, "test")
    cells = g.codes(np.asarray(values, dtype=np.float64))
    order = np.argsort(cells, kind="stable")
    cum = np.concatenate([[0.0], np.cumsum(np.asarray(weights, dtype=np.float64)[order])])
    at = np.minimum(g.codes(np.asarray(grid, dtype=np.float64)), g.size - 1)
    return grid_utility(at, cells[order], cum, q)


@FAST
@given(neighbours(), st.floats(0.01, 0.99), st.booleans())
def test_adding_a_user_moves_the_quantile_utility_by_max_q_h(case, q, limit):
    d, d2, (lo, hi), h = case
    grid = np.unique(np.concatenate([np.linspace(lo, hi, 101), d2[1]]))  # data points too
    if limit:  # 0/1 weights: the first min(floor h, s_l) records of each user
        h = float(max(1, math.floor(h)))
        weights = []
        for codes, _, sizes in (d, d2):
            first = np.concatenate([[0], np.cumsum(sizes)[:-1]])
            weights.append((np.arange(codes.size) - first[codes] < h).astype(float))
    else:
        weights = [smooth_weights(d[0], d[2], h), smooth_weights(d2[0], d2[2], h)]
    u1 = utility_on_grid(d[0], d[1], weights[0], q, grid)
    u2 = utility_on_grid(d2[0], d2[1], weights[1], q, grid)
    assert np.max(np.abs(u2 - u1)) <= max(q, 1 - q) * h * (1 + TOL) + TOL


# -- (c) public sizes: replacing one user's values -----------------------------------------------
@st.composite
def replaced(draw):
    (codes, values, sizes), _, (lo, hi), h = draw(neighbours())
    victim = draw(st.integers(0, sizes.size - 1))
    fracs = draw(
        st.lists(
            st.sampled_from([0.0, 1.0]) | st.floats(0, 1),
            min_size=int(sizes[victim]),
            max_size=int(sizes[victim]),
        )
    )
    values2 = values.copy()
    values2[codes == victim] = lo + (hi - lo) * np.array(fracs)
    return codes, values, values2, sizes, (lo, hi), h


@FAST
@given(replaced(), st.floats(0.01, 0.99))
def test_replacing_a_users_values_moves_the_weighted_average_by_b_max_user_weight(case, q):
    codes, values, values2, sizes, (lo, hi), h = case
    w = smooth_weights(codes, sizes, h)
    c = w / w.sum()
    max_user = float(np.bincount(codes, weights=c).max())
    assert abs(c @ values2 - c @ values) <= (hi - lo) * max_user * (1 + TOL) + TOL
    grid = np.unique(np.concatenate([np.linspace(lo, hi, 101), values, values2]))
    u1 = utility_on_grid(codes, values, c, q, grid)
    u2 = utility_on_grid(codes, values2, c, q, grid)
    assert np.max(np.abs(u2 - u1)) <= max_user * (1 + TOL) + TOL
