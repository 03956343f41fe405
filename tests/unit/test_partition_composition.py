"""Tight composition of weight-and-threshold rounds: the thresholded-Gaussian event,
calibration, one accountant for a selection and other releases, and an empirical privacy check.
"""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from scipy import stats

from userdp.exceptions import BudgetExceededError, DataError
from userdp.partition import select_partitions
from userdp.partition.rounds import (
    WEIGHT_GRID,
    WEIGHT_GRID_ITEMS,
    Round,
    check_item_count,
    plan_rounds,
)
from userdp.partition.runner import Tap
from userdp.privacy import (
    PrivacyAccountant,
    PrivacyBudget,
    ThresholdedGaussianDpEvent,
    gaussian_on_grid,
    grid_noise_scale,
    partition_threshold,
)

mpmath = pytest.importorskip("mpmath")


# -- independent reference: analytic Gaussian in mpmath -----------------------------------------
def _mp_delta(eps, mu):
    """Balle & Wang (2018) Thm. 8 for mu = 1/sigma (l2 sensitivity 1), in mpmath."""
    phi = mpmath.ncdf
    return phi(mu / 2 - eps / mu) - mpmath.exp(eps) * phi(-mu / 2 - eps / mu)


def _mp_epsilon(mu: float, delta: float) -> float:
    """The epsilon at which the analytic Gaussian's delta equals ``delta``: bisection in
    40-digit arithmetic (delta(eps) decreases in eps)."""
    mpmath.mp.dps = 40
    mu, target = mpmath.mpf(mu), mpmath.mpf(delta)
    lo, hi = mpmath.mpf(0), mpmath.mpf(100)
    for _ in range(200):
        mid = (lo + hi) / 2
        if _mp_delta(mid, mu) > target:
            lo = mid
        else:
            hi = mid
    return float(hi)


def _mu(sigmas) -> float:
    return math.sqrt(sum(1.0 / s**2 for s in sigmas))


# -- the event ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("sigmas", "dts", "delta_g"),
    [
        ((3.0,), (1e-6,), 1e-6),
        ((20.0, 4.0), (1e-7, 2e-6), 5e-6),
        ((40.0, 10.0, 4.5), (0, 1e-8, 1e-6), 1e-5),
    ],
)
def test_thresholded_gaussian_rounds_compose_as_one_gaussian_plus_the_threshold_deltas(
    sigmas, dts, delta_g
):
    acc = PrivacyAccountant()
    for s, dt in zip(sigmas, dts, strict=True):
        acc.compose(ThresholdedGaussianDpEvent(noise_multiplier=s, threshold_delta=dt))
    spent = acc.spent(delta_g)
    assert spent.delta == pytest.approx(delta_g + sum(dts), rel=1e-12)
    assert spent.epsilon == pytest.approx(_mp_epsilon(_mu(sigmas), delta_g), rel=1e-7)


@pytest.mark.parametrize("rounds", [1, 2, 3])
@pytest.mark.parametrize(("eps", "delta"), [(1.0, 1e-5), (0.25, 1e-8), (4.0, 1e-6)])
def test_gaussian_calibration_round_trips_to_the_requested_budget(rounds, eps, delta):
    fractions = {1: (1.0,), 2: (0.03, 0.97), 3: (0.01, 0.04, 0.95)}[rounds]
    dfrac = {1: (1.0,), 2: (0.1, 0.9), 3: (0.1, 0.2, 0.7)}[rounds]
    plan = plan_rounds(
        PrivacyBudget.derived(eps, delta),
        cap=100,
        h_scales=[1.0] + [2.0] * (rounds - 1),
        composition="gaussian",
        fractions=fractions,
        delta_fractions=dfrac,
        threshold_share=0.5,
    )
    spent = plan.spent()
    assert spent.epsilon <= eps
    assert spent.epsilon == pytest.approx(eps, rel=1e-9)
    assert spent.delta == pytest.approx(delta, rel=1e-12)
    # precision split: sigma_r = sigma_tot / sqrt(p_r)
    mu = _mu(r.sigma for r in plan.rounds)
    assert _mp_epsilon(mu, delta / 2) == pytest.approx(eps, rel=1e-7)
    for r, p in zip(plan.rounds, fractions, strict=True):
        assert r.sigma**-2 / mu**2 == pytest.approx(p, rel=1e-9)


