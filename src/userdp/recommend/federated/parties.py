"""The three roles of federated SSP2 (:mod:`userdp.recommend.federated`): the
:class:`Client` (one per user, on the user's device), the :class:`SecureAggregator` (checks
and sums the contributions, adds the noise once) and the :class:`Server` (holds the encoder,
receives only noised aggregates). Only the typed messages of
:mod:`~userdp.recommend.federated.messages` cross a role's boundary.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from userdp.exceptions import DataError, InvalidParameterError
from userdp.multitask.allocation import adaptive_weights, sample_per_user
from userdp.multitask.ssp import clip_rows, perturb_statistics, project_psd
from userdp.privacy.noise import NoiseSource
from userdp.recommend.core.centring import centre_cap, mean_statistics, smooth_mean_statistics
from userdp.recommend.core.plans import NoisePlan
from userdp.recommend.federated.messages import (
    CentreContribution,
    CentreRound,
    CountContribution,
    CountsRound,
    FactorContribution,
    FactorRound,
    NoisyCentre,
    NoisyCounts,
    NoisyItemStatistics,
    ServerMessage,
)
from userdp.recommend.public.steps import Adam, ssp_gradient, ssp_noise_ridge

__all__ = ["Client", "SecureAggregator", "Server"]


class Client:
    """One user's device: their ratings and the contributions computed from them.

    Parameters
    ----------
    items : int array
        Codes of the user's rated items in the fixed item set (distinct).
    values : float array
        Their ratings.
    all_values : float array
        The user's ratings of every item, those outside the item set too (the centre uses
        them, as :func:`~userdp.recommend.core.centring.centre_all` does).
    keys, all_keys : uint64 arrays or None
        Random keys of the rows (the count sample, the sampled mean). None draws fresh ones
        from OS entropy; the simulation passes the centralised run's keyed hashes
        (:func:`~userdp.multitask.allocation.row_keys`), a function of the user's own rows.
    """

    def __init__(
        self,
        items: np.ndarray,
        values: np.ndarray,
        all_values: np.ndarray,
        *,
        keys: np.ndarray | None = None,
        all_keys: np.ndarray | None = None,
    ) -> None:
        self.items = np.asarray(items, dtype=np.int64)
        self.values = np.asarray(values, dtype=np.float64)
        self.all_values = np.asarray(all_values, dtype=np.float64)
        self._own = NoiseSource()  # the device's randomness (unused when keys are given)
        self.keys = self._draw(self.items.size) if keys is None else keys
        self.all_keys = self._draw(self.all_values.size) if all_keys is None else all_keys

    def _draw(self, n: int) -> np.ndarray:
        return self._own.random_bits(n, 32) << np.uint64(32)

    def count_contribution(self, r: CountsRound) -> CountContribution:
        """At most ``count_sample`` of the client's items, uniformly at random by its keys."""
        keep = sample_per_user(
            np.zeros(self.items.size, np.int64), r.count_sample, self._own, keys=self.keys
        )
        return CountContribution(self.items[keep].astype(np.int32))

    def centre_contribution(self, r: CentreRound) -> CentreContribution:
        """:func:`~userdp.recommend.core.centring.smooth_mean_statistics` (or the sampled mean's
        statistic) of the client's own ratings, every coordinate in [-1, 1]."""
        lo, hi = r.rating_range
        v = np.clip(self.all_values, lo, hi)
        if r.kind == "sampled-mean":
            keep = sample_per_user(
                np.zeros(v.size, np.int64), r.count_sample, self._own, keys=self.all_keys
            )
            return CentreContribution(mean_statistics(v[keep], lo, hi, r.count_sample))
        return CentreContribution(
            smooth_mean_statistics(v, np.zeros(v.size, np.int64), lo, hi, r.cap)
        )

    def factor_contribution(self, r: FactorRound) -> FactorContribution:
        """Solve ``u_k`` exactly on the broadcast embeddings (never sent unclipped), clip it to
        ``max_norm``, weigh the items by the released counts and clip the centred ratings."""
        n = self.items.size
        y = np.clip(self.values, *r.rating_range) - r.center
        # u_k = (sum_j v_j v_j^T + reg n_k I)^-1 sum_j y_j v_j, as the centralised user step.
        V = r.item_factors[self.items]
        gram = V.T @ V + r.reg * max(n, 1) * np.eye(V.shape[1])
        u = np.linalg.solve(gram, V.T @ y)[None]
        users = np.zeros(n, np.int64)
        w = adaptive_weights(users, self.items, r.counts, mu=r.mu, beta=1.0) if n else np.zeros(0)
        return FactorContribution(
            factor=clip_rows(u, r.max_norm)[0],
            items=self.items.astype(np.int32),
            weights=w,
            labels=np.clip(y, -r.half, r.half),
        )


