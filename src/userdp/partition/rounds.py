"""Noise scales, thresholds and privacy events of the weight-and-threshold rounds of a run.

A run of k rounds is planned before any data is read, from the budget alone: each round's
sigma_r, rho_r and DP event. Two compositions:

``"basic"`` (the papers'): round r gets ``fractions[r]`` of epsilon and ``delta_fractions[r]``
of delta and is calibrated as Alg. 1 (sigma_r for (eps_r, delta_r/2), rho_r with delta_r/2);
the rounds compose by basic composition (Thm. 5.1).

``"gaussian"`` (tight): the rounds' noisy weight vectors compose as ONE Gaussian mechanism, and
the chances that a novel item crosses a threshold add up. With delta_g = (1 - threshold_share)
delta, sigma_tot is the analytic-Gaussian sigma for (epsilon, delta_g) and l2 sensitivity 1;
round r gets ``sigma_r = sigma_tot / sqrt(p_r)`` with ``p = fractions`` (a split of precision,
sum_r sigma_r^-2 = sigma_tot^-2) and threshold failure probability
``dt_r = threshold_share * delta * delta_fractions[r]``, with
``rho_r = max_{t <= Delta_0} h_r(t) + sigma_r Phi^-1((1 - dt_r)^(1/t))``.

Privacy of ``"gaussian"`` (adding or removing one user v with novel items T; the argument of
docs/privacy.md, "Rounds of weight-and-threshold compose as one Gaussian"). Analyse each round
as releasing its whole extended noisy vector X_r = w_r + N(0, sigma_r^2 I) (Alg. 1, Thm. 3.3's
proof).
1. For every fixed history X_<r, round r's input is {Cap(S_u minus R_r)} with R_r and the biases
   functions of X_<r only, so neighbours stay neighbours with degrees <= Delta_0, and round r's
   weights differ by l2 <= 1 (Lemmas 5.3-5.6, tested in tests/property). Hence X = (X_1..X_k)
   is an adaptive composition of Gaussian mechanisms, i.e. mu-GDP with mu^2 = sum_r sigma_r^-2
   = sigma_tot^-2 (Dong, Roth & Su 2019, Cor. 3.3), hence (epsilon, delta_g)-DP.
2. The release is F_E(X) = union_r {i in U_E,r : X_r(i) >= rho_r}, where the round supports U_r
   differ between E = D and E = D' only by v's novel items T (removals and biases are the same
   functions of X_<r on both sides). Let B = {no item of T crosses rho_r in a round where it is
   in play}; on B, F_D(X) = F_D'(X). Under D' an item of T has weight <= h_r(t) (t = |T| <=
   Delta_0), under D it has weight 0 (pure noise); either way P_E(not B) <= sum_r dt_r by the
   choice of rho_r (union bound over the t items, as in Thm. 3.3).
3. For every set S of outputs, with delta_g from step 1:
   P[M(D') in S] <= P_D'[F_D(X) in S] + P_D'(not B) <= e^eps P_D[F_D(X) in S] + delta_g + sum dt_r;
   P[M(D) in S] <= P_D[F_D'(X) in S] + P_D(not B) <= e^eps P_D'[F_D'(X) in S] + delta_g + sum dt_r.
   So the run is (epsilon, delta_g + sum_r dt_r) = (epsilon, delta)-DP.
Safe noise changes neither step: X_r is released on the grid g = :data:`WEIGHT_GRID`
as ``(rint(w_r/g) + floor(Z/g + 1/2)) g``, a function of the Gaussian mechanism on the snapped
weights, whose l2 sensitivity ``1 + g sqrt(N)`` is matched by the noise scale ``sigma_r (1 + g
sqrt(N))`` (same noise multiplier, step 1); rho_r covers the snapping and the float sums, so a
novel item still crosses it with probability <= its textbook bound (step 2; :class:`Round`).
A pooled run (``plan_rounds(pooled=True)``) replaces the last round's threshold by one test on
the precision-weighted sum of every round's noisy weights (:class:`PooledTest`); only step 2's
bound for that round changes. The accountant composes the rounds'
:class:`~userdp.privacy.ThresholdedGaussianDpEvent` exactly this way, so a selection composes
with other Gaussian releases in one accountant.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import dp_accounting
import numpy as np
from scipy import stats

from userdp._validation import check_choice, check_fractions, check_real
from userdp.exceptions import DataError, InvalidParameterError
from userdp.privacy import (
    PrivacyAccountant,
    PrivacyBudget,
    ThresholdedGaussianDpEvent,
    WeightAndThresholdDpEvent,
    gaussian_sigma,
    grid_noise_scale,
    grid_spacing,
    partition_threshold,
)
from userdp.privacy.calibrate import max_over_degrees

__all__ = [
    "COMPOSITIONS",
    "WEIGHT_GRID",
    "WEIGHT_GRID_ITEMS",
    "Plan",
    "PooledTest",
    "Round",
    "check_item_count",
    "default_fractions",
    "plan_rounds",
]

#: Public bound on the number of distinct items of a run (2^40, about 1.1e12). The rounds'
#: noisy weights are released on ONE power-of-two grid fixed for this many coordinates (safe
#: noise, :func:`userdp.privacy.gaussian_on_grid`), so the grid depends on no data and every
#: engine, bucket and executor uses the same one. The local engine holds items as int32 codes,
#: so it can never reach the bound (no check depends on the data there); the Spark runner
#: refuses more (:func:`check_item_count`), an input of at least 10^12 distinct items, i.e.
#: 16 TB of pairs. The grid 2^-32 stays far above the float resolution of the noise: at
#: sigma = 100 and |Z| <= 10 sigma it is 2^10 of Z's ulps.
WEIGHT_GRID_ITEMS = 4**20
#: The grid: 2^-32 for the weights' l2 sensitivity 1 (snapping adds at most 2^-12 to it).
WEIGHT_GRID = grid_spacing(1.0, WEIGHT_GRID_ITEMS, "l2")


def check_item_count(n_items: int) -> None:
    """Refuse a run with more distinct items than :data:`WEIGHT_GRID_ITEMS` (its weight grid
    would not cover them; only a Spark input of 10^12 distinct items can get there)."""
    if n_items > WEIGHT_GRID_ITEMS:
        raise DataError(
            f"The input has {n_items} distinct items; partition selection supports at most "
            f"{WEIGHT_GRID_ITEMS} (2^40), the bound its safe noise grid is fixed for."
        )


COMPOSITIONS = ("gaussian", "basic")

#: Default per-round shares by (algorithm, composition, rounds), chosen on a pilot draw of the
#: Zipf generator (seed 0, 200,000 users, exponent 1.1; benchmarks/partition_selection_pilot.py),
#: never on the benchmark's datasets. ``gaussian``: (precision shares p_r, threshold-delta
#: shares); ``basic``: (epsilon shares, delta shares), the papers' values. Pilot (mean of 3
#: seeds): MAD2R 2 rounds p_1 = 0.01 / 0.03 / 0.1 / 0.2 / 0.3 / 0.4 / 0.5 / 0.6 gave 2417 /
#: 2463 / 2502 / 2571 / 2719 / 2829 / 2636 / 2144 items (basic composition: 2202); 3 rounds
#: (0.2, 0.3, 0.5) gave 2972; DP-SIPS 2 rounds p_1 = 0.03 / 0.05 / 0.1 / 0.2 gave 2413 / 2429 /
#: 2420 / 2346, 3 rounds at most 2412.
_DEFAULT_FRACTIONS = {
    ("mad2r", "gaussian", 2): ((0.4, 0.6), (0.1, 0.9)),
    ("mad2r", "gaussian", 3): ((0.2, 0.3, 0.5), (0.1, 0.2, 0.7)),
    ("dp-sips", "gaussian", 2): ((0.05, 0.95), (0.1, 0.9)),
    ("dp-sips", "gaussian", 3): ((0.01, 0.04, 0.95), (0.1, 0.2, 0.7)),
    ("dp-sips", "basic", 3): ((0.05, 0.15, 0.8), (0.05, 0.15, 0.8)),
    ("mad2r", "basic", 3): ((0.05, 0.15, 0.8), (0.05, 0.15, 0.8)),
}
_PAPERS = {1: ((1.0,), (1.0,)), 2: ((0.1, 0.9), (0.1, 0.9))}
#: Share of delta that pays for thresholds under ``"gaussian"`` (the rest is delta_g); on the
#: pilot 0.25 and 0.5 tied and 0.75 lost about 2%.
DEFAULT_THRESHOLD_SHARE = 0.5


def default_fractions(
    composition: str, rounds: int, algorithm: str = "mad2r", pooled: bool = False
) -> tuple[tuple[float, ...], ...]:
    """(fractions, delta_fractions) for ``rounds`` rounds of ``algorithm``: the table, the
    papers' split for one or two rounds, else 5% spread over the early rounds (each 4x the one
    before) and 95% in the last.

    Pooled runs: precision growing linearly, ``p_r = r / (1 + ... + k)`` ((0.1, 0.2, 0.3, 0.4)
    for 4 rounds), and 5% of the threshold delta spread evenly over rounds 1..k-1, 95% for the
    pooled test (chosen on the pilot draw, see :data:`DEFAULT_POOLED_ROUNDS`)."""
    if pooled:
        ramp = tuple(r / (rounds * (rounds + 1) / 2) for r in range(1, rounds + 1))
        if rounds == 1:
            return ramp, (1.0,)
        return ramp, tuple([0.05 / (rounds - 1)] * (rounds - 1) + [0.95])
    key = (algorithm, composition, rounds)
    if key in _DEFAULT_FRACTIONS:
        return _DEFAULT_FRACTIONS[key]
    if rounds in _PAPERS:
        return _PAPERS[rounds]
    early = [4.0**r for r in range(rounds - 1)]
    parts = tuple([0.05 * e / sum(early) for e in early] + [0.95])
    return parts, parts


def _noise_scale(sigma: float) -> float:
    """The scale drawn on :data:`WEIGHT_GRID`: ``sigma (1 + g sqrt(N))``, N the item bound."""
    return grid_noise_scale(sigma, 1.0, WEIGHT_GRID_ITEMS, "l2", WEIGHT_GRID)


@dataclass(frozen=True)
class Round:
    """Noise scale, threshold and event of one weight-and-threshold round (Alg. 1 lines 1-2).

    Safe noise: the weights ``w`` are released as ``X = (rint(w/g) + floor(Z/g + 1/2)) g`` on
    ``g = grid`` (:data:`WEIGHT_GRID`) with ``Z ~ N(0, noise_scale^2)``, ``noise_scale =
    sigma (1 + g sqrt(N))`` (:func:`~userdp.privacy.grid_noise_scale`, N =
    :data:`WEIGHT_GRID_ITEMS`). The snapped weights have l2 sensitivity ``<= 1 + g sqrt(N)``
    (snapping moves each of at most N coordinates by ``<= g/2``), so X is the Gaussian
    mechanism with noise multiplier ``sigma`` on them, as the event states. The threshold is
    ``rho = (rho_0 + 2g)(1 + 2^-52)`` with ``rho_0 = max_t h(t) + noise_scale Phi^-1((1 -
    dt)^(1/t))`` (:func:`~userdp.privacy.partition_threshold` with ``grid=g``): a novel item of
    weight ``<= h(t)`` has ``X <= (h(t) + Z + 1.5 g)(1 + 2^-53)`` in floating point, so it
    crosses rho with probability at most the textbook bound, and the threshold-delta argument
    (module docstring, step 2) holds as stated.
    """

    sigma: float
    rho: float
    h_scale: float
    cap: int
    event: dp_accounting.DpEvent
    noise_scale: float
    grid: float = WEIGHT_GRID

    @classmethod
    def calibrate(cls, budget: PrivacyBudget, cap: int, h_scale: float = 1.0) -> Round:
        """A round with its own (epsilon, delta), basic composition (Alg. 1)."""
        # line 1: sigma for (eps, delta/2) with l2 sensitivity 1 (Prop. 2.4)
        sigma = gaussian_sigma(budget.epsilon, budget.delta / 2)
        # line 2: rho = max_t h(t) + sigma Phi^-1((1 - delta/2)^(1/t)), on the grid (above)
        scale = _noise_scale(sigma)
        rho = partition_threshold(scale, budget.delta, cap, h_scale, grid=WEIGHT_GRID)
        event = WeightAndThresholdDpEvent(budget.epsilon, budget.delta, sigma, rho, cap)
        return cls(sigma, rho, h_scale, cap, event, scale)

    @classmethod
    def gaussian(cls, sigma: float, threshold_delta: float, cap: int, h_scale: float) -> Round:
        """A round with noise ``sigma`` whose threshold fails with probability <= dt."""
        # partition_threshold spends half its delta argument on the threshold: pass 2 dt.
        scale = _noise_scale(sigma)
        rho = partition_threshold(scale, 2.0 * threshold_delta, cap, h_scale, grid=WEIGHT_GRID)
        event = ThresholdedGaussianDpEvent(sigma, threshold_delta)
        return cls(sigma, rho, h_scale, cap, event, scale)


#: Most rounds a pooled run may have (the float error bound of the pooled sum, below, is
#: stated for at most this many terms).
MAX_POOLED_ROUNDS = 64
#: Relative slack of the pooled test: an item passes iff ``Y >= rho_Y + POOLED_SLACK * S``,
#: ``S = sum_r p_r |X_r|`` (see :class:`PooledTest`).
POOLED_SLACK = 2.0**-40


def pooled_statistic(noisy: Sequence[Any], shares: Sequence[float], ops: Any) -> tuple[Any, Any]:
    """``(Y, S)``: ``Y = sum_r p_r X_r`` and ``S = sum_r p_r |X_r|``, summed in round order.

    Element-wise over NumPy arrays or Spark columns (``ops.abs``); both engines evaluate the
    same float operations in the same order, so they agree bit for bit.
    """
    y = s = None
    for p, x in zip(shares, noisy, strict=True):
        term, size = p * x, p * ops.abs(x)
        y = term if y is None else y + term
        s = size if s is None else s + size
    return y, s


@dataclass(frozen=True)
class PooledTest:
    """The last round's test of a pooled run: ``Y(i) = sum_r p_r X_r(i) >= rho_Y``.

    Rounds 1..k draw ``X_r = w_r + Z_r`` with ``Z_r ~ N(0, s_r^2)``, ``s_r`` round r's drawn
    noise scale (``sigma_tot / sqrt(p_r)`` grown by the grid's factor), for EVERY item and
    round; an item still in play after round k-1 is released iff it passes this test. The
    pooled noise ``sum_r p_r Z_r(i)`` is exactly N(0, s_Y^2) with ``s_Y^2 = sum_r p_r^2
    s_r^2`` (about sigma_tot^2, the whole run's precision), independent across items. (Both
    runners draw a round's noise only for the items in it: a run that caps once never brings
    an item back, so the other coordinates are never read; given the history the draws made
    are i.i.d. like the ones skipped, so the argument is unchanged.)

    Why a novel item passes with probability <= ``threshold_delta`` (D' = D + user v, T the
    t <= Delta_0 items only v holds): for every history, round r's weights of v's items are
    v's share of an l2-sensitivity-1 vector, so each lies in [0, min(1, h_r/sqrt(t))] (h_r the
    round's novel bound: 1 for MAD, b_max biased), even though w_r(i) depends on earlier noise,
    the item's own included. So, pointwise, the pooled mean of a novel item is at most
    ``H(t) = sum_r p_r min(1, h_r/sqrt(t)) <= 1`` and ``Y(i) <= H(t) + sum_r p_r Z_r(i)``:
    it passes only if its pooled noise exceeds ``rho_0 - H(t)``, probability
    ``1 - Phi((rho_0 - H(t))/s_Y)`` per item, independently, and
    ``rho_0 = max_{t <= Delta_0} H(t) + s_Y Phi^-1((1 - dt)^(1/t))`` makes the chance that
    any of the t passes at most dt. Being in play is a subset of these events (it can only
    lower the probability). Re-capping between rounds would break this (an item could enter a
    user's capped set late and which items reach the test would depend on their own noise):
    pooled runs cap once.

    Floating point: each ``X_r = fl(A_r) g`` with the integer ``A_r <= (w_r + Z_r)/g + 3/2``
    (see :class:`Round`), ``|fl(A_r) - A_r| <= 2^-53 |A_r|``, so the exact
    ``sum_r p_r X_r <= H(t) + Z_Y + 1.5 g + 2^-52 S``; the float dot product errs by at most
    ``gamma_k S`` (``k <= 64``: below ``2^-46 S``) and the right-hand side ``rho_Y +
    2^-40 fl(S)`` is computed with two roundings of positive numbers. With ``rho_Y = (rho_0 +
    2g)(1 + 2^-52)`` rounded up, a pass implies ``Z_Y >= rho_0 - H(t)`` (the 0.5 g left over
    also covers the float error of the weights themselves, ~1e-15 on values <= 1).
    """

    shares: tuple[float, ...]
    sigma: float  # s_Y, the pooled noise's standard deviation (rounded up)
    rho: float
    threshold_delta: float
    cap: int
    slack: float = POOLED_SLACK

    @classmethod
    def calibrate(
        cls, rounds: Sequence[Round], shares: Sequence[float], threshold_delta: float, cap: int
    ) -> PooledTest:
        shares = tuple(float(p) for p in shares)
        if len(shares) > MAX_POOLED_ROUNDS:
            raise InvalidParameterError(
                f"A pooled run takes at most {MAX_POOLED_ROUNDS} rounds; got {len(shares)}."
            )
        var = math.fsum((p * r.noise_scale) ** 2 for p, r in zip(shares, rounds, strict=True))
        s_y = math.nextafter(math.sqrt(var) * (1 + 2.0**-50), math.inf)

        def weight(t: np.ndarray) -> np.ndarray:  # H(t), non-increasing in t
            h = np.zeros(t.shape)
            for p, r in zip(shares, rounds, strict=True):
                h += p * np.minimum(1.0, r.h_scale / np.sqrt(t))
            return h

        def quantile(t: np.ndarray) -> np.ndarray:  # increasing in t
            return s_y * stats.norm.isf(-np.expm1(np.log1p(-threshold_delta) / t))

        rho0 = max_over_degrees(weight, quantile, cap)  # bounded memory for any cap
        rho = math.nextafter((rho0 + 2.0 * WEIGHT_GRID) * (1.0 + 2.0**-52), math.inf)
        return cls(shares, s_y, rho, threshold_delta, cap)

    def describe(self) -> dict[str, float]:
        return {"sigma": self.sigma, "rho": self.rho, "threshold_delta": self.threshold_delta}

    def passes(self, noisy: Sequence[Any], ops: Any) -> Any:
        """Element-wise: does each item's pooled statistic pass (see above)?"""
        y, s = pooled_statistic(noisy, self.shares, ops)
        return y >= self.rho + self.slack * s


@dataclass(frozen=True)
class Plan:
    """Every round of a run, fixed before the data is read."""

    budget: PrivacyBudget
    composition: str
    rounds: tuple[Round, ...]
    fractions: tuple[float, ...]
    delta_fractions: tuple[float, ...]
    gaussian_delta: float  # delta_g (0.0 under basic composition without a histogram)
    histogram_sigma: float | None = None  # noise of the degree histogram (auto cap)
    pooled: PooledTest | None = None  # the last round's pooled test, if any

    @property
    def histogram_event(self) -> dp_accounting.DpEvent | None:
        if self.histogram_sigma is None:
            return None
        return dp_accounting.GaussianDpEvent(self.histogram_sigma)

    @property
    def event(self) -> dp_accounting.DpEvent:
        events = [] if self.histogram_sigma is None else [self.histogram_event]
        return dp_accounting.ComposedDpEvent(events + [r.event for r in self.rounds])

    def spent(self) -> PrivacyBudget:
        """(epsilon, delta) of the whole run, from the accountant."""
        return PrivacyAccountant().compose(self.event).spent(self.gaussian_delta)

    def describe(self) -> dict[str, object]:
        """The plan's parameters, for a result's ``parameters``."""
        return {
            "composition": self.composition,
            "fractions": self.fractions,
            "delta_fractions": self.delta_fractions,
            "gaussian_delta": self.gaussian_delta,
            **({} if self.pooled is None else {"pooled": self.pooled.describe()}),
        }


def check_composition(
    caller: str,
    composition: str,
    rounds: int,
    fractions: Sequence[float] | None,
    delta_fractions: Sequence[float] | None,
    threshold_share: float,
    algorithm: str = "mad2r",
    *,
    pooled: bool = False,
) -> tuple[str, tuple[float, ...], tuple[float, ...]]:
    """Validate the composition options; returns (composition, fractions, delta_fractions)."""
    composition = check_choice(composition, "composition", caller, list(COMPOSITIONS))
    check_real(
        threshold_share, "threshold_share", caller, low=0.0, high=1.0, low_open=True, high_open=True
    )
    dflt_f, dflt_d = default_fractions(composition, rounds, algorithm, pooled)
    frac = dflt_f if fractions is None else check_fractions(fractions, "fractions", caller)
    if delta_fractions is None:
        dfrac = frac if (composition == "basic" and fractions is not None) else dflt_d
    else:
        dfrac = check_fractions(delta_fractions, "delta_fractions", caller)
    for name, parts in (("fractions", frac), ("delta_fractions", dfrac)):
        if len(parts) != rounds:
            raise InvalidParameterError(
                f"The {name!r} parameter of {caller} must have exactly {rounds} parts (one per "
                f"round, rounds={rounds}). Got {parts!r} instead."
            )
    return composition, frac, dfrac


def plan_rounds(
    budget: PrivacyBudget,
    *,
    cap: int,
    h_scales: Sequence[float],
    composition: str,
    fractions: Sequence[float],
    delta_fractions: Sequence[float],
    threshold_share: float = DEFAULT_THRESHOLD_SHARE,
    histogram_share: float = 0.0,
    pooled: bool = False,
) -> Plan:
    """Calibrate every round of a run (see the module docstring for both compositions).

    ``histogram_share > 0`` reserves that share of the budget for a Gaussian histogram of user
    degrees (l2 sensitivity 1: one user changes one bin by 1) released before the rounds, from
    which ``max_items_per_user="auto"`` picks the cap: under ``"gaussian"`` it joins the one
    composed Gaussian with precision share ``histogram_share`` (the rounds' shares shrink by
    1 - histogram_share); under ``"basic"`` it is (histogram_share epsilon, histogram_share
    delta)-DP by the analytic Gaussian and the rounds split the rest.

    ``pooled=True`` (gaussian composition only): the last round is tested on the pooled
    statistic of every round (:class:`PooledTest`), with ``delta_fractions[-1]`` of the
    threshold delta; its event is still ``ThresholdedGaussianDpEvent(sigma_k, dt_Y)``, so
    the accountant composes the run exactly: one Gaussian of precision ``1/sigma_tot^2`` plus
    ``sum_{r<k} dt_r + dt_Y``. Privacy: steps 1 and 3 of the module docstring are unchanged
    (the pooled test is a function of X = (X_1..X_k)); in step 2, the event that a novel item
    passes the pooled test has probability <= dt_Y (:class:`PooledTest`) instead of dt_k.
    """
    if pooled and composition != "gaussian":
        raise InvalidParameterError(
            "The pooled final test needs composition='gaussian' (it pools the rounds' noise "
            "into one Gaussian)."
        )
    h = histogram_share
    frac, dfrac = tuple(fractions), tuple(delta_fractions)
    if composition == "basic":
        rest = 1.0 - h
        parts = tuple(
            PrivacyBudget.derived(b.epsilon * rest, b.delta * rest, budget.unit)
            for b in budget.split(frac, dfrac)
        )
        rounds = tuple(Round.calibrate(b, cap, hs) for b, hs in zip(parts, h_scales, strict=True))
        sigma_h = gaussian_sigma(budget.epsilon * h, budget.delta * h) if h else None
        return Plan(budget, composition, rounds, frac, dfrac, budget.delta * h, sigma_h)
    delta_g = budget.delta * (1.0 - threshold_share)
    sigma_tot = gaussian_sigma(budget.epsilon, delta_g)
    dt_total = budget.delta - delta_g
    rounds = tuple(
        # sigma_r = sigma_tot / sqrt(p_r), so sum_r sigma_r^-2 = sigma_tot^-2
        Round.gaussian(sigma_tot / math.sqrt(p * (1 - h)) * (1 + 1e-12), dt_total * q, cap, hs)
        for p, q, hs in zip(frac, dfrac, h_scales, strict=True)
    )
    sigma_h = sigma_tot / math.sqrt(h) * (1 + 1e-12) if h else None
    if not pooled:
        return Plan(budget, composition, rounds, frac, dfrac, delta_g, sigma_h)
    # The last round releases nothing alone: its threshold delta pays for the pooled test.
    # Its own rho (calibrated as if it did) still sets MAD's tau and the removal floor.
    test = PooledTest.calibrate(rounds, frac, dt_total * dfrac[-1], cap)
    return Plan(budget, composition, rounds, frac, dfrac, delta_g, sigma_h, test)