def test_one_gaussian_round_has_the_papers_sigma_and_threshold():
    basic = plan_rounds(
        PrivacyBudget(1.0, 1e-5),
        cap=100,
        h_scales=[1.0],
        composition="basic",
        fractions=(1.0,),
        delta_fractions=(1.0,),
    )
    tight = plan_rounds(
        PrivacyBudget(1.0, 1e-5),
        cap=100,
        h_scales=[1.0],
        composition="gaussian",
        fractions=(1.0,),
        delta_fractions=(1.0,),
        threshold_share=0.5,
    )
    assert tight.rounds[0].sigma == pytest.approx(basic.rounds[0].sigma, rel=1e-9)
    # docs/papers.md reference 20.7897, grown by safe noise only: sigma (1 + 2^-12), 2g, 2^-52
    assert 20.7897 - 1e-4 < tight.rounds[0].rho <= (20.7897 + 1e-4) * (1 + 2.0**-11) + 2.0**-25
    assert tight.rounds[0].rho == pytest.approx(basic.rounds[0].rho, rel=1e-9)


# -- one accountant -----------------------------------------------------------------------------
PAIRS = [(u, w) for u in range(3000) for w in ("the", "a", f"rare{u}")]


def test_a_selection_composes_with_a_gaussian_release_in_one_accountant():
    acc = PrivacyAccountant()
    res = select_partitions(PAIRS, epsilon=1.0, delta=1e-5, seed=1, accountant=acc)
    assert sorted(res.items) == ["a", "the"]
    acc.compose(dp_accounting.GaussianDpEvent(noise_multiplier=5.0))
    sigmas = [r["sigma"] for r in res.parameters["rounds"]]
    (selection, _) = acc.ledger
    dts = [e.threshold_delta for e in selection.events]
    assert sum(dts) == pytest.approx(5e-6, rel=1e-12)
    spent = acc.spent(1e-6)
    mu = math.sqrt(_mu(sigmas) ** 2 + 1 / 25.0)
    assert spent.epsilon == pytest.approx(_mp_epsilon(mu, 1e-6), rel=1e-7)
    assert spent.delta == pytest.approx(1e-6 + 5e-6, rel=1e-12)


def test_a_selection_that_would_exceed_the_accountants_budget_is_refused_before_any_work():
    acc = PrivacyAccountant(PrivacyBudget(1.0, 1e-5))
    unreadable = object()  # reading it would raise DataError: the refusal must come first
    with pytest.raises(BudgetExceededError, match="would go over the budget"):
        select_partitions(unreadable, epsilon=2.0, delta=1e-6, accountant=acc)
    assert acc.ledger == ()
    # three selections at epsilon 0.5 fit in epsilon 1 (their Gaussian parts compose as one;
    # basic composition would allow two) ...
    for seed in range(3):
        select_partitions(PAIRS, epsilon=0.5, delta=4e-6, seed=seed, accountant=acc)
    # ... a fourth does not: refused, and the ledger is unchanged
    n = len(acc.ledger)
    with pytest.raises(BudgetExceededError):
        select_partitions(unreadable, epsilon=0.5, delta=4e-6, accountant=acc)
    assert len(acc.ledger) == n


