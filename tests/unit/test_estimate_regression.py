"""Label-private linear regression: GWA (Epasto et al. 2020, Alg. 3, Theorem 6) and sample
limiting (Sec. 5.2), in :mod:`userdp.estimate.regression`.

Reference values come from independent computations written here: Theorem 6's total variance
and Algorithm 3's sensitivity with plain Python loops over users, the feasible estimators
OLS, weighted least squares with the smooth weights of Lemma 3 and sample limiting, and the
bounds of Claim 3 for Example 1.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from userdp.estimate.regression import (
    LabelPrivateLinearRegression,
    best_limit_h_regression,
    gwa_linear_regression,
    gwa_matrix,
    gwa_objective,
    sample_limit_design,
    solve_gwa,
)
from userdp.exceptions import DataError, InvalidParameterError, NotFittedError
from userdp.privacy import NoiseSource, PrivacyAccountant


# -- independent references ----------------------------------------------------------------------
def python_sensitivity(matrix: np.ndarray, users: np.ndarray) -> float:
    """max_l sum_j sum_{i in S_l} |c_ji| with dictionaries and loops (Algorithm 3, line 2)."""
    per_user: dict[object, float] = {}
    for i, user in enumerate(users.tolist()):
        per_user[user] = per_user.get(user, 0.0) + sum(abs(v) for v in matrix[:, i].tolist())
    return max(per_user.values())


def python_objective(
    matrix: np.ndarray, users: np.ndarray, noise_variance: float, laplace_unit: float
) -> float:
    """Theorem 6: sigma^2 sum c_ji^2 + 2 d (B/eps max_l sum_j sum_{S_l} |c_ji|)^2."""
    frob = sum(v * v for v in matrix.ravel().tolist())
    d = matrix.shape[0]
    return noise_variance * frob + 2 * d * (laplace_unit * python_sensitivity(matrix, users)) ** 2


def ols_matrix(x: np.ndarray) -> np.ndarray:
    return np.linalg.solve(x.T @ x, x.T)


def smooth_wls_matrix(x: np.ndarray, users: np.ndarray, h: float) -> np.ndarray:
    """(X^T W X)^-1 X^T W with W = diag(min(h, s_l) / s_l) (Lemma 3's weights)."""
    _, codes, sizes = np.unique(users, return_inverse=True, return_counts=True)
    w = np.minimum(h, sizes[codes]) / sizes[codes]
    return np.linalg.solve(x.T @ (w[:, None] * x), x.T * w)


def zipf_instance(seed: int, m: int = 40, d: int = 4, s_max: int = 60):
    rng = np.random.default_rng(seed)
    sizes = np.minimum(rng.zipf(1.6, m), s_max)
    users = rng.permutation(np.repeat(np.arange(m), sizes))
    x = np.column_stack([rng.normal(size=(users.size, d - 1)), np.ones(users.size)])
    return x, users


def example_1(g: int) -> tuple[np.ndarray, np.ndarray]:
    """Example 1 (Sec. 5.3): d = 2, m = 2 g^2 + 2 users with orthogonal directions."""
    rows = [[float(g), 0.0]]
    users = [0]
    for u in range(1, g * g + 1):  # users 2 .. g^2 + 1: g points (1, 0) each
        rows += [[1.0, 0.0]] * g
        users += [u] * g
    rows += [[0.0, 1.0]] * g  # user g^2 + 2: g points (0, 1)
    users += [g * g + 1] * g
    for u in range(g * g + 2, 2 * g * g + 2):  # one point (0, 1) each
        rows.append([0.0, 1.0])
        users.append(u)
    return np.array(rows), np.array(users)


# Example 1 sets 2 d (B / epsilon)^2 = 1 with d = 2: laplace_unit = B / epsilon = 1/2.
EXAMPLE_UNIT = 0.5


# -- C X = I ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(("noise_variance", "laplace_unit"), [(1.0, 3.0), (4.0, 0.2), (0.0, 1.0)])
def test_gwa_matrix_is_an_unbiased_estimator(seed, noise_variance, laplace_unit):
    x, users = zipf_instance(seed)
    c = gwa_matrix(x, users, noise_variance=noise_variance, laplace_unit=laplace_unit)
    assert c.shape == (x.shape[1], x.shape[0])
    np.testing.assert_allclose(c @ x, np.eye(x.shape[1]), rtol=0, atol=1e-8)


@pytest.mark.parametrize("g", [4, 5])
@pytest.mark.parametrize("noise_variance", [0.0, 1e-6])
def test_gwa_matrix_on_example_1_is_an_unbiased_estimator(g, noise_variance):
    x, users = example_1(g)
    c = gwa_matrix(x, users, noise_variance=noise_variance, laplace_unit=EXAMPLE_UNIT)
    np.testing.assert_allclose(c @ x, np.eye(2), rtol=0, atol=1e-8)


def test_gwa_matrix_accepts_string_user_ids_and_keeps_record_order():
    x, users = zipf_instance(7, m=12)
    names = np.array([f"user-{u:03d}" for u in users])
    a = gwa_matrix(x, users, noise_variance=1.0, laplace_unit=2.0)
    b = gwa_matrix(x, names, noise_variance=1.0, laplace_unit=2.0)
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)
    perm = np.random.default_rng(0).permutation(users.size)
    c = gwa_matrix(x[perm], users[perm], noise_variance=1.0, laplace_unit=2.0)
    assert python_objective(c, users[perm], 1.0, 2.0) == pytest.approx(
        python_objective(a, users, 1.0, 2.0), rel=1e-7
    )


