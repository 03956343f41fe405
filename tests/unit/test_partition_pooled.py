"""The pooled final test of MAD2R and DP-SIPS: its threshold (checked exactly), its accounting,
the release on neighbouring datasets, and an empirical privacy check with a control."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from userdp.exceptions import InvalidParameterError
from userdp.partition import select_partitions
from userdp.partition.rounds import WEIGHT_GRID, PooledTest, plan_rounds
from userdp.partition.runner import Tap
from userdp.privacy import (
    PrivacyAccountant,
    PrivacyBudget,
    ThresholdedGaussianDpEvent,
    add_on_grid,
)

mpmath = pytest.importorskip("mpmath")

SHARES = (0.1, 0.2, 0.3, 0.4)
DFRAC = (0.05 / 3, 0.05 / 3, 0.05 / 3, 0.95)


def _plan(eps=1.0, delta=1e-5, cap=100, shares=SHARES, dfrac=DFRAC, h=(1.0, 1.25, 1.25, 1.25)):
    return plan_rounds(
        PrivacyBudget.derived(eps, delta),
        cap=cap,
        h_scales=list(h),
        composition="gaussian",
        fractions=shares,
        delta_fractions=dfrac,
        pooled=True,
    )


def _novel_bound(plan, t: int) -> float:
    """H(t) = sum_r p_r min(1, h_r/sqrt(t)): a novel item's pooled mean, one user of t."""
    return sum(
        p * min(1.0, r.h_scale / math.sqrt(t)) for p, r in zip(SHARES, plan.rounds, strict=True)
    )


def _pass_floor(test: PooledTest) -> Fraction:
    """What a pass implies (PooledTest docstring): exact pooled noise + H(t) >= this."""
    u = Fraction(1, 2**52)
    return Fraction(test.rho) * (1 - u) - Fraction(3, 2) * Fraction(WEIGHT_GRID)


# -- the threshold, exactly ----------------------------------------------------------------------
@pytest.mark.parametrize(("eps", "delta", "cap"), [(1.0, 1e-5, 100), (0.3, 1e-8, 20)])
def test_the_pooled_threshold_bounds_every_novel_items_pass_in_exact_arithmetic(eps, delta, cap):
    plan = _plan(eps, delta, cap)
    test = plan.pooled
    # the pooled noise's variance sum_r p_r^2 s_r^2 (s_r the scales drawn), in rationals
    var = sum(
        Fraction(p) ** 2 * Fraction(r.noise_scale) ** 2
        for p, r in zip(SHARES, plan.rounds, strict=True)
    )
    assert Fraction(test.sigma) ** 2 >= var
    mpmath.mp.dps = 40
    sd = mpmath.sqrt(mpmath.mpf(var.numerator) / var.denominator)
    floor = _pass_floor(test)
    worst = mpmath.mpf(0)
    for t in range(1, cap + 1):
        need = floor - Fraction(_novel_bound(plan, t)) * (1 + Fraction(1, 2**40))
        q = mpmath.ncdf(-(mpmath.mpf(need.numerator) / need.denominator) / sd)
        worst = max(worst, 1 - (1 - q) ** t)
    assert worst <= test.threshold_delta * (1 + 1e-9)
    # ... and it is tight: a threshold 1% lower fails
    low = floor * Fraction(99, 100) - Fraction(_novel_bound(plan, cap))
    q = mpmath.ncdf(-(mpmath.mpf(low.numerator) / low.denominator) / sd)
    assert 1 - (1 - q) ** cap > test.threshold_delta


def test_a_pass_in_floating_point_implies_the_exact_pooled_noise_clears_the_bar():
    """The float test on grid-snapped values, against exact rationals, at the worst places:
    pooled values just around the threshold, made of large terms of opposite signs."""
    plan = _plan()
    test = plan.pooled
    rng = np.random.default_rng(7)
    floor = _pass_floor(test)
    g = WEIGHT_GRID
    n, checked = 20_000, 0
    for scale in (1.0, 1e3, 1e7):
        w = rng.uniform(0.0, 1.0, (4, n))  # a novel item's weights, <= 1
        z = rng.normal(0.0, scale, (4, n))
        # shift the last round's noise so that the pooled value sits at rho, +- a few ulps
        target = test.rho + rng.integers(-4, 5, n) * math.ulp(test.rho) * scale
        z[3] = (target - sum(p * (w[r] + z[r]) for r, p in enumerate(SHARES[:3]))) / 0.4 - w[3]
        xs = [add_on_grid(w[r], z[r], g) for r in range(4)]
        passed = test.passes(xs, np)
        for i in np.flatnonzero(passed)[:300]:
            m = sum(Fraction(p) * Fraction(w[r, i]) for r, p in enumerate(SHARES))
            zy = sum(Fraction(p) * Fraction(z[r, i]) for r, p in enumerate(SHARES))
            assert m + zy >= floor
            checked += 1
    assert checked > 300


