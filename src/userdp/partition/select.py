"""Parallel partition-selection algorithms: Basic, DP-SIPS, MAD and MAD2R (local engine).

All follow the weight-and-threshold meta-algorithm (Chen et al. 2025, "Scalable Private
Partition Selection via Adaptive Weighting", Alg. 1): cap each user's set, compute weights with
bounded l2 and novel l-infinity sensitivity, add Gaussian noise, release the items of the round's
input whose noisy weight reaches the threshold rho.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import dp_accounting
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from userdp._validation import check_fractions, check_int, check_real
from userdp.data import Contributions, as_contributions
from userdp.exceptions import InvalidParameterError
from userdp.partition import _probe
from userdp.partition._hashing import salted_hash
from userdp.partition._local import cap_degrees, filter_pairs
from userdp.partition.result import SelectionDiagnostics, SelectionResult
from userdp.partition.weights import basic_weights, mad_weights
from userdp.privacy import (
    NoiseSource,
    PrivacyAccountant,
    PrivacyBudget,
    WeightAndThresholdDpEvent,
    gaussian_sigma,
    partition_threshold,
)

__all__ = ["basic", "dp_sips", "mad", "mad2r"]


# -- shared steps -------------------------------------------------------------------------------
def release_mask(noisy: np.ndarray, items: np.ndarray, threshold: float) -> np.ndarray:
    """Items released by a weight-and-threshold round (paper Alg. 1 line 8).

    Only codes present in the round's input ``items`` can pass, whatever their noise: releasing
    a code outside the round's union would not be covered by Thm. 3.3.
    """
    present = np.zeros(noisy.size, dtype=bool)
    present[items] = True
    return present & (noisy >= threshold)


def _budget(epsilon: float, delta: float, caller: str) -> PrivacyBudget:
    check_real(epsilon, "epsilon", caller, low=0.0, low_open=True, high_open=True)
    check_real(delta, "delta", caller, low=0.0, high=1.0, low_open=True, high_open=True)
    return PrivacyBudget(epsilon, delta)


@dataclass(frozen=True)
class _Round:
    """Noise scale and threshold of one weight-and-threshold round (Alg. 1 lines 1-2)."""

    budget: PrivacyBudget
    sigma: float
    rho: float
    h_scale: float
    cap: int

    @classmethod
    def calibrate(cls, budget: PrivacyBudget, cap: int, h_scale: float = 1.0) -> _Round:
        # line 1: sigma for (eps, delta/2) with l2 sensitivity 1 (Prop. 2.4)
        sigma = gaussian_sigma(budget.epsilon, budget.delta / 2)
        # line 2: rho = max_t h(t) + sigma Phi^-1((1 - delta/2)^(1/t))
        rho = partition_threshold(sigma, budget.delta, cap, h_scale)
        return cls(budget, sigma, rho, h_scale, cap)

    @property
    def event(self) -> WeightAndThresholdDpEvent:
        return WeightAndThresholdDpEvent(
            self.budget.epsilon, self.budget.delta, self.sigma, self.rho, self.cap
        )


class _Run:
    """Book-keeping common to every algorithm: input, noise, accountant, diagnostics."""

    def __init__(
        self,
        data: Any,
        caller: str,
        user_column: str,
        item_column: str,
        max_items_per_user: int,
        seed: int | None,
    ) -> None:
        self.start = time.perf_counter()
        self.cap = check_int(max_items_per_user, "max_items_per_user", caller, low=1)
        self.noise = NoiseSource(seed)
        self.data: Contributions = as_contributions(
            data, user_column=user_column, item_column=item_column
        )
        self.accountant = PrivacyAccountant()
        self.dropped: list[int] = []
        self.round_sizes: list[int] = []
        self._hashes: tuple[np.ndarray, np.ndarray] | None = None

    def capped(self, users: np.ndarray, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Cap every user's set with the run's secret salt (the same salt in every round)."""
        if self._hashes is None:  # hash each distinct user and item once per run
            salt = self.noise.salt
            self._hashes = (
                salted_hash(self.data.user_labels, salt),
                salted_hash(self.data.item_labels, salt),
            )
        u, i, dropped = cap_degrees(users, items, self.data.n_users, self.cap, *self._hashes)
        self.dropped.append(dropped)
        return u, i

    def release(
        self, rnd: _Round, weights: np.ndarray, items: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Noisy weights over every item code and the released mask (Alg. 1 lines 7-9).

        Codes absent from this round's input get pure noise (the w_ext of line 9), which later
        rounds may query; only items present in the round's input can be released. Composes
        the round into the accountant.
        """
        probe = _probe.current()
        if probe is None:
            noise = self.noise.gaussian(rnd.sigma, weights.size)
        else:  # tests only: record the weights, maybe substitute the noise
            labels = self.data.item_labels.to_pylist()
            present = np.unique(items)
            probe.weights.append({labels[c]: float(weights[c]) for c in present})
            if probe.noise is None:
                noise = self.noise.gaussian(rnd.sigma, weights.size)
            else:
                noise = np.asarray(probe.noise(len(self.round_sizes), labels, rnd.sigma), float)
        noisy = weights + noise
        selected = release_mask(noisy, items, rnd.rho)
        self.accountant.compose(rnd.event)
        self.round_sizes.append(int(selected.sum()))
        return noisy, selected

    def finish(
        self, selected: np.ndarray, algorithm: str, parameters: dict[str, Any], total: PrivacyBudget
    ) -> SelectionResult:
        spent = self.accountant.spent()
        if not total.covers(spent):  # pragma: no cover - a bug, never user input
            raise RuntimeError(f"{algorithm} spent {spent}, more than its budget {total}.")
        d = self.data
        values = d.item_values(np.flatnonzero(selected))
        # Code order is the input's order of first appearance, which depends on individual
        # users' rows: release the set in sorted order instead.
        try:
            values = values.take(pc.sort_indices(values))
        except pa.ArrowNotImplementedError:  # unsortable type: a random order reveals nothing
            values = values.take(pa.array(self.noise.permutation(len(values))))
        return SelectionResult(
            item_array=values,
            algorithm=algorithm,
            budget=spent,
            parameters=parameters,
            dp_event=dp_accounting.ComposedDpEvent(list(self.accountant.ledger)),
            diagnostics=SelectionDiagnostics(
                n_users=d.n_users,
                n_pairs=d.n_pairs,
                duplicates_dropped=d.duplicates_dropped,
                pairs_dropped_by_capping=tuple(self.dropped),
                round_sizes=tuple(self.round_sizes),
                seconds=time.perf_counter() - self.start,
            ),
        )


def _check_mad(caller: str, d_max: int | None, beta: float, max_items_per_user: int) -> int:
    """Validate MAD's parameters before any data is read; returns d_max (default min(50, cap))."""
    cap = check_int(max_items_per_user, "max_items_per_user", caller, low=1)
    if cap < 4:
        raise InvalidParameterError(
            f"{caller} needs max_items_per_user >= 4 (its privacy proof needs 4 <= d_max <= "
            f"max_items_per_user). Got max_items_per_user={cap!r}; use 'basic' or 'dp-sips' for "
            "smaller caps."
        )
    check_real(beta, "beta", caller, low=0.0)
    if d_max is None:
        return min(50, cap)
    check_int(d_max, "d_max", caller, low=4)
    if d_max > cap:
        raise InvalidParameterError(
            f"The 'd_max' parameter of {caller} must be an int in the range "
            f"[4, max_items_per_user={cap}]. Got {d_max!r} instead."
        )
    return d_max


def _check_mad2r(
    caller: str,
    epsilon: float,
    delta: float,
    fractions: Sequence[float],
    max_items_per_user: int,
    d_max: int | None,
    beta: float,
    c_lb: float,
    c_ub: float,
    b_min: float,
    b_max: float,
) -> tuple[PrivacyBudget, tuple[float, ...], int]:
    """Validate MAD2R's parameters (both engines); returns the budget, fractions and d_max."""
    total = _budget(epsilon, delta, caller)
    frac = check_fractions(fractions, "fractions", caller)
    if len(frac) != 2:
        raise InvalidParameterError(
            f"The 'fractions' parameter of {caller} must have exactly 2 parts (one per round). "
            f"Got {fractions!r} instead."
        )
    d_max = _check_mad(caller, d_max, beta, max_items_per_user)
    check_real(c_lb, "c_lb", caller, low=0.0)
    check_real(c_ub, "c_ub", caller, low=0.0)
    check_real(b_min, "b_min", caller, low=0.5, high=1.0)
    check_real(b_max, "b_max", caller, low=1.0)
    return total, frac, d_max


def _mad2r_parameters(
    cap: int,
    frac: tuple[float, ...],
    d_max: int,
    beta: float,
    c_lb: float,
    c_ub: float,
    b_min: float,
    b_max: float,
    recap: bool,
    *rounds: tuple[_Round, float],
) -> dict[str, Any]:
    """The ``parameters`` of a MAD2R result (both engines): inputs plus each round's sigma,
    rho and tau."""
    return {
        "max_items_per_user": cap,
        "fractions": frac,
        "d_max": d_max,
        "beta": beta,
        "c_lb": c_lb,
        "c_ub": c_ub,
        "b_min": b_min,
        "b_max": b_max,
        "recap": recap,
        "rounds": [{"sigma": r.sigma, "rho": r.rho, "tau": tau} for r, tau in rounds],
    }


# -- algorithms ---------------------------------------------------------------------------------
def basic(
    data: Any,
    *,
    epsilon: float,
    delta: float,
    max_items_per_user: int = 100,
    seed: int | None = None,
    user_column: str = "user",
    item_column: str = "item",
) -> SelectionResult:
    """Basic weighting in one weight-and-threshold round (paper Alg. 1 with Alg. 5).

    Parameters
    ----------
    data : Contributions, table, DataFrame, (users, items) or iterable of pairs
        The (user, item) contributions; duplicates are dropped.
    epsilon : float
        Privacy parameter in (0, inf).
    delta : float
        Privacy parameter in (0, 1).
    max_items_per_user : int, default=100
        Degree cap Delta_0: a larger set keeps its Delta_0 items of smallest keyed hash of
        (secret salt, user, item), a pseudo-random subset that the Spark engine reproduces
        for the same seed.
    seed : int or None, default=None
        ``None`` draws noise from OS entropy. A fixed seed is for tests and reproducible
        benchmarks only.
    user_column, item_column : str
        Column names for tabular input.

    Returns
    -------
    SelectionResult

    Privacy
    -------
    (epsilon, delta)-DP for adding/removing one user: l2 sensitivity 1 and novel l-infinity
    1/sqrt(t) (Thm. 3.3).

    Examples
    --------
    >>> pairs = [(f"u{u}", "common") for u in range(2000)]
    >>> basic(pairs, epsilon=1.0, delta=1e-5, seed=0).items
    ['common']
    """
    total = _budget(epsilon, delta, "basic")
    run = _Run(data, "basic", user_column, item_column, max_items_per_user, seed)
    d = run.data
    users, items = run.capped(d.users, d.items)
    rnd = _Round.calibrate(total, run.cap)
    weights = basic_weights(users, items, d.n_users, d.n_items)
    _, selected = run.release(rnd, weights, items)
    params = {"max_items_per_user": run.cap, "sigma": rnd.sigma, "rho": rnd.rho}
    return run.finish(selected, "basic", params, total)


def dp_sips(
    data: Any,
    *,
    epsilon: float,
    delta: float,
    fractions: Sequence[float] = (0.1, 0.9),
    max_items_per_user: int = 100,
    recap: bool = True,
    seed: int | None = None,
    user_column: str = "user",
    item_column: str = "item",
) -> SelectionResult:
    """DP-SIPS (Swanberg et al. 2023): Basic over rounds on the items not yet released.

    Round r gets ``fractions[r]`` of epsilon and of delta; items released in earlier rounds are
    removed from every user's set before the round.

    Parameters
    ----------
    fractions : sequence of float, default=(0.1, 0.9)
        Budget split over rounds (positive, summing to 1). The paper also uses
        (0.05, 0.15, 0.8).
    recap : bool, default=True
        Re-sample each user's degree cap in every round from the items the user still has (see
        :func:`mad2r`); ``False`` caps once and only removes items in later rounds.

    Other parameters are as in :func:`basic`.

    Privacy
    -------
    Each round is (eps_r, delta_r)-DP given the earlier released sets (a post-processing of
    them picks the items to remove); basic composition gives (epsilon, delta).
    """
    total = _budget(epsilon, delta, "dp_sips")
    parts = total.split(check_fractions(fractions, "fractions", "dp_sips"))
    run = _Run(data, "dp_sips", user_column, item_column, max_items_per_user, seed)
    d = run.data
    found = np.zeros(d.n_items, dtype=bool)
    users, items = run.capped(d.users, d.items)
    rounds = []
    for r, part in enumerate(parts):
        if r > 0:
            if recap:
                users, items = run.capped(*filter_pairs(d.users, d.items, found))
            else:
                users, items = filter_pairs(users, items, found)
        rnd = _Round.calibrate(part, run.cap)
        weights = basic_weights(users, items, d.n_users, d.n_items)
        _, selected = run.release(rnd, weights, items)
        found |= selected
        rounds.append({"sigma": rnd.sigma, "rho": rnd.rho})
    params = {
        "max_items_per_user": run.cap,
        "fractions": tuple(fractions),
        "recap": recap,
        "rounds": rounds,
    }
    return run.finish(found, "dp-sips", params, total)


def mad(
    data: Any,
    *,
    epsilon: float,
    delta: float,
    max_items_per_user: int = 100,
    d_max: int | None = None,
    beta: float = 2.0,
    seed: int | None = None,
    user_column: str = "user",
    item_column: str = "item",
) -> SelectionResult:
    """MaxAdaptiveDegree in one weight-and-threshold round (paper Alg. 3, unbiased).

    Parameters
    ----------
    d_max : int or None, default=None
        Largest set size that reroutes weight adaptively; 4 <= d_max <= max_items_per_user.
        ``None`` means min(50, max_items_per_user), the paper's 50 where the cap allows.
    beta : float, default=2.0
        Adaptive threshold tau = rho + beta * sigma (so tau >= 1, as the proofs need).

    Other parameters are as in :func:`basic`.

    Privacy
    -------
    Same sensitivities as Basic (Cor. 5.2): l2 <= 1, novel l-infinity 1/sqrt(t); same sigma
    and rho; (epsilon, delta)-DP. Every item's weight is at least min(Basic weight, tau)
    (Thm. 6.1).
    """
    total = _budget(epsilon, delta, "mad")
    d_max = _check_mad("mad", d_max, beta, max_items_per_user)
    run = _Run(data, "mad", user_column, item_column, max_items_per_user, seed)
    d = run.data
    users, items = run.capped(d.users, d.items)
    rnd = _Round.calibrate(total, run.cap)
    tau = rnd.rho + beta * rnd.sigma
    weights = mad_weights(users, items, d.n_users, d.n_items, tau=tau, d_max=d_max)
    _, selected = run.release(rnd, weights, items)
    params = {
        "max_items_per_user": run.cap,
        "d_max": d_max,
        "beta": beta,
        "sigma": rnd.sigma,
        "rho": rnd.rho,
        "tau": tau,
    }
    return run.finish(selected, "mad", params, total)


def mad2r(
    data: Any,
    *,
    epsilon: float,
    delta: float,
    fractions: Sequence[float] = (0.1, 0.9),
    max_items_per_user: int = 100,
    d_max: int | None = None,
    beta: float = 2.0,
    c_lb: float = 1.0,
    c_ub: float = 3.0,
    b_min: float = 0.5,
    b_max: float = 2.0,
    recap: bool = True,
    seed: int | None = None,
    user_column: str = "user",
    item_column: str = "item",
) -> SelectionResult:
    """MAD in two rounds, biasing round 2 with round 1's noisy weights (paper Alg. 4).

    Round 1 runs unbiased MAD with (eps_1, delta_1). Round 2 removes the items released in
    round 1 and the items whose upper confidence bound ``w1~ + c_ub sigma_1`` is below rho_2,
    biases items with a large lower bound ``w_lb = max(0, w1~ - c_lb sigma_1)`` by
    ``b = min(1, rho_2 / w_lb)``, and runs biased MAD with (eps_2, delta_2) and
    h(t) = b_max/sqrt(t). The noisy round-1 weights are used internally and never returned.

    .. note:: Erratum
       Alg. 4 line 4 prints ``delta`` inside rho_1; each round uses its own delta_r, as the
       privacy proof (two invocations of Thm. 3.3) requires.

    Parameters
    ----------
    fractions : sequence of two floats, default=(0.1, 0.9)
        Split of epsilon and delta between the rounds.
    d_max, beta : see :func:`mad`.
    c_lb, c_ub : float, default=1.0, 3.0
        Confidence multipliers (>= 0) of the round-1 lower/upper bounds.
    b_min, b_max : float, default=0.5, 2.0
        Bias limits, 0.5 <= b_min <= 1 <= b_max.
    recap : bool, default=True
        Round 2 re-samples each user's cap from ``S_u`` minus the removed items, instead of
        removing them from the round-1 capped set. Privacy argument: the removed set R and the
        biases are functions of round 1's (analysed-as-released) output w_ext, so for each fixed
        value of it, the map S -> {Cap(S_u minus R)} (same salt, each user on its own) sends
        neighbouring inputs to neighbouring inputs with every degree <= max_items_per_user; round
        2 is then an ordinary weight-and-threshold run, (eps_2, delta_2)-DP by Thm. 3.3, and
        adaptive composition gives (epsilon, delta) exactly as for capping once. Items a user
        loses to round 1 free room for others, which raises output on skewed data.

    Other parameters are as in :func:`basic`.

    Privacy
    -------
    (eps_1 + eps_2, delta_1 + delta_2)-DP by Thm. 5.1 (basic composition of two
    weight-and-threshold rounds).
    """
    caller = "mad2r"
    total, frac, d_max = _check_mad2r(
        caller, epsilon, delta, fractions, max_items_per_user, d_max, beta, c_lb, c_ub, b_min, b_max
    )
    run = _Run(data, caller, user_column, item_column, max_items_per_user, seed)
    b1, b2 = total.split(frac)
    d = run.data

    # Round 1: unbiased MAD (lines 1-7).
    users, items = run.capped(d.users, d.items)
    r1 = _Round.calibrate(b1, run.cap)
    tau1 = r1.rho + beta * r1.sigma
    w1 = mad_weights(users, items, d.n_users, d.n_items, tau=tau1, d_max=d_max)
    noisy1, found = run.release(r1, w1, items)

    # Round 2: biased MAD on what is left (lines 8-17).
    r2 = _Round.calibrate(b2, run.cap, h_scale=b_max)
    w_lb = np.maximum(0.0, noisy1 - c_lb * r1.sigma)  # line 10
    low = noisy1 + c_ub * r1.sigma < r2.rho  # lines 11-12
    removed = found | low
    del noisy1
    if recap:
        users, items = run.capped(*filter_pairs(d.users, d.items, removed))
    else:
        users, items = filter_pairs(users, items, removed)  # line 13
    biases = np.ones(d.n_items)
    np.divide(r2.rho, w_lb, out=biases, where=w_lb > r2.rho)  # line 14: min(1, rho_2/w_lb)
    tau2 = r2.rho + beta * r2.sigma
    w2 = mad_weights(
        users,
        items,
        d.n_users,
        d.n_items,
        tau=tau2,
        d_max=d_max,
        biases=biases,
        b_min=b_min,
        b_max=b_max,
    )
    _, selected2 = run.release(r2, w2, items)
    found |= selected2

    params = _mad2r_parameters(
        run.cap, frac, d_max, beta, c_lb, c_ub, b_min, b_max, recap, (r1, tau1), (r2, tau2)
    )
    return run.finish(found, caller, params, total)
