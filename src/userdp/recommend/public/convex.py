"""SSP for a general convex loss (Krichene et al. 2023b, "Private Learning with Public
Features", arXiv:2310.15454, Appendix D, Algorithm 7 "SSP-convex").

The squared-loss AM-SSP of :mod:`userdp.recommend.public.estimator` releases ``A_j = sum w u
u^T`` and ``b_j = sum w y u``. For a convex loss ``l(u . v, y)`` Appendix D expands each
example's loss to second order in the item embedding around the current iterate ``v^t`` (eq.
(10)) and releases, for every item, the statistics of that quadratic model (eq. (11), Algorithm
7 lines 4-5, with clipping):

    H_j = sum_{i in Omega_j} w_i Clip(l''(u_i . v_j^t, y_i) u_i u_i^T, Gamma_H) + sigma Gamma_H N
    g_j = sum_{i in Omega_j} w_i Clip(l'(u_i . v_j^t, y_i) u_i, Gamma_g)        + sigma Gamma_g N

and the encoder follows the quadratic model's gradient (Proposition 3, eq. (12); line 8)

    G = sum_j J_j(theta)^T [H_j (v_j(theta) - v_j^t) + g_j]   (+ the ridge lambda_j v_j),

``tau_max`` = ``inner_steps`` times (lines 7-9) before the statistics are recomputed around the
new iterate. Inside AM-SSP every alternating step is one outer step of Algorithm 7 (the user
update, then one release, then the inner steps): Algorithm 7 is "multiple calls to SSP2".

:class:`ConvexLoss` is how a loss is plugged in: its value and first two derivatives in the
prediction, and the bounds that set the default clipping norms. :data:`SQUARED` reduces to
AM-SSP (``H_j = A_j``, ``g_j = A_j v^t - b_j``; tested equal without noise) and
:data:`LOGISTIC` trains on implicit feedback with sampled negatives (the ML20M task).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from scipy.special import expit

from userdp._validation import check_real
from userdp.exceptions import InvalidParameterError
from userdp.multitask.allocation import adaptive_weights, row_keys
from userdp.multitask.kernels import segment_offsets, segment_statistics
from userdp.multitask.ssp import clip_rows, perturb_statistics, project_psd
from userdp.privacy.noise import NoiseSource
from userdp.recommend.core.base import PreparedRatings
from userdp.recommend.core.model import solve_users
from userdp.recommend.core.plans import NoisePlan
from userdp.recommend.core.spec import ConvexSpec
from userdp.recommend.public.steps import (
    Adam,
    clipped_user_gradients,
    release_prior,
    ssp_noise_ridge,
    user_feature_matrix,
)

__all__ = [
    "CONVEX_CONSTRAINTS",
    "LOGISTIC",
    "LOSSES",
    "SQUARED",
    "ConvexFit",
    "ConvexLoss",
    "check_convex_variant",
    "clip_norms",
    "convex_statistics",
    "quadratic_model_gradient",
    "resolve_loss",
    "sample_negatives",
    "train_convex",
]

Array = np.ndarray
_CALLER = "PublicFeatureRecommender"


@dataclass(frozen=True)
class ConvexLoss:
    """A loss ``l(p, y)`` convex in the prediction ``p = u . v``, with its two derivatives.

    Parameters
    ----------
    name : str
        Saved in the released model's parameters.
    value, grad, hess : callable ``(p, y) -> ndarray``
        ``l``, ``dl/dp`` and ``d^2 l/dp^2``, vectorised over arrays of predictions and labels.
        ``hess`` must be >= 0 (convexity); a negative value is refused when statistics are
        computed.
    hess_bound : float or None, default=None
        ``sup_p l''(p, y)`` over the labels used, when finite (logistic: 1/4). The default
        Hessian clip is ``hess_bound * max_norm^2``, where clipping changes nothing.
    grad_bound : float or None, default=None
        ``sup_p |l'(p, y)|``, when finite (logistic with labels in [0, 1]: 1). The default
        gradient clip is ``grad_bound * max_norm``. None (the squared loss) makes
        ``gradient_clip`` required for private training.

    Notes
    -----
    The bounds only set defaults: privacy rests on the clipping itself (Algorithm 7, lines 4-5),
    never on a bound being true.

    Examples
    --------
    >>> import numpy as np
    >>> huber = ConvexLoss(
    ...     "huber",
    ...     value=lambda p, y: np.where(abs(p - y) <= 1, 0.5 * (p - y) ** 2, abs(p - y) - 0.5),
    ...     grad=lambda p, y: np.clip(p - y, -1.0, 1.0),
    ...     hess=lambda p, y: (abs(p - y) <= 1).astype(float),
    ...     hess_bound=1.0, grad_bound=1.0,
    ... )
    >>> float(huber.grad(np.array([3.0]), np.array([0.0]))[0])
    1.0
    """

    name: str
    value: Callable[[Array, Array], Array]
    grad: Callable[[Array, Array], Array]
    hess: Callable[[Array, Array], Array]
    hess_bound: float | None = None
    grad_bound: float | None = None

    def __post_init__(self) -> None:
        caller = "ConvexLoss"
        if not isinstance(self.name, str) or not self.name:
            raise InvalidParameterError(
                f"The 'name' parameter of {caller} must be a non-empty str. Got {self.name!r} "
                "instead."
            )
        for attr in ("value", "grad", "hess"):
            if not callable(getattr(self, attr)):
                raise InvalidParameterError(
                    f"The {attr!r} parameter of {caller} must be a callable (p, y) -> array. "
                    f"Got {getattr(self, attr)!r} instead."
                )
        for attr in ("hess_bound", "grad_bound"):
            if getattr(self, attr) is not None:
                check_real(getattr(self, attr), attr, caller, low=0.0, low_open=True)


def _sq_value(p: Array, y: Array) -> Array:
    return 0.5 * (p - y) ** 2


def _sq_grad(p: Array, y: Array) -> Array:
    return p - y


def _sq_hess(p: Array, y: Array) -> Array:
    return np.ones(np.broadcast(p, y).shape)


def _log_value(p: Array, y: Array) -> Array:
    # log(1 + e^p) - y p: the cross-entropy of sigmoid(p) against y in [0, 1], stably.
    return np.logaddexp(0.0, p) - y * p


def _log_grad(p: Array, y: Array) -> Array:
    return expit(p) - y


def _log_hess(p: Array, y: Array) -> Array:
    s = expit(p)
    return s * (1.0 - s) + 0.0 * y


#: ``l = (p - y)^2 / 2``: AM-SSP's loss (l'' = 1; l' unbounded, so gradient_clip is needed).
SQUARED = ConvexLoss("squared", _sq_value, _sq_grad, _sq_hess, hess_bound=1.0)
#: ``l = log(1 + e^p) - y p`` for labels in [0, 1] (l'' <= 1/4, |l'| <= 1).
LOGISTIC = ConvexLoss("logistic", _log_value, _log_grad, _log_hess, hess_bound=0.25, grad_bound=1.0)
#: The losses known by name (``loss="logistic"``, ``--loss logistic``).
LOSSES = {"squared": SQUARED, "logistic": LOGISTIC}


def _check_loss(value: Any, name: str, caller: str) -> None:
    if isinstance(value, ConvexLoss) or (isinstance(value, str) and value in LOSSES):
        return
    raise InvalidParameterError(
        f"The {name!r} parameter of {caller} must be 'squared', 'logistic' or a "
        f"userdp.recommend.ConvexLoss. Got {value!r} instead."
    )


def resolve_loss(loss: str | ConvexLoss) -> ConvexLoss:
    """The :class:`ConvexLoss` of a name or of itself (validated)."""
    _check_loss(loss, "loss", _CALLER)
    return LOSSES[loss] if isinstance(loss, str) else loss


#: A clip of inf would be no clip, and an infinite sensitivity: refused.
_FINITE = {"high": math.inf, "high_open": True}
#: The recommender's keywords for Appendix D (merged into its declared table).
CONVEX_CONSTRAINTS: dict[str, dict[str, Any]] = {
    "loss": {
        "check": _check_loss,
        "metavar": "squared|logistic",
        "help": "Training loss: squared (AM-SSP) or logistic (implicit feedback, SSP for "
        "convex losses, Appendix D); the API also takes a ConvexLoss.",
    },
    "hessian_clip": {
        **_FINITE,
        "low": 0.0,
        "low_open": True,
        "none": True,
        "help": "Gamma_H: each example's Hessian term l'' u u^T is clipped to this Frobenius "
        "norm in private runs of a loss other than 'squared' (none: the loss's bound times "
        "max_norm^2).",
    },
    "gradient_clip": {
        **_FINITE,
        "low": 0.0,
        "low_open": True,
        "none": True,
        "help": "Gamma_g: each example's gradient term l' u is clipped to this norm in private "
        "runs of a loss other than 'squared' (none: the loss's bound times max_norm).",
    },
    "negatives": {
        **_FINITE,
        "low": 0.0,
        "none": True,
        "help": "Unrated items sampled per rated item, labelled with the low end of the rating "
        "range, for a loss other than 'squared' (none: 1).",
    },
}


def clip_norms(
    loss: ConvexLoss, hessian_clip: float | None, gradient_clip: float | None, max_norm: float
) -> tuple[float, float]:
    """``(Gamma_H, Gamma_g)``: the given clips, else the loss's bounds at ``||u|| <= max_norm``.

    Raises InvalidParameterError when a clip is not given and the loss states no bound.
    Public: functions of declared values only.
    """
    out = []
    for name, given, bound, scale in (
        ("hessian_clip", hessian_clip, loss.hess_bound, max_norm**2),
        ("gradient_clip", gradient_clip, loss.grad_bound, max_norm),
    ):
        if given is None and bound is None:
            raise InvalidParameterError(
                f"The {name!r} parameter of {_CALLER} must be a float in the range (0, inf) for "
                f"private training with loss {loss.name!r}, whose derivative states no bound. "
                "Got None instead."
            )
        # bound is set when given is None (checked above)
        out.append(float(given) if given is not None else float(cast(float, bound)) * scale)
    return out[0], out[1]


def _mix64(x: Array) -> Array:
    """SplitMix64's finaliser on uint64 (a bijection that spreads every input bit)."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def sample_negatives(
    users: Array, items: Array, n_items: int, ratio: float, keys: Array
) -> tuple[Array, Array]:
    """About ``ratio`` unrated items per rated item, per user, uniform over the item set.

    Row r draws ``floor(ratio)`` candidate item codes, plus one with probability
    ``ratio mod 1``, from hashes of its key ``keys[r]`` (:func:`~userdp.multitask.allocation.
    row_keys`: a secret keyed hash of the (user label, item label) pair), so a user's negatives
    are a function of that user's own rows and the public item set only: adding or removing
    another user changes nobody else's. Candidates the user rated, and repeats, are dropped, so
    every returned (user, item) pair is new and distinct (each user still touches every item
    at most once: the per-item sensitivity argument of Algorithm 7 needs it). Returned sorted
    by (user, item code).
    """
    if ratio <= 0 or users.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    whole, frac = divmod(float(ratio), 1.0)
    keys = np.asarray(keys, dtype=np.uint64)
    coin = (_mix64(keys ^ np.uint64(0x6E65676174697665)) >> np.uint64(11)).astype(np.float64)
    per_row = int(whole) + (coin * 2.0**-53 < frac)
    row = np.repeat(np.arange(users.size), per_row)
    nth = np.arange(row.size) - np.repeat(np.cumsum(per_row) - per_row, per_row)
    salt = np.uint64(0x9E3779B97F4A7C15) * (nth.astype(np.uint64) + np.uint64(1))
    cand = (_mix64(keys[row] ^ salt) % np.uint64(n_items)).astype(np.int64)
    pair = np.unique(users.astype(np.int64)[row] * n_items + cand)
    rated = users.astype(np.int64) * n_items + items.astype(np.int64)
    pair = pair[~np.isin(pair, rated)]
    return pair // n_items, pair % n_items


