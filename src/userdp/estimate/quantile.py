"""Private quantiles with smoothly bounded user contributions, against sample limiting.

Epasto, Mahdian, Mao, Mirrokni and Ren, NeurIPS 2020, Section 4 ("Tradeoff weights"): records
carry Lemma 3's weights (or sample limiting's) and each quantile is drawn by a weighted
exponential mechanism over a public grid, in :mod:`userdp.estimate._quantile_mechanism`. The
mechanism, its sensitivity and the choice of ``h`` are argued in docs/estimate.md ("Quantiles").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import dp_accounting
import numpy as np

from userdp._validation import check_arguments, check_real
from userdp.estimate._common import (
    ACCOUNTANT,
    EPSILON,
    LIMIT_H,
    PUBLIC_USER_SIZES,
    SAMPLE_LIMIT,
    SEED,
    SELECTION_SHARE,
    SMOOTH,
    SMOOTH_H,
    Bounding,
    Ledger,
    Method,
    Release,
    bounds_rule,
    budget_text,
    laplace_event,
    read_records,
)
from userdp.estimate._quantile_mechanism import (
    Grid,
    default_resolution,
    exponential_mechanism,
    grid_utility,
    make_grid,
)
from userdp.estimate.weighting import private_size_histogram
from userdp.exceptions import InvalidParameterError
from userdp.privacy.accountant import PrivacyAccountant
from userdp.privacy.events import ExponentialMechanismDpEvent
from userdp.privacy.noise import NoiseSource

__all__ = [
    "SAMPLE_LIMITED_QUANTILE_PARAMETERS",
    "WEIGHTED_QUANTILE_PARAMETERS",
    "Grid",
    "QuantileResult",
    "default_resolution",
    "exponential_mechanism",
    "grid_utility",
    "make_grid",
    "sample_limited_quantile",
    "weighted_quantile",
]


@dataclass(frozen=True)
class QuantileResult(Release):
    """Released quantiles and how they were released.

    ``estimate``, ``h`` and ``sensitivity`` are floats when ``q`` was a number and arrays
    (one entry per quantile, in the order of ``q``) when it was a sequence.

    Attributes
    ----------
    budget : PrivacyBudget
        The ``(epsilon, 0)`` spent (pure DP): the whole ``epsilon`` given.
    dp_event : dp_accounting.DpEvent
        Every release, as one ``ComposedDpEvent``.
    estimate : float or ndarray
        The private quantiles: points of the public grid inside ``bounds``.
    q : tuple of float
    method : {"weighted", "sample-limit"}
    h : float or ndarray
        Thresholds used, given or chosen from public or released values.
    sensitivity : float or ndarray
        ``Delta`` of each exponential mechanism: ``max(q, 1 - q) h`` (private sizes) or
        ``max_l sum_{S_l} c_i`` (public sizes, normalised weights).
    selection_epsilon : float
        The part spent on the size histogram that chose ``h`` (0 when none was needed).
    public_user_sizes : bool
    resolution : float
        The spacing ``g`` of the public output grid: every estimate is ``j * g`` for an
        integer ``j`` (fixed by ``bounds`` and the ``resolution`` parameter, never by the data).
    epsilon : float
        ``budget.epsilon`` (a property).
    """

    estimate: float | np.ndarray
    q: tuple[float, ...]
    method: Method
    h: float | np.ndarray
    sensitivity: float | np.ndarray
    selection_epsilon: float
    public_user_sizes: bool
    resolution: float

    def summary(self) -> str:
        """One line: quantiles, method, thresholds and budget."""
        est = np.atleast_1d(self.estimate)
        hs = np.atleast_1d(self.h)
        parts = ", ".join(
            f"q={q:g}: {e:.6g} (h={h:.4g})" for q, e, h in zip(self.q, est, hs, strict=True)
        )
        sizes = "public" if self.public_user_sizes else "private"
        return (
            f"{self.method} quantiles {parts}; {budget_text(self.budget)} of which epsilon="
            f"{self.selection_epsilon:g} chose h, user sizes {sizes}"
        )


# -- parameters, plan and driver ------------------------------------------------------------------
def _check_q(q: object, name: str, caller: str) -> None:
    """Rule for ``q``: a float in (0, 1) or a non-empty sequence of them."""
    message = (
        f"The {name!r} parameter of {caller} must be a float in the range (0, 1) or a non-empty "
        f"sequence of them. Got {q!r} instead."
    )
    if isinstance(q, (str, bytes)):
        raise InvalidParameterError(message)
    if isinstance(q, (Sequence, np.ndarray)) and len(_levels(q)) == 0:
        raise InvalidParameterError(message)
    for v in _levels(q):
        check_real(v, name, caller, low=0.0, high=1.0, low_open=True, high_open=True)


def _levels(q: Any) -> list[Any]:
    """The quantile levels of ``q`` as a list (one entry when ``q`` is a number)."""
    if isinstance(q, np.ndarray):
        return list(np.asarray(q, dtype=object).ravel())
    return list(q) if isinstance(q, Sequence) else [q]


RESOLUTION: dict[str, Any] = {
    "low": 0.0,
    "low_open": True,
    "high": math.inf,
    "high_open": True,
    "none": True,
    "metavar": "G",
    "help": "Spacing of the public output grid: every quantile released is a multiple of it "
    "inside the bounds. Default: the largest power of two at most (upper - lower) / 2^20.",
}
_PARAMETERS: dict[str, dict[str, Any]] = {
    "q": {"check": _check_q, "cli": False},
    "epsilon": EPSILON,
    "bounds": {"check": bounds_rule, "cli": False},
    "public_user_sizes": PUBLIC_USER_SIZES,
    "selection_share": SELECTION_SHARE,
    "resolution": RESOLUTION,
    "seed": SEED,
    "accountant": ACCOUNTANT,
}
#: Rules for every keyword of :func:`weighted_quantile` (checked before any data is read).
WEIGHTED_QUANTILE_PARAMETERS: dict[str, dict[str, Any]] = {
    **_PARAMETERS,
    "h": SMOOTH_H,
}
#: Rules for every keyword of :func:`sample_limited_quantile`.
SAMPLE_LIMITED_QUANTILE_PARAMETERS: dict[str, dict[str, Any]] = {
    **_PARAMETERS,
    "h": LIMIT_H,
}
_TABLES = {
    "weighted": WEIGHTED_QUANTILE_PARAMETERS,
    "sample-limit": SAMPLE_LIMITED_QUANTILE_PARAMETERS,
}


@dataclass(frozen=True)
class _Plan:
    """How ``epsilon`` is spent, from the parameters alone: the size histogram (private sizes,
    ``h`` not given; 0 otherwise), then one exponential mechanism per quantile."""

    histogram: float
    per_quantile: float
    count: int

    def events(self) -> list[dp_accounting.DpEvent]:
        events = [laplace_event(self.histogram)] if self.histogram else []
        return events + [ExponentialMechanismDpEvent(self.per_quantile)] * self.count


def _plan(epsilon: float, share: float, count: int, *, public: bool, h_given: bool) -> _Plan:
    histogram = 0.0 if h_given or public else share * epsilon
    return _Plan(histogram, (epsilon - histogram) / count, count)  # basic composition


def _run(
    caller: str, values: object, users: object, params: dict[str, Any], bounding: Bounding
) -> QuantileResult:
    """The preamble (parameters, accountant check, records), then one draw per quantile."""
    table = (
        WEIGHTED_QUANTILE_PARAMETERS if bounding is SMOOTH else SAMPLE_LIMITED_QUANTILE_PARAMETERS
    )
    check_arguments(params, table, caller)  # before the data are read
    qs = tuple(float(v) for v in _levels(params["q"]))
    scalar = not isinstance(params["q"], (Sequence, np.ndarray))
    h = params["h"]
    if h is not None:
        h = float(h) if bounding is SMOOTH else int(h)
    public = bool(params["public_user_sizes"])
    plan = _plan(
        float(params["epsilon"]),
        float(params["selection_share"]),
        len(qs),
        public=public,
        h_given=h is not None,
    )
    # refuses before any work (a budget it cannot afford, a seed it already holds)
    ledger = Ledger(params["accountant"], plan.events(), seed=params["seed"], caller=caller)
    grid = make_grid(params["bounds"], params["resolution"], caller)  # public values only
    records = read_records(values, users, params["bounds"], caller, public_sizes=public)
    codes, sizes = records.codes, records.sizes
    cells = grid.codes(records.values)
    order = np.argsort(cells, kind="stable")  # the order among equal codes does not matter
    sorted_cells = cells[order]
    noise = NoiseSource(params["seed"])
    acc = ledger.local

    table_h: tuple[np.ndarray, np.ndarray | None] = (
        sizes,
        None,
    )  # sizes to choose h from: public ones, or the private histogram's
    if plan.histogram:
        hist = private_size_histogram(sizes, plan.histogram, noise, acc)
        table_h = (hist.representatives, hist.counts)
    eps_q = plan.per_quantile

    estimates, hs, deltas = [], [], []
    for qj in qs:
        spread = max(qj, 1.0 - qj)
        hj = h
        if hj is None:
            unit = 2.0 / eps_q if public else 2.0 * spread / eps_q
            hj = bounding.choose_h(table_h[0], qj * (1.0 - qj), unit, counts=table_h[1])
        w = bounding.weights(codes, sizes, hj, noise, records.users)
        if public:
            w = w / w.sum()  # normalised c_i; a replaced user moves W(x) by its own weight
            delta = float(np.bincount(codes, weights=w).max())
        else:
            delta = spread * float(hj)
        acc.compose(ExponentialMechanismDpEvent(eps_q))
        x = exponential_mechanism(
            sorted_cells,
            w[order],
            qj,
            epsilon=eps_q,
            sensitivity=delta,
            grid=grid,
            noise=noise,
            neighbours="replace-values" if public else "add-remove",
        )
        estimates.append(x)
        hs.append(float(hj))
        deltas.append(delta)

    def shape(v: list[float]) -> float | np.ndarray:
        return v[0] if scalar else np.array(v)

    budget, event = ledger.close()
    return QuantileResult(
        budget=budget,
        dp_event=event,
        estimate=shape(estimates),
        q=qs,
        method=bounding.method,
        h=shape(hs),
        sensitivity=shape(deltas),
        selection_epsilon=plan.histogram,
        public_user_sizes=public,
        resolution=grid.step,
    )


def weighted_quantile(
    values: object,
    users: object,
    *,
    q: float | Sequence[float],
    epsilon: float,
    bounds: tuple[float, float],
    public_user_sizes: bool = False,
    h: float | None = None,
    selection_share: float = 0.1,
    resolution: float | None = None,
    seed: int | None = None,
    accountant: PrivacyAccountant | None = None,
) -> QuantileResult:
    """Private quantiles with smoothly bounded user contributions (weighted exponential mech.).

    Records carry Lemma 3's weights ``min(h, s_l) / s_l`` and the output is drawn by the
    weighted exponential mechanism described in docs/estimate.md (Epasto et al. 2020,
    Section 4 and Appendix B, designed here since our copy lacks the appendix).

    Parameters
    ----------
    values : array-like of float, shape (n,)
        One value per record; clipped to ``bounds``. Must be finite.
    users : array-like, shape (n,)
        The user owning each record (ints or strings).
    q : float or sequence of float
        Quantile level(s), each in (0, 1).
    epsilon : float
        Total privacy budget, in (0, inf); spent exactly.
    bounds : (float, float)
        ``(lower, upper)``, ``lower < upper``: the public range; outputs lie inside it.
    public_user_sizes : bool, default=False
        True: the paper's model (the user partition is public, neighbours replace one user's
        values). False: neighbours add or remove a user.
    h : float or None, default=None
        Threshold > 0 used for every quantile. None: chosen per quantile by
        :func:`~userdp.estimate.weighting.best_smooth_h` with rank variance ``q (1 - q)``.
    selection_share : float, default=0.1
        Fraction of ``epsilon``, in (0, 1), spent on a private size histogram to choose ``h``
        when sizes are private and ``h`` is None (nothing is spent otherwise).
    resolution : float or None, default=None
        Spacing ``g > 0`` of the public output grid: every output is ``j * g`` for an integer
        ``j`` with ``lower <= j * g <= upper`` (at least one must exist). None: the largest
        power of two at most ``(upper - lower) / 2^20`` (:func:`default_resolution`). A record
        counts from the first grid point at or above its value, so the result is the
        continuous mechanism's up to one grid step.
    seed : int or None, default=None
        Seeds the noise. None (the default) uses OS entropy; a fixed seed is for tests and
        reproducible benchmarks only.
        A seed may be used once per accountant: a second release with a seed its
        ``accountant`` already holds is refused before any data is read (the same seed
        draws the same noise, and differencing the two releases would cancel it).
    accountant : PrivacyAccountant or None, default=None
        A shared accountant to charge the release to (its ``dp_event``). If it holds a total
        budget that this release would exceed, :class:`BudgetExceededError` is raised before
        the data are read.

    Returns
    -------
    QuantileResult

    Raises
    ------
    DataError
        Empty input, ``values`` and ``users`` of different lengths, or a non-finite value.
    InvalidParameterError
        A parameter breaks its rule in :data:`WEIGHTED_QUANTILE_PARAMETERS` (``epsilon <= 0``,
        ``lower >= upper``, ``q`` outside (0, 1), ``h <= 0``, ...).
    BudgetExceededError
        ``accountant`` cannot afford ``epsilon`` (checked before any work).

    Privacy
    -------
    ``epsilon``-DP (pure; ``budget.delta`` is 0). The estimation budget (``epsilon``, less
    the selection share when a histogram is released) is split evenly over the quantiles;
    each is one exponential mechanism (an ``ExponentialMechanismDpEvent``) with utility
    sensitivity
    ``Delta = max(q, 1 - q) h`` under adding or removing a user, or ``max_l sum_{S_l} c_i``
    under replacing one user's values when sizes are public. The size histogram (private
    sizes, ``h`` None) has l1 sensitivity 1 (a ``LaplaceDpEvent``). ``h`` is a function of
    public or released values. Each output is drawn as an index into the public grid (the
    discrete exponential mechanism over a data-independent set, so its float bits carry
    nothing); the float64 probabilities leave the caveat stated in docs/estimate.md.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> users = np.repeat(np.arange(1000), rng.integers(1, 10, 1000))
    >>> values = rng.uniform(0, 10, users.size)
    >>> res = weighted_quantile(values, users, q=0.5, epsilon=1.0, bounds=(0, 10), seed=2)
    >>> abs(res.estimate - 5.0) < 0.5
    True
    """
    params = dict(
        q=q,
        epsilon=epsilon,
        bounds=bounds,
        public_user_sizes=public_user_sizes,
        h=h,
        selection_share=selection_share,
        resolution=resolution,
        seed=seed,
        accountant=accountant,
    )
    return _run("weighted_quantile", values, users, params, SMOOTH)


def sample_limited_quantile(
    values: object,
    users: object,
    *,
    q: float | Sequence[float],
    epsilon: float,
    bounds: tuple[float, float],
    public_user_sizes: bool = False,
    h: int | None = None,
    selection_share: float = 0.1,
    resolution: float | None = None,
    seed: int | None = None,
    accountant: PrivacyAccountant | None = None,
) -> QuantileResult:
    """Private quantiles by sample limiting: the same mechanism with 0/1 weights.

    Each user keeps a uniformly random ``min(h, s_l)`` of their records (Amin et al. 2019;
    Epasto et al. 2020, Section 3.2); kept records weigh 1, the others 0. ``h`` minimises
    Claim 2's ``v'(h)`` with rank variance ``q (1 - q)`` when not given.

    Parameters
    ----------
    values, users, q, epsilon, bounds, public_user_sizes, selection_share, resolution, seed, \
