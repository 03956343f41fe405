"""Private means with smoothly bounded user contributions, against sample limiting.

Epasto, Mahdian, Mao, Mirrokni and Ren, "Smoothly Bounding User Contributions in Differential
Privacy", NeurIPS 2020, Section 3: the weighted average of Algorithm 1 with the weights of
Lemma 3 and the threshold ``h`` of Claim 1 (:func:`weighted_mean`), and sample limiting with the
integer threshold of Claim 2 (:func:`sample_limited_mean`).

Two neighbouring relations are offered:

- ``public_user_sizes=True`` is the paper's model (Section 2.2): which records belong to which
  user is public, and neighbouring datasets replace the values of one user's records. The
  estimate is ``sum_i c_i y_i + Lap(B max_l sum_{S_l} c_i / epsilon)`` (Lemma 1), unbiased for
  the mean of unclipped data, and its variance is Claim 1's ``v(h)`` (Claim 2's ``v'(h)``).
- The default adds or removes one user with all their records, so sizes are private. The
  centred weighted sum ``S = sum_l min(h, s_l) mean_l(y - mid)`` and the effective count
  ``N = n_h`` are released with Laplace noise and the estimate is ``mid + S~ / max(N~, h)``;
  ``h`` is chosen from a private size histogram and a private variance estimate, paid for by
  ``selection_share`` of the budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import dp_accounting
import numpy as np

from userdp._validation import check_epsilon, check_int, check_real
from userdp.estimate.weighting import (
    best_limit_h,
    best_smooth_h,
    check_bounds,
    check_records,
    factorize_users,
    limit_mask,
    private_size_histogram,
    smooth_weights,
)
from userdp.exceptions import InvalidParameterError
from userdp.privacy.accountant import PrivacyAccountant
from userdp.privacy.noise import NoiseSource

__all__ = ["MeanResult", "sample_limited_mean", "weighted_mean"]

Method = Literal["weighted", "sample-limit"]


@dataclass(frozen=True)
class MeanResult:
    """A released mean and how it was released.

    Attributes
    ----------
    estimate : float
        The private mean.
    method : {"weighted", "sample-limit"}
    h : float
        The contribution threshold used: given, or chosen from public or released values.
    noise_scale : float
        With ``public_user_sizes=True``: the Laplace scale of the estimate's noise,
        ``B max_l sum_{S_l} c_i / epsilon_est``. Otherwise the estimate is a ratio of two noisy
        sums and this is an approximate standard deviation of its noise (delta method), computed
        from released values only: ``sqrt(2) h sqrt(hw^2/eps1^2 + (mean~ - mid)^2/eps2^2) /
        max(N~, h)``.
    epsilon : float
        The privacy budget spent (the accountant's total).
    selection_epsilon : float
        The part of ``epsilon`` spent on choosing ``h`` (0 when ``h`` was given).
    public_user_sizes : bool
    dp_event : dp_accounting.DpEvent
        Every release, as one ``ComposedDpEvent``.
    """

    estimate: float
    method: Method
    h: float
    noise_scale: float
    epsilon: float
    selection_epsilon: float
    public_user_sizes: bool
    dp_event: dp_accounting.DpEvent

    def summary(self) -> str:
        """One line: estimate, method, h, noise and budget."""
        sizes = "public" if self.public_user_sizes else "private"
        return (
            f"{self.method} mean {self.estimate:.6g} (h={self.h:.4g}, noise scale "
            f"{self.noise_scale:.3g}, epsilon={self.epsilon:g} of which "
            f"{self.selection_epsilon:g} chose h, user sizes {sizes})"
        )


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
    codes: np.ndarray,
    values: np.ndarray,
    sizes: np.ndarray,
    bounds: tuple[float, float],
    *,
    epsilon: float,
    user_count: float,
    replace: bool,
    noise: NoiseSource,
    accountant: PrivacyAccountant,
) -> _Moments:
    """A private variance estimate: both user-moment sums with Laplace noise, ``epsilon/2`` each.

    ``sigma^2 = clip(E[(y - mid)^2] - E[y - mid]^2, 0, hw^2)`` with each expectation a released
    sum over ``user_count`` (``m~`` from the size histogram, or the public ``m``).
    Sensitivities as in :func:`_user_moments`.
    """
    hw = 0.5 * (bounds[1] - bounds[0])
    second, first = _user_moments(codes, values, sizes, bounds)
    eps_a = 0.5 * epsilon
    eps_b = epsilon - eps_a
    sens_a, sens_b = hw * hw, (2.0 if replace else 1.0) * hw
    scale_a, scale_b = sens_a / eps_a, sens_b / eps_b
    accountant.compose(dp_accounting.LaplaceDpEvent(scale_a / sens_a))
    accountant.compose(dp_accounting.LaplaceDpEvent(scale_b / sens_b))
    relation = "replace-values" if replace else "add-remove"
    second = float(noise.add_laplace(second, scale_a, statistic="mean.user_second_moment",
                                     l1=sens_a, neighbours=relation))  # fmt: skip
    first = float(noise.add_laplace(first, scale_b, statistic="mean.user_first_moment",
                                    l1=sens_b, neighbours=relation))  # fmt: skip
    e2 = float(np.clip(second / user_count, 0.0, hw * hw))
    e1 = float(np.clip(first / user_count, -hw, hw))
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


# -- the two modes ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Args:
    codes: np.ndarray
    sizes: np.ndarray
    values: np.ndarray  # clipped to bounds
    bounds: tuple[float, float]
    epsilon: float
    noise_variance: float | None
    h: float | None
    selection_share: float
    limit: bool  # sample limiting instead of smooth weights


def _validate(
    caller: str,
    values: object,
    users: object,
    epsilon: object,
    bounds: object,
    public_user_sizes: object,
    noise_variance: object,
    selection_share: object,
) -> tuple[np.ndarray, np.ndarray, float, tuple[float, float], float | None, float]:
    y, u = check_records(values, users, caller)
    eps = check_epsilon(epsilon, caller)
    lo, hi = check_bounds(bounds, caller)
    if not isinstance(public_user_sizes, (bool, np.bool_)):
        raise InvalidParameterError(
            f"The 'public_user_sizes' parameter of {caller} must be a bool. "
            f"Got {public_user_sizes!r} instead."
        )
    nv = None
    if noise_variance is not None:
        nv = check_real(
            noise_variance, "noise_variance", caller, low=0.0, high=math.inf, high_open=True
        )
    share = check_real(
        selection_share,
        "selection_share",
        caller,
        low=0.0,
        high=1.0,
        low_open=True,
        high_open=True,
    )
    return y, u, eps, (lo, hi), nv, share


def _public_mean(args: _Args, noise: NoiseSource, acc: PrivacyAccountant) -> MeanResult:
    """Paper's model: Algorithm 1 with Lemma 3 weights, or sample limiting (Section 3.2)."""
    lo, hi = args.bounds
    width = hi - lo
    eps_est, eps_sel, h = args.epsilon, 0.0, args.h
    if h is None:
        sigma2 = args.noise_variance
        if sigma2 is None:
            eps_sel = args.selection_share * args.epsilon
            eps_est = args.epsilon - eps_sel
            moments = _private_moments(
                args.codes,
                args.values,
                args.sizes,
                args.bounds,
                epsilon=eps_sel,
                user_count=float(args.sizes.size),  # m is public in this model
                replace=True,
                noise=noise,
                accountant=acc,
            )
            sigma2 = moments.variance
        # Claim 1 / Claim 2 with B / epsilon as the noise unit.
        choose = best_limit_h if args.limit else best_smooth_h
        h = choose(args.sizes, sigma2, width / eps_est)
    if args.limit:
        keep = limit_mask(args.codes, args.sizes, h, noise)
        w = keep.astype(np.float64)  # c_i = 1[i in T] / n_h (Section 3.2)
    else:
        w = smooth_weights(args.codes, args.sizes, h)  # Lemma 3, times n_h
    c = w / w.sum()
    estimate = float(c @ args.values)  # Alg. 1, line 1
    # Lemma 1: l1 sensitivity B * max_l sum_{S_l} c_i, from the weights themselves.
    sensitivity = width * float(np.bincount(args.codes, weights=c).max())
    scale = sensitivity / eps_est
    acc.compose(dp_accounting.LaplaceDpEvent(scale / sensitivity))
    estimate = float(
        noise.add_laplace(
            estimate, scale, statistic="mean.estimate", l1=sensitivity, neighbours="replace-values"
        )
    )  # line 2
    return MeanResult(
        estimate=estimate,
        method="sample-limit" if args.limit else "weighted",
        h=float(h),
        noise_scale=scale,
        epsilon=acc.spent().epsilon,
        selection_epsilon=eps_sel,
        public_user_sizes=True,
        dp_event=acc.event,
    )


def _private_mean(args: _Args, noise: NoiseSource, acc: PrivacyAccountant) -> MeanResult:
    """Add/remove one user: choose h privately, then release (S, N) with Laplace noise."""
    lo, hi = args.bounds
    mid, hw = 0.5 * (lo + hi), 0.5 * (hi - lo)
    eps_est, eps_sel, h = args.epsilon, 0.0, args.h
    mu = 0.5 * hw  # no released mean: a compromise between mu = 0 and mu = hw
    if h is None:
        eps_sel = args.selection_share * args.epsilon
        eps_est = args.epsilon - eps_sel
        eps_hist = eps_sel if args.noise_variance is not None else 0.5 * eps_sel
        hist = private_size_histogram(args.sizes, eps_hist, noise, acc)
        sigma2 = args.noise_variance
        if sigma2 is None:
            moments = _private_moments(
                args.codes,
                args.values,
                args.sizes,
                args.bounds,
                epsilon=eps_sel - eps_hist,
                user_count=hist.user_count,
                replace=False,
                noise=noise,
                accountant=acc,
            )
            sigma2 = moments.variance
            # |mu_hat| can be ~0 by chance while mu is not: never plan for less than the
            # noise sd of the released mean, or N would get almost no budget.
            mu = max(abs(moments.centred_mean), moments.centred_mean_sd)
        eps1, eps2 = _split_estimation_epsilon(eps_est, hw, mu)
        unit = _ratio_noise_unit(eps1, eps2, hw, mu)
        choose = best_limit_h if args.limit else best_smooth_h
        h = choose(hist.representatives, sigma2, unit, counts=hist.counts)
    else:
        eps1, eps2 = _split_estimation_epsilon(eps_est, hw, mu)
    codes, values, sizes = args.codes, args.values, args.sizes
    if args.limit:
        keep = limit_mask(codes, sizes, h, noise)
        codes, values = codes[keep], values[keep]
        sizes = np.minimum(sizes, math.floor(h))  # kept records per user: weights become 1
    total, count = _mean_statistics(codes, values, sizes, h, args.bounds)
    scale1, scale2 = h * hw / eps1, h / eps2  # sensitivities h hw and h over eps1, eps2
    acc.compose(dp_accounting.LaplaceDpEvent(scale1 / (h * hw)))
    acc.compose(dp_accounting.LaplaceDpEvent(scale2 / h))
    total = float(noise.add_laplace(total, scale1, statistic="mean.sum", l1=h * hw))
    count = float(noise.add_laplace(count, scale2, statistic="mean.count", l1=h))
    denom = max(count, h)
    ratio = total / denom
    estimate = float(np.clip(mid + ratio, lo, hi))
    approx_sd = math.sqrt(2.0) * h * _ratio_noise_unit(eps1, eps2, hw, abs(ratio)) / denom
    return MeanResult(
        estimate=estimate,
        method="sample-limit" if args.limit else "weighted",
        h=float(h),
        noise_scale=approx_sd,
        epsilon=acc.spent().epsilon,
        selection_epsilon=eps_sel,
        public_user_sizes=False,
        dp_event=acc.event,
    )


def _run(
    caller: str,
    values: object,
    users: object,
    *,
    epsilon: object,
    bounds: object,
    h: float | None,
    public_user_sizes: object,
    noise_variance: object,
    selection_share: object,
    seed: int | None,
    limit: bool,
) -> MeanResult:
    y, u, eps, bnds, nv, share = _validate(
        caller, values, users, epsilon, bounds, public_user_sizes, noise_variance, selection_share
    )
    codes, sizes = factorize_users(u)
    args = _Args(
        codes=codes,
        sizes=sizes,
        values=np.clip(y, *bnds),
        bounds=bnds,
        epsilon=eps,
        noise_variance=nv,
        h=h,
        selection_share=share,
        limit=limit,
    )
    noise = NoiseSource(seed)
    acc = PrivacyAccountant()
    if public_user_sizes:
        return _public_mean(args, noise, acc)
    return _private_mean(args, noise, acc)


def weighted_mean(
    values: object,
    users: object,
    *,
    epsilon: float,
    bounds: tuple[float, float],
    public_user_sizes: bool = False,
    noise_variance: float | None = None,
    h: float | None = None,
    selection_share: float = 0.1,
    seed: int | None = None,
) -> MeanResult:
    """Private mean with smoothly bounded user contributions (Epasto et al. 2020, Alg. 1).

    Record ``i`` of user ``l`` has weight ``min(h, s_l) / s_l`` (Lemma 3), so a user's weights
    sum to at most ``h``; ``h`` minimises the variance ``v(h)`` of Claim 1.

    Parameters
    ----------
    values : array-like of float, shape (n,)
        One value per record; clipped to ``bounds`` (never read to set them). Must be finite.
    users : array-like, shape (n,)
        The user owning each record (ints or strings).
    epsilon : float
        Total privacy budget, in (0, inf); spent exactly.
    bounds : (float, float)
        ``(lower, upper)``, ``lower < upper``: the public range of the values (``[0, B]`` in
        the paper, ``B = upper - lower``).
    public_user_sizes : bool, default=False
        True: the paper's model, where the user partition (and so every size ``s_l``) is public
        and neighbours replace one user's values. False: neighbours add or remove a user.
    noise_variance : float or None, default=None
        The variance ``sigma^2`` of the values, if it is public knowledge (the paper assumes
        so). None: it is estimated privately with part of the selection budget.
    h : float or None, default=None
        The threshold, > 0. None: chosen by :func:`~userdp.estimate.weighting.best_smooth_h`
        (Claim 1) from public or privately released sizes and variance.
    selection_share : float, default=0.1
        Fraction of ``epsilon``, in (0, 1), spent on choosing ``h`` when it is not given (with
        public sizes and a given ``noise_variance`` the choice is free and nothing is spent).
    seed : int or None, default=None
        Seeds the noise. None (the default) uses OS entropy; a fixed seed is for tests and
        reproducible benchmarks only.

    Returns
    -------
    MeanResult

    Raises
    ------
    DataError
        Empty input, ``values`` and ``users`` of different lengths, or a non-finite value.
    InvalidParameterError
        ``epsilon <= 0``, ``lower >= upper``, ``h <= 0``, ``selection_share`` outside (0, 1).

    Privacy
    -------
    ``epsilon``-DP (pure), every release composed on a :class:`~userdp.privacy.PrivacyAccountant`.

    *Public sizes* (replace one user's values): the estimate ``sum_i c_i y_i`` with
    ``c_i = min(h, s_l) / (s_l n_h)`` has l1 sensitivity ``B max_l sum_{S_l} c_i``
    (``= B min(h, max_l s_l) / n_h``; Lemma 1), computed from the weights, and gets Laplace
    noise of that scale over ``epsilon_est``. The estimate is not clipped (it is unbiased).
    If ``h`` and ``noise_variance`` are both None, ``selection_share * epsilon`` releases the
    user-moment sums (sensitivities ``hw^2`` and ``2 hw`` under replacement, ``hw`` = half the
    width) for a variance estimate.

    *Private sizes* (add/remove one user; the default): with values centred on the range's
    middle, ``S = sum_l min(h, s_l) mean_l(y - mid)`` moves by at most ``h hw`` and
    ``N = n_h`` by at most ``h``; they get Laplace noise ``h hw / eps1`` and ``h / eps2`` with
    ``eps1 : eps2 = hw^(2/3) : mu^(2/3)`` (minimising the ratio's noise, ``mu`` a released
    ``|mean - mid|``, floored at its noise sd; ``hw/2`` when nothing was released). The
    estimate ``mid + S~ / max(N~, h)``, clipped to ``bounds``, is post-processing. Choosing
    ``h`` (unless given) spends ``selection_share * epsilon``: half on a Laplace size
    histogram (sensitivity 1), half on the user-moment sums (sensitivities ``hw^2`` and
    ``hw``, half each) -- all of it on the histogram when ``noise_variance`` is given. ``h``
    is then a function of released values only.

    References
    ----------
    A. Epasto, M. Mahdian, J. Mao, V. Mirrokni, L. Ren. Smoothly Bounding User Contributions
    in Differential Privacy. NeurIPS 2020, Section 3.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> users = np.repeat(np.arange(500), rng.integers(1, 20, 500))
    >>> values = rng.uniform(0, 10, users.size)
    >>> result = weighted_mean(values, users, epsilon=1.0, bounds=(0, 10), seed=1)
    >>> abs(result.estimate - 5.0) < 0.5
    True
    >>> round(result.epsilon, 9)
    1.0
    """
    caller = "weighted_mean"
    if h is not None:
        h = check_real(h, "h", caller, low=0.0, high=math.inf, low_open=True, high_open=True)
    return _run(
        caller,
        values,
        users,
        epsilon=epsilon,
        bounds=bounds,
        h=h,
        public_user_sizes=public_user_sizes,
        noise_variance=noise_variance,
        selection_share=selection_share,
        seed=seed,
        limit=False,
    )


def sample_limited_mean(
    values: object,
    users: object,
    *,
    epsilon: float,
    bounds: tuple[float, float],
    h: int | None = None,
    public_user_sizes: bool = False,
    noise_variance: float | None = None,
    selection_share: float = 0.1,
    seed: int | None = None,
) -> MeanResult:
    """Private mean by sample limiting (Amin et al. 2019; Epasto et al. 2020, Section 3.2).

    Each user keeps a uniformly random ``min(h, s_l)`` of their records and the kept records
    are averaged; ``h`` minimises the variance ``v'(h)`` of Claim 2. The baseline
    :func:`weighted_mean` improves on (its best variance is at most 4 times the weighted one,
    Theorem 3).

    Parameters
    ----------
    values, users, epsilon, bounds, public_user_sizes, noise_variance, selection_share, seed
        As :func:`weighted_mean`.
    h : int or None, default=None
        The integer threshold, >= 1. None: chosen by
        :func:`~userdp.estimate.weighting.best_limit_h` (Claim 2).

    Returns
    -------
    MeanResult

    Raises
    ------
    DataError, InvalidParameterError
        As :func:`weighted_mean`.

    Privacy
    -------
    As :func:`weighted_mean` with weights ``1[i kept]`` (a special case of Algorithm 1): with
    public sizes the Laplace scale is ``B max_l sum_{S_l} c_i / epsilon_est =
    B min(h, max_l s_l) / (n_h epsilon_est)``; with private sizes a user adds at most ``h``
    kept records, moving ``S`` by ``h hw`` and ``N`` by ``h``. Which records are kept is
    random and independent of the values.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> users = np.repeat(np.arange(500), rng.integers(1, 20, 500))
    >>> values = rng.uniform(0, 10, users.size)
    >>> result = sample_limited_mean(values, users, epsilon=1.0, bounds=(0, 10), h=5, seed=1)
    >>> result.h, abs(result.estimate - 5.0) < 0.5
    (5.0, True)
    """
    caller = "sample_limited_mean"
    if h is not None:
        h = check_int(h, "h", caller, low=1)
    return _run(
        caller,
        values,
        users,
        epsilon=epsilon,
        bounds=bounds,
        h=h,
        public_user_sizes=public_user_sizes,
        noise_variance=noise_variance,
        selection_share=selection_share,
        seed=seed,
        limit=True,
    )