# -- optimality ------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize(("noise_variance", "laplace_unit"), [(1.0, 0.5), (1.0, 5.0), (9.0, 50.0)])
def test_gwa_beats_ols_smooth_wls_and_sample_limiting(seed, noise_variance, laplace_unit):
    x, users = zipf_instance(seed)
    sol = solve_gwa(x, users, noise_variance=noise_variance, laplace_unit=laplace_unit)
    ours = python_objective(sol.matrix, users, noise_variance, laplace_unit)
    assert ours == pytest.approx(sol.objective, rel=1e-10)
    rivals = {"ols": ols_matrix(x)}
    s_max = int(np.bincount(np.unique(users, return_inverse=True)[1]).max())
    for h in (1, 2, 3, 5, 8, 13, 21, s_max):
        rivals[f"wls h={h}"] = smooth_wls_matrix(x, users, h)
        design = sample_limit_design(x, users, max(h, 4), noise=NoiseSource(seed))
        rivals[f"limit h={max(h, 4)}"] = design.matrix
    for name, c in rivals.items():
        np.testing.assert_allclose(c @ x, np.eye(x.shape[1]), atol=1e-8, err_msg=name)
        theirs = python_objective(c, users, noise_variance, laplace_unit)
        assert ours <= theirs * (1 + 1e-9), name
    # The dual bound certifies near-optimality.
    assert sol.lower_bound <= sol.objective
    assert sol.relative_gap < 1e-6


@pytest.mark.parametrize("g", [4, 5])
def test_claim_3_gwa_variance_at_most_one_over_g4(g):
    x, users = example_1(g)
    sol = solve_gwa(x, users, noise_variance=0.0, laplace_unit=EXAMPLE_UNIT)
    assert python_objective(sol.matrix, users, 0.0, EXAMPLE_UNIT) <= 1.05 / g**4


@pytest.mark.parametrize("g", [4, 5])
def test_claim_3_sample_limiting_variance_at_least_one_over_4g3(g):
    x, users = example_1(g)
    # Records of one user are identical here, so the random sample does not matter.
    values = [
        python_objective(sample_limit_design(x, users, h).matrix, users, 0.0, EXAMPLE_UNIT)
        for h in range(1, g + 2)  # h >= g keeps everything
    ]
    assert min(values) >= 1.0 / (4 * g**3)
    best = best_limit_h_regression(x, users, noise_variance=0.0, laplace_unit=EXAMPLE_UNIT)
    assert python_objective(best.matrix, users, 0.0, EXAMPLE_UNIT) == pytest.approx(
        min(values), rel=1e-9
    )


def test_tiny_positive_noise_variance_on_example_1_matches_the_linear_program():
    x, users = example_1(4)
    lp = solve_gwa(x, users, noise_variance=0.0, laplace_unit=EXAMPLE_UNIT)
    newton = solve_gwa(x, users, noise_variance=1e-9, laplace_unit=EXAMPLE_UNIT)
    assert newton.objective == pytest.approx(lp.objective, rel=1e-5)


