"""The steps of AM-SSP (Krichene et al. 2023b, arXiv:2310.15454) that
:class:`~userdp.recommend.PublicFeatureRecommender` composes: the encoder's gradient from the
released item statistics (eq. (4)/(5)), the per-user clipped gradient of AM-DPSGD, the Adam
optimiser, the private user-feature prior's statistics, and the item-bias coordinate
(:class:`BiasedEncoder`, :func:`user_solve_inputs`, :func:`item_update_inputs`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import sparse

from userdp.exceptions import InvalidParameterError
from userdp.multitask.ssp import clip_rows
from userdp.recommend.core.model import user_feature_matrix
from userdp.recommend.public.encoders import IdEncoder, PublicFeatureEncoder

__all__ = [
    "METHOD_NAMES",
    "Adam",
    "BiasedEncoder",
    "check_encoder",
    "clipped_user_gradients",
    "dpsgd_gradient",
    "item_bias_encoder",
    "item_update_inputs",
    "release_prior",
    "ssp_gradient",
    "ssp_noise_ridge",
    "user_feature_matrix",
    "user_prior_statistics",
    "user_solve_inputs",
]

METHOD_NAMES = {
    "ssp2": "am-ssp",
    "ssp1": "am-ssp1",
    "minibatch": "am-ssp-minibatch",
    "dpsgd": "am-dpsgd",
}


class Adam:
    """Adam on one flat parameter vector (Kingma & Ba 2015); state is public post-processing."""

    def __init__(self, size: int, lr: float, b1: float = 0.9, b2: float = 0.999) -> None:
        self.m = np.zeros(size)
        self.v = np.zeros(size)
        self.t = 0
        self.lr, self.b1, self.b2 = lr, b1, b2

    def step(self, params: np.ndarray, grad: np.ndarray) -> np.ndarray:
        self.t += 1
        self.m = self.b1 * self.m + (1 - self.b1) * grad
        self.v = self.b2 * self.v + (1 - self.b2) * grad * grad
        m_hat = self.m / (1 - self.b1**self.t)
        v_hat = self.v / (1 - self.b2**self.t)
        return params - self.lr * m_hat / (np.sqrt(v_hat) + 1e-8)


def ssp_gradient(
    encoder: Any,
    params: np.ndarray,
    gram: np.ndarray,
    moment: np.ndarray,
    ridge: np.ndarray,
    items: np.ndarray | None = None,
) -> np.ndarray:
    """``sum_j J_j^T ((A_j + ridge_j I) v_j - b_j)`` over ``items`` (default: all); ``ridge``
    of shape (m,) or (m, d') (per coordinate: the bias prior's ridge on the bias column).

    The gradient of ``sum_j 1/2 v_j^T (A_j + ridge_j I) v_j - b_j^T v_j``, i.e. of the
    weighted squared loss up to a constant when A, b are exact (paper eq. (5)). One forward
    pass and one vector-Jacobian product per item.
    """
    idx = np.arange(gram.shape[0]) if items is None else np.asarray(items)
    v, cache = encoder.forward(params, idx)
    r = ridge[idx, None] if ridge.ndim == 1 else ridge[idx]  # per item or per coordinate
    resid = np.einsum("jde,je->jd", gram[idx], v) + r * v - moment[idx]
    return encoder.vjp(params, idx, cache, resid)


def ssp_noise_ridge(
    noise_reg: float, gram_sigma: float, releases_per_step: int, max_norm: float, dim: int
) -> float:
    """The noise-scaled part of the item ridge: ``noise_reg * sigma_total * max_norm^2 * sqrt(d)``.

    ``sigma_total * max_norm^2 * sqrt(d)`` is the spectral size of the Gram noise the encoder
    fits in one outer step (a symmetric d x d Gaussian matrix of entry std s has spectral norm
    about ``2 s sqrt(d)``). SSP2 fits one release, so ``sigma_total`` is its multiplier. SSP1
    (Algorithm 2) spends the same budget on ``T = releases_per_step`` fresh releases with
    ``sqrt(T)`` more noise each, and its T inner gradients average them: the noise the encoder
    fits is that of their mean, ``gram_sigma / sqrt(T)``. Scaling the ridge by the per-release
    ``gram_sigma`` instead over-regularises SSP1 by ``sqrt(T)`` (measured on a synthetic set at
    epsilon 20, test RMSE 0.968 with it against 0.921 without). Public: a function of the plan.
    """
    return noise_reg * (gram_sigma / np.sqrt(releases_per_step)) * max_norm**2 * np.sqrt(dim)


def clipped_user_gradients(
    encoder: Any,
    params: np.ndarray,
    U: np.ndarray,
    items: np.ndarray,
    resid: np.ndarray,
    order: np.ndarray,
    offsets: np.ndarray,
    clip: float | None,
) -> np.ndarray:
    """``sum_k clip(g_k)`` with ``g_k = sum_{i in Omega_k} resid_i J_{j_i}^T u_k`` (AM-DPSGD).

    Each user's whole encoder gradient is clipped to l2 norm ``clip`` (None: no clipping), so
    adding or removing a user moves the sum by at most ``clip`` (tested). One VJP per user.
    """
    total = np.zeros(params.size)
    for k in np.flatnonzero(np.diff(offsets)):
        rows = order[offsets[k] : offsets[k + 1]]
        g = encoder.vjp(params, items[rows], None, resid[rows, None] * U[k][None, :])
        if clip is not None:
            norm = float(np.linalg.norm(g))
            if norm > clip:
                g *= clip / norm
        total += g
    return total


def user_prior_statistics(phi: sparse.csr_matrix, U: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per feature value, the sum of its users' factors and its (fractional) user count.

    ``S = Phi^T U`` and ``c = Phi^T 1``. Adding or removing user k changes S by
    ``phi_k u_k^T`` (Frobenius norm ``||phi_k|| ||u_k|| <= sqrt(F) max_norm`` with clipped
    factors) and c by ``phi_k`` (norm ``<= sqrt(F)``): the l2 sensitivities of the two Gaussian
    releases of the user-feature prior.
    """
    return np.asarray(phi.T @ U), np.asarray(phi.sum(axis=0)).ravel()


