"""Privacy budgets: a validated, immutable ``(epsilon, delta)`` pair that can be split."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

from userdp._validation import check_fractions, check_real, warn
from userdp.exceptions import BudgetExceededError, InvalidParameterError, UnusualBudgetWarning

__all__ = [
    "MAX_EPSILON",
    "PrivacyBudget",
    "approximate_budget",
    "check_epsilon_limit",
    "format_delta",
]

_TOL = 1e-12

#: The largest epsilon a budget may hold. Gaussian noise for an epsilon far beyond it cannot be
#: calibrated in floating point (the analytic-Gaussian condition loses every digit between 1e150
#: and 1e170), and every release splits its budget into shares, so the limit sits well below
#: that, where any share of it still calibrates. Above ~10 the guarantee is already very weak.
MAX_EPSILON = 1e100


def check_epsilon_limit(epsilon: float, caller: str) -> None:
    """Refuse an epsilon above :data:`MAX_EPSILON`, naming ``caller``'s parameter."""
    if epsilon > MAX_EPSILON:
        raise InvalidParameterError(
            f"The 'epsilon' parameter of {caller} must be at most {MAX_EPSILON:g}: noise for a "
            "larger epsilon cannot be calibrated in floating point (above ~10 the guarantee is "
            f"already very weak). Got {epsilon!r} instead."
        )


def approximate_budget(epsilon: float, delta: float, caller: str) -> PrivacyBudget:
    """An ``(epsilon, delta)`` budget with ``delta > 0`` (Gaussian noise), validated under
    ``caller``'s name: epsilon in (0, :data:`MAX_EPSILON`], delta in (0, 1)."""
    eps = check_real(epsilon, "epsilon", caller, low=0.0, low_open=True, high_open=True)
    check_epsilon_limit(eps, caller)
    check_real(delta, "delta", caller, low=0.0, high=1.0, low_open=True, high_open=True)
    return PrivacyBudget(epsilon, delta)


def format_delta(delta: float) -> str:
    """``delta`` for messages: ``:g`` (6 digits), unless that rounds it to 0 or 1.

    ``0.9999999:g`` prints ``1``, which reads as "no guarantee at all" for a value the user
    typed below 1; such values keep enough digits to read back exactly.

    Examples
    --------
    >>> format_delta(1e-5), format_delta(0.9999999)
    ('1e-05', '0.9999999')
    """
    short = f"{delta:g}"
    if float(short) in (0.0, 1.0) and delta not in (0.0, 1.0):
        return repr(float(delta))
    return short


@dataclass(frozen=True)
class PrivacyBudget:
    """An ``(epsilon, delta)`` differential-privacy budget for one privacy unit.

    Parameters
    ----------
    epsilon : float
        Privacy-loss bound, in ``(0, inf)``.
    delta : float, default=0.0
        Failure probability, in ``[0, 1)``.
    unit : str, default="user"
        The privacy unit: neighbouring datasets differ by adding or removing all records of
        one ``unit``.

    Examples
    --------
    >>> b = PrivacyBudget(epsilon=1.0, delta=1e-5)
    >>> [round(p.epsilon, 3) for p in b.split([0.1, 0.9])]
    [0.1, 0.9]
    >>> (b - b.split([0.1, 0.9])[0]).epsilon
    0.9
    """

    epsilon: float
    delta: float = 0.0
    unit: str = "user"

    def __post_init__(self) -> None:
        eps = check_real(
            self.epsilon, "epsilon", "PrivacyBudget", low=0.0, low_open=True, high_open=True
        )
        delta = check_real(self.delta, "delta", "PrivacyBudget", low=0.0, high=1.0, high_open=True)
        check_epsilon_limit(eps, "PrivacyBudget")
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(self, "delta", delta)
        if eps > 20:
            warn(
                f"epsilon={eps!r} gives a very weak guarantee; values above ~10 are unusual.",
                UnusualBudgetWarning,
            )
        if delta > 1e-3:
            warn(
                f"delta={delta!r} is large; delta is usually far below 1/(number of users).",
                UnusualBudgetWarning,
            )

    def split(
        self, fractions: Sequence[float], delta_fractions: Sequence[float] | None = None
    ) -> tuple[PrivacyBudget, ...]:
        """Split into parts whose basic composition is this budget.

        ``fractions`` apply to epsilon and, unless ``delta_fractions`` is given, to delta.
        """
        eps_f = check_fractions(fractions, "fractions", "PrivacyBudget.split")
        del_f = (
            eps_f
            if delta_fractions is None
            else check_fractions(delta_fractions, "delta_fractions", "PrivacyBudget.split")
        )
        if len(del_f) != len(eps_f):
            raise InvalidParameterError(
                "The 'delta_fractions' parameter of PrivacyBudget.split must have as many "
                f"parts as 'fractions' ({len(eps_f)}). Got {len(del_f)} instead."
            )
        return tuple(
            PrivacyBudget.derived(self.epsilon * fe, self.delta * fd, self.unit)
            for fe, fd in zip(eps_f, del_f, strict=True)
        )

    def __sub__(self, other: PrivacyBudget) -> PrivacyBudget:
        """Remaining budget after spending ``other`` (basic composition)."""
        eps = self.epsilon - other.epsilon
        delta = self.delta - other.delta
        if eps <= _TOL * max(1.0, self.epsilon) or delta < -_TOL:
            raise BudgetExceededError(
                f"Spending (epsilon={other.epsilon!r}, delta={other.delta!r}) leaves nothing of "
                f"(epsilon={self.epsilon!r}, delta={self.delta!r})."
            )
        return PrivacyBudget.derived(eps, max(delta, 0.0), self.unit)

    @classmethod
    def derived(cls, epsilon: float, delta: float, unit: str = "user") -> PrivacyBudget:
        """A budget computed from one the caller chose (a split, a total spent): validated, but
        without repeating the unusual-value warnings the caller already saw."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return cls(epsilon, delta, unit)

    def fits(self, epsilon: float, delta: float) -> bool:
        """True if spending (epsilon, delta) stays within this budget (up to float round-off)."""
        return epsilon <= self.epsilon * (1 + 1e-9) and delta <= self.delta * (1 + 1e-9)

    def covers(self, other: PrivacyBudget) -> bool:
        """True if ``other`` fits in this budget (up to float round-off)."""
        return self.fits(other.epsilon, other.delta)

    def __str__(self) -> str:
        return f"(epsilon={self.epsilon:g}, delta={format_delta(self.delta)}) per {self.unit}"
