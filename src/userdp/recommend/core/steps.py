"""The steps both recommenders share, and those a runner runs where the data live.

- :func:`user_side_norm`: the bound on a user's vector in the item statistics, the one formula
  of both families' sensitivities;
- :func:`user_weights`: the allocation weights of Table 2 (uniform, tail, adaptive; Krichene et
  al. 2023), computed by a runner per user from that user's rows and released counts;
- :class:`GradientOperator` and :func:`gd_update`: the DPSGD family's item update (Algorithm 2),
  full-batch noisy gradient descent with user-level clipping, over a gradient that a runner
  computes locally or on Spark (the noise is added here, on the driver).

A step here reads the data only through a runner's arrays (never a table) and imports no
engine; the families and the engines both build on it.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np
from scipy import sparse

from userdp.multitask.allocation import adaptive_weights, tail_sampling, uniform_sampling
from userdp.privacy.noise import NoiseSource
from userdp.recommend.core.spec import Allocation, ItemUpdateSpec

__all__ = ["Gradient", "GradientOperator", "gd_update", "user_side_norm", "user_weights"]

_CHUNK = 1 << 18  # rows per chunk in the DPSGD residual pass (16 MiB per gathered block)


def user_side_norm(max_norm: float, beta: float | None) -> float:
    """Bound on the norm of a user's vector ``x`` in the item statistics (both families).

    ``max_norm`` (the clipped user factor ``u``); with biases ``x = [u, beta]`` (the user side of
    the item-bias coordinate), so ``sqrt(max_norm^2 + beta^2)``, i.e. ``sqrt(2) max_norm`` at
    ``beta = max_norm`` (what both recommenders use). Computed as ``np.hypot``: correctly
    rounded for nearly every input, where ``math.sqrt(2.0) * max_norm`` is off by one ulp for
    about half of them (the two agree at the default ``max_norm = 1`` and at any power of two,
    so default models do not depend on the choice).
    """
    return float(max_norm) if beta is None else float(np.hypot(max_norm, beta))


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