class SecureAggregator:
    """Sums the clients' contributions and adds the noise (Algorithm 8, lines 4-8).

    Parameters
    ----------
    plan : NoisePlan
        The noise multipliers (the centralised run's plan: counts, centre, A, b).
    noise : NoiseSource
        The aggregator's secret randomness.
    item_labels : array-like or None
        Labels of the item axis, for the release recorder (:mod:`userdp.privacy.recording`).

    Privacy
    -------
    Each contribution is held to the round's public bounds before it is added (clipped where
    Algorithm 8 clips; otherwise a violation raises :class:`~userdp.exceptions.DataError` and
    nothing is released): at most ``count_sample`` distinct items (counts: l2 sensitivity
    ``sqrt(count_sample + 1)``), a statistic clipped to [-1, 1]^2 (centre: ``sqrt(2)``), a
    factor clipped to norm ``max_norm``, squared weights summing to at most 1 and labels
    clipped to [-half, half] (A: ``max_norm^2``, b: ``max_norm * half``; Theorem 2 with
    ``w_bar = 1``), the bounds of
    :class:`~userdp.recommend.PublicFeatureRecommender`. Each sum gets Gaussian noise of its
    plan multiplier times that sensitivity, by the same noise helpers in the same order.
    """

    def __init__(self, plan: NoisePlan, noise: NoiseSource, item_labels: Any = None) -> None:
        self.plan = plan
        self.noise = noise
        self.item_labels = item_labels

    def aggregate(self, r: Any, contributions: Iterable[Any]) -> ServerMessage:
        """The noised sum of one round's contributions (consumed one at a time)."""
        match r:
            case CountsRound():
                return self._counts(r, contributions)
            case CentreRound():
                return self._centre(r, contributions)
            case FactorRound():
                return self._statistics(r, contributions)
        raise InvalidParameterError(
            "The 'r' parameter of SecureAggregator.aggregate must be a CountsRound, "
            f"CentreRound or FactorRound. Got {r!r} instead."
        )

    def _counts(self, r: CountsRound, contributions: Iterable[Any]) -> NoisyCounts:
        total = np.zeros(r.n_items + 1)
        for c in contributions:
            c = _check_contribution(c, r)
            total[c.items] += 1.0
            total[-1] += float(c.items.size > 0)  # a user with rows in the item set
        bound = float(np.sqrt(r.count_sample + 1))
        released = self.noise.add_gaussian(
            total, self.plan.counts * bound, statistic="private counts (tasks, users)", l2=bound
        )
        return NoisyCounts(released)

    def _centre(self, r: CentreRound, contributions: Iterable[Any]) -> NoisyCentre:
        assert self.plan.center is not None  # a centre round is planned with a private mean
        total = np.zeros(2)
        for c in contributions:
            c = _check_contribution(c, r)
            total += c.statistic
        bound = float(np.sqrt(2.0))
        released = self.noise.add_gaussian(
            total, self.plan.center * bound, statistic="private mean (sum, count)", l2=bound
        )
        return NoisyCentre(released)

    def _statistics(self, r: FactorRound, contributions: Iterable[Any]) -> NoisyItemStatistics:
        # the federated (SSP2) plan releases (A, b) every step
        assert self.plan.gram is not None and self.plan.moment is not None
        m, d = r.item_factors.shape
        gram, moment = np.zeros((m, d, d)), np.zeros((m, d))
        for c in contributions:
            c = _check_contribution(c, r)
            u, w = c.factor, c.weights
            # A_j += w_i u u^T and b_j += w_i y_i u over the client's items (distinct).
            gram[c.items] += w[:, None, None] * np.outer(u, u)[None]
            moment[c.items] += (w * c.labels)[:, None] * u[None, :]
        gram, moment = perturb_statistics(
            gram,
            moment,
            gram_sigma=self.plan.gram * r.max_norm**2,
            moment_sigma=self.plan.moment * r.max_norm * r.half,
            noise=self.noise,
            gram_l2=r.max_norm**2,
            moment_l2=r.max_norm * r.half,
            index=self.item_labels,
        )
        return NoisyItemStatistics(r.step, gram, moment)


