"""Unit tests of weighted ERM (Epasto et al. 2020, Section 4, Algorithm 2).

Reference values come from independent computations named in each test: a bisection on the
Balle-Wang analytic Gaussian condition for the composed noise, finite differences for the
gradients, and scipy.optimize on the same weighted loss for the fitted models.
"""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from scipy import optimize, stats

from userdp._validation import MAX_ITERATIONS
from userdp.estimate.erm import WeightedERM, weighted_gradient_sum
from userdp.exceptions import DataError, InvalidParameterError, NotFittedError
from userdp.privacy import PrivacyAccountant

EPS, DELTA = 1.0, 1e-6


def make_users(m: int, seed: int, max_size: int = 40) -> np.ndarray:
    """User ids with Zipf(1.5) sizes truncated at ``max_size``, in a random record order."""
    rng = np.random.default_rng(seed)
    sizes = np.minimum(rng.zipf(1.5, m), max_size)
    return rng.permutation(np.repeat(np.arange(m), sizes))


def logistic_data(seed: int, n_users: int = 300, d: int = 4):
    rng = np.random.default_rng(seed)
    users = make_users(n_users, seed)
    x = rng.normal(size=(users.size, d)) / math.sqrt(d)
    beta = np.linspace(1.5, -1.5, d)
    p = 1.0 / (1.0 + np.exp(-(x @ beta + 0.3)))
    y = (rng.uniform(size=users.size) < p).astype(int)
    return x, y, users, beta


def gaussian_multiplier(epsilon: float, delta: float) -> float:
    """sigma of the (epsilon, delta) analytic Gaussian for sensitivity 1, by bisection.

    Balle & Wang 2018, Theorem 8: delta(sigma) = Phi(1/(2 sigma) - eps sigma)
    - e^eps Phi(-1/(2 sigma) - eps sigma), decreasing in sigma. Independent of userdp and of
    dp-accounting's root finder.
    """

    def delta_of(sigma: float) -> float:
        a, b = 0.5 / sigma - epsilon * sigma, -0.5 / sigma - epsilon * sigma
        return stats.norm.cdf(a) - math.exp(epsilon) * stats.norm.cdf(b)

    lo, hi = 1e-3, 1e3
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if delta_of(mid) <= delta else (mid, hi)
    return hi


def gaussian_events(event: dp_accounting.DpEvent) -> list[tuple[float, int]]:
    """(noise multiplier, count) of every Gaussian in a composed event."""
    match event:
        case dp_accounting.GaussianDpEvent(noise_multiplier=z):
            return [(z, 1)]
        case dp_accounting.SelfComposedDpEvent(event=inner, count=c):
            return [(z, k * c) for z, k in gaussian_events(inner)]
        case dp_accounting.ComposedDpEvent(events=events):
            return [g for e in events for g in gaussian_events(e)]
    return []


def laplace_events(event: dp_accounting.DpEvent) -> list[float]:
    match event:
        case dp_accounting.LaplaceDpEvent(noise_multiplier=b):
            return [b]
        case dp_accounting.ComposedDpEvent(events=events):
            return [b for e in events for b in laplace_events(e)]
    return []


def weighted_logistic_loss(theta, x, y_pm, w):
    z = x @ theta[:-1] + theta[-1]
    return float(np.sum(w * np.logaddexp(0.0, -y_pm * z)))


def smooth_weights_by_hand(users: np.ndarray, h: float) -> np.ndarray:
    _, inv, counts = np.unique(users, return_inverse=True, return_counts=True)
    return (np.minimum(h, counts) / counts)[inv]


