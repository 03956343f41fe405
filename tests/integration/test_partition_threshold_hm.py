"""The calibrations of benchmarks/partition_threshold_hm.py, checked by independent computations.

The script argues that no release rule accounted as userdp's Gaussian event beats the Gaussian
threshold, and estimates what an RDP accountant would allow. Its figures are only as good as
its three calibrations: the RDP-calibrated sigma, the largest Gaussian-dominated rule, and the
largest single-order RDP rule. Each is recomputed here another way.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import dp_accounting
import numpy as np
import pytest
from scipy import stats

from userdp.privacy import gaussian_sigma, partition_threshold
from userdp.privacy.calibrate import gaussian_delta

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def hm():
    sys.path.insert(0, str(BENCHMARKS))  # the script imports _harness by its plain name
    try:
        spec = importlib.util.spec_from_file_location(
            "partition_threshold_hm", BENCHMARKS / "partition_threshold_hm.py"
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARKS))
    return module


def test_the_rdp_sigma_converts_to_the_budget_by_dp_accountings_rdp_accountant(hm):
    sigma, alpha = hm.rdp_sigma(1.0, 5e-6)
    orders = np.concatenate([np.linspace(1.5, 60.0, 2000), [alpha]])
    acc = dp_accounting.rdp.RdpAccountant(list(orders))
    acc.compose(dp_accounting.GaussianDpEvent(sigma))
    eps, order = acc.get_epsilon_and_optimal_order(5e-6)
    assert eps == pytest.approx(1.0, abs=1e-6) and eps <= 1.0
    assert order == pytest.approx(alpha, rel=0.02)
    # and RDP costs noise: about 8% more than the analytic Gaussian at this budget
    assert 1.05 < sigma / gaussian_sigma(1.0, 5e-6) < 1.12


def _bernoulli_hockey_stick(p: float, q: float, eps: float) -> float:
    """sup_S P(S) - e^eps Q(S) for P = Bern(p), Q = Bern(q)."""
    return max(0.0, p - math.exp(eps) * q) + max(0.0, (1 - p) - math.exp(eps) * (1 - q))


def test_the_gaussian_threshold_sits_on_the_gaussian_privacy_profile(hm):
    # Any pair of weights d <= 1 apart: the Bernoulli pair's hockey-stick divergence is at most
    # the Gaussian's of shift d at every epsilon (so the rule may be recorded as the Gaussian),
    # and reaches it at some epsilon (no larger release probability would be).
    sigma = gaussian_sigma(1.0, 5e-6)
    rho = partition_threshold(sigma, 1e-5, 100)
    rng = np.random.default_rng(0)
    checked = 0
    for w, d in zip(rng.uniform(0.5, rho + 3 * sigma, 40), rng.uniform(0.05, 1.0, 40), strict=True):
        lo, hi = stats.norm.sf((rho - w) / sigma), stats.norm.sf((rho - w - d) / sigma)
        eps_grid = np.linspace(0.0, 4.0, 801)
        gauss = np.array([gaussian_delta(sigma, e, d) for e in eps_grid])
        # both directions: Bern(hi) vs Bern(lo), and Bern(lo) vs Bern(hi) written with the
        # outcomes swapped (the divergence does not depend on the labels)
        for p, q in ((hi, lo), (1 - lo, 1 - hi)):
            bern = np.array([_bernoulli_hockey_stick(p, q, e) for e in eps_grid])
            assert np.all(bern <= gauss + 1e-12)
        # tight: the Bernoulli trade-off vertex (lo, 1 - hi) lies on the Gaussian trade-off
        # curve, whose supporting line there has slope -e^eps with eps = mu z - mu^2/2
        # (mu = d/sigma, z = Phi^-1(1 - lo)): at that eps both hockey-sticks agree
        mu, z = d / sigma, (rho - w) / sigma
        e_star = mu * z - mu * mu / 2
        if e_star >= 0:
            assert _bernoulli_hockey_stick(hi, lo, e_star) == pytest.approx(
                gaussian_delta(sigma, e_star, d), rel=1e-6, abs=1e-15
            )
            checked += 1
    assert checked >= 10


def test_the_largest_gaussian_dominated_rule_is_the_gaussian_threshold(hm):
    sigma, dt, cap = 3.0, 5e-6, 20
    h, q = hm.anchors(dt, cap, 1.0)
    rho = partition_threshold(sigma, 2 * dt, cap)
    w = hm.grid_with_anchors(h, rho + 4 * sigma, 0.1)
    p = hm.gdp_largest_rule(w, sigma, hm.anchor_cap(w, h, q))
    above = w >= h[0]
    assert np.max(np.abs(p[above] - stats.norm.sf((rho - w[above]) / sigma))) < 1e-7


def _renyi(p: float, q: float, alpha: float) -> float:
    """D_alpha(Bern(p) || Bern(q)) from its definition, in extended precision."""
    from mpmath import log, mp, mpf

    mp.dps = 50
    p, q = mpf(p), mpf(q)
    return float(
        log(p**alpha * q ** (1 - alpha) + (1 - p) ** alpha * (1 - q) ** (1 - alpha)) / (alpha - 1)
    )


def test_the_largest_rdp_rule_meets_its_constraints_and_is_maximal(hm):
    sigma, alpha, dt, cap = 4.0, 19.0, 5e-6, 10
    h, q = hm.anchors(dt, cap, 1.0)
    w = hm.grid_with_anchors(h, 30.0, 0.25)
    cap_p = hm.anchor_cap(w, h, q)
    p = hm.rdp_largest_rule(w, sigma, alpha, cap_p)
    assert np.all(p <= cap_p * (1 + 1e-12)) and np.all(np.diff(p) >= -1e-15)
    slack = []
    for j in range(w.size):
        for i in range(j):
            d = w[j] - w[i]
            if 0 < d <= 1.0:
                budget = alpha * d * d / (2 * sigma**2)
                worst = max(_renyi(p[j], p[i], alpha), _renyi(p[i], p[j], alpha))
                assert worst <= budget * (1 + 1e-9) + 1e-15
                slack.append((j, budget - worst))
    # maximal: every point below its anchor cap has a binding constraint
    for j in range(1, w.size):
        if p[j] < cap_p[j] * (1 - 1e-9):
            assert min(s for k, s in slack if k == j) < 1e-6 * alpha / (2 * sigma**2)
    # the Gaussian threshold is one such rule (RDP is implied by the Gaussian's), so the largest
    # RDP rule releases at least as much at every weight
    rho = partition_threshold(sigma, 2 * dt, cap)
    gauss = stats.norm.sf((rho - w) / sigma)
    assert np.all(p >= gauss * (1 - 1e-6))
