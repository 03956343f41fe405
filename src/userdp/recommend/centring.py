"""The centring value ratings are shifted by before factorizing (Krichene et al. 2023,
Section 5's private mean): a declared number, the rating range's midpoint, or a private mean
over at most ``count_sample`` ratings per user, released by a Gaussian of l2 sensitivity
sqrt(2) (:func:`mean_statistics`)."""

from __future__ import annotations

import math

import numpy as np

from userdp.data.ratings import Ratings
from userdp.multitask.allocation import row_keys, sample_per_user
from userdp.privacy.noise import NoiseSource

__all__ = ["centre", "centre_all", "mean_statistics"]


def centre(
    values: np.ndarray,
    users: np.ndarray,
    lo: float,
    hi: float,
    *,
    center: str | float,
    count_sample: int,
    noise_multiplier: float | None,
    noise: NoiseSource,
    keys: np.ndarray | None = None,
) -> float:
    """The value ratings are centred on: a number, the range's midpoint, or a private mean.

    Without ``noise_multiplier`` (non-private training) ``"private-mean"`` is the exact mean.
    The private mean takes at most ``count_sample`` ratings per user: ``(sum / (k * hw),
    count / k)`` has l2 sensitivity sqrt(2) under adding or removing a user (hw: half the
    range's width, ratings shifted by its midpoint), released with noise sd ``z * sqrt(2)``
    per coordinate, a ``GaussianDpEvent(z)``.
    """
    if not isinstance(center, str):
        return float(np.clip(center, lo, hi))
    mid = 0.5 * (lo + hi)
    if noise_multiplier is None:
        return float(values.mean()) if center == "private-mean" and values.size else mid
    if center == "midpoint":
        return mid
    keep = sample_per_user(users, count_sample, noise, keys=keys)
    sd = noise_multiplier * math.sqrt(2.0)
    total, count = noise.add_gaussian(
        mean_statistics(values[keep], lo, hi, count_sample), sd,
        statistic="private mean (sum, count)", l2=math.sqrt(2.0),
    )  # fmt: skip
    if count <= 0:
        return mid
    return float(np.clip(mid + total * 0.5 * (hi - lo) / count, lo, hi))


def centre_all(
    ratings: Ratings,
    lo: float,
    hi: float,
    *,
    center: str | float,
    count_sample: int,
    noise_multiplier: float | None,
    noise: NoiseSource,
) -> float:
    """:func:`centre` over all of ``ratings``, items outside the model's item set included.

    The centre is one number: it names no item, and each user still adds at most
    ``count_sample`` ratings, so its sensitivity is as in :func:`centre`; using every rating
    keeps it accurate when the item set is small (a private selection on few users). Each
    user's sample is keyed by their own (user, item) labels.
    """
    keys = None
    if noise_multiplier is not None and center == "private-mean":
        keys = row_keys(
            ratings.users, ratings.items, ratings.user_labels, ratings.item_labels, noise.salt
        )
    return centre(
        np.clip(ratings.values, lo, hi), ratings.users, lo, hi, center=center,
        count_sample=count_sample, noise_multiplier=noise_multiplier, noise=noise, keys=keys,
    )  # fmt: skip


def mean_statistics(kept: np.ndarray, lo: float, hi: float, count_sample: int) -> np.ndarray:
    """The private mean's exact statistic ``(sum (r - mid) / (k hw), count / k)``.

    ``kept`` are ratings in [lo, hi], at most ``k = count_sample`` per user. One user adds at
    most k ratings with ``|r - mid| <= hw``, so each coordinate moves by at most 1 and the
    vector by at most sqrt(2) in l2 (tested by adding random users).
    """
    mid, hw = 0.5 * (lo + hi), 0.5 * (hi - lo)
    return np.array([np.sum(kept - mid) / (count_sample * hw), kept.size / count_sample])
