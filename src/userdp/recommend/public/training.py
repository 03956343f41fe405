"""The squared-loss training of :class:`~userdp.recommend.PublicFeatureRecommender` (AM-SSP,
AM-DPSGD): the alternating steps over a runner, the user step on its rows, the noisy release
of the item statistics and the bias prior's pull. The estimator validates, plans and packs."""

from __future__ import annotations

from typing import Any

import numpy as np

from userdp.multitask.kernels import segment_statistics
from userdp.multitask.ssp import perturb_statistics, project_psd
from userdp.privacy.noise import NoiseSource
from userdp.recommend.core.model import solve_users
from userdp.recommend.core.prior import bias_prior, count_noise_sd, item_covariates
from userdp.recommend.core.spec import Allocation
from userdp.recommend.core.steps import user_side_norm
from userdp.recommend.engines.local import Preamble, UserSolve
from userdp.recommend.public.steps import (
    Adam,
    BiasedEncoder,
    dpsgd_gradient,
    item_bias_encoder,
    item_update_inputs,
    release_prior,
    ssp_gradient,
    ssp_noise_ridge,
    user_feature_matrix,
    user_solve_inputs,
)

__all__ = ["MAX_COVARIATES", "local_users", "release_statistics", "train_squared", "with_prior"]

#: Public item feature columns beyond which the bias prior uses log(count) alone.
MAX_COVARIATES = 1000


def train_squared(
    est: Any,  # the PublicFeatureRecommender (not imported: it imports this module)
    runner: Any,  # a Runner; AM-DPSGD and the prior read the LocalRunner's rows
    prep: Preamble,
    plan: Any,  # a NoisePlan, or None without privacy
    noise: NoiseSource,
    rng: np.random.Generator,
    user_features: Any,
) -> tuple[np.ndarray, Any, float | None, np.ndarray | None]:
    """The alternating steps over ``runner`` (:mod:`userdp.recommend.engines.local`): the exact
    user solves and item statistics there, releases and encoder steps here. AM-DPSGD and
    the user-feature prior read the local runner's rows (local engine only). Returns the
    encoder's parameters, the encoder, beta (None without biases) and the prior table."""
    private = plan is not None
    dpsgd = est.variant == "dpsgd"
    center, lo, hi, n_items = prep.center, prep.lo, prep.hi, prep.n_items
    est._check_encoder_size(n_items)
    counts = prep.counts if private else prep.exact_counts
    assert counts is not None  # released counts when private, exact ones otherwise
    runner.restrict(np.ones(n_items, dtype=bool))  # AM-SSP trains every item
    rule = Allocation("adaptive", 1, est.mu)
    runner.allocate(rule, counts if private else None, noise)  # adaptive weights (Table 2)
    half = range_half = max(hi - center, center - lo)
    if private and est.rating_clip is not None:
        half = min(half, float(est.rating_clip))
    # With biases the encoder gets the bias coordinate z_j (b_j = beta z_j) and the item
    # statistics the user vectors [u_k, beta]: bound ``norm`` = sqrt(2) max_norm.
    beta = float(est.max_norm) if est._biased else None
    encoder = est.encoder
    if beta is not None:
        encoder = BiasedEncoder(encoder, item_bias_encoder(encoder))
    norm = user_side_norm(est.max_norm, beta)
    ridge = est.reg * np.maximum(counts, 1.0)
    if plan is not None and plan.gram is not None:
        # As in MatrixFactorization: a ridge of the Gram noise's spectral size keeps items
        # whose statistics are mostly noise near 0 (the centre); SSP1 from its total noise.
        ridge = ridge + ssp_noise_ridge(
            est.noise_reg, plan.gram, plan.releases_per_step, norm, encoder.dim
        )
    # The runner's user solve: users [u_k, c_k] against [v_j, 1] and y - b_j with biases;
    # item side x_k = [clip(u_k), beta] (or clip(u_k)), targets clipped to +-half.
    d = int(est.encoder.dim)
    clip = float(est.max_norm) if private else None
    how = UserSolve(d, beta is not None, beta or 0.0, 0.0, clip, half, clip_target=private)
    phi = prior = user_counts = None
    n_families = 0
    if user_features is not None:
        phi, n_families = user_feature_matrix(user_features, runner.n_users)
    params = encoder.init_params()
    outer = range(est.steps)
    if est.progress:
        from tqdm.auto import tqdm

        outer = tqdm(outer, desc=f"am-{est.variant}", unit="step", leave=False)
    for _ in outer:
        V_items, _ = encoder.forward(params, None)
        if dpsgd or phi is not None:  # the local runner's rows (refused on Spark)
            X, target, prior, user_counts = local_users(
                est,
                runner,
                V_items,
                beta,
                phi,
                prior,
                user_counts,
                plan,
                noise,
                range_half if dpsgd else half,
                n_families,
            )
        else:
            runner.solve_users(V_items, how, est.reg)  # exact, never released
        opt = Adam(params.size, est.learning_rate)
        if dpsgd:
            for _t in range(est.inner_steps):
                grad = dpsgd_gradient(
                    encoder,
                    params,
                    X,
                    runner.users,
                    runner.items,
                    target,
                    runner.weights,
                    runner.user_order,
                    runner.user_offsets,
                    ridge,
                    plan,
                    noise,
                    est.clip_norm,
                )
                params = opt.step(params, grad)
            continue
        if phi is not None:
            runner.V, runner.target = X, target
        exact_a, exact_b = runner.item_statistics(weighted=private)
        stats = None
        for _t in range(est.inner_steps):
            if stats is None or est.variant == "ssp1":
                released = release_statistics(
                    exact_a, exact_b, plan, norm, half, noise, prep.labels
                )
                stats = with_prior(est, released, ridge, beta, counts, plan, half)
            batch = None
            if est.variant == "minibatch":
                size = min(est.batch_items, n_items)
                batch = np.sort(rng.choice(n_items, size, replace=False))
            grad = ssp_gradient(encoder, params, stats[0], stats[1], stats[2], batch)
            params = opt.step(params, grad)
        del exact_a, exact_b
    return params, encoder, beta, prior