accountant
        As :func:`weighted_quantile`.
    h : int or None, default=None
        Integer threshold >= 1 used for every quantile; None: chosen per quantile by
        :func:`~userdp.estimate.weighting.best_limit_h`.

    Returns
    -------
    QuantileResult

    Raises
    ------
    DataError, InvalidParameterError, BudgetExceededError
        As :func:`weighted_quantile` (the rules: :data:`SAMPLE_LIMITED_QUANTILE_PARAMETERS`).

    Privacy
    -------
    As :func:`weighted_quantile`: a user's kept records weigh at most ``h`` in all, so
    ``Delta = max(q, 1 - q) h`` (add/remove), or ``max_l sum_{S_l} c_i`` with
    ``c_i = 1[i kept] / n_h`` (public sizes). Which records are kept is independent of the
    values.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> users = np.repeat(np.arange(1000), rng.integers(1, 10, 1000))
    >>> values = rng.uniform(0, 10, users.size)
    >>> res = sample_limited_quantile(
    ...     values, users, q=[0.25, 0.75], epsilon=1.0, bounds=(0, 10), h=3, seed=2
    ... )
    >>> bool(np.all(np.abs(res.estimate - [2.5, 7.5]) < 0.5))
    True
    """
    params = dict(
        q=q,
        epsilon=epsilon,
        bounds=bounds,
        public_user_sizes=public_user_sizes,
        h=h,
        selection_share=selection_share,
        resolution=resolution,
        seed=seed,
        accountant=accountant,
    )
    return _run("sample_limited_quantile", values, users, params, SAMPLE_LIMIT)