# -- accounting ----------------------------------------------------------------------------------
def test_the_pooled_run_composes_exactly_in_the_accountant():
    res = select_partitions(
        [(u, w) for u in range(3000) for w in ("the", "a", f"rare{u}")],
        epsilon=1.0,
        delta=1e-5,
        rounds=4,
        pooled=True,
        seed=1,
    )
    assert sorted(res.items) == ["a", "the"]
    assert res.parameters["pooled"] and res.parameters["recap"] is False
    events = res.dp_event.events
    assert all(isinstance(e, ThresholdedGaussianDpEvent) for e in events)
    dts = [e.threshold_delta for e in events]
    assert sum(dts) == pytest.approx(5e-6, rel=1e-12)
    assert dts[-1] == pytest.approx(0.95 * 5e-6, rel=1e-12)  # the pooled test's share
    assert res.parameters["pooled"]["threshold_delta"] == dts[-1]
    spent = PrivacyAccountant().compose(res.dp_event).spent(5e-6)
    assert spent.epsilon == pytest.approx(1.0, rel=1e-9) and spent.epsilon <= 1.0
    assert spent.delta == pytest.approx(1e-5, rel=1e-12)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"pooled": True, "recap": True}, "caps every user once"),
        ({"pooled": True, "composition": "basic"}, "composition='gaussian'"),
        ({"pooled": "yes"}, "True or False"),
        ({"pooled": True, "rounds": 65}, "at most 64 rounds"),
    ],
)
def test_pooled_options_are_validated_before_reading(options, match):
    with pytest.raises(InvalidParameterError, match=match):
        select_partitions(object(), epsilon=1.0, delta=1e-5, **options)


# -- the release on neighbours -------------------------------------------------------------------
@pytest.mark.parametrize("algorithm", ["mad2r", "dp-sips"])
@pytest.mark.parametrize("seed", range(6))
def test_a_user_of_novel_items_is_never_released(algorithm, seed):
    rng = np.random.default_rng(seed)
    base = [(f"u{u}", f"w{int(w)}") for u in range(400) for w in rng.zipf(1.5, 1 + u % 7)]
    # the added user also holds shared items, so its weights and the others' biases move
    added = [("v", f"novel{k}") for k in range(int(rng.integers(1, 150)))]
    added += [("v", w) for _, w in base[:5]]
    for eps in (1.0, 20.0):
        res = select_partitions(
            base + added,
            epsilon=eps,
            delta=1e-12,
            algorithm=algorithm,
            rounds=4,
            pooled=True,
            seed=seed,
        )
        assert not [i for i in res.items if i.startswith("novel")]


def test_an_item_below_every_rounds_own_threshold_is_released_by_the_pooled_test():
    """28 users of one item: weight 28, below the last round's own threshold (about 32.9) and
    far below rounds 1-3's; the pooled test's (about 20.9) releases it in nearly every run."""
    rounds, test = _params()
    assert all(r["rho"] > 30 for r in rounds) and test["rho"] < 21.5
    hits = [
        len(select_partitions(_tiny(28), epsilon=1.0, delta=1e-5, rounds=4, pooled=True, seed=s))
        for s in range(20)
    ]
    assert sum(hits) >= 18


# -- empirical privacy ---------------------------------------------------------------------------
def _tiny(n):
    return [(f"u{u}", "a") for u in range(n)]


def _simulate(weight, rounds, test, c_ub, z):
    """Release of an item of fixed weight under a pooled run, vectorised over runs (rows of z):
    rounds < k release at their own rho and rule out items below the floor (MAD2R's removal);
    the last round's pooled statistic decides for items still in play."""
    k = len(rounds)
    n_runs = z.shape[0]
    in_play = np.ones(n_runs, dtype=bool)
    released = np.zeros(n_runs, dtype=bool)
    xs = []
    for r, rnd in enumerate(rounds):
        x = weight + z[:, r] * rnd["sigma"]
        xs.append(x)
        if r == k - 1:
            y = sum(p * xr for p, xr in zip(test["shares"], xs, strict=True))
            released |= in_play & (y >= test["rho"])
            break
        hit = in_play & (x >= rnd["rho"])
        released |= hit
        in_play &= ~hit
        floor = min(later["rho"] for later in rounds[r + 1 :])
        in_play &= ~(x + c_ub * rnd["sigma"] < floor)
    return released


def _params(n=20):
    probe = select_partitions(_tiny(n), epsilon=1.0, delta=1e-5, rounds=4, pooled=True, seed=0)
    rounds = probe.parameters["rounds"]
    shares = probe.parameters["fractions"]
    return rounds, {"shares": shares, **probe.parameters["pooled"]}


def test_the_simulation_matches_the_local_runner_given_the_same_noise():
    rounds, test = _params()
    rng = np.random.default_rng(3)
    n = 21
    for _ in range(60):
        z = rng.normal(size=4) * rng.choice([0.3, 1.0, 3.0])
        tap = Tap(noise=lambda r, labels, sigma, z=z: np.full(len(labels), z[r] * sigma))
        res = select_partitions(
            _tiny(n), epsilon=1.0, delta=1e-5, rounds=4, pooled=True, seed=0, _tap=tap
        )
        for w in tap.weights:
            assert w == {} or w == {"a": pytest.approx(n, rel=1e-12)}
        assert (res.items == ["a"]) == bool(_simulate(float(n), rounds, test, 3.0, z[None])[0])