def local_users(
    est: Any,  # the PublicFeatureRecommender
    runner: Any,
    V_items: np.ndarray,
    beta: float | None,
    phi: Any,
    prior: np.ndarray | None,
    counts: np.ndarray | None,
    plan: Any,  # a NoisePlan, or None without privacy
    noise: NoiseSource,
    bound: float,
    n_fam: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """The user step on the local runner's rows, with the user-feature prior's pull and
    release (and for AM-DPSGD): returns the item-side vectors and targets, the prior."""
    users, items, y = runner.users, runner.items, runner.y
    offsets = runner.user_offsets
    user_reg = est.reg * np.maximum(np.diff(offsets), 1).astype(np.float64)
    Z, target = user_solve_inputs(V_items, y, items, beta)  # [v_j, 1], y - b_j
    gram, moment = segment_statistics(offsets, runner.user_order, items, Z, None, target)
    if prior is not None:  # pull toward the released prior: (G + l I)^-1 (m + l p)
        moment[:, : prior.shape[1]] += user_reg[:, None] * (phi @ prior)
    U = solve_users(gram, moment, user_reg)  # user update: exact, never released
    # Factors u_k (clipped when private), item-side vectors x_k ([u_k, beta] with
    # biases) and targets (y - c_k with biases: the user's own, never released, bias).
    clip = est.max_norm if plan is not None else None
    U, X, target = item_update_inputs(U, users, y, beta, clip)
    if phi is not None:
        prior, counts = release_prior(phi, n_fam, U, counts, plan, noise, est.max_norm)
    if plan is not None:  # the bound the moments' sensitivity uses (rating_clip: SSP only)
        target = np.clip(target, -bound, bound)  # no-op on y itself without it
    return X, target, prior, counts


def with_prior(
    est: Any,  # the PublicFeatureRecommender
    stats: tuple[np.ndarray, np.ndarray, Any],
    ridge: np.ndarray,
    beta: float | None,
    counts: np.ndarray,
    plan: Any,  # a NoisePlan, or None without privacy
    half: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(A, b, ridge)`` for the encoder's steps: with ``bias_prior`` (private, biases),
    the bias coordinate's ridge pulls toward the empirical-Bayes prior mean fitted from
    this release (:mod:`userdp.recommend.core.prior`, public item features as covariates):
    ``b_j[k] += rho_j m_j / beta`` and ridge ``rho_j`` there. Post-processing of the
    release and the released counts."""
    gram, moment, raw_kk = stats
    if plan is None or beta is None or not est.bias_prior:
        return gram, moment, ridge
    norm = user_side_norm(est.max_norm, beta)
    covariates = item_covariates(est.encoder)
    if covariates is not None and covariates.shape[1] > MAX_COVARIATES:
        covariates = None
    prior = bias_prior(
        raw_kk,
        moment[:, -1],
        beta=beta,
        counts=counts,
        count_sd=count_noise_sd(plan.counts, est.count_sample),
        gram_sd=plan.gram * norm**2,
        moment_sd=plan.moment * norm * half,
        half=half,
        covariates=covariates,
    )
    full = np.repeat(np.asarray(ridge, dtype=np.float64)[:, None], moment.shape[1], axis=1)
    full[:, -1] = prior.ridge
    moment = moment.copy()
    moment[:, -1] += prior.ridge * prior.mean / beta
    return gram, moment, full


def release_statistics(
    gram: np.ndarray,
    moment: np.ndarray,
    plan: Any,  # a NoisePlan, or None without privacy
    norm: float,
    half: float,
    noise: NoiseSource,
    labels: Any,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """One noisy release of the item statistics (exact when training without privacy).

    ``norm`` bounds the user vectors (``max_norm``, ``sqrt(2) max_norm`` with biases):
    the Gram stack's l2 sensitivity is ``norm^2``, the moments' ``norm * half``.

    The noisy Grams are projected onto the PSD cone (post-processing): an indefinite
    ``A_j + lambda_j I`` would make the encoder's quadratic objective unbounded below in
    its negative directions, and training then drifts wherever the noise points.
    """
    if plan is None:
        return gram, moment, None
    gram, moment = perturb_statistics(
        gram,
        moment,
        gram_sigma=plan.gram * norm**2,
        moment_sigma=plan.moment * norm * half,
        noise=noise,
        gram_l2=norm**2,
        moment_l2=norm * half,
        index=labels,
    )
    raw_kk = gram[:, -1, -1].copy()  # the released bias diagonal (the prior's input)
    vals, vecs = project_psd(gram)
    return np.einsum("mdk,mk,mek->mde", vecs, vals, vecs), moment, raw_kk
