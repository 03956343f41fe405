"""The convex program of Theorem 6 (Epasto et al., NeurIPS 2020, Section 5), solved exactly.

GWA releases ``C y + Lap(b)^d`` for a ``d x n`` matrix ``C`` with ``C X = I``; :func:`solve_gwa`
finds the ``C`` minimising its total variance (the kernels are in
:mod:`userdp.estimate._gwa_solver`, the method in docs/estimate.md), with the input checks and
Theorem 6's objective and sensitivity; :mod:`userdp.estimate.regression` builds on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from userdp._validation import check_arguments, check_real, first_non_float, warn
from userdp.estimate._gwa_solver import _Design, _solve_dual, _solve_lp
from userdp.estimate.weighting import check_features, factorize_users
from userdp.exceptions import DataError

__all__ = [
    "GWA_OBJECTIVE_PARAMETERS",
    "SOLVE_GWA_PARAMETERS",
    "GWASolution",
    "gwa_matrix",
    "gwa_objective",
    "gwa_sensitivity",
    "solve_gwa",
]


# -- input checks ----------------------------------------------------------------------------------
def _as_labels(y: object, n: int, caller: str) -> np.ndarray:
    try:
        arr = np.asarray(y, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise DataError(
            f"{caller}: 'y' must be a 1-D array of floats ({first_non_float(y)})."
        ) from err
    if arr.ndim != 1:
        raise DataError(f"{caller}: 'y' must be 1-D; got shape {arr.shape}.")
    if arr.size != n:
        raise DataError(f"{caller}: 'X' and 'y' must have the same length; got {n} and {arr.size}.")
    return arr


def clip_labels(labels: np.ndarray, bounds: tuple[float, float]) -> np.ndarray:
    """Private labels on the public label range, by the non-finite policy (docs/guarantees.md):
    ``+-inf`` clipped like any label out of range, a missing label (NaN) at the range's
    midpoint (the record and its public features stay; only its label is private). No error
    depends on whether a user holds one."""
    lo, hi = bounds
    return np.clip(np.where(np.isnan(labels), 0.5 * (lo + hi), labels), lo, hi)


def _as_codes(users: object, n: int, caller: str) -> tuple[np.ndarray, np.ndarray]:
    u = np.asarray(users)
    if u.ndim != 1:
        raise DataError(f"{caller}: 'users' must be 1-D; got shape {u.shape}.")
    if u.size != n:
        raise DataError(
            f"{caller}: 'X' and 'users' must have the same length; got {n} and {u.size}."
        )
    if n == 0:
        raise DataError(f"{caller} needs at least one record; got 0.")
    if u.dtype.kind == "f" and not np.isfinite(u).all():
        raise DataError(f"{caller}: 'users' contains NaN or infinite ids.")
    return factorize_users(u)


def _check_rank(x: np.ndarray, caller: str) -> None:
    n, d = x.shape
    if d == 0:
        raise DataError(f"{caller}: 'X' needs at least one column.")
    if n < d or np.linalg.matrix_rank(np.linalg.qr(x, mode="r")) < d:
        raise DataError(
            f"{caller}: the public design 'X' ({n} x {d}, intercept column included) must have "
            "full column rank, or no linear unbiased estimator C y with C X = I exists. Drop "
            "collinear or constant columns."
        )


def _nonnegative(value: object, name: str, caller: str) -> float:
    return check_real(value, name, caller, **NONNEGATIVE)


#: Rule of a finite float >= 0 (a variance, a noise unit).
NONNEGATIVE: dict[str, Any] = {"low": 0.0, "high": math.inf, "high_open": True}
#: Rules for every keyword of :func:`gwa_objective`.
GWA_OBJECTIVE_PARAMETERS: dict[str, dict[str, Any]] = {
    "noise_variance": NONNEGATIVE,
    "laplace_unit": NONNEGATIVE,
}
#: Rules for every keyword of :func:`solve_gwa` and :func:`gwa_matrix`.
SOLVE_GWA_PARAMETERS: dict[str, dict[str, Any]] = {
    **GWA_OBJECTIVE_PARAMETERS,
    "tol": {"low": 0.0, "high": 1.0, "low_open": True},
    "max_iter": {"int": True, "low": 1},
}


# -- Theorem 6 -------------------------------------------------------------------------------------
def _user_l1(matrix: np.ndarray, codes: np.ndarray, m: int) -> np.ndarray:
    """``g_l = sum_j sum_{i in S_l} |c_ji|`` for every user l (Algorithm 3, line 2)."""
    return np.bincount(codes, weights=np.abs(matrix).sum(axis=0), minlength=m)


def gwa_sensitivity(matrix: object, users: object) -> float:
    """``max_l sum_j sum_{i in S_l} |c_ji|``: the l1 sensitivity of ``C y`` per unit label range.

    Replacing the labels of user ``l`` (each in an interval of width B) moves ``C y`` by at most
    ``B`` times this in l1 norm (Algorithm 3, line 2; Theorem 6).
    """
    c = np.asarray(matrix, dtype=np.float64)
    if c.ndim != 2:
        raise DataError(f"gwa_sensitivity: 'matrix' must be 2-D (d x n); got shape {c.shape}.")
    codes, sizes = _as_codes(users, c.shape[1], "gwa_sensitivity")
    return float(_user_l1(c, codes, sizes.size).max())


def gwa_objective(
    matrix: object, users: object, *, noise_variance: float, laplace_unit: float
) -> float:
    """Theorem 6's total variance of ``GWA_C``.

    ``f(C) = noise_variance ||C||_F^2 + 2 d (laplace_unit max_l sum_{i in S_l} ||c_i||_1)^2``
    with ``laplace_unit = B / epsilon``. It is the expected squared error
    ``E ||beta~ - beta||^2`` when ``C X = I`` and the label noise is uncorrelated with variance
    ``noise_variance``.
    """
    params = dict(noise_variance=noise_variance, laplace_unit=laplace_unit)
    check_arguments(params, GWA_OBJECTIVE_PARAMETERS, "gwa_objective")
    nv, lu = float(noise_variance), float(laplace_unit)
    c = np.asarray(matrix, dtype=np.float64)
    t = gwa_sensitivity(c, users)
    return float(nv * np.vdot(c, c) + 2.0 * c.shape[0] * (lu * t) ** 2)


@dataclass(frozen=True)
class GWASolution:
    """The Theorem-6-optimal estimator matrix found by :func:`solve_gwa`, with diagnostics.

    Attributes
    ----------
    matrix : ndarray, shape (d, n)
        ``C``, with ``C X = I`` to rounding (projected exactly at the end). Column ``i``
        belongs to record ``i`` in the input order.
    objective : float
        ``f(C)`` of Theorem 6 for this very matrix (:func:`gwa_objective`).
    sensitivity : float
        ``max_l sum_{i in S_l} ||c_i||_1`` (:func:`gwa_sensitivity`); the Laplace scale of
        Algorithm 3 is ``laplace_unit`` times this.
    lower_bound : float
        A lower bound on ``min f`` from weak duality (``objective - lower_bound`` bounds the
        suboptimality; see docs/estimate.md, "The GWA solver").
    n_iter : int
        Newton iterations over all continuation stages (0 for the closed forms and the LP).
    converged : bool
        Whether the relative duality gap reached ``tol``.
    """

    matrix: np.ndarray
    objective: float
    sensitivity: float
    lower_bound: float
    n_iter: int
    converged: bool

    @property
    def relative_gap(self) -> float:
        """``(objective - lower_bound) / objective`` (0 when the objective is 0)."""
        if self.objective == 0.0:
            return 0.0
        return float((self.objective - self.lower_bound) / self.objective)


def _solve_codes(
    x: np.ndarray,
    codes: np.ndarray,
    sizes: np.ndarray,
    noise_variance: float,
    laplace_unit: float,
    tol: float,
    max_iter: int,
) -> GWASolution:
    """:func:`solve_gwa` on validated input (``x`` full rank, dense user codes)."""
    dz = _Design(x, codes, sizes)
    d = dz.d
    kappa = 2.0 * d * laplace_unit * laplace_unit
    n_iter = 0
    if kappa == 0.0:  # no Laplace noise: OLS minimises ||C||_F (Gauss-Markov)
        c = dz.project(dz.rinv @ dz.qt)
        lower = noise_variance * float(np.vdot(dz.rinv, dz.rinv))
    elif noise_variance == 0.0:
        c, t_lower = _solve_lp(dz)
        lower = kappa * t_lower * t_lower
    else:
        best, n_iter = _solve_dual(dz, noise_variance / kappa, tol=tol, max_iter=max_iter)
        c, lower = dz.project(best.matrix), noise_variance * best.lower
    t = float(dz.user_l1(c).max())
    objective = float(noise_variance * np.vdot(c, c) + kappa * t * t)
    lower = float(min(lower, objective))
    converged = bool(objective - lower <= tol * objective)
    if not objective - lower <= 1e-3 * objective:
        warn(
            f"solve_gwa stopped {(objective - lower) / objective:.2g} (relative) above the "
            f"optimum after {n_iter} Newton iterations; the estimator is still unbiased and "
            "private, only less accurate. Consider raising 'max_iter'.",
            UserWarning,
        )
    return GWASolution(dz.unsort(c), objective, t, lower, n_iter, converged)


def solve_gwa(
    X: object,
    users: object,
    *,
    noise_variance: float,
    laplace_unit: float,
    tol: float = 1e-8,
    max_iter: int = 500,
) -> GWASolution:
    """The ``C`` minimising Theorem 6's total variance subject to ``C X = I``.

    Minimises ``f(C) = noise_variance ||C||_F^2 + 2 d (laplace_unit max_l sum_{i in S_l}
    ||c_i||_1)^2`` (convex; Theorem 6) by the dual semismooth Newton method with continuation
    described in docs/estimate.md ("The GWA solver"), or as a linear program when
    ``noise_variance = 0``.

    Parameters
    ----------
    X : array-like of float, shape (n, d)
        The public design (include the intercept's column of ones yourself); full column rank.
    users : array-like, shape (n,)
        The user owning each record (the public partition ``S_l``).
    noise_variance : float
        ``sigma^2`` in ``[0, inf)``, the label noise variance the trade-off is planned for.
    laplace_unit : float
        ``B / epsilon`` in ``[0, inf)``: label range over the epsilon of the release.
    tol : float, default=1e-8
        Relative duality gap at which Newton stops.
    max_iter : int, default=500
        Newton iterations over all continuation stages.

    Returns
    -------
    GWASolution

    Raises
    ------
    DataError
        Bad shapes, non-finite features, or ``X`` without full column rank.
    InvalidParameterError
        A parameter out of range.

    Warns
    -----
    UserWarning
        When the certified relative gap is still above 1e-3 after ``max_iter`` iterations
        (the returned ``C`` is then valid, unbiased and private, only not optimal).

    Privacy
    -------
    Reads only ``X``, the partition and the two parameters, which must be public (or
    released); releases nothing by itself. Algorithm 3's noise is calibrated to whatever ``C``
    this returns.

    Notes
    -----
    ``noise_variance = 0`` is solved as a linear program with ``2 d n + 1`` variables, which is
    slower (~2 s at n = 3,500, d = 10) than the Newton path.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = np.column_stack([rng.normal(size=200), np.ones(200)])
    >>> users = np.repeat(np.arange(20), np.arange(1, 21))[:200]
    >>> sol = solve_gwa(X, users, noise_variance=1.0, laplace_unit=10.0)
    >>> bool(np.allclose(sol.matrix @ X, np.eye(2), atol=1e-10)), sol.relative_gap < 1e-8
    (True, True)
    """
    caller = "solve_gwa"
    params = dict(
        noise_variance=noise_variance, laplace_unit=laplace_unit, tol=tol, max_iter=max_iter
    )
    check_arguments(params, SOLVE_GWA_PARAMETERS, caller)
    nv, lu, tol, max_iter = float(noise_variance), float(laplace_unit), float(tol), int(max_iter)
    x = check_features(X, caller)
    codes, sizes = _as_codes(users, x.shape[0], caller)
    _check_rank(x, caller)
    return _solve_codes(x, codes, sizes, nv, lu, tol, max_iter)


def gwa_matrix(
    X: object,
    users: object,
    *,
    noise_variance: float,
    laplace_unit: float,
    tol: float = 1e-8,
    max_iter: int = 500,
) -> np.ndarray:
    """The d x n matrix ``C`` of :func:`solve_gwa` (Theorem 6's optimum, ``C X = I``)."""
    params = dict(
        noise_variance=noise_variance, laplace_unit=laplace_unit, tol=tol, max_iter=max_iter
    )
    check_arguments(params, SOLVE_GWA_PARAMETERS, "gwa_matrix")
    return solve_gwa(
        X,
        users,
        noise_variance=noise_variance,
        laplace_unit=laplace_unit,
        tol=tol,
        max_iter=max_iter,
    ).matrix
