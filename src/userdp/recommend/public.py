"""Private learning with public item features: AM-SSP (Krichene et al. 2023b, "Private Learning
with Public Features", arXiv:2310.15454).

The model predicts ``u_k . v_theta(x_j)``: a user embedding (exact, never released, as in
:mod:`userdp.recommend.als`) times an item encoder applied to the item's *public* features.
Only which items a user rated, and how, is private. The item encoder is trained by sufficient
statistics perturbation: for every item the weighted statistics

    A_j = sum_{i in Omega_j} w_i u_i u_i^T,        b_j = sum_{i in Omega_j} w_i y_i u_i

are released with Gaussian noise, and the encoder's gradient
``G = sum_j J_j(theta)^T ((A_j + lambda_j I) v_j(theta) - b_j)`` is post-processing of them.
Noise therefore scales with the number of items times d^2, not with the encoder's number of
parameters, and items absent from a step leave the encoder's parameters for their feature
values untouched (sparse gradients).

- SSP2 (Algorithm 3): one release per alternating step, reused by every inner gradient step.
- SSP1 (Algorithm 2): a fresh release for every inner step (noise scaled for the T releases).
- Mini-batch SSP2 (Algorithm 5): SSP2's statistics, each inner step on a random item batch.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any

import dp_accounting
import numpy as np
from scipy import sparse

from userdp._validation import check_budget, check_choice, check_int, check_real
from userdp.data.ratings import as_ratings
from userdp.exceptions import InvalidParameterError
from userdp.multitask._kernels import segment_offsets, segment_statistics
from userdp.multitask.allocation import adaptive_weights, private_counts, row_keys
from userdp.multitask.ssp import clip_rows, perturb_statistics, project_psd
from userdp.privacy.accountant import PrivacyAccountant
from userdp.privacy.budget import PrivacyBudget
from userdp.privacy.calibrate import calibrate_noise_scale
from userdp.privacy.noise import NoiseSource
from userdp.recommend._base import RecommenderBase
from userdp.recommend.als import _diagnostics, _restrict, centre_all
from userdp.recommend.model import RecommenderModel, solve_users

__all__ = [
    "SSP_VARIANTS",
    "VARIANTS",
    "PublicFeatureRecommender",
    "SSPPlan",
    "clipped_user_gradients",
    "plan_ssp_noise",
    "user_feature_matrix",
    "user_prior_statistics",
]

log = logging.getLogger("userdp.recommend")

SSP_VARIANTS = ("ssp2", "ssp1", "minibatch")
VARIANTS = (*SSP_VARIANTS, "dpsgd")
#: The released model's ``method`` for each variant (the CLI's ``--method`` names).
METHOD_NAMES = {
    "ssp2": "am-ssp",
    "ssp1": "am-ssp1",
    "minibatch": "am-ssp-minibatch",
    "dpsgd": "am-dpsgd",
}


@dataclass(frozen=True)
class SSPPlan:
    """Noise multipliers of an AM-SSP run: counts, centre, and the per-release (A, b) pair.

    ``releases_per_step`` is 1 for SSP2 and mini-batch SSP2 (statistics reused) and the number
    of inner steps for SSP1 (fresh noise each step).
    """

    counts: float
    center: float | None
    gram: float | None
    moment: float | None
    steps: int
    releases_per_step: int
    gradient: float | None = None
    user_counts: float | None = None
    user_prior: float | None = None

    def event(self) -> dp_accounting.DpEvent:
        """The whole run as one composed dp-accounting event."""
        if self.gradient is not None:  # AM-DPSGD: one clipped gradient per release
            pair = dp_accounting.GaussianDpEvent(self.gradient)
        else:
            pair = dp_accounting.ComposedDpEvent(
                [
                    dp_accounting.GaussianDpEvent(self.gram),
                    dp_accounting.GaussianDpEvent(self.moment),
                ]
            )
        events: list[dp_accounting.DpEvent] = [dp_accounting.GaussianDpEvent(self.counts)]
        if self.center is not None:
            events.append(dp_accounting.GaussianDpEvent(self.center))
        events.append(dp_accounting.SelfComposedDpEvent(pair, self.steps * self.releases_per_step))
        if self.user_prior is not None:  # the private user-feature prior: counts once, then
            events.append(dp_accounting.GaussianDpEvent(self.user_counts))  # one table a step
            events.append(
                dp_accounting.SelfComposedDpEvent(
                    dp_accounting.GaussianDpEvent(self.user_prior), self.steps
                )
            )
        return dp_accounting.ComposedDpEvent(events)


def plan_ssp_noise(
    budget: PrivacyBudget,
    *,
    steps: int,
    releases_per_step: int = 1,
    count_fraction: float = 0.15,
    center_fraction: float | None = 0.02,
    moment_share: float = 0.5,
    gradient: bool = False,
    user_fraction: float | None = None,
) -> SSPPlan:
    """Split the budget in precision shares and calibrate by search (as ``plan_noise``).

    With ``gradient=True`` each release is one clipped gradient (AM-DPSGD) instead of an
    (A, b) pair. ``user_fraction`` reserves a share for the private user-feature prior: a
    quarter of it for the feature-value counts (released once), the rest for one prior table
    per outer step.
    """
    steps = check_int(steps, "steps", "plan_ssp_noise", low=1)
    releases_per_step = check_int(releases_per_step, "releases_per_step", "plan_ssp_noise", low=1)

    def share(value: float, name: str) -> float:
        return check_real(
            value, name, "plan_ssp_noise", low=0.0, high=1.0, low_open=True, high_open=True
        )

    cf = share(count_fraction, "count_fraction")
    mf = 0.0 if center_fraction is None else share(center_fraction, "center_fraction")
    ms = share(moment_share, "moment_share")
    uf = 0.0 if user_fraction is None else share(user_fraction, "user_fraction")
    train = 1.0 - cf - mf - uf
    if train <= 0:
        raise InvalidParameterError(
            "count_fraction + center_fraction + user_fraction must be below 1."
        )
    n_rel = steps * releases_per_step

    def make(scale: float) -> SSPPlan:
        return SSPPlan(
            counts=scale / math.sqrt(cf),
            center=None if center_fraction is None else scale / math.sqrt(mf),
            gram=None if gradient else scale * math.sqrt(n_rel / (train * (1.0 - ms))),
            moment=None if gradient else scale * math.sqrt(n_rel / (train * ms)),
            steps=steps,
            releases_per_step=releases_per_step,
            gradient=scale * math.sqrt(n_rel / train) if gradient else None,
            user_counts=None if user_fraction is None else scale / math.sqrt(0.25 * uf),
            user_prior=None if user_fraction is None else scale * math.sqrt(steps / (0.75 * uf)),
        )

    scale = calibrate_noise_scale(lambda s: make(s).event(), budget.epsilon, budget.delta)
    return make(scale)


class _Adam:
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
    """``sum_j J_j^T ((A_j + ridge_j I) v_j - b_j)`` over ``items`` (default: all).

    The gradient of ``sum_j 1/2 v_j^T (A_j + ridge_j I) v_j - b_j^T v_j``, i.e. of the
    weighted squared loss up to a constant when A, b are exact (paper eq. (5)). One forward
    pass and one vector-Jacobian product per item.
    """
    idx = np.arange(gram.shape[0]) if items is None else np.asarray(items)
    v, cache = encoder.forward(params, idx)
    resid = np.einsum("jde,je->jd", gram[idx], v) + ridge[idx, None] * v - moment[idx]
    return encoder.vjp(params, idx, cache, resid)


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


def user_feature_matrix(user_features: Any, n_users: int) -> tuple[sparse.csr_matrix, int]:
    """Stack private user-feature families into ``Phi`` (n_users x values) and count them.

    Each family's rows are scaled to sum to 1 (a multivalent feature is averaged, as the item
    encoder does), so every user's row has ``||phi_k||_2^2 <= F`` for F families: the bound the
    prior's sensitivity rests on. Accepts a :class:`~userdp.data.features.SparseFeatures`, a
    list of them, or one nonnegative sparse matrix (one family).
    """
    families = user_features if isinstance(user_features, list | tuple) else [user_features]
    if not families:
        raise InvalidParameterError("user_features must hold at least one feature family.")
    blocks = []
    for fam in families:
        m = getattr(fam, "matrix", fam)
        if not sparse.issparse(m):
            m = sparse.csr_matrix(np.asarray(m, dtype=np.float64))
        m = sparse.csr_matrix(m, dtype=np.float64)
        if m.shape[0] != n_users:
            raise InvalidParameterError(
                f"A user-feature family has {m.shape[0]} rows but the ratings have {n_users} "
                "users; build the features on ratings.user_labels."
            )
        if m.nnz and (not np.all(np.isfinite(m.data)) or m.data.min() < 0):
            raise InvalidParameterError("User features must be finite and nonnegative.")
        total = np.asarray(m.sum(axis=1)).ravel()
        scale = np.divide(1.0, total, out=np.zeros_like(total), where=total > 0)
        blocks.append(sparse.diags(scale) @ m)
    return sparse.csr_matrix(sparse.hstack(blocks, format="csr")), len(families)


def user_prior_statistics(phi: sparse.csr_matrix, U: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per feature value, the sum of its users' factors and its (fractional) user count.

    ``S = Phi^T U`` and ``c = Phi^T 1``. Adding or removing user k changes S by
    ``phi_k u_k^T`` (Frobenius norm ``||phi_k|| ||u_k|| <= sqrt(F) max_norm`` with clipped
    factors) and c by ``phi_k`` (norm ``<= sqrt(F)``): the l2 sensitivities of the two Gaussian
    releases of the user-feature prior.
    """
    return np.asarray(phi.T @ U), np.asarray(phi.sum(axis=0)).ravel()