# -- empirical privacy check --------------------------------------------------------------------
def _simulate(weight, rounds, c_ub, n_runs, rng):
    """P(item released) for an item of fixed pre-noise weight in every round it is in play,
    vectorised over runs: released in round r if noisy >= rho_r; ruled out for later rounds if
    noisy + c_ub sigma_r < rho_{r+1} (MAD2R's removal, Alg. 4 lines 11-13)."""
    in_play = np.ones(n_runs, dtype=bool)
    released = np.zeros(n_runs, dtype=bool)
    for r, rnd in enumerate(rounds):
        noisy = weight + rng.normal(0.0, rnd["sigma"], n_runs)
        hit = in_play & (noisy >= rnd["rho"])
        released |= hit
        in_play &= ~hit
        if r + 1 < len(rounds):
            in_play &= ~(noisy + c_ub * rnd["sigma"] < rounds[r + 1]["rho"])
    return released


def _epsilon_lower_bound(k1, k0, n, delta, alpha=0.05):
    """Clopper-Pearson lower bound on epsilon from P[S | D'] >= e^-eps... (one event S)."""
    p1_lo = stats.beta.ppf(alpha / 2, k1, n - k1 + 1) if k1 > 0 else 0.0
    p0_hi = stats.beta.ppf(1 - alpha / 2, k0 + 1, n - k0) if k0 < n else 1.0
    return math.log(max(p1_lo - delta, 1e-300) / p0_hi)


def _tiny(n):
    return [(f"u{u}", "a") for u in range(n)]


@pytest.mark.parametrize("rounds", [2, 3])
def test_the_simulation_matches_the_local_runner_given_the_same_noise(rounds):
    """The vectorised simulation below is the algorithm: same releases for the same noise."""
    rng = np.random.default_rng(rounds)
    n = 22
    base = select_partitions(_tiny(n), epsilon=1.0, delta=1e-5, rounds=rounds, pooled=False, seed=0)
    params = base.parameters["rounds"]
    for _ in range(60):
        z = rng.normal(size=rounds)
        # items in play get noise z_r sigma_r in round r (a pure function of the item)
        tap = Tap(noise=lambda r, labels, sigma, z=z: np.full(len(labels), z[r] * sigma))
        res = select_partitions(
            _tiny(n), epsilon=1.0, delta=1e-5, rounds=rounds, pooled=False, seed=0, _tap=tap
        )
        # weight n in every round where "a" is in play (an empty round once it is not)
        for w in tap.weights:
            assert w == {} or w == {"a": pytest.approx(n, rel=1e-12)}
        sim = _simulate_fixed(n, params, 3.0, z)
        assert (res.items == ["a"]) == sim


def _simulate_fixed(weight, rounds, c_ub, z):
    for r, rnd in enumerate(rounds):
        noisy = weight + z[r] * rnd["sigma"]
        if noisy >= rnd["rho"]:
            return True
        if r + 1 < len(rounds) and noisy + c_ub * rnd["sigma"] < rounds[r + 1]["rho"]:
            return False
    return False


@pytest.mark.parametrize("rounds", [2, 3])
def test_empirical_epsilon_stays_below_the_claimed_epsilon(rounds):
    """D: n users holding only "a"; D' adds one more. The target's weight (n or n + 1 in every
    round) sits at the last round's threshold, or 2 sigma below it (where the ratio of release
    probabilities is largest). 10^5 runs per side; Clopper-Pearson 95%."""
    eps, delta, n_runs = 1.0, 1e-5, 100_000
    probe = select_partitions(
        _tiny(20), epsilon=eps, delta=delta, rounds=rounds, pooled=False, seed=0
    )
    params = probe.parameters["rounds"]
    last = params[-1]
    rng = np.random.default_rng(100 + rounds)
    for n in (round(last["rho"]), round(last["rho"] - 2 * last["sigma"])):
        d0 = _simulate(float(n), params, 3.0, n_runs, rng)
        d1 = _simulate(float(n + 1), params, 3.0, n_runs, rng)
        k0, k1 = int(d0.sum()), int(d1.sum())
        assert 0 < k0 < k1 < n_runs
        for a, b in ((k1, k0), (n_runs - k0, n_runs - k1)):  # S = {released}, {not released}
            assert _epsilon_lower_bound(a, b, n_runs, delta) <= eps
    # the check has power: a tenth of the noise in the last round breaks the claim
    weak = [*params[:-1], {**last, "sigma": last["sigma"] / 10}]
    n = round(last["rho"] - 2 * last["sigma"] / 10)
    k0 = int(_simulate(float(n), weak, 3.0, n_runs, rng).sum())
    k1 = int(_simulate(float(n + 1), weak, 3.0, n_runs, rng).sum())
    assert _epsilon_lower_bound(k1, k0, n_runs, delta) > eps