# -- accounting ------------------------------------------------------------------------------
@pytest.mark.parametrize("weighting", ["smooth", "limit"])
@pytest.mark.parametrize("public", [False, True])
@pytest.mark.parametrize("h", [None, 5.0])
def test_the_released_model_spends_exactly_the_requested_budget(weighting, public, h):
    x, y, users, _ = logistic_data(0)
    model = WeightedERM(
        epsilon=EPS,
        delta=DELTA,
        weighting=weighting,
        public_user_sizes=public,
        h=h,
        steps=20,
        seed=1,
    ).fit(x, y, users)
    spent = PrivacyAccountant().compose(model.dp_event_).spent(DELTA)
    assert spent.epsilon <= EPS
    assert spent.epsilon == pytest.approx(EPS, rel=1e-9)
    assert spent.delta == pytest.approx(DELTA, rel=1e-12)
    assert model.epsilon_ == pytest.approx(spent.epsilon, rel=1e-12)


def test_public_sizes_noise_is_the_composed_gaussian_split_over_steps_at_twice_lh():
    # Neighbours replace one user's values: sensitivity 2 L h; no count release, so the T steps
    # compose to one Gaussian: T / z^2 = 1 / sigma_total^2.
    x, y, users, _ = logistic_data(1)
    steps, lipschitz, h = 30, 0.7, 4.0
    model = WeightedERM(
        epsilon=EPS,
        delta=DELTA,
        lipschitz=lipschitz,
        h=h,
        steps=steps,
        public_user_sizes=True,
        seed=2,
    ).fit(x, y, users)
    expected_z = math.sqrt(steps) * gaussian_multiplier(EPS, DELTA)
    assert model.noise_multiplier_ == pytest.approx(expected_z, rel=1e-6)
    assert model.noise_scale_ == pytest.approx(expected_z * 2.0 * lipschitz * h, rel=1e-6)
    assert gaussian_events(model.dp_event_) == [(model.noise_multiplier_, steps)]


def test_private_sizes_noise_splits_one_composed_gaussian_between_count_and_steps():
    x, y, users, _ = logistic_data(2)
    steps, lipschitz, h = 25, 1.3, 3.0
    model = WeightedERM(
        epsilon=EPS, delta=DELTA, lipschitz=lipschitz, h=h, steps=steps, seed=3
    ).fit(x, y, users)
    found = gaussian_events(model.dp_event_)
    assert (model.noise_multiplier_, steps) in found
    precision = sum(k / z**2 for z, k in found)
    assert precision == pytest.approx(gaussian_multiplier(EPS, DELTA) ** -2, rel=1e-6)
    assert model.noise_scale_ == pytest.approx(model.noise_multiplier_ * lipschitz * h, rel=1e-12)
    assert laplace_events(model.dp_event_) == []  # h given: no size histogram


def test_choosing_h_from_private_sizes_spends_selection_share_on_a_laplace_histogram():
    x, y, users, _ = logistic_data(3)
    model = WeightedERM(epsilon=2.0, delta=DELTA, selection_share=0.25, steps=10, seed=4).fit(
        x, y, users
    )
    (b,) = laplace_events(model.dp_event_)
    assert 1.0 / b == pytest.approx(0.5, rel=1e-12)
    precision = sum(k / z**2 for z, k in gaussian_events(model.dp_event_))
    assert precision == pytest.approx(gaussian_multiplier(1.5, DELTA) ** -2, rel=1e-6)


def test_the_gradient_noise_has_the_stated_scale():
    # One step from theta = 0 with public sizes: theta_1 = -eta (G + noise) / n_h, where G is
    # the exact weighted gradient at 0 (no clipping: 0.5 ||x|| < L). Recover the noise.
    rng = np.random.default_rng(5)
    d, h, eta = 25, 2.0, 0.1
    users = np.repeat(np.arange(40), rng.integers(1, 6, 40))
    x = rng.normal(size=(users.size, d)) * 0.1
    y = rng.integers(0, 2, users.size)
    w = smooth_weights_by_hand(users, h)
    n_h = w.sum()
    grad0 = -(np.where(y == 1, 1.0, -1.0) * 0.5 * w) @ x
    draws = []
    for seed in range(40):
        model = WeightedERM(
            epsilon=EPS,
            delta=DELTA,
            h=h,
            steps=1,
            learning_rate=eta,
            radius=1e9,
            fit_intercept=False,
            public_user_sizes=True,
            seed=seed,
        ).fit(x, y, users)
        assert model.count_ == pytest.approx(n_h, rel=1e-12)
        draws.append(-model.coef_ * n_h / eta - grad0)
    draws = np.concatenate(draws)
    assert abs(draws.mean()) < 4 * model.noise_scale_ / math.sqrt(draws.size)
    assert draws.std() == pytest.approx(model.noise_scale_, rel=0.1)