def _check_contribution(c: Any, r: Any) -> Any:
    """Contribution ``c`` within round ``r``'s public bounds, the sensitivities the noise is
    calibrated for. As the paper's aggregator (Algorithm 8, line 6) the norms are enforced by
    clipping (the factor to ``max_norm``, the labels to ``half``, the mean statistic to
    [-1, 1]: no-ops for an honest client); a contribution of the wrong type, shape or items,
    or whose squared weights sum above 1, raises DataError and the round releases nothing."""
    kind: type[Any] = {CountsRound: CountContribution, CentreRound: CentreContribution}.get(
        type(r), FactorContribution
    )
    problem = None
    if not isinstance(c, kind):
        problem = f"type {kind.__name__}; got {type(c).__name__}"
    elif kind is CentreContribution:
        s = np.asarray(c.statistic, dtype=np.float64)
        if s.shape != (2,):
            problem = f"a statistic of shape (2,); got {s.shape}"
        else:
            c = CentreContribution(np.clip(s, -1.0, 1.0))
    else:
        n_items = r.n_items if kind is CountContribution else r.item_factors.shape[0]
        items = np.asarray(c.items)
        if items.ndim != 1 or (
            items.size
            and (items.min() < 0 or items.max() >= n_items or np.unique(items).size != items.size)
        ):
            problem = f"distinct item codes in [0, {n_items}); got {items[:5]!r}"
        elif kind is CountContribution:
            if items.size > r.count_sample:
                problem = f"at most {r.count_sample} items; got {items.size}"
        else:
            problem = _factor_problem(c, r)
            if problem is None:
                u, y = np.asarray(c.factor, dtype=np.float64), np.asarray(c.labels, np.float64)
                c = FactorContribution(
                    clip_rows(u, r.max_norm),
                    items,
                    np.asarray(c.weights),
                    np.clip(y, -r.half, r.half),
                )
    if problem is not None:
        raise DataError(f"A client's contribution must have {problem}. Refused.")
    return c


def _factor_problem(c: FactorContribution, r: FactorRound) -> str | None:
    """What is wrong with a factor contribution (None: it meets the round's bounds)."""
    d, n = r.item_factors.shape[1], c.items.size
    u, w, y = np.asarray(c.factor), np.asarray(c.weights), np.asarray(c.labels)
    if u.shape != (d,) or w.shape != (n,) or y.shape != (n,):
        return f"a factor of shape ({d},) and {n} weights and labels; got {u.shape}, {w.shape}"
    if not (np.all(np.isfinite(u)) and np.all(np.isfinite(y))):
        return "a finite factor and labels"
    if not (np.all(w >= 0) and np.sum(w * w) <= 1.0):  # adaptive weights: <= 1 - 1e-9
        return f"weights >= 0 whose squares sum to <= 1; got {np.sum(w * w):g}"
    return None


