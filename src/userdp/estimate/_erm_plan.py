"""How :class:`~userdp.estimate.WeightedERM` spends its budget and chooses ``h``.

The Gaussian noise multipliers of the count and the gradient steps, fixed from the parameters
before any data is read (:func:`_noise_plan`), and the threshold minimising Sec. 4's
"Tradeoff weights" objective (:func:`_tradeoff_h`; the derivation is in docs/estimate.md).
"""

from __future__ import annotations

import math

import dp_accounting
import numpy as np

from userdp.estimate.weighting import best_limit_h, best_smooth_h
from userdp.privacy.accountant import PrivacyAccountant
from userdp.privacy.calibrate import gaussian_sigma

# Share of the Gaussian precision (sigma^-2) spent on the noisy n_h when user sizes are
# private; it only sets the step normalisation, so a few percent suffice.
COUNT_SHARE = 0.05


def _noise_plan(
    epsilon: float,
    delta: float,
    steps: int,
    prior: list[dp_accounting.DpEvent],
    private_count: bool,
) -> tuple[float, float | None, list[dp_accounting.DpEvent]]:
    """Noise multipliers (z per gradient step, z_n for the count) spending what remains.

    ``prior`` holds the pure-epsilon releases planned before them (the size histogram); the
    accountant adds their epsilon to the Gaussian composition's epsilon at ``delta``, so the
    Gaussians get ``epsilon - spent`` and all of delta: one composed Gaussian of multiplier
    ``sigma_total = gaussian_sigma(epsilon - spent, delta)``, split in precision as
    ``steps / z^2 = (1 - COUNT_SHARE) / sigma_total^2`` and ``1 / z_n^2 = COUNT_SHARE /
    sigma_total^2``. Rounded toward more noise until the accountant confirms the target. Reads
    parameters only, so the whole plan is known before any data is read.
    """
    pure = PrivacyAccountant().compose(dp_accounting.ComposedDpEvent(prior)).spent(0.0)
    remaining = epsilon - (pure.epsilon if prior else 0.0)
    sigma_total = gaussian_sigma(remaining, delta)
    grad_share = 1.0 - COUNT_SHARE if private_count else 1.0
    nudge = 1e-12
    while True:
        z = sigma_total * math.sqrt(steps / grad_share)
        z_n = sigma_total / math.sqrt(COUNT_SHARE) if private_count else None
        events: list[dp_accounting.DpEvent] = []
        if z_n is not None:
            events.append(dp_accounting.GaussianDpEvent(z_n))
        events.append(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), steps))
        trial = PrivacyAccountant()
        for event in [*prior, *events]:
            trial.compose(event)
        if trial.spent(delta).epsilon <= epsilon:
            return z, z_n, events
        sigma_total *= 1.0 + nudge
        nudge *= 2.0


def _tradeoff_h(
    sizes: np.ndarray, counts: np.ndarray | None, weighting: str, *, dim: int, z_total: float
) -> float:
    """h minimising Sec. 4's ``(max_l sum c)^2 + A sum c^2`` with ``A = 1 / (d z_total^2)``.

    As Claim 1's ``v(h)`` (or Claim 2's ``v'(h)`` for sample limiting): sampling variance
    ``noise_variance = 1`` (per ``L^2``) and ``noise_unit = sqrt(d / 2) z_total``, so that
    ``2 (noise_unit h / n_h)^2 = d z_total^2 (h / n_h)^2`` (docs/estimate.md, "Weighted ERM").
    """
    unit = math.sqrt(dim / 2.0) * z_total
    if weighting == "smooth":
        return float(best_smooth_h(sizes, 1.0, unit, counts=counts))
    return float(best_limit_h(sizes, 1.0, unit, counts=counts))