@pytest.mark.parametrize("lipschitz", [0.2, 5.0])  # clipping active, inactive
def test_one_noiseless_step_is_the_smooth_weighted_clipped_gradient(lipschitz):
    # theta_1 = -eta G / n_h with G = sum_i min(h, s_l)/s_l clip(grad_i, L) at theta = 0,
    # computed here from the definition (logistic at 0: grad_i = -y_i/2 (x_i, 1)).
    x, y, users, _ = logistic_data(28)
    h, eta = 3.0, 0.5
    model = WeightedERM(
        epsilon=1e7,
        delta=DELTA,
        lipschitz=lipschitz,
        h=h,
        steps=1,
        learning_rate=eta,
        public_user_sizes=True,
        seed=29,
    ).fit(x, y, users)
    w = smooth_weights_by_hand(users, h)
    design = np.column_stack([x, np.ones(len(x))])
    grads = -0.5 * np.where(y == 1, 1.0, -1.0)[:, None] * design
    norms = np.linalg.norm(grads, axis=1)
    grads *= np.minimum(1.0, lipschitz / norms)[:, None]
    expected = -eta * (w @ grads) / w.sum()
    got = np.append(model.coef_, model.intercept_)
    noise = eta * model.noise_scale_ / model.count_  # per-coordinate noise sd of theta_1
    assert noise < 1e-3 * np.abs(expected).max()
    np.testing.assert_allclose(got, expected, rtol=0, atol=6 * noise)


def test_private_sizes_release_a_noisy_effective_count_and_public_sizes_the_exact_one():
    x, y, users, _ = logistic_data(6)
    exact = smooth_weights_by_hand(users, 3.0).sum()
    private = WeightedERM(epsilon=EPS, delta=DELTA, h=3.0, steps=5, seed=7).fit(x, y, users)
    public = WeightedERM(
        epsilon=EPS, delta=DELTA, h=3.0, steps=5, public_user_sizes=True, seed=7
    ).fit(x, y, users)
    assert public.count_ == pytest.approx(exact, rel=1e-12)
    assert private.count_ != exact
    assert abs(private.count_ - exact) < 6 * 3.0 * 50  # z_n ~ 20 for this budget


# -- the per-step statistic ------------------------------------------------------------------
@pytest.mark.parametrize("loss", ["logistic", "squared"])
@pytest.mark.parametrize("fit_intercept", [False, True])
def test_the_weighted_gradient_matches_finite_differences(loss, fit_intercept):
    rng = np.random.default_rng(8)
    n, d = 30, 3
    x = rng.normal(size=(n, d))
    y = rng.choice([-1.0, 1.0], n) if loss == "logistic" else rng.normal(size=n) * 3
    w = rng.uniform(0.1, 2.0, n)
    theta = rng.normal(size=d + fit_intercept)

    def risk(t):
        pred = x @ t[:d] + (t[d] if fit_intercept else 0.0)
        per = np.log1p(np.exp(-y * pred)) if loss == "logistic" else 0.5 * (pred - y) ** 2
        return float(np.sum(w * per))

    step = 1e-6
    numeric = np.array(
        [(risk(theta + step * e) - risk(theta - step * e)) / (2 * step) for e in np.eye(theta.size)]
    )
    grad = weighted_gradient_sum(theta, x, y, w, loss, 1e12, fit_intercept=fit_intercept)
    np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("loss", ["logistic", "squared"])
