"""The private item update of :class:`~userdp.recommend.MatrixFactorization` (Krichene et al.
2023, Algorithm 3, line 5): task-weighted SSP (Algorithm 1) for the DPALS family, full-batch
noisy gradient descent with user-level clipping (Algorithm 2) for the DPSGD family, and the
released all-users Gram of the implicit-feedback ("gravity") term.

Each function reads the fit's :class:`~userdp.recommend.spec.ItemUpdateSpec` (``model``, the
declared hyper-parameters resolved once at the top of ``fit``) and the released plan; the
sensitivities are stated in ``MatrixFactorization.fit``'s Privacy section.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Protocol

import numpy as np
from scipy import sparse

from userdp._validation import check_choice, check_real
from userdp.multitask.allocation import adaptive_weights, tail_sampling, uniform_sampling
from userdp.multitask.ssp import perturb_statistics, project_psd, solve_ridge
from userdp.privacy.noise import NoiseSource
from userdp.recommend._base import check_biases, user_side_norm
from userdp.recommend.prior import bias_prior, count_noise_sd, solve_with_prior
from userdp.recommend.spec import Allocation, ItemUpdateSpec

log = logging.getLogger("userdp.recommend")

__all__ = [
    "AUTO_CUTOFF",
    "GradientOperator",
    "check_biases",
    "check_min_item_count",
    "check_target_clip",
    "gd_update",
    "gravity_gram",
    "ssp_update",
    "trained_items",
    "user_side_norm",
    "user_weights",
]

_CHUNK = 1 << 18  # rows per chunk in the DPSGD residual pass (16 MiB per gathered block)


def user_weights(
    rule: Allocation,
    users: np.ndarray,
    items: np.ndarray,
    item_counts: np.ndarray,
    noise: NoiseSource | None,  # unused when keys are given
    keys: np.ndarray | None,
) -> np.ndarray:
    """Per-rating weights with every user's squared weights summing to at most 1 (Table 2)."""
    if rule.rule == "uniform":
        return uniform_sampling(users, rule.sample_size, noise, beta=1.0, keys=keys)
    if rule.rule == "tail":
        return tail_sampling(
            users, items, item_counts, rule.sample_size, noise, beta=1.0, keys=keys
        )
    return adaptive_weights(users, items, item_counts, mu=rule.mu, beta=1.0)


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
    a runner (:mod:`userdp.recommend.runner`); noised and solved here, on the driver.
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
        # released statistics and the released counts; :mod:`userdp.recommend.prior`).
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


def gd_update(
    model: ItemUpdateSpec,
    U: np.ndarray,
    V: np.ndarray,
    gd: Gradient,
    freq: np.ndarray,
    plan: Any,
    noise: NoiseSource,
    gravity: np.ndarray | None,
    labels: Any,
) -> np.ndarray:
    """``sgd_steps`` full-batch noisy gradient steps on the items, user-level clipping."""
    sd = plan.gradient * model.clip_norm
    # Ridge as in the SSP update: frequency-scaled plus a multiple of the noise's size, so
    # a tail item's iterate stays near 0 instead of random-walking with the noise.
    lam = model.reg * freq + model.noise_reg * sd * math.sqrt(V.shape[1]) / model.learning_rate
    curvature = model.step_offset + freq + lam
    if gravity is not None:  # the implicit term adds 2 alpha G to every item's Hessian
        curvature = curvature + 2.0 * model.unobserved_weight * np.linalg.eigvalsh(gravity)[-1]
    eta = (model.learning_rate / curvature)[:, None]
    lam = lam[:, None]
    for _ in range(model.sgd_steps):
        grad = noise.add_gaussian(
            gd.gradient(U, V, model.clip_norm),
            sd,
            statistic="item gradient",
            l2=model.clip_norm,
            index=labels,
        )
        if gravity is not None:
            grad += 2.0 * model.unobserved_weight * (U @ gravity)
        U = U - eta * (grad + lam * U)
    return U


class Gradient(Protocol):
    """What :func:`gd_update` needs: ``gradient(U, V, clip)`` (local or Spark)."""

    def gradient(self, U: np.ndarray, V: np.ndarray, clip: float) -> np.ndarray: ...


class GradientOperator:
    """Item gradients of the weighted squared loss with user-level clipping (DPSGD family).

    ``g_i = sum_j c_j w_ij 2 (<u_i, v_j> - y_ij) v_j`` where ``c_j = min(1, C / ||G_j||)`` and
    ``||G_j||^2 = sum_i (w_ij 2 e_ij)^2 ||v_j||^2`` is the norm of user j's whole stacked
    gradient (its rows touch distinct items, so the blocks are orthogonal). Adding or removing
    a user changes the stacked gradient by at most C.
    """

    def __init__(
        self,
        users: np.ndarray,
        items: np.ndarray,
        y: np.ndarray,
        weights: np.ndarray,
        order: np.ndarray,
        offsets: np.ndarray,
        n_items: int,
        n_users: int,
    ) -> None:
        self.users, self.items, self.y, self.w = users, items, y, weights
        self.n_users = n_users
        # (items x users) CSR structure in item order; data filled per step.
        self.order = order
        self.matrix = sparse.csr_matrix(
            (np.ones(order.size), users[order], offsets), shape=(n_items, n_users)
        )

    def gradient(self, U: np.ndarray, V: np.ndarray, clip: float) -> np.ndarray:
        n = self.users.size
        coef = np.empty(n)
        for lo in range(0, n, _CHUNK):
            hi = min(lo + _CHUNK, n)
            u, i = self.users[lo:hi], self.items[lo:hi]
            e = np.einsum("nd,nd->n", U[i], V[u]) - self.y[lo:hi]
            coef[lo:hi] = 2.0 * self.w[lo:hi] * e
        vnorm2 = np.einsum("nd,nd->n", V, V)
        user_norm = np.sqrt(np.bincount(self.users, coef**2 * vnorm2[self.users], self.n_users))
        scale = np.minimum(1.0, clip / np.maximum(user_norm, 1e-300))
        coef *= scale[self.users]
        self.matrix.data = coef[self.order]
        return self.matrix @ V


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
