"""The accountant: a ledger that composes every release of a run.

Approximate-DP events (userdp's weight-and-threshold rounds) and pure-DP events (Laplace, the
exponential mechanism) compose by basic composition,
which is what the partition-selection papers prove (Chen et al. 2025, Thm. 5.1; DP-SIPS).
Gaussian events compose exactly as one Gaussian (``sigma_total^-2 = sum sigma_i^-2``) and are
converted to (epsilon, delta) with dp-accounting's analytic Gaussian at a delta the caller names.

Composition assumes independent noise, which a repeated seed breaks: two releases seeded alike
draw the same noise, and differencing them cancels it (the difference of two counts over
neighbouring data is then exact). So the accountant also keeps the seeds of the seeded releases
composed into it, and refuses a release whose seed it already holds: a seed may be used once per
accountant.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import dp_accounting
import numpy as np

from userdp._validation import check_int
from userdp.exceptions import BudgetExceededError, InvalidParameterError, UnsupportedEventError
from userdp.privacy.budget import PrivacyBudget
from userdp.privacy.events import (
    ExponentialMechanismDpEvent,
    LaplaceThresholdDpEvent,
    ThresholdedGaussianDpEvent,
    WeightAndThresholdDpEvent,
)

__all__ = ["Cost", "PrivacyAccountant", "event_cost"]


@dataclass(frozen=True)
class Cost:
    """What a release costs as the accountant composes it: a basic-composition part
    (``epsilon``, ``delta``, thresholded Gaussians' threshold deltas included) and ``precision``,
    the sum of ``sigma^-2`` over its Gaussian parts (l2 sensitivity 1), which compose as one
    Gaussian. Costs add (``a + b``); budget planners split a budget in these units."""

    epsilon: float = 0.0
    delta: float = 0.0
    precision: float = 0.0

    def __add__(self, other: Cost) -> Cost:
        return Cost(
            self.epsilon + other.epsilon,
            self.delta + other.delta,
            self.precision + other.precision,
        )

    def times(self, count: int) -> Cost:
        return Cost(self.epsilon * count, self.delta * count, self.precision * count)


def _cost_of(event: dp_accounting.DpEvent) -> Cost:
    """Cost of one event; raises UnsupportedEventError naming the first unsupported sub-event."""
    match event:
        case dp_accounting.NoOpDpEvent():
            return Cost()
        case (
            WeightAndThresholdDpEvent(epsilon=eps, delta=delta)
            | LaplaceThresholdDpEvent(epsilon=eps, delta=delta)
        ):
            return Cost(eps, delta)
        case ExponentialMechanismDpEvent(epsilon=eps):
            return Cost(eps)
        case dp_accounting.LaplaceDpEvent(noise_multiplier=b):
            # Laplace noise of scale b on a query of l1 sensitivity 1 is (1/b)-DP.
            return Cost(math.inf if b == 0 else 1.0 / b)
        case ThresholdedGaussianDpEvent(noise_multiplier=z, threshold_delta=dt):
            # Gaussian part joins the one composed Gaussian; the threshold failure adds to delta.
            return Cost(delta=dt, precision=math.inf if z == 0 else 1.0 / z**2)
        case dp_accounting.GaussianDpEvent(noise_multiplier=z):
            return Cost(precision=math.inf if z == 0 else 1.0 / z**2)
        case dp_accounting.SelfComposedDpEvent(event=inner, count=count):
            return _cost_of(inner).times(count)
        case dp_accounting.ComposedDpEvent(events=events):
            total = Cost()
            for e in events:
                total = total + _cost_of(e)
            return total
        case _:
            raise UnsupportedEventError(
                f"PrivacyAccountant cannot account for {type(event).__name__}: {event!r}."
            )


def event_cost(event: dp_accounting.DpEvent) -> Cost:
    """The :class:`Cost` of ``event`` as the accountant composes it, for planning a budget split
    around a sub-release before it runs. Raises
    :class:`~userdp.exceptions.UnsupportedEventError` naming an event it cannot account for."""
    return _cost_of(event)


class PrivacyAccountant:
    """Compose the releases of a run and check them against an optional total budget.

    Parameters
    ----------
    budget : PrivacyBudget or None, default=None
        If given, ``compose`` raises :class:`BudgetExceededError` (and records nothing) when the
        basic-composition spend would exceed it.

    Notes
    -----
    A seeded release passes its ``seed`` to :meth:`check` and :meth:`compose`; a seed the
    accountant already holds is refused (:class:`InvalidParameterError`), since the same seed
    draws the same noise and differencing the two releases cancels it. ``seed=None`` (fresh OS
    entropy) is never refused.

    Examples
    --------
    >>> from userdp.privacy import PrivacyAccountant, PrivacyBudget, WeightAndThresholdDpEvent
    >>> acc = PrivacyAccountant(PrivacyBudget(1.0, 1e-5))
    >>> e = WeightAndThresholdDpEvent(0.5, 5e-6, 4.0, 20.0, 100)
    >>> acc.compose(e).compose(e).spent().epsilon
    1.0
    >>> acc = PrivacyAccountant().compose(e, seed=11)
    >>> acc.check(e, seed=11, caller="my_release")
    Traceback (most recent call last):
    ...
    userdp.exceptions.InvalidParameterError: The 'seed' parameter of my_release must not repeat ...
    """

    def __init__(self, budget: PrivacyBudget | None = None) -> None:
        self.budget = budget
        self._cost = Cost()
        self._ledger: list[dp_accounting.DpEvent] = []
        self._seeds: set[int] = set()

    @property
    def ledger(self) -> tuple[dp_accounting.DpEvent, ...]:
        """Every composed event, in order."""
        return tuple(self._ledger)

    @property
    def seeds(self) -> frozenset[int]:
        """The seeds of the seeded releases composed so far (each may be used once)."""
        return frozenset(self._seeds)

    @property
    def event(self) -> dp_accounting.DpEvent:
        """The whole ledger as one ``ComposedDpEvent``."""
        return dp_accounting.ComposedDpEvent(list(self._ledger))

    def _fits(self, cost: Cost) -> bool:
        """Whether ``cost`` stays within the budget, its Gaussian part included.

        The Gaussian part is converted at the largest delta the budget leaves after the other
        events' deltas, which gives the smallest epsilon it can cost: the cost fits if that does.
        """
        b = self.budget
        if b is None:
            return True
        if cost.precision == 0:
            return b.fits(cost.epsilon, cost.delta)
        left = b.delta - cost.delta
        if left <= 0 or math.isinf(cost.precision):
            return False
        sigma = 1.0 / math.sqrt(cost.precision)
        return b.fits(cost.epsilon + dp_accounting.get_epsilon_gaussian(sigma, left), b.delta)

    def check(
        self,
        event: dp_accounting.DpEvent,
        count: int = 1,
        *,
        seed: int | None = None,
        caller: str = "PrivacyAccountant.check",
    ) -> None:
        """Raise :class:`BudgetExceededError` if composing ``event`` would exceed the budget,
        or :class:`InvalidParameterError` if ``seed`` is one a composed release already used.

        Lets a release refuse before any work: call it with the release's planned event and
        its seed (None when unseeded); ``caller`` names the release in the error.
        """
        self._check_seed(seed, caller)
        cost = self._cost + _cost_of(event).times(count)
        if not self._fits(cost):
            raise BudgetExceededError(
                f"Composing {type(event).__name__} would go over the budget {self.budget} "
                f"(already spent: {self._describe()})."
            )

    def compose(
        self,
        event: dp_accounting.DpEvent,
        count: int = 1,
        *,
        seed: int | None = None,
        caller: str = "PrivacyAccountant.compose",
    ) -> PrivacyAccountant:
        """Add ``event`` (``count`` times) to the ledger, and ``seed`` to :attr:`seeds`; returns
        self.

        Raises :class:`BudgetExceededError` when the total, Gaussian events included, would
        exceed the budget, and :class:`InvalidParameterError` when ``seed`` is already held;
        either way it records nothing.
        """
        self.check(event, count, seed=seed, caller=caller)
        self._cost = self._cost + _cost_of(event).times(count)
        self._ledger.extend([event] * count)
        if seed is not None:
            self._seeds.add(int(seed))
        return self

    def _check_seed(self, seed: int | None, caller: str) -> None:
        """Refuse a seed already held: the same seed repeats the noise of an earlier release."""
        if seed is None:
            return
        if check_int(seed, "seed", caller, low=0) in self._seeds:
            raise InvalidParameterError(
                f"The 'seed' parameter of {caller} must not repeat the seed of a release "
                f"already charged to its accountant. Got {seed!r} instead. The same seed draws "
                "the same noise, so differencing the two releases cancels it: use a different "
                "seed per release, or seed=None."
            )

    def _describe(self) -> str:
        c = self._cost
        text = f"basic epsilon={c.epsilon:g}, delta={c.delta:g}"
        if c.precision:
            text += f", Gaussian noise multiplier {1.0 / math.sqrt(c.precision):g}"
        return text

    def spent(
        self, gaussian_delta: float | None = None, *, accounting: str = "exact"
    ) -> PrivacyBudget:
        """Total (epsilon, delta) spent so far.

        Basic composition over approximate-DP events, plus the composition of all Gaussian
        events converted at ``gaussian_delta``. When the ledger holds Gaussian events,
        ``gaussian_delta`` is required, except with a total budget: then the default converts
        them at the delta the budget leaves after the other events' deltas, the conversion
        the budget check uses, so ``spent()`` is within the total whenever the check passed.

        ``accounting`` chooses how the Gaussian events compose: ``"exact"`` (default) treats
        them as one Gaussian with ``sigma^-2 = sum_i sigma_i^-2``, which is exact for
        Gaussians; ``"pld"`` and ``"rdp"`` run dp-accounting's PLD and RDP accountants on the
        same events instead (PLD agrees with exact up to its discretisation, RDP is looser).
        The latter two need a ledger of Gaussian events only.
        """
        if accounting not in ("exact", "pld", "rdp"):
            raise InvalidParameterError(
                "The 'accounting' parameter of PrivacyAccountant.spent must be one of "
                f"['exact', 'pld', 'rdp']. Got {accounting!r} instead."
            )
        eps, delta = self._cost.epsilon, self._cost.delta
        if self._cost.precision > 0:
            if gaussian_delta is None and self.budget is not None:
                gaussian_delta = self.budget.delta - delta
            if gaussian_delta is None or not 0 < gaussian_delta < 1:
                raise InvalidParameterError(
                    "The 'gaussian_delta' parameter of PrivacyAccountant.spent must be a float in "
                    f"the range (0, 1) when the ledger holds Gaussian events. Got "
                    f"{gaussian_delta!r} instead."
                )
            if accounting == "exact":
                sigma = 1.0 / math.sqrt(self._cost.precision)
                # brentq probes epsilons where log1p(-exp(0)) = -inf, harmlessly (huge budgets)
                with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
                    eps += dp_accounting.get_epsilon_gaussian(sigma, gaussian_delta)
            else:
                eps += self._dp_accounting_epsilon(accounting, gaussian_delta)
            delta += gaussian_delta
        unit = self.budget.unit if self.budget else "user"
        return PrivacyBudget.derived(max(eps, 1e-300), delta, unit)

    def _dp_accounting_epsilon(self, accounting: str, delta: float) -> float:
        if self._cost.epsilon or self._cost.delta:
            raise UnsupportedEventError(
                f"accounting={accounting!r} composes Gaussian events only; this ledger also "
                "holds approximate-DP events (use accounting='exact')."
            )
        if accounting == "pld":
            acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
        else:
            acc = dp_accounting.rdp.RdpAccountant()
        acc.compose(self.event)
        return float(acc.get_epsilon(delta))
