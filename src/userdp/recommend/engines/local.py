"""Runners: where the data-dependent statistics of :class:`~userdp.recommend.MatrixFactorization`
are computed. The training algorithm (Krichene et al. 2023, Algorithm 3) is written once in
``MatrixFactorization.fit`` over a runner; noise, thresholds and accounting run there, on the
driver, from the runner's exact (never released) statistics:

========================== ================================================================
runner call                what it computes (exact, noise-free)
========================== ================================================================
``check``                  refuse what the runner cannot do, before the budget is charged
``prepare``                the preamble: ratings on the fixed item set, the private counts'
                           and the private centre's statistics (released by the caller's
                           noise source, in the local order)
``restrict(trained)``      drop the rows of items not trained (post-processing of counts)
``allocate``               the allocation weights w_ij (Table 2: uniform, tail, adaptive);
                           called before the first step, private or not
``solve_users``            Algorithm 3 line 4: every user's exact solve against the released
                           item factors; the user vectors ``x_j`` and targets ``t_ij`` of the
                           item update stay in the runner (never released)
``gravity``                ``sum_j x_j x_j^T`` over all users (the implicit term's Gram)
``item_statistics``        ``A_i = sum_j w_ij x_j x_j^T``, ``b_i = sum_j w_ij t_ij x_j``
========================== ================================================================

:class:`LocalRunner` computes them with NumPy on a :class:`~userdp.data.Ratings`;
:class:`userdp.recommend.engines.spark.SparkRunner` with a Spark DataFrame (executors per bucket of
users). Both return arrays over the fixed item set only, so every shape is public.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from userdp.exceptions import InvalidParameterError
from userdp.multitask.kernels import segment_offsets, segment_statistics
from userdp.multitask.ssp import clip_rows
from userdp.privacy.noise import NoiseSource
from userdp.recommend.core.base import prepare_ratings
from userdp.recommend.core.items import ItemSet
from userdp.recommend.core.model import solve_users
from userdp.recommend.core.spec import Allocation, ItemUpdateSpec, RunSpec
from userdp.recommend.core.steps import GradientOperator, gd_update, user_weights

__all__ = [
    "LocalRunner",
    "Preamble",
    "UserSolve",
    "spark_supported",
]

#: The ``engine`` choices of the recommenders' ``fit``.


@dataclass(frozen=True)
class Preamble:
    """What the preamble fixed: the item set, the rating range and the released values.

    ``counts`` are the released private counts (None when not private), ``exact_counts`` the
    exact ones of non-private training (None when private), ``dropped`` the exact number of
    ratings outside the item set (diagnostics only, never released).
    """

    item_set: ItemSet
    labels: pa.Array
    n_items: int
    dropped: int
    lo: float
    hi: float
    counts: np.ndarray | None
    exact_counts: np.ndarray | None
    center: float


@dataclass(frozen=True)
class UserSolve:
    """How Algorithm 3 line 4 runs this step (the same for every runner).

    ``biased``: users solve ``[v_j, c_j]`` against ``[u_i, 1]`` and targets ``y - beta u_i[d]``;
    the item side then uses ``x_j = [clip(v_j), beta]`` and targets ``clip(y - c_j, +-half)``.
    ``alpha``: weight of the implicit term (adds ``alpha Z^T Z``, public: released factors).
    ``clip``: ``max_norm`` when private (user vectors clipped), else None.
    ``clip_target``: without biases, the item side's targets are ``clip(y, +-half)`` (AM-SSP's
    ``rating_clip``, Krichene et al. 2023b); MatrixFactorization's are ``y`` (already within
    ``half`` of the centre).
    """

    d: int
    biased: bool
    beta: float
    alpha: float
    clip: float | None
    half: float
    clip_target: bool = False


class LocalRunner:
    """The NumPy runner over an in-memory table (everything on one machine).

    Parameters
    ----------
    ratings : Ratings or table
        Anything :func:`~userdp.data.as_ratings` reads.
    kernel : callable, default=segment_statistics
        The per-segment statistics kernel of the solves and the item statistics (the caller's
        module-level name, so the statistics the caller's tests observe are these).
    """

    def __init__(self, ratings: Any, kernel: Any = segment_statistics) -> None:
        self.ratings = ratings
        self.kernel = kernel

    def check(self, spec: RunSpec, item_set: ItemSet | None) -> None:
        """Refuse what this runner cannot train, before anything is charged (nothing here)."""

    def prepare(
        self,
        spec: RunSpec,
        item_set: ItemSet | None,
        noise: NoiseSource,
        *,
        count_noise: float | None,
        center_noise: float | None,
    ) -> Preamble:
        """The shared preamble (:func:`~userdp.recommend.core.base.prepare_ratings`), noise draws
        in its order."""
        prep = prepare_ratings(
            spec,
            self.ratings,
            item_set,
            noise,
            count_noise=count_noise,
            center_noise=center_noise,
        )
        data = prep.data
        self.users, self.items, self.keys = data.users, data.items, prep.keys
        self.n_users, self.n_items = data.n_users, data.n_items
        self.y = prep.values - prep.center
        return Preamble(
            prep.item_set,
            data.item_labels,
            data.n_items,
            prep.dropped,
            prep.lo,
            prep.hi,
            prep.counts,
            prep.exact_counts,
            prep.center,
        )

    def restrict(self, trained: np.ndarray) -> None:
        """Keep only the rows of trained items; fix the solve orders."""
        if not trained.all():
            rows = trained[self.items]
            self.users, self.items, self.y = self.users[rows], self.items[rows], self.y[rows]
            self.keys = None if self.keys is None else self.keys[rows]
        self.weights: np.ndarray | None = None
        self.user_order, self.user_offsets = segment_offsets(self.users, self.n_users)
        self.item_order, self.item_offsets = segment_offsets(self.items, self.n_items)
        self.target = self.y
        self._gd: GradientOperator | None = None

    def allocate(self, rule: Allocation, counts: np.ndarray | None, noise: NoiseSource) -> None:
        """Per-rating weights with every user's squared weights summing to at most 1 (from
        the released ``counts``; None: not private, weight 1) by ``rule`` (Table 2)."""
        if counts is not None:
            self.weights = user_weights(rule, self.users, self.items, counts, noise, self.keys)

    @classmethod
    def from_codes(
        cls,
        users: np.ndarray,
        items: np.ndarray,
        y: np.ndarray,
        weights: np.ndarray | None,
        n_users: int,
        n_items: int,
    ) -> LocalRunner:
        """A runner over coded rows already on the item set (one Spark bucket of users)."""
        self = cls(None)
        self.users, self.items, self.y, self.keys = users, items, y, None
        self.n_users, self.n_items = n_users, n_items
        self.restrict(np.ones(n_items, dtype=bool))
        self.weights = weights
        return self

    def solve_users(
        self, U: np.ndarray, how: UserSolve, reg: float, *, items_gram: np.ndarray | None = None
    ) -> None:
        """Algorithm 3 line 4: ``V = argmin_V L(U, V)``, exact, never released.

        ``items_gram``: ``Z^T Z`` of the implicit term over ALL items, when ``U`` holds only
        some of them (a Spark bucket); None computes it from ``U``.
        """
        d, n_items, users, items, y = how.d, self.n_items, self.users, self.items, self.y
        user_reg = reg * np.maximum(np.diff(self.user_offsets), 1).astype(np.float64)
        offsets, order = self.user_offsets, self.user_order
        if how.biased:
            # [v_j, c_j] against items [u_i, 1] and targets y - b_i (released b_i).
            Z = np.column_stack([U[:, :d], np.ones(n_items)])
            t = y - how.beta * U[items, d]
            gram, moment = self.kernel(offsets, order, items, Z, None, t)
        else:
            Z = U
            gram, moment = self.kernel(offsets, order, items, U, None, y)
        if how.alpha:
            # U is released, over the fixed item set: public
            gram += how.alpha * (Z.T @ Z if items_gram is None else items_gram)
        V = solve_users(gram, moment, user_reg)
        del gram, moment
        if how.biased:
            # Item side: user vectors [v_j, beta] (norm <= sqrt(2) max_norm) against the
            # targets y - c_j clipped to the half width, so the stated bounds hold.
            V, user_bias = V[:, :d], V[:, d]
            if how.clip is not None:
                V = clip_rows(V, how.clip)
            V = np.column_stack([V, np.full(self.n_users, how.beta)])
            target = y - user_bias[users]
            if how.clip is not None:
                target = np.clip(target, -how.half, how.half)
            self.target = target
            if self._gd is not None:
                self._gd.y = target
        else:
            if how.clip is not None:
                V = clip_rows(V, how.clip)
            if how.clip_target:
                self.target = np.clip(y, -how.half, how.half)
        self.V = V

    def gravity(self) -> np.ndarray:
        """``sum_j x_j x_j^T`` over all users (exact; the caller releases it)."""
        return self.V.T @ self.V

    def item_statistics(self, weighted: bool) -> tuple[np.ndarray, np.ndarray]:
        """Every item's ``(A_i, b_i)`` with the allocation weights (or weight 1)."""
        w = self.weights if weighted else None
        return self.kernel(self.item_offsets, self.item_order, self.users, self.V, w, self.target)

    def close(self) -> None:
        """Nothing to release (the Spark runner unpersists its cached frames)."""

    def gd_update(
        self,
        model: ItemUpdateSpec,
        U: np.ndarray,
        freq: np.ndarray,
        plan: Any,
        noise: NoiseSource,
        gravity: np.ndarray | None,
        labels: Any,
    ) -> np.ndarray:
        """The DPSGD family's item update (:func:`~userdp.recommend.core.steps.gd_update`)."""
        if self._gd is None:
            assert self.weights is not None  # DPSGD trains privately: weights are allocated
            self._gd = GradientOperator(
                self.users,
                self.items,
                self.target,
                self.weights,
                self.item_order,
                self.item_offsets,
                self.n_items,
                self.n_users,
            )
        return gd_update(model, U, self.V, self._gd, freq, plan, noise, gravity, labels)