# -- max_items_per_user="auto" ------------------------------------------------------------------
@pytest.mark.parametrize("composition", ["gaussian", "basic"])
@pytest.mark.parametrize("algorithm", ["mad2r", "basic", "mad", "dp-sips"])
def test_auto_cap_is_charged_and_the_budget_is_spent_exactly(algorithm, composition):
    from userdp.partition.cap import CANDIDATES

    rng = np.random.default_rng(0)
    pairs = [(u, f"w{int(w)}") for u in range(2000) for w in rng.zipf(1.3, size=1 + u % 40)]
    res = select_partitions(
        pairs,
        epsilon=1.0,
        delta=1e-5,
        algorithm=algorithm,
        composition=composition,
        max_items_per_user="auto",
        seed=2,
    )
    cap = res.parameters["max_items_per_user"]
    assert cap in CANDIDATES
    assert res.budget.epsilon == pytest.approx(1.0, rel=1e-9)  # (sums round off by ~1e-16)
    assert res.budget.delta == pytest.approx(1e-5, rel=1e-9)
    histogram = res.dp_event.events[0]
    assert isinstance(histogram, dp_accounting.GaussianDpEvent)
    again = select_partitions(
        pairs,
        epsilon=1.0,
        delta=1e-5,
        algorithm=algorithm,
        composition=composition,
        max_items_per_user="auto",
        seed=2,
    )
    assert again.items == res.items and again.parameters["max_items_per_user"] == cap


def test_auto_cap_follows_the_degrees():
    from userdp.partition.cap import choose_cap, degree_counts

    def rho(c):  # a threshold that grows with the cap like the real one
        return 20.0 + math.log(c)

    small = degree_counts(np.full(100_000, 5))
    large = degree_counts(np.full(100_000, 300))
    assert choose_cap(small, 1.0, rho) <= 8
    assert choose_cap(large, 1.0, rho) >= 256
    # bins that are pure noise (below 3 sigma) do not pull the cap up
    noise_only = small + np.where(np.arange(small.size) > 30, 2.9, 0.0)
    assert choose_cap(noise_only, 1.0, rho) == choose_cap(small, 1.0, rho)
    # a histogram that is all noise (a few hundred users) falls back to the fixed default
    # instead of scoring every candidate 0 and taking the smallest
    assert choose_cap(np.full(small.size, 2.9), 1.0, rho) == 100
    assert choose_cap(np.full(small.size, 2.9), 1.0, rho, fallback=64) == 64


def test_auto_cap_on_a_few_hundred_users_keeps_the_fixed_caps_output():
    rng = np.random.default_rng(5)
    pairs = [(u, f"m{int(m)}") for u in range(600) for m in rng.zipf(1.4, size=20 + u % 60)]
    auto = select_partitions(pairs, epsilon=1.0, delta=1e-5, max_items_per_user="auto", seed=3)
    fixed = select_partitions(pairs, epsilon=1.0, delta=1e-5, seed=3)
    assert auto.parameters["max_items_per_user"] >= 32
    assert len(auto) >= 0.8 * len(fixed)


