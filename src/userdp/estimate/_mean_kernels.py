"""The mean's released statistics and noise arithmetic, before any noise is drawn.

The add/remove sum and count (:func:`_mean_statistics`), the per-user moments and their private
release that estimates the variance choosing ``h`` (:func:`_private_moments`), and how the
estimate's epsilon is split between sum and count. Used by :mod:`userdp.estimate.mean`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from userdp.estimate._common import Records, laplace_release
from userdp.estimate.weighting import smooth_weights
from userdp.privacy.accountant import PrivacyAccountant
from userdp.privacy.noise import NoiseSource


# -- released statistics (noise-free kernels, tested for sensitivity) -----------------------------
def _mean_statistics(
    codes: np.ndarray,
    values: np.ndarray,
    sizes: np.ndarray,
    h: float,
    bounds: tuple[float, float],
) -> tuple[float, float]:
    """``(S, N)`` of the add/remove mean: centred weighted sum and effective count.

    ``S = sum_l min(h, s_l) mean_l(y - mid)`` and ``N = n_h = sum_l min(h, s_l)`` with ``y``
    clipped to ``bounds`` and weights of Lemma 3 (:func:`smooth_weights`). Adding or removing
    user ``l`` moves ``S`` by ``min(h, s_l) |mean_l(y - mid)| <= h hw`` and ``N`` by
    ``min(h, s_l) <= h``, and leaves every other user's weight unchanged.
    """
    lo, hi = bounds
    mid = 0.5 * (lo + hi)
    y = np.clip(values, lo, hi) - mid
    w = smooth_weights(codes, sizes, h)
    return float(w @ y), float(np.minimum(h, np.asarray(sizes, dtype=np.float64)).sum())


def _user_moments(
    codes: np.ndarray, values: np.ndarray, sizes: np.ndarray, bounds: tuple[float, float]
) -> tuple[float, float]:
    """``(sum_l mean_l (y - mid)^2, sum_l mean_l (y - mid))``: one term per user.

    Each user's terms lie in ``[0, hw^2]`` and ``[-hw, hw]``: adding or removing a user moves
    the sums by at most ``hw^2`` and ``hw``; replacing a user's values by ``hw^2`` and ``2 hw``.
    """
    lo, hi = bounds
    mid = 0.5 * (lo + hi)
    y = np.clip(values, lo, hi) - mid
    m = sizes.size
    s = np.asarray(sizes, dtype=np.float64)
    second = np.bincount(codes, weights=y * y, minlength=m) / s
    first = np.bincount(codes, weights=y, minlength=m) / s
    return float(second.sum()), float(first.sum())


@dataclass(frozen=True)
class _Moments:
    variance: float  # released sigma^2 estimate, in [0, hw^2]
    centred_mean: float  # released mean of (y - mid), in [-hw, hw]
    centred_mean_sd: float  # sd of the Laplace noise in ``centred_mean`` (from public values)


def _private_moments(
    records: Records,
    *,
    epsilon: float,
    user_count: float,
    neighbours: str,
    noise: NoiseSource,
    accountant: PrivacyAccountant,
) -> _Moments:
    """A private variance estimate: both user-moment sums with Laplace noise, ``epsilon/2`` each.

    ``sigma^2 = clip(E[(y - mid)^2] - E[y - mid]^2, 0, hw^2)`` with each expectation a released
    sum over ``user_count`` (``m~`` from the size histogram, or the public ``m``).
    Sensitivities as in :func:`_user_moments` (the first moment's doubles when ``neighbours``
    replace a user's values).
    """
    hw = 0.5 * (records.bounds[1] - records.bounds[0])
    second: float | np.ndarray
    first: float | np.ndarray
    second, first = _user_moments(records.codes, records.values, records.sizes, records.bounds)
    eps_a = 0.5 * epsilon
    eps_b = epsilon - eps_a
    sens_a = hw * hw
    sens_b = (2.0 if neighbours == "replace-values" else 1.0) * hw
    second, _ = laplace_release(
        second,
        epsilon=eps_a,
        sensitivity=sens_a,
        noise=noise,
        accountant=accountant,
        statistic="mean.user_second_moment",
        neighbours=neighbours,
    )
    first, scale_b = laplace_release(
        first,
        epsilon=eps_b,
        sensitivity=sens_b,
        noise=noise,
        accountant=accountant,
        statistic="mean.user_first_moment",
        neighbours=neighbours,
    )
    e2 = float(np.clip(float(second) / user_count, 0.0, hw * hw))
    e1 = float(np.clip(float(first) / user_count, -hw, hw))
    sigma2 = float(np.clip(e2 - e1 * e1, 0.0, hw * hw))
    return _Moments(sigma2, e1, math.sqrt(2.0) * scale_b / user_count)


def _split_estimation_epsilon(epsilon: float, hw: float, mu: float) -> tuple[float, float]:
    """``(eps1, eps2)`` minimising ``hw^2/eps1^2 + mu^2/eps2^2`` with ``eps1 + eps2 = epsilon``.

    Setting the derivative to 0 gives ``eps1 : eps2 = hw^(2/3) : mu^(2/3)``. ``mu > 0``.
    """
    a, b = hw ** (2.0 / 3.0), mu ** (2.0 / 3.0)
    eps1 = epsilon * a / (a + b)
    return eps1, epsilon - eps1


def _ratio_noise_unit(eps1: float, eps2: float, hw: float, mu: float) -> float:
    """Noise unit of ``mid + (S + Lap(h hw/eps1)) / (n_h + Lap(h/eps2))`` (delta method).

    The estimate's error is about ``(e1 - mu e2) / n_h``, of variance
    ``2 (h/n_h)^2 (hw^2/eps1^2 + mu^2/eps2^2)``: Laplace-equivalent scale ``u h / n_h`` with
    ``u = sqrt(hw^2/eps1^2 + mu^2/eps2^2)`` (see :mod:`userdp.estimate.weighting`).
    """
    return math.sqrt((hw / eps1) ** 2 + (mu / eps2) ** 2)