class Server:
    """Holds the public features and the encoder; learns only from released statistics.

    Parameters
    ----------
    encoder : ItemEncoder
        The item encoder on the public features (initialised from public randomness).
    plan : NoisePlan
        The public noise plan (the item ridge's noise-scaled part depends on it).
    settings : dict
        The declared hyper-parameters: ``rating_range``, ``center``, ``count_sample``, ``mu``,
        ``max_norm``, ``reg``, ``noise_reg``, ``rating_clip``, ``variant``, ``inner_steps``,
        ``learning_rate``, ``batch_items``.
    batch_rng : numpy.random.Generator
        Public randomness for mini-batch SSP2's item batches.
    """

    def __init__(
        self,
        encoder: Any,
        plan: NoisePlan,
        settings: dict[str, Any],
        batch_rng: np.random.Generator,
    ) -> None:
        self.encoder, self.plan, self.settings, self.batch_rng = encoder, plan, settings, batch_rng
        self.params = encoder.init_params()
        self.counts: np.ndarray | None = None
        self.center: float | None = None
        self._centre_statistic: np.ndarray | None = None

    def receive(self, message: ServerMessage) -> None:
        """Take one released aggregate; anything but the three release types is refused."""
        match message:
            case NoisyCounts():
                self.counts = message.counts
            case NoisyCentre():
                self._centre_statistic = message.statistic
            case NoisyItemStatistics():
                self._train(message)
            case _:
                raise InvalidParameterError(
                    "The 'message' parameter of Server.receive must be a NoisyCounts, "
                    f"NoisyCentre or NoisyItemStatistics. Got {type(message).__name__} instead."
                )

    def counts_round(self) -> CountsRound:
        return CountsRound(int(self.encoder.n_items), int(self.settings["count_sample"]))

    def centre_round(self) -> CentreRound | None:
        """The private mean's round (None for a declared centre or the midpoint)."""
        s = self.settings
        kind, (lo, hi) = s["center"], s["rating_range"]
        if not isinstance(kind, str) or kind == "midpoint":
            return None
        cap = float(s["count_sample"])
        if kind == "private-mean":
            # the counts round comes first; a private mean has its planned share
            assert self.counts is not None and self.plan.center is not None
            total = float(np.sum(self.counts))
            cap = centre_cap(total, s["count_sample"], self.plan.center, lo, hi)
        return CentreRound(kind, cap, (float(lo), float(hi)), int(s["count_sample"]))

    def _centre(self) -> float:
        """The centre from the released statistic, as
        :func:`~userdp.recommend.core.centring.centre`."""
        s = self.settings
        lo, hi = s["rating_range"]
        mid = 0.5 * (lo + hi)
        if not isinstance(s["center"], str):
            return float(np.clip(s["center"], lo, hi))
        if self._centre_statistic is None:
            return mid
        total, count = self._centre_statistic
        return mid if count <= 0 else float(np.clip(mid + total * 0.5 * (hi - lo) / count, lo, hi))

    def factor_round(self, step: int) -> FactorRound:
        """Broadcast the current item embeddings (public: post-processing of releases)."""
        s = self.settings
        if self.center is None:
            self.center = self._centre()
        lo, hi = s["rating_range"]
        half = max(hi - self.center, self.center - lo)
        if s["rating_clip"] is not None:
            half = min(half, float(s["rating_clip"]))
        V, _ = self.encoder.forward(self.params, None)
        assert self.counts is not None  # the counts round comes first
        return FactorRound(
            step,
            np.asarray(V, dtype=np.float64),
            self.counts,
            self.center,
            float(half),
            (float(lo), float(hi)),
            float(s["mu"]),
            float(s["max_norm"]),
            float(s["reg"]),
        )

    def _train(self, stats: NoisyItemStatistics) -> None:
        """Algorithm 8, lines 9-14: ``inner_steps`` Adam steps on one release (SSP2), each on
        all items or, for mini-batch SSP2, on a uniform batch of items."""
        s = self.settings
        # statistics arrive after the counts round; SSP2 plans release A
        assert self.counts is not None and self.plan.gram is not None
        vals, vecs = project_psd(stats.gram)  # post-processing: bounded quadratic objective
        gram = np.einsum("mdk,mk,mek->mde", vecs, vals, vecs)
        ridge = s["reg"] * np.maximum(self.counts, 1.0) + ssp_noise_ridge(
            s["noise_reg"], self.plan.gram, 1, s["max_norm"], self.encoder.dim
        )
        opt = Adam(self.params.size, s["learning_rate"])
        m = gram.shape[0]
        for _t in range(s["inner_steps"]):
            batch = None
            if s["variant"] == "minibatch":
                size = min(s["batch_items"], m)
                batch = np.sort(self.batch_rng.choice(m, size, replace=False))
            grad = ssp_gradient(self.encoder, self.params, gram, stats.moment, ridge, batch)
            self.params = opt.step(self.params, grad)

    def item_factors(self) -> np.ndarray:
        return np.asarray(self.encoder.forward(self.params, None)[0], dtype=np.float64)