# -- safe noise: the threshold on the weight grid ------------------------------------
def _mp_worst_crossing(rho: float, grid: float, scale: float, cap: int, h: float) -> float:
    """Exact max over t of P(some of t novel items crosses rho), with mpmath: each item of
    weight h/sqrt(t) is released as (rint(w/g) + floor(Z/g + 1/2)) g, Z ~ N(0, scale^2), so it
    crosses iff floor(Z/g + 1/2) >= M - k with M = ceil(rho/g), k = rint(w/g)."""
    mpmath.mp.dps = 40
    m = math.ceil(rho / grid)
    worst = mpmath.mpf(0)
    for t in range(1, cap + 1):
        k = float(np.rint(h / math.sqrt(t) / grid))
        p = mpmath.ncdf(-(mpmath.mpf(m) - k - mpmath.mpf(0.5)) * grid / scale)
        worst = max(worst, 1 - (1 - p) ** t)
    return float(worst)


@pytest.mark.parametrize("grid", [0.5, 0.125])
def test_the_threshold_on_a_grid_bounds_every_novel_items_crossing_where_the_textbook_fails(grid):
    sigma, dt, cap, h = 2.0, 1e-4, 20, 1.25
    scale = sigma * (1 + grid)  # the scale drawn (any inflation; the bound is in terms of it)
    safe = partition_threshold(scale, 2 * dt, cap, h, grid=grid)
    textbook = partition_threshold(scale, 2 * dt, cap, h)
    assert _mp_worst_crossing(safe, grid, scale, cap, h) <= dt
    assert _mp_worst_crossing(textbook, grid, scale, cap, h) > dt  # snapping up breaks it


@pytest.mark.parametrize("h_scale", [1.0, 1.25])
def test_every_rounds_threshold_holds_for_its_safe_noise_on_the_weight_grid(h_scale):
    dt, cap = 2.5e-6, 100
    rnd = Round.gaussian(4.0, dt, cap, h_scale)
    assert rnd.grid == WEIGHT_GRID == 2.0**-32
    # the scale drawn by the engines: gaussian_on_grid's for l2 = 1 on WEIGHT_GRID_ITEMS values
    assert rnd.noise_scale == grid_noise_scale(4.0, 1.0, WEIGHT_GRID_ITEMS, "l2", WEIGHT_GRID)
    assert rnd.noise_scale >= 4.0 * (1 + 2.0**-12)
    assert _mp_worst_crossing(rnd.rho, rnd.grid, rnd.noise_scale, cap, h_scale) <= dt * (1 + 1e-9)
    # and the released values' grid and scale are the ones rho was computed for
    w = np.full(200_000, 0.5)
    x = gaussian_on_grid(np.random.default_rng(0), w, rnd.sigma, l2=1.0, size=WEIGHT_GRID_ITEMS)
    assert np.all(x / WEIGHT_GRID == np.rint(x / WEIGHT_GRID))
    assert np.std(x) == pytest.approx(rnd.noise_scale, rel=0.01)


def test_every_spark_bucket_noises_its_weights_on_the_runs_one_grid():
    from userdp.partition.spark import _ExecutorNoise
    from userdp.privacy import spawn_generator

    noise = _ExecutorNoise(entropy=12345)
    rng = np.random.default_rng(1)
    for bucket, n in ((0, 3), (7, 1000)):  # buckets of very different sizes
        w = rng.exponential(5.0, n)
        x = noise(1, bucket, None, w, 4.0)
        assert np.all(x / WEIGHT_GRID == np.rint(x / WEIGHT_GRID))  # the same grid 2^-27
        expected = gaussian_on_grid(
            spawn_generator(12345, (1, bucket)), w, 4.0, l2=1.0, size=WEIGHT_GRID_ITEMS
        )
        assert np.array_equal(x, expected)


def test_a_run_with_more_items_than_the_weight_grid_covers_is_refused():
    # the bound is past anything the local engine can hold (int32 item codes), so no local
    # input, and no user added to one, can flip the refusal; Spark refuses past 10^12 items
    assert WEIGHT_GRID_ITEMS == 2**40 > 2 * (np.iinfo(np.int32).max + 1)
    assert WEIGHT_GRID == 2.0**-32
    check_item_count(WEIGHT_GRID_ITEMS)
    with pytest.raises(DataError, match="at most 1099511627776"):
        check_item_count(WEIGHT_GRID_ITEMS + 1)
