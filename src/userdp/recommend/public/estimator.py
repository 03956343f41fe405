"""Private learning with public item features: AM-SSP (Krichene et al. 2023b, "Private Learning
with Public Features", arXiv:2310.15454): the estimator, :class:`PublicFeatureRecommender`.

Its squared-loss training is in :mod:`~userdp.recommend.public.training`, the fit for other
losses in :mod:`~userdp.recommend.public.convex_fit`; the method is described in docs/recommend.md.
"""

from __future__ import annotations

import logging
import time
from typing import Any, ClassVar

import numpy as np

from userdp._validation import MAX_ITERATIONS
from userdp.exceptions import InvalidParameterError
from userdp.multitask.kernels import segment_statistics
from userdp.privacy.accountant import PrivacyAccountant
from userdp.privacy.budget import PrivacyBudget
from userdp.privacy.noise import NoiseSource
from userdp.recommend.core.base import (
    SHARED_CONSTRAINTS,
    RecommenderBase,
    check_biases,
    diagnostics,
)
from userdp.recommend.core.model import RecommenderModel
from userdp.recommend.core.plans import NoisePlan, SSPPlan, plan_noise, plan_ssp_noise
from userdp.recommend.engines import make_runner, resolve_engine
from userdp.recommend.engines.local import spark_supported
from userdp.recommend.public.convex import CONVEX_CONSTRAINTS
from userdp.recommend.public.convex_fit import fit_convex
from userdp.recommend.public.steps import (
    METHOD_NAMES,
    check_encoder,
    clipped_user_gradients,
    ssp_gradient,
    ssp_noise_ridge,
    user_feature_matrix,
    user_prior_statistics,
)
from userdp.recommend.public.training import MAX_COVARIATES, train_squared

__all__ = [
    "MAX_COVARIATES",
    "SSP_VARIANTS",
    "VARIANTS",
    "PublicFeatureRecommender",
    "SSPPlan",
    "clipped_user_gradients",
    "plan_ssp_noise",
    "ssp_gradient",
    "ssp_noise_ridge",
    "user_feature_matrix",
    "user_prior_statistics",
]

log = logging.getLogger("userdp.recommend")

SSP_VARIANTS = ("ssp2", "ssp1", "minibatch")
VARIANTS = (*SSP_VARIANTS, "dpsgd")
#: The released model's ``method`` for each variant (the CLI's ``--method`` names).


