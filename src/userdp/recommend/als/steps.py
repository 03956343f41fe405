"""The driver-side item update of :class:`~userdp.recommend.MatrixFactorization` (Krichene et
al. 2023, Algorithm 3, line 5): task-weighted SSP (Algorithm 1) for the DPALS family, the
released all-users Gram of the implicit-feedback ("gravity") term and the items trained. The
DPSGD family's update (Algorithm 2) runs over a runner's gradient and lives with the steps the
runners share (:mod:`userdp.recommend.core.steps`).

Each function reads the fit's :class:`~userdp.recommend.core.spec.ItemUpdateSpec` (``model``, the
declared hyper-parameters resolved once at the top of ``fit``) and the released plan; the
sensitivities are stated in ``MatrixFactorization.fit``'s Privacy section.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from userdp._validation import check_choice, check_real
from userdp.multitask.ssp import perturb_statistics, project_psd, solve_ridge
from userdp.privacy.noise import NoiseSource
from userdp.recommend.core.prior import bias_prior, count_noise_sd, solve_with_prior
from userdp.recommend.core.spec import ItemUpdateSpec
from userdp.recommend.core.steps import user_side_norm

log = logging.getLogger("userdp.recommend")

__all__ = [
    "AUTO_CUTOFF",
    "check_min_item_count",
    "check_target_clip",
    "gravity_gram",
    "ssp_update",
    "trained_items",
]


def _beta(model: ItemUpdateSpec) -> float | None:
    """The user side of the item-bias coordinate: ``max_norm`` with biases (``[v, max_norm]``)."""
    return model.max_norm if model.biased else None


def gravity_gram(model: ItemUpdateSpec, g: np.ndarray, plan: Any, noise: NoiseSource) -> np.ndarray:
    """``sum_j v_j v_j^T`` over all users (``g``, exact, from the runner); released with noise
    when training privately.

    Adding a user adds ``v v^T`` with ``||v|| <= max_norm``: Frobenius sensitivity
    ``max_norm^2`` (symmetric noise on the upper triangle, then the PSD projection). It
    holds for any added user: the other users' ``v`` depend on their own rows and the
    released item factors over the fixed item set only.
    """
    if plan is None:
        return g
    # [v, beta] with biases: ||x||^2 <= 2 max_norm^2
    g2 = user_side_norm(model.max_norm, _beta(model)) ** 2
    g, _ = perturb_statistics(
        g[None],
        np.zeros((1, 0)),
        gram_sigma=plan.gravity * g2,
        moment_sigma=0.0,
        noise=noise,
        gram_l2=g2,
        gram_statistic="gravity gram",
    )
    vals, vecs = np.linalg.eigh(g[0])
    return (vecs * np.maximum(vals, 0.0)) @ vecs.T


def ssp_update(
    model: ItemUpdateSpec,
    gram: np.ndarray,
    moment: np.ndarray,
    freq: np.ndarray,
    half: float,
    plan: Any,
    noise: NoiseSource,
    gravity: np.ndarray | None,
    labels: Any,
) -> np.ndarray:
    """Item solve by task-weighted SSP (Algorithm 1) with PSD projection.

    ``gram``, ``moment``: the exact weighted statistics ``A_i = sum_j w_ij x_j x_j^T``,
    ``b_i = sum_j w_ij t_ij x_j`` of every item (shapes (m, d', d') and (m, d')), computed by
    a runner (:mod:`userdp.recommend.engines.local`); noised and solved here, on the driver.
    """
    # Sensitivity: a user adds w_ij x x^T and w_ij y x with sum_i w_ij^2 <= 1, |y| <= half and
    # ||x|| <= n (``user_side_norm``): n^2 and n * half.
    norm = user_side_norm(model.max_norm, _beta(model))
    g2 = norm**2
    sigma_a = plan.gram * g2
    sigma_b = plan.moment * norm * half
    gram, moment = perturb_statistics(
        gram,
        moment,
        gram_sigma=sigma_a,
        moment_sigma=sigma_b,
        noise=noise,
        gram_l2=g2,
        moment_l2=norm * half,
        index=labels,
    )
    noise_ridge = model.noise_reg * sigma_a * math.sqrt(gram.shape[1])
    ridge = model.reg * np.maximum(freq, 1.0) * model.max_norm**2 + noise_ridge
    prior = None
    if model.bias_prior and model.biased:
        # Empirical-Bayes prior of the bias coordinate (post-processing of this step's
        # released statistics and the released counts; :mod:`userdp.recommend.core.prior`).
        k = gram.shape[1] - 1
        prior = bias_prior(
            gram[:, k, k],
            moment[:, k],
            beta=float(model.max_norm),
            counts=freq,
            count_sd=count_noise_sd(plan.counts, model.count_sample),
            gram_sd=sigma_a,
            moment_sd=sigma_b,
            half=half,
        )
    if gravity is not None or prior is not None:
        # Released and PSD: add it after the per-item projection so it is not clipped.
        vals, vecs = project_psd(gram)
        gram = np.einsum("mdk,mk,mek->mde", vecs, vals, vecs)
        if gravity is not None:
            gram = gram + model.unobserved_weight * gravity
    if prior is not None:
        return solve_with_prior(gram, moment, ridge, prior, float(model.max_norm))
    return solve_ridge(gram, moment, ridge)


# min_item_count="auto" keeps items whose private count reaches this many times the moment
# noise's size sigma_b * sqrt(d) / (max_norm * half_width) = z_b * sqrt(d). Picked on a pilot
# synthetic set (seed 0; benchmarks use another draw): best cutoffs there sat at 12-24.
AUTO_CUTOFF = 15.0


def check_min_item_count(value: Any, name: str, caller: str) -> None:
    """``"auto"`` or a finite number (a count cutoff)."""
    if isinstance(value, str):
        check_choice(value, name, caller, ["auto"])
    else:
        check_real(value, name, caller, low=-math.inf, high=math.inf, low_open=True, high_open=True)


def check_target_clip(value: Any, name: str, caller: str) -> None:
    """``"auto"`` or a positive number (a bound on the item update's targets)."""
    if isinstance(value, str):
        check_choice(value, name, caller, ["auto"])
    else:
        check_real(value, name, caller, low=0.0, high=math.inf, low_open=True, high_open=True)


def trained_items(model: ItemUpdateSpec, score: np.ndarray, n_items: int, plan: Any) -> np.ndarray:
    """Items to train: the ``top_items`` share and those reaching ``min_item_count``.

    ``score`` is the released counts (exact for ``als``); the number kept is a fraction
    of the item set's size (public or released), ties broken by code: post-processing.
    """
    trained = np.ones(n_items, dtype=bool)
    if model.top_items is not None:
        keep = max(1, math.ceil(model.top_items * n_items))
        top = np.zeros(n_items, dtype=bool)
        top[np.argsort(-score, kind="stable")[:keep]] = True
        trained &= top
    if model.min_item_count is not None:
        cutoff = model.min_item_count
        if cutoff == "auto":
            cutoff = AUTO_CUTOFF * plan.moment * math.sqrt(int(model.dim))
        trained &= score >= float(cutoff)
        log.info(
            "%s: training %d of %d items (count >= %.1f)",
            model.method,
            int(trained.sum()),
            n_items,
            float(cutoff),
        )
    return trained