def test_each_example_gradient_is_clipped_to_the_lipschitz_bound_without_turning(loss):
    rng = np.random.default_rng(9)
    x = rng.normal(size=(50, 4)) * 10
    y = rng.choice([-1.0, 1.0], 50) if loss == "logistic" else rng.normal(size=50) * 10
    theta = rng.normal(size=5)
    for i in range(50):
        row = (theta, x[i : i + 1], y[i : i + 1], np.ones(1), loss)
        clipped = weighted_gradient_sum(*row, 0.5, fit_intercept=True)
        raw = weighted_gradient_sum(*row, 1e12, fit_intercept=True)
        assert np.linalg.norm(clipped) <= 0.5 * (1 + 1e-12)
        expected = raw * min(1.0, 0.5 / np.linalg.norm(raw))
        np.testing.assert_allclose(clipped, expected, rtol=1e-10, atol=1e-300)


# -- fitted models ---------------------------------------------------------------------------
def test_logistic_with_negligible_noise_matches_the_nonprivate_weighted_fit():
    x, y, users, _ = logistic_data(10, n_users=400)
    lipschitz = float(np.sqrt((x**2).sum(axis=1) + 1).max())  # no clipping: exact gradients
    model = WeightedERM(
        epsilon=1e7,
        delta=DELTA,
        lipschitz=lipschitz,
        h=5.0,
        steps=400,
        learning_rate=2.0,  # ~ 1 / smoothness of the normalised loss (features ~ N(0, I/4))
        public_user_sizes=True,
        seed=11,
    ).fit(x, y, users)
    w = smooth_weights_by_hand(users, model.h_) / model.count_
    y_pm = np.where(y == 1, 1.0, -1.0)
    ref = optimize.minimize(
        weighted_logistic_loss, np.zeros(x.shape[1] + 1), args=(x, y_pm, w), method="BFGS"
    )
    assert np.linalg.norm(ref.x) < model.radius  # the constraint is inactive
    ours = np.append(model.coef_, model.intercept_)
    assert weighted_logistic_loss(ours, x, y_pm, w) <= ref.fun + 1e-3
    x_test, y_test, _, _ = logistic_data(12, n_users=400)
    ref_acc = np.mean((x_test @ ref.x[:-1] + ref.x[-1] > 0) == y_test)
    assert np.mean(model.predict(x_test) == y_test) == pytest.approx(ref_acc, abs=0.01)


def test_squared_loss_with_negligible_noise_recovers_the_coefficients():
    rng = np.random.default_rng(13)
    users = make_users(300, 13)
    x = rng.normal(size=(users.size, 3))
    beta, intercept = np.array([1.0, -2.0, 0.5]), 0.7
    y = x @ beta + intercept + 0.05 * rng.normal(size=users.size)
    model = WeightedERM(
        loss="squared", epsilon=1e7, delta=DELTA, lipschitz=5.0, steps=500, seed=14
    ).fit(x, y, users)
    np.testing.assert_allclose(model.coef_, beta, atol=0.03)
    assert model.intercept_ == pytest.approx(intercept, abs=0.03)
    np.testing.assert_allclose(model.predict(x[:5]), x[:5] @ model.coef_ + model.intercept_)


@pytest.mark.parametrize("epsilon", [1e-2, 1e7])
def test_the_model_stays_in_the_ball_of_the_given_radius(epsilon):
    x, y, users, _ = logistic_data(15)
    x = x * 50  # the unconstrained optimum is far out
    model = WeightedERM(
        epsilon=epsilon, delta=DELTA, radius=0.3, h=3.0, steps=30, learning_rate=1.0, seed=16
    ).fit(x, y, users)
    assert math.hypot(np.linalg.norm(model.coef_), model.intercept_) <= 0.3 * (1 + 1e-12)


