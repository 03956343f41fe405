"""Privacy core: calibration against independent mpmath computations, budgets, accountant, noise."""

from __future__ import annotations

import itertools
import math

import dp_accounting
import mpmath
import numpy as np
import pytest

from userdp.exceptions import (
    BudgetExceededError,
    InvalidParameterError,
    UnsupportedEventError,
    UserDPError,
)
from userdp.privacy import (
    ExponentialMechanismDpEvent,
    LaplaceThresholdDpEvent,
    NoiseSource,
    PrivacyAccountant,
    PrivacyBudget,
    WeightAndThresholdDpEvent,
    gaussian_delta,
    gaussian_sigma,
    laplace_scale,
    laplace_threshold,
    partition_threshold,
)

MP = mpmath.mp.clone()
MP.dps = 50


# -- independent references (mpmath, 50 digits) -------------------------------------------------
def _mp_phi(x):
    return MP.ncdf(x)


def _mp_delta(sigma, eps, sens=1):
    """Balle-Wang condition: Phi(D/(2s) - eps s/D) - e^eps Phi(-D/(2s) - eps s/D)."""
    s, e, d = MP.mpf(sigma), MP.mpf(eps), MP.mpf(sens)
    return _mp_phi(d / (2 * s) - e * s / d) - MP.exp(e) * _mp_phi(-d / (2 * s) - e * s / d)


def _mp_sigma(eps, delta, sens=1):
    """Smallest sigma with delta(sigma) <= target, by bisection (delta decreases in sigma)."""
    target = MP.mpf(delta)
    lo, hi = MP.mpf("1e-3"), MP.mpf(1)
    while _mp_delta(hi, eps, sens) > target:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if _mp_delta(mid, eps, sens) > target:
            lo = mid
        else:
            hi = mid
    return hi


def _mp_isf(q):
    """Phi^-1(1 - q) for a tiny upper-tail mass q, at 50 digits."""
    return MP.sqrt(2) * MP.erfinv(1 - 2 * MP.mpf(q))


def _mp_threshold(sigma, delta, cap, h_scale=1):
    """max over t of h/sqrt(t) + sigma * Phi^-1((1 - delta/2)^(1/t)), a plain loop."""
    s, d, h = MP.mpf(sigma), MP.mpf(delta), MP.mpf(h_scale)
    best = None
    for t in range(1, cap + 1):
        p = (1 - d / 2) ** (MP.mpf(1) / t)
        val = h / MP.sqrt(t) + s * _mp_isf(1 - p)
        best = val if best is None or val > best else best
    return best


# -- gaussian_sigma / gaussian_delta ------------------------------------------------------------
@pytest.mark.parametrize(
    ("eps", "delta"),
    [(1.0, 5e-6), (1.0, 1e-5), (0.1, 1e-6), (0.5, 5e-7), (2.0, 1e-3), (8.0, 1e-10), (0.9, 4.5e-6)],
)
def test_gaussian_sigma_agrees_with_independent_mpmath_bisection(eps, delta):
    ours = gaussian_sigma(eps, delta)
    ref = float(_mp_sigma(eps, delta))
    assert ours == pytest.approx(ref, rel=1e-8)


def test_gaussian_sigma_matches_the_design_reference_value():
    assert gaussian_sigma(1.0, 5e-6) == pytest.approx(3.88414, abs=5e-6)
    assert float(_mp_sigma(1.0, 5e-6)) == pytest.approx(3.88414, abs=5e-6)


@pytest.mark.parametrize(("eps", "delta"), [(1.0, 5e-6), (0.1, 1e-6), (3.0, 1e-8), (0.5, 0.01)])
def test_gaussian_sigma_rounds_toward_more_noise(eps, delta):
    sigma = gaussian_sigma(eps, delta)
    # Exact (mpmath) delta at our sigma never exceeds the target, beyond float round-off.
    assert _mp_delta(sigma, eps) <= MP.mpf(delta) * (1 + MP.mpf("1e-12"))
    assert gaussian_delta(sigma, eps) <= delta


