"""The releases of label-private linear regression (Epasto et al., NeurIPS 2020, Section 5).

Algorithm 3's release of ``C y`` with Laplace noise calibrated to ``C`` itself
(:func:`release_coefficients`), and the private estimate of the label noise variance that plans
``C`` when no public one is given (:func:`private_noise_variance`; see
:class:`~userdp.estimate.LabelPrivateLinearRegression`, Notes). Both compose their
``LaplaceDpEvent`` on the accountant they are given; noise scales come from
:func:`userdp.privacy.laplace_scale`.
"""

from __future__ import annotations

import numpy as np

from userdp.estimate._common import laplace_release
from userdp.estimate._gwa import _solve_codes
from userdp.estimate.weighting import best_smooth_h, smooth_weights
from userdp.privacy.accountant import PrivacyAccountant
from userdp.privacy.noise import NoiseSource

__all__ = ["private_noise_variance", "release_coefficients"]


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
    ``mid``: ``C y = C (y - mid) + mid C 1`` with ``C 1`` public (see
    :mod:`userdp.estimate.regression`, "Centring").
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
