"""The small interface every partition-selection engine implements, and what it is given.

An algorithm (:mod:`userdp.partition.algorithms`) is written once, as the paper's steps, against
a :class:`Runner`; the local NumPy runner (:mod:`userdp.partition.select`) and the Spark runner
(:mod:`userdp.partition.spark`) implement it. Engine values (weights, noisy weights, item sets)
are opaque handles to the algorithm: NumPy arrays over item codes locally, DataFrames on Spark.

The five steps:

``cap(recap=True)``
    Set the round's input: every user's set minus the items removed so far, capped to Delta_0
    items with the run's secret salt (``recap=False``: the previous round's capped sets minus
    the removed items, degrees recomputed, no new cap). Biases set by ``remove`` are attached.
``weights(rule)``
    Pre-noise weights of the round's items under a :class:`Basic` or :class:`Mad` rule.
``release(weights, round, every_item=False)``
    Add N(0, sigma_r^2) noise on the round's grid (safe noise, see
    :class:`~userdp.partition.rounds.Round`), compose the round's event into the run's
    accountant, and return (noisy weights, released items). ``every_item=True`` gives every
    item of the input a noisy weight (pure noise when absent from the round: the w_ext of
    Alg. 1 line 9) for later rounds to query; only items of the round's input are ever
    released. A run that never re-caps needs no such item (its sets only shrink), so an
    engine may then noise the round's items alone; ``remove`` reads nothing else.
``release_pooled(weights, round, history, test)``
    The last round of a pooled run: like ``release`` (same noise, same event), but the items
    released are those of the round's input whose pooled statistic over ``history`` (the
    earlier rounds' noisy weights, as ``release`` returned them) and this round passes the
    :class:`~userdp.partition.rounds.PooledTest`.
``remove(noisy, decide)``
    ``decide(noisy, present, ops) -> (removed, bias)`` is an element-wise expression of one
    item's noisy weight and whether it was in the round's input (so a function of the release
    only), written with Python operators and ``ops.maximum``: the runner evaluates it on NumPy
    arrays or on Spark columns. Items it removes leave every user's set for the rest of the run;
    its biases (``None`` or 1.0: none) apply to the next ``cap``.
``finish(released, algorithm, parameters, plan)``
    The union of the released item sets as the engine's result type.

Tests observe pre-noise weights and substitute the noise through a :class:`Tap` given to the
runner (never a global): ``Tap.noise(round, item_labels, sigma)`` must be a pure function of
each item so both engines draw the same noise whatever order they hold items in; both engines
add it on the round's grid (:func:`~userdp.privacy.add_on_grid`), as they add their own noise.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from userdp.partition.rounds import Plan, PooledTest, Round

__all__ = ["WEIGHT_STREAM", "Basic", "Decide", "Mad", "Runner", "Tap"]

#: First key of the local runner's noise sub-streams of the rounds' weights: round r draws
#: from ``(WEIGHT_STREAM, r)`` (the Spark runner from ``(r, bucket)`` per bucket of items).
WEIGHT_STREAM = 0x3E16

#: ``decide(noisy, present, ops) -> (removed, bias or None)``, element-wise (see above).
Decide = Callable[[Any, Any, Any], tuple[Any, Any]]


@dataclass(frozen=True)
class Basic:
    """Basic weighting (Alg. 5): every user gives 1/sqrt(|S_u|) to each of its items."""


@dataclass(frozen=True)
class Mad:
    """MaxAdaptiveDegree weighting (Alg. 3), biased by the run's biases when ``biased``."""

    tau: float
    d_max: int
    biased: bool = False
    b_min: float = 1.0
    b_max: float = 1.0


class Runner(Protocol):
    """What an algorithm may ask of an engine (see the module docstring)."""

    max_items_per_user: int

    def cap(self, *, recap: bool = True) -> None: ...

    def weights(self, rule: Basic | Mad) -> Any: ...

    def release(self, weights: Any, rnd: Round, *, every_item: bool = False) -> tuple[Any, Any]: ...

    def release_pooled(
        self, weights: Any, rnd: Round, history: Sequence[Any], test: PooledTest
    ) -> tuple[Any, Any]: ...

    def remove(self, noisy: Any, decide: Decide) -> None: ...

    def finish(
        self, released: Sequence[Any], algorithm: str, parameters: dict[str, Any], plan: Plan
    ) -> Any: ...


#: ``noise(round_index, item_labels, sigma) -> array``, one value per item.
NoiseFunction = Callable[[int, Sequence[Any], float], np.ndarray]


@dataclass
class Tap:
    """Test seam handed to a runner: records every round's pre-noise weights (a ``{item:
    weight}`` dict locally, a DataFrame of ``_i``/``_w`` on Spark) and, with ``noise``, replaces
    the secret noise. Never used by the product."""

    noise: NoiseFunction | None = None
    weights: list[Any] = field(default_factory=list)