def test_gaussian_sigma_is_below_the_classical_formula():
    eps, delta = 1.0, 1e-5
    assert gaussian_sigma(eps, delta) < math.sqrt(2 * math.log(1.25 / delta)) / eps


@pytest.mark.parametrize("sens", [0.5, 2.0, 7.5])
def test_gaussian_sigma_scales_linearly_with_l2_sensitivity(sens):
    assert gaussian_sigma(1.0, 1e-5, l2_sensitivity=sens) == pytest.approx(
        sens * gaussian_sigma(1.0, 1e-5), rel=1e-12
    )
    assert gaussian_sigma(1.0, 1e-5, l2_sensitivity=sens) == pytest.approx(
        float(_mp_sigma(1.0, 1e-5, sens)), rel=1e-8
    )


@pytest.mark.parametrize(
    ("sigma", "eps", "sens"),
    [(3.88414, 1.0, 1.0), (1.0, 0.5, 1.0), (10.0, 0.1, 1.0), (2.0, 3.0, 1.0), (5.0, 1.0, 2.0)],
)
def test_gaussian_delta_matches_the_mpmath_formula(sigma, eps, sens):
    ours = gaussian_delta(sigma, eps, l2_sensitivity=sens)
    assert ours == pytest.approx(float(_mp_delta(sigma, eps, sens)), rel=1e-9)


def test_gaussian_delta_decreases_in_sigma():
    deltas = [gaussian_delta(s, 1.0) for s in (1.0, 2.0, 4.0, 8.0)]
    assert all(a > b for a, b in itertools.pairwise(deltas))


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: gaussian_sigma(0.0, 1e-5), "'epsilon' parameter of gaussian_sigma"),
        (lambda: gaussian_sigma(1.0, 0.0), "'delta' parameter of gaussian_sigma"),
        (lambda: gaussian_sigma(1.0, 1.0), "'delta' parameter of gaussian_sigma"),
        (lambda: gaussian_sigma(1.0, 1e-5, 0.0), "'l2_sensitivity' parameter"),
        (lambda: gaussian_delta(0.0, 1.0), "'sigma' parameter of gaussian_delta"),
        (lambda: gaussian_sigma(float("nan"), 1e-5), "'epsilon' parameter"),
        (lambda: partition_threshold(1.0, 1e-5, 0), "'max_items_per_user' parameter"),
        (lambda: partition_threshold(1.0, 0.0, 10), "'delta' parameter of partition_threshold"),
        (lambda: laplace_threshold(1.0, 0.0), "'delta' parameter of laplace_threshold"),
        (lambda: laplace_scale(-1.0), "'epsilon' parameter of laplace_scale"),
    ],
)
def test_calibration_rejects_out_of_range_parameters(call, match):
    with pytest.raises(InvalidParameterError, match=match):
        call()


# -- partition_threshold ------------------------------------------------------------------------
@pytest.mark.parametrize(("cap", "expected"), [(100, 20.7897), (1, 18.157), (50, 20.336)])
def test_partition_threshold_matches_reference_values(cap, expected):
    sigma = gaussian_sigma(1.0, 5e-6)
    ours = partition_threshold(sigma, 1e-5, cap)
    assert ours == pytest.approx(expected, abs=6e-4)
    assert ours == pytest.approx(float(_mp_threshold(sigma, 1e-5, cap)), rel=1e-9)


def test_partition_threshold_at_cap_300_matches_reference_value():
    sigma = gaussian_sigma(1.0, 5e-6)
    ours = partition_threshold(sigma, 1e-5, 300)
    assert ours == pytest.approx(21.510, abs=6e-4)
    assert ours == pytest.approx(float(_mp_threshold(sigma, 1e-5, 300)), rel=1e-9)


