"""Private matrix factorization by alternating minimisation (Krichene et al. 2023, Algorithm 3):
the estimator, :class:`MatrixFactorization` (its keyword table in
:mod:`~userdp.recommend.als.keywords`, its training loop in :mod:`~userdp.recommend.als.training`).
Only the item embeddings, the private centre and the private item counts are released; the
methods (Table 2 of the paper) are described in docs/recommend.md.
"""

from __future__ import annotations

import logging
import time
from typing import Any, ClassVar, cast

import numpy as np

from userdp.exceptions import DataError, InvalidParameterError
from userdp.privacy.accountant import PrivacyAccountant
from userdp.privacy.noise import NoiseSource
from userdp.recommend.als.keywords import CONSTRAINTS, METHODS, SPARK_METHODS
from userdp.recommend.als.steps import AUTO_CUTOFF
from userdp.recommend.als.training import train
from userdp.recommend.core.base import RecommenderBase, diagnostics
from userdp.recommend.core.centring import centre, centre_all, mean_statistics
from userdp.recommend.core.model import RecommenderModel
from userdp.recommend.core.plans import NoisePlan, TrainingPlan, plan_noise
from userdp.recommend.core.spec import Allocation, ItemUpdateSpec
from userdp.recommend.engines import make_runner, resolve_engine

__all__ = [
    "AUTO_CUTOFF",
    "METHODS",
    "SPARK_METHODS",
    "MatrixFactorization",
    "NoisePlan",
    "TrainingPlan",
    "centre",
    "centre_all",
    "mean_statistics",
    "plan_noise",
]

log = logging.getLogger("userdp.recommend")


