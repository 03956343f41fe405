"""The messages of federated SSP2 (:mod:`userdp.recommend.federated`): typed, immutable, and
each counting its own payload (``nbytes``).

Broadcasts go from the server to every client and are public; contributions go from one client
to the secure aggregator and are private; the three noised aggregates are all the server ever
receives (Krichene et al. 2023b, arXiv:2310.15454, Appendix F, Algorithm 8).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "CentreContribution",
    "CentreRound",
    "CountContribution",
    "CountsRound",
    "FactorContribution",
    "FactorRound",
    "NoisyCentre",
    "NoisyCounts",
    "NoisyItemStatistics",
    "ServerMessage",
    "secure_aggregation_nbytes",
]


def _nbytes(message: Any) -> int:
    """Payload bytes of a message: its arrays' buffers plus 8 per scalar (None: nothing)."""
    total = 0
    for f in dataclasses.fields(message):
        value = getattr(message, f.name)
        if isinstance(value, np.ndarray):
            total += value.nbytes
        elif value is not None:
            total += 8
    return total


class _Message:
    """Mixin: ``nbytes``, the payload a message puts on the wire."""

    @property
    def nbytes(self) -> int:
        return _nbytes(self)


# -- broadcasts: server -> clients (public) ---------------------------------------------------
@dataclass(frozen=True)
class CountsRound(_Message):
    """Round 1: count at most ``count_sample`` of your items among the ``n_items``."""

    n_items: int
    count_sample: int


@dataclass(frozen=True)
class CentreRound(_Message):
    """Round 2: your private-mean statistic (``kind`` "private-mean" or "sampled-mean") with
    per-user cap ``cap``, from the declared ``rating_range`` (cap: post-processing of the
    released counts, :func:`~userdp.recommend.core.centring.centre_cap`)."""

    kind: str
    cap: float
    rating_range: tuple[float, float]
    count_sample: int


@dataclass(frozen=True)
class FactorRound(_Message):
    """Each alternating step: the public item embeddings and what a client needs to solve its
    factor and weigh its contribution (released counts and centre, declared bounds)."""

    step: int
    item_factors: np.ndarray  # (n_items, d): post-processing of earlier releases
    counts: np.ndarray  # (n_items,): released counts
    center: float
    half: float  # ratings are clipped to [-half, half] about the centre in the moments
    rating_range: tuple[float, float]
    mu: float
    max_norm: float
    reg: float


# -- contributions: client -> aggregator (private) --------------------------------------------
@dataclass(frozen=True)
class CountContribution(_Message):
    """The client's counted items (distinct codes, at most ``count_sample``)."""

    items: np.ndarray


@dataclass(frozen=True)
class CentreContribution(_Message):
    """The client's private-mean statistic ``(sum, count)``, each coordinate in [-1, 1]."""

    statistic: np.ndarray


@dataclass(frozen=True)
class FactorContribution(_Message):
    """Algorithm 8, line 3: the clipped factor ``u_k`` and ``D_k``: the client's items, their
    adaptive weights (squares summing to at most 1) and clipped centred ratings."""

    factor: np.ndarray
    items: np.ndarray
    weights: np.ndarray
    labels: np.ndarray


# -- noised aggregates: aggregator -> server (releases) ---------------------------------------
@dataclass(frozen=True)
class NoisyCounts(_Message):
    """The released item counts and user count (one Gaussian release, as in
    :func:`~userdp.multitask.private_counts`)."""

    values: np.ndarray  # (n_items + 1,)

    @property
    def counts(self) -> np.ndarray:
        return self.values[:-1]


@dataclass(frozen=True)
class NoisyCentre(_Message):
    """The released private-mean statistic ``(sum, count)``."""

    statistic: np.ndarray  # (2,)


@dataclass(frozen=True)
class NoisyItemStatistics(_Message):
    """One SSP2 release: noisy ``A_j`` (symmetric) and ``b_j`` for every item."""

    step: int
    gram: np.ndarray  # (n_items, d, d)
    moment: np.ndarray  # (n_items, d)


ServerMessage = NoisyCounts | NoisyCentre | NoisyItemStatistics


def secure_aggregation_nbytes(n_items: int, dim: int) -> int:
    """Bytes of one client's dense item-statistics vector under secure aggregation: the upper
    triangle of every ``A_j`` and every ``b_j`` (float64), so its items stay hidden."""
    return int(n_items) * (dim * (dim + 1) // 2 + dim) * 8
