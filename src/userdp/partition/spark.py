"""The Spark runner of partition selection, and :func:`read`; no algorithms of its own.

:func:`userdp.partition.select_partitions` runs the algorithms of
:mod:`userdp.partition.algorithms` on a :class:`SparkRunner` for a Spark DataFrame, with the
local runner's parameters, guarantees and weights (for a seed both engines cap every user to the
same items). The DataFrame work is :mod:`userdp.partition._spark_run`'s, the executors' noise
:mod:`userdp.partition._spark_noise`'s; docs/partition.md says how the rounds' jobs, caches,
checkpoints and shuffles are laid out, and why.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import dp_accounting
import numpy as np

from userdp.partition._spark_io import read
from userdp.partition._spark_noise import _ExecutorNoise, _join_sides  # noqa: F401 - re-exported
from userdp.partition._spark_run import PAIRS_PER_CALL, _ColumnOps, _SparkRun  # noqa: F401
from userdp.partition._spark_weights import (
    _BASE,
    _HI,
    _I,
    _ITEM,
    BROADCAST_ROWS,  # noqa: F401 - re-exported
    _basic_weights,
    _functions,
    _mad_weights,
    with_bucket,
)
from userdp.partition.cap import DEGREE_EDGES, HISTOGRAM_STREAM
from userdp.partition.result import SparkSelectionResult
from userdp.partition.rounds import Plan, PooledTest, Round
from userdp.partition.runner import Basic, Decide, Mad, Tap
from userdp.privacy.noise import gaussian_on_grid, spawn_generator

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame

__all__ = ["SparkRunner", "read"]


# -- the runner ---------------------------------------------------------------------------------
class SparkRunner:
    """:class:`~userdp.partition.runner.Runner` on Spark DataFrames.

    Same steps and weights as the local runner: for a given seed both cap every user to the
    same items, so their pre-noise weights agree to float round-off. Items removed so far and
    the next round's biases are one small item frame (``_i, _removed, _b``), broadcast to the
    pairs when small.
    """

    def __init__(
        self,
        data: Any,
        *,
        caller: str,
        max_items_per_user: int,
        seed: int | None = None,
        user_column: str = "user",
        item_column: str = "item",
        _tap: Tap | None = None,
    ) -> None:
        self.run = _SparkRun(data, caller, user_column, item_column, max_items_per_user, seed)
        self.run.tap = _tap
        self.max_items_per_user = self.run.cap
        self.capped_pairs: DataFrame | None = None
        self.info: DataFrame | None = None  # items removed (_removed) or biased (_b < 1)
        self._first_capped: DataFrame | None = None
        # without re-capping: the pairs left after the first removals, cached (see ``cap``)
        self._survivors: DataFrame | None = None
        self._items: DataFrame | None = None  # every item of the input, cached, ``_gone`` false
        # the last every-item round's noisy frame and what ``remove`` removed from it (or None)
        self._noisy_all: tuple[DataFrame, Any] | None = None
        self._gone_tracks_all = True  # ``_gone`` holds every removal so far
        self._recap: bool | None = None  # the first cap's choice, which every round keeps
        # a biased MAD round's rule while its weights are partial sums (see ``_noised``)
        self._partial_rule: Mad | None = None

    def release_degree_histogram(self, sigma: float) -> np.ndarray:
        """As the local runner's: the driver collects (degree, number of users) only."""
        degree, users = self.run.degree_counts()
        # degree_counts over the users, from (degree, users) without one entry per user
        bins = np.searchsorted(DEGREE_EDGES, degree, side="right") - 1
        exact = np.bincount(bins, weights=users, minlength=DEGREE_EDGES.size)
        rng = spawn_generator(self.run.entropy, HISTOGRAM_STREAM)
        self.run.accountant.compose(dp_accounting.GaussianDpEvent(sigma))
        return gaussian_on_grid(rng, exact, sigma, l2=1.0)

    def set_cap(self, cap: int) -> None:
        self.run.cap = self.max_items_per_user = cap

    def cap(self, *, recap: bool = True) -> None:
        run, F = self.run, _functions()
        if self.capped_pairs is None:
            self._recap = recap
            self.capped_pairs = self._first_capped = run.capped(run.pairs)
            return
        if recap != self._recap:  # pragma: no cover - a bug, never user input
            raise RuntimeError("A run re-caps in every round after the first, or in none.")
        # Without re-capping: the first capped sets minus every item removed so far (``info``
        # keeps them all), as the previous round's sets minus the new removals would be, with a
        # plan that does not nest every earlier round's (docs/partition.md, lineage).
        assert self._first_capped is not None  # set with capped_pairs by the first call
        source = self._first_capped if self._survivors is None else self._survivors
        # without re-capping no round orders by the user's hash: the survivors' cache holds it
        # only where the windows by user need it (:attr:`_SparkRun.user_keys`)
        base = run.pairs.select(*_BASE) if recap else source.select(*run.pair_columns())
        left = base
        if self.info is not None:
            left = (
                run.join_items(base, self.info, "left")
                .where(~F.coalesce(F.col("_removed"), F.lit(False)))  # Alg. 4 line 13
                .withColumn("_b", F.coalesce(F.col("_b"), F.lit(1.0)))
                .drop("_removed")
            )
        kept = (self._first_capped, self._survivors)  # cached for every later round
        if recap or all(self.capped_pairs is not k for k in kept):
            run.uncache(self.capped_pairs)  # done: their weights are computed and cached
        self.capped_pairs = run.capped(left, rank=recap)
        if not recap and self.info is not None and self._survivors is None:
            # The first round that removes items keeps the pairs that survive (28% of the
            # 9.5M capped pairs at 10M rows), cached by the round's own job as it reads them
            # (after the window that counts degrees, whose partitioning by user the cache keeps
            # for the later rounds' windows); later rounds read them instead of every capped
            # pair (their removals include this round's, so the result is the same).
            self.capped_pairs = self._survivors = run.cache(self.capped_pairs)

    def weights(self, rule: Basic | Mad, *, partials: bool = True) -> DataFrame:
        """A round's item weights; a biased MAD round's as partial sums (``partials``), added
        up and checked for truncation where they are noised (:meth:`_noised`)."""
        F = _functions()
        capped = self.capped_pairs
        assert capped is not None  # cap() runs before every round's weights
        self._partial_rule = None
        if isinstance(rule, Basic):
            return _basic_weights(capped)
        if rule.biased and "_b" not in capped.columns:
            capped = capped.withColumn("_b", F.lit(1.0))
        if rule.biased and partials:
            self._partial_rule = rule
        return _mad_weights(
            self.run,
            capped,
            tau=rule.tau,
            d_max=rule.d_max,
            biased=rule.biased,
            b_min=rule.b_min,
            b_max=rule.b_max,
            partials=rule.biased and partials,
        )

    def _noised(
        self, weights: DataFrame, call: Callable[..., tuple[DataFrame, DataFrame] | None]
    ) -> tuple[DataFrame, DataFrame]:
        """``call(weights, tau=...)``, a :meth:`_SparkRun.release`: for a biased MAD round's
        partial sums with the rule's tau to check, and when an item is truncated once more
        with the full Alg. 3's weights (the partial sums are those weights only when no item's
        w_init exceeds tau; the two paths give the same weights, so which one ran reveals
        nothing the release does not)."""
        rule, self._partial_rule = self._partial_rule, None
        if rule is None:
            out = call(weights)
        else:
            out = call(weights, tau=rule.tau)
            if out is None:
                out = call(self.weights(rule, partials=False))
        assert out is not None  # only a partial sums' check returns None
        return out

    def _carried(self) -> DataFrame:
        """Every item a later round can hold (of the input; of round 1 without re-capping) with
        ``_gone`` (removed so far) and the noisy weights of the earlier every-item rounds
        (``_x0, _x1, ...``): a projection of the last such round's checkpointed noisy frame
        (cached distinct items of the input before the first)."""
        F = _functions()
        if self._noisy_all is None:
            if self._items is None:
                self._items = self.run.cache(
                    with_bucket(self.run.pairs.select(_I, _HI).distinct()).withColumn(
                        "_gone", F.lit(False)
                    )
                )
            return self._items
        noisy, removed = self._noisy_all
        xs = [c for c in noisy.columns if c.startswith("_x")]
        gone = F.col("_gone") if removed is None else removed
        return noisy.select(*_ITEM, gone.alias("_gone"), *xs, F.col("_noisy").alias(f"_x{len(xs)}"))

    def release(
        self, weights: DataFrame, rnd: Round, *, every_item: bool = False
    ) -> tuple[DataFrame, DataFrame]:
        run = self.run
        if not every_item:
            return self._noised(weights, functools.partial(run.release, rnd))
        if self._noisy_all is None and self._recap is False:
            # Without re-capping, a later round holds only items of the first capped sets, all
            # present now: the other items' pure noise would never be read (nor released), so
            # this round noises its own items, with no distinct pass and join over the input.
            call = functools.partial(run.release, rnd, carry=True)
        else:
            call = functools.partial(run.release, rnd, all_items=self._carried())
        noisy, released = self._noised(weights, call)
        self._noisy_all = (noisy, None)
        return noisy, released

    def release_pooled(
        self, weights: DataFrame, rnd: Round, history: Sequence[DataFrame], test: PooledTest
    ) -> tuple[DataFrame, DataFrame]:
        items = self._carried()
        if sum(c.startswith("_x") for c in items.columns) != len(history):
            raise RuntimeError(  # pragma: no cover - a bug, never user input
                "The pooled test needs every earlier round's noisy weight of every item."
            )
        call = functools.partial(self.run.release, rnd, all_items=items, pooled=test)
        return self._noised(weights, call)

    def remove(self, noisy: DataFrame, decide: Decide) -> None:
        F = _functions()
        removed, bias = decide(F.col("_noisy"), F.col("_present"), _ColumnOps)
        bias = F.lit(1.0) if bias is None else bias
        if "_gone" in noisy.columns and self._gone_tracks_all:
            # an every-item round: its (checkpointed) frame knows every earlier removal
            removed = F.col("_gone") | removed
            if self._noisy_all is not None and self._noisy_all[0] is noisy:
                self._noisy_all = (noisy, removed)
            self.info = (
                noisy.select(_I, removed.alias("_removed"), bias.alias("_b"))
                .where(F.col("_removed") | (F.col("_b") < 1.0))
                .withColumn("_b", F.when(F.col("_removed"), 1.0).otherwise(F.col("_b")))
            )
            return
        self._gone_tracks_all = False
        info = noisy.select(_I, removed.alias("_removed"), bias.alias("_b")).where(
            F.col("_removed") | (F.col("_b") < 1.0)
        )
        if self.info is not None:  # items removed in earlier rounds stay removed
            info = (
                self.info.where(F.col("_removed"))
                .unionByName(info)
                .groupBy(_I)
                .agg(F.max("_removed").alias("_removed"), F.min("_b").alias("_b"))
            )
        info = info.withColumn("_b", F.when(F.col("_removed"), 1.0).otherwise(F.col("_b")))
        # the next rounds' plans start here, not at every earlier round (docs/partition.md)
        self.info = self.run.cut(info)

    def finish(
        self, released: Sequence[DataFrame], algorithm: str, parameters: dict[str, Any], plan: Plan
    ) -> SparkSelectionResult:
        return self.run.finish(released, algorithm, parameters, plan.budget, plan.gaussian_delta)

    def abort(self) -> None:
        self.run.abort()
