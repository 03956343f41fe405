"""The released cells of a GROUP BY from its noisy vectors: counts as non-negative integers and
means as ratios, each with its 95% noise interval (post-processing of released values)."""

from __future__ import annotations

import numpy as np

#: The two-sided 95% quantile of the standard normal, for the per-cell intervals.
Z95 = 1.959963984540054
#: Metrics that count (users, rows): released as non-negative integers (post-processing).
INTEGER_METRICS = ("users", "count")


def count_cells(name: str, noisy: np.ndarray, sd: float) -> dict[str, np.ndarray]:
    """A count's column and its 95% interval ``noisy +- Z95 sd`` (the Gaussian noise's), as
    non-negative integers: rounding and clipping at 0 are post-processing, and a count's true
    value, being >= 0, lies in the clipped interval whenever it lies in the raw one. The
    interval covers the noise only: it holds the weighted (bounded) count, which is the true
    count when no user is scaled down, and is biased low by what heavy users lose."""
    return {
        name: np.maximum(np.rint(noisy), 0),
        f"{name}_low": np.maximum(np.floor(noisy - Z95 * sd), 0),
        f"{name}_high": np.maximum(np.ceil(noisy + Z95 * sd), 0),
    }


def mean_cells(
    noisy_sum: np.ndarray,
    noisy_count: np.ndarray,
    sd_sum: float,
    sd_count: float,
    centre: float,
    bounds: tuple[float, float],
) -> dict[str, np.ndarray]:
    """The mean's column (:func:`ratio_mean`) and its 95% interval by the delta method, from
    released values and public noise scales only: ``m +- Z95 sqrt(sd_S^2 + (m - c)^2 sd_N^2)
    / N``, clipped to the bounds (the whole bounds where the noisy count is <= 0). It covers
    the weighted mean ``c + S / N`` to first order in ``sd_N / N``: close to 95% once a key's
    count is several noise sd's, wider or narrower below."""
    m = ratio_mean(noisy_sum, noisy_count, centre, bounds)
    with np.errstate(divide="ignore", invalid="ignore"):
        half = Z95 * np.sqrt(sd_sum**2 + ((m - centre) * sd_count) ** 2) / noisy_count
    half = np.where(noisy_count > 0, half, np.inf)
    return {
        "mean": m,
        "mean_low": np.clip(m - half, bounds[0], bounds[1]),
        "mean_high": np.clip(m + half, bounds[0], bounds[1]),
    }


def ratio_mean(
    noisy_sum: np.ndarray, noisy_count: np.ndarray, centre: float, bounds: tuple[float, float]
) -> np.ndarray:
    """The released mean per key: ``centre + noisy_sum / noisy_count`` clipped to ``bounds``,
    the bounds' midpoint where the noisy count is <= 0. Both inputs are noisy releases, so
    the ratio is post-processing (the auditor checks that it stays one under replay)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        m = np.where(noisy_count > 0, centre + noisy_sum / noisy_count, centre)
    return np.clip(m, bounds[0], bounds[1])
