"""Linear regression with label privacy: generalized weighted averaging (GWA) and sample limiting.

Epasto, Mahdian, Mao, Mirrokni and Ren, "Smoothly Bounding User Contributions in Differential
Privacy", NeurIPS 2020, Section 5. Features ``X`` (n x d) and the partition ``S_l`` of the
records among users are public; the labels ``y_i in [lower, upper]`` are private, and
neighbouring datasets replace the labels of one user's records (label privacy, [CH11]).

Every linear unbiased estimator of ``beta`` is ``C y`` with ``C X = I_d`` (``C`` is d x n).
Algorithm 3 (``GWA_C``) releases ``C y + (W_1, ..., W_d)`` with ``W_j ~ Lap(b)`` i.i.d. and
``b = B / epsilon * max_l sum_j sum_{i in S_l} |c_ji|``, ``B = upper - lower``: replacing user
``l``'s labels moves ``C y`` by ``sum_{i in S_l} c_i (y_i - y'_i)``, of l1 norm at most
``B sum_{i in S_l} ||c_i||_1`` (``c_i`` is column ``i`` of ``C``). Theorem 6: its total variance is

    f(C) = sigma^2 ||C||_F^2 + 2 d (B / epsilon * max_l sum_{i in S_l} ||c_i||_1)^2,

convex in ``C``. :func:`solve_gwa` minimises it over ``C X = I`` (see "The solver" below),
:func:`sample_limit_design` and :func:`best_limit_h_regression` build the sample-limiting
baseline of Section 5.2 (OLS on ``min(h, s_l)`` random records per user), and
:class:`LabelPrivateLinearRegression` fits either with a privacy accountant.

Centring
--------
Labels are released as ``C (y - mid) + mid * C 1`` with ``mid = (lower + upper) / 2``. ``C 1``
is public (it is ``e_d`` when the last column of ``X`` is the intercept's 1), so this equals
``C y`` and its sensitivity is the same, ``B max_l sum_{S_l} ||c_i||_1`` under replacement; the
centred labels only keep the arithmetic well scaled.

The solver
----------
With ``kappa = 2 d (B/epsilon)^2`` and ``rho = sigma^2 / kappa``, minimising ``f`` is
``min ||C||_F^2 + T^2 / rho`` subject to ``C X = I`` and ``g_l(C) = sum_{S_l} ||c_i||_1 <= T``.
Its Lagrange dual, with ``X = Q R`` (thin QR), multipliers ``N`` (d x d) for ``C Q = R^-1`` and
``nu_l >= 0`` for the user constraints, is the smooth, piecewise quadratic problem

    min_{N, nu >= 0}  phi = -<N, R^-1> + 1/2 sum_i ||soft(N q_i, nu_l(i))||^2 + rho/2 (sum nu)^2

whose minimiser gives ``c_i = soft(N q_i, nu_l(i))`` (soft-thresholding) and ``T = rho sum nu``.
It has ``d^2 + m`` variables and an exact generalized Hessian, so a projected semismooth Newton
method (Bertsekas 1982: epsilon-active bound set, projected Armijo search) reaches a relative
duality gap of ~1e-9 in tens of iterations. The Newton system is solved by a Schur complement
on the ``nu`` block (diagonal plus rank one); a ``nu_l`` at 0 whose step points below 0 is fixed
there and the step recomputed, and a ``nu_l`` with no active entry moves to its kink. Cost per
iteration ``O(n d^3 + m d^4 + d^6)``, memory ``O(n d + m d^2)``. Small ``rho`` (noise dominates
and every user ends at the bound) is reached by continuation: from ``10 rho*``, where
``rho* = T_ols^2 / ||C_ols||_F^2`` balances the two terms at OLS, down by factors of 10.
``sigma^2 = 0`` is the linear program ``min T`` (HiGHS).

Every iterate is projected exactly onto ``C X = I`` and the best one by the true objective is
kept, so the result is never worse than OLS. Two lower bounds certify it: the dual value, and
``sigma^2 ||C_ols||_F^2 + kappa T_low^2`` with ``T_low`` from the dual of ``min T``
(:class:`GWASolution` reports the gap). The noise scale is always computed from the returned
``C`` itself, so privacy never depends on how well the optimiser converged.

Measured (2 cores): n ~ 3,500, d = 10, 300 users of Zipf sizes up to 900 takes 0.1-0.3 s;
n = 320k with 3,000 users 9 s.

References
----------
.. [EMMMR20] A. Epasto, M. Mahdian, J. Mao, V. Mirrokni, L. Ren. "Smoothly Bounding User
   Contributions in Differential Privacy". NeurIPS 2020, Section 5 (Algorithm 3, Theorem 6,
   Section 5.2, Example 1 and Claim 3) and Section 6.
.. [CH11] K. Chaudhuri, D. Hsu. "Sample Complexity Bounds for Differentially Private
   Learning". COLT 2011 (label privacy).
.. [B82] D. P. Bertsekas. "Projected Newton Methods for Optimization Problems with Simple
   Constraints". SIAM J. Control Optim. 20(2), 1982.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, ClassVar

import dp_accounting
import numpy as np
from scipy import linalg

from userdp._validation import (
    MIN_EPSILON,
    check_choice,
    check_constraints,
    check_epsilon,
    check_int,
)
from userdp.estimate._gwa import (
    GWASolution,
    _as_codes,
    _as_labels,
    _check_rank,
    _nonnegative,
    _solve_codes,
    gwa_matrix,
    gwa_objective,
    gwa_sensitivity,
    solve_gwa,
)
from userdp.estimate.weighting import (
    best_smooth_h,
    check_bounds,
    check_features,
    limit_mask,
    smooth_weights,
)
from userdp.exceptions import DataError, InvalidParameterError, NotFittedError
from userdp.privacy.accountant import PrivacyAccountant
from userdp.privacy.noise import NoiseSource

__all__ = [
    "GWASolution",
    "LabelPrivateLinearRegression",
    "LabelPrivateRegressionResult",
    "SampleLimitDesign",
    "best_limit_h_regression",
    "gwa_linear_regression",
    "gwa_matrix",
    "gwa_objective",
    "gwa_sensitivity",
    "sample_limit_design",
    "solve_gwa",
]

_CALLER = "LabelPrivateLinearRegression"
METHODS = ("gwa", "sample-limit")
_FULL_CANDIDATES = 256  # best_limit_h_regression tries every h up to this size, then a grid


# -- sample limiting (Section 5.2) -----------------------------------------------------------------
@dataclass(frozen=True)
class SampleLimitDesign:
    """Sample limiting's estimator: OLS on ``min(h, s_l)`` random records of each user.

    Attributes
    ----------
    h : int
        The threshold.
    keep : bool ndarray, shape (n,)
        The records kept (a uniformly random ``min(h, s_l)`` of user ``l``'s).
    matrix : ndarray, shape (d, n)
        ``C^s = (U^T U)^-1 U^T`` expanded to n columns, zero for dropped records (Section 5.2),
        so ``C^s X = I`` and ``GWA_{C^s}`` is the sample-limiting algorithm.
    """

    h: int
    keep: np.ndarray
    matrix: np.ndarray


def _within_user_rank(codes: np.ndarray, sizes: np.ndarray, noise: NoiseSource) -> np.ndarray:
    """A uniformly random order of each user's records: rank 0 .. s_l - 1 per record.

    The construction of :func:`~userdp.estimate.weighting.limit_mask` (31-bit random keys,
    one sort by ``(user, key)``), so ``rank < h`` is a sample-limiting mask for every ``h`` at
    once and the masks are nested in ``h``.
    """
    n = codes.size
    keys = (codes << 31) | noise.random_bits(n, 31).astype(np.int64)
    order = np.argsort(keys)
    starts = np.cumsum(sizes) - sizes
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n, dtype=np.int64) - starts[codes[order]]
    return rank


def _ols_on(x: np.ndarray, keep: np.ndarray) -> np.ndarray | None:
    """``(U^T U)^-1 U^T`` on the kept rows, expanded with zero columns; None if rank-deficient."""
    u = x[keep]
    d = x.shape[1]
    if u.shape[0] < d:
        return None
    q, r = np.linalg.qr(u)
    diag = np.abs(np.diag(r))
    if np.linalg.matrix_rank(r) < d or diag.min() <= 0:
        return None
    rinv = linalg.solve_triangular(r, np.eye(d))
    c_keep = rinv @ q.T
    for _ in range(2):  # exact projection onto C U = I, as in _Design.project
        c_keep = c_keep - ((c_keep @ u - np.eye(d)) @ rinv) @ q.T
    c = np.zeros((d, x.shape[0]))
    c[:, keep] = c_keep
    return c


def _limit_candidates(s_max: int) -> np.ndarray:
    """Every h in 1..s_max when s_max <= 256; else 1..64 and a geometric grid up to s_max."""
    if s_max <= _FULL_CANDIDATES:
        return np.arange(1, s_max + 1)
    grid = np.round(np.geomspace(64, s_max, _FULL_CANDIDATES - 64)).astype(np.int64)
    return np.unique(np.concatenate([np.arange(1, 65), grid, [s_max]]))


def _best_limit(
    x: np.ndarray, codes: np.ndarray, sizes: np.ndarray, noise_variance: float,
    laplace_unit: float, noise: NoiseSource,
) -> SampleLimitDesign:  # fmt: skip
    """Minimise Section 5.2's total variance over h on one nested random sample."""
    d = x.shape[1]
    rank = _within_user_rank(codes, sizes, noise)
    by_rank = np.argsort(rank, kind="stable")
    cands = _limit_candidates(int(sizes.max()))
    ends = np.searchsorted(rank[by_rank], cands)  # records with rank < h come first
    xs, cs = x[by_rank], codes[by_rank]  # the sample at h is the prefix xs[:end]
    gram, done = np.zeros((d, d)), 0
    best_h, best_f = int(cands[-1]), math.inf
    for h, end in zip(cands.tolist(), ends.tolist(), strict=True):
        gram += xs[done:end].T @ xs[done:end]  # U^T U of the records kept at h
        done = end
        eig = np.linalg.eigvalsh(gram)
        if end < d or eig[0] <= 1e-12 * eig[-1]:
            continue  # the kept records do not identify beta
        cols = np.linalg.inv(gram) @ xs[:end].T  # c_i = (U^T U)^-1 x_i
        t = float(np.bincount(cs[:end], weights=np.abs(cols).sum(axis=0)).max())
        f = noise_variance * float(np.vdot(cols, cols)) + 2.0 * d * (laplace_unit * t) ** 2
        if f < best_f:
            best_h, best_f = h, f
    keep = rank < best_h
    matrix = _ols_on(x, keep)
    if matrix is None:  # unreachable: h = max s keeps every record and X has full rank
        raise DataError("best_limit_h_regression: no threshold h identifies beta.")
    return SampleLimitDesign(best_h, keep, matrix)


def _limit_design(
    x: np.ndarray, codes: np.ndarray, sizes: np.ndarray, h: int, noise: NoiseSource, caller: str
) -> SampleLimitDesign:
    keep = limit_mask(codes, sizes, h, noise)
    matrix = _ols_on(x, keep)
    if matrix is None:
        raise DataError(
            f"{caller}: the {int(keep.sum())} records kept at h={h} do not determine all "
            f"{x.shape[1]} coefficients (U^T U is singular); use a larger h."
        )
    return SampleLimitDesign(int(h), keep, matrix)


def sample_limit_design(
    X: object, users: object, h: int, *, noise: NoiseSource | None = None
) -> SampleLimitDesign:
    """Sample limiting with threshold ``h`` (Section 5.2): OLS on ``min(h, s_l)`` records each.

    The records are drawn by :func:`~userdp.estimate.weighting.limit_mask` from ``noise``
    (OS entropy when None). The draw reads only the public partition, never the labels.

    Raises
    ------
    DataError
        Bad shapes, or the kept records do not determine ``beta`` (``U^T U`` singular).
    """
    caller = "sample_limit_design"
    h = check_int(h, "h", caller, low=1)
    x = check_features(X, caller)
    codes, sizes = _as_codes(users, x.shape[0], caller)
    return _limit_design(x, codes, sizes, h, noise if noise is not None else NoiseSource(), caller)


def best_limit_h_regression(
    X: object,
    users: object,
    *,
    noise_variance: float,
    laplace_unit: float,
    noise: NoiseSource | None = None,
) -> SampleLimitDesign:
    """Sample limiting at the integer ``h`` minimising Section 5.2's total variance.

    For a kept sample ``U`` the variance is Theorem 6's ``f(C^s)``, which depends on *which*
    records were kept. One random order of each user's records is drawn (from ``noise``) and
    the sample at ``h`` is the first ``min(h, s_l)`` records of user ``l`` in that order, so the
    samples are nested in ``h``; ``f`` is evaluated on these actual samples and the sample of
    the best ``h`` is the one returned and used (no re-draw). Candidates: every ``h`` up to
    ``max s_l`` when that is <= 256, else 1..64 and a geometric grid of ~190 values up to
    ``max s_l``; ties go to the smallest ``h``. Cost ``O(#candidates * n d^2)``.

    Only public values are read (``X``, the partition, ``noise_variance`` and
    ``laplace_unit``, which must themselves be public or released), so the choice spends no
    privacy budget.
    """
    caller = "best_limit_h_regression"
    nv = _nonnegative(noise_variance, "noise_variance", caller)
    lu = _nonnegative(laplace_unit, "laplace_unit", caller)
    x = check_features(X, caller)
    codes, sizes = _as_codes(users, x.shape[0], caller)
    _check_rank(x, caller)
    return _best_limit(x, codes, sizes, nv, lu, noise if noise is not None else NoiseSource())


# -- the release (Algorithm 3) ---------------------------------------------------------------------
def _release(
    matrix: np.ndarray, y: np.ndarray, codes: np.ndarray, bounds: tuple[float, float],
    epsilon: float, noise: NoiseSource, accountant: PrivacyAccountant,
) -> tuple[np.ndarray, float, float]:  # fmt: skip
    """``GWA_C``: ``C y + Lap(b)^d`` with ``b`` computed from this very ``C`` (Algorithm 3).

    Returns ``(beta~, b, l1 sensitivity)``. ``y`` is clipped to ``bounds`` and centred at
    ``mid``: ``C y = C (y - mid) + mid C 1`` with ``C 1`` public (module docstring).
    """
    lo, hi = bounds
    width, mid = hi - lo, 0.5 * (lo + hi)
    per_unit = float(np.bincount(codes, weights=np.abs(matrix).sum(axis=0)).max())
    sensitivity = width * per_unit  # line 2: B max_l sum_j sum_{i in S_l} |c_ji|
    scale = sensitivity / epsilon
    accountant.compose(dp_accounting.LaplaceDpEvent(scale / sensitivity))
    beta = matrix @ (np.clip(y, lo, hi) - mid) + mid * matrix.sum(axis=1)  # line 1
    beta = noise.add_laplace(
        beta, scale, statistic="gwa.coefficients", l1=sensitivity, neighbours="replace-values"
    )  # lines 3-4
    return beta, scale, sensitivity


@dataclass(frozen=True)
class LabelPrivateRegressionResult:
    """A label-private linear regression released by :func:`gwa_linear_regression`.

    Attributes
    ----------
    coef : ndarray, shape (d,)
        ``beta~ = C y + Lap(noise_scale)^d`` (Algorithm 3).
    noise_scale : float
        The Laplace scale ``b`` of each coordinate.
    sensitivity : float
        l1 sensitivity of ``C y`` under replacing one user's labels,
        ``B max_l sum_j sum_{i in S_l} |c_ji|``; ``noise_scale = sensitivity / epsilon``.
    objective : float or None
        Theorem 6's total variance of ``beta~`` at the given ``noise_variance`` (None when no
        ``noise_variance`` was given).
    epsilon : float
        The privacy budget spent (the accountant's total).
    matrix : ndarray, shape (d, n)
        The public estimator ``C`` used.
    dp_event : dp_accounting.DpEvent
    """

    coef: np.ndarray
    noise_scale: float
    sensitivity: float
    objective: float | None
    epsilon: float
    matrix: np.ndarray
    dp_event: dp_accounting.DpEvent

    def summary(self) -> str:
        """One line: dimension, noise and budget."""
        return (
            f"GWA label-private regression, d={self.coef.size}, Laplace scale "
            f"{self.noise_scale:.3g} (l1 sensitivity {self.sensitivity:.3g}), "
            f"epsilon={self.epsilon:g}"
        )


def _check_epsilon(epsilon: object, caller: str) -> float:
    return check_epsilon(epsilon, caller)


def _check_label_range(label_range: object, caller: str) -> tuple[float, float]:
    try:
        return check_bounds(label_range, caller)
    except InvalidParameterError as err:
        raise InvalidParameterError(str(err).replace("'bounds'", "'label_range'")) from err


def gwa_linear_regression(
    X: object,
    y: object,
    users: object,
    *,
    epsilon: float,
    label_range: tuple[float, float],
    noise_variance: float | None = None,
    matrix: object | None = None,
    seed: int | None = None,
) -> LabelPrivateRegressionResult:
    """One label-private GWA release of ``beta`` (Algorithm 3) on the design ``X`` as given.

    Parameters
    ----------
    X : array-like of float, shape (n, d)
        Public features, full column rank (add a column of ones for an intercept).
    y : array-like of float, shape (n,)
        Private labels; clipped to ``label_range`` (never read to set it).
    users : array-like, shape (n,)
        Public partition of the records among users.
    epsilon : float
        In (0, inf).
    label_range : (float, float)
        ``(lower, upper)`` with lower < upper; ``B = upper - lower``.
    noise_variance : float or None, default=None
        A *public* label noise variance sigma^2 >= 0 to plan ``C`` for (:func:`solve_gwa` with
        ``laplace_unit = B / epsilon``). Passing the data's own OLS residual variance is not
        private unless that value is public (the paper's experimental protocol treats it so).
    matrix : array-like of float, shape (d, n), or None
        A fixed public ``C`` with ``C X = I``; overrides the optimisation. Privacy holds for any
        ``C`` (the noise is calibrated to it); ``C X = I`` makes ``beta~`` unbiased.
    seed : int or None, default=None
        None draws noise from OS entropy; an integer is for tests and benchmarks only.

    Returns
    -------
    LabelPrivateRegressionResult

    Raises
    ------
    InvalidParameterError
        A parameter out of range, neither ``noise_variance`` nor ``matrix`` given, or a
        ``matrix`` of the wrong shape or with ``C X != I``.
    DataError
        Mismatched lengths, non-finite values, or ``X`` without full column rank.

    Privacy
    -------
    Label privacy with user-level neighbours: ``X`` and the partition ``S_l`` are public and
    neighbouring datasets replace the labels of one user's records. ``C y`` then moves by at
    most ``B max_l sum_j sum_{i in S_l} |c_ji|`` in l1 (Algorithm 3, line 2; Theorem 6) and
    gets Laplace noise of that scale over epsilon: one
    ``LaplaceDpEvent(noise_scale / sensitivity)``, epsilon-DP. ``C`` reads only public values.
    """
    caller = "gwa_linear_regression"
    eps = _check_epsilon(epsilon, caller)
    bounds = _check_label_range(label_range, caller)
    nv = None if noise_variance is None else _nonnegative(noise_variance, "noise_variance", caller)
    if seed is not None:
        check_int(seed, "seed", caller, low=0)
    x = check_features(X, caller)
    labels = _as_labels(y, x.shape[0], caller)
    codes, sizes = _as_codes(users, x.shape[0], caller)
    _check_rank(x, caller)
    if matrix is not None:
        c = np.asarray(matrix, dtype=np.float64)
        if c.shape != (x.shape[1], x.shape[0]) or not np.isfinite(c).all():
            raise InvalidParameterError(
                f"The 'matrix' parameter of {caller} must be a finite {x.shape[1]} x "
                f"{x.shape[0]} array. Got shape {c.shape} instead."
            )
        err = float(np.abs(c @ x - np.eye(x.shape[1])).max())
        if err > 1e-6:
            raise InvalidParameterError(
                f"The 'matrix' parameter of {caller} must satisfy C X = I (an unbiased "
                f"estimator); max |C X - I| is {err:.3g}."
            )
    elif nv is None:
        raise InvalidParameterError(
            f"{caller} needs a public 'noise_variance' to choose C (or a fixed 'matrix'); use "
            "LabelPrivateLinearRegression(noise_variance='estimate') to estimate it privately."
        )
    else:
        width = bounds[1] - bounds[0]
        c = _solve_codes(x, codes, sizes, nv, width / eps, 1e-8, 500).matrix
    noise, acc = NoiseSource(seed), PrivacyAccountant()
    beta, scale, sens = _release(c, labels, codes, bounds, eps, noise, acc)
    # Theorem 6: sigma^2 ||C||_F^2 + 2 d b^2 (b = B/epsilon max_l sum_{S_l} ||c_i||_1).
    objective = None if nv is None else float(nv * np.vdot(c, c) + 2.0 * c.shape[0] * scale**2)
    return LabelPrivateRegressionResult(
        beta, scale, sens, objective, acc.spent().epsilon, c, acc.event
    )


# -- a private estimate of the label noise variance ------------------------------------------------
_VARIANCE_FLOOR = 1e-6  # the estimate is clipped to [_VARIANCE_FLOOR B^2, B^2 / 4]


def _private_noise_variance(
    x: np.ndarray, y: np.ndarray, codes: np.ndarray, sizes: np.ndarray,
    bounds: tuple[float, float], epsilon: float, noise: NoiseSource,
    accountant: PrivacyAccountant,
) -> float:  # fmt: skip
    """sigma^2 from a pilot GWA fit and a smoothly weighted mean of its squared residuals.

    Two Laplace releases of ``epsilon / 2`` each (see :class:`LabelPrivateLinearRegression`,
    Notes). ``y`` must already be clipped to ``bounds``.
    """
    lo, hi = bounds
    width = hi - lo
    cap = width * width
    eps_pilot = 0.5 * epsilon
    eps_mean = epsilon - eps_pilot
    # 1. Pilot beta_0: GWA planned for the largest variance a label in [lo, hi] can have.
    pilot = _solve_codes(x, codes, sizes, 0.25 * cap, width / eps_pilot, 1e-6, 200)
    beta0, _, _ = _release(pilot.matrix, y, codes, bounds, eps_pilot, noise, accountant)
    # 2. A smoothly weighted mean of its squared residuals.
    h = best_smooth_h(sizes, 0.25 * cap * cap, cap / eps_mean)  # Claim 1 for r in [0, B^2]
    mean, sens = _residual_mean(x, y, beta0, codes, sizes, bounds, h)
    scale = sens / eps_mean
    accountant.compose(dp_accounting.LaplaceDpEvent(scale / sens))
    estimate = float(noise.add_laplace(mean, scale, statistic="gwa.residual_variance", l1=sens,
                                       neighbours="replace-values"))  # fmt: skip
    return float(np.clip(estimate, _VARIANCE_FLOOR * cap, 0.25 * cap))


def _residual_mean(
    x: np.ndarray, y: np.ndarray, beta0: np.ndarray, codes: np.ndarray, sizes: np.ndarray,
    bounds: tuple[float, float], h: float,
) -> tuple[float, float]:  # fmt: skip
    """``(sum_i c_i r_i, B^2 max_l sum_{S_l} c_i)``: the released statistic and its sensitivity.

    ``r_i = (y_i - clip(x_i beta0))^2`` lies in ``[0, B^2]`` for labels in the range; ``c`` are
    Lemma 3's weights normalised by n_h, which depend on the public partition only. With the
    released pilot ``beta0`` fixed (adaptive composition), replacing one user's labels moves
    the statistic by at most ``B^2 max_l sum_{S_l} c_i`` (Lemma 1).
    """
    lo, hi = bounds
    r = (y - np.clip(x @ beta0, lo, hi)) ** 2
    w = smooth_weights(codes, sizes, h)  # Lemma 3: user l's weights sum to min(h, s_l)
    n_h = float(w.sum())
    sens = (hi - lo) ** 2 * float(np.bincount(codes, weights=w).max()) / n_h
    return float(w @ r) / n_h, sens


# -- the estimator ---------------------------------------------------------------------------------
class LabelPrivateLinearRegression:
    """Linear regression with user-level label privacy (Epasto et al. 2020, Section 5).

    ``method="gwa"`` releases ``beta~ = C y + Lap(b)^d`` (Algorithm 3) with the ``C`` that
    minimises Theorem 6's total variance (:func:`solve_gwa`); ``method="sample-limit"`` is the
    baseline of Section 5.2: OLS on ``min(h, s_l)`` random records per user, released the
    same way.

    Parameters
    ----------
    epsilon : float
        Total epsilon, in (0, inf).
    label_range : (float, float)
        ``(lower, upper)``, lower < upper: labels are clipped to it (never read to set it);
        ``B = upper - lower``.
    method : {"gwa", "sample-limit"}, default="gwa"
    h : int, "best", "max" or None, default=None
        Sample limiting only (an error with ``"gwa"``): an integer threshold >= 1, ``"max"``
        (keep every record: plain OLS, the paper's ``h_max``), or ``"best"`` (the default
        when None): the integer minimising Section 5.2's variance
        (:func:`best_limit_h_regression`) for ``noise_variance``.
    noise_variance : float or "estimate", default="estimate"
        sigma^2, the label noise variance ``C`` is planned for. A float is treated as
        **public** (the paper's protocol: "we treat it as public knowledge and compute it with
        OLS regression"); passing the OLS residual variance of the very data being protected
        is *not* private unless that number is public. ``"estimate"`` spends
        ``selection_share`` of epsilon on a private estimate (see Notes). Not used (and no
        budget spent on it) by sample limiting with an integer ``h`` or ``"max"``.
    fit_intercept : bool, default=True
        Append a public column of ones to ``X`` (it is part of d in Theorem 6).
    selection_share : float, default=0.1
        Share of epsilon for the noise-variance estimate, in (0, 1).
    seed : int or None, default=None
        None draws noise from OS entropy. An integer is for tests and reproducible benchmarks
        only: a model fitted with a known seed offers no privacy.

    Attributes
    ----------
    coef_ : ndarray, shape (n_features,)
    intercept_ : float
        0.0 when ``fit_intercept`` is False.
    matrix_ : ndarray, shape (d, n)
        The public estimator ``C`` used (d = n_features + fit_intercept; the intercept is the
        last row). ``C X = I``.
    noise_scale_ : float
        Laplace scale ``b`` of every released coordinate: ``sensitivity_ / epsilon`` of the
        release.
    sensitivity_ : float
        l1 sensitivity of ``C y``: ``B max_l sum_j sum_{i in S_l} |c_ji|`` (Algorithm 3).
    noise_variance_ : float or None
        The sigma^2 used: the public value, or the released estimate; None when not needed.
    objective_ : float or None
        Theorem 6's total variance of the release at ``noise_variance_``.
    relative_gap_ : float or None
        GWA only: the solver's certified relative distance to the optimal ``C``.
    h_ : int or None
        Sample limiting's threshold.
    selection_epsilon_ : float
        Epsilon spent on ``noise_variance="estimate"`` (0 otherwise).
    dp_event_ : dp_accounting.ComposedDpEvent
        Every release (Laplace events only).
    epsilon_ : float
        Epsilon spent, from a fresh :class:`~userdp.privacy.PrivacyAccountant`; equals
        ``epsilon``.
    n_features_in_ : int

    Privacy
    -------
    Label privacy at the user level (Section 5): ``X``, the partition ``S_l`` (which records
    belong to which user, hence the sizes ``s_l``) and ``label_range`` are public;
    neighbouring datasets replace the labels of one user's records with any values in the
    range. ``C`` is computed from public values only (and the released sigma^2), so
    ``C y`` has l1 sensitivity ``B max_l sum_j sum_{i in S_l} |c_ji|``, computed from the
    final ``C`` itself, and gets Laplace noise of that over epsilon (Theorem 6): one
    ``LaplaceDpEvent``. With ``noise_variance="estimate"`` two more Laplace releases precede
    it (see Notes); the three compose to ``epsilon`` exactly (basic composition). A float
    ``noise_variance`` must itself be public. Sample limiting's record draw reads only the
    partition. There is no add/remove-user mode: ``C`` must be chosen from public data, so
    ``X`` and the partition (and with it every ``s_l``) are public by assumption.

    Notes
    -----
    ``noise_variance="estimate"`` spends ``eps_s = selection_share * epsilon`` in two halves:

    1. A pilot ``beta_0`` is released by GWA at ``eps_s / 2`` (Algorithm 3), its ``C`` planned
       for sigma^2 = B^2/4, the largest variance a label in the range can have.
    2. With predictions clipped to the range, ``r_i = (y_i - clip(x_i beta_0))^2 in [0, B^2]``.
       Their smoothly weighted mean ``sum_i w_i r_i / n_h`` (Lemma 3's ``w_i = min(h, s_l)/s_l``,
       public because the sizes are; ``h`` from Claim 1 for values in ``[0, B^2]``) has
       sensitivity ``B^2 max_l min(h, s_l) / n_h`` under replacement (``beta_0`` is already
       released, a fixed input by adaptive composition; Lemma 1) and is released with Laplace
       noise at ``eps_s / 2``.
    3. The estimate is clipped to ``[1e-6 B^2, B^2/4]`` (a positive floor keeps ``C`` away from
       the degenerate vertices of the ``sigma^2 = 0`` linear program).

    ``C`` is then planned for this sigma^2 and released with ``(1 - selection_share) epsilon``;
    the three Laplace releases compose to ``epsilon`` exactly. The pilot's own noise inflates
    the residuals, so at small budgets the estimate is biased *upwards* (a conservative plan:
    ``C`` closer to OLS) and often sits at ``B^2/4``; subtracting the pilot's known noise
    contribution (``2 b_0^2 ||x_i||^2``) was tried and over-corrects to the floor, because of the
    clipping. Why this is acceptable: measured on synthetic Zipf-user data (d = 8-10,
    epsilon 0.3-3, linear model true), planning ``C`` with the true sigma^2, with ``B^2/4``
    (5-25 times too large) or with ``1e-6 B^2`` (10^4-10^5 times too small) changed the final
    prediction error by at most ~13%, so most of the cost of ``"estimate"`` is the
    ``selection_share`` of the budget, not the estimate's error. Give a public bound on
    sigma^2 when one is known.

    Theorem 6 assumes ``y = X beta + noise`` with independent, equal-variance noise. When users
    differ systematically, ``C y`` estimates ``C E[y]``, which depends on ``C``: a ``C`` that
    caps heavy users down-weights them and its noise-free fit can be worse than OLS's. The
    error then has a bias part that Theorem 6 does not count.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(3000, 2))
    >>> users = rng.zipf(1.5, 3000) % 400
    >>> y = np.clip(5.0 + X @ [1.0, -1.0] + rng.normal(size=3000), 0.0, 10.0)
    >>> model = LabelPrivateLinearRegression(epsilon=1.0, label_range=(0.0, 10.0), seed=0)
    >>> model = model.fit(X, y, users)
    >>> round(model.epsilon_, 9)
    1.0
    >>> bool(np.abs(model.coef_ - [1.0, -1.0]).max() < 0.5)
    True
    """

    _parameter_constraints: ClassVar[dict[str, dict[str, Any]]] = {
        "epsilon": {"low": MIN_EPSILON, "high": math.inf, "high_open": True},
        "method": {"choices": METHODS},
        "fit_intercept": {"bool": True},
        "selection_share": {"low": 0.0, "high": 1.0, "low_open": True, "high_open": True},
        "seed": {"int": True, "low": 0, "none": True},
    }

    def __init__(
        self,
        *,
        epsilon: float,
        label_range: tuple[float, float],
        method: str = "gwa",
        h: int | str | None = None,
        noise_variance: float | str = "estimate",
        fit_intercept: bool = True,
        selection_share: float = 0.1,
        seed: int | None = None,
    ) -> None:
        self.epsilon = epsilon
        self.label_range = label_range
        self.method = method
        self.h = h
        self.noise_variance = noise_variance
        self.fit_intercept = fit_intercept
        self.selection_share = selection_share
        self.seed = seed

    # -- validation -------------------------------------------------------------------------
    def _validate_params(self) -> tuple[tuple[float, float], int | str | None, float | None]:
        """Check every parameter; returns (bounds, h mode, public noise variance or None)."""
        check_constraints(self, self._parameter_constraints, _CALLER)
        bounds = _check_label_range(self.label_range, _CALLER)
        if isinstance(self.noise_variance, str):
            check_choice(self.noise_variance, "noise_variance", _CALLER, ["estimate"])
            public_variance = None
        else:
            public_variance = _nonnegative(self.noise_variance, "noise_variance", _CALLER)
        return bounds, self._h_mode(), public_variance

    def _h_mode(self) -> int | str | None:
        h = self.h
        if self.method == "gwa":
            if h is not None:
                raise InvalidParameterError(
                    f"The 'h' parameter of {_CALLER} is only used with method='sample-limit'; "
                    f"got h={h!r} with method='gwa'. Leave h=None."
                )
            return None
        if h is None:
            return "best"
        if isinstance(h, str):
            return check_choice(h, "h", _CALLER, ["best", "max"])
        if isinstance(h, bool) or not isinstance(h, numbers.Integral) or h < 1:
            raise InvalidParameterError(
                f"The 'h' parameter of {_CALLER} must be an int in the range [1, inf), 'best' "
                f"or 'max'. Got {h!r} instead."
            )
        return int(h)

    def _validate_data(self, X: object, y: object, users: object) -> tuple:
        x = check_features(X, f"{_CALLER}.fit")
        labels = _as_labels(y, x.shape[0], f"{_CALLER}.fit")
        codes, sizes = _as_codes(users, x.shape[0], f"{_CALLER}.fit")
        if self.fit_intercept:
            x = np.column_stack([x, np.ones(x.shape[0])])
        _check_rank(x, f"{_CALLER}.fit")
        return x, labels, codes, sizes

    # -- fitting ----------------------------------------------------------------------------
    def fit(self, X: object, y: object, users: object) -> LabelPrivateLinearRegression:
        """Fit on public features ``X`` (n, p), private labels ``y`` (n,) and public ``users``.

        Raises
        ------
        InvalidParameterError
            A constructor parameter is out of range (checked before the data are read).
        DataError
            Mismatched lengths, non-finite values, or a design without full column rank.
        """
        bounds, h_mode, public_variance = self._validate_params()
        x, labels, codes, sizes = self._validate_data(X, y, users)
        labels = np.clip(labels, *bounds)
        width = bounds[1] - bounds[0]
        noise, acc = NoiseSource(self.seed), PrivacyAccountant()
        eps = float(self.epsilon)
        eps_sel, sigma2 = 0.0, public_variance
        if public_variance is None and (self.method == "gwa" or h_mode == "best"):
            # (an explicit h or "max" needs no variance: nothing is spent on it)
            eps_sel = self.selection_share * eps
            sigma2 = _private_noise_variance(x, labels, codes, sizes, bounds, eps_sel, noise, acc)
        eps_main = eps - eps_sel
        unit = width / eps_main
        self.h_, self.relative_gap_ = None, None
        if self.method == "gwa":
            solution = _solve_codes(x, codes, sizes, sigma2, unit, 1e-8, 500)
            matrix = solution.matrix
            self.relative_gap_ = solution.relative_gap
        else:
            if h_mode == "best":
                design = _best_limit(x, codes, sizes, sigma2, unit, noise)
            elif h_mode == "max":
                design = SampleLimitDesign(
                    int(sizes.max()), np.ones(x.shape[0], dtype=bool),
                    _ols_on(x, np.ones(x.shape[0], dtype=bool)),
                )  # fmt: skip
            else:
                design = _limit_design(x, codes, sizes, h_mode, noise, f"{_CALLER}.fit")
            matrix, self.h_ = design.matrix, design.h
        beta, scale, sens = _release(matrix, labels, codes, bounds, eps_main, noise, acc)
        d = x.shape[1]
        self.coef_ = beta[: d - 1] if self.fit_intercept else beta
        self.intercept_ = float(beta[-1]) if self.fit_intercept else 0.0
        self.matrix_ = matrix
        self.noise_scale_ = scale
        self.sensitivity_ = sens
        self.noise_variance_ = sigma2
        self.objective_ = (
            None if sigma2 is None else float(sigma2 * np.vdot(matrix, matrix) + 2 * d * scale**2)
        )
        self.selection_epsilon_ = eps_sel
        self.dp_event_ = acc.event
        self.epsilon_ = acc.spent().epsilon
        self.n_features_in_ = d - 1 if self.fit_intercept else d
        return self

    # -- prediction -------------------------------------------------------------------------
    def _check_fitted(self) -> None:
        if not hasattr(self, "coef_"):
            raise NotFittedError(f"This {_CALLER} is not fitted yet; call fit first.")

    def predict(self, X: object) -> np.ndarray:
        """``X @ coef_ + intercept_``, shape (n,)."""
        self._check_fitted()
        x = check_features(X, f"{_CALLER}.predict")
        if x.shape[1] != self.n_features_in_:
            raise DataError(
                f"{_CALLER}.predict: X has {x.shape[1]} features; the model was fitted on "
                f"{self.n_features_in_}."
            )
        return x @ self.coef_ + self.intercept_