def convex_statistics(
    loss: ConvexLoss,
    U: Array,
    V: Array,
    users: Array,
    items: Array,
    y: Array,
    weights: Array | None,
    order: Array,
    offsets: Array,
    hessian_clip: float | None,
    gradient_clip: float | None,
) -> tuple[Array, Array]:
    """Noise-free ``(H_j, g_j)`` around ``V`` (Algorithm 7, lines 4-5, before the noise).

    Row i (user ``users[i]``, item ``items[i]``) adds ``w_i Clip(l''_i u u^T, Gamma_H)`` to
    ``H_j`` and ``w_i Clip(l'_i u, Gamma_g)`` to ``g_j``, with ``l'_i, l''_i`` at
    ``p = u . v_j``. Since ``||l'' u u^T||_F = |l''| ||u||^2`` and ``||l' u|| = |l'| ||u||``,
    clipping is a scalar factor per row. A clip of None does not clip (non-private reference).
    ``order``/``offsets`` group the rows by item (:func:`segment_offsets`).

    Privacy
    -------
    Adding or removing user k changes ``H_j`` only by its own rows, at most one per item, each
    of Frobenius norm <= ``w_i Gamma_H``: the stacked ``(H_j)`` moves by at most
    ``Gamma_H sqrt(sum_i w_i^2) <= Gamma_H`` in l2 when every user's squared weights sum to at
    most 1 (``w_bar = 1``), and ``(g_j)`` by at most ``Gamma_g`` (Appendix D: Theorems 1-2
    carry over with ``Gamma_u^2 -> Gamma_H`` and ``Gamma_u Gamma_y -> Gamma_g``; tested by
    ``tests/property/test_public_convex_sensitivity.py``).
    """
    u = U[users]
    p = np.einsum("nd,nd->n", u, V[items])
    d1 = np.asarray(loss.grad(p, y), dtype=np.float64)
    d2 = np.asarray(loss.hess(p, y), dtype=np.float64)
    if d1.shape != p.shape or d2.shape != p.shape:
        raise InvalidParameterError(
            f"The loss {loss.name!r} must return one derivative per prediction; got shapes "
            f"{d1.shape} and {d2.shape} for {p.shape}."
        )
    if not (np.all(np.isfinite(d1)) and np.all(np.isfinite(d2))) or np.any(d2 < 0):
        raise InvalidParameterError(
            f"The loss {loss.name!r} must have finite derivatives and l'' >= 0 (convex)."
        )
    sq = np.einsum("nd,nd->n", u, u)
    if hessian_clip is not None:  # ||l'' u u^T||_F = l'' ||u||^2
        d2 = d2 * np.minimum(1.0, hessian_clip / np.maximum(d2 * sq, 1e-300))
    if gradient_clip is not None:  # ||l' u|| = |l'| ||u||
        d1 = d1 * np.minimum(1.0, gradient_clip / np.maximum(np.abs(d1) * np.sqrt(sq), 1e-300))
    w = np.ones(users.size) if weights is None else weights
    # H_j = sum w_i l''_i u_i u_i^T ;  g_j = sum w_i l'_i u_i
    H, _ = segment_statistics(offsets, order, users, U, w * d2, None)
    _, g = segment_statistics(offsets, order, users, U, w, d1, gram=False)
    return H, g


