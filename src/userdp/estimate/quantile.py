"""Private quantiles with smoothly bounded user contributions, against sample limiting.

Epasto, Mahdian, Mao, Mirrokni and Ren, "Smoothly Bounding User Contributions in Differential
Privacy", NeurIPS 2020, Section 4 ("Tradeoff weights") and Appendix B. Appendix B is not in our
copy of the paper, so the mechanism is designed here: a *weighted exponential mechanism*
(McSherry and Talwar 2007) over a public grid of ``[lower, upper]``.

The mechanism
-------------
With record weights ``w_i`` (Lemma 3's ``min(h, s_l) / s_l``, or ``1[i kept]`` for sample
limiting) the utility of an output ``x`` is

    u(x) = -| W(x) - q W |,   W(x) = sum_{y_i <= x} w_i,   W = sum_i w_i.

The outputs are the points of a public grid: the integer multiples ``x_j = j g`` of the
resolution ``g`` that lie in ``[lower, upper]`` (``g`` given, or by default the largest power
of two at most ``(upper - lower) / 2^20``, so the points are exact binary fractions). Both the
grid and the point a given ``j`` maps to are fixed by ``bounds`` and ``g`` alone. Point ``x_j``
is drawn with probability proportional to ``exp(epsilon u(x_j) / (2 Delta))``: the discrete
exponential mechanism over a data-independent output set, which is ``epsilon``-DP whenever
``Delta`` bounds the change of ``u`` at every point. It is the continuous mechanism on
``[lower, upper]`` discretised at resolution ``g``: a record's value counts from the first grid
point at or above it.

Sampling returns only an index. ``u`` is constant on the runs of grid points between
consecutive record values, so a run is picked by inverse CDF in log space with probability
proportional to ``(points in the run) * exp(epsilon u / (2 Delta))`` and then a point of the run
uniformly (an exact integer draw); the output is ``float(j) * g``, a function of ``j``. Float
caveat: the run probabilities are computed in float64 (relative rounding error about
``n 2^-52``, a small distortion of the probabilities, not of the outputs) and a run whose
probability is below about ``2^-53`` of the total may be unreachable; across neighbours this
is an event of probability about ``n 2^-52``, far below any ``delta`` one would declare, but it
is not exact pure DP (an exact sampler would be Ilvento 2020's base-2 mechanism).

Sensitivity ``Delta`` (pointwise in ``x``, which is what the mechanism needs):

- add/remove one user (default): the user's weights sum to ``t = min(h, s_l) <= h``; ``W(x)``
  grows by some ``a`` in ``[0, t]`` and ``W`` by ``t``, so ``W(x) - q W`` moves by
  ``a - q t`` in ``[-q t, (1 - q) t]``: ``Delta = max(q, 1 - q) h``.
- public sizes (replace one user's values): the weights ``c_i`` are normalised (sum 1) and
  only ``W(x)`` moves, by at most the user's weight: ``Delta = max_l sum_{S_l} c_i``.

Choosing ``h`` (Section 4, "Tradeoff weights"): in rank space the weighted empirical CDF at the
true quantile has variance ``q (1 - q) sum_i c_i^2`` (Bernoulli(q) indicators), and the
mechanism's rank error is about Laplace with scale ``2 Delta / epsilon`` in weight units, i.e.
``2 max(q, 1 - q) h / (epsilon n_h)`` after normalising by ``n_h``. That is Claim 1's ``v(h)``
with ``sigma^2 = q (1 - q)`` and noise unit ``2 max(q, 1 - q) / epsilon`` (``2 / epsilon`` with
public sizes, where ``Delta = h / n_h``), minimised by
:func:`~userdp.estimate.weighting.best_smooth_h` (Claim 2's ``v'`` by ``best_limit_h``).
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
from userdp.estimate.weighting import private_size_histogram
from userdp.exceptions import InvalidParameterError
from userdp.privacy.accountant import PrivacyAccountant
from userdp.privacy.events import ExponentialMechanismDpEvent
from userdp.privacy.noise import NoiseSource
from userdp.privacy.recording import is_recording, record, released

__all__ = [
    "SAMPLE_LIMITED_QUANTILE_PARAMETERS",
    "WEIGHTED_QUANTILE_PARAMETERS",
    "QuantileResult",
    "default_resolution",
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


_AUDIT_GRID = 1025  # grid points at which the utility is recorded for auditing
_DEFAULT_CELLS = 20  # default resolution: the largest power of two <= (upper - lower) / 2^20
_MAX_INDEX = 2**52  # grid indices j must be exact in float64 (|j| <= 2^52)


@dataclass(frozen=True)
class _Grid:
    """The public output grid: the points ``float(j) * step`` for ``first <= j <= last``."""

    step: float
    first: int
    last: int

    @property
    def size(self) -> int:
        return self.last - self.first + 1

    def point(self, j: int | np.ndarray) -> float | np.ndarray:
        """Grid point(s) of index ``j`` (a function of ``j`` and the public step only)."""
        return np.asarray(j, dtype=np.float64) * self.step

    def codes(self, values: np.ndarray) -> np.ndarray:
        """For each value, ``j - first`` of the first grid point at or above it (``size`` if
        none): a record counts in ``W(x_j)`` iff its code is ``<= j - first``."""
        c = np.ceil(values / self.step)  # within one of the exact answer; corrected below
        c -= (c - 1.0) * self.step >= values
        c += c * self.step < values
        return np.clip(c - self.first, 0, self.size).astype(np.int64)


def default_resolution(bounds: tuple[float, float]) -> float:
    """The largest power of two at most ``(upper - lower) / 2^20`` (the default grid step).

    Examples
    --------
    >>> default_resolution((0.0, 10.0)) == 2.0**-17
    True
    """
    _, e = math.frexp((float(bounds[1]) - float(bounds[0])) * 2.0**-_DEFAULT_CELLS)
    return math.ldexp(1.0, e - 1)


def _make_grid(bounds: tuple[float, float], resolution: float | None, caller: str) -> _Grid:
    """The grid of ``bounds`` at ``resolution`` (public values only); refuses unusable ones."""
    lo, hi = float(bounds[0]), float(bounds[1])
    step = default_resolution((lo, hi)) if resolution is None else float(resolution)
    if max(abs(lo), abs(hi)) / step > _MAX_INDEX:
        raise InvalidParameterError(
            f"The 'resolution' parameter of {caller} is too fine for bounds {(lo, hi)!r}: the "
            f"output grid's indices must stay below 2^52 in magnitude. Got {step!r} instead."
        )
    first, last = math.ceil(lo / step), math.floor(hi / step)
    first += first * step < lo  # exact float comparisons: the grid lies inside the bounds
    last -= last * step > hi
    if first > last:
        raise InvalidParameterError(
            f"The 'resolution' parameter of {caller} must leave at least one multiple of it "
            f"inside bounds {(lo, hi)!r}. Got {step!r} instead."
        )
    return _Grid(step, first, last)


# -- the mechanism (noise-free kernel + one draw) ------------------------------------------------
def _grid_utility(
    at: np.ndarray, sorted_codes: np.ndarray, cum: np.ndarray, q: float
) -> np.ndarray:
    """``u(x_j) = -|sum_{code_i <= j} w_i - q sum_i w_i|`` at grid offsets ``at`` (codes
    sorted, ``cum`` the cumulative weights in that order, starting at 0).

    Adding or removing a user whose weights sum to ``t <= h`` moves ``u`` by at most
    ``max(q, 1 - q) h`` at every point; with normalised weights and a replaced user, by at
    most that user's weight (see the module docstring).
    """
    below = np.searchsorted(sorted_codes, at, side="right")  # records counted at x_j
    return -np.abs(cum[below] - q * cum[-1])


def _exponential_mechanism(
    sorted_codes: np.ndarray,
    sorted_weights: np.ndarray,
    q: float,
    *,
    epsilon: float,
    sensitivity: float,
    grid: _Grid,
    noise: NoiseSource,
    neighbours: str = "add-remove",
) -> float:
    """One draw from ``P(x_j) ~ exp(epsilon u(x_j) / (2 sensitivity))`` over the grid.

    The runs of grid offsets ``[s_k, s_{k+1})`` cut at the records' codes have constant
    utility ``u(s_k)``; one is picked by inverse CDF in log space with probability proportional
    to ``(s_{k+1} - s_k) exp(epsilon u_k / (2 sensitivity))``, then an offset uniformly inside
    it. Only the index is drawn; the output is the grid point it names.
    """
    size = grid.size
    cum = np.concatenate([[0.0], np.cumsum(sorted_weights)])
    starts = np.unique(np.concatenate([[0], sorted_codes[sorted_codes < size]]))
    counts = np.diff(np.append(starts, size))
    u = _grid_utility(starts, sorted_codes, cum, q)
    logp = np.log(counts) + (epsilon / (2.0 * sensitivity)) * u
    if is_recording():  # for the auditor: u at public grid points, and the grid itself
        at = np.unique(np.round(np.linspace(0, size - 1, min(size, _AUDIT_GRID))).astype(np.int64))
        record(
            "quantile.utility",
            _grid_utility(at, sorted_codes, cum, q),
            linf=sensitivity,
            index=grid.point(grid.first + at),
            neighbours=neighbours,
            rng_state=noise.fingerprint(),
            grid=grid.step,
        )
    cdf = np.cumsum(np.exp(logp - logp.max()))
    draw = noise.uniform(1)[0] * cdf[-1]
    k = min(int(np.searchsorted(cdf, draw, side="right")), counts.size - 1)
    j = grid.first + int(starts[k]) + int(noise.integers(int(counts[k]), 1)[0])
    return float(released("quantile.utility", np.array([grid.point(j)]))[0])


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
    grid = _make_grid(params["bounds"], params["resolution"], caller)  # public values only
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
        x = _exponential_mechanism(
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
    weighted exponential mechanism described in the module docstring (Epasto et al. 2020,
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
    nothing); the float64 probabilities leave the caveat stated in the module docstring.

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
