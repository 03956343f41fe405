"""Federated SSP2: AM-SSP with one communication round per client and alternating step
(Krichene et al. 2023b, "Private Learning with Public Features", arXiv:2310.15454, Appendix F,
Algorithm 8), simulated in one process.

Three roles exchange the typed messages below; only the messages cross a role's boundary.

- A :class:`Client` (one per user, on the user's device) holds that user's ratings. Each round
  it reads a public broadcast and returns its own contribution: the items it counts, its
  private-mean statistic, or its clipped user factor ``u_k`` with its items, weights and
  clipped centred ratings (Algorithm 8, line 3: "Send: u_k, D_k to aggregator").
- The :class:`SecureAggregator` checks each contribution against the round's public bounds,
  folds it into a running sum and keeps nothing else, then adds the Gaussian noise to the sum
  (Algorithm 8, lines 5-8: ``A_j = sum w_i u_i u_i^T + sigma Gamma_u^2 N``, ``b_j = sum w_i y_i
  u_i + sigma Gamma_y Gamma_u N``) and forwards only the noised sums to the server.
- The :class:`Server` holds the public item features and the encoder. It receives only
  :class:`NoisyCounts`, :class:`NoisyCentre` and :class:`NoisyItemStatistics` (anything else
  is refused), takes every gradient step of an alternating step on one release (lines 9-14),
  broadcasts the public item embeddings for the next round and releases the model.

Threat model (the paper's, Appendix F). The server, and anyone who sees what it sees (the
broadcasts, the released model), is untrusted: everything it receives is a Gaussian release of
the centralised AM-SSP run, with the same sensitivities, the same noise multipliers and the
same accounting event (:func:`~userdp.recommend.plan_noise`), so the (epsilon, delta)
guarantee under adding or removing one user holds against it. The aggregator is the paper's
trusted "secure aggregator, responsible for computing and protecting the sufficient
statistics": the paper adds the noise there, once, to the sum, not as distributed shares on
the clients, and so does this module. In a deployment its sum would be computed by secure
aggregation (Bonawitz et al. 2017), which reveals only the sum of masked client vectors, and
its noise drawn inside the secure computation (or a TEE); the simulation models that outcome,
not the cryptography: :meth:`SecureAggregator.aggregate` consumes the contributions one at a
time into a running sum and returns only the noised sum. Not covered: a corrupted aggregator
(it could see contributions, or skip the noise), colluding clients, client dropout (a missing
client is a removed user: the guarantee for the others holds, the result then differs from the
centralised run) and timing. Under secure aggregation a client must send a dense masked vector
(:func:`secure_aggregation_nbytes`), since its item list would reveal what it rated; the
messages' ``nbytes`` is the sparse form Algorithm 8 sends to a trusted aggregator.

Traffic. Each client sends its item-statistics contribution once per alternating step (``d``
floats plus its items, weights and labels: independent of the encoder's size and of the inner
steps), plus one count and one mean contribution before training. Federated DP-SGD sends one
encoder gradient (``n_params`` floats) per inner step instead (Appendix F, "Advantages").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, ClassVar, cast

import numpy as np

from userdp.data.ratings import as_ratings
from userdp.exceptions import DataError, InvalidParameterError
from userdp.multitask.allocation import adaptive_weights, row_keys, sample_per_user
from userdp.multitask.kernels import segment_offsets
from userdp.multitask.ssp import clip_rows, perturb_statistics, project_psd
from userdp.privacy.accountant import PrivacyAccountant
from userdp.privacy.noise import NoiseSource
from userdp.recommend._base import RecommenderBase, diagnostics
from userdp.recommend.centring import centre_cap, mean_statistics, smooth_mean_statistics
from userdp.recommend.federated_messages import (
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
    secure_aggregation_nbytes,
)
from userdp.recommend.model import RecommenderModel
from userdp.recommend.plans import NoisePlan, plan_noise
from userdp.recommend.public import PublicFeatureRecommender
from userdp.recommend.public_steps import METHOD_NAMES, Adam, ssp_gradient, ssp_noise_ridge

__all__ = [
    "CentreContribution",
    "CentreRound",
    "Client",
    "CountContribution",
    "CountsRound",
    "FactorContribution",
    "FactorRound",
    "FederatedPublicFeatureRecommender",
    "NoisyCentre",
    "NoisyCounts",
    "NoisyItemStatistics",
    "SecureAggregator",
    "Server",
    "secure_aggregation_nbytes",
]

FEDERATED_VARIANTS = ("ssp2", "minibatch")


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
        them, as :func:`~userdp.recommend.centring.centre_all` does).
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
        """:func:`~userdp.recommend.centring.smooth_mean_statistics` (or the sampled mean's
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
        """The centre from the released statistic, as :func:`~userdp.recommend.centring.centre`."""
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


#: PublicFeatureRecommender's rules for the keywords both take (named, so that a keyword added
#: there does not appear here), with the variants one round per step allows.
_BASE = PublicFeatureRecommender._parameter_constraints
_CONSTRAINTS = {
    k: _BASE[k]
    for k in (
        "epsilon",
        "delta",
        "items",
        "encoder",
        "steps",
        "inner_steps",
        "learning_rate",
        "batch_items",
        "rating_range",
        "center",
        "mu",
        "count_sample",
        "count_fraction",
        "center_fraction",
        "moment_share",
        "max_norm",
        "reg",
        "noise_reg",
        "rating_clip",
        "seed",
        "progress",
    )
}
_CONSTRAINTS["variant"] = {**_BASE["variant"], "choices": FEDERATED_VARIANTS}


class FederatedPublicFeatureRecommender(RecommenderBase):
    """AM-SSP trained by federated SSP2 (Algorithm 8): one round per client per alternating step.

    Same keywords, budget split, noise and released :class:`RecommenderModel` as
    :class:`~userdp.recommend.PublicFeatureRecommender` with ``variant="ssp2"`` (or
    ``"minibatch"``, Algorithm 8's uniform item batches) and ``biases=False`` (Algorithm 8
    trains no bias; the centralised default has item biases); given the same seed the two
    train the same model (to floating-point summation order). Private training only: ``epsilon``,
    ``delta``, ``items`` and ``rating_range`` are required. ``fit`` splits the ratings into one
    :class:`Client` per user and runs the protocol: counts, the private mean (when ``center``
    is a private mean), then one item-statistics round per alternating step.

    Parameters
    ----------
    encoder, epsilon, delta, items, steps, inner_steps, learning_rate, batch_items,
    rating_range, center, mu, count_sample, count_fraction, center_fraction, moment_share,
    max_norm, reg, noise_reg, rating_clip, seed, progress
        As in :class:`~userdp.recommend.PublicFeatureRecommender`.
    variant : {"ssp2", "minibatch"}, default="ssp2"

    Privacy
    -------
    As :class:`~userdp.recommend.PublicFeatureRecommender`'s SSP2 under add/remove one user: the
    plan and its event are the centralised ones; see the module docstring for who is trusted.

    Examples
    --------
    See the README's "Federated SSP2" section.
    """

    _parameter_constraints: ClassVar[dict[str, dict[str, Any]]] = _CONSTRAINTS

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
        rating_clip: float | None = None,
        seed: int | None = None,
        progress: bool = False,
    ) -> None:
        self.encoder, self.epsilon, self.delta, self.items = encoder, epsilon, delta, items
        self.variant, self.steps, self.inner_steps = variant, steps, inner_steps
        self.learning_rate, self.batch_items = learning_rate, batch_items
        self.rating_range = rating_range
        self.center, self.mu, self.count_sample = center, mu, count_sample
        self.count_fraction, self.center_fraction = count_fraction, center_fraction
        self.moment_share, self.max_norm, self.reg = moment_share, max_norm, reg
        self.noise_reg, self.rating_clip = noise_reg, rating_clip
        self.seed, self.progress = seed, progress

    def fit(
        self,
        ratings: Any,
        *,
        accountant: PrivacyAccountant | None = None,
        on_server_message: Callable[[ServerMessage], None] | None = None,
    ) -> FederatedPublicFeatureRecommender:
        """Run the protocol on ``ratings`` (one client per user) and release the model.

        ``on_server_message`` is called with every message the server receives (released
        values only), for audits and tests. With ``accountant`` the run's event is charged
        before any data is read. ``diagnostics_`` (exact, NON-PRIVATE, for the curator) holds
        the bytes each client sent and received.
        """
        started = time.perf_counter()
        caller = "FederatedPublicFeatureRecommender.fit"
        self._validate_params()
        budget = self._check_budget_keywords(True)
        self._check_accountant(accountant, "accountant", caller)
        if on_server_message is not None and not callable(on_server_message):
            raise InvalidParameterError(
                f"The 'on_server_message' parameter of {caller} must be a callable or None. "
                f"Got {on_server_message!r} instead."
            )
        item_set = self._item_set(True)
        if len(item_set) != self.encoder.n_items:
            raise InvalidParameterError(
                f"The encoder describes {self.encoder.n_items} items but the item set has "
                f"{len(item_set)}; build the encoder's features on the item set."
            )
        plan = plan_noise(
            budget,
            steps=self.steps,
            releases_per_step=1,
            count_fraction=self.count_fraction,
            center_fraction=self._center_fraction(),
            moment_share=self.moment_share,
        )
        if accountant is not None:
            accountant.compose(plan.event())
        noise = NoiseSource(self.seed)
        settings = {
            k: getattr(self, k)
            for k in (
                "rating_range",
                "center",
                "count_sample",
                "mu",
                "max_norm",
                "reg",
                "noise_reg",
                "rating_clip",
                "variant",
                "inner_steps",
                "learning_rate",
                "batch_items",
            )
        }
        # The simulation derives every party's randomness from one seed (the aggregator's noise,
        # the clients' keys, the server's batches: independent streams) so that a seeded run
        # equals the centralised one; deployed, each party draws its own.
        server = Server(self.encoder, plan, settings, noise.stream(0x5353))
        full = as_ratings(ratings)
        data, dropped = full.restrict_items(item_set.labels)
        clients = _clients(full, data, noise.salt)  # the simulation's devices
        aggregator = SecureAggregator(plan, noise, data.item_labels)
        up, down = np.zeros(len(clients)), 0

        def sent(contributions: Iterator[Any]) -> Iterator[Any]:
            for k, c in enumerate(contributions):
                up[k] += c.nbytes
                yield c

        def deliver(message: ServerMessage) -> None:
            if on_server_message is not None:
                on_server_message(message)
            server.receive(message)

        r1 = server.counts_round()
        deliver(aggregator.aggregate(r1, sent(c.count_contribution(r1) for c in clients)))
        down += r1.nbytes
        r2 = server.centre_round()
        if r2 is not None:
            deliver(aggregator.aggregate(r2, sent(c.centre_contribution(r2) for c in clients)))
            down += r2.nbytes
        rounds = range(self.steps)
        if self.progress:
            from tqdm.auto import tqdm

            rounds = tqdm(rounds, desc="federated-ssp2", unit="round", leave=False)
        for step in rounds:
            r = server.factor_round(step)
            deliver(aggregator.aggregate(r, sent(c.factor_contribution(r) for c in clients)))
            down += r.nbytes
        factors = server.item_factors()
        event, spent = self._spent(plan.event(), item_set, budget.delta)
        assert self.rating_range is not None  # checked with the budget
        lo, hi = self.rating_range
        self.plan_ = plan
        self.fit_seconds_ = time.perf_counter() - started
        self.diagnostics_ = diagnostics(dropped, self.fit_seconds_)
        self.diagnostics_.update(
            clients=len(clients),
            rounds=2 + self.steps if r2 is not None else 1 + self.steps,
            uplink_bytes_mean=float(up.mean()) if up.size else 0.0,
            uplink_bytes_max=float(up.max()) if up.size else 0.0,
            downlink_bytes=int(down),
        )
        self.model_ = RecommenderModel(
            method=METHOD_NAMES[self.variant],
            item_labels=data.item_labels,
            item_factors=factors,
            center=float(cast(float, server.center)),
            rating_range=(float(lo), float(hi)),
            item_counts=server.counts,
            trained_items=np.ones(factors.shape[0], dtype=bool),
            budget=spent,
            dp_event=event,
            item_source=item_set.source,
            params=self._declared(
                dim=int(self.encoder.dim), encoder=type(self.encoder).__name__, protocol="federated"
            ),
            encoder_params=np.asarray(server.params, dtype=np.float64),
        )
        self.params_ = server.params
        self.item_factors_, self.item_labels_ = factors, data.item_labels
        self.center_, self.rating_range_ = self.model_.center, self.model_.rating_range
        self.item_counts_, self.dp_event_, self.budget_ = server.counts, event, spent
        return self

    def user_factors(self, history: Any) -> np.ndarray:
        """Users' embeddings from their own ratings; see :meth:`RecommenderModel.user_factors`."""
        return self._check_fitted().user_factors(history)


def _clients(full: Any, data: Any, salt: int) -> list[Client]:
    """Split the table into one :class:`Client` per user (the simulation's devices), with the
    keyed row hashes of the centralised run as their random keys (a function of each user's
    own rows: :func:`~userdp.multitask.allocation.row_keys`)."""
    keys = row_keys(data.users, data.items, data.user_labels, data.item_labels, salt)
    all_keys = row_keys(full.users, full.items, full.user_labels, full.item_labels, salt)
    order, offsets = segment_offsets(data.users, full.n_users)
    all_order, all_offsets = segment_offsets(full.users, full.n_users)
    out = []
    for k in range(full.n_users):
        rows = order[offsets[k] : offsets[k + 1]]
        all_rows = all_order[all_offsets[k] : all_offsets[k + 1]]
        out.append(
            Client(
                data.items[rows],
                data.values[rows],
                full.values[all_rows],
                keys=keys[rows],
                all_keys=all_keys[all_rows],
            )
        )
    return out
