"""The releases of label-private linear regression (Epasto et al., NeurIPS 2020, Section 5).

One release on a design as given (:func:`gwa_linear_regression`), Algorithm 3's release of
``C y`` with Laplace noise calibrated to ``C`` itself (:func:`release_coefficients`), and the
private estimate of the label noise variance that plans ``C`` when no public one is given
(:func:`private_noise_variance`). The estimator is in :mod:`userdp.estimate.regression`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from userdp._validation import check_arguments
from userdp.estimate._common import (
    ACCOUNTANT,
    EPSILON,
    LAPLACE_95,
    SEED,
    Ledger,
    Release,
    bounds_rule,
    budget_text,
    laplace_event,
    laplace_release,
    noise_summary,
)
from userdp.estimate._gwa import _as_codes, _as_labels, _check_rank, _solve_codes, clip_labels
from userdp.estimate.weighting import best_smooth_h, check_bounds, check_features, smooth_weights
from userdp.exceptions import InvalidParameterError
from userdp.privacy.accountant import PrivacyAccountant
from userdp.privacy.noise import NoiseSource

__all__ = [
    "GWA_LINEAR_REGRESSION_PARAMETERS",
    "LabelPrivateRegressionResult",
    "gwa_linear_regression",
    "private_noise_variance",
    "release_coefficients",
]


# -- one release on a design as given --------------------------------------------------------------
@dataclass(frozen=True)
class LabelPrivateRegressionResult(Release):
    """A label-private linear regression released by :func:`gwa_linear_regression`.

    Attributes
    ----------
    budget : PrivacyBudget
        The ``(epsilon, 0)`` spent (pure DP).
    dp_event : dp_accounting.DpEvent
        The release's ``LaplaceDpEvent``, composed.
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
    matrix : ndarray, shape (d, n)
        The public estimator ``C`` used.
    epsilon : float
        ``budget.epsilon`` (a property).
    """

    coef: np.ndarray
    noise_scale: float
    sensitivity: float
    objective: float | None
    matrix: np.ndarray

    _NOT_IN_DICT = ("dp_event", "matrix")  # C is public and d x n: not part of the release

    def summary(self) -> str:
        """One line: dimension, noise and budget."""
        return (
            f"GWA label-private regression, d={self.coef.size}, Laplace scale "
            f"{self.noise_scale:.3g} (l1 sensitivity {self.sensitivity:.3g}), "
            f"{budget_text(self.budget)}{noise_summary(self.noise())}"
        )

    def noise(self) -> dict[str, Any]:
        """Per coordinate: Laplace(``noise_scale``) noise, sd ``sqrt(2) b``, and the exact 95%
        noise interval ``coef -/+ b ln 20`` (each coordinate alone, not simultaneously)."""
        b = float(self.noise_scale)
        half = b * LAPLACE_95
        return {
            "noise_sd": np.full(self.coef.shape, math.sqrt(2.0) * b),
            "interval95": (self.coef - half, self.coef + half),
            "noise": "laplace",
        }


def _check_matrix(value: object, name: str, caller: str) -> None:
    """Rule for a fixed ``C``: a finite 2-D float array (its shape is checked against ``X``)."""
    try:
        c = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        c = None
    if c is None or c.ndim != 2 or not np.isfinite(c).all():
        raise InvalidParameterError(
            f"The {name!r} parameter of {caller} must be a finite 2-D array (d x n). Got "
            f"{type(value).__name__} instead."
        )


#: Rules for every keyword of :func:`gwa_linear_regression` (checked before any data is read).
GWA_LINEAR_REGRESSION_PARAMETERS: dict[str, dict[str, Any]] = {
    "epsilon": EPSILON,
    "label_range": {"check": bounds_rule, "cli": False},
    "noise_variance": {"low": 0.0, "high": math.inf, "high_open": True, "none": True},
    "matrix": {"check": _check_matrix, "none": True, "cli": False},
    "seed": SEED,
    "accountant": ACCOUNTANT,
}


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
    accountant: PrivacyAccountant | None = None,
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
        A seed may be used once per accountant: a second release with a seed its
        ``accountant`` already holds is refused before any data is read (the same seed
        draws the same noise, and differencing the two releases would cancel it).
    accountant : PrivacyAccountant or None, default=None
        A shared accountant to charge the release to. If it holds a total budget that this
        release would exceed, :class:`BudgetExceededError` is raised before the data are read.

    Returns
    -------
    LabelPrivateRegressionResult

    Raises
    ------
    InvalidParameterError
        A parameter breaks its rule in :data:`GWA_LINEAR_REGRESSION_PARAMETERS`, neither
        ``noise_variance`` nor ``matrix`` is given, or ``matrix`` has the wrong shape or
        ``C X != I``.
    BudgetExceededError
        ``accountant`` cannot afford ``epsilon`` (checked before any work).
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
    params = dict(
        epsilon=epsilon,
        label_range=label_range,
        noise_variance=noise_variance,
        matrix=matrix,
        seed=seed,
        accountant=accountant,
    )
    check_arguments(params, GWA_LINEAR_REGRESSION_PARAMETERS, caller)
    if matrix is None and noise_variance is None:
        raise InvalidParameterError(
            f"{caller} needs a public 'noise_variance' to choose C (or a fixed 'matrix'); use "
            "LabelPrivateLinearRegression(noise_variance='estimate') to estimate it privately."
        )
    eps = float(epsilon)
    # refuses before any work (a budget it cannot afford, a seed it already holds)
    ledger = Ledger(accountant, [laplace_event(eps)], seed=seed, caller=caller)
    bounds = check_bounds(label_range, caller)
    nv = None if noise_variance is None else float(noise_variance)
    x = check_features(X, caller)
    labels = clip_labels(_as_labels(y, x.shape[0], caller), bounds)
    codes, sizes = _as_codes(users, x.shape[0], caller)
    _check_rank(x, caller)
    if matrix is not None:
        c = np.asarray(matrix, dtype=np.float64)
        if c.shape != (x.shape[1], x.shape[0]):
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
    else:
        assert nv is not None  # checked above: matrix or noise_variance
        width = bounds[1] - bounds[0]
        c = _solve_codes(x, codes, sizes, nv, width / eps, 1e-8, 500).matrix
    noise = NoiseSource(seed)
    beta, scale, sens = release_coefficients(c, labels, codes, bounds, eps, noise, ledger.local)
    # Theorem 6: sigma^2 ||C||_F^2 + 2 d b^2 (b = B/epsilon max_l sum_{S_l} ||c_i||_1).
    objective = None if nv is None else float(nv * np.vdot(c, c) + 2.0 * c.shape[0] * scale**2)
    budget, event = ledger.close()
    return LabelPrivateRegressionResult(
        budget=budget,
        dp_event=event,
        coef=beta,
        noise_scale=scale,
        sensitivity=sens,
        objective=objective,
        matrix=c,
    )


# -- the release (Algorithm 3) ---------------------------------------------------------------------
def release_coefficients(
    matrix: np.ndarray,
    y: np.ndarray,
    codes: np.ndarray,
    bounds: tuple[float, float],
    epsilon: float,
    noise: NoiseSource,
    accountant: PrivacyAccountant,
) -> tuple[np.ndarray, float, float]:
    """``GWA_C``: ``C y + Lap(b)^d`` with ``b`` computed from this very ``C`` (Algorithm 3).

    Returns ``(beta~, b, l1 sensitivity)``. ``y`` is clipped to ``bounds`` and centred at
    ``mid``: ``C y = C (y - mid) + mid C 1`` with ``C 1`` public (docs/estimate.md,
    "Label-private regression").
    """
    lo, hi = bounds
    width, mid = hi - lo, 0.5 * (lo + hi)
    per_unit = float(np.bincount(codes, weights=np.abs(matrix).sum(axis=0)).max())
    sensitivity = width * per_unit  # line 2: B max_l sum_j sum_{i in S_l} |c_ji|
    beta = matrix @ (np.clip(y, lo, hi) - mid) + mid * matrix.sum(axis=1)  # line 1
    beta, scale = laplace_release(
        beta,
        epsilon=epsilon,
        sensitivity=sensitivity,
        noise=noise,
        accountant=accountant,
        statistic="gwa.coefficients",
        neighbours="replace-values",
    )  #  lines 3-4
    return beta, scale, sensitivity


# -- a private estimate of the label noise variance ------------------------------------------------
_VARIANCE_FLOOR = 1e-6  # the estimate is clipped to [_VARIANCE_FLOOR B^2, B^2 / 4]


def private_noise_variance(
    x: np.ndarray,
    y: np.ndarray,
    codes: np.ndarray,
    sizes: np.ndarray,
    bounds: tuple[float, float],
    epsilon: float,
    noise: NoiseSource,
    accountant: PrivacyAccountant,
) -> float:
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
    beta0, _, _ = release_coefficients(pilot.matrix, y, codes, bounds, eps_pilot, noise, accountant)
    # 2. A smoothly weighted mean of its squared residuals.
    h = best_smooth_h(sizes, 0.25 * cap * cap, cap / eps_mean)  # Claim 1 for r in [0, B^2]
    mean, sens = _residual_mean(x, y, beta0, codes, sizes, bounds, h)
    estimate: float | np.ndarray
    estimate, _ = laplace_release(
        mean,
        epsilon=eps_mean,
        sensitivity=sens,
        noise=noise,
        accountant=accountant,
        statistic="gwa.residual_variance",
        neighbours="replace-values",
    )
    estimate = float(estimate)
    return float(np.clip(estimate, _VARIANCE_FLOOR * cap, 0.25 * cap))


def _residual_mean(
    x: np.ndarray,
    y: np.ndarray,
    beta0: np.ndarray,
    codes: np.ndarray,
    sizes: np.ndarray,
    bounds: tuple[float, float],
    h: float,
) -> tuple[float, float]:
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