class PublicFeatureRecommender(RecommenderBase):
    """Alternating minimisation with an SSP-trained public-feature item encoder (AM-SSP).

    Parameters
    ----------
    epsilon, delta : float or None, default=None
        The training run's privacy budget (``delta`` in (0, 1)). Both None trains without
        privacy (exact statistics), for reference.
    encoder : ItemEncoder
        Maps item codes to embeddings from public features (``PublicFeatureEncoder``) or ids
        (``IdEncoder``, the id-only variant). Its parameters are initialised from public
        randomness only. Its item codes are the positions in ``items``.
    items : ItemSet, sequence of item ids, or None
        The item set, fixed before training, as in
        :class:`~userdp.recommend.MatrixFactorization`: a public catalogue or a privately
        selected vocabulary; build the encoder's features on it. Required for private
        training.
    variant : {"ssp2", "ssp1", "minibatch", "dpsgd"}, default="ssp2"
        How the encoder is trained: SSP2, SSP1, mini-batch SSP2 (AM-SSP), or full-batch DP-SGD
        with user-level clipping (AM-DPSGD, the baseline: noise on every one of the encoder's
        parameters at every step, and one VJP per user per step).
    steps : int, default=3
        Alternating (outer) steps.
    inner_steps : int, default=3
        Gradient steps on the encoder per outer step (all variants; SSP1 and AM-DPSGD release
        once per step). SSP2 reuses one noisy release for all of them, so many steps fit its
        noise. Set on pilot draws of ``lowrank_ratings_with_features`` (seed 0; never the
        evaluated sets). SSP2's test RMSE at epsilon 1 / 5 / 20 with T = 2, 3, 5, 10:

        ======  ===================  ===================  ===================
        T       3,000 x 1,000, 100k  943 x 1,682, 100k    3,494 x 2,387, 0.5M
        ======  ===================  ===================  ===================
        2       0.980 0.971 0.935    0.966 0.965 0.961    0.975 0.973 0.940
        3       0.988 0.977 0.932    0.968 0.966 0.962    0.977 0.972 0.932
        5       0.992 0.975 0.925    0.970 0.970 0.961    0.977 0.971 0.923
        10      1.001 0.986 0.931    0.974 0.972 0.964    0.982 0.974 0.915
        ======  ===================  ===================  ===================

        (users x items, ratings; global means 0.977, 0.965, 0.975; 2-6 seeds.)
        Averaged over the nine cells T = 2, 3, 5, 10 score 0.9628, 0.9636, 0.9627, 0.9665: the
        pilot cannot separate 2-5 (under one seed's sd), and the best T grows with the signal
        (more steps at epsilon 20 and on the larger draw). 3, the middle, is the default.
        Measured afterwards on ml-100k (3 seeds): 1.052 / 1.056 / 1.017 with 3, 1.087 / 1.090 /
        1.043 with 10, 1.092 / 1.088 / 1.054 with 2: the result is sensitive to T.
    learning_rate : float, default=0.05
        Adam step size.
    batch_items : int, default=1024
        Items per inner step of mini-batch SSP2.
    clip_norm : float, default=1.0
        AM-DPSGD: each user's whole gradient is clipped to this norm.
    rating_clip : float or None, default=None
        SSP variants, private runs: the centred ratings ``y_i`` are clipped to
        ``[-rating_clip, rating_clip]`` in the released moments ``b_j`` (the user solves use
        them unclipped), so b's l2 sensitivity is ``max_norm * rating_clip`` instead of
        ``max_norm`` times the half-width of ``rating_range`` (None). The moment noise on the
        encoder's gradient scales with it (see ``benchmarks/amssp_noise.py``); clipping
        biases the extreme ratings toward the centre. On the 3,000 x 1,000 pilot draw
        (SSP2, T = 3, 2 seeds; half-width 2.97) at epsilon 1 / 5 / 20: None 0.986 / 0.975 /
        0.931, 2.0 0.985 / 0.963 / 0.917, 1.5 0.986 / 0.964 / 0.908, 1.0 0.985 / 0.970 /
        0.924 (AM-DPSGD on that draw: 1.025 / 0.968 / 0.927, so SSP2 with 1.5-2 beats it at 5
        and 20). Not on by default: a good value depends on the rating scale.
    loss : {"squared", "logistic"} or ConvexLoss, default="squared"
        The training loss. "squared" is AM-SSP (this class's own path, above). Any other loss
        is trained by SSP for convex losses (Appendix D, Algorithm 7; see
        :mod:`userdp.recommend.public.convex`): the released statistics are the clipped
        Hessian and gradient sums ``(H_j, g_j)`` around the current item embeddings, of l2
        sensitivity ``hessian_clip`` and ``gradient_clip``; "logistic" is for implicit
        feedback (use :data:`~userdp.recommend.ML20M_MODEL_DEFAULTS`: rating range (0, 1),
        center 0). Variants "ssp2", "minibatch" and "dpsgd".
    hessian_clip, gradient_clip : float or None, default=None
        Gamma_H and Gamma_g of Algorithm 7 for a loss other than "squared" (None: the loss's
        stated bounds times ``max_norm^2`` and ``max_norm``; required where it states none).
    negatives : float or None, default=None
        For a loss other than "squared": unrated items sampled per rated item, labelled with
        the low end of ``rating_range`` (None: 1).
    user_feature_fraction : float, default=0.05
        Share of the budget for the private user-feature prior, when ``fit`` gets
        ``user_features``. The user encoder is then ``u_k = argmin_u sum (u.v_j - y)^2 +
        lambda_k ||u - P^T phi_k||^2``: each user's exact solve is pulled toward the mean factor
        of the users who share their (private) features, a table ``P`` released with noise
        after every user update. It matters most for users with few ratings.
    biases : bool or "auto", default="auto"
        As in :class:`~userdp.recommend.MatrixFactorization` (``"auto"``: on, the ratings
        being explicit). With True the model is ``r ~ center + c_k + b_j + u_k . v_j``. The
        item biases ``b_j = beta z_j`` (``beta = max_norm``) come from one more encoder
        output ``z_j`` (:class:`~userdp.recommend.public.steps.BiasedEncoder`: for a
        ``PublicFeatureEncoder`` a linear model of the item's public features, so unrated
        items get the bias their features predict; otherwise one free bias per item) and are
        trained in the same releases as the factors: the item statistics use the user
        vectors ``[u_k, beta]`` and the targets ``y - c_k`` (same allocation weights, noise
        multipliers and accounting; the bounds grow, see ``fit``'s Privacy). The user biases
        ``c_k`` are solved exactly with the user factors, from the user's own ratings and the
        released encoder, and never released; ``encoder_params`` then holds the factor
        encoder's parameters followed by the bias encoder's. Measured (not tuned) with
        ``benchmarks/public_biases.py``: on ml-100k and ml-latest-small biases lower test RMSE
        for ssp2, ssp1 and dpsgd at epsilon 1, 5 and 20 (by 0.1-6.4%); on a
        ``lowrank_ratings_with_features`` draw, which has no biases, they cost 0.4-3.4%.
        ``"auto"`` is off with ``implicit=True``.
    implicit : bool, default=False
        The data kind: True for implicit feedback (every rating 1, e.g. clicks or watches),
        where item and user biases alone explain every rating and the bias model collapses
        (Recall@20 0.003-0.017 against 0.11-0.31 without biases), so ``biases="auto"`` is off;
        False for explicit ratings (``"auto"``: on).
    bias_prior : bool, default=True
        As in :class:`~userdp.recommend.MatrixFactorization`: the SSP variants with biases
        solve the bias coordinate with a ridge toward an empirical-Bayes prior fitted from
        each release (:mod:`userdp.recommend.core.prior`), with the encoder's public item features
        (row-normalised feature families of at most 200 values each, so not an id family) as
        covariates when it has them (up to ``MAX_COVARIATES`` columns in all).
        Post-processing: the releases and event are unchanged.
    rating_range, center, mu, count_sample, count_fraction, center_fraction, moment_share,
    max_norm, reg, noise_reg, seed, progress
        As in :class:`~userdp.recommend.MatrixFactorization` (``reg`` scales the item ridge by
        the private counts, lambda_j = reg * n_hat_j, and the user ridge by the user's count;
        ``noise_reg`` adds :func:`ssp_noise_ridge`, from the total Gram noise one outer step
        fits: SSP1's T releases count as their mean, sigma / sqrt(T). On the 3,000 x 1,000
        pilot draw at T = 3 this took SSP1 from 0.983 / 0.981 / 0.949 to 0.983 / 0.977 /
        0.941 at epsilon 1 / 5 / 20, and at T = 10 from 0.984 / 0.981 / 0.970 to 0.983 /
        0.980 / 0.944).

    Privacy
    -------
    Per release, adding or removing a user changes the stacked ``(A_j)`` by at most
    ``n^2`` and ``(b_j)`` by at most ``n * half_width`` in l2, ``n = max_norm`` (``sqrt(2)
    max_norm`` with biases), ``half_width`` being that of ``rating_range`` about the centre
    or ``rating_clip`` when smaller (every user's squared weights sum to at most 1: ``w_bar =
    1`` in Theorem 2); the counts and the centre as in MatrixFactorization. SSP2 releases once
    per outer step, SSP1 once per inner step; AM-DPSGD releases one gradient per inner step,
    of l2 sensitivity ``clip_norm``. The user-feature prior releases its feature-value counts
    once (l2 sensitivity ``sqrt(F)``) and one table of factor sums per outer step (``sqrt(F)
    max_norm``); see :func:`user_prior_statistics`. Derivations: ``fit``'s Privacy section.
    With a loss other than "squared" each outer step releases the clipped ``(H_j)`` and
    ``(g_j)`` instead of ``(A_j)`` and ``(b_j)``, of l2 sensitivity ``hessian_clip`` and
    ``gradient_clip`` (Algorithm 7, lines 4-5; see
    :func:`~userdp.recommend.public.convex.convex_statistics`), through the same plan.
    """

    _parameter_constraints: ClassVar[dict[str, dict[str, Any]]] = {
        **SHARED_CONSTRAINTS,
        "encoder": {"check": check_encoder, "cli": False, "help": "The item encoder."},
        "variant": {"choices": VARIANTS, "cli": False, "help": "How the encoder is trained."},
        "inner_steps": {
            "int": True,
            "low": 1,
            "high": MAX_ITERATIONS,
            "help": "Gradient steps on the item encoder per alternating step.",
        },
        "batch_items": {"int": True, "low": 1, "help": "Items per inner step of mini-batch SSP."},
        "rating_clip": {
            "low": 0.0,
            "low_open": True,
            "none": True,
            "cli": False,
            "help": "Centred ratings are clipped to this in the released moments b_j.",
        },
        "user_feature_fraction": {
            "low": 0.0,
            "high": 1.0,
            "low_open": True,
            "high_open": True,
            "help": "Share of the budget spent on the private user-feature prior.",
        },
        **CONVEX_CONSTRAINTS,
        "biases": {
            "check": check_biases,
            "metavar": "on|off|auto",
            "help": "Add released item biases and per-user biases (solved, never released); "
            "auto: on (the am-* methods train on explicit ratings).",
        },
        "implicit": {
            "bool": True,
            "help": "Implicit feedback (all ratings 1): biases='auto' is then off.",
        },
        "bias_prior": {
            "bool": True,
            "help": "Shrink the released item biases toward an empirical-Bayes prior fitted "
            "from each release's statistics and the public item features (post-processing).",
        },
    }

    def __init__(
        self,
        *,
        encoder: Any,
        epsilon: float | None = None,
        delta: float | None = None,
        items: Any = None,
        variant: str = "ssp2",
        steps: int = 3,
        inner_steps: int = 3,
        learning_rate: float = 0.05,
        batch_items: int = 1024,
        rating_range: tuple[float, float] | None = None,
        center: str | float = "private-mean",
        mu: float = 0.25,
        count_sample: int = 50,
        count_fraction: float = 0.15,
        center_fraction: float = 0.02,
        moment_share: float = 0.5,
        max_norm: float = 1.0,
        reg: float = 0.02,
        noise_reg: float = 5.0,
        clip_norm: float = 1.0,
        rating_clip: float | None = None,
        user_feature_fraction: float = 0.05,
        loss: Any = "squared",
        hessian_clip: float | None = None,
        gradient_clip: float | None = None,
        negatives: float | None = None,
        biases: bool | str = "auto",
        implicit: bool = False,
        bias_prior: bool = True,
        seed: int | None = None,
        progress: bool = False,
    ) -> None:
        self.encoder = encoder
        self.epsilon = epsilon
        self.delta = delta
        self.items = items
        self.variant = variant
        self.steps = steps
        self.inner_steps = inner_steps
        self.learning_rate = learning_rate
        self.batch_items = batch_items
        self.rating_range = rating_range
        self.center = center
        self.mu = mu
        self.count_sample = count_sample
        self.count_fraction = count_fraction
        self.center_fraction = center_fraction
        self.moment_share = moment_share
        self.max_norm = max_norm
        self.reg = reg
        self.noise_reg = noise_reg
        self.clip_norm = clip_norm
        self.rating_clip = rating_clip
        self.user_feature_fraction = user_feature_fraction
        self.loss = loss
        self.hessian_clip = hessian_clip
        self.gradient_clip = gradient_clip
        self.negatives = negatives
        self.biases = biases
        self.implicit = implicit
        self.bias_prior = bias_prior
        self.seed = seed
        self.progress = progress

    def _validate(self) -> Any:
        """The declared table, then the budget; returns the target budget (None: exact)."""
        self._validate_params()
        private = self.epsilon is not None or self.delta is not None
        return self._check_budget_keywords(private)

    @property
    def _biased(self) -> bool:
        """``biases`` resolved: "auto" is on for the squared loss on explicit ratings (as
        MatrixFactorization's auto without the implicit term), off with ``implicit=True``
        and for the other losses, whose path (Appendix D) has no bias coordinate."""
        if self.biases == "auto":
            return not self.implicit and isinstance(self.loss, str) and self.loss == "squared"
        return bool(self.biases)

    def _check_encoder_size(self, n_items: int) -> None:
        if n_items != self.encoder.n_items:
            raise InvalidParameterError(
                f"The encoder describes {self.encoder.n_items} items but the item set has "
                f"{n_items}; build the encoder's features on the item set."
            )

    def fit(
        self,
        ratings: Any,
        *,
        user_features: Any = None,
        accountant: PrivacyAccountant | None = None,
        engine: str = "auto",
    ) -> PublicFeatureRecommender:
        """Train on ``ratings``; without ``epsilon``/``delta`` trains without privacy (exact
        statistics), for reference.

        ``engine`` ({"auto", "local", "spark"}) is where the statistics are computed, as in
        :meth:`MatrixFactorization.fit <userdp.recommend.MatrixFactorization.fit>` ("auto":
        "spark" for a Spark DataFrame). The Spark engine
        (:class:`userdp.recommend.engines.spark.SparkRunner`) runs the squared loss's variants ssp2,
        ssp1 and minibatch, with or without biases, and for a given seed releases the local
        engine's model (to float round-off); AM-DPSGD, ``user_features`` and other losses are
        refused there before anything is charged.

        ``user_features`` (private, one row per user code: ``SparseFeatures`` families such as
        :func:`~userdp.data.features.movielens_user_features`) turns on the user-feature prior.
        Ratings of items outside ``items`` are dropped first. With ``accountant`` the training
        event is charged to it before the data is read (refused there, nothing charged, when
        it would exceed the accountant's budget).

        Privacy
        -------
        Neighbouring datasets differ in all ratings of one user k (added or removed). The item
        set and the encoder (public features, data-independent initialisation) are fixed before
        any statistic; conditioned on the values released before it, every other user's
        factors, bias and targets are unchanged: their solves read only their own ratings and
        the released encoder parameters. Each release then moves by at most (l2, all items
        stacked; tested by ``tests/property/test_public_feature_sensitivity.py`` and
        ``tests/property/test_recommend_neighbours.py``):

        - counts and centre: as in :class:`~userdp.recommend.MatrixFactorization`;
        - Gram stack ``(A_j)`` (ssp2 and minibatch: once per outer step; ssp1: once per inner
          step): user k adds ``w_kj x_k x_k^T`` to the items it rated, ``sum_j w_kj^2 <= 1``,
          so ``sqrt(sum_j w_kj^2 ||x_k||^4) <= n^2``. ``x_k = u_k`` clipped to ``max_norm``
          gives ``n^2 = max_norm^2``; with ``biases`` ``x_k = [u_k, beta]``, ``beta =
          max_norm``, gives ``n^2 = max_norm^2 + beta^2 = 2 max_norm^2``;
        - moment stack ``(b_j)``: user k adds ``w_kj t_kj x_k`` with ``|t_kj| <= half_width``
          (the target ``r - center``, or ``r - center - c_k`` with biases, clipped to
          ``[-half_width, half_width]`` whatever ``c_k`` is): ``n * half_width``, i.e.
          ``max_norm * half_width`` or ``sqrt(2) max_norm * half_width`` with biases;
        - encoder gradient (dpsgd, once per inner step): ``clip_norm``: user k's whole gradient
          ``sum_j w_kj (x_k . v_j - t_kj) J_j^T x_k`` over all the encoder's parameters (the
          bias encoder's included, with biases) is clipped to ``clip_norm``; the ridge term
          uses released counts and is added after the noise;
        - user-feature prior: counts ``sqrt(F)``, factor sums ``sqrt(F) max_norm`` (the sums
          take the clipped factors ``u_k`` only, never ``c_k``).

        The noise of every release is its multiplier from the plan times its bound, so biases
        change no multiplier and no event: same budget, more noise per coordinate
        (``sqrt(2)`` on the moments, 2 on the Grams). ``c_k`` is never released.
        """
        caller = "PublicFeatureRecommender.fit"
        engine = resolve_engine(ratings, engine, caller)
        if engine == "spark":  # refused before anything is charged or read
            spark_supported(self.variant, self.loss, self.items, user_features, caller)
        if not (isinstance(self.loss, str) and self.loss == "squared"):  # Appendix D
            if not isinstance(self.biases, str) and bool(self.biases):
                raise InvalidParameterError(
                    "The 'biases' parameter of PublicFeatureRecommender must be False or "
                    "'auto' with a loss other than 'squared' (Algorithm 7's path trains no "
                    f"bias). Got {self.biases!r} instead."
                )
            return fit_convex(self, ratings, user_features, accountant, caller)
        started = time.perf_counter()
        budget = self._validate()
        self._check_accountant(accountant, "accountant", caller)
        private = budget is not None
        item_set = self._item_set(private)
        if item_set is not None:
            self._check_encoder_size(len(item_set))
        runner = make_runner(ratings, engine, segment_statistics)
        run_spec = self._run_spec(self.encoder.dim, self._biased)
        runner.check(run_spec, item_set)
        per_step = self.inner_steps if self.variant in ("ssp1", "dpsgd") else 1
        plan = self._charged_plan(budget, per_step, user_features is not None, accountant, caller)
        noise = NoiseSource(self.seed)
        rng = noise.stream(0x5353)  # mini-batch sampling
        prep = runner.prepare(
            run_spec,
            item_set,
            noise,
            count_noise=None if plan is None else plan.counts,
            center_noise=None if plan is None else plan.center,
        )
        try:
            trained = train_squared(self, runner, prep, plan, noise, rng, user_features)
            params, encoder, beta, prior = trained
        finally:
            runner.close()
        center, lo, hi, labels = prep.center, prep.lo, prep.hi, prep.labels
        counts = prep.counts if private else prep.exact_counts
        factors = np.asarray(encoder.forward(params, None)[0], dtype=np.float64)
        item_biases = None
        if beta is not None:  # b_j = beta z_j, released with the factors
            factors, item_biases = np.ascontiguousarray(factors[:, :-1]), beta * factors[:, -1]
        event = spent = None
        if private:
            assert plan is not None  # private training is planned
            event, spent = self._spent(plan.event(), prep.item_set, budget.delta)
        self.plan_ = plan
        self.fit_seconds_ = time.perf_counter() - started
        self.diagnostics_ = diagnostics(prep.dropped, self.fit_seconds_)
        self.model_ = RecommenderModel(
            method=METHOD_NAMES[self.variant],
            item_labels=labels,
            item_factors=factors,
            item_biases=item_biases,
            center=float(center),
            rating_range=(float(lo), float(hi)),
            item_counts=counts if private else None,
            trained_items=np.ones(factors.shape[0], dtype=bool),
            budget=spent,
            dp_event=event,
            item_source=prep.item_set.source,
            params=self._declared(dim=int(self.encoder.dim), encoder=type(self.encoder).__name__),
            encoder_params=np.asarray(params, dtype=np.float64),
            user_prior=prior,
        )
        self._publish(params, prior)
        return self

    def _charged_plan(
        self,
        budget: PrivacyBudget | None,
        releases_per_step: int,
        user_features: bool,
        accountant: PrivacyAccountant | None,
        caller: str,
    ) -> NoisePlan | None:
        """The training's noise plan (None without a budget), composed in ``accountant`` with
        the seed (refused when the accountant holds it): the one plan of both the squared-loss
        and the convex paths."""
        if budget is None:
            return None
        plan = plan_noise(
            budget,
            steps=self.steps,
            solver="gd" if self.variant == "dpsgd" else "ssp",
            releases_per_step=releases_per_step,
            count_fraction=self.count_fraction,
            center_fraction=self._center_fraction(),
            moment_share=self.moment_share,
            user_fraction=self.user_feature_fraction if user_features else None,
        )
        if accountant is not None:
            accountant.compose(plan.event(), seed=self.seed, caller=caller)
        return plan

    def _publish(self, params: np.ndarray, prior: Any) -> None:
        """The fitted attributes: the encoder's parameters and views of the released model
        (shared by the squared-loss and the convex-loss paths)."""
        model = self.model_
        self.params_ = params
        self.item_factors_ = model.item_factors
        self.item_biases_ = model.item_biases
        self.item_labels_ = model.item_labels
        self.center_ = model.center
        self.rating_range_ = model.rating_range
        self.item_counts_ = model.item_counts
        self.user_prior_ = prior
        self.dp_event_ = model.dp_event
        self.budget_ = model.budget

    def user_factors(self, history: Any, user_features: Any = None) -> np.ndarray:
        """Users' embeddings from their own ratings (billboard model); see
        :meth:`RecommenderModel.user_factors` (``user_features`` pull toward the released
        prior; a user without ratings then gets the prior itself)."""
        return self._check_fitted().user_factors(history, user_features=user_features)
