"""The per-step kernel of Weighted ERM (Epasto et al., NeurIPS 2020, Algorithm 2, line 2).

:func:`weighted_gradient_sum` is the statistic released at each step (noise-free, tested for its
sensitivity) and :func:`noisy_projected_gd` the full-batch noisy projected gradient descent
that releases it ``steps`` times with Gaussian noise; :class:`~userdp.estimate.WeightedERM`
plans the noise and the accounting.
"""

from __future__ import annotations

import numpy as np
from scipy import special

from userdp.privacy.noise import NoiseSource

__all__ = ["noisy_projected_gd", "weighted_gradient_sum"]


def _gradient_scale(loss: str, pred: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``r`` with grad_theta l(theta; x, y) = r * x for a linear model (overwrites ``pred``)."""
    if loss == "squared":  # l = (theta.x - y)^2 / 2, dl/dpred = pred - y
        pred -= y
        return pred
    # logistic, y in {-1, +1}: l = log(1 + exp(-y theta.x)), dl/dpred = -y sigmoid(-y pred)
    pred *= y
    np.negative(pred, out=pred)
    special.expit(pred, out=pred)
    pred *= y
    np.negative(pred, out=pred)
    return pred


def _clip_bounds(features: np.ndarray, lipschitz: float, fit_intercept: bool) -> np.ndarray:
    """``L / ||x_i||`` (with the constant 1 when fitting an intercept): the largest ``|r_i|``."""
    norms = np.sqrt(np.einsum("nd,nd->n", features, features) + (1.0 if fit_intercept else 0.0))
    with np.errstate(divide="ignore"):
        return lipschitz / norms


def weighted_gradient_sum(
    theta: np.ndarray,
    features: np.ndarray,
    labels: np.ndarray,
    weights: np.ndarray,
    loss: str,
    lipschitz: float,
    *,
    fit_intercept: bool = False,
    clip_bounds: np.ndarray | None = None,
) -> np.ndarray:
    """The per-step statistic of Alg. 2: ``sum_i w_i clip(grad l(theta; x_i, y_i), L)``.

    Parameters
    ----------
    theta : ndarray, shape (d,) or (d + 1,)
        Coefficients, with the intercept last when ``fit_intercept``.
    features : ndarray, shape (n, d)
    labels : ndarray, shape (n,)
        In {-1, +1} for ``loss="logistic"``, real for ``loss="squared"``.
    weights : ndarray, shape (n,)
        Non-negative record weights ``w_i``.
    loss : {"logistic", "squared"}
    lipschitz : float
        L: every per-example gradient is clipped to l2 norm L.
    fit_intercept : bool, default=False
        Treat the features as ``(x_i, 1)``.
    clip_bounds : ndarray or None
        ``L / ||(x_i, 1)||`` (or ``L / ||x_i||``), if already computed.

    Returns
    -------
    ndarray, shape like ``theta``

    Privacy
    -------
    Each clipped gradient has norm <= L, so a user whose weights sum to at most h moves the sum
    by at most ``L h`` in l2 when added or removed, and by at most ``2 L h`` when the values of
    their records are replaced (the gradients lie in a ball of diameter 2L).
    """
    x = features
    pred = x @ theta[:-1] + theta[-1] if fit_intercept else x @ theta
    if clip_bounds is None:
        clip_bounds = _clip_bounds(x, lipschitz, fit_intercept)
    v = _gradient_scale(loss, pred, labels)
    # Per-example clip ||r_i x_i|| <= L <=> |r_i| <= L / ||x_i||; then weight: v_i = w_i r_i.
    np.clip(v, -clip_bounds, clip_bounds, out=v)
    v *= weights
    grad = v @ x
    return np.append(grad, v.sum()) if fit_intercept else grad


def _project(theta: np.ndarray, radius: float) -> np.ndarray:
    """Euclidean projection onto the ball ``||theta||_2 <= radius`` (the domain C, Sec. 4)."""
    norm = float(np.linalg.norm(theta))
    return theta * (radius / norm) if norm > radius else theta


def noisy_projected_gd(
    x: np.ndarray,
    y: np.ndarray,
    w: np.ndarray,
    *,
    loss: str,
    lipschitz: float,
    fit_intercept: bool,
    radius: float,
    steps: int,
    learning_rate: float,
    sigma: float,
    count: float,
    noise: NoiseSource,
    sensitivity: float,
    neighbours: str,
) -> np.ndarray:
    """Alg. 2 line 2: ``steps`` noisy projected gradient steps; returns a suffix average.

    ``theta_{t+1} = Proj_C(theta_t - eta (sum_i w_i clip(grad_i) + N(0, sigma^2 I)) / count)``
    from ``theta_0 = 0``. The output averages the last ``ceil(T/2)`` iterates (suffix averaging,
    Rakhlin, Shamir & Sridharan 2012): for a convex loss it keeps the ``O(B G / sqrt(T))``
    bound of the full average up to a constant (``||theta_{T/2} - theta*|| <= 2B``) and drops
    the start-up transient the full average carries. Post-processing of the noisy gradients.
    """
    dim = x.shape[1] + int(fit_intercept)
    bounds = _clip_bounds(x, lipschitz, fit_intercept)
    theta = np.zeros(dim)
    total = np.zeros(dim)
    first_kept = steps // 2  # iterates theta_{T//2 + 1} .. theta_T are averaged
    for t in range(steps):
        grad = weighted_gradient_sum(
            theta, x, y, w, loss, lipschitz, fit_intercept=fit_intercept, clip_bounds=bounds
        )
        grad = noise.add_gaussian(
            grad, sigma, statistic="erm.gradient_sum", l2=sensitivity, neighbours=neighbours
        )
        theta = _project(theta - (learning_rate / count) * grad, radius)
        if t >= first_kept:
            total += theta
    return total / (steps - first_kept)