def quadratic_model_gradient(
    encoder: Any,
    params: Array,
    hessian: Array,
    gradient: Array,
    anchor: Array,
    ridge: Array,
    items: Array | None = None,
) -> Array:
    """``sum_j J_j^T [H_j (v_j - v_j^t) + g_j + ridge_j v_j]`` over ``items`` (default: all).

    The gradient of the quadratic model (10) plus the ridge ``sum_j ridge_j ||v_j||^2 / 2``
    (Proposition 3, eq. (12); Algorithm 7, line 8); ``anchor`` holds ``v^t``, where the
    statistics were taken. One forward pass and one vector-Jacobian product per item.
    """
    idx = np.arange(hessian.shape[0]) if items is None else np.asarray(items)
    v, cache = encoder.forward(params, idx)
    resid = np.einsum("jde,je->jd", hessian[idx], v - anchor[idx]) + gradient[idx]
    return encoder.vjp(params, idx, cache, resid + ridge[idx, None] * v)


def _release(
    H: Array,
    g: Array,
    plan: NoisePlan | None,
    clips: tuple[float | None, float | None],
    noise: NoiseSource,
    labels: Any,
) -> tuple[Array, Array]:
    """Algorithm 7, lines 4-5: Gaussian noise of std ``sigma Gamma`` on (H, g), then H onto the
    PSD cone (post-processing; the exact H is PSD for a convex loss)."""
    if plan is None:
        return H, g
    # A private plan for the convex path always carries both clips and both multipliers.
    h_clip, g_clip = cast(tuple[float, float], clips)
    H, g = perturb_statistics(
        H,
        g,
        gram_sigma=cast(float, plan.gram) * h_clip,
        moment_sigma=cast(float, plan.moment) * g_clip,
        noise=noise,
        gram_l2=h_clip,
        moment_l2=g_clip,
        index=labels,
        gram_statistic="item hessian",
        moment_statistic="item gradient",
    )
    vals, vecs = project_psd(H)
    return np.einsum("mdk,mk,mek->mde", vecs, vals, vecs), g