def test_without_laplace_noise_gwa_is_ols():
    x, users = zipf_instance(3)
    c = gwa_matrix(x, users, noise_variance=2.0, laplace_unit=0.0)
    np.testing.assert_allclose(c, ols_matrix(x), atol=1e-10)


def test_gwa_objective_matches_the_reference():
    x, users = zipf_instance(1)
    c = smooth_wls_matrix(x, users, 3)
    assert gwa_objective(c, users, noise_variance=2.5, laplace_unit=4.0) == pytest.approx(
        python_objective(c, users, 2.5, 4.0), rel=1e-12
    )


# -- sample limiting -------------------------------------------------------------------------------
@pytest.mark.parametrize("h", [1, 3, 10])
def test_sample_limit_design_keeps_min_h_s_records_per_user(h):
    x, users = zipf_instance(2, d=2)
    design = sample_limit_design(x, users, max(h, 1), noise=NoiseSource(5))
    _, codes, sizes = np.unique(users, return_inverse=True, return_counts=True)
    kept = np.bincount(codes, weights=design.keep, minlength=sizes.size)
    np.testing.assert_array_equal(kept, np.minimum(h, sizes))
    assert np.all(design.matrix[:, ~design.keep] == 0.0)
    np.testing.assert_allclose(design.matrix @ x, np.eye(2), atol=1e-8)


def test_best_limit_h_is_no_worse_than_keeping_everything():
    x, users = zipf_instance(4)
    best = best_limit_h_regression(
        x, users, noise_variance=1.0, laplace_unit=5.0, noise=NoiseSource(1)
    )
    _, codes, sizes = np.unique(users, return_inverse=True, return_counts=True)
    kept = np.bincount(codes, weights=best.keep, minlength=sizes.size)
    np.testing.assert_array_equal(kept, np.minimum(best.h, sizes))
    assert python_objective(best.matrix, users, 1.0, 5.0) <= python_objective(
        ols_matrix(x), users, 1.0, 5.0
    )


def test_sample_limit_with_too_few_records_raises():
    x, users = zipf_instance(0, m=2, d=3)
    with pytest.raises(DataError, match="use a larger h"):
        sample_limit_design(x, users, 1)


# -- Theorem 6: the released variance --------------------------------------------------------------
def test_total_variance_of_releases_matches_theorem_6():
    """E ||beta~ - beta||^2 = sigma^2 ||C||_F^2 + 2 d b^2 for a fixed C (Theorem 6).

    Labels y = X beta + uniform noise (variance sigma^2) stay inside the range, so clipping
    never acts. With R runs, the mean of e_r = ||beta~_r - beta||^2 has standard error
    sd(e_r) / sqrt(R); the test allows 5 standard errors (a false failure has probability
    ~6e-7 under a normal approximation).
    """
    rng = np.random.default_rng(11)
    x, users = zipf_instance(5, m=15, d=3, s_max=12)
    x[:, :2] = np.clip(x[:, :2], -2, 2)
    beta = np.array([0.5, -0.3, 5.0])
    half = 1.0
    sigma2 = half * half / 3.0  # uniform on [-1, 1]
    bounds = (0.0, 10.0)  # |x beta| <= 1.6, so y in [2.4, 7.6]
    c = gwa_matrix(x, users, noise_variance=sigma2, laplace_unit=10.0 / 2.0)
    runs = 4000
    errors = np.empty(runs)
    for r in range(runs):
        y = x @ beta + rng.uniform(-half, half, users.size)
        res = gwa_linear_regression(x, y, users, epsilon=2.0, label_range=bounds, matrix=c, seed=r)
        errors[r] = np.sum((res.coef - beta) ** 2)
    b = 10.0 * python_sensitivity(c, users) / 2.0
    assert res.noise_scale == pytest.approx(b, rel=1e-12)
    expected = python_objective(c, users, sigma2, 10.0 / 2.0)
    assert expected == pytest.approx(sigma2 * np.sum(c * c) + 2 * 3 * b * b, rel=1e-12)
    se = errors.std(ddof=1) / math.sqrt(runs)
    assert abs(errors.mean() - expected) <= 5 * se


