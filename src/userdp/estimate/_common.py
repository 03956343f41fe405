"""What every release of :mod:`userdp.estimate` shares: the parameter rules, the accounting
preamble, the record preamble, the two ways of bounding a user's contribution, and the result
base.

The budget convention
---------------------
- Functions take ``epsilon=`` as a keyword; estimators take it in the constructor. A release
  that needs a ``delta`` (Gaussian noise: :class:`~userdp.estimate.WeightedERM`) takes
  ``delta=`` the same way; the pure-DP releases (Laplace and exponential mechanisms: the means,
  quantiles and label-private regression) take no ``delta`` and report ``delta = 0``.
- Every entry point accepts ``accountant=``: a shared
  :class:`~userdp.privacy.PrivacyAccountant`, charged with the release's ``dp_event``. When
  the accountant holds a total budget, the release's planned cost (computed from the
  parameters alone) is checked first, and a release that would go over it raises
  :class:`~userdp.exceptions.BudgetExceededError` before any data is read or noise drawn.
- Results expose ``budget`` (a :class:`~userdp.privacy.PrivacyBudget`), ``dp_event`` and
  ``summary()``; fitted estimators ``budget_``, ``dp_event_`` and ``summary()``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Literal

import dp_accounting
import numpy as np

from userdp._validation import MIN_EPSILON
from userdp.estimate.weighting import (
    best_limit_h,
    best_smooth_h,
    check_bounds,
    check_records,
    factorize_users,
    limit_mask,
    record_keys,
    smooth_weights,
)
from userdp.exceptions import DataError, InvalidParameterError
from userdp.privacy.accountant import PrivacyAccountant
from userdp.privacy.budget import PrivacyBudget, format_delta
from userdp.privacy.calibrate import laplace_scale
from userdp.privacy.checks import ACCOUNTANT, check_accountant
from userdp.privacy.noise import NoiseSource

__all__ = [
    "ACCOUNTANT",
    "EPSILON",
    "LIMIT_H",
    "NOISE_VARIANCE",
    "PUBLIC_USER_SIZES",
    "SAMPLE_LIMIT",
    "SEED",
    "SELECTION_SHARE",
    "SMOOTH",
    "SMOOTH_H",
    "Bounding",
    "Ledger",
    "Method",
    "Records",
    "Release",
    "bounds_rule",
    "budget_text",
    "check_accountant",
    "laplace_event",
    "laplace_release",
    "read_records",
    "require_users",
]

Method = Literal["weighted", "sample-limit"]


# -- parameter rules shared by the tables --------------------------------------------------------
def bounds_rule(value: object, name: str, caller: str) -> None:
    """Rule for a public value range ``(lower, upper)`` (:func:`check_bounds`, named ``name``)."""
    try:
        check_bounds(value, caller)
    except InvalidParameterError as err:
        raise InvalidParameterError(str(err).replace("'bounds'", repr(name))) from err


EPSILON: dict[str, Any] = {
    "low": MIN_EPSILON,
    "high": math.inf,
    "high_open": True,
    "metavar": "E",
    "help": "Privacy-loss bound epsilon of the whole release, a number > 0 (for example 1).",
}
SELECTION_SHARE: dict[str, Any] = {
    "low": 0.0,
    "high": 1.0,
    "low_open": True,
    "high_open": True,
    "metavar": "F",
    "help": "Share of epsilon spent on choosing the threshold h privately, in (0, 1).",
}
PUBLIC_USER_SIZES: dict[str, Any] = {
    "bool": True,
    "help": "Treat the number of rows of each user as public, as the paper does (neighbours "
    "replace one user's values): the whole budget goes to the estimate. Default: sizes are "
    "private (neighbours add or remove a user) and part of the budget chooses h.",
}
SEED: dict[str, Any] = {
    "int": True,
    "low": 0,
    "none": True,
    "metavar": "N",
    "help": "Seed the noise, for tests and reproducible runs only: anyone who knows the seed "
    "can undo the noise, so a seeded release is not private. Default: fresh OS entropy.",
}
NOISE_VARIANCE: dict[str, Any] = {
    "low": 0.0,
    "high": math.inf,
    "high_open": True,
    "none": True,
    "cli": False,
}
#: ``h`` of the smooth weights (a positive real) and of sample limiting (a record count);
#: None: chosen privately.
SMOOTH_H: dict[str, Any] = {
    "low": 0.0,
    "low_open": True,
    "high": math.inf,
    "high_open": True,
    "none": True,
    "cli": False,
}
LIMIT_H: dict[str, Any] = {"int": True, "low": 1, "none": True, "cli": False}


# -- the accounting preamble ---------------------------------------------------------------------
class Ledger:
    """The accounting of one release: refused before any work, charged once at the end.

    ``planned`` is the release's cost computed from its parameters alone (the same epsilon and
    delta as the events the release composes). With a shared ``accountant`` it is checked
    here, before any data is read or noise drawn, with the release's ``seed``: a seed the
    accountant already holds is refused (the same seed repeats the noise). The release's own
    events go on ``local`` (its ``dp_event`` and ``budget``) and :meth:`close` charges them to
    the shared accountant as one ``ComposedDpEvent``, with the seed.
    """

    def __init__(
        self,
        accountant: PrivacyAccountant | None,
        planned: Iterable[dp_accounting.DpEvent],
        *,
        seed: int | None,
        caller: str,
    ) -> None:
        if accountant is not None:
            accountant.check(dp_accounting.ComposedDpEvent(list(planned)), seed=seed, caller=caller)
        self.shared = accountant
        self.local = PrivacyAccountant()
        self.seed, self.caller = seed, caller

    def close(self, gaussian_delta: float = 0.0) -> tuple[PrivacyBudget, dp_accounting.DpEvent]:
        """``(budget, dp_event)`` of the release; charges the shared accountant."""
        event = self.local.event
        budget = self.local.spent(gaussian_delta)
        if self.shared is not None:
            self.shared.compose(event, seed=self.seed, caller=self.caller)
        return budget, event


def laplace_event(epsilon: float) -> dp_accounting.LaplaceDpEvent:
    """The event of a Laplace release at ``epsilon`` (noise multiplier ``1 / epsilon``)."""
    return dp_accounting.LaplaceDpEvent(1.0 / epsilon)


def laplace_release(
    value: Any,
    *,
    epsilon: float,
    sensitivity: float,
    noise: NoiseSource,
    accountant: PrivacyAccountant,
    statistic: str,
    neighbours: str = "add-remove",
) -> tuple[np.ndarray, float]:
    """``value + Lap(b)`` with ``b = sensitivity / epsilon`` (:func:`userdp.privacy.laplace_scale`);
    the ``LaplaceDpEvent`` is composed on ``accountant``. Returns ``(noisy value, b)``."""
    scale = laplace_scale(epsilon, sensitivity)
    accountant.compose(dp_accounting.LaplaceDpEvent(scale / sensitivity))
    noisy = noise.add_laplace(
        value, scale, statistic=statistic, l1=sensitivity, neighbours=neighbours
    )
    return noisy, scale


# -- the record preamble -------------------------------------------------------------------------
@dataclass(frozen=True)
class Records:
    """One value per record, clipped to the public bounds, with dense user codes and sizes."""

    codes: np.ndarray
    sizes: np.ndarray
    values: np.ndarray  # clipped to bounds
    bounds: tuple[float, float]
    users: np.ndarray | None = None  # the user labels, for keyed sampling keys


def require_users(users: object, caller: str) -> None:
    """Refuse ``fit(X, y)`` without ``users`` in one line (:class:`DataError`): the privacy
    unit is the user, and taking each row for its own user would quietly change the guarantee
    for anyone with several rows."""
    if users is None:
        raise DataError(
            f"{caller} needs 'users', the user id of each row (the privacy unit): call "
            "fit(X, y, users). Only if every row is a different person, pass "
            "users=numpy.arange(len(y))."
        )


def read_records(
    values: object, users: object, bounds: object, caller: str, *, public_sizes: bool = False
) -> Records:
    """Check ``(values, users)`` (:class:`DataError` on bad data), factorise the users and clip
    the values to ``bounds`` (already checked by the parameter table).

    The non-finite policy (docs/guarantees.md), decided by a public rule and never by the data:
    ``+-inf`` is clipped like any value out of range; a NaN is a record without a value, left
    out before the users are counted, or, when user sizes are public (``public_sizes``: a
    record's existence is public, only its value is private), kept at the bounds' midpoint.
    No error or warning depends on whether a user holds one.
    """
    y, u = check_records(values, users, caller)
    lo, hi = check_bounds(bounds, caller)
    missing = np.isnan(y)
    if public_sizes:
        y = np.where(missing, 0.5 * (lo + hi), y)
    else:  # the same output as if those records had never been given
        y, u = y[~missing], u[~missing]
        if y.size == 0:
            raise DataError(f"{caller} needs at least one record with a value; got 0.")
    codes, sizes = factorize_users(u)
    return Records(codes, sizes, np.clip(y, lo, hi), (lo, hi), u)


# -- the two ways of bounding a user's contribution -----------------------------------------------
class Bounding:
    """Smooth weights (Lemma 3) or sample limiting (Section 3.2), as one strategy value.

    ``choose_h`` minimises Claim 1's ``v(h)`` or Claim 2's ``v'(h)``; :meth:`weights` gives each
    record its weight (``min(h, s_l) / s_l``, or ``1[i kept]``), so a user's weights sum to at
    most ``h`` either way.
    """

    method: Method

    def choose_h(self, *args: Any, **kwargs: Any) -> float:
        raise NotImplementedError

    def weights(
        self,
        codes: np.ndarray,
        sizes: np.ndarray,
        h: float,
        noise: NoiseSource,
        users: np.ndarray | None = None,
    ) -> np.ndarray:
        """Record weights as float64; each user's sum to at most ``h`` (``users``: the labels,
        which key sample limiting's draw, see :func:`~userdp.estimate.weighting.record_keys`)."""
        raise NotImplementedError

    def restrict(
        self, records: Records, h: float, noise: NoiseSource
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(codes, values, sizes)`` of the records that take part (see the subclasses)."""
        raise NotImplementedError


class _Smooth(Bounding):
    """Lemma 3: record ``i`` of user ``l`` weighs ``min(h, s_l) / s_l``; every record takes part."""

    method: Method = "weighted"

    def choose_h(self, *args: Any, **kwargs: Any) -> float:
        return best_smooth_h(*args, **kwargs)

    def weights(
        self,
        codes: np.ndarray,
        sizes: np.ndarray,
        h: float,
        noise: NoiseSource,
        users: np.ndarray | None = None,
    ) -> np.ndarray:
        return smooth_weights(codes, sizes, h)

    def restrict(
        self, records: Records, h: float, noise: NoiseSource
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return records.codes, records.values, records.sizes


class _SampleLimit(Bounding):
    """Section 3.2: each user keeps ``min(floor(h), s_l)`` random records, of weight 1."""

    method: Method = "sample-limit"

    def choose_h(self, *args: Any, **kwargs: Any) -> float:
        return best_limit_h(*args, **kwargs)

    def weights(
        self,
        codes: np.ndarray,
        sizes: np.ndarray,
        h: float,
        noise: NoiseSource,
        users: np.ndarray | None = None,
    ) -> np.ndarray:
        keys = None if users is None else record_keys(users, codes, noise.salt)
        return limit_mask(codes, sizes, h, noise, keys=keys).astype(np.float64)

    def restrict(
        self, records: Records, h: float, noise: NoiseSource
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The kept records; their sizes ``min(s_l, floor(h))`` make their smooth weights 1."""
        keys = (
            None if records.users is None else record_keys(records.users, records.codes, noise.salt)
        )
        keep = limit_mask(records.codes, records.sizes, h, noise, keys=keys)
        sizes = np.minimum(records.sizes, math.floor(h))
        return records.codes[keep], records.values[keep], sizes


SMOOTH: Bounding = _Smooth()
SAMPLE_LIMIT: Bounding = _SampleLimit()


# -- the result base -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Release:
    """What every released result holds about its privacy.

    Attributes
    ----------
    budget : PrivacyBudget
        The ``(epsilon, delta)`` spent, from the release's own accountant.
    dp_event : dp_accounting.DpEvent
        Every noisy release, as one ``ComposedDpEvent`` (what a shared accountant composes).
    """

    budget: PrivacyBudget
    dp_event: dp_accounting.DpEvent

    #: Fields left out of :meth:`to_dict` (large public inputs, the event object).
    _NOT_IN_DICT: ClassVar[tuple[str, ...]] = ("dp_event",)

    @property
    def epsilon(self) -> float:
        """``budget.epsilon``: derived, for convenience (the budget is the one source)."""
        return self.budget.epsilon

    def noise(self) -> dict[str, Any] | None:
        """The noise of the released numbers, from public parameters only, or None.

        ``{"noise_sd": ..., "interval95": (low, high), "noise": "laplace" | "approximate"}``
        where the result states it: the standard deviation of the added noise and the interval
        that holds the noise-free statistic with probability 0.95 *over the noise*. It covers
        the noise only, not the bias of bounding (clipping to the bounds, weighting or limiting
        heavy users), which no released number measures.
        """
        return None

    def to_dict(self) -> dict[str, Any]:
        """The released values as plain Python (lists for arrays), ready for ``json.dumps``:
        every field but the event (and large public inputs), the budget as ``epsilon``,
        ``delta`` and ``unit``, and :meth:`noise` when the result states it."""
        out: dict[str, Any] = {"result": type(self).__name__}
        for f in fields(self):
            if f.name in self._NOT_IN_DICT:
                continue
            value = getattr(self, f.name)
            if isinstance(value, PrivacyBudget):
                out.update(epsilon=value.epsilon, delta=value.delta, unit=value.unit)
            else:
                out[f.name] = plain(value)
        noise = self.noise()
        if noise is not None:
            out.update({k: plain(v) for k, v in noise.items()})
        return out


def plain(value: Any) -> Any:
    """NumPy arrays and scalars, and tuples, as plain Python values (for JSON)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    return value


#: ``ln(20)``: a Laplace(b) variable lies in ``[-b ln 20, b ln 20]`` with probability 0.95.
LAPLACE_95 = math.log(20.0)
#: The normal 97.5% quantile, for noise that is approximately Gaussian.
NORMAL_95 = 1.959963984540054


def noise_summary(noise: dict[str, Any] | None) -> str:
    """``; noise sd ..., 95% noise interval [...]`` for a ``summary()`` line ('' when None)."""
    if noise is None:
        return ""
    sd, (lo, hi) = np.atleast_1d(noise["noise_sd"]), noise["interval95"]
    lo, hi = np.atleast_1d(lo), np.atleast_1d(hi)
    if sd.size == 1:
        return (
            f"; noise sd {sd[0]:.3g}, 95% noise interval [{lo[0]:.6g}, {hi[0]:.6g}] (noise "
            "only, not the bias of bounding)"
        )
    return f"; noise sd {sd.max():.3g} per coordinate (noise only, not the bias of bounding)"


def budget_text(budget: PrivacyBudget) -> str:
    """``epsilon=..., delta=...`` for a ``summary()`` line."""
    return f"epsilon={budget.epsilon:g}, delta={format_delta(budget.delta)}"