def test_labels_in_minus_one_one_are_returned_in_the_same_encoding():
    x, y, users, _ = logistic_data(17)
    y_pm = np.where(y == 1, 1, -1)
    a = WeightedERM(epsilon=EPS, delta=DELTA, h=3.0, steps=10, seed=18).fit(x, y, users)
    b = WeightedERM(epsilon=EPS, delta=DELTA, h=3.0, steps=10, seed=18, classes=(-1, 1))
    b.fit(x, y_pm, users)
    np.testing.assert_array_equal(b.classes_, [-1, 1])
    np.testing.assert_allclose(a.coef_, b.coef_)
    assert set(np.unique(b.predict(x))) <= {-1, 1}
    proba = a.predict_proba(x)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_array_equal(a.predict(x), (proba[:, 1] > 0.5).astype(int))


def test_string_user_ids_give_the_same_model_as_integer_ids():
    x, y, users, _ = logistic_data(19)
    names = np.array([f"user-{u:05d}" for u in users])  # sorts like the integers
    a = WeightedERM(epsilon=EPS, delta=DELTA, steps=10, seed=20).fit(x, y, users)
    b = WeightedERM(epsilon=EPS, delta=DELTA, steps=10, seed=20).fit(x, y, names)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    assert a.h_ == b.h_


@pytest.mark.parametrize("public", [False, True])
def test_chosen_h_lies_within_the_user_sizes_and_limit_h_is_an_integer(public):
    x, y, users, _ = logistic_data(21, n_users=500)
    sizes = np.bincount(users)
    for weighting in ["smooth", "limit"]:
        model = WeightedERM(
            epsilon=EPS,
            delta=DELTA,
            weighting=weighting,
            public_user_sizes=public,
            steps=10,
            seed=22,
        ).fit(x, y, users)
        assert 1.0 <= model.h_ <= 2 * sizes.max()  # private histogram bins round sizes up
        if weighting == "limit":
            assert model.h_ == int(model.h_)


def tradeoff_objective(sizes: np.ndarray, hs: np.ndarray, a: float, limit: bool) -> np.ndarray:
    """Sec. 4's ``(max_l sum c)^2 + A sum c^2`` for smooth or sample-limiting weights, by brute
    force over users: ``c_i = min(h, s_l)/(s_l n_h)`` or ``1/n_h`` on ``min(h, s_l)`` records."""
    capped = np.minimum(hs[:, None], sizes[None, :])
    n_h = capped.sum(axis=1)
    squares = n_h if limit else (capped**2 / sizes[None, :]).sum(axis=1)
    return (hs / n_h) ** 2 + a * squares / n_h**2


@pytest.mark.parametrize("epsilon", [0.5, 3.0])
def test_default_h_minimises_the_tradeoff_objective_with_the_documented_constant(epsilon):
    # A = 1 / (d z_total^2), z_total = 2 z / sqrt(T) under replacement (public sizes).
    x, y, users, _ = logistic_data(25, n_users=600)
    sizes = np.bincount(users).astype(np.float64)
    for weighting in ["smooth", "limit"]:
        model = WeightedERM(
            epsilon=epsilon,
            delta=DELTA,
            weighting=weighting,
            steps=40,
            public_user_sizes=True,
            seed=26,
        ).fit(x, y, users)
        z_total = 2.0 * model.noise_multiplier_ / math.sqrt(40)
        a = 1.0 / ((x.shape[1] + 1) * z_total**2)
        if weighting == "smooth":
            grid = np.concatenate([np.linspace(1.0, sizes.max(), 20001), sizes])
        else:
            grid = np.arange(1.0, sizes.max() + 1)
        values = tradeoff_objective(sizes, grid, a, weighting == "limit")
        ours = tradeoff_objective(sizes, np.array([model.h_]), a, weighting == "limit")[0]
        assert ours <= values.min() * (1 + 1e-9)
        if weighting == "limit":
            assert model.h_ == grid[np.argmin(values)]


