"""Property tests of the releases that choose h or sigma^2 in userdp.estimate.

(a) the size histogram's exact bin counts move by exactly 1 in l1 when a user is added;
(b) the mean's user-moment sums move by <= hw^2 and <= hw when a user is added, and by
    <= hw^2 and <= 2 hw when one user's values are replaced;
(c) with the pilot fixed, GWA's residual-variance statistic moves by <= its stated
    sensitivity B^2 max_l sum_{S_l} c_i when one user's labels are replaced.
"""

from __future__ import annotations

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from userdp.estimate._label_release import _residual_mean  # noqa: E402
from userdp.estimate.mean import _user_moments  # noqa: E402
from userdp.estimate.weighting import _size_counts  # noqa: E402

FAST = settings(max_examples=100, deadline=None, derandomize=True)
TOL = 1e-9


def _users(rng: np.random.Generator, n_users: int) -> tuple[np.ndarray, np.ndarray]:
    sizes = rng.integers(1, 40, n_users)
    return np.repeat(np.arange(n_users), sizes), sizes


def _extreme(rng: np.random.Generator, n: int, lo: float, hi: float) -> np.ndarray:
    """Values at the range's ends and inside it."""
    v = rng.uniform(lo, hi, n)
    ends = rng.random(n) < 0.6
    v[ends] = rng.choice([lo, hi], int(ends.sum()))
    return v


@FAST
@given(st.integers(0, 2**32 - 1), st.integers(0, 30), st.integers(1, 10**7))
def test_adding_a_user_moves_the_size_counts_by_exactly_one(seed, n_users, new_size):
    sizes = np.random.default_rng(seed).integers(1, 10**6, n_users)
    before = _size_counts(sizes)
    after = _size_counts(np.append(sizes, new_size))
    assert np.abs(after - before).sum() == 1


@FAST
@given(st.integers(0, 2**32 - 1), st.integers(1, 20), st.booleans())
def test_the_user_moment_sums_move_by_at_most_their_sensitivity(seed, n_users, replace):
    rng = np.random.default_rng(seed)
    lo, hi = -3.0, 7.0
    hw = 0.5 * (hi - lo)
    codes, sizes = _users(rng, n_users)
    values = _extreme(rng, codes.size, lo, hi)
    a = np.array(_user_moments(codes, values, sizes, (lo, hi)))
    if replace:  # user 0 gets other values in the range (sizes public)
        other = values.copy()
        other[codes == 0] = _extreme(rng, int(sizes[0]), lo, hi)
        b = np.array(_user_moments(codes, other, sizes, (lo, hi)))
        bound = np.array([hw * hw, 2 * hw])
    else:  # a new user m with its own values
        k = int(rng.integers(1, 40))
        b = np.array(
            _user_moments(
                np.append(codes, np.full(k, n_users)),
                np.append(values, _extreme(rng, k, lo, hi)),
                np.append(sizes, k),
                (lo, hi),
            )
        )
        bound = np.array([hw * hw, hw])
    assert np.all(np.abs(b - a) <= bound * (1 + TOL))


@FAST
@given(st.integers(0, 2**32 - 1), st.integers(2, 15), st.floats(1.0, 50.0))
def test_the_residual_variance_statistic_moves_by_at_most_its_sensitivity(seed, n_users, h):
    rng = np.random.default_rng(seed)
    lo, hi = 1.0, 10.0
    codes, sizes = _users(rng, n_users)
    x = rng.standard_normal((codes.size, 3)) * 5
    beta0 = rng.standard_normal(3) * 3  # the released pilot, fixed
    y = _extreme(rng, codes.size, lo, hi)
    a, sens = _residual_mean(x, y, beta0, codes, sizes, (lo, hi), h)
    victim = int(rng.integers(0, n_users))
    other = y.copy()
    other[codes == victim] = _extreme(rng, int(sizes[victim]), lo, hi)
    b, sens_b = _residual_mean(x, other, beta0, codes, sizes, (lo, hi), h)
    assert sens_b == sens  # depends on the public partition only
    # Independent bound: B^2 times the victim's share of the normalised weights.
    w = np.minimum(h, sizes[codes]) / sizes[codes]
    share = w[codes == victim].sum() / w.sum()
    bound = (hi - lo) ** 2 * share
    assert abs(b - a) <= bound * (1 + TOL)
    assert bound <= sens * (1 + TOL)
