"""The noise of the Spark runner's rounds, drawn on the executors: the per-bucket noise sources
and the ``mapInPandas`` body that joins a round's weights to its carried items and noises them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from userdp.data.encoding import run_bounds
from userdp.partition._spark_weights import _HI, _I, _IB, _ITEM, sum_per_item
from userdp.partition.rounds import WEIGHT_GRID, WEIGHT_GRID_ITEMS
from userdp.privacy.noise import add_on_grid, gaussian_on_grid, spawn_generator

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


class _ExecutorNoise:
    """Safe Gaussian noise for one bucket of items, drawn on an executor.

    Picklable (it holds only the run's 128-bit entropy); bucket ``b`` of round ``r`` uses its own
    PCG64DXSM stream ``SeedSequence(entropy, spawn_key=(r, b))``. Every bucket releases its
    weights with the pure :func:`~userdp.privacy.gaussian_on_grid` on the ONE grid of the run,
    fixed for :data:`~userdp.partition.rounds.WEIGHT_GRID_ITEMS` coordinates (not for the
    bucket's size), exactly as the local runner does for all items at once.
    """

    def __init__(self, entropy: int) -> None:
        self.entropy = entropy

    def __call__(
        self, round_index: int, bucket: int, items: pd.Series, weights: np.ndarray, sigma: float
    ) -> np.ndarray:
        rng = spawn_generator(self.entropy, (round_index, bucket))
        return gaussian_on_grid(rng, weights, sigma, l2=1.0, size=WEIGHT_GRID_ITEMS)


class _TapNoise:
    """Noise from a test tap's per-item function (see :class:`userdp.partition.runner.Tap`),
    added on the run's grid as the local runner adds it."""

    def __init__(self, noise: Any) -> None:
        self.noise = noise

    def __call__(
        self, round_index: int, bucket: int, items: pd.Series, weights: np.ndarray, sigma: float
    ) -> np.ndarray:
        noise = np.asarray(self.noise(round_index, items.tolist(), sigma), dtype=float)
        return add_on_grid(weights, noise, WEIGHT_GRID)


def _join_sides(
    how: str, carried: Sequence[str], pdf: pd.DataFrame, partial: bool = False
) -> pd.DataFrame:
    """One partition's round weights (rows with ``_side`` 0: ``_i, _hi, _ib, _w``) joined on
    the item with its carried item rows (``_side`` 1: ``_i, _hi, _ib`` and ``carried``), as
    ``_i, _hi, _ib, _w, _present, *carried``: every carried item, with weight 0 and
    ``_present`` false when the round does not hold it (``how="left"``), or the round's items
    that are carried (``how="inner"``). The partition holds whole noise buckets, so both rows
    of an item. ``partial``: the weights are partial sums with their w_init (``_wi``), added
    up per item first (:func:`sum_per_item`); ``_wi`` joins the output (0 when absent)."""
    side = pdf["_side"].to_numpy()
    own = ["_w", "_wi"] if partial else ["_w"]
    weights = pdf.loc[side == 0, [*_ITEM, *own]]
    if partial:
        weights = sum_per_item(weights)
    items = pdf.loc[side == 1, [*_ITEM, *carried]]
    if how == "left":
        out = items.merge(weights[[_I, *own]], on=_I, how="left", sort=False)
        out["_present"] = out["_w"].notna().to_numpy()
        for c in own:
            out[c] = out[c].fillna(0.0)
    else:
        out = weights.merge(items[[_I, *carried]], on=_I, how="inner", sort=False)
        out["_present"] = True
    return out[[*_ITEM, "_w", "_present", *carried, *own[1:]]].reset_index(drop=True)


def _add_noise(
    noise: Any,
    round_index: int,
    sigma: float,
    pdf: pd.DataFrame,
    join: tuple[str, Sequence[str]] | None = None,
    partial: bool = False,
) -> pd.DataFrame:
    """``mapInPandas`` body (via :func:`~userdp.spark.whole_partition`): noisy weight of every
    item of the partition (Alg. 1 line 7), whose buckets are whole (a shuffle by bucket just
    before). Each bucket draws from its own stream over its items in ``_hi`` order, so an item's
    noise does not depend on which buckets share its partition. ``join`` (how, carried
    columns): the partition holds the round's weights and the carried items as two sides of a
    union, joined here first (:func:`_join_sides`): the one shuffle by bucket serves the join
    and the noise. ``partial``: the weights are partial sums with their w_init, added up per
    item here first (:func:`sum_per_item`; the output keeps ``_wi`` for the caller's check)."""
    if join is not None:
        pdf = _join_sides(join[0], join[1], pdf, partial)
        if pdf.empty:  # no item of the round among the carried items of these buckets
            return pdf.assign(_noisy=np.zeros(0))
    elif partial:
        pdf = sum_per_item(pdf)
    order = np.lexsort((pdf[_HI].to_numpy(), pdf[_IB].to_numpy()))  # by bucket, then item hash
    pdf = pdf.iloc[order].reset_index(drop=True)
    buckets = pdf[_IB].to_numpy()
    weights = pdf["_w"].to_numpy(dtype=float)
    noisy = np.empty(len(pdf))
    for a, b in zip(*run_bounds(buckets), strict=True):
        items = pdf[_I].iloc[a:b]
        noisy[a:b] = noise(round_index, int(buckets[a]), items, weights[a:b], sigma)
    return pdf.assign(_noisy=noisy)
