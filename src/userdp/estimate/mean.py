"""Private means with smoothly bounded user contributions, against sample limiting.

Epasto, Mahdian, Mao, Mirrokni and Ren, NeurIPS 2020, Section 3: Algorithm 1 with Lemma 3's
weights and Claim 1's ``h`` (:func:`weighted_mean`), and sample limiting with Claim 2's ``h``
(:func:`sample_limited_mean`), each with public or private user sizes (docs/estimate.md,
"Means"). The noise-free statistics are in :mod:`userdp.estimate._mean_kernels`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import dp_accounting
import numpy as np

from userdp._validation import check_arguments
from userdp.estimate._common import (
    ACCOUNTANT,
    EPSILON,
    LAPLACE_95,
    LIMIT_H,
    NOISE_VARIANCE,
    NORMAL_95,
    PUBLIC_USER_SIZES,
    SAMPLE_LIMIT,
    SEED,
    SELECTION_SHARE,
    SMOOTH,
    SMOOTH_H,
    Bounding,
    Ledger,
    Method,
    Records,
    Release,
    bounds_rule,
    budget_text,
    laplace_event,
    laplace_release,
    noise_summary,
    read_records,
)
from userdp.estimate._mean_kernels import (
    _mean_statistics,
    _private_moments,
    _ratio_noise_unit,
    _split_estimation_epsilon,
)
from userdp.estimate._mean_kernels import _user_moments as _user_moments  # re-exported
from userdp.estimate.weighting import private_size_histogram
from userdp.privacy.accountant import PrivacyAccountant
from userdp.privacy.calibrate import laplace_scale
from userdp.privacy.noise import NoiseSource

__all__ = [
    "SAMPLE_LIMITED_MEAN_PARAMETERS",
    "WEIGHTED_MEAN_PARAMETERS",
    "MeanResult",
    "sample_limited_mean",
    "weighted_mean",
]


@dataclass(frozen=True)
class MeanResult(Release):
    """A released mean and how it was released.

    Attributes
    ----------
    budget : PrivacyBudget
        The ``(epsilon, 0)`` spent (pure DP): the whole ``epsilon`` given.
    dp_event : dp_accounting.DpEvent
        Every release, as one ``ComposedDpEvent``.
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
    selection_epsilon : float
        The part of ``budget.epsilon`` spent on choosing ``h`` (0 when ``h`` was given).
    public_user_sizes : bool
    epsilon : float
        ``budget.epsilon`` (a property).
    """

    estimate: float
    method: Method
    h: float
    noise_scale: float
    selection_epsilon: float
    public_user_sizes: bool

    def summary(self) -> str:
        """One line: estimate, method, h, noise and budget."""
        sizes = "public" if self.public_user_sizes else "private"
        return (
            f"{self.method} mean {self.estimate:.6g} (h={self.h:.4g}, noise scale "
            f"{self.noise_scale:.3g}, {budget_text(self.budget)} of which epsilon="
            f"{self.selection_epsilon:g} chose h, user sizes {sizes}){noise_summary(self.noise())}"
        )

    def noise(self) -> dict[str, Any]:
        """Noise sd and 95% noise interval of :attr:`estimate` (see :meth:`Release.noise`).

        Public sizes: the noise is Laplace(``noise_scale``), sd ``sqrt(2) b`` and the exact
        interval ``estimate -/+ b ln 20``. Private sizes: ``noise_scale`` is already the
        delta-method sd of a ratio of two noisy sums (from released values), and the interval
        is the normal one, ``estimate -/+ 1.96 sd`` (approximate).
        """
        b = float(self.noise_scale)
        if self.public_user_sizes:
            sd, half, kind = math.sqrt(2.0) * b, b * LAPLACE_95, "laplace"
        else:
            sd, half, kind = b, NORMAL_95 * b, "approximate"
        return {
            "noise_sd": sd,
            "interval95": (self.estimate - half, self.estimate + half),
            "noise": kind,
        }


# -- the plan and the two neighbouring relations -------------------------------------------------
@dataclass(frozen=True)
class _Plan:
    """How ``epsilon`` is spent, from the parameters alone (so it can be checked before any work).

    ``histogram`` releases the user sizes (private sizes, ``h`` not given), ``moments`` the two
    user-moment sums of the variance estimate (``noise_variance`` not given), ``estimate`` the
    estimate (with private sizes: the weighted sum and the count, split between them by
    :func:`_split_estimation_epsilon`). Zero means "not released".
    """

    histogram: float
    moments: float
    estimate: float
    selection: float  # histogram + moments, as the share of epsilon it was computed from

    def events(self) -> list[dp_accounting.DpEvent]:
        """The releases' events; the estimate's pair (private sizes) is planned as one Laplace
        event of their total epsilon, which is what the pair costs (basic composition)."""
        events = [laplace_event(self.histogram)] if self.histogram else []
        if self.moments:
            half = 0.5 * self.moments
            events += [laplace_event(half), laplace_event(self.moments - half)]
        return [*events, laplace_event(self.estimate)]


def _plan(
    epsilon: float, share: float, *, public: bool, h: float | None, noise_variance: float | None
) -> _Plan:
    if h is not None or (public and noise_variance is not None):
        return _Plan(0.0, 0.0, epsilon, 0.0)  # h is given or chosen from public values only
    selection = share * epsilon
    if public:
        return _Plan(0.0, selection, epsilon - selection, selection)
    histogram = selection if noise_variance is not None else 0.5 * selection
    return _Plan(histogram, selection - histogram, epsilon - selection, selection)


def _public_mean(
    records: Records,
    plan: _Plan,
    h: float | None,
    noise_variance: float | None,
    bounding: Bounding,
    noise: NoiseSource,
    acc: PrivacyAccountant,
) -> tuple[float, float, float]:
    """Paper's model: Algorithm 1 with Lemma 3 weights, or sample limiting (Section 3.2).

    Returns ``(estimate, h, Laplace scale)``.
    """
    lo, hi = records.bounds
    width = hi - lo
    if h is None:
        sigma2 = noise_variance
        if sigma2 is None:
            moments = _private_moments(
                records,
                epsilon=plan.moments,
                user_count=float(records.sizes.size),  # m is public in this model
                neighbours="replace-values",
                noise=noise,
                accountant=acc,
            )
            sigma2 = moments.variance
        # Claim 1 / Claim 2 with B / epsilon (the unit's Laplace scale) as the noise unit.
        h = bounding.choose_h(records.sizes, sigma2, laplace_scale(plan.estimate, width))
    # c_i = w_i / n_h: Lemma 3's weights, or 1[i in T] / n_h (Section 3.2)
    w = bounding.weights(records.codes, records.sizes, h, noise, records.users)
    c = w / w.sum()
    estimate = float(c @ records.values)  # Alg. 1, line 1
    # Lemma 1: l1 sensitivity B * max_l sum_{S_l} c_i, from the weights themselves.
    sensitivity = width * float(np.bincount(records.codes, weights=c).max())
    # line 2: the estimate plus Laplace noise of scale sensitivity / epsilon_est
    noisy, scale = laplace_release(
        estimate,
        epsilon=plan.estimate,
        sensitivity=sensitivity,
        noise=noise,
        accountant=acc,
        statistic="mean.estimate",
        neighbours="replace-values",
    )
    return float(noisy), float(h), scale


def _private_mean(
    records: Records,
    plan: _Plan,
    h: float | None,
    noise_variance: float | None,
    bounding: Bounding,
    noise: NoiseSource,
    acc: PrivacyAccountant,
) -> tuple[float, float, float]:
    """Add/remove one user: choose h privately, then release (S, N) with Laplace noise.

    Returns ``(estimate, h, approximate noise sd)``.
    """
    lo, hi = records.bounds
    mid, hw = 0.5 * (lo + hi), 0.5 * (hi - lo)
    mu = 0.5 * hw  # no released mean: a compromise between mu = 0 and mu = hw
    if h is None:
        hist = private_size_histogram(records.sizes, plan.histogram, noise, acc)
        sigma2 = noise_variance
        if sigma2 is None:
            moments = _private_moments(
                records,
                epsilon=plan.moments,
                user_count=hist.user_count,
                neighbours="add-remove",
                noise=noise,
                accountant=acc,
            )
            sigma2 = moments.variance
            # |mu_hat| can be ~0 by chance while mu is not: never plan for less than the
            # noise sd of the released mean, or N would get almost no budget.
            mu = max(abs(moments.centred_mean), moments.centred_mean_sd)
        eps1, eps2 = _split_estimation_epsilon(plan.estimate, hw, mu)
        unit = _ratio_noise_unit(eps1, eps2, hw, mu)
        h = bounding.choose_h(hist.representatives, sigma2, unit, counts=hist.counts)
    else:
        eps1, eps2 = _split_estimation_epsilon(plan.estimate, hw, mu)
    codes, values, sizes = bounding.restrict(records, h, noise)
    total: float | np.ndarray
    count: float | np.ndarray
    total, count = _mean_statistics(codes, values, sizes, h, records.bounds)
    # sensitivities h hw and h (see _mean_statistics)
    total, _ = laplace_release(
        total, epsilon=eps1, sensitivity=h * hw, noise=noise, accountant=acc, statistic="mean.sum"
    )
    count, _ = laplace_release(
        count, epsilon=eps2, sensitivity=h, noise=noise, accountant=acc, statistic="mean.count"
    )
    denom = max(float(count), h)
    ratio = float(total) / denom
    estimate = float(np.clip(mid + ratio, lo, hi))
    approx_sd = math.sqrt(2.0) * h * _ratio_noise_unit(eps1, eps2, hw, abs(ratio)) / denom
    return estimate, float(h), approx_sd


def _run(
    caller: str,
    values: object,
    users: object,
    params: dict[str, Any],
    bounding: Bounding,
) -> MeanResult:
    """The preamble (parameters, accountant check, records), then the release."""
    table = _TABLES[bounding.method]
    check_arguments(params, table, caller)  # before the data are read
    h = params["h"]
    if h is not None:
        h = float(h) if bounding is SMOOTH else int(h)
    nv = params["noise_variance"]
    nv = None if nv is None else float(nv)
    public = bool(params["public_user_sizes"])
    plan = _plan(
        float(params["epsilon"]),
        float(params["selection_share"]),
        public=public,
        h=h,
        noise_variance=nv,
    )
    # refuses before any work (a budget it cannot afford, a seed it already holds)
    ledger = Ledger(params["accountant"], plan.events(), seed=params["seed"], caller=caller)
    records = read_records(values, users, params["bounds"], caller, public_sizes=public)
    noise = NoiseSource(params["seed"])
    release = _public_mean if public else _private_mean
    estimate, h_used, noise_scale = release(records, plan, h, nv, bounding, noise, ledger.local)
    budget, event = ledger.close()
    return MeanResult(
        budget=budget,
        dp_event=event,
        estimate=estimate,
        method=bounding.method,
        h=h_used,
        noise_scale=noise_scale,
        selection_epsilon=plan.selection,
        public_user_sizes=public,
    )


_PARAMETERS: dict[str, dict[str, Any]] = {
    "epsilon": EPSILON,
    "bounds": {"check": bounds_rule, "cli": False},
    "public_user_sizes": PUBLIC_USER_SIZES,
    "noise_variance": NOISE_VARIANCE,
    "selection_share": SELECTION_SHARE,
    "seed": SEED,
    "accountant": ACCOUNTANT,
}
#: Rules for every keyword of :func:`weighted_mean` (checked before any data is read).
WEIGHTED_MEAN_PARAMETERS: dict[str, dict[str, Any]] = {
    **_PARAMETERS,
    "h": SMOOTH_H,
}
#: Rules for every keyword of :func:`sample_limited_mean`.
SAMPLE_LIMITED_MEAN_PARAMETERS: dict[str, dict[str, Any]] = {
    **_PARAMETERS,
    "h": LIMIT_H,
}
_TABLES = {"weighted": WEIGHTED_MEAN_PARAMETERS, "sample-limit": SAMPLE_LIMITED_MEAN_PARAMETERS}


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
    accountant: PrivacyAccountant | None = None,
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
        A seed may be used once per accountant: a second release with a seed its
        ``accountant`` already holds is refused before any data is read (the same seed
        draws the same noise, and differencing the two releases would cancel it).
    accountant : PrivacyAccountant or None, default=None
        A shared accountant to charge the release to (its ``dp_event``). If it holds a total
        budget that this release would exceed, :class:`BudgetExceededError` is raised before
        the data are read.

    Returns
    -------
    MeanResult

    Raises
    ------
    DataError
        Empty input, ``values`` and ``users`` of different lengths, or a non-finite value.
    InvalidParameterError
        A parameter breaks its rule in :data:`WEIGHTED_MEAN_PARAMETERS` (``epsilon <= 0``,
        ``lower >= upper``, ``h <= 0``, ``selection_share`` outside (0, 1), ...).
    BudgetExceededError
        ``accountant`` cannot afford ``epsilon`` (checked before any work).

    Privacy
    -------
    ``epsilon``-DP (pure; ``budget.delta`` is 0), every release composed on the result's
    ``dp_event`` and charged to ``accountant`` when one is given.

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
    >>> round(result.budget.epsilon, 9), result.budget.delta
    (1.0, 0.0)
    """
    params = dict(
        epsilon=epsilon,
        bounds=bounds,
        public_user_sizes=public_user_sizes,
        noise_variance=noise_variance,
        h=h,
        selection_share=selection_share,
        seed=seed,
        accountant=accountant,
    )
    return _run("weighted_mean", values, users, params, SMOOTH)


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
    accountant: PrivacyAccountant | None = None,
) -> MeanResult:
    """Private mean by sample limiting (Amin et al. 2019; Epasto et al. 2020, Section 3.2).

    Each user keeps a uniformly random ``min(h, s_l)`` of their records and the kept records
    are averaged; ``h`` minimises the variance ``v'(h)`` of Claim 2. The baseline
    :func:`weighted_mean` improves on (its best variance is at most 4 times the weighted one,
    Theorem 3).

    Parameters
    ----------
    values, users, epsilon, bounds, public_user_sizes, noise_variance, selection_share, seed
    accountant
        As :func:`weighted_mean`.
    h : int or None, default=None
        The integer threshold, >= 1. None: chosen by
        :func:`~userdp.estimate.weighting.best_limit_h` (Claim 2).

    Returns
    -------
    MeanResult

    Raises
    ------
    DataError, InvalidParameterError, BudgetExceededError
        As :func:`weighted_mean` (the rules: :data:`SAMPLE_LIMITED_MEAN_PARAMETERS`).

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
    params = dict(
        epsilon=epsilon,
        bounds=bounds,
        public_user_sizes=public_user_sizes,
        noise_variance=noise_variance,
        h=h,
        selection_share=selection_share,
        seed=seed,
        accountant=accountant,
    )
    return _run("sample_limited_mean", values, users, params, SAMPLE_LIMIT)
