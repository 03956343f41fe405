"""Property tests of the label-privacy sensitivity of GWA (Epasto et al. 2020, Alg. 3, Thm. 6).

Neighbouring datasets keep the public features X and partition S_l and replace the labels of
one user's records by any values in ``[lower, upper]``. For ``C`` from :func:`gwa_matrix`,
``||C y - C y'||_1 <= B max_l sum_j sum_{i in S_l} |c_ji|`` (B = upper - lower), and the
estimator's Laplace scale is exactly that bound over the epsilon of the release; both are
checked against a pure-Python recomputation of the bound.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from userdp.privacy import SAFE_NOISE_INFLATION

hypothesis = pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from userdp.estimate.regression import (  # noqa: E402
    LabelPrivateLinearRegression,
    gwa_linear_regression,
    gwa_matrix,
)

FAST = settings(
    max_examples=int(os.environ.get("USERDP_PROPERTY_EXAMPLES", "200")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TOL = 1e-9


def python_bound(matrix: np.ndarray, users: list[int], width: float) -> float:
    """B * max_l sum_j sum_{i in S_l} |c_ji|, with loops over the columns."""
    per_user: dict[int, float] = {}
    for i, user in enumerate(users):
        column = sum(abs(matrix[j][i]) for j in range(len(matrix)))
        per_user[user] = per_user.get(user, 0.0) + column
    return width * max(per_user.values())


@st.composite
def instances(draw):
    """A small full-rank design, a partition into users, labels and a replaced user."""
    d = draw(st.integers(1, 3))
    n_users = draw(st.integers(1, 6))
    sizes = draw(st.lists(st.integers(1, 5), min_size=n_users, max_size=n_users))
    users = [u for u, s in enumerate(sizes) for _ in range(s)]
    n = len(users)
    hypothesis.assume(n >= d + 1)
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)) * draw(st.sampled_from([0.01, 1.0, 100.0]))
    if draw(st.booleans()):
        x = np.round(x)  # repeated rows and ties
    hypothesis.assume(np.linalg.matrix_rank(x) == d)
    lower = draw(st.floats(-100, 100))
    width = draw(st.floats(0.1, 50))
    label = st.floats(lower, lower + width)
    y = np.array(draw(st.lists(label, min_size=n, max_size=n)))
    victim = draw(st.integers(0, n_users - 1))
    mine = [i for i, u in enumerate(users) if u == victim]
    y2 = y.copy()
    # Any replacement values: outside the range they are clipped to it.
    anything = st.one_of(label, st.floats(lower - 3 * width, lower + 4 * width))
    y2[mine] = draw(st.lists(anything, min_size=len(mine), max_size=len(mine)))
    noise_variance = draw(st.sampled_from([0.0, 1e-3, 1.0, 30.0]))
    epsilon = draw(st.sampled_from([0.1, 1.0, 4.0]))
    return x, users, y, y2, (lower, lower + width), noise_variance, epsilon


@pytest.mark.slow
@FAST
@given(instances(), st.integers(0, 2**32 - 1))
def test_replacing_one_users_labels_moves_the_release_by_at_most_the_bound(case, seed):
    """Same seed, same Laplace draw: the two releases differ by C y - C y' up to the safe-noise
    grid (each coordinate snapped within g/2: at most g more per coordinate, which is the
    declared SAFE_NOISE_INFLATION of the bound)."""
    x, users, y, y2, (lower, upper), noise_variance, epsilon = case
    width = upper - lower
    c = gwa_matrix(x, np.array(users), noise_variance=noise_variance, laplace_unit=width / epsilon)
    np.testing.assert_allclose(c @ x, np.eye(x.shape[1]), atol=1e-6)
    kw = dict(epsilon=epsilon, label_range=(lower, upper), matrix=c, seed=seed)
    a = gwa_linear_regression(x, y, users, **kw)
    b = gwa_linear_regression(x, y2, users, **kw)
    bound = python_bound(c.tolist(), users, width)
    assert a.sensitivity == pytest.approx(bound, rel=1e-12)
    assert a.noise_scale == pytest.approx(bound / epsilon, rel=1e-12)
    moved = float(np.abs(a.coef - b.coef).sum())
    scale = float(np.abs(a.coef).sum() + np.abs(b.coef).sum())  # rounding of the two sums
    assert moved <= bound * (1 + SAFE_NOISE_INFLATION) * (1 + TOL) + 1e-12 * scale


@pytest.mark.slow
@FAST
@given(instances(), st.sampled_from(["gwa", "sample-limit"]), st.booleans(), st.booleans())
def test_estimator_noise_scale_is_the_bound_over_epsilon(case, method, intercept, estimate):
    x, users, y, _, (lower, upper), noise_variance, epsilon = case
    width = upper - lower
    if intercept:
        hypothesis.assume(np.linalg.matrix_rank(np.column_stack([x, np.ones(len(y))])) > x.shape[1])
    model = LabelPrivateLinearRegression(
        epsilon=epsilon,
        label_range=(lower, upper),
        method=method,
        noise_variance="estimate" if estimate else noise_variance,
        fit_intercept=intercept,
        seed=0,
    ).fit(x, y, users)
    design = np.column_stack([x, np.ones(len(y))]) if intercept else x
    np.testing.assert_allclose(model.matrix_ @ design, np.eye(design.shape[1]), atol=1e-6)
    bound = python_bound(model.matrix_.tolist(), users, width)
    eps_release = epsilon - model.selection_epsilon_
    assert model.sensitivity_ == pytest.approx(bound, rel=1e-12)
    assert model.noise_scale_ == pytest.approx(bound / eps_release, rel=1e-12)
    assert model.selection_epsilon_ == pytest.approx(0.1 * epsilon if estimate else 0.0)