def _epsilon_lower_bound(k1, k0, n, delta, alpha=0.05):
    p1_lo = stats.beta.ppf(alpha / 2, k1, n - k1 + 1) if k1 > 0 else 0.0
    p0_hi = stats.beta.ppf(1 - alpha / 2, k0 + 1, n - k0) if k0 < n else 1.0
    return math.log(max(p1_lo - delta, 1e-300) / p0_hi)


def test_empirical_epsilon_stays_below_the_claimed_epsilon_and_the_check_has_power():
    """D: n users of one item; D' adds one. The target's weight (n or n + 1 in every round) at
    the pooled threshold and 2 pooled sigmas below it; 10^5 runs per side, Clopper-Pearson."""
    eps, delta, n_runs = 1.0, 1e-5, 100_000
    rounds, test = _params()
    rng = np.random.default_rng(11)
    for n in (round(test["rho"]), round(test["rho"] - 2 * test["sigma"])):
        k0 = int(_simulate(float(n), rounds, test, 3.0, rng.normal(size=(n_runs, 4))).sum())
        k1 = int(_simulate(float(n + 1), rounds, test, 3.0, rng.normal(size=(n_runs, 4))).sum())
        assert 0 < k0 < k1 < n_runs
        for a, b in ((k1, k0), (n_runs - k0, n_runs - k1)):
            assert _epsilon_lower_bound(a, b, n_runs, delta) <= eps
    # control: a tenth of the noise in every round (same thresholds; no removal, which would
    # rule the item out at once) breaks the claim
    weak = [{**r, "sigma": r["sigma"] / 10} for r in rounds]
    n = round(test["rho"] - 2 * test["sigma"] / 10)
    k0 = int(_simulate(float(n), weak, test, np.inf, rng.normal(size=(n_runs, 4))).sum())
    k1 = int(_simulate(float(n + 1), weak, test, np.inf, rng.normal(size=(n_runs, 4))).sum())
    assert _epsilon_lower_bound(k1, k0, n_runs, delta) > eps


def test_the_pooled_threshold_needs_no_memory_proportional_to_the_cap():
    # A typed cap of 10^12 must not build an array of 10^12 degrees: the maximum over t is
    # found by branch and bound, and equals the dense maximum where both can run.

    from userdp.privacy.calibrate import max_over_degrees

    shares, scales, s_y, dt = (0.1, 0.2, 0.3, 0.4), (2.0, 2.0, 1.5, 1.0), 3.9, 4.75e-6

    def weight(t):
        return sum(p * np.minimum(1.0, h / np.sqrt(t)) for p, h in zip(shares, scales, strict=True))

    def quantile(t):
        return s_y * stats.norm.isf(-np.expm1(np.log1p(-dt) / t))

    cap = (1 << 20) + 12_345
    t = np.arange(1, cap + 1, dtype=np.float64)
    dense = float(np.max(weight(t) + quantile(t)))
    assert max_over_degrees(weight, quantile, cap) == pytest.approx(dense, rel=0, abs=1e-12)
    assert max_over_degrees(weight, quantile, 10**12) >= dense  # the threshold only grows


@pytest.mark.parametrize(
    ("algorithm", "options", "every_code_in_round"),
    [
        ("mad2r", {}, {}),  # pooled, caps once: each round noises its own items
        ("dp-sips", {"rounds": 3, "pooled": True}, {}),
        ("mad", {}, {}),
        ("mad2r", {"pooled": False}, {0}),  # re-caps: round 1 noises every item (w_ext)
    ],
)
def test_the_local_runner_noises_the_items_a_later_step_can_read(
    algorithm, options, every_code_in_round
):
    # A run that never re-caps can never bring back an item absent from a round, so that
    # round's noise is drawn for its own items only; a re-capping run's non-final rounds
    # noise every item of the input (an item may enter a later round's capped sets).
    rng = np.random.default_rng(4)
    pairs = [(f"u{u}", f"i{int(i)}") for u in range(400) for i in rng.zipf(1.4, 30) % 500]
    every = {i for _, i in pairs}
    noised: list[set[str]] = []

    def noise(r, labels, sigma):
        noised.append(set(labels))
        return rng.normal(0.0, sigma, len(labels))

    tap = Tap(noise=noise)
    select_partitions(
        pairs,
        algorithm=algorithm,
        epsilon=2.0,
        delta=1e-5,
        max_items_per_user=8,
        seed=1,
        _tap=tap,
        **options,
    )
    assert len(noised) == len(tap.weights) >= 1
    for r, (labels, weights) in enumerate(zip(noised, tap.weights, strict=True)):
        assert labels == (every if r in every_code_in_round else set(weights))
