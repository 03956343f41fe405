"""Federated SSP2: AM-SSP with one communication round per client and alternating step
(Krichene et al. 2023b, "Private Learning with Public Features", arXiv:2310.15454, Appendix F,
Algorithm 8), simulated in one process.

Three roles (:mod:`~userdp.recommend.federated.parties`) exchange the typed messages of
:mod:`~userdp.recommend.federated.messages`; only the messages cross a role's boundary.
:class:`FederatedPublicFeatureRecommender` (:mod:`~userdp.recommend.federated.estimator`) runs
them. This package builds on the public-feature family (its estimator's keyword rules and its
encoder steps): it is that recommender's federated protocol.

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

from userdp.recommend.federated.estimator import FederatedPublicFeatureRecommender
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
    secure_aggregation_nbytes,
)
from userdp.recommend.federated.parties import Client, SecureAggregator, Server

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
    "ServerMessage",
    "secure_aggregation_nbytes",
]