def test_partition_threshold_is_nondecreasing_in_the_cap():
    sigma = gaussian_sigma(1.0, 5e-6)
    values = [partition_threshold(sigma, 1e-5, c) for c in (1, 2, 10, 50, 100, 300)]
    assert values == sorted(values)


def test_mad2r_split_round_parameters_match_reference_values():
    b1, b2 = PrivacyBudget(1.0, 1e-5).split([0.1, 0.9])
    s1 = gaussian_sigma(b1.epsilon, b1.delta / 2)
    s2 = gaussian_sigma(b2.epsilon, b2.delta / 2)
    r1 = partition_threshold(s1, b1.delta, 100)
    r2 = partition_threshold(s2, b2.delta, 100, h_scale=2.0)
    assert s1 == pytest.approx(37.867, abs=6e-4)
    assert r1 == pytest.approx(217.11, abs=6e-3)
    assert s2 == pytest.approx(4.3039, abs=6e-5)
    assert r2 == pytest.approx(23.208, abs=6e-4)
    assert r1 == pytest.approx(float(_mp_threshold(s1, b1.delta, 100)), rel=1e-9)
    assert r2 == pytest.approx(float(_mp_threshold(s2, b2.delta, 100, 2)), rel=1e-9)


def test_adaptive_thresholds_match_reference_values():
    sigma = gaussian_sigma(1.0, 5e-6)
    rho = partition_threshold(sigma, 1e-5, 100)
    assert rho + 2 * sigma == pytest.approx(28.558, abs=6e-4)
    assert rho + 4 * sigma == pytest.approx(36.326, abs=6e-4)


@pytest.mark.parametrize("delta", [1e-12, 1e-15, 1e-18])
def test_partition_threshold_stays_accurate_for_tiny_delta(delta):
    sigma = gaussian_sigma(1.0, delta / 2)
    ours = partition_threshold(sigma, delta, 100)
    ref = float(_mp_threshold(sigma, delta, 100))
    assert ours == pytest.approx(ref, rel=1e-9)
    # The naive float formula loses the tail: (1 - delta/2)**(1/t) rounds to 1 - k*ulp.
    naive = max(
        1 / math.sqrt(t)
        + sigma * float(_mp_isf(1 - (1 - delta / 2) ** (1 / t)))  # float pow, then exact isf
        for t in (1, 100)
    )
    if delta <= 1e-15:
        assert abs(naive - ref) > 1e-6 * ref


# -- laplace ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("b", "delta", "w"), [(1.0, 1e-5, 1.0), (2.5, 1e-9, 1.0), (0.1, 0.3, 4.0)])
def test_laplace_threshold_matches_closed_form(b, delta, w):
    assert laplace_threshold(b, delta, w) == pytest.approx(w + b * math.log(1 / (2 * delta)))


def test_laplace_threshold_bounds_the_novel_item_pass_probability():
    b, delta = 1.0, 1e-5
    rho = laplace_threshold(b, delta)
    # P(1 + Lap(b) >= rho) = exp(-(rho - 1)/b)/2 == delta.
    assert math.exp(-(rho - 1) / b) / 2 == pytest.approx(delta, rel=1e-12)
    assert laplace_scale(0.5) == 2.0
    assert laplace_scale(0.5, l1_sensitivity=3.0) == 6.0


@pytest.mark.parametrize(("b", "delta", "w", "t"), [(1.0, 1e-5, 1.0, 100), (0.3, 1e-9, 1.0, 7)])
def test_laplace_threshold_bounds_every_novel_candidate_together(b, delta, w, t):
    """Independent check with mpmath: one novel item of weight w and t - 1 of weight 0, each
    passing rho with probability exp(-(rho - w_i)/b)/2; the exact chance that any passes is at
    most delta, and the union bound used for rho is tight to first order."""
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 50
    rho = mpmath.mpf(laplace_threshold(b, delta, w, t))
    p_weighted = mpmath.exp(-(rho - w) / b) / 2
    p_zero = mpmath.exp(-rho / b) / 2
    any_pass = 1 - (1 - p_weighted) * (1 - p_zero) ** (t - 1)
    assert any_pass <= delta
    assert any_pass >= delta * (1 - t * delta)
    assert laplace_threshold(b, delta, w, t) > laplace_threshold(b, delta, w, 1)


