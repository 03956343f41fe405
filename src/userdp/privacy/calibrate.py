"""Noise calibration: analytic Gaussian (Balle & Wang 2018), Laplace, and the partition-selection
threshold of the weight-and-threshold meta-algorithm.

Every function here rounds toward *more* privacy: a computed sigma is checked against the target
and nudged up until it meets it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import dp_accounting
import numpy as np
from scipy import special, stats

from userdp._validation import check_int, check_real
from userdp.exceptions import InvalidParameterError

__all__ = [
    "SAFE_NOISE_INFLATION",
    "calibrate_noise_scale",
    "gaussian_delta",
    "gaussian_sigma",
    "grid_noise_scale",
    "grid_spacing",
    "laplace_scale",
    "laplace_threshold",
    "partition_threshold",
]

#: Declared relative increase of every safe-noise scale (see :func:`grid_spacing`): 2^-12, i.e.
#: noise about 0.024% larger than the textbook mechanism's, which pays for snapping to the grid.
SAFE_NOISE_INFLATION = 2.0**-12


#: Most upward nudges of a Gaussian sigma (relative steps 1e-12 * 2^k): a factor of ~1e7 at most.
_MAX_NUDGES = 80


def gaussian_delta(sigma: float, epsilon: float, l2_sensitivity: float = 1.0) -> float:
    """Smallest delta for which N(0, sigma^2) noise on an l2-sensitivity query is (eps, delta)-DP.

    Implements the exact condition of Proposition 2.4 in Chen et al. 2025 (= Balle & Wang 2018,
    Theorem 8): ``Phi(D/(2s) - e s/D) - e^eps Phi(-D/(2s) - e s/D)``, evaluated in log space.
    """
    s = check_real(sigma, "sigma", "gaussian_delta", low=0.0, low_open=True)
    eps = check_real(epsilon, "epsilon", "gaussian_delta", low=0.0)
    d2 = check_real(l2_sensitivity, "l2_sensitivity", "gaussian_delta", low=0.0, low_open=True)
    a = d2 / (2 * s) - eps * s / d2
    b = -d2 / (2 * s) - eps * s / d2
    log_x = special.log_ndtr(a)
    log_y = eps + special.log_ndtr(b)
    if log_y >= log_x:
        return 0.0
    return float(math.exp(log_x) * -math.expm1(log_y - log_x))


def gaussian_sigma(epsilon: float, delta: float, l2_sensitivity: float = 1.0) -> float:
    """Smallest Gaussian noise scale giving (epsilon, delta)-DP for the given l2 sensitivity.

    Analytic Gaussian mechanism (paper Proposition 2.4; Balle & Wang 2018), solved by
    dp-accounting's ``get_sigma_gaussian`` and then rounded up until the exact condition holds.

    Examples
    --------
    >>> round(gaussian_sigma(1.0, 5e-6), 5)
    3.88414
    """
    eps = check_real(epsilon, "epsilon", "gaussian_sigma", low=0.0, low_open=True)
    delta = check_real(
        delta, "delta", "gaussian_sigma", low=0.0, high=1.0, low_open=True, high_open=True
    )
    d2 = check_real(l2_sensitivity, "l2_sensitivity", "gaussian_sigma", low=0.0, low_open=True)
    too_large = (
        f"The 'epsilon' parameter of gaussian_sigma is too large to calibrate Gaussian noise "
        f"in floating point: got {eps!r} at delta={delta!r}. Use epsilon <= 1e100 (above ~10 "
        "the guarantee is already very weak)."
    )
    try:
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            sigma = float(dp_accounting.get_sigma_gaussian(eps, delta))
    except (ValueError, ArithmeticError) as err:  # e.g. "function value is NaN" at 1e300
        raise InvalidParameterError(too_large) from err
    if not (math.isfinite(sigma) and sigma > 0):
        raise InvalidParameterError(too_large)
    # Round toward more noise: brentq's root may sit a hair on the wrong side. The relative
    # step doubles from 1e-12, so the loop ends within _MAX_NUDGES steps even where the exact
    # condition loses precision (huge epsilon, where sigma must grow by a visible factor);
    # typical budgets need 0-2 steps, so their sigma is unchanged.
    step = 1e-12
    for _ in range(_MAX_NUDGES):
        if gaussian_delta(sigma, eps) <= delta:
            return sigma * d2
        sigma = math.nextafter(sigma, math.inf) * (1 + step)
        step *= 2
    raise InvalidParameterError(too_large)


def partition_threshold(
    sigma: float,
    delta: float,
    max_items_per_user: int,
    h_scale: float = 1.0,
    *,
    grid: float = 0.0,
) -> float:
    """Threshold rho of the weight-and-threshold meta-algorithm (paper Alg. 1, line 2).

    ``rho = max_{t in 1..Delta_0} h(t) + sigma * Phi^{-1}((1 - delta/2)^(1/t))`` with
    ``h(t) = h_scale / sqrt(t)`` (``h_scale = 1`` for Basic/MAD, ``b_max`` for biased MAD).
    ``Phi^{-1}((1-delta/2)^(1/t))`` is computed as ``isf(-expm1(log1p(-delta/2)/t))`` so that
    it stays accurate for tiny delta. ``delta`` is the whole round's delta: the Gaussian part
    uses delta/2 and the novel items the other delta/2 (Thm. 3.3).

    ``grid = g > 0``: the weights are released on the power-of-two grid ``g``
    (:func:`~userdp.privacy.gaussian_on_grid`) as ``X = (rint(w/g) + floor(Z/g + 1/2)) g``
    with ``Z ~ N(0, sigma^2)``, ``sigma`` being the scale actually drawn (the grid-inflated
    one). In exact arithmetic ``rint(w/g) g <= w + g/2`` and ``floor(Z/g + 1/2) g <= Z + g/2``;
    in floating point ``floor(fl(Z/g + 1/2)) <= Z/g + 1`` (the sum is exact below 2^52 and at
    most one unit up above) and the float sum of the two integers is at most ``2^-53`` of it
    above the exact one. So a novel item of weight ``w <= h(t)`` has ``X <= (h(t) + Z + 1.5 g)
    (1 + 2^-53)``, and ``rho = (rho_0 + 2g)(1 + 2^-52)`` (``rho_0`` the textbook threshold for
    ``sigma``) makes ``X >= rho`` imply ``Z >= rho_0 - h(t)``: every novel item still crosses
    with probability ``<= 1 - (1 - delta/2)^(1/t)``.

    Examples
    --------
    >>> round(partition_threshold(gaussian_sigma(1.0, 5e-6), 1e-5, 100), 4)
    20.7897
    """
    s = check_real(sigma, "sigma", "partition_threshold", low=0.0, low_open=True)
    d = check_real(
        delta, "delta", "partition_threshold", low=0.0, high=1.0, low_open=True, high_open=True
    )
    cap = check_int(max_items_per_user, "max_items_per_user", "partition_threshold", low=1)
    h = check_real(h_scale, "h_scale", "partition_threshold", low=0.0, low_open=True)
    g = check_real(grid, "grid", "partition_threshold", low=0.0)
    rho = _threshold_max(s, d, cap, h)
    if g == 0.0:
        return rho
    # X <= (h(t) + Z + 1.5 g)(1 + 2^-53) on the grid (see above); rounded up
    return math.nextafter((rho + 2.0 * g) * (1.0 + 2.0**-52), math.inf)


#: Caps up to this size are maximised over every t at once (8 bytes per t); larger ones by
#: branch and bound, so memory does not grow with the cap a user types.
_DENSE_THRESHOLD_CAP = 1 << 20


def _threshold_terms(t: np.ndarray, s: float, d: float, h: float) -> tuple[np.ndarray, np.ndarray]:
    """``h/sqrt(t)`` (decreasing in t) and ``s Phi^{-1}((1 - d/2)^(1/t))`` (increasing in t)."""
    tail = -np.expm1(np.log1p(-d / 2) / t)  # 1 - (1 - delta/2)^(1/t)
    return h / np.sqrt(t), s * stats.norm.isf(tail)


def _threshold_max(s: float, d: float, cap: int, h: float) -> float:
    """``max_{t in 1..cap} h/sqrt(t) + s Phi^{-1}((1 - d/2)^(1/t))``, exactly, in bounded memory
    (:func:`max_over_degrees`)."""

    def first(t: np.ndarray) -> np.ndarray:
        return _threshold_terms(t, s, d, h)[0]

    def second(t: np.ndarray) -> np.ndarray:
        return _threshold_terms(t, s, d, h)[1]

    return max_over_degrees(first, second, cap)


def max_over_degrees(
    decreasing: Callable[[np.ndarray], np.ndarray],
    increasing: Callable[[np.ndarray], np.ndarray],
    cap: int,
) -> float:
    """``max_{t in 1..cap} decreasing(t) + increasing(t)``, exactly, in bounded memory.

    The shape of every threshold over a user's degree t: a novel-item weight that does not grow
    with t plus a noise quantile that does not shrink with it. Small caps evaluate every t.
    Larger ones use branch and bound on integer intervals ``[a, b]``: ``decreasing(a) +
    increasing(b)`` bounds the objective on the interval; an interval whose bound does not beat
    the best value found is dropped, the others are halved until they hold two points. Only the
    t the search visits are evaluated (a few hundred for the usual shapes); after
    ``_MAX_INTERVALS`` intervals the largest remaining bound is returned, which is never below
    the true maximum (a threshold only rounds up). So memory does not grow with the cap a user
    types.
    """
    if cap <= _DENSE_THRESHOLD_CAP:
        t = np.arange(1, cap + 1, dtype=np.float64)
        return float(np.max(decreasing(t) + increasing(t)))

    def terms(t: int) -> tuple[float, float]:
        x = np.array([float(t)])
        return float(decreasing(x)[0]), float(increasing(x)[0])

    def value(t: int) -> float:
        a, b = terms(t)
        return a + b

    best = max(value(1), value(cap))
    stack, visited = [(1, cap)], 0
    while stack:
        lo, hi = stack.pop()
        bound = terms(lo)[0] + terms(hi)[1]
        if bound <= best or hi - lo <= 1:
            continue
        visited += 1
        if visited > _MAX_INTERVALS:
            rest = [terms(a)[0] + terms(b)[1] for a, b in stack]
            return max([best, bound, *rest])
        mid = lo + (hi - lo) // 2
        best = max(best, value(mid))
        stack.extend(((lo, mid), (mid, hi)))
    return best


#: Most intervals the branch and bound of :func:`_threshold_max` splits.
_MAX_INTERVALS = 100_000


def laplace_scale(epsilon: float, l1_sensitivity: float = 1.0) -> float:
    """Laplace noise scale b = l1_sensitivity / epsilon for epsilon-DP."""
    eps = check_real(epsilon, "epsilon", "laplace_scale", low=0.0, low_open=True)
    d1 = check_real(l1_sensitivity, "l1_sensitivity", "laplace_scale", low=0.0, low_open=True)
    return d1 / eps


def laplace_threshold(
    scale: float, delta: float, max_novel_weight: float = 1.0, novel_candidates: int = 1
) -> float:
    """Threshold for Laplace weight-and-threshold with one weighted novel item among candidates.

    The added user brings at most ``novel_candidates`` items no other user holds; all are
    candidates for release, one of them with weight ``w <= max_novel_weight`` and the others with
    weight 0. Item ``i`` passes ``rho`` with probability ``exp(-(rho - w_i)/b) / 2``, so by the
    union bound the chance that any novel item is released is at most

        (exp(w/b) + novel_candidates - 1) exp(-rho/b) / 2 <= delta
        <=> rho = b ln((exp(w/b) + novel_candidates - 1) / (2 delta)).

    With one candidate this is ``w + b ln(1/(2 delta))`` (Carvalho et al. 2022, Thm. 1; Gopi et
    al. 2020, Thm. 5.1 with t = 1).
    """
    caller = "laplace_threshold"
    b = check_real(scale, "scale", caller, low=0.0, low_open=True)
    d = check_real(delta, "delta", caller, low=0.0, high=1.0, low_open=True, high_open=True)
    w = check_real(max_novel_weight, "max_novel_weight", caller, low=0.0)
    t = check_int(novel_candidates, "novel_candidates", caller, low=1)
    # ln(exp(w/b) + t - 1) without overflow for large w/b
    log_mass = w / b + math.log1p((t - 1) * math.exp(-w / b))
    return float(b * (log_mass + math.log(1.0 / (2.0 * d))))


def calibrate_noise_scale(
    make_event: Callable[[float], dp_accounting.DpEvent],
    epsilon: float,
    delta: float,
    *,
    low: float = 1e-4,
    high: float = 1e6,
    rtol: float = 1e-7,
) -> float:
    """Smallest noise scale ``s`` whose composed release meets (epsilon, delta), by search.

    ``make_event(s)`` builds the whole run's event for scale ``s`` (noise grows with ``s``);
    the :class:`~userdp.privacy.PrivacyAccountant` composes it and bisection in log space
    finds the boundary. The upper end of the final bracket is returned, so the result always
    meets the target (rounds toward more noise), like dp-accounting's
    ``calibrate_dp_mechanism``.

    Examples
    --------
    >>> import dp_accounting
    >>> s = calibrate_noise_scale(lambda s: dp_accounting.GaussianDpEvent(s), 1.0, 1e-5)
    >>> round(s, 4)
    3.7306
    """
    from userdp.privacy.accountant import PrivacyAccountant  # the accountant imports us

    eps = check_real(epsilon, "epsilon", "calibrate_noise_scale", low=0.0, low_open=True)
    d = check_real(
        delta, "delta", "calibrate_noise_scale", low=0.0, high=1.0, low_open=True, high_open=True
    )

    def spent(scale: float) -> float:
        acc = PrivacyAccountant().compose(make_event(scale))
        # dp-accounting's root finder probes extreme sigmas, where NumPy warns harmlessly.
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            return acc.spent(gaussian_delta=d).epsilon

    if spent(high) > eps:
        raise InvalidParameterError(
            f"No noise scale up to {high:g} reaches epsilon={eps:g} at delta={d:g}; the target "
            "is too small for this release."
        )
    if spent(low) <= eps:
        return low
    lo, hi = math.log(low), math.log(high)
    while hi - lo > rtol:
        mid = 0.5 * (lo + hi)
        if spent(math.exp(mid)) <= eps:
            hi = mid
        else:
            lo = mid
    return math.exp(hi)


def _grid_coordinates_factor(size: int, norm: str) -> float:
    """Upper bound on ``||(g/2 + g/2) * 1_changed||_norm / g`` over ``size`` coordinates."""
    n = max(int(size), 1)
    if norm == "l1":
        return float(n)
    if norm == "l2":
        root = math.isqrt(n)
        # Exact for perfect squares, otherwise rounded up.
        return float(root) if root * root == n else math.nextafter(math.sqrt(n), math.inf)
    raise InvalidParameterError(f"The 'norm' parameter must be 'l1' or 'l2'. Got {norm!r} instead.")


def grid_spacing(
    sensitivity: float, size: int, norm: str, *, inflation: float = SAFE_NOISE_INFLATION
) -> float:
    """Power-of-two grid ``g`` on which safe noise releases a ``size``-coordinate statistic.

    Snapping each coordinate to the nearest multiple of ``g`` moves it by at most ``g/2``, so two
    neighbouring values ``x, x'`` whose exact distance is ``<= sensitivity`` snap to points at
    distance ``<= sensitivity + g * c`` with ``c = size`` (l1) or ``sqrt(size)`` (l2): every
    coordinate may change, by at most ``g`` more than before. ``g`` is the largest power of two
    with ``g * c <= inflation * sensitivity``, so the snapped statistic's sensitivity is at most
    ``(1 + inflation)`` times the declared one, and :func:`grid_noise_scale` grows the noise by
    exactly that factor. ``g`` depends only on public quantities (sensitivity, shape).

    Examples
    --------
    >>> grid_spacing(1.0, 1, "l1") == 2.0**-12
    True
    >>> grid_spacing(1.0, 4096, "l2") == 2.0**-18  # sqrt(4096) = 2^6
    True
    """
    d = check_real(sensitivity, "sensitivity", "grid_spacing", low=0.0, low_open=True)
    eta = check_real(inflation, "inflation", "grid_spacing", low=0.0, low_open=True, high=1.0)
    c = _grid_coordinates_factor(size, norm)
    target = eta * d / c
    _, exponent = math.frexp(target)  # target = m * 2^exponent with m in [0.5, 1)
    g = math.ldexp(1.0, exponent - 1)  # largest power of two <= target
    if not (g > 0.0 and math.isfinite(g)) or g < 2.0**-1000:
        raise InvalidParameterError(
            f"The sensitivity {d!r} is too small or the statistic ({size} values) too large for "
            "a floating-point grid; rescale the statistic."
        )
    return g


def grid_noise_scale(scale: float, sensitivity: float, size: int, norm: str, grid: float) -> float:
    """Noise scale for the grid-snapped statistic: ``scale * (1 + grid * c / sensitivity)``.

    ``scale`` is calibrated for ``sensitivity``; the snapped statistic has sensitivity
    ``sensitivity + grid * c`` (see :func:`grid_spacing`), so multiplying the scale by the same
    factor keeps the noise multiplier ``scale / sensitivity`` (all that the privacy events
    account for) exactly as declared. Rounded up.

    Examples
    --------
    >>> g = grid_spacing(2.0, 1, "l1")
    >>> grid_noise_scale(4.0, 2.0, 1, "l1", g) >= 4.0 * (2.0 + g) / 2.0
    True
    """
    c = _grid_coordinates_factor(size, norm)
    factor = 1.0 + grid * c / sensitivity
    out = scale * factor
    # Two ulps up cover the roundings of the quotient, the sum and the product.
    return math.nextafter(math.nextafter(out, math.inf), math.inf)
