""":meth:`PublicFeatureRecommender.fit <userdp.recommend.PublicFeatureRecommender.fit>` for a
loss other than squared (Krichene et al. 2023b, Appendix D): validation, the charged plan and
the preamble, :func:`~userdp.recommend.public.convex.train_convex`, and the released model."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from userdp.privacy.accountant import PrivacyAccountant
from userdp.privacy.noise import NoiseSource
from userdp.recommend.core.base import diagnostics
from userdp.recommend.core.model import RecommenderModel
from userdp.recommend.core.spec import ConvexSpec
from userdp.recommend.public.convex import (
    check_convex_variant,
    clip_norms,
    resolve_loss,
    train_convex,
)
from userdp.recommend.public.steps import METHOD_NAMES

__all__ = ["fit_convex"]


def fit_convex(
    est: Any,  # the PublicFeatureRecommender (not imported: it imports this module)
    ratings: Any,
    user_features: Any,
    accountant: PrivacyAccountant | None,
    caller: str,
) -> Any:
    """:meth:`fit` for a loss other than ``"squared"`` (Appendix D): the preamble and the
    release here, the alternating steps in :func:`~userdp.recommend.public.convex.
    train_convex` from the resolved :class:`~userdp.recommend.core.spec.ConvexSpec`."""
    started = time.perf_counter()
    budget = est._validate()
    est._check_accountant(accountant, "accountant", caller)
    loss = resolve_loss(est.loss)
    check_convex_variant(est.variant, loss)
    private = budget is not None
    clips: tuple[Any, Any] = (None, None)  # exact statistics without privacy
    if private:
        clips = clip_norms(loss, est.hessian_clip, est.gradient_clip, est.max_norm)
    item_set = est._item_set(private)
    if item_set is not None:
        est._check_encoder_size(len(item_set))
    dpsgd = est.variant == "dpsgd"
    per_step = est.inner_steps if dpsgd else 1
    plan = est._charged_plan(budget, per_step, user_features is not None, accountant, caller)
    noise = NoiseSource(est.seed)
    rng = noise.stream(0x5353)  # mini-batch sampling, as in the squared-loss path
    prep = est._prepare(
        ratings,
        item_set,
        noise,
        count_noise=None if plan is None else plan.counts,
        center_noise=None if plan is None else plan.center,
    )
    est._check_encoder_size(prep.data.n_items)
    spec = ConvexSpec(
        variant=est.variant,
        loss=loss,
        clips=clips,
        encoder=est.encoder,
        steps=est.steps,
        inner_steps=est.inner_steps,
        mu=est.mu,
        reg=est.reg,
        noise_reg=est.noise_reg,
        max_norm=est.max_norm,
        learning_rate=est.learning_rate,
        clip_norm=est.clip_norm,
        negatives=est.negatives,
        batch_items=est.batch_items,
        progress=est.progress,
    )
    fitted = train_convex(spec, prep, plan, noise, rng, user_features)
    params, prior = fitted.params, fitted.prior
    factors = np.asarray(est.encoder.forward(params, None)[0], dtype=np.float64)
    event = spent = None
    if private:
        assert plan is not None  # private training is planned
        event, spent = est._spent(plan.event(), prep.item_set, budget.delta)
    est.plan_ = plan
    est.fit_seconds_ = time.perf_counter() - started
    est.diagnostics_ = diagnostics(prep.dropped, est.fit_seconds_)
    declared = est._declared(
        dim=int(est.encoder.dim),
        encoder=type(est.encoder).__name__,
        loss=loss.name,
        hessian_clip=clips[0],
        gradient_clip=clips[1],
    )
    est.model_ = RecommenderModel(
        method=METHOD_NAMES[est.variant],
        item_labels=prep.data.item_labels,
        item_factors=factors,
        center=float(prep.center),
        rating_range=(float(prep.lo), float(prep.hi)),
        item_counts=fitted.counts if private else None,
        trained_items=np.ones(factors.shape[0], dtype=bool),
        budget=spent,
        dp_event=event,
        item_source=prep.item_set.source,
        params=declared,
        encoder_params=np.asarray(params, dtype=np.float64),
        user_prior=prior,
    )
    est._publish(params, prior)  # item_biases_ is None: Algorithm 7 trains no bias
    return est