# -- PrivacyBudget ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"epsilon": 0.0}, "'epsilon' parameter of PrivacyBudget"),
        ({"epsilon": -1.0}, "'epsilon' parameter of PrivacyBudget"),
        ({"epsilon": float("nan")}, "'epsilon' parameter of PrivacyBudget"),
        ({"epsilon": True}, "'epsilon' parameter of PrivacyBudget"),
        ({"epsilon": "1"}, "'epsilon' parameter of PrivacyBudget"),
        ({"epsilon": 1.0, "delta": -1e-9}, "'delta' parameter of PrivacyBudget"),
        ({"epsilon": 1.0, "delta": 1.0}, "'delta' parameter of PrivacyBudget"),
        ({"epsilon": 1.0, "delta": float("nan")}, "'delta' parameter of PrivacyBudget"),
        ({"epsilon": 1.0, "delta": False}, "'delta' parameter of PrivacyBudget"),
    ],
)
def test_privacy_budget_rejects_invalid_values(kwargs, match):
    with pytest.raises(InvalidParameterError, match=match):
        PrivacyBudget(**kwargs)


def test_privacy_budget_errors_are_userdp_and_value_errors():
    with pytest.raises(UserDPError):
        PrivacyBudget(-1.0)
    with pytest.raises(ValueError):
        PrivacyBudget(1.0, 2.0)


def test_privacy_budget_accepts_zero_delta_and_warns_on_weak_parameters():
    assert PrivacyBudget(1.0).delta == 0.0
    with pytest.warns(UserWarning, match="very weak guarantee"):
        PrivacyBudget(25.0, 1e-6)
    with pytest.warns(UserWarning, match="delta=.* is large"):
        PrivacyBudget(1.0, 0.01)


def test_privacy_budget_split_parts_sum_back_to_the_budget():
    b = PrivacyBudget(1.3, 2e-5)
    parts = b.split([0.05, 0.15, 0.8])
    assert sum(p.epsilon for p in parts) == pytest.approx(1.3, rel=1e-12)
    assert sum(p.delta for p in parts) == pytest.approx(2e-5, rel=1e-12)
    assert [p.epsilon for p in parts] == pytest.approx([0.065, 0.195, 1.04])
    assert all(p.unit == "user" for p in parts)


def test_privacy_budget_split_with_delta_fractions_splits_delta_separately():
    b = PrivacyBudget(2.0, 1e-5, unit="household")
    p1, p2 = b.split([0.5, 0.5], delta_fractions=[0.2, 0.8])
    assert (p1.epsilon, p2.epsilon) == (1.0, 1.0)
    assert p1.delta == pytest.approx(2e-6) and p2.delta == pytest.approx(8e-6)
    assert p1.unit == p2.unit == "household"


@pytest.mark.parametrize(
    ("fractions", "delta_fractions", "match"),
    [
        ([0.5, 0.4], None, "'fractions' parameter of PrivacyBudget.split.*summing to 1"),
        ([], None, "'fractions' parameter"),
        ([1.2, -0.2], None, "'fractions' parameter"),
        ("ab", None, "'fractions' parameter"),
        ([0.5, 0.5], [1.0], "'delta_fractions' parameter .* as many parts"),
        ([0.5, 0.5], [0.7, 0.7], "'delta_fractions' parameter"),
    ],
)
def test_privacy_budget_split_rejects_bad_fractions(fractions, delta_fractions, match):
    with pytest.raises(InvalidParameterError, match=match):
        PrivacyBudget(1.0, 1e-5).split(fractions, delta_fractions)