def _dpsgd_gradient(
    spec: ConvexSpec,
    params: Array,
    U: Array,
    rows: tuple[Array, Array, Array],
    weights: Array | None,
    user_seg: tuple[Array, Array],
    ridge: Array,
    plan: NoisePlan | None,
    noise: NoiseSource,
) -> Array:
    """AM-DPSGD with the convex loss: user k's gradient ``sum_i w_i l'(u_k . v_j, y_i) J_j^T
    u_k`` clipped to ``clip_norm`` (sensitivity ``clip_norm``), then noise, then the ridge."""
    users, items, y = rows
    encoder = spec.encoder
    V, _ = encoder.forward(params, None)
    w = np.ones(users.size) if weights is None else weights
    resid = w * spec.loss.grad(np.einsum("nd,nd->n", U[users], V[items]), y)
    clip = spec.clip_norm if plan is not None else None
    order, offsets = user_seg
    total = clipped_user_gradients(encoder, params, U, items, resid, order, offsets, clip)
    if plan is not None:
        total = noise.add_gaussian(
            total,
            cast(float, plan.gradient) * spec.clip_norm,
            statistic="encoder gradient",
            l2=spec.clip_norm,
        )
    everything = np.arange(encoder.n_items)
    return total + encoder.vjp(params, everything, None, ridge[:, None] * V)