def spark_supported(variant: str, loss: Any, items: Any, user_features: Any, caller: str) -> None:
    """Refuse what :class:`~userdp.recommend.PublicFeatureRecommender` cannot train on the
    Spark engine (before anything is charged or read): the squared loss's SSP variants run
    there (ssp2, ssp1, minibatch, with or without biases); AM-DPSGD (one VJP per user), the
    user-feature prior (a private per-user input) and the convex losses run locally only. The
    item set must be given: the encoder's rows are its positions, and without one the data's
    items are ordered differently by the two engines (first appearance, sorted)."""
    where = "with engine='spark' (the local engine trains it)"
    if variant not in ("ssp2", "ssp1", "minibatch"):
        raise InvalidParameterError(
            f"The 'variant' parameter of {caller} must be one of ['ssp2', 'ssp1', 'minibatch'] "
            f"{where}. Got {variant!r} instead."
        )
    if not (isinstance(loss, str) and loss == "squared"):
        raise InvalidParameterError(
            f"The 'loss' parameter of {caller} must be 'squared' {where}. Got {loss!r} instead."
        )
    if user_features is not None:
        raise InvalidParameterError(
            f"The 'user_features' parameter of {caller} must be None {where}. "
            f"Got {type(user_features).__name__} instead."
        )
    if items is None:
        raise InvalidParameterError(
            "The 'items' parameter of PublicFeatureRecommender must be an item set with "
            "engine='spark' (the encoder's rows are its positions; the data's own items are "
            "ordered differently by the two engines). Got None instead."
        )