def test_smooth_weights_use_every_record_where_sample_limiting_drops_most():
    # 60 users x 100 records, h = 2, negligible noise: smooth weighting averages each user's
    # 100 records (weight 2/100 each), sample limiting keeps 2 of them, so its fit rests on
    # 120 records instead of 6000 and lands farther from the population optimum.
    rng = np.random.default_rng(27)
    users = np.repeat(np.arange(60), 100)
    beta = np.array([1.0, -1.0, 0.5])
    x_test = rng.normal(size=(100_000, 3))
    y_test = np.where(rng.uniform(size=100_000) < 1 / (1 + np.exp(-x_test @ beta)), 1.0, -1.0)

    def excess(model):
        z = x_test @ model.coef_ + model.intercept_
        return np.mean(np.logaddexp(0, -y_test * z)) - np.mean(
            np.logaddexp(0, -y_test * (x_test @ beta))
        )

    gaps = {"smooth": [], "limit": []}
    for rep in range(5):
        x = rng.normal(size=(users.size, 3))
        y = (rng.uniform(size=users.size) < 1 / (1 + np.exp(-x @ beta))).astype(int)
        for weighting in gaps:
            model = WeightedERM(
                epsilon=1e7,
                delta=DELTA,
                lipschitz=3.0,
                weighting=weighting,
                h=2.0,
                steps=200,
                learning_rate=2.0,
                public_user_sizes=True,
                seed=rep,
            ).fit(x, y, users)
            gaps[weighting].append(excess(model))
    assert np.mean(gaps["smooth"]) < 0.25 * np.mean(gaps["limit"])


# -- bad inputs ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"loss": "hinge"}, "'loss' parameter of WeightedERM"),
        ({"weighting": "uniform"}, "'weighting' parameter of WeightedERM"),
        ({"epsilon": 0.0}, r"'epsilon' parameter of WeightedERM must .* range \[1e-09, inf\)"),
        ({"epsilon": -1.0}, "'epsilon' parameter"),
        ({"delta": 0.0}, r"'delta' parameter of WeightedERM must be a float in the range \(0, 1\)"),
        ({"delta": 1.0}, "'delta' parameter"),
        ({"radius": 0.0}, "'radius' parameter"),
        ({"lipschitz": -1.0}, "'lipschitz' parameter"),
        ({"steps": 0}, rf"'steps' parameter of WeightedERM must be .* \[1, {MAX_ITERATIONS}\]"),
        ({"steps": 2.5}, "'steps' parameter"),
        ({"h": 0.0}, "'h' parameter"),
        ({"h": 0.5, "weighting": "limit"}, r"'h' parameter .* \[1, inf\) with weighting='limit'"),
        ({"learning_rate": -0.1}, "'learning_rate' parameter"),
        ({"selection_share": 1.0}, "'selection_share' parameter"),
        ({"fit_intercept": "yes"}, "'fit_intercept' parameter of WeightedERM must be a bool"),
        ({"seed": -3}, "'seed' parameter"),
    ],
)
def test_bad_parameters_are_rejected_before_the_data_are_read(params, match):
    kwargs = {"epsilon": EPS, "delta": DELTA, **params}
    with pytest.raises(InvalidParameterError, match=match):
        WeightedERM(**kwargs).fit(object(), object(), object())


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda x, y, u: (x[:-1], y, u), "same length"),
        (lambda x, y, u: (x, y, u[:-1]), "same length"),
        (lambda x, y, u: (x[:, 0], y, u), "'X' must be 2-D"),
        (lambda x, y, u: (x[:0], y[:0], u[:0]), "at least one record"),
        (lambda x, y, u: (x, y, np.where(u == u[0], np.nan, u)), "'users' contains NaN"),
        (
            lambda x, y, u: (x, y, np.array([None, *map(str, u[1:])], dtype=object)),
            # factorize_users is data.encoding.encode_ids : a null id is named.
            r"'users' (ids must be sortable|has 1 null value\(s\) \(first at row 0\))",
        ),
    ],
)
def test_bad_data_raise_data_errors_naming_the_problem(mutate, match):
    x, y, users, _ = logistic_data(23)
    with pytest.raises(DataError, match=match):
        WeightedERM(epsilon=EPS, delta=DELTA, steps=2).fit(*mutate(x, y, users))