# -- accounting ------------------------------------------------------------------------------------
CONFIGS = [
    dict(method="gwa", noise_variance=1.5),
    dict(method="gwa", noise_variance="estimate"),
    dict(method="sample-limit", h="best", noise_variance=1.5),
    dict(method="sample-limit", h="best", noise_variance="estimate"),
    dict(method="sample-limit", h=None, noise_variance="estimate"),
    dict(method="sample-limit", h="max", noise_variance="estimate"),
    dict(method="sample-limit", h=3, noise_variance="estimate"),
    dict(method="sample-limit", h=3, noise_variance=1.5),
]


def synthetic(seed: int = 0, n_users: int = 60):
    rng = np.random.default_rng(seed)
    sizes = np.minimum(rng.zipf(1.7, n_users), 40)
    users = rng.permutation(np.repeat(np.arange(n_users), sizes))
    x = rng.normal(size=(users.size, 2))
    y = 5.0 + x @ np.array([1.0, -0.5]) + rng.normal(0.0, 1.0, users.size)
    return x, y, users


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(map(str, c.values())))
@pytest.mark.parametrize("epsilon", [0.3, 1.7])
def test_spent_epsilon_equals_the_requested_epsilon(config, epsilon):
    x, y, users = synthetic()
    model = LabelPrivateLinearRegression(
        epsilon=epsilon, label_range=(0.0, 10.0), seed=3, **config
    ).fit(x, y, users)
    spent = PrivacyAccountant().compose(model.dp_event_).spent().epsilon
    assert spent == pytest.approx(epsilon, rel=1e-9)
    assert spent <= epsilon * (1 + 1e-12)
    assert model.epsilon_ == pytest.approx(spent, rel=1e-15)
    estimated = config["noise_variance"] == "estimate" and config.get("h") not in (3, "max")
    assert len(model.dp_event_.events) == (3 if estimated else 1)
    share = 0.1 if estimated else 0.0
    assert model.selection_epsilon_ == pytest.approx(share * epsilon, rel=1e-12)
    # The final release's noise is calibrated to the C it used (Algorithm 3, line 2).
    width = 10.0
    sens = width * python_sensitivity(model.matrix_, users)
    assert model.sensitivity_ == pytest.approx(sens, rel=1e-12)
    assert model.noise_scale_ == pytest.approx(sens / ((1 - share) * epsilon), rel=1e-12)


def test_released_noise_variance_is_in_the_documented_range():
    x, y, users = synthetic(1)
    model = LabelPrivateLinearRegression(epsilon=1.0, label_range=(0.0, 10.0), seed=0)
    model.fit(x, y, users)
    assert 1e-6 * 100.0 <= model.noise_variance_ <= 25.0


# -- fit / predict ---------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["gwa", "sample-limit"])
def test_fit_predict_shapes_and_intercept(method):
    x, y, users = synthetic(2, n_users=200)
    model = LabelPrivateLinearRegression(
        epsilon=1e4, label_range=(-5.0, 15.0), method=method, noise_variance=1.0, seed=0
    )
    assert model.fit(x, y, users) is model
    assert model.coef_.shape == (2,)
    assert isinstance(model.intercept_, float)
    assert model.n_features_in_ == 2
    assert model.matrix_.shape == (3, users.size)
    assert model.predict(x[:7]).shape == (7,)
    # Almost no noise at epsilon = 1e4: the fit is the (weighted) least squares one.
    np.testing.assert_allclose(model.coef_, [1.0, -0.5], atol=0.15)
    assert model.intercept_ == pytest.approx(5.0, abs=0.15)
    np.testing.assert_allclose(model.predict(x), x @ model.coef_ + model.intercept_)


def test_without_intercept_the_design_is_x_itself():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(300, 2))
    users = rng.integers(0, 50, 300)
    y = x @ np.array([2.0, 1.0]) + rng.normal(0.0, 0.5, 300)
    model = LabelPrivateLinearRegression(
        epsilon=1e4, label_range=(-10.0, 10.0), fit_intercept=False, noise_variance=0.25, seed=0
    ).fit(x, y, users)
    assert model.intercept_ == 0.0
    assert model.matrix_.shape == (2, 300)
    np.testing.assert_allclose(model.matrix_ @ x, np.eye(2), atol=1e-8)
    np.testing.assert_allclose(model.coef_, [2.0, 1.0], atol=0.1)


