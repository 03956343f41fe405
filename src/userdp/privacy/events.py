"""userdp's own DP events, for releases no dp-accounting event describes.

Like dp-accounting's ``dp_event.py``: an event holds only what accounting needs and its meaning
never changes; a new mechanism gets a new event.
"""

from __future__ import annotations

import attr
import dp_accounting

__all__ = [
    "ExponentialMechanismDpEvent",
    "LaplaceThresholdDpEvent",
    "ThresholdedGaussianDpEvent",
    "WeightAndThresholdDpEvent",
]


@attr.s(frozen=True, slots=True, auto_attribs=True)
class WeightAndThresholdDpEvent(dp_accounting.DpEvent):
    """One round of the weight-and-threshold meta-algorithm (Chen et al. 2025, Alg. 1).

    Weights with l2 sensitivity <= 1 and novel l-infinity sensitivity <= h(t) get Gaussian noise
    of scale ``noise_sigma``, calibrated for (epsilon, delta/2) by Proposition 2.4; items whose
    noisy weight reaches ``threshold`` are released. With every user set capped to
    ``max_items_per_user`` items, Theorem 3.3 gives (epsilon, delta)-DP for the released set
    *and* the extended noisy weight vector (which later rounds may query but userdp never
    returns). Accountants compose it by basic composition of (epsilon, delta).
    """

    epsilon: float
    delta: float
    noise_sigma: float
    threshold: float
    max_items_per_user: int


@attr.s(frozen=True, slots=True, auto_attribs=True)
class LaplaceThresholdDpEvent(dp_accounting.DpEvent):
    """Laplace weight-and-threshold where each user has l1 weight <= 1, one novel item weighted.

    The weight vector has l1 sensitivity <= 1, so Laplace noise of scale ``noise_scale = 1/eps``
    makes the noisy weights of the items present without the added user epsilon-DP; the added
    user's novel items (at most the cap, one of weight <= 1, the others 0) all pass
    ``threshold`` (:func:`userdp.privacy.laplace_threshold`) with probability <= delta.
    Together (epsilon, delta)-DP (Carvalho et al. 2022, GreedyUpdate). Composed by basic
    composition.
    """

    epsilon: float
    delta: float
    noise_scale: float
    threshold: float


@attr.s(frozen=True, slots=True, auto_attribs=True)
class ExponentialMechanismDpEvent(dp_accounting.DpEvent):
    """One draw of the exponential mechanism (McSherry and Talwar 2007) at pure ``epsilon``.

    The caller samples with probability proportional to ``exp(epsilon * u / (2 * sensitivity))``
    for a utility ``u`` of the stated sensitivity, which is epsilon-DP. Composed by basic
    composition.
    """

    epsilon: float


@attr.s(frozen=True, slots=True, auto_attribs=True)
class ThresholdedGaussianDpEvent(dp_accounting.DpEvent):
    """A Gaussian release that is thresholded, failing with probability ``threshold_delta``.

    One round of weight-and-threshold analysed as in "Rounds of weight-and-threshold
    compose as one Gaussian" (docs/privacy.md): the round releases (as far as the analysis is
    concerned) the noisy vector ``X = w + N(0, noise_multiplier^2 I)`` of weights with l2
    sensitivity <= 1, so X is a Gaussian mechanism with noise multiplier ``noise_multiplier``;
    the released item set is a
    function of X that agrees on neighbouring inputs except on an event (a novel item of the
    added user crossing the threshold) of probability <= ``threshold_delta``.

    Accounting (exact, not basic composition): the Gaussian parts of all events compose as ONE
    Gaussian with ``sigma^-2 = sum_r noise_multiplier_r^-2`` (adaptive composition of Gaussian
    mechanisms is exact, Dong, Roth & Su 2019, Cor. 3.3), converted to (epsilon, delta_g) by the
    analytic Gaussian; the threshold deltas add: the whole is (epsilon, delta_g + sum_r
    threshold_delta_r)-DP. Proof: with B the event that no novel item crosses its threshold in
    any round, P(not B) <= sum_r threshold_delta_r under both neighbours, and the released sets
    are the same function F of X on B, so for every set S of outputs
    ``P[M(D') in S] <= P_D'[X in F^-1(S)] + sum dt_r <= e^eps P[M(D) in S] + delta_g + sum dt_r``
    and symmetrically.
    """

    noise_multiplier: float
    threshold_delta: float