def test_privacy_budget_subtraction_leaves_the_remainder():
    b = PrivacyBudget(1.0, 1e-5)
    rest = b - PrivacyBudget(0.25, 4e-6)
    assert rest.epsilon == pytest.approx(0.75)
    assert rest.delta == pytest.approx(6e-6)
    assert b.covers(PrivacyBudget(1.0, 1e-5)) and not b.covers(PrivacyBudget(1.01, 1e-5))


@pytest.mark.parametrize(("eps", "delta"), [(1.0, 0.0), (1.5, 0.0), (0.5, 2e-5)])
def test_privacy_budget_subtraction_beyond_the_budget_raises(eps, delta):
    with pytest.raises(BudgetExceededError, match="leaves nothing"):
        PrivacyBudget(1.0, 1e-5) - PrivacyBudget(eps, delta)


# -- PrivacyAccountant --------------------------------------------------------------------------
def _wt(eps, delta):
    return WeightAndThresholdDpEvent(eps, delta, 4.0, 20.0, 100)


def _lap(eps, delta):
    return LaplaceThresholdDpEvent(eps, delta, 1 / eps, 10.0)


def test_accountant_composes_userdp_events_by_basic_composition():
    acc = PrivacyAccountant()
    acc.compose(_wt(0.1, 1e-6)).compose(_lap(0.4, 2e-6)).compose(_wt(0.2, 3e-6), count=2)
    spent = acc.spent()
    assert spent.epsilon == pytest.approx(0.9)
    assert spent.delta == pytest.approx(9e-6)
    assert len(acc.ledger) == 4
    assert isinstance(acc.event, dp_accounting.ComposedDpEvent)


def test_accountant_composes_laplace_and_exponential_mechanism_events_as_pure_dp():
    # Laplace of scale b on an l1-sensitivity-1 query is (1/b)-DP; the EM event states its eps.
    acc = PrivacyAccountant()
    acc.compose(dp_accounting.LaplaceDpEvent(4.0)).compose(ExponentialMechanismDpEvent(0.3), 2)
    spent = acc.spent()
    assert spent.epsilon == pytest.approx(0.25 + 0.6)
    assert spent.delta == 0.0
    # Mixed with a Gaussian release, the pure part adds to the Gaussian's epsilon.
    acc.compose(dp_accounting.GaussianDpEvent(3.0))
    alone = PrivacyAccountant().compose(dp_accounting.GaussianDpEvent(3.0)).spent(1e-6)
    assert acc.spent(1e-6).epsilon == pytest.approx(0.85 + alone.epsilon)


def test_accountant_composes_nested_composed_and_self_composed_events():
    nested = dp_accounting.ComposedDpEvent(
        [_wt(0.1, 1e-6), dp_accounting.SelfComposedDpEvent(_lap(0.2, 1e-6), 3)]
    )
    acc = PrivacyAccountant().compose(nested).compose(dp_accounting.NoOpDpEvent())
    assert acc.spent().epsilon == pytest.approx(0.7)
    assert acc.spent().delta == pytest.approx(4e-6)
    # The composed event of one accountant composes to the same cost in another one.
    again = PrivacyAccountant().compose(acc.event).spent()
    assert (again.epsilon, again.delta) == pytest.approx((0.7, 4e-6))


def test_accountant_budget_overflow_raises_and_leaves_the_ledger_unchanged():
    acc = PrivacyAccountant(PrivacyBudget(1.0, 1e-5))
    acc.compose(_wt(0.6, 5e-6))
    with pytest.raises(BudgetExceededError, match=r"WeightAndThresholdDpEvent.*over the budget"):
        acc.compose(_wt(0.6, 1e-6))
    with pytest.raises(BudgetExceededError, match="over the budget"):
        acc.compose(_lap(0.1, 6e-6))
    assert len(acc.ledger) == 1
    assert acc.spent().epsilon == pytest.approx(0.6)
    assert acc.spent().delta == pytest.approx(5e-6)
    acc.compose(_wt(0.4, 5e-6))  # exactly the rest still fits
    assert acc.spent().epsilon == pytest.approx(1.0)