def check_convex_variant(variant: str, loss: ConvexLoss) -> None:
    """``variant="ssp1"`` is refused with a convex loss: a fresh release at every inner step is
    taken at the current iterate, where the quadratic model's Hessian term vanishes."""
    if variant == "ssp1":
        raise InvalidParameterError(
            f"The 'variant' parameter of {_CALLER} must be 'ssp2', 'minibatch' or 'dpsgd' with "
            f"loss {loss.name!r} (SSP1's per-step releases sit at the expansion point, where "
            f"the Hessian statistic is unused). Got {variant!r} instead."
        )


@dataclass(frozen=True)
class ConvexFit:
    """What :func:`train_convex` returns: the encoder's parameters, the item counts the ridge
    used (released, or exact without privacy) and the user-feature prior's table (or None)."""

    params: Array
    counts: Array
    prior: Array | None


def train_convex(
    spec: ConvexSpec,
    prep: PreparedRatings,
    plan: NoisePlan | None,
    noise: NoiseSource,
    rng: np.random.Generator,
    user_features: Any = None,
) -> ConvexFit:
    """``PublicFeatureRecommender.fit`` for a loss other than ``"squared"`` (Algorithm 7 inside
    the alternating minimisation), from the resolved ``spec`` and the prepared ratings
    (``plan`` None: exact statistics, no privacy).

    Differences from the squared-loss path: the released item statistics are (H_j, g_j) around
    the current item embeddings instead of (A_j, b_j); with ``negatives`` > 0 every user's rows
    are joined by sampled unrated items labelled ``rating_range[0] - center`` (0 on implicit
    feedback with :data:`~userdp.recommend.ML20M_MODEL_DEFAULTS`), which enter the user solve,
    the weights and the statistics as that user's rows. The user update is the least-squares
    UserUpdate of the paper (Appendix E.1: the same for all methods).
    """
    private = plan is not None
    encoder, clips = spec.encoder, spec.clips
    data, center, lo = prep.data, prep.center, prep.lo
    dpsgd = spec.variant == "dpsgd"
    ratio = 1.0 if spec.negatives is None else float(spec.negatives)
    keys = prep.keys
    if keys is None:  # non-private runs: the same per-row keys, for the same negatives
        keys = row_keys(data.users, data.items, data.user_labels, data.item_labels, noise.salt)
    neg_u, neg_i = sample_negatives(data.users, data.items, data.n_items, ratio, keys)
    users = np.concatenate([data.users.astype(np.int64), neg_u])
    items = np.concatenate([data.items.astype(np.int64), neg_i])
    y = np.concatenate([prep.values - center, np.full(neg_u.size, lo - center)])
    counts: np.ndarray
    if private:
        counts = cast(np.ndarray, prep.counts)  # released when private
        weights = adaptive_weights(users, items, counts, mu=spec.mu, beta=1.0)
    else:
        counts, weights = cast(np.ndarray, prep.exact_counts), None
    ridge = spec.reg * np.maximum(counts, 1.0)
    if plan is not None and plan.gram is not None:
        # As in the squared-loss path, with Gamma_H in place of max_norm^2.
        ridge = ridge + ssp_noise_ridge(
            spec.noise_reg,
            plan.gram,
            1,
            math.sqrt(cast(float, clips[0])),
            encoder.dim,  # private: clips resolved
        )
    user_seg = segment_offsets(users, data.n_users)
    item_order, item_offsets = segment_offsets(items, data.n_items)
    user_reg = spec.reg * np.maximum(np.diff(user_seg[1]), 1).astype(np.float64)
    phi = prior = user_counts = None
    if user_features is not None:
        phi, n_families = user_feature_matrix(user_features, data.n_users)
    params = encoder.init_params()
    outer = range(spec.steps)
    if spec.progress:
        from tqdm.auto import tqdm

        outer = tqdm(outer, desc=f"am-{spec.variant}-{spec.loss.name}", unit="step", leave=False)
    for _ in outer:
        V, _ = encoder.forward(params, None)  # v^t: the expansion point
        gram, moment = segment_statistics(user_seg[1], user_seg[0], items, V, None, y)
        if prior is not None:
            moment += user_reg[:, None] * (phi @ prior)
        U = solve_users(gram, moment, user_reg)  # UserUpdate: exact, never released
        if private:
            U = clip_rows(U, spec.max_norm)
        if phi is not None:
            prior, user_counts = release_prior(
                phi, n_families, U, user_counts, plan, noise, spec.max_norm
            )
        opt = Adam(params.size, spec.learning_rate)
        if dpsgd:
            for _t in range(spec.inner_steps):
                grad = _dpsgd_gradient(
                    spec, params, U, (users, items, y), weights, user_seg, ridge, plan, noise
                )
                params = opt.step(params, grad)
            continue
        H, g = convex_statistics(
            spec.loss, U, V, users, items, y, weights, item_order, item_offsets, *clips
        )
        H, g = _release(H, g, plan, clips, noise, data.item_labels)
        for _t in range(spec.inner_steps):  # Algorithm 7, lines 7-9 (Adam steps)
            batch = None
            if spec.variant == "minibatch":
                size = min(spec.batch_items, data.n_items)
                batch = np.sort(rng.choice(data.n_items, size, replace=False))
            grad = quadratic_model_gradient(encoder, params, H, g, V, ridge, batch)
            params = opt.step(params, grad)
        del H, g
    return ConvexFit(params, counts, prior)