class MatrixFactorization(RecommenderBase):
    """Matrix factorization recommender trained with user-level differential privacy.

    Parameters
    ----------
    epsilon, delta : float or None, default=None
        The training run's privacy budget (``delta`` in (0, 1): the mechanisms are Gaussian).
        Required by the private methods; ``als`` (not private) takes neither.
    items : ItemSet, sequence of item ids, or None
        The item set, fixed before training (see :mod:`userdp.recommend.core.items`): a public
        catalogue (any sequence of distinct ids, or ``ItemSet.public``) or a privately
        selected vocabulary (``ItemSet.selected(select_partitions(...))``, whose event is
        composed into ``dp_event_``). Ratings of other items are dropped. Required by private
        methods; ``als`` without it trains on the data's items.
    method : str, default="adadpals"
        One of :data:`METHODS` (Table 2 of the paper; see docs/recommend.md).
    dim : int, default=32
        Embedding dimension d.
    steps : int, default=3
        Alternating steps T (Algorithm 3); each private step is charged.
    rating_range : (float, float) or None
        Declared [low, high] of ratings; ratings are clipped to it. Required by private methods
        (it is part of the sensitivity; never inferred from the data).
    center : {"private-mean", "sampled-mean", "midpoint"} or float, default="private-mean"
        What to subtract before factorizing. Both private means release a mean rating with
        ``center_fraction`` of the budget (:mod:`userdp.recommend.core.centring`).
        ``"private-mean"`` weighs user u's ratings ``min(1, k / n_u)`` with a cap ``k`` read
        from the released counts (post-processing), large enough that heavy users are not
        under-weighted where the data allow it. ``"sampled-mean"`` (the earlier default) keeps
        at most ``count_sample`` ratings per user, so the estimate leans toward light users'
        ratings (+0.06 on ml-100k, +0.15 on ml-latest-small). ``"midpoint"`` is free.
    mu : float, default=0.25
        Exponent of the adaptive weights (1/4..1/2 recommended).
    sample_size : int, default=50
        k for the uniform and tail sampling methods.
    count_sample : int, default=50
        At most this many items per user enter the private counts (and the private mean).
    count_fraction : float, default=0.15
        Share of the (RDP) budget spent on private counts (the paper: 12-20 %).
    center_fraction : float, default=0.02
    moment_share : float, default=0.5
        Share of each SSP step's budget spent on the moments b (the rest on the Grams A).
    max_norm : float, default=1.0
        User embeddings are clipped to this norm before the item update (Gamma_x).
    reg : float, default=0.02
        Frequency-scaled ridge: item i gets ``reg * max(n_hat_i, 0) * max_norm^2`` (exact counts for
        ``als``); users get ``reg * n_j``.
    noise_reg : float, default=5.0
        Extra item ridge in units of the noise: ``noise_reg * sigma_A * sqrt(d)`` (the spectral
        size of the Gram noise) for SSP, ``noise_reg * sigma_g * sqrt(d) / learning_rate`` for
        gradient descent. It shrinks tail items, whose statistics are mostly noise, toward 0
        (the centre) instead of letting noise pick their factors: without it tail-bucket RMSE
        was worse than the global mean (1.25 vs 0.95 at epsilon 20 on the synthetic set).
    learning_rate, step_offset, sgd_steps, clip_norm : DPSGD family only
        Item i's step is ``learning_rate / (step_offset + max(n_hat_i, 0))``: a Newton-like step
        for head items, damped for tail items whose gradients are mostly noise. Gradient steps
        per alternation, and the user-level clipping norm of each user's whole gradient.
    unobserved_weight : float, default=0.0
        alpha of the implicit-feedback term ``alpha * sum_{all i, j} <u_i, v_j>^2`` (the
        "gravity" regulariser of implicit ALS) that pushes down items a user did not rate; use it
        with 0/1 feedback and Recall (the ML20M protocol). The all-users Gram ``sum_j v_j v_j^T``
        it needs in the item solve is released with noise (sensitivity ``max_norm^2``, a
        ``gravity`` share of each step); in the user solve ``U^T U`` is public: the released
        item factors over the fixed item set. That is why the item set must be fixed first: a
        new item entering ``U`` would move every user's solve (see ``fit``'s Privacy).
    top_items : float or None, default=None
        Train only on the ``ceil(top_items * len(items))`` items with the largest *private*
        counts (the ML20M protocol trains on the top 10 %); the others get zero factors. The
        number is a fraction of the item set's size (public or released), never of the exact
        number of items rated, and the ranking uses released counts: post-processing, free.
    min_item_count : float, "auto" or None, default=None
        Train only on items whose private count is at least this. ``"auto"`` (SSP methods)
        sets it to ``AUTO_CUTOFF * z_b * sqrt(dim)``, where an item's moment noise starts to
        drown its signal: budget that tail items could not use goes to items that can, and
        the dropped items predict the centre (the global-mean level) instead of noise. An
        improvement over the paper's allocation at small epsilon (see the README's figures).
    biases : bool or "auto", default="auto"
        ``"auto"``: True for explicit ratings (``unobserved_weight == 0``), False with the
        implicit term (0/1 feedback, which biases alone would explain: every rating is 1).
        On ``longtail_ratings`` seed 0 (1M ratings, the pilot draw) biases lowered held-out
        RMSE for every private method at epsilon 1, 5 and 20 and for ``als``. With True:
        model ``r_ui ~ center + c_u + b_i + <u_i, v_u>``. The item biases ``b_i`` are released
        with the item factors: the item update solves ``[u_i, b_i / max_norm]`` against user
        vectors ``[v_u, max_norm]`` (same allocation weights, same noise multipliers, same
        accounting; the user-side norm bound becomes ``sqrt(2) max_norm``, see Privacy). The
        user biases ``c_u`` are solved exactly with the user factors and never released; at
        prediction time a user's bias is solved from their own history. With
        ``unobserved_weight`` the implicit term pushes the whole prediction ``c_u + b_i +
        <u_i, v_u>`` of unrated items toward the centre (its Gram gets the bias coordinate).
        Gradient descent (DPSGD family) uses ``[v_u, 0.1 max_norm]`` instead (see ``fit``).
    bias_prior : bool, default=True
        SSP methods with biases: in each item update, solve every item's bias coordinate with
        a ridge toward an empirical-Bayes prior mean instead of toward 0
        (:mod:`userdp.recommend.core.prior`): a pooled regression of the raw biases on log(released
        count), the prior variance by moments, the pull of an item set by the noise of its own
        statistics. Its inputs are that step's released (noisy) statistics and the released
        counts only, so it is post-processing: the event, the noise and every release are the
        same with and without it. Ignored by the DPSGD family and without biases.
    target_clip : float, "auto" or None, default="auto"
        SSP methods, private: the item update's targets (``r - center - c_u`` with biases,
        ``r - center`` without) are clipped to ``[-target_clip, target_clip]`` and the moment
        stack's sensitivity (and noise) is ``n * target_clip`` instead of ``n * half_width``:
        less noise on every moment for a little clipping bias (same noise multipliers and
        event). ``"auto"``: ``half_width / 2`` with biases (1.49 on a 0.5-5 scale: the
        residuals left by the biases are mostly within it), no clipping without biases
        (implicit 0/1 targets would be cut). On the ``longtail_ratings`` tuning draw (1M
        ratings, seed 0) ``"auto"`` lowered adadpals' validation RMSE from 0.928 to 0.912 at
        epsilon 3.1 and from 0.889 to 0.881 at epsilon 20. None: no clipping beyond the range.
    seed : int or None, default=None
        None draws noise from OS entropy. An integer is for tests and reproducible benchmarks
        only: a model trained with a known seed offers no privacy.
        A seed may be used once per accountant: a second release with a seed its
        ``accountant`` already holds is refused before any data is read (the same seed
        draws the same noise, and differencing the two releases would cancel it).
    progress : bool, default=False
        Show a progress bar over the alternating steps on stderr.

    Attributes
    ----------
    model_ : RecommenderModel
        The release: what ``save`` writes. The attributes below are views of it.
    item_factors_ : ndarray, shape (len(items), dim)
    item_biases_ : ndarray of shape (len(items),) or None
        Released item biases (when trained with biases).
    item_labels_ : pyarrow.Array
        The item set (never the data's items for private methods).
    center_ : float
    item_counts_ : ndarray or None
        Released private item counts (exact counts are never stored for private methods).
    trained_items_ : ndarray of bool
        Items the model was trained on (all, unless ``top_items``).
    budget_ : PrivacyBudget or None
        What the released model spends, from the accountant (the item set's private
        selection included).
    dp_event_ : dp_accounting.DpEvent or None
    plan_ : NoisePlan or None
    fit_seconds_ : float
        Not private and never saved.
    diagnostics_ : dict
        Exact, NON-PRIVATE figures for the curator (ratings outside the item set, fit time);
        never saved, never part of the release.

    Examples
    --------
    >>> from userdp.data.synthetic import lowrank_ratings
    >>> from userdp.privacy import PrivacyAccountant, PrivacyBudget
    >>> data = lowrank_ratings(n_users=200, n_items=30, n_ratings=3000, seed=0)
    >>> accountant = PrivacyAccountant(PrivacyBudget(3.0, 1e-5))
    >>> model = MatrixFactorization(epsilon=2.0, delta=1e-5, items=data.item_labels, dim=4,
    ...                             rating_range=(0.5, 5.0), seed=0)
    >>> model.fit(data, accountant=accountant).budget_.epsilon < 2.0 + 1e-9
    True
    """

    _parameter_constraints: ClassVar[dict[str, dict[str, Any]]] = CONSTRAINTS

    def __init__(
        self,
        *,
        epsilon: float | None = None,
        delta: float | None = None,
        items: Any = None,
        method: str = "adadpals",
        dim: int = 32,
        steps: int = 3,
        rating_range: tuple[float, float] | None = None,
        center: str | float = "private-mean",
        mu: float = 0.25,
        sample_size: int = 50,
        count_sample: int = 50,
        count_fraction: float = 0.15,
        center_fraction: float = 0.02,
        moment_share: float = 0.5,
        max_norm: float = 1.0,
        reg: float = 0.02,
        noise_reg: float = 5.0,
        learning_rate: float = 5.0,
        step_offset: float = 100.0,
        sgd_steps: int = 5,
        clip_norm: float = 1.0,
        unobserved_weight: float = 0.0,
        top_items: float | None = None,
        min_item_count: float | str | None = None,
        biases: bool | str = "auto",
        bias_prior: bool = True,
        target_clip: float | str | None = "auto",
        seed: int | None = None,
        progress: bool = False,
    ) -> None:
        self.epsilon = epsilon
        self.delta = delta
        self.items = items
        self.method = method
        self.dim = dim
        self.steps = steps
        self.rating_range = rating_range
        self.center = center
        self.mu = mu
        self.sample_size = sample_size
        self.count_sample = count_sample
        self.count_fraction = count_fraction
        self.center_fraction = center_fraction
        self.moment_share = moment_share
        self.max_norm = max_norm
        self.reg = reg
        self.noise_reg = noise_reg
        self.learning_rate = learning_rate
        self.step_offset = step_offset
        self.sgd_steps = sgd_steps
        self.clip_norm = clip_norm
        self.unobserved_weight = unobserved_weight
        self.top_items = top_items
        self.min_item_count = min_item_count
        self.biases = biases
        self.bias_prior = bias_prior
        self.target_clip = target_clip
        self.seed = seed
        self.progress = progress

    # -- validation -----------------------------------------------------------------------------
    def _validate(self) -> Any:
        """The declared table, then the rules between keywords; returns the target budget."""
        self._validate_params()
        if self.min_item_count == "auto" and (self._solver != "ssp" or self.method == "als"):
            raise InvalidParameterError(
                "min_item_count='auto' is calibrated for the SSP methods (dpals-uniform, "
                "dpals-tail, adadpals); give a number for the others."
            )
        if self.method == "als":
            given = [k for k in ("epsilon", "delta") if getattr(self, k) is not None]
            if given:
                raise InvalidParameterError(
                    f"method='als' is not private; drop {' and '.join(given)} (or choose a "
                    "private method such as 'adadpals')."
                )
            return None
        return self._check_budget_keywords(private=True)

    @property
    def _biased(self) -> bool:
        if self.biases == "auto":
            return not self.unobserved_weight > 0
        return bool(self.biases)

    @property
    def _solver(self) -> str:
        return "gd" if "sgd" in self.method else "ssp"

    @property
    def _allocation(self) -> str:
        if self.method.startswith("ada"):
            return "adaptive"
        return self.method.rsplit("-", 1)[-1] if self.method != "als" else "none"

    def _spec(self) -> ItemUpdateSpec:
        """The declared hyper-parameters the steps read, resolved once (after validation)."""
        return ItemUpdateSpec(
            method=self.method,
            dim=self.dim,
            allocation=Allocation(self._allocation, self.sample_size, self.mu),
            biased=self._biased,
            bias_prior=self.bias_prior,
            max_norm=self.max_norm,
            reg=self.reg,
            noise_reg=self.noise_reg,
            unobserved_weight=self.unobserved_weight,
            clip_norm=self.clip_norm,
            learning_rate=self.learning_rate,
            step_offset=self.step_offset,
            sgd_steps=self.sgd_steps,
            count_sample=self.count_sample,
            top_items=self.top_items,
            min_item_count=self.min_item_count,
        )

    # -- training -------------------------------------------------------------------------------
    def fit(
        self,
        ratings: Any,
        *,
        accountant: PrivacyAccountant | None = None,
        engine: str = "auto",
    ) -> MatrixFactorization:
        """Train on ``ratings`` (a :class:`~userdp.data.Ratings`, a user/item/rating table, or a
        Spark DataFrame with columns ``user``, ``item``, ``rating``).

        The item set is fixed first (``items``): ratings of other items are dropped (counted
        in ``diagnostics_``) and every shape below depends only on the item set.

        Parameters
        ----------
        ratings : Ratings or table
        accountant : PrivacyAccountant or None, default=None
            A shared accountant the training run is charged to, before any data is read;
            raises :class:`~userdp.exceptions.BudgetExceededError` there (nothing read,
            nothing charged) when it would exceed the accountant's total budget.
        engine : {"auto", "local", "spark"}, default="auto"
            Where the statistics are computed (:mod:`userdp.recommend.engines`): ``"auto"``
            picks ``"spark"`` for a Spark DataFrame and ``"local"`` otherwise, as
            :func:`~userdp.partition.select_partitions` does. The Spark engine
            (:class:`userdp.recommend.engines.spark.SparkRunner`) runs every method; for a given
            seed it releases the same model as the local engine (to float round-off of the
            statistics' sums).

        Privacy
        -------
        Neighbouring datasets differ in all ratings of one user. With the item set fixed
        before any statistic (public, or privately selected and composed into ``dp_event_``),
        and conditioned on the values released before it, each release moves by at most its
        stated l2 sensitivity when a user is added (tested by
        ``tests/property/test_recommend_neighbours.py`` with a user whose items are all new):

        - private counts: ``sqrt(count_sample + 1)`` (at most ``count_sample`` counts move by
          1, and the user count by 1);
        - private mean: 1 per coordinate after scaling, ``sqrt(2)`` in all;
        - item Gram stack (SSP): ``max_norm^2``: the user adds ``w_ij v v^T`` to the items it
          rated, ``sum_i w_ij^2 <= 1``, ``||v|| <= max_norm``. The unobserved term does not
          enter it (its ``alpha G`` is added after the release), and no other user's ``v``
          changes: their solves use only their own rows and the *released* item factors
          (``alpha U^T U`` over the fixed item set, public);
        - item moment stack (SSP): ``max_norm * half_width`` (``|r - center| <= half_width``);
        - with ``biases``: the user vector of the item update is ``[v, beta]`` (``beta =
          max_norm``; ``0.1 max_norm`` for gradient descent), of norm at most ``n = sqrt(2)
          max_norm``, and its target ``r - center - c_u`` is clipped to ``[-half_width,
          half_width]`` (``c_u``: the user's own bias, solved from their own rows and the
          released item factors and biases), so the Gram stack moves by at most ``n^2 = 2
          max_norm^2`` and the moment stack by ``n * half_width``; the noise is scaled by these
          bounds, the noise multipliers and the event are unchanged;
        - gravity Gram ``sum_j v_j v_j^T`` (``unobserved_weight > 0``): ``max_norm^2``
          (``n^2`` with biases: ``sum_j x_j x_j^T`` of the vectors above); a user whose items
          are all outside the set still adds its ``v v^T`` (``v = 0`` then);
        - item gradient (DPSGD family): ``clip_norm`` (user-level clipping of the user's whole
          gradient, bias coordinate included; the unobserved term ``2 alpha U G`` uses the
          released ``G`` and is added after the noise).

        Before the item set was fixed, a user bringing an item nobody else rated changed the
        shape of ``U`` and entered every user's ``alpha U^T U``, so every user's ``v`` moved
        and these bounds failed by up to 4.2x. Noise is calibrated to
        (``epsilon``, ``delta``) by search with the accountant; ``budget_`` is what the
        accountant reports for the whole release (the private selection of the item set
        included).
        """
        started = time.perf_counter()
        budget = self._validate()
        spec = self._spec()  # everything the steps read, resolved once
        self._check_accountant(accountant, "accountant", "MatrixFactorization.fit")
        engine = resolve_engine(ratings, engine, "MatrixFactorization.fit")
        private = budget is not None
        item_set = self._item_set(private)
        # The runner checks its input before anything is charged (no data read yet).
        runner = make_runner(ratings, engine)
        run_spec = self._run_spec(self.dim, self._biased)
        runner.check(run_spec, item_set)
        plan = None
        if private:
            plan = plan_noise(
                budget,
                solver=self._solver,
                steps=self.steps,
                releases_per_step=self.sgd_steps if self._solver == "gd" else 1,
                grouped=True,
                count_fraction=self.count_fraction,
                center_fraction=self._center_fraction(),
                moment_share=self.moment_share,
                gravity_share=0.05 if self.unobserved_weight > 0 else None,
            )
            if accountant is not None:  # refuses before training, a held seed included
                accountant.compose(plan.event(), seed=self.seed, caller="MatrixFactorization.fit")
        noise = NoiseSource(self.seed)
        rng = noise.stream(0x4D46)  # initialisation (data-independent: the item set is fixed)
        prep = runner.prepare(
            run_spec,
            item_set,
            noise,
            count_noise=None if plan is None else plan.counts,
            center_noise=None if plan is None else plan.center,
        )
        U, trained, beta = train(
            spec,
            runner,
            prep,
            plan,
            noise,
            rng,
            solver=self._solver,
            steps=self.steps,
            target_clip=self.target_clip,
            progress=self.progress,
        )
        self._check_finite(U)
        self.plan_ = plan
        event = spent = None
        if private:
            assert plan is not None  # private training is planned
            event, spent = self._spent(plan.event(), prep.item_set, budget.delta)
        self.fit_seconds_ = time.perf_counter() - started
        self.diagnostics_ = diagnostics(prep.dropped, self.fit_seconds_)
        item_biases = None
        if self._biased:
            d = int(self.dim)
            U, item_biases = np.ascontiguousarray(U[:, :d]), beta * U[:, d]
        self.model_ = RecommenderModel(
            method=self.method,
            item_labels=prep.labels,
            item_factors=U,
            item_biases=item_biases,
            center=float(prep.center),
            rating_range=(float(prep.lo), float(prep.hi)),
            item_counts=cast(np.ndarray, prep.counts),  # released counts when private
            trained_items=trained,
            budget=spent,
            dp_event=event,
            item_source=prep.item_set.source,
            params=self._declared(),
        )
        self._publish(self.model_)
        log.info("%s: trained in %.2f s", self.method, self.fit_seconds_)
        return self

    def _check_finite(self, U: np.ndarray) -> None:
        if not np.all(np.isfinite(U)):
            raise DataError(
                f"{self.method} diverged (non-finite item factors); lower learning_rate or raise "
                "step_offset."
            )

    def _publish(self, model: RecommenderModel) -> None:
        """The fitted attributes: views of the released model."""
        self.item_factors_ = model.item_factors
        self.item_biases_ = model.item_biases
        self.item_labels_ = model.item_labels
        self.center_ = model.center
        self.rating_range_ = model.rating_range
        self.item_counts_ = model.item_counts
        self.trained_items_ = model.trained_items
        self.budget_ = model.budget
        self.dp_event_ = model.dp_event

    # -- using the model (see RecommenderBase for predict, recommend, save, ...) ----------------
    def user_factors(self, history: Any, *, reg: float | None = None) -> np.ndarray:
        """See :meth:`RecommenderModel.user_factors`."""
        return self._check_fitted().user_factors(history, reg=reg)

    def __repr__(self) -> str:
        budget = "" if self.epsilon is None else f", epsilon={self.epsilon!r}, delta={self.delta!r}"
        return (
            f"MatrixFactorization(method={self.method!r}, dim={self.dim}, steps={self.steps}"
            f"{budget})"
        )
