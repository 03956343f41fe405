"""Private matrix factorization by alternating minimisation (Krichene et al. 2023, Algorithm 3).

Items are tasks, users are users. Each step solves the user embeddings exactly (never
released) and the item embeddings privately, by task-weighted SSP (DPALS family) or by
full-batch noisy gradient descent with user-level clipping (DPSGD family). Only the item
embeddings, the private centring value and the private item counts are released, over an item
set fixed before training (a public catalogue or a privately selected vocabulary, see
:mod:`userdp.recommend.items`), as one :class:`~userdp.recommend.RecommenderModel`; a user's
embedding is computed from the released item embeddings and the user's own history (the
billboard model, Remark D.1).

Methods (Table 2 of the paper):

============== ================= ==========================================
method          item update       budget allocation
============== ================= ==========================================
als             exact (no DP)     -
dpals-uniform   SSP               k items per user uniformly at random
dpals-tail      SSP               k items per user with smallest private counts
adadpals        SSP               w_ij ~ n_hat_i^-mu, per-user normalised
dpsgd-uniform   noisy GD          k items per user uniformly at random
dpsgd-tail      noisy GD          k items per user with smallest private counts
adadpsgd        noisy GD          w_ij ~ n_hat_i^-mu, per-user normalised
============== ================= ==========================================
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from dataclasses import dataclass
from typing import Any

import dp_accounting
import numpy as np
from scipy import sparse

from userdp._validation import check_budget, check_choice, check_int, check_real
from userdp.data.ratings import Ratings, as_ratings
from userdp.exceptions import DataError, InvalidParameterError
from userdp.multitask._kernels import segment_offsets, segment_statistics
from userdp.multitask.allocation import (
    adaptive_weights,
    private_counts,
    row_keys,
    sample_per_user,
    tail_sampling,
    uniform_sampling,
)
from userdp.multitask.ssp import clip_rows, perturb_statistics, project_psd, solve_ridge
from userdp.privacy.accountant import PrivacyAccountant
from userdp.privacy.budget import PrivacyBudget
from userdp.privacy.calibrate import calibrate_noise_scale
from userdp.privacy.noise import NoiseSource
from userdp.recommend._base import RecommenderBase
from userdp.recommend.items import ItemSet, as_item_set
from userdp.recommend.model import RecommenderModel, solve_users

__all__ = [
    "AUTO_CUTOFF",
    "METHODS",
    "MatrixFactorization",
    "TrainingPlan",
    "centre",
    "centre_all",
    "mean_statistics",
    "plan_noise",
]

log = logging.getLogger("userdp.recommend")

METHODS = (
    "als",
    "dpals-uniform",
    "dpals-tail",
    "adadpals",
    "dpsgd-uniform",
    "dpsgd-tail",
    "adadpsgd",
)
# min_item_count="auto" keeps items whose private count reaches this many times the moment
# noise's size sigma_b * sqrt(d) / (max_norm * half_width) = z_b * sqrt(d). Picked on a pilot
# synthetic set (seed 0; benchmarks use another draw): best cutoffs there sat at 12-24.
AUTO_CUTOFF = 15.0
GD_INIT_SCALE = 0.1  # initial item-factor norm of the DPSGD family (1 for the others)
_CHUNK = 1 << 18  # rows per chunk in the DPSGD residual pass (16 MiB per gathered block)


@dataclass(frozen=True)
class TrainingPlan:
    """Noise multipliers of every Gaussian release of a private training run.

    Each release has l2 sensitivity 1 after scaling (the mechanisms divide by their own
    sensitivity), so the run is the composition of Gaussians with these noise multipliers.
    """

    counts: float
    center: float | None
    gram: float | None
    moment: float | None
    gradient: float | None
    steps: int
    sgd_steps: int
    gravity: float | None = None

    def event(self) -> dp_accounting.DpEvent:
        """The whole run as one composed dp-accounting event."""
        events: list[dp_accounting.DpEvent] = [dp_accounting.GaussianDpEvent(self.counts)]
        if self.center is not None:
            events.append(dp_accounting.GaussianDpEvent(self.center))
        per_step: list[dp_accounting.DpEvent] = []
        if self.gravity is not None:
            per_step.append(dp_accounting.GaussianDpEvent(self.gravity))
        if self.gram is not None:
            per_step += [
                dp_accounting.GaussianDpEvent(self.gram),
                dp_accounting.GaussianDpEvent(self.moment),
            ]
        if self.gradient is not None:
            per_step.append(
                dp_accounting.SelfComposedDpEvent(
                    dp_accounting.GaussianDpEvent(self.gradient), self.sgd_steps
                )
            )
        events.append(
            dp_accounting.SelfComposedDpEvent(dp_accounting.ComposedDpEvent(per_step), self.steps)
        )
        return dp_accounting.ComposedDpEvent(events)


def plan_noise(
    budget: PrivacyBudget,
    *,
    solver: str,
    steps: int,
    sgd_steps: int = 1,
    count_fraction: float = 0.15,
    center_fraction: float | None = 0.02,
    moment_share: float = 0.5,
    gravity_share: float | None = None,
) -> TrainingPlan:
    """Split a budget over the releases and calibrate the noise by search.

    The budget is split in *precision* (1/z^2, proportional to the RDP budget of a Gaussian):
    ``count_fraction`` to the private counts, ``center_fraction`` to the private mean (None: no
    mean), the rest evenly over the training steps (and within an SSP step, ``moment_share``
    to b, the rest to A; ``gravity_share`` of each step to the all-users Gram of the
    unobserved-item term, when there is one). One scale s is then found by bisection with the
    accountant so the composition meets (epsilon, delta): ``z_k = s * sqrt(releases_k / share_k)``.
    """

    def share(value: float, name: str) -> float:
        return check_real(
            value, name, "plan_noise", low=0.0, high=1.0, low_open=True, high_open=True
        )

    solver = check_choice(solver, "solver", "plan_noise", ["ssp", "gd"])
    steps = check_int(steps, "steps", "plan_noise", low=1)
    sgd_steps = check_int(sgd_steps, "sgd_steps", "plan_noise", low=1)
    cf = share(count_fraction, "count_fraction")
    mf = 0.0 if center_fraction is None else share(center_fraction, "center_fraction")
    ms = share(moment_share, "moment_share")
    gs = 0.0 if gravity_share is None else share(gravity_share, "gravity_share")
    train = 1.0 - cf - mf
    if train <= 0:
        raise InvalidParameterError(
            "count_fraction + center_fraction must leave part of the budget for training; got "
            f"{cf:g} + {mf:g}."
        )

    def make(scale: float) -> TrainingPlan:
        rest = train * (1.0 - gs)
        if solver == "ssp":
            gram = scale * math.sqrt(steps / (rest * (1.0 - ms)))
            moment = scale * math.sqrt(steps / (rest * ms))
            grad = None
        else:
            gram = moment = None
            grad = scale * math.sqrt(steps * sgd_steps / rest)
        return TrainingPlan(
            counts=scale / math.sqrt(cf),
            center=None if center_fraction is None else scale / math.sqrt(mf),
            gram=gram,
            moment=moment,
            gradient=grad,
            steps=steps,
            sgd_steps=sgd_steps,
            gravity=None if gravity_share is None else scale * math.sqrt(steps / (train * gs)),
        )

    scale = calibrate_noise_scale(lambda s: make(s).event(), budget.epsilon, budget.delta)
    return make(scale)


class MatrixFactorization(RecommenderBase):
    """Matrix factorization recommender trained with user-level differential privacy.

    Parameters
    ----------
    items : ItemSet, sequence of item ids, or None
        The item set, fixed before training (see :mod:`userdp.recommend.items`): a public
        catalogue (any sequence of distinct ids, or ``ItemSet.public``) or a privately
        selected vocabulary (``ItemSet.selected(select_partitions(...))``, whose event is
        composed into ``dp_event_``). Ratings of other items are dropped. Required by private
        methods; ``als`` without it trains on the data's items.
    method : str, default="adadpals"
        One of :data:`METHODS` (see the module docstring).
    dim : int, default=32
        Embedding dimension d.
    steps : int, default=3
        Alternating steps T (Algorithm 3); each private step is charged.
    rating_range : (float, float) or None
        Declared [low, high] of ratings; ratings are clipped to it. Required by private methods
        (it is part of the sensitivity; never inferred from the data).
    center : {"private-mean", "midpoint"} or float, default="private-mean"
        What to subtract before factorizing. ``"private-mean"`` releases a mean rating with
        ``center_fraction`` of the budget: each user contributes at most ``count_sample``
        ratings (sum sensitivity ``count_sample * half_width``, count sensitivity
        ``count_sample``), so heavy users are under-weighted and the estimate leans toward light
        users' ratings (3.58 vs 3.53 on ml-100k). ``"midpoint"`` is free.
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
        new item entering ``U`` moved every user's solve (issue 18; see ``fit``'s Privacy).
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
    seed : int or None, default=None
        None draws noise from OS entropy. An integer is for tests and reproducible benchmarks
        only: a model trained with a known seed offers no privacy.
    progress : bool, default=False
        Show a progress bar over the alternating steps on stderr.

    Attributes
    ----------
    model_ : RecommenderModel
        The release: what ``save`` writes. The attributes below are views of it.
    item_factors_ : ndarray, shape (len(items), dim)
    item_labels_ : pyarrow.Array
        The item set (never the data's items for private methods).
    center_ : float
    item_counts_ : ndarray or None
        Released private item counts (exact counts are never stored for private methods).
    trained_items_ : ndarray of bool
        Items the model was trained on (all, unless ``top_items``).
    budget_ : PrivacyBudget or None
        What the released model spends, from the accountant.
    dp_event_ : dp_accounting.DpEvent or None
    plan_ : TrainingPlan or None
    fit_seconds_ : float
        Not private and never saved.
    diagnostics_ : dict
        Exact, NON-PRIVATE figures for the curator (ratings outside the item set, fit time);
        never saved, never part of the release.
    """

    def __init__(
        self,
        *,
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
        seed: int | None = None,
        progress: bool = False,
    ) -> None:
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
        self.seed = seed
        self.progress = progress

    # -- validation -----------------------------------------------------------------------------
    def _validate(self, budget: PrivacyBudget | None) -> None:
        name = "MatrixFactorization"
        check_budget(budget, f"{name}.fit")
        check_choice(self.method, "method", name, METHODS)
        self._validate_common()
        check_int(self.dim, "dim", name, low=1)
        check_int(self.sample_size, "sample_size", name, low=1)
        check_real(self.learning_rate, "learning_rate", name, low=0.0, low_open=True)
        check_real(self.step_offset, "step_offset", name, low=0.0, low_open=True)
        check_int(self.sgd_steps, "sgd_steps", name, low=1)
        check_real(self.unobserved_weight, "unobserved_weight", name, low=0.0)
        if self.top_items is not None:
            check_real(self.top_items, "top_items", name, low=0.0, high=1.0, low_open=True)
        if isinstance(self.min_item_count, str):
            check_choice(self.min_item_count, "min_item_count", name, ["auto"])
            if self._solver != "ssp" or self.method == "als":
                raise InvalidParameterError(
                    "min_item_count='auto' is calibrated for the SSP methods (dpals-uniform, "
                    "dpals-tail, adadpals); give a number for the others."
                )
        elif self.min_item_count is not None:
            check_real(self.min_item_count, "min_item_count", name)
        if self.method == "als":
            if budget is not None:
                raise InvalidParameterError(
                    "method='als' is not private; call fit without a budget (or choose a private "
                    "method such as 'adadpals')."
                )
            return
        if budget is None:
            raise InvalidParameterError(
                f"method={self.method!r} is private: pass budget=PrivacyBudget(epsilon, delta)."
            )
        if budget.delta <= 0:
            raise InvalidParameterError("Gaussian mechanisms need delta > 0 in the budget.")
        if self.rating_range is None:
            raise InvalidParameterError(
                "Private training needs the declared rating range, e.g. rating_range=(0.5, 5.0): "
                "it bounds every user's influence and must not be read from the data."
            )

    @property
    def _solver(self) -> str:
        return "gd" if "sgd" in self.method else "ssp"

    @property
    def _allocation(self) -> str:
        if self.method.startswith("ada"):
            return "adaptive"
        return self.method.rsplit("-", 1)[-1] if self.method != "als" else "none"

    # -- training -------------------------------------------------------------------------------
    def fit(
        self,
        ratings: Any,
        *,
        budget: PrivacyBudget | None = None,
        accountant: PrivacyAccountant | None = None,
    ) -> MatrixFactorization:
        """Train on ``ratings`` (a :class:`~userdp.data.Ratings` or a user/item/rating table).

        The item set is fixed first (``items``): ratings of other items are dropped (counted
        in ``diagnostics_``) and every shape below depends only on the item set.

        Privacy
        -------
        Neighbouring datasets differ in all ratings of one user. With the item set fixed
        before any statistic (public, or privately selected and composed into ``dp_event_``),
        and conditioned on the values released before it, each release moves by at most its
        stated l2 sensitivity when a user is added (re-derived for issue 18, tested by
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
        - gravity Gram ``sum_j v_j v_j^T`` (``unobserved_weight > 0``): ``max_norm^2``; a user
          whose items are all outside the set still adds its ``v v^T`` (``v = 0`` then);
        - item gradient (DPSGD family): ``clip_norm`` (user-level clipping; the unobserved
          term ``2 alpha U G`` uses the released ``G`` and is added after the noise).

        Before the item set was fixed, a user bringing an item nobody else rated changed the
        shape of ``U`` and entered every user's ``alpha U^T U``, so every user's ``v`` moved
        and these bounds failed by up to 4.2x (issue 18). Noise is calibrated to ``budget``
        by search with the accountant; ``budget_`` is what the accountant reports for the
        whole release (the private selection of the item set included). With ``accountant``
        the training event is composed into it before any data is read (refused there when
        it would exceed the accountant's budget).
        """
        started = time.perf_counter()
        self._validate(budget)
        private = self.method != "als"
        plan = None
        if private:
            plan = plan_noise(
                budget,
                solver=self._solver,
                steps=self.steps,
                sgd_steps=self.sgd_steps,
                count_fraction=self.count_fraction,
                center_fraction=self.center_fraction if self.center == "private-mean" else None,
                moment_share=self.moment_share,
                gravity_share=0.05 if self.unobserved_weight > 0 else None,
            )
            if accountant is not None:
                accountant.compose(plan.event())
        full = as_ratings(ratings)
        data, item_set, dropped = _restrict(full, self.items, private, "MatrixFactorization")
        noise = NoiseSource(self.seed)
        rng = noise.stream(0x4D46)  # initialisation (data-independent: the item set is fixed)
        d = int(self.dim)
        lo, hi = (
            self.rating_range
            if self.rating_range is not None
            else (float(data.values.min()), float(data.values.max()))
        )
        values = np.clip(data.values, lo, hi)
        users, items = data.users, data.items
        n_users, n_items = data.n_users, data.n_items
        labels = data.item_labels
        # Per-row random keys from (user label, item label): a user's random choices depend
        # only on that user's rows.
        keys = row_keys(users, items, data.user_labels, labels, noise.salt) if private else None
        if private:
            counts = private_counts(
                users,
                items,
                n_items,
                count_sample=self.count_sample,
                noise_multiplier=plan.counts,
                noise=noise,
                keys=keys,
            )
            item_counts = counts.counts
            freq = np.maximum(item_counts, 0.0)
        else:
            item_counts = None
            freq = np.bincount(items, minlength=n_items).astype(np.float64)
        # Centre on all ratings, those outside the item set too: items left untrained or
        # unknown predict it.
        center = centre_all(
            full, lo, hi, center=self.center, count_sample=self.count_sample,
            noise_multiplier=None if plan is None else plan.center, noise=noise,
        )  # fmt: skip
        trained = np.ones(n_items, dtype=bool)
        score = item_counts if private else freq  # released (or, for als, exact) counts
        if self.top_items is not None:
            # A count of the item set's size (public or released), ranked by released counts;
            # ties by code.
            keep = max(1, math.ceil(self.top_items * n_items))
            top = np.zeros(n_items, dtype=bool)
            top[np.argsort(-score, kind="stable")[:keep]] = True
            trained &= top
        if self.min_item_count is not None:
            cutoff = self.min_item_count
            if cutoff == "auto":
                cutoff = AUTO_CUTOFF * plan.moment * math.sqrt(d)
            trained &= score >= float(cutoff)
            log.info("%s: training %d of %d items (count >= %.1f)", self.method,
                     int(trained.sum()), n_items, float(cutoff))  # fmt: skip
        if not trained.all():
            rows = trained[items]
            users, items, values = users[rows], items[rows], values[rows]
            keys = None if keys is None else keys[rows]
            if not trained.any():
                # Nothing clears the cutoff (decided from released counts only): every item
                # predicts the centre. A legitimate private answer, not an error.
                warnings.warn(
                    f"{self.method}: no item reaches min_item_count/top_items at this budget; "
                    "all item factors are 0 (predictions are the centre).",
                    UserWarning,
                    stacklevel=2,
                )
        y = values - center
        half = max(hi - center, center - lo)
        weights = self._weights(users, items, item_counts, noise, keys) if private else None

        # Orders for the two solves, computed once.
        user_order, user_offsets = segment_offsets(users, n_users)
        item_order, item_offsets = segment_offsets(items, n_items)
        user_reg = self.reg * np.maximum(np.diff(user_offsets), 1).astype(np.float64)
        # Algorithm 3's U^(0), data-independent. Gradient descent starts small: items its noisy
        # steps barely move then predict the centre instead of the random start (the SSP
        # update replaces U at once and needs user factors of norm ~max_norm from step 1).
        scale = GD_INIT_SCALE if private and self._solver == "gd" else 1.0
        U = rng.normal(0.0, scale / math.sqrt(d), (n_items, d))
        gd = None
        if private and self._solver == "gd":
            gd = _GradientOperator(
                users, items, y, weights, item_order, item_offsets, n_items, n_users
            )
        steps = range(self.steps)
        if self.progress:
            from tqdm.auto import tqdm

            steps = tqdm(steps, desc=f"{self.method} d={d}", unit="step", leave=False)
        alpha = float(self.unobserved_weight)
        U[~trained] = 0.0
        for _ in steps:
            # Line 4: exact user solve, V = argmin_V L(U, V); never released.
            gram, moment = segment_statistics(user_offsets, user_order, items, U, None, y)
            if alpha:
                gram += alpha * (U.T @ U)  # U is released, over the fixed item set: public
            V = solve_users(gram, moment, user_reg)
            del gram, moment
            if private:
                V = clip_rows(V, self.max_norm)
            gravity = self._gravity(V, plan, noise) if alpha else None
            # Line 5: item update.
            if not private:
                gram, moment = segment_statistics(item_offsets, item_order, users, V, None, y)
                if alpha:
                    gram += alpha * gravity
                U = solve_users(gram, moment, self.reg * np.maximum(freq, 1.0))
            elif self._solver == "ssp":
                U = self._ssp_update(
                    V, users, y, weights, item_order, item_offsets, freq, half, plan, noise,
                    gravity, labels,
                )  # fmt: skip
            else:
                U = self._gd_update(U, V, gd, freq, plan, noise, gravity, labels)
            U[~trained] = 0.0
        if not np.all(np.isfinite(U)):
            raise DataError(
                f"{self.method} diverged (non-finite item factors); lower learning_rate or raise "
                "step_offset."
            )
        self.plan_ = plan
        event = plan.event() if private else None
        spent = None
        if private:
            acc = PrivacyAccountant()
            if item_set.dp_event is not None:
                event = dp_accounting.ComposedDpEvent([item_set.dp_event, event])
            spent = acc.compose(event).spent(gaussian_delta=budget.delta)
        self.fit_seconds_ = time.perf_counter() - started
        self.diagnostics_ = _diagnostics(dropped, self.fit_seconds_)
        self.model_ = RecommenderModel(
            method=self.method,
            item_labels=labels,
            item_factors=U,
            center=float(center),
            rating_range=(float(lo), float(hi)),
            item_counts=item_counts,
            trained_items=trained,
            budget=spent,
            dp_event=event,
            item_source=item_set.source,
            params=self._declared(),
        )
        self._publish(self.model_)
        log.info("%s: trained in %.2f s", self.method, self.fit_seconds_)
        return self

    def _publish(self, model: RecommenderModel) -> None:
        """The fitted attributes: views of the released model."""
        self.item_factors_ = model.item_factors
        self.item_labels_ = model.item_labels
        self.center_ = model.center
        self.rating_range_ = model.rating_range
        self.item_counts_ = model.item_counts
        self.trained_items_ = model.trained_items
        self.budget_ = model.budget
        self.dp_event_ = model.dp_event

    def _weights(self, users, items, item_counts, noise, keys) -> np.ndarray:
        """Per-rating weights with every user's squared weights summing to at most 1."""
        rule = self._allocation
        if rule == "uniform":
            return uniform_sampling(users, self.sample_size, noise, beta=1.0, keys=keys)
        if rule == "tail":
            return tail_sampling(
                users, items, item_counts, self.sample_size, noise, beta=1.0, keys=keys
            )
        return adaptive_weights(users, items, item_counts, mu=self.mu, beta=1.0)

    def _gravity(self, V, plan, noise) -> np.ndarray:
        """``sum_j v_j v_j^T`` over all users; released with noise when training privately.

        Adding a user adds ``v v^T`` with ``||v|| <= max_norm``: Frobenius sensitivity
        ``max_norm^2`` (symmetric noise on the upper triangle, then the PSD projection). It
        holds for any added user: the other users' ``v`` depend on their own rows and the
        released item factors over the fixed item set only.
        """
        g = V.T @ V
        if plan is None:
            return g
        g2 = self.max_norm**2
        g, _ = perturb_statistics(
            g[None], np.zeros((1, 0)), gram_sigma=plan.gravity * g2, moment_sigma=0.0,
            noise=noise, gram_l2=g2, gram_statistic="gravity gram",
        )  # fmt: skip
        vals, vecs = np.linalg.eigh(g[0])
        return (vecs * np.maximum(vals, 0.0)) @ vecs.T

    def _ssp_update(
        self, V, users, y, weights, order, offsets, freq, half, plan, noise, gravity, labels
    ):
        """Item solve by task-weighted SSP (Algorithm 1) with PSD projection."""
        gram, moment = segment_statistics(offsets, order, users, V, weights, y)
        g2 = self.max_norm**2
        sigma_a = plan.gram * g2  # sensitivity max_norm^2 (sum of squared weights <= 1)
        sigma_b = plan.moment * self.max_norm * half
        gram, moment = perturb_statistics(
            gram, moment, gram_sigma=sigma_a, moment_sigma=sigma_b, noise=noise,
            gram_l2=g2, moment_l2=self.max_norm * half, index=labels,
        )  # fmt: skip
        noise_ridge = self.noise_reg * sigma_a * math.sqrt(self.dim)
        ridge = self.reg * np.maximum(freq, 1.0) * g2 + noise_ridge
        if gravity is not None:
            # Released and PSD: add it after the per-item projection so it is not clipped.
            vals, vecs = project_psd(gram)
            gram = np.einsum("mdk,mk,mek->mde", vecs, vals, vecs) + self.unobserved_weight * gravity
        return solve_ridge(gram, moment, ridge)

    def _gd_update(self, U, V, gd, freq, plan, noise, gravity, labels):
        """``sgd_steps`` full-batch noisy gradient steps on the items, user-level clipping."""
        sd = plan.gradient * self.clip_norm
        # Ridge as in the SSP update: frequency-scaled plus a multiple of the noise's size, so
        # a tail item's iterate stays near 0 instead of random-walking with the noise.
        lam = self.reg * freq + self.noise_reg * sd * math.sqrt(self.dim) / self.learning_rate
        curvature = self.step_offset + freq + lam
        if gravity is not None:  # the implicit term adds 2 alpha G to every item's Hessian
            curvature = curvature + 2.0 * self.unobserved_weight * np.linalg.eigvalsh(gravity)[-1]
        eta = (self.learning_rate / curvature)[:, None]
        lam = lam[:, None]
        for _ in range(self.sgd_steps):
            grad = noise.add_gaussian(
                gd.gradient(U, V, self.clip_norm), sd, statistic="item gradient",
                l2=self.clip_norm, index=labels,
            )  # fmt: skip
            if gravity is not None:
                grad += 2.0 * self.unobserved_weight * (U @ gravity)
            U = U - eta * (grad + lam * U)
        return U

    # -- using the model (see RecommenderBase for predict, recommend, save, ...) ----------------
    def user_factors(self, history: Any, *, reg: float | None = None) -> np.ndarray:
        """See :meth:`RecommenderModel.user_factors`."""
        return self._check_fitted().user_factors(history, reg=reg)

    def __repr__(self) -> str:
        return f"MatrixFactorization(method={self.method!r}, dim={self.dim}, steps={self.steps})"


def centre(
    values: np.ndarray,
    users: np.ndarray,
    lo: float,
    hi: float,
    *,
    center: str | float,
    count_sample: int,
    noise_multiplier: float | None,
    noise: NoiseSource,
    keys: np.ndarray | None = None,
) -> float:
    """The value ratings are centred on: a number, the range's midpoint, or a private mean.

    Without ``noise_multiplier`` (non-private training) ``"private-mean"`` is the exact mean.
    The private mean takes at most ``count_sample`` ratings per user: ``(sum / (k * hw),
    count / k)`` has l2 sensitivity sqrt(2) under adding or removing a user (hw: half the
    range's width, ratings shifted by its midpoint), released with noise sd ``z * sqrt(2)``
    per coordinate, a ``GaussianDpEvent(z)``.
    """
    if not isinstance(center, str):
        return float(np.clip(center, lo, hi))
    mid = 0.5 * (lo + hi)
    if noise_multiplier is None:
        return float(values.mean()) if center == "private-mean" and values.size else mid
    if center == "midpoint":
        return mid
    keep = sample_per_user(users, count_sample, noise, keys=keys)
    sd = noise_multiplier * math.sqrt(2.0)
    total, count = noise.add_gaussian(
        mean_statistics(values[keep], lo, hi, count_sample), sd,
        statistic="private mean (sum, count)", l2=math.sqrt(2.0),
    )  # fmt: skip
    if count <= 0:
        return mid
    return float(np.clip(mid + total * 0.5 * (hi - lo) / count, lo, hi))


def centre_all(
    ratings: Ratings,
    lo: float,
    hi: float,
    *,
    center: str | float,
    count_sample: int,
    noise_multiplier: float | None,
    noise: NoiseSource,
) -> float:
    """:func:`centre` over all of ``ratings``, items outside the model's item set included.

    The centre is one number: it names no item, and each user still adds at most
    ``count_sample`` ratings, so its sensitivity is as in :func:`centre`; using every rating
    keeps it accurate when the item set is small (a private selection on few users). Each
    user's sample is keyed by their own (user, item) labels.
    """
    keys = None
    if noise_multiplier is not None and center == "private-mean":
        keys = row_keys(
            ratings.users, ratings.items, ratings.user_labels, ratings.item_labels, noise.salt
        )
    return centre(
        np.clip(ratings.values, lo, hi), ratings.users, lo, hi, center=center,
        count_sample=count_sample, noise_multiplier=noise_multiplier, noise=noise, keys=keys,
    )  # fmt: skip


def mean_statistics(kept: np.ndarray, lo: float, hi: float, count_sample: int) -> np.ndarray:
    """The private mean's exact statistic ``(sum (r - mid) / (k hw), count / k)``.

    ``kept`` are ratings in [lo, hi], at most ``k = count_sample`` per user. One user adds at
    most k ratings with ``|r - mid| <= hw``, so each coordinate moves by at most 1 and the
    vector by at most sqrt(2) in l2 (tested by adding random users).
    """
    mid, hw = 0.5 * (lo + hi), 0.5 * (hi - lo)
    return np.array([np.sum(kept - mid) / (count_sample * hw), kept.size / count_sample])


def _restrict(
    data: Ratings, items: Any, private: bool, caller: str
) -> tuple[Ratings, ItemSet, int]:
    """The ratings on the fixed item set, the item set, and the number of ratings dropped.

    Private training needs an item set independent of any single user; without one, only
    non-private training may fall back on the data's own items (``source="data"``).
    """
    if items is None:
        if private:
            raise InvalidParameterError(
                f"Private training needs an item set fixed before training: pass {caller}("
                "items=...) a public catalogue of item ids, or ItemSet.selected(result) of "
                "userdp.select_partitions on the (user, item) pairs. The data's own item ids "
                "would reveal every user's rare items (issue 17)."
            )
        return data, ItemSet(data.item_labels, "data"), 0
    item_set = as_item_set(items)
    if len(item_set) == 0:
        raise InvalidParameterError(f"The item set of {caller} is empty; nothing to train.")
    restricted, dropped = data.restrict_items(item_set.labels)
    return restricted, item_set, dropped


def _diagnostics(dropped: int, seconds: float) -> dict[str, Any]:
    """Exact, NON-PRIVATE figures for the curator; never saved, never part of the release."""
    return {
        "non_private": True,
        "ratings_outside_item_set": int(dropped),
        "fit_seconds": float(seconds),
    }


class _GradientOperator:
    """Item gradients of the weighted squared loss with user-level clipping (DPSGD family).

    ``g_i = sum_j c_j w_ij 2 (<u_i, v_j> - y_ij) v_j`` where ``c_j = min(1, C / ||G_j||)`` and
    ``||G_j||^2 = sum_i (w_ij 2 e_ij)^2 ||v_j||^2`` is the norm of user j's whole stacked
    gradient (its rows touch distinct items, so the blocks are orthogonal). Adding or removing
    a user changes the stacked gradient by at most C.
    """

    def __init__(self, users, items, y, weights, order, offsets, n_items, n_users) -> None:
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
