"""userdp's own DP events, for releases no dp-accounting event describes.

Like dp-accounting's ``dp_event.py``: an event holds only what accounting needs and its meaning
never changes; a new mechanism gets a new event.
"""

from __future__ import annotations

import attr
import dp_accounting

__all__ = ["ExponentialMechanismDpEvent", "LaplaceThresholdDpEvent", "WeightAndThresholdDpEvent"]


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