def test_shifting_labels_and_range_moves_only_the_intercept():
    """Centring: C y = C (y - mid) + mid C 1 and C 1 = e_d with an intercept column."""
    x, y, users = synthetic(4)
    kw = dict(epsilon=1.0, noise_variance=1.0, seed=9)
    a = LabelPrivateLinearRegression(label_range=(0.0, 10.0), **kw).fit(x, y, users)
    b = LabelPrivateLinearRegression(label_range=(100.0, 110.0), **kw).fit(x, y + 100.0, users)
    np.testing.assert_allclose(b.coef_, a.coef_, atol=1e-9)
    assert b.intercept_ == pytest.approx(a.intercept_ + 100.0, abs=1e-9)


def test_labels_outside_the_range_are_clipped():
    x, y, users = synthetic(5)
    y_out = y.copy()
    y_out[:5] = [-1e6, 1e6, 11.0, -3.0, 50.0]
    kw = dict(epsilon=1.0, label_range=(0.0, 10.0), noise_variance=1.0, seed=2)
    a = LabelPrivateLinearRegression(**kw).fit(x, y_out, users)
    b = LabelPrivateLinearRegression(**kw).fit(x, np.clip(y_out, 0.0, 10.0), users)
    np.testing.assert_array_equal(a.coef_, b.coef_)


def test_same_seed_same_model_and_noise_differs_across_seeds():
    x, y, users = synthetic(6)
    kw = dict(epsilon=1.0, label_range=(0.0, 10.0), noise_variance=1.0)
    a = LabelPrivateLinearRegression(seed=1, **kw).fit(x, y, users)
    b = LabelPrivateLinearRegression(seed=1, **kw).fit(x, y, users)
    c = LabelPrivateLinearRegression(seed=2, **kw).fit(x, y, users)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    assert not np.array_equal(a.coef_, c.coef_)


def test_predict_before_fit_raises():
    model = LabelPrivateLinearRegression(epsilon=1.0, label_range=(0.0, 1.0))
    with pytest.raises(NotFittedError, match="not fitted yet"):
        model.predict(np.zeros((2, 2)))


def test_predict_with_the_wrong_number_of_features_raises():
    x, y, users = synthetic(7)
    model = LabelPrivateLinearRegression(
        epsilon=1.0, label_range=(0.0, 10.0), noise_variance=1.0, seed=0
    ).fit(x, y, users)
    with pytest.raises(DataError, match="X has 3 features; the model was fitted on 2"):
        model.predict(np.zeros((4, 3)))


# -- bad input -------------------------------------------------------------------------------------
BAD_PARAMS = [
    (dict(epsilon=0.0), r"'epsilon' parameter .* range \[1e-09, inf\)\. Got 0\.0"),
    (dict(epsilon=-1.0), r"'epsilon' parameter .* Got -1\.0"),
    (dict(epsilon=math.inf), r"'epsilon' parameter"),
    (dict(epsilon="1"), r"'epsilon' parameter"),
    (dict(label_range=(1.0, 1.0)), r"'label_range' parameter .* lower < upper"),
    (dict(label_range=(2.0, 1.0)), r"'label_range' parameter"),
    (dict(label_range=(0.0, math.nan)), r"'label_range' parameter"),
    (dict(label_range=(0.0,)), r"'label_range' parameter"),
    (dict(method="ols"), r"'method' parameter .* 'gwa', 'sample-limit'\. Got 'ols'"),
    (dict(h=3), r"'h' parameter .* only used with method='sample-limit'"),
    (dict(method="sample-limit", h=0), r"'h' parameter .* \[1, inf\), 'best' or 'max'\. Got 0"),
    (dict(method="sample-limit", h=2.5), r"'h' parameter .* Got 2\.5"),
    (dict(method="sample-limit", h=True), r"'h' parameter .* Got True"),
    (dict(method="sample-limit", h="all"), r"'h' parameter .* 'best', 'max'\. Got 'all'"),
    (dict(noise_variance=-1.0), r"'noise_variance' parameter .* \[0, inf\)"),
    (dict(noise_variance="ols"), r"'noise_variance' parameter .* 'estimate'\. Got 'ols'"),
    (dict(selection_share=1.0), r"'selection_share' parameter .* \(0, 1\)"),
    (dict(fit_intercept=1), r"'fit_intercept' parameter .* bool"),
    (dict(seed=-2), r"'seed' parameter"),
]


