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

Privacy of ``"gaussian"`` (adding or removing one user v with novel items T; DESIGN.md "Tight
composition across rounds"). Analyse each round as releasing its whole extended noisy vector
X_r = w_r + N(0, sigma_r^2 I) (Alg. 1, Thm. 3.3's proof).
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
Safe noise (issue 12) changes neither step: X_r is released on the grid g = :data:`WEIGHT_GRID`
as ``(rint(w_r/g) + floor(Z/g + 1/2)) g``, a function of the Gaussian mechanism on the snapped
weights, whose l2 sensitivity ``1 + g sqrt(N)`` is matched by the noise scale ``sigma_r (1 + g
sqrt(N))`` (same noise multiplier, step 1); rho_r covers the snapping and the float sums, so a
novel item still crosses it with probability <= its textbook bound (step 2; :class:`Round`).
The accountant composes the rounds' :class:`~userdp.privacy.ThresholdedGaussianDpEvent` exactly
this way, so a selection composes with other Gaussian releases in one accountant.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import dp_accounting

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

__all__ = [
    "COMPOSITIONS",
    "WEIGHT_GRID",
    "WEIGHT_GRID_ITEMS",
    "Plan",
    "Round",
    "check_item_count",
    "default_fractions",
    "plan_rounds",
]

#: Public bound on the number of distinct items of a run (2^30, about 1.07e9; larger inputs
#: are refused, :func:`check_item_count`). The rounds' noisy weights are released on ONE
#: power-of-two grid fixed for this many coordinates (safe noise,
#: :func:`userdp.privacy.gaussian_on_grid`), so the grid depends on no data and every engine,
#: bucket and executor uses the same one. A larger bound would make the grid finer, closer to
#: the float resolution of the noise itself (at 2^30 and sigma = 40, |Z| <= 10 sigma, the grid
#: is still 2^16 of Z's ulps).
WEIGHT_GRID_ITEMS = 4**15
#: The grid: 2^-27 for the weights' l2 sensitivity 1 (snapping adds at most 2^-12 to it).
WEIGHT_GRID = grid_spacing(1.0, WEIGHT_GRID_ITEMS, "l2")


def check_item_count(n_items: int) -> None:
    """Refuse a run with more distinct items than :data:`WEIGHT_GRID_ITEMS` (its weight grid
    would not cover them)."""
    if n_items > WEIGHT_GRID_ITEMS:
        raise DataError(
            f"The input has {n_items} distinct items; partition selection supports at most "
            f"{WEIGHT_GRID_ITEMS} (2^30), the bound its safe noise grid is fixed for."
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
    composition: str, rounds: int, algorithm: str = "mad2r"
) -> tuple[tuple[float, ...], ...]:
    """(fractions, delta_fractions) for ``rounds`` rounds of ``algorithm``: the table, the
    papers' split for one or two rounds, else 5% spread over the early rounds (each 4x the one
    before) and 95% in the last."""
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
        }


def check_composition(
    caller: str,
    composition: str,
    rounds: int,
    fractions: Sequence[float] | None,
    delta_fractions: Sequence[float] | None,
    threshold_share: float,
    algorithm: str = "mad2r",
) -> tuple[str, tuple[float, ...], tuple[float, ...]]:
    """Validate the composition options; returns (composition, fractions, delta_fractions)."""
    composition = check_choice(composition, "composition", caller, list(COMPOSITIONS))
    check_real(
        threshold_share, "threshold_share", caller, low=0.0, high=1.0, low_open=True, high_open=True
    )
    dflt_f, dflt_d = default_fractions(composition, rounds, algorithm)
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
) -> Plan:
    """Calibrate every round of a run (see the module docstring for both compositions).

    ``histogram_share > 0`` reserves that share of the budget for a Gaussian histogram of user
    degrees (l2 sensitivity 1: one user changes one bin by 1) released before the rounds, from
    which ``max_items_per_user="auto"`` picks the cap: under ``"gaussian"`` it joins the one
    composed Gaussian with precision share ``histogram_share`` (the rounds' shares shrink by
    1 - histogram_share); under ``"basic"`` it is (histogram_share epsilon, histogram_share
    delta)-DP by the analytic Gaussian and the rounds split the rest.
    """
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
    return Plan(budget, composition, rounds, frac, dfrac, delta_g, sigma_h)
