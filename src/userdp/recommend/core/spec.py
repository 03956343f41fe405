"""Typed, frozen training specifications, resolved once at the top of ``fit`` and passed with
the data to the steps and runners (never the estimator): what a step may read is what its
spec holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Allocation", "ConvexSpec", "ItemUpdateSpec", "RunSpec"]


@dataclass(frozen=True)
class Allocation:
    """The per-rating weight rule of Table 2 (Krichene et al. 2023): ``rule`` is "uniform",
    "tail" (``sample_size`` items sampled per user) or "adaptive" (weights ``n_hat^-mu``)."""

    rule: str
    sample_size: int
    mu: float


@dataclass(frozen=True)
class ItemUpdateSpec:
    """What :mod:`userdp.recommend.als.steps` reads of a ``MatrixFactorization`` fit: the
    declared hyper-parameters, resolved (``allocation``, ``biased``)."""

    method: str
    dim: int
    allocation: Allocation
    biased: bool
    bias_prior: bool
    max_norm: float
    reg: float
    noise_reg: float
    unobserved_weight: float
    clip_norm: float
    learning_rate: float
    step_offset: float
    sgd_steps: int
    count_sample: int
    top_items: float | None
    min_item_count: float | str | None


@dataclass(frozen=True)
class RunSpec:
    """What a runner's ``check`` and ``prepare`` read (the preamble shared by both
    recommenders): the declared rating range and centre, the counts' per-user cap, and the
    width of the item statistics (``dim`` plus one bias coordinate when ``biased``)."""

    rating_range: tuple[float, float] | None
    center: Any
    count_sample: int
    dim: int
    biased: bool


@dataclass(frozen=True)
class ConvexSpec:
    """What :func:`userdp.recommend.public.convex.train_convex` reads of a
    ``PublicFeatureRecommender`` fit with a loss other than squared: the declared
    hyper-parameters, resolved (``loss`` a ``ConvexLoss``; ``clips`` its ``(Gamma_H, Gamma_g)``,
    ``(None, None)`` without privacy)."""

    variant: str
    loss: Any
    clips: tuple[float | None, float | None]
    encoder: Any
    steps: int
    inner_steps: int
    mu: float
    reg: float
    noise_reg: float
    max_norm: float
    learning_rate: float
    clip_norm: float
    negatives: float | None
    batch_items: int
    progress: bool