def test_accountant_rejects_unsupported_events_by_name_and_leaves_the_ledger_unchanged():
    acc = PrivacyAccountant().compose(_wt(0.5, 1e-6))
    poisson = dp_accounting.PoissonSampledDpEvent(0.1, dp_accounting.GaussianDpEvent(1.0))
    with pytest.raises(UnsupportedEventError, match="PoissonSampledDpEvent"):
        acc.compose(poisson)
    with pytest.raises(UnsupportedEventError, match="PoissonSampledDpEvent"):
        acc.compose(dp_accounting.ComposedDpEvent([_wt(0.1, 0.0), poisson]))
    assert len(acc.ledger) == 1
    assert acc.spent().epsilon == pytest.approx(0.5)


def test_accountant_two_gaussians_compose_like_one_with_sigma_over_sqrt2():
    s, gdelta = 3.0, 1e-6
    acc = PrivacyAccountant()
    acc.compose(dp_accounting.GaussianDpEvent(noise_multiplier=s), count=2)
    spent = acc.spent(gaussian_delta=gdelta)
    expected = dp_accounting.get_epsilon_gaussian(s / math.sqrt(2), gdelta)
    assert spent.epsilon == pytest.approx(expected, rel=1e-9)
    assert spent.delta == pytest.approx(gdelta)
    # And it is strictly better than basic composition of the two.
    assert spent.epsilon < 2 * dp_accounting.get_epsilon_gaussian(s, gdelta / 2)


def test_accountant_mixes_gaussian_and_basic_composition():
    acc = PrivacyAccountant()
    acc.compose(dp_accounting.GaussianDpEvent(2.0)).compose(_wt(0.3, 1e-6))
    spent = acc.spent(gaussian_delta=1e-6)
    assert spent.epsilon == pytest.approx(0.3 + dp_accounting.get_epsilon_gaussian(2.0, 1e-6))
    assert spent.delta == pytest.approx(2e-6)


@pytest.mark.parametrize("gdelta", [0.0, 1.0, -0.1])
def test_accountant_spent_with_gaussian_events_needs_a_gaussian_delta(gdelta):
    acc = PrivacyAccountant().compose(dp_accounting.GaussianDpEvent(1.0))
    with pytest.raises(InvalidParameterError, match="'gaussian_delta' parameter"):
        acc.spent(gaussian_delta=gdelta)


# -- NoiseSource --------------------------------------------------------------------------------
def test_noise_source_with_the_same_seed_repeats_every_draw():
    a, b = NoiseSource(7), NoiseSource(7)
    for src in (a, b):
        assert src.seeded
    np.testing.assert_array_equal(a.gaussian(2.0, 50), b.gaussian(2.0, 50))
    np.testing.assert_array_equal(a.laplace(1.0, 50), b.laplace(1.0, 50))
    np.testing.assert_array_equal(a.random_bits(50, 30), b.random_bits(50, 30))
    np.testing.assert_array_equal(a.permutation(50), b.permutation(50))
    np.testing.assert_array_equal(a.uniform(50), b.uniform(50))


def test_noise_source_with_different_seeds_differs():
    assert not np.array_equal(NoiseSource(1).gaussian(1.0, 20), NoiseSource(2).gaussian(1.0, 20))


def test_noise_source_without_seed_is_unseeded_and_differs_between_sources():
    a, b = NoiseSource(), NoiseSource()
    assert not a.seeded and not b.seeded
    assert not np.array_equal(a.gaussian(1.0, 20), b.gaussian(1.0, 20))


def test_noise_source_draws_have_the_requested_shape_and_range():
    src = NoiseSource(3)
    bits = src.random_bits(10_000, 5)
    assert bits.dtype == np.uint64 and bits.max() < 32
    assert sorted(src.permutation(20).tolist()) == list(range(20))
    g = src.gaussian(3.0, 20_000)
    assert g.std() == pytest.approx(3.0, rel=0.05)