# -- item biases --------------------------------------------------------------------------------
class BiasedEncoder:
    """An item encoder with one more output column, the item-bias coordinate ``z_j``.

    ``forward`` returns ``[v_theta(x_j), z_phi(x_j)]`` (``d + 1`` columns) from the flat
    parameters ``[theta, phi]``: ``factors`` (the user's encoder, unchanged) and ``bias`` (an
    encoder of output dimension 1, see :func:`item_bias_encoder`). The released item bias is
    ``b_j = beta * z_j``; against the user vector ``[u_k, beta]`` the last coordinate
    contributes ``b_j`` to the prediction, exactly as the ``[u_i, b_i / beta]`` coordinate of
    :class:`~userdp.recommend.MatrixFactorization`. Both parts read public features only, so
    the wrapper keeps the :class:`~userdp.recommend.public.encoders.ItemEncoder` privacy contract.
    """

    def __init__(self, factors: Any, bias: Any) -> None:
        if bias.dim != 1 or bias.n_items != factors.n_items:
            raise InvalidParameterError(
                f"The bias encoder must map the {factors.n_items} items to 1 column; it maps "
                f"{bias.n_items} items to {bias.dim}."
            )
        self.factors, self.bias = factors, bias
        self._split = int(factors.n_params)

    @property
    def n_items(self) -> int:
        return int(self.factors.n_items)

    @property
    def dim(self) -> int:
        return int(self.factors.dim) + 1

    @property
    def n_params(self) -> int:
        return self._split + int(self.bias.n_params)

    def init_params(self) -> np.ndarray:
        return np.concatenate([self.factors.init_params(), self.bias.init_params()])

    def forward(
        self, params: np.ndarray, items: np.ndarray | None = None
    ) -> tuple[np.ndarray, Any]:
        v, cache_v = self.factors.forward(params[: self._split], items)
        z, cache_z = self.bias.forward(params[self._split :], items)
        return np.column_stack([v, z]), (cache_v, cache_z)

    def vjp(
        self, params: np.ndarray, items: np.ndarray | None, cache: Any, grad_out: np.ndarray
    ) -> np.ndarray:
        cache_v, cache_z = (None, None) if cache is None else cache
        g = np.asarray(grad_out, dtype=np.float64)
        return np.concatenate(
            [
                self.factors.vjp(params[: self._split], items, cache_v, g[:, :-1]),
                self.bias.vjp(params[self._split :], items, cache_z, g[:, -1:]),
            ]
        )


def item_bias_encoder(encoder: Any) -> Any:
    """The encoder of the item-bias coordinate that goes with ``encoder``.

    For a :class:`PublicFeatureEncoder`: the same feature families with scalar value
    embeddings (``family_dim=1``) and a linear output, i.e. a linear model of the averaged
    feature values, so an item nobody rated still gets the bias its public features predict.
    For any other encoder (``IdEncoder`` included): one free bias per item. Data-independent
    initialisation in both cases.
    """
    if isinstance(encoder, PublicFeatureEncoder):
        return PublicFeatureEncoder(
            encoder.families, 1, family_dim=1, seed=encoder.seed, init_scale=encoder.init_scale
        )
    return IdEncoder(int(encoder.n_items), 1, seed=0)


def user_solve_inputs(
    V_items: np.ndarray, y: np.ndarray, items: np.ndarray, beta: float | None
) -> tuple[np.ndarray, np.ndarray]:
    """The items' vectors and the targets of the exact user solve (never released).

    Without biases (``beta`` None): ``V_items`` and ``y``. With biases the last column of
    ``V_items`` is the bias coordinate ``z_j``: user k solves ``[u_k, c_k]`` against the items'
    ``[v_j, 1]`` and the targets ``y - b_j``, ``b_j = beta z_j`` (released), as in
    MatrixFactorization's user step.
    """
    if beta is None:
        return V_items, y
    Z = V_items.copy()
    Z[:, -1] = 1.0
    return Z, y - beta * V_items[items, -1]