@pytest.mark.parametrize(("params", "match"), BAD_PARAMS)
def test_bad_parameters_raise_before_the_data_are_read(params, match):
    kw = dict(epsilon=1.0, label_range=(0.0, 10.0)) | params
    model = LabelPrivateLinearRegression(**kw)
    with pytest.raises(InvalidParameterError, match=match):
        model.fit("not data", None, None)


BAD_DATA = [
    (lambda x, y, u: (x[:-1], y, u), r"'X' and 'y' must have the same length; got 99 and 100"),
    (lambda x, y, u: (x, y, u[:-1]), r"'X' and 'users' must have the same length"),
    (lambda x, y, u: (np.where(np.arange(100)[:, None] == 3, np.inf, x), y, u), r"row 3"),
    (lambda x, y, u: (x[:, 0], y, u), r"'X' must be 2-D"),
    (lambda x, y, u: (x[:0], y[:0], u[:0]), r"at least one record"),
    (lambda x, y, u: (np.column_stack([x, 2 * x[:, 0]]), y, u), r"full column rank"),
    (lambda x, y, u: (np.column_stack([x, np.ones(100)]), y, u), r"full column rank"),
]


@pytest.mark.parametrize(("mutate", "match"), BAD_DATA)
def test_bad_data_raise_data_errors(mutate, match):
    rng = np.random.default_rng(0)
    x, y, users = rng.normal(size=(100, 2)), rng.uniform(0, 10, 100), rng.integers(0, 9, 100)
    model = LabelPrivateLinearRegression(epsilon=1.0, label_range=(0.0, 10.0), noise_variance=1.0)
    with pytest.raises(DataError, match=match):
        model.fit(*mutate(x, y, users))


def test_a_missing_label_sits_at_the_range_midpoint_and_inf_is_clipped():
    """The non-finite policy for private labels: NaN at the label range's midpoint, +-inf
    clipped, so no error or branch depends on whether one user holds such a label."""
    rng = np.random.default_rng(1)
    x, y, users = rng.normal(size=(100, 2)), rng.uniform(0, 10, 100), rng.integers(0, 9, 100)

    def fit(labels):
        model = LabelPrivateLinearRegression(
            epsilon=1.0, label_range=(0.0, 10.0), noise_variance=1.0, seed=3
        )
        return model.fit(x, labels, users).coef_

    odd = y.copy()
    odd[[3, 7, 9]] = [np.nan, np.inf, -np.inf]
    even = y.copy()
    even[[3, 7, 9]] = [5.0, 10.0, 0.0]
    assert np.array_equal(fit(odd), fit(even))


def test_gwa_linear_regression_needs_a_public_variance_or_a_matrix():
    x, y, users = synthetic(8)
    with pytest.raises(InvalidParameterError, match="needs a public 'noise_variance'"):
        gwa_linear_regression(x, y, users, epsilon=1.0, label_range=(0.0, 10.0))
    with pytest.raises(InvalidParameterError, match=r"must satisfy C X = I"):
        gwa_linear_regression(
            x, y, users, epsilon=1.0, label_range=(0.0, 10.0), matrix=np.zeros((2, y.size))
        )


def test_solve_gwa_rejects_bad_parameters():
    x, users = zipf_instance(0)
    with pytest.raises(InvalidParameterError, match=r"'noise_variance' parameter of solve_gwa"):
        solve_gwa(x, users, noise_variance=-1.0, laplace_unit=1.0)
    with pytest.raises(InvalidParameterError, match=r"'laplace_unit' parameter of solve_gwa"):
        solve_gwa(x, users, noise_variance=1.0, laplace_unit=math.nan)


def test_fit_without_users_is_one_line_naming_users_before_anything_is_charged():
    """fit(X, y) raised TypeError (a missing positional argument), unlike every other error."""
    from helpers import NO_DATA

    accountant = PrivacyAccountant()
    model = LabelPrivateLinearRegression(epsilon=1.0, label_range=(0.0, 10.0))
    with pytest.raises(
        DataError, match=r"^LabelPrivateLinearRegression\.fit needs 'users'"
    ) as info:
        model.fit(NO_DATA, NO_DATA, accountant=accountant)
    assert "\n" not in str(info.value) and "fit(X, y, users)" in str(info.value)
    assert accountant.ledger == ()