@pytest.mark.parametrize("public", [False, True])
@pytest.mark.parametrize("loss", ["squared", "logistic"])
def test_nan_or_inf_paths_never_fail_only_because_a_user_holds_one(loss, public):
    """A record with a non-finite feature or label (or, for the logistic loss, a label outside
    the declared classes) is a record without a usable value: left out (private sizes, the
    same model as without it) or kept at weight 0 (public sizes); never an error."""
    x, y, users, _ = logistic_data(25)
    odd_x, odd_y = x.copy(), y.astype(np.float64)
    odd_x[3, 0], odd_y[5], odd_y[8] = np.nan, np.inf, 7.0
    kw = dict(loss=loss, epsilon=EPS, delta=DELTA, steps=3, seed=4, public_user_sizes=public)
    a = WeightedERM(**kw).fit(odd_x, odd_y, users)
    assert np.all(np.isfinite(a.coef_))
    if not public and loss == "logistic":
        keep = np.ones(y.size, dtype=bool)
        keep[[3, 5, 8]] = False
        b = WeightedERM(**kw).fit(x[keep], y[keep], users[keep])
        np.testing.assert_array_equal(a.coef_, b.coef_)


def test_using_the_model_before_fit_raises_not_fitted():
    model = WeightedERM(epsilon=EPS, delta=DELTA)
    x = np.zeros((2, 3))
    for method in (model.predict, model.predict_proba, model.decision_function):
        with pytest.raises(NotFittedError, match="not fitted yet"):
            method(x)


def test_prediction_checks_the_feature_count_and_the_loss():
    x, y, users, _ = logistic_data(24)
    model = WeightedERM(loss="squared", epsilon=EPS, delta=DELTA, steps=2, seed=0)
    model.fit(x, y.astype(float), users)
    with pytest.raises(DataError, match="X has 3 features; the model was fitted on 4"):
        model.predict(x[:, :3])
    with pytest.raises(InvalidParameterError, match="predict_proba needs loss='logistic'"):
        model.predict_proba(x)


def test_the_label_set_is_declared_not_read_from_the_data():
    # A user holding the only label -1 must not change classes_ (it was the set of
    # labels seen); the declared classes are released, and labels outside them are refused
    # without printing them.
    x, y, users, _ = logistic_data(19)
    model = WeightedERM(epsilon=EPS, delta=DELTA, h=3.0, steps=5, seed=1).fit(x, y, users)
    np.testing.assert_array_equal(model.classes_, [0, 1])
    only_ones = np.ones_like(y)
    model = WeightedERM(epsilon=EPS, delta=DELTA, h=3.0, steps=5, seed=1)
    np.testing.assert_array_equal(model.fit(x, only_ones, users).classes_, [0, 1])
    y2 = only_ones.copy()
    y2[0] = -1  # the added user's unique label: a record without a usable label, left out
    fitted = WeightedERM(epsilon=EPS, delta=DELTA, h=3.0, steps=5, seed=1).fit(x, y2, users)
    without = WeightedERM(epsilon=EPS, delta=DELTA, h=3.0, steps=5, seed=1)
    without.fit(x[1:], only_ones[1:], users[1:])
    np.testing.assert_array_equal(fitted.coef_, without.coef_)
    with pytest.raises(InvalidParameterError, match="'classes' parameter"):
        WeightedERM(epsilon=EPS, delta=DELTA, classes=(1, 2)).fit(x, y, users)


def test_fit_without_users_is_one_line_naming_users_before_anything_is_charged():
    """fit(X, y) raised TypeError (a missing positional argument), unlike every other error."""
    from helpers import NO_DATA

    accountant = PrivacyAccountant()
    with pytest.raises(DataError, match=r"^WeightedERM\.fit needs 'users'") as info:
        WeightedERM(epsilon=1.0, delta=1e-6).fit(NO_DATA, NO_DATA, accountant=accountant)
    assert "\n" not in str(info.value) and "fit(X, y, users)" in str(info.value)
    assert accountant.ledger == ()