def item_update_inputs(
    U: np.ndarray, users: np.ndarray, y: np.ndarray, beta: float | None, max_norm: float | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Split the user solve; returns (factors ``u_k``, user vectors ``x_k``, targets).

    ``u_k`` is clipped to ``max_norm`` (None: not clipped, non-private runs). Without biases
    ``x_k = u_k`` and the targets are ``y``. With biases (``U``'s last column is the user bias
    ``c_k``, never released) ``x_k = [u_k, beta]``, so ``||x_k|| <= sqrt(max_norm^2 + beta^2)``
    (:func:`~userdp.recommend.core.steps.user_side_norm`), and the targets are ``y - c_k``; the
    caller clips them to the half width before the SSP statistics, so the stated bounds hold
    whatever ``c_k`` is.
    """
    if beta is None:
        factors = U if max_norm is None else clip_rows(U, max_norm)
        return factors, factors, y
    factors, bias = U[:, :-1], U[:, -1]
    if max_norm is not None:
        factors = clip_rows(factors, max_norm)
    x = np.column_stack([factors, np.full(U.shape[0], beta)])
    return factors, x, y - bias[users]


# -- the encoder protocol and the model's shared helpers --------------------------------------
#: What an item encoder must provide (see :class:`~userdp.recommend.public.encoders.ItemEncoder`).
ENCODER_METHODS = ("n_items", "dim", "n_params", "init_params", "forward", "vjp")


def check_encoder(value: Any, name: str, caller: str) -> None:
    """An item encoder: an object with the :class:`ItemEncoder` protocol's members."""
    missing = [attr for attr in ENCODER_METHODS if not hasattr(value, attr)]
    if missing:
        raise InvalidParameterError(
            f"The {name!r} parameter of {caller} must be an item encoder (see "
            f"userdp.recommend.public.encoders.ItemEncoder). Got {value!r} instead, without "
            f"{missing[0]!r}."
        )


def dpsgd_gradient(
    encoder: Any,
    params: np.ndarray,
    U: np.ndarray,
    users: np.ndarray,
    items: np.ndarray,
    y: np.ndarray,
    weights: np.ndarray | None,
    order: np.ndarray,
    offsets: np.ndarray,
    ridge: np.ndarray,
    plan: Any,
    noise: Any,
    clip_norm: float,
) -> np.ndarray:
    """One full-batch DP-SGD gradient of the encoder (AM-DPSGD), each user's gradient clipped.

    User k's gradient is ``sum_{i in Omega_k} w_i (u_k . v_j - y_i) J_j^T u_k``: one VJP
    per user (the cost that SSP avoids); with biases ``u_k = [u_k, beta]``, ``v_j`` has the
    bias coordinate and ``y_i`` is ``y_i - c_k``, and the clipping covers the whole
    gradient, bias parameters included. The Gaussian noise has l2 sensitivity ``clip_norm``
    (``plan`` None: no clipping, no noise). The ridge term ``lambda_j ||v_j||^2 / 2`` uses
    released counts and is added after the noise.
    """
    V, _ = encoder.forward(params, None)
    w = np.ones(users.size) if weights is None else weights
    resid = w * (np.einsum("nd,nd->n", U[users], V[items]) - y)
    clip = clip_norm if plan is not None else None
    total = clipped_user_gradients(encoder, params, U, items, resid, order, offsets, clip)
    if plan is not None:
        total = noise.add_gaussian(
            total, plan.gradient * clip_norm, statistic="encoder gradient", l2=clip_norm
        )
    everything = np.arange(encoder.n_items)
    return total + encoder.vjp(params, everything, None, ridge[:, None] * V)


def release_prior(
    phi: sparse.csr_matrix,
    n_families: int,
    U: np.ndarray,
    counts: np.ndarray | None,
    plan: Any,
    noise: Any,
    max_norm: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Release the user-feature prior table ``P`` (feature values x dim) with noise.

    ``P_f = S_f / max(c_f, 1)``: the noisy mean factor of the users holding value f. The
    counts are released once and reused (the users do not change between steps); rows of
    ``P`` are clipped to ``max_norm`` (post-processing). Sensitivities: sums ``sqrt(F)
    max_norm``, counts ``sqrt(F)`` (:func:`user_prior_statistics`).
    """
    sums, exact_counts = user_prior_statistics(phi, U)
    if plan is not None:
        bound = math.sqrt(n_families)
        sums = noise.add_gaussian(
            sums,
            plan.user_prior * bound * max_norm,
            statistic="user prior sums",
            l2=bound * max_norm,
        )
        if counts is None:
            counts = noise.add_gaussian(
                exact_counts,
                plan.user_counts * bound,
                statistic="user prior counts",
                l2=bound,
            )
    elif counts is None:
        counts = exact_counts
    table = sums / np.maximum(counts, 1.0)[:, None]
    return (clip_rows(table, max_norm) if plan is not None else table), counts