@pytest.mark.parametrize("seed", [-1, 1.5, True])
def test_noise_source_rejects_invalid_seeds(seed):
    with pytest.raises(InvalidParameterError, match="'seed' parameter of NoiseSource"):
        NoiseSource(seed)


def test_privacy_budget_rejects_infinite_epsilon():
    with pytest.raises(InvalidParameterError, match="'epsilon' parameter of PrivacyBudget"):
        PrivacyBudget(math.inf, 1e-5)


def test_derived_budgets_are_validated_but_do_not_repeat_warnings(recwarn):
    b = PrivacyBudget.derived(50.0, 0.01)
    assert (b.epsilon, b.delta) == (50.0, 0.01)
    assert not [w for w in recwarn if issubclass(w.category, UserWarning)]
    with pytest.raises(InvalidParameterError, match="'epsilon'"):
        PrivacyBudget.derived(0.0, 1e-5)


def test_budget_fits_allows_round_off_only():
    b = PrivacyBudget(1.0, 1e-5)
    assert b.fits(1.0 + 1e-12, 1e-5) and b.fits(0.0, 0.0)
    assert not b.fits(1.001, 1e-5) and not b.fits(1.0, 1.1e-5)


def test_accountant_budget_counts_the_gaussian_events_too():
    """A Gaussian release that alone costs more than the budget is refused before composing.

    Independent check: dp-accounting's analytic Gaussian at the delta the budget leaves.
    """
    budget = PrivacyBudget(1.0, 1e-5)
    left = 1e-5 - 2e-6  # after a basic-composition event with delta 2e-6
    sigma_fits = dp_accounting.get_sigma_gaussian(0.5, left) * 1.001  # costs < 0.5 at `left`
    sigma_over = dp_accounting.get_sigma_gaussian(0.5, left) * 0.9
    acc = PrivacyAccountant(budget).compose(_lap(0.5, 2e-6))
    with pytest.raises(BudgetExceededError, match="GaussianDpEvent would go over the budget"):
        acc.check(dp_accounting.GaussianDpEvent(sigma_over))
    with pytest.raises(BudgetExceededError, match="over the budget"):
        acc.compose(dp_accounting.GaussianDpEvent(sigma_over))
    assert len(acc.ledger) == 1
    acc.compose(dp_accounting.GaussianDpEvent(sigma_fits))
    spent = acc.spent(left)
    assert spent.epsilon < 1.0 and spent.delta == pytest.approx(1e-5)
    # Two of them compose as one Gaussian of sigma / sqrt(2): over the budget.
    with pytest.raises(BudgetExceededError):
        acc.compose(dp_accounting.GaussianDpEvent(sigma_fits))


def test_spent_without_gaussian_delta_converts_at_the_delta_the_budget_leaves() -> None:
    """With a total budget, ``spent()`` converts the Gaussian part where the budget check does,
    so a ledger the check accepted reports a spend within the total (and equal to the explicit
    conversion at the remaining delta)."""
    import dp_accounting

    from userdp.privacy import PrivacyAccountant, PrivacyBudget

    acc = PrivacyAccountant(PrivacyBudget(epsilon=3.0, delta=1e-5))
    acc.compose(dp_accounting.LaplaceDpEvent(2.0))  # epsilon 0.5
    acc.compose(dp_accounting.GaussianDpEvent(2.0))
    spent = acc.spent()
    assert spent.delta == pytest.approx(1e-5)
    assert spent.epsilon == pytest.approx(
        0.5 + dp_accounting.get_epsilon_gaussian(2.0, 1e-5), rel=1e-12
    )
    assert spent.epsilon <= 3.0
    with pytest.raises(InvalidParameterError, match="gaussian_delta"):
        PrivacyAccountant().compose(dp_accounting.GaussianDpEvent(2.0)).spent()
