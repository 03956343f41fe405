"""Unit tests of userdp.estimate.mean (Epasto et al. 2020, Alg. 1, Lemmas 1-3, Claims 1-2)."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest

from userdp.estimate.mean import sample_limited_mean, weighted_mean
from userdp.estimate.weighting import (
    best_smooth_h,
    limit_variance,
    smooth_variance,
)
from userdp.exceptions import DataError, InvalidParameterError
from userdp.privacy import PrivacyAccountant

BOUNDS = (0.0, 10.0)
MEANS = [weighted_mean, sample_limited_mean]


def zipf_users(seed: int, m: int = 60, cap: int = 40) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    sizes = np.minimum(rng.zipf(1.5, m), cap)
    return np.repeat(np.arange(m), sizes), sizes


def laplace_events(event: dp_accounting.DpEvent) -> list[float]:
    """Noise multipliers of the Laplace events in a composed event, in order."""
    return [e.noise_multiplier for e in event.events if isinstance(e, dp_accounting.LaplaceDpEvent)]


# -- Claims 1 and 2: the variance of the released mean ------------------------------------------
def variance_band(v: float, laplace_scale: float, runs: int) -> float:
    """5-sigma relative band for a sample variance of ``runs`` draws.

    Var(s^2) / v^2 = 2/(runs-1) + kappa/runs where kappa is the excess kurtosis. The data term
    is a sum of many independent uniforms (kappa ~ 0) and the Laplace term has kappa = 3, so
    kappa = 3 (2 b^2)^2 / v^2 for the mixture.
    """
    kappa = 3.0 * (2.0 * laplace_scale**2) ** 2 / v**2
    return 5.0 * math.sqrt(2.0 / (runs - 1) + kappa / runs)


@pytest.mark.parametrize("fn", MEANS)
def test_variance_of_the_public_size_mean_matches_claims_1_and_2(fn):
    # y = beta + xi, xi uniform on [-2, 2] (variance 4/3), never clipped by bounds (0, 10).
    users, sizes = zipf_users(0)
    h = 4 if fn is sample_limited_mean else 4.5
    eps, beta, runs = 2.0, 5.0, 6000
    rng = np.random.default_rng(1)
    estimates = np.empty(runs)
    for r in range(runs):
        y = beta + rng.uniform(-2.0, 2.0, users.size)
        res = fn(y, users, epsilon=eps, bounds=BOUNDS, public_user_sizes=True, h=h, seed=r)
        estimates[r] = res.estimate
    claim = smooth_variance if fn is weighted_mean else limit_variance
    v = float(claim(sizes, h, 4.0 / 3.0, 10.0 / eps))
    assert h <= sizes.max()  # so that max_l sum c_i = h / n_h as the claims assume
    n_h = float(np.minimum(h, sizes).sum())
    band = variance_band(v, 10.0 * h / (eps * n_h), runs)
    assert abs(estimates.var(ddof=1) / v - 1.0) < band
    assert abs(estimates.mean() - beta) < 5 * math.sqrt(v / runs)  # unbiased


# -- accounting and noise scales ------------------------------------------------------------------
MODES = [
    dict(public_user_sizes=True),
    dict(public_user_sizes=True, noise_variance=2.0),
    dict(public_user_sizes=True, h=3),
    dict(public_user_sizes=False),
    dict(public_user_sizes=False, noise_variance=2.0),
    dict(public_user_sizes=False, h=3),
    dict(public_user_sizes=False, selection_share=0.37),
]


@pytest.mark.parametrize("fn", MEANS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("epsilon", [0.1, 1.0, 7.3])
def test_dp_event_spends_exactly_epsilon(fn, mode, epsilon):
    users, _ = zipf_users(2)
    y = np.random.default_rng(3).uniform(-3, 13, users.size)  # some values clipped
    res = fn(y, users, epsilon=epsilon, bounds=BOUNDS, seed=4, **mode)
    spent = PrivacyAccountant().compose(res.dp_event).spent().epsilon
    assert spent == pytest.approx(epsilon, rel=1e-9)
    assert res.epsilon == pytest.approx(epsilon, rel=1e-9)
    if not mode["public_user_sizes"]:
        assert BOUNDS[0] <= res.estimate <= BOUNDS[1]
    free = "h" in mode or (mode["public_user_sizes"] and "noise_variance" in mode)
    share = mode.get("selection_share", 0.1)
    assert res.selection_epsilon == (0.0 if free else pytest.approx(share * epsilon))


@pytest.mark.parametrize("fn", MEANS)
def test_public_size_laplace_scale_is_width_times_max_user_weight_over_epsilon(fn):
    users, sizes = zipf_users(5)
    h = 6
    res = fn(
        np.full(users.size, 5.0), users, epsilon=0.7, bounds=BOUNDS, public_user_sizes=True, h=h
    )
    # Independent computation: per-user total of c_i in pure Python. For sample limiting a user
    # keeps min(h, s_l) records of weight 1/n_h each, as for smooth weights.
    n_h = sum(min(h, int(s)) for s in sizes)
    max_user = max(min(h, int(s)) / n_h for s in sizes)
    (nm,) = laplace_events(res.dp_event)
    assert 1.0 / nm == pytest.approx(0.7, rel=1e-12)
    assert res.noise_scale == pytest.approx(10.0 * max_user / 0.7, rel=1e-12)


def test_public_size_noise_has_the_stated_laplace_scale():
    # All values at 5: sum c_i y_i = 5 exactly, so estimate - 5 is the Laplace noise itself.
    # Mean |Laplace(b)| = b with sd b: over 3,000 runs a 5-sigma band is 5 / sqrt(3000) = 9%.
    users, _ = zipf_users(6)
    errs, scales = [], set()
    for r in range(3000):
        res = weighted_mean(
            np.full(users.size, 5.0),
            users,
            epsilon=1.0,
            bounds=BOUNDS,
            public_user_sizes=True,
            h=5.0,
            seed=r,
        )
        errs.append(res.estimate - 5.0)
        scales.add(res.noise_scale)
    (b,) = scales
    assert abs(np.mean(np.abs(errs)) / b - 1) < 5 / math.sqrt(3000)


def test_private_size_noise_on_the_sum_has_scale_h_hw_over_eps1():
    # Values at mid = 5: S = 0, so estimate - 5 = e1 / max(n_h + e2, h) with e1 ~ Lap(h hw/eps1)
    # and n_h = 2,000 >> the noise on N: (estimate - 5) n_h is about e1.
    users = np.repeat(np.arange(1000), 2)
    h, eps = 2.0, 1.0
    errs, eps1s = [], set()
    for r in range(3000):
        res = weighted_mean(
            np.full(users.size, 5.0), users, epsilon=eps, bounds=BOUNDS, h=h, seed=r
        )
        errs.append((res.estimate - 5.0) * 2000.0)
        nm1, nm2 = laplace_events(res.dp_event)
        eps1s.add(1.0 / nm1)
        assert 1.0 / nm1 + 1.0 / nm2 == pytest.approx(eps, rel=1e-12)
    (eps1,) = eps1s
    assert 0 < eps1 < eps
    b = h * 5.0 / eps1
    assert abs(np.mean(np.abs(errs)) / b - 1) < 5 / math.sqrt(3000) + 0.01


def test_public_sizes_with_known_variance_choose_claim_1_h_for_free():
    users, sizes = zipf_users(7, m=300, cap=200)
    y = np.random.default_rng(8).uniform(3, 7, users.size)
    res = weighted_mean(
        y, users, epsilon=0.5, bounds=BOUNDS, public_user_sizes=True, noise_variance=4 / 3, seed=0
    )
    assert res.selection_epsilon == 0.0
    assert res.h == best_smooth_h(sizes, 4 / 3, 10.0 / 0.5)


def test_private_selection_at_huge_epsilon_finds_a_near_optimal_h():
    # With epsilon huge the histogram (sizes 1..16: exact bins) and the variance are exact, so
    # the chosen h must be (near) optimal for Claim 1 with the ratio's noise unit.
    rng = np.random.default_rng(9)
    sizes = rng.integers(1, 17, 3000)
    users = np.repeat(np.arange(sizes.size), sizes)
    y = rng.uniform(0, 10, users.size)
    eps = 2000.0
    res = weighted_mean(y, users, epsilon=eps, bounds=BOUNDS, seed=1)
    # Independent: per-user moments in pure NumPy, split eps1 : eps2 = hw^(2/3) : mu^(2/3).
    dev = y - 5.0
    first = np.array([dev[users == u].mean() for u in range(sizes.size)])
    second = np.array([(dev[users == u] ** 2).mean() for u in range(sizes.size)])
    sigma2 = second.mean() - first.mean() ** 2
    mu = abs(first.mean())
    eps_est = 0.9 * eps
    eps1 = eps_est * 5 ** (2 / 3) / (5 ** (2 / 3) + mu ** (2 / 3))
    unit = math.sqrt((5 / eps1) ** 2 + (mu / (eps_est - eps1)) ** 2)
    grid = np.linspace(1, 16, 3001)
    v = smooth_variance(sizes, grid, sigma2, unit)
    assert float(smooth_variance(sizes, res.h, sigma2, unit)) <= v.min() * 1.01
    assert abs(res.estimate - y.mean()) < 0.05


@pytest.mark.parametrize("public", [True, False])
def test_string_user_ids_and_large_epsilon_give_the_weighted_mean(public):
    users = np.array(["ann"] * 10 + ["bob"] * 2 + ["cy"])
    y = np.array([1.0] * 10 + [9.0] * 2 + [5.0])
    res = weighted_mean(y, users, epsilon=1e7, bounds=BOUNDS, public_user_sizes=public, h=2.0)
    # Lemma 3 weights with h = 2: ann 2/10 each, bob 1 each, cy 1: (2*1 + 2*9 + 5) / 5 = 5.
    assert res.estimate == pytest.approx(5.0, abs=1e-3)
    assert res.method == "weighted" and res.h == 2.0
    assert "weighted mean" in res.summary()


def test_sample_limited_mean_with_h_above_every_size_is_the_plain_mean():
    users, _ = zipf_users(10, cap=20)
    y = np.random.default_rng(0).uniform(0, 10, users.size)
    res = sample_limited_mean(y, users, epsilon=1e7, bounds=BOUNDS, h=25, public_user_sizes=True)
    assert res.estimate == pytest.approx(y.mean(), abs=1e-4)
    assert res.method == "sample-limit"


def test_values_outside_bounds_are_clipped():
    users = np.arange(4)
    y = np.array([-100.0, 20.0, 20.0, 20.0])
    res = weighted_mean(y, users, epsilon=1e7, bounds=BOUNDS, public_user_sizes=True, h=1.0)
    assert res.estimate == pytest.approx(7.5, abs=1e-4)


# -- bad input -----------------------------------------------------------------------------------
@pytest.mark.parametrize("fn", MEANS)
def test_bad_data_raise_data_error(fn):
    name = fn.__name__
    with pytest.raises(DataError, match="same length; got 3 values and 2 users"):
        fn([1.0, 2.0, 3.0], [1, 2], epsilon=1.0, bounds=BOUNDS)
    with pytest.raises(DataError, match=f"{name} needs at least one record"):
        fn([], [], epsilon=1.0, bounds=BOUNDS)


@pytest.mark.parametrize("public", [False, True])
@pytest.mark.parametrize("fn", MEANS)
def test_nan_or_inf_paths_never_fail_only_because_a_user_holds_one(fn, public):
    """The non-finite policy: a NaN is a record without a value (the release equals the one
    without that record, or with the bounds' midpoint when sizes are public), +-inf is
    clipped like any value. No error depends on whether one user holds such a value."""
    rng = np.random.default_rng(4)
    y, u = rng.uniform(0, 10, 300), rng.integers(0, 60, 300)
    kw = dict(epsilon=1.0, bounds=BOUNDS, public_user_sizes=public, seed=5)
    with_nan = fn(np.append(y, [np.nan, 2.0]), np.append(u, [999, 998]), **kw)
    mid = np.append(y, [5.0, 2.0]) if public else np.append(y, 2.0)
    without = fn(mid, np.append(u, [999, 998]) if public else np.append(u, 998), **kw)
    assert with_nan.estimate == without.estimate
    inf = fn(np.append(y, [np.inf, -np.inf]), np.append(u, [999, 998]), **kw)
    ends = fn(np.append(y, [10.0, 0.0]), np.append(u, [999, 998]), **kw)
    assert inf.estimate == ends.estimate


@pytest.mark.parametrize("fn", MEANS)
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(epsilon=0.0), "'epsilon' parameter of {name} must be a float in the range \\[1e-09"),
        (dict(epsilon=-1.0), "'epsilon' parameter of {name}.*Got -1.0 instead"),
        (dict(epsilon=float("inf")), "'epsilon' parameter of {name}"),
        (dict(bounds=(1.0, 1.0)), "'bounds' parameter of {name} must be a pair"),
        (dict(bounds=(2.0, 1.0)), "'bounds' parameter of {name}"),
        (dict(bounds=(0.0, float("inf"))), "'bounds' parameter of {name}"),
        (dict(bounds=5.0), "'bounds' parameter of {name}"),
        (dict(selection_share=0.0), "'selection_share' parameter of {name}"),
        (dict(selection_share=1.0), "'selection_share' parameter of {name}"),
        (dict(h=0), "'h' parameter of {name}"),
        (dict(h=-2), "'h' parameter of {name}"),
        (dict(noise_variance=-1.0), "'noise_variance' parameter of {name}"),
        (dict(public_user_sizes="yes"), "'public_user_sizes' parameter of {name}"),
    ],
)
def test_bad_parameters_raise_invalid_parameter_error(fn, kwargs, match):
    args = dict(epsilon=1.0, bounds=BOUNDS) | kwargs
    with pytest.raises(InvalidParameterError, match=match.format(name=fn.__name__)):
        fn([1.0, 2.0], [1, 2], **args)


def test_sample_limited_mean_needs_an_integer_h():
    with pytest.raises(
        InvalidParameterError, match="'h' parameter of sample_limited_mean must be an int"
    ):
        sample_limited_mean([1.0], [1], epsilon=1.0, bounds=BOUNDS, h=2.5)