class PublicFeatureRecommender(RecommenderBase):
    """Alternating minimisation with an SSP-trained public-feature item encoder (AM-SSP).

    Parameters
    ----------
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
    inner_steps : int, default=10
        Gradient steps on the encoder per outer step. SSP2 reuses one noisy release for all of
        them, so many steps fit its noise: on ml-100k at epsilon 1, 50 steps gave test RMSE
        1.153 and 5 steps 1.081. The default was set on a separate synthetic draw, where 5-50
        steps differed by under 2%.
    learning_rate : float, default=0.05
        Adam step size.
    batch_items : int, default=1024
        Items per inner step of mini-batch SSP2.
    clip_norm : float, default=1.0
        AM-DPSGD: each user's whole gradient is clipped to this norm.
    user_feature_fraction : float, default=0.05
        Share of the budget for the private user-feature prior, when ``fit`` gets
        ``user_features``. The user encoder is then ``u_k = argmin_u sum (u.v_j - y)^2 +
        lambda_k ||u - P^T phi_k||^2``: each user's exact solve is pulled toward the mean factor
        of the users who share their (private) features, a table ``P`` released with noise
        after every user update. It matters most for users with few ratings.
    rating_range, center, mu, count_sample, count_fraction, center_fraction, moment_share,
    max_norm, reg, noise_reg, seed, progress
        As in :class:`~userdp.recommend.MatrixFactorization` (``reg`` scales the item ridge by
        the private counts, lambda_j = reg * n_hat_j, and the user ridge by the user's count).

    Privacy
    -------
    Per release, adding or removing a user changes the stacked ``(A_j)`` by at most
    ``max_norm^2`` and ``(b_j)`` by at most ``max_norm * half_width`` in l2 (every user's
    squared weights sum to at most 1: ``w_bar = 1`` in Theorem 2); the counts and the centre
    as in MatrixFactorization. SSP2 releases once per outer step, SSP1 once per inner step;
    AM-DPSGD releases one gradient per inner step, of l2 sensitivity ``clip_norm``. The
    user-feature prior releases its feature-value counts once (l2 sensitivity ``sqrt(F)``)
    and one table of factor sums per outer step (``sqrt(F) max_norm``); see
    :func:`user_prior_statistics`.
    """

    def __init__(
        self,
        *,
        encoder: Any,
        items: Any = None,
        variant: str = "ssp2",
        steps: int = 3,
        inner_steps: int = 10,
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
        user_feature_fraction: float = 0.05,
        seed: int | None = None,
        progress: bool = False,
    ) -> None:
        self.encoder = encoder
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
        self.user_feature_fraction = user_feature_fraction
        self.seed = seed
        self.progress = progress

    def _validate(self, budget: PrivacyBudget | None) -> None:
        name = "PublicFeatureRecommender"
        check_budget(budget, f"{name}.fit")
        check_choice(self.variant, "variant", name, VARIANTS)
        self._validate_common()
        check_int(self.inner_steps, "inner_steps", name, low=1)
        check_real(self.learning_rate, "learning_rate", name, low=0.0, low_open=True)
        check_int(self.batch_items, "batch_items", name, low=1)
        check_real(
            self.user_feature_fraction, "user_feature_fraction", name, low=0.0, high=1.0,
            low_open=True, high_open=True,
        )  # fmt: skip
        for attr in ("n_items", "dim", "n_params", "init_params", "forward", "vjp"):
            if not hasattr(self.encoder, attr):
                raise InvalidParameterError(
                    f"The encoder must provide {attr!r} (see "
                    "userdp.recommend.encoders.ItemEncoder)."
                )
        if budget is not None and self.rating_range is None:
            raise InvalidParameterError(
                "Private training needs the declared rating range, e.g. rating_range=(0.5, 5.0)."
            )

    def fit(
        self,
        ratings: Any,
        *,
        budget: PrivacyBudget | None = None,
        user_features: Any = None,
        accountant: PrivacyAccountant | None = None,
    ) -> PublicFeatureRecommender:
        """Train; ``budget=None`` trains without privacy (exact statistics), for reference.

        ``user_features`` (private, one row per user code: ``SparseFeatures`` families such as
        :func:`~userdp.data.features.movielens_user_features`) turns on the user-feature prior.
        Ratings of items outside ``items`` are dropped first; with ``accountant`` the training
        event is composed into it before the data is read.
        """
        started = time.perf_counter()
        self._validate(budget)
        full = as_ratings(ratings)
        private = budget is not None
        data, item_set, dropped = _restrict(full, self.items, private, "PublicFeatureRecommender")
        if data.n_items != self.encoder.n_items:
            raise InvalidParameterError(
                f"The encoder describes {self.encoder.n_items} items but the item set has "
                f"{data.n_items}; build the encoder's features on the item set."
            )
        noise = NoiseSource(self.seed)
        rng = noise.stream(0x5353)  # mini-batch sampling
        lo, hi = self.rating_range or (float(data.values.min()), float(data.values.max()))
        values = np.clip(data.values, lo, hi)
        users, items = data.users, data.items
        dpsgd = self.variant == "dpsgd"
        per_step = self.inner_steps if self.variant in ("ssp1", "dpsgd") else 1
        plan = None
        if private:
            plan = plan_ssp_noise(
                budget, steps=self.steps, releases_per_step=per_step,
                count_fraction=self.count_fraction,
                center_fraction=self.center_fraction if self.center == "private-mean" else None,
                moment_share=self.moment_share, gradient=dpsgd,
                user_fraction=None if user_features is None else self.user_feature_fraction,
            )  # fmt: skip
            if accountant is not None:
                accountant.compose(plan.event())
            keys = row_keys(users, items, data.user_labels, data.item_labels, noise.salt)
            counts = private_counts(
                users, items, data.n_items, count_sample=self.count_sample,
                noise_multiplier=plan.counts, noise=noise, keys=keys,
            ).counts  # fmt: skip
            weights = adaptive_weights(users, items, counts, mu=self.mu, beta=1.0)
        else:
            counts = np.bincount(items, minlength=data.n_items).astype(np.float64)
            weights = keys = None
        center = centre_all(
            full, lo, hi, center=self.center, count_sample=self.count_sample,
            noise_multiplier=None if plan is None else plan.center, noise=noise,
        )  # fmt: skip
        y = values - center
        half = max(hi - center, center - lo)
        ridge = self.reg * np.maximum(counts, 1.0)
        if plan is not None and plan.gram is not None:
            # As in MatrixFactorization: a ridge of the Gram noise's spectral size keeps items
            # whose statistics are mostly noise near 0 (the centre).
            ridge = ridge + self.noise_reg * plan.gram * self.max_norm**2 * math.sqrt(
                self.encoder.dim
            )
        user_order, user_offsets = segment_offsets(users, data.n_users)
        item_order, item_offsets = segment_offsets(items, data.n_items)
        user_reg = self.reg * np.maximum(np.diff(user_offsets), 1).astype(np.float64)
        phi, prior, user_counts = None, None, None
        if user_features is not None:
            phi, n_families = user_feature_matrix(user_features, data.n_users)
        params = self.encoder.init_params()
        outer = range(self.steps)
        if self.progress:
            from tqdm.auto import tqdm

            outer = tqdm(outer, desc=f"am-{self.variant}", unit="step", leave=False)
        for _ in outer:
            V_items, _ = self.encoder.forward(params, None)
            gram, moment = segment_statistics(user_offsets, user_order, items, V_items, None, y)
            if prior is not None:  # pull toward the released prior: (G + l I)^-1 (m + l p)
                moment += user_reg[:, None] * (phi @ prior)
            U = solve_users(gram, moment, user_reg)  # user update: exact, never released
            if private:
                U = clip_rows(U, self.max_norm)
            if phi is not None:
                prior, user_counts = self._release_prior(
                    phi, n_families, U, user_counts, plan, noise
                )
            opt = _Adam(params.size, self.learning_rate)
            if dpsgd:
                for _t in range(self.inner_steps):
                    grad = self._dpsgd_gradient(
                        params, U, users, items, y, weights, user_order, user_offsets, ridge,
                        plan, noise,
                    )  # fmt: skip
                    params = opt.step(params, grad)
                continue
            exact_a, exact_b = segment_statistics(item_offsets, item_order, users, U, weights, y)
            stats = None
            for _t in range(self.inner_steps):
                if stats is None or self.variant == "ssp1":
                    stats = self._release(exact_a, exact_b, plan, half, noise, data.item_labels)
                batch = None
                if self.variant == "minibatch":
                    size = min(self.batch_items, data.n_items)
                    batch = np.sort(rng.choice(data.n_items, size, replace=False))
                grad = ssp_gradient(self.encoder, params, stats[0], stats[1], ridge, batch)
                params = opt.step(params, grad)
            del exact_a, exact_b
        factors = np.asarray(self.encoder.forward(params, None)[0], dtype=np.float64)
        event = spent = None
        if private:
            event = plan.event()
            if item_set.dp_event is not None:
                event = dp_accounting.ComposedDpEvent([item_set.dp_event, event])
            spent = PrivacyAccountant().compose(event).spent(budget.delta)
        self.plan_ = plan
        self.fit_seconds_ = time.perf_counter() - started
        self.diagnostics_ = _diagnostics(dropped, self.fit_seconds_)
        self.model_ = RecommenderModel(
            method=METHOD_NAMES[self.variant],
            item_labels=data.item_labels,
            item_factors=factors,
            center=float(center),
            rating_range=(float(lo), float(hi)),
            item_counts=counts if private else None,
            trained_items=np.ones(factors.shape[0], dtype=bool),
            budget=spent,
            dp_event=event,
            item_source=item_set.source,
            params=self._declared(dim=int(self.encoder.dim), encoder=type(self.encoder).__name__),
            encoder_params=np.asarray(params, dtype=np.float64),
            user_prior=prior,
        )
        self.params_ = params
        self.item_factors_ = factors
        self.item_labels_ = data.item_labels
        self.center_ = self.model_.center
        self.rating_range_ = self.model_.rating_range
        self.item_counts_ = self.model_.item_counts
        self.user_prior_ = prior
        self.dp_event_ = event
        self.budget_ = spent
        return self

    def _dpsgd_gradient(
        self, params, U, users, items, y, weights, order, offsets, ridge, plan, noise
    ) -> np.ndarray:
        """One full-batch DP-SGD gradient of the encoder, each user's gradient clipped.

        User k's gradient is ``sum_{i in Omega_k} w_i (u_k . v_j - y_i) J_j^T u_k``: one VJP
        per user (the cost that SSP avoids). The ridge term ``lambda_j ||v_j||^2 / 2`` uses
        released counts and is added after the noise.
        """
        V, _ = self.encoder.forward(params, None)
        w = np.ones(users.size) if weights is None else weights
        resid = w * (np.einsum("nd,nd->n", U[users], V[items]) - y)
        clip = self.clip_norm if plan is not None else None
        total = clipped_user_gradients(self.encoder, params, U, items, resid, order, offsets, clip)
        if plan is not None:
            total = noise.add_gaussian(
                total, plan.gradient * self.clip_norm, statistic="encoder gradient",
                l2=self.clip_norm,
            )  # fmt: skip
        everything = np.arange(self.encoder.n_items)
        return total + self.encoder.vjp(params, everything, None, ridge[:, None] * V)

    def _release_prior(self, phi, n_families, U, counts, plan, noise):
        """Release the user-feature prior table ``P`` (feature values x dim) with noise.

        ``P_f = S_f / max(c_f, 1)``: the noisy mean factor of the users holding value f. The
        counts are released once and reused (the users do not change between steps); rows of
        ``P`` are clipped to ``max_norm`` (post-processing).
        """
        sums, exact_counts = user_prior_statistics(phi, U)
        if plan is not None:
            bound = math.sqrt(n_families)
            sums = noise.add_gaussian(
                sums, plan.user_prior * bound * self.max_norm,
                statistic="user prior sums", l2=bound * self.max_norm,
            )  # fmt: skip
            if counts is None:
                counts = noise.add_gaussian(
                    exact_counts, plan.user_counts * bound,
                    statistic="user prior counts", l2=bound,
                )  # fmt: skip
        elif counts is None:
            counts = exact_counts
        table = sums / np.maximum(counts, 1.0)[:, None]
        return (clip_rows(table, self.max_norm) if plan is not None else table), counts

    def _release(self, gram, moment, plan, half, noise, labels):
        """One noisy release of the item statistics (exact when training without privacy).

        The noisy Grams are projected onto the PSD cone (post-processing): an indefinite
        ``A_j + lambda_j I`` would make the encoder's quadratic objective unbounded below in
        its negative directions, and training then drifts wherever the noise points.
        """
        if plan is None:
            return gram, moment
        gram, moment = perturb_statistics(
            gram, moment, gram_sigma=plan.gram * self.max_norm**2,
            moment_sigma=plan.moment * self.max_norm * half, noise=noise,
            gram_l2=self.max_norm**2, moment_l2=self.max_norm * half, index=labels,
        )  # fmt: skip
        vals, vecs = project_psd(gram)
        return np.einsum("mdk,mk,mek->mde", vecs, vals, vecs), moment

    def user_factors(self, history: Any, user_features: Any = None) -> np.ndarray:
        """Users' embeddings from their own ratings (billboard model); see
        :meth:`RecommenderModel.user_factors` (``user_features`` pull toward the released
        prior; a user without ratings then gets the prior itself)."""
        return self._check_fitted().user_factors(history, user_features=user_features)
