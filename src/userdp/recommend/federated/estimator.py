"""The estimator of federated SSP2 (:mod:`userdp.recommend.federated`):
:class:`FederatedPublicFeatureRecommender` splits the ratings into one
:class:`~userdp.recommend.federated.parties.Client` per user and runs the protocol's rounds
between them, the secure aggregator and the server, then releases the server's model.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, cast

import numpy as np

from userdp.data.ratings import as_ratings
from userdp.exceptions import InvalidParameterError
from userdp.multitask.allocation import row_keys
from userdp.multitask.kernels import segment_offsets
from userdp.privacy.accountant import PrivacyAccountant
from userdp.privacy.noise import NoiseSource
from userdp.recommend.core.base import RecommenderBase, diagnostics
from userdp.recommend.core.model import RecommenderModel
from userdp.recommend.core.plans import plan_noise
from userdp.recommend.federated.messages import (
    ServerMessage,
)
from userdp.recommend.federated.parties import Client, SecureAggregator, Server
from userdp.recommend.public.estimator import PublicFeatureRecommender
from userdp.recommend.public.steps import METHOD_NAMES

__all__ = ["FEDERATED_VARIANTS", "FederatedPublicFeatureRecommender"]

FEDERATED_VARIANTS = ("ssp2", "minibatch")


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
        if accountant is not None:  # refuses before any data is read, a held seed included
            accountant.compose(plan.event(), seed=self.seed, caller=caller)
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
