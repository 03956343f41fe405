"""The weighted exponential mechanism of the quantiles, over a public output grid.

The grid (multiples of the resolution inside the bounds, :func:`make_grid`), the utility
``u(x) = -|W(x) - q W|`` at its points (:func:`grid_utility`, noise-free), and one draw of an
index into it (:func:`exponential_mechanism`); docs/estimate.md ("Quantiles") has the argument.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from userdp.exceptions import InvalidParameterError
from userdp.privacy.noise import NoiseSource
from userdp.privacy.recording import is_recording, record, released

_AUDIT_GRID = 1025  # grid points at which the utility is recorded for auditing
_DEFAULT_CELLS = 20  # default resolution: the largest power of two <= (upper - lower) / 2^20
_MAX_INDEX = 2**52  # grid indices j must be exact in float64 (|j| <= 2^52)


@dataclass(frozen=True)
class Grid:
    """The public output grid: the points ``float(j) * step`` for ``first <= j <= last``."""

    step: float
    first: int
    last: int

    @property
    def size(self) -> int:
        return self.last - self.first + 1

    def point(self, j: int | np.ndarray) -> float | np.ndarray:
        """Grid point(s) of index ``j`` (a function of ``j`` and the public step only)."""
        return np.asarray(j, dtype=np.float64) * self.step

    def codes(self, values: np.ndarray) -> np.ndarray:
        """For each value, ``j - first`` of the first grid point at or above it (``size`` if
        none): a record counts in ``W(x_j)`` iff its code is ``<= j - first``."""
        c = np.ceil(values / self.step)  # within one of the exact answer; corrected below
        c -= (c - 1.0) * self.step >= values
        c += c * self.step < values
        return np.clip(c - self.first, 0, self.size).astype(np.int64)


def default_resolution(bounds: tuple[float, float]) -> float:
    """The largest power of two at most ``(upper - lower) / 2^20`` (the default grid step).

    Examples
    --------
    >>> default_resolution((0.0, 10.0)) == 2.0**-17
    True
    """
    _, e = math.frexp((float(bounds[1]) - float(bounds[0])) * 2.0**-_DEFAULT_CELLS)
    return math.ldexp(1.0, e - 1)


def make_grid(bounds: tuple[float, float], resolution: float | None, caller: str) -> Grid:
    """The grid of ``bounds`` at ``resolution`` (public values only); refuses unusable ones."""
    lo, hi = float(bounds[0]), float(bounds[1])
    step = default_resolution((lo, hi)) if resolution is None else float(resolution)
    if max(abs(lo), abs(hi)) / step > _MAX_INDEX:
        raise InvalidParameterError(
            f"The 'resolution' parameter of {caller} is too fine for bounds {(lo, hi)!r}: the "
            f"output grid's indices must stay below 2^52 in magnitude. Got {step!r} instead."
        )
    first, last = math.ceil(lo / step), math.floor(hi / step)
    first += first * step < lo  # exact float comparisons: the grid lies inside the bounds
    last -= last * step > hi
    if first > last:
        raise InvalidParameterError(
            f"The 'resolution' parameter of {caller} must leave at least one multiple of it "
            f"inside bounds {(lo, hi)!r}. Got {step!r} instead."
        )
    return Grid(step, first, last)


# -- the mechanism (noise-free kernel + one draw) ------------------------------------------------
def grid_utility(at: np.ndarray, sorted_codes: np.ndarray, cum: np.ndarray, q: float) -> np.ndarray:
    """``u(x_j) = -|sum_{code_i <= j} w_i - q sum_i w_i|`` at grid offsets ``at`` (codes
    sorted, ``cum`` the cumulative weights in that order, starting at 0).

    Adding or removing a user whose weights sum to ``t <= h`` moves ``u`` by at most
    ``max(q, 1 - q) h`` at every point; with normalised weights and a replaced user, by at
    most that user's weight (docs/estimate.md, "Quantiles").
    """
    below = np.searchsorted(sorted_codes, at, side="right")  # records counted at x_j
    return -np.abs(cum[below] - q * cum[-1])


def exponential_mechanism(
    sorted_codes: np.ndarray,
    sorted_weights: np.ndarray,
    q: float,
    *,
    epsilon: float,
    sensitivity: float,
    grid: Grid,
    noise: NoiseSource,
    neighbours: str = "add-remove",
) -> float:
    """One draw from ``P(x_j) ~ exp(epsilon u(x_j) / (2 sensitivity))`` over the grid.

    The runs of grid offsets ``[s_k, s_{k+1})`` cut at the records' codes have constant
    utility ``u(s_k)``; one is picked by inverse CDF in log space with probability proportional
    to ``(s_{k+1} - s_k) exp(epsilon u_k / (2 sensitivity))``, then an offset uniformly inside
    it. Only the index is drawn; the output is the grid point it names.
    """
    size = grid.size
    cum = np.concatenate([[0.0], np.cumsum(sorted_weights)])
    starts = np.unique(np.concatenate([[0], sorted_codes[sorted_codes < size]]))
    counts = np.diff(np.append(starts, size))
    u = grid_utility(starts, sorted_codes, cum, q)
    logp = np.log(counts) + (epsilon / (2.0 * sensitivity)) * u
    if is_recording():  # for the auditor: u at public grid points, and the grid itself
        at = np.unique(np.round(np.linspace(0, size - 1, min(size, _AUDIT_GRID))).astype(np.int64))
        record(
            "quantile.utility",
            grid_utility(at, sorted_codes, cum, q),
            linf=sensitivity,
            index=grid.point(grid.first + at),
            neighbours=neighbours,
            rng_state=noise.fingerprint(),
            grid=grid.step,
        )
    cdf = np.cumsum(np.exp(logp - logp.max()))
    draw = noise.uniform(1)[0] * cdf[-1]
    k = min(int(np.searchsorted(cdf, draw, side="right")), counts.size - 1)
    j = grid.first + int(starts[k]) + int(noise.integers(int(counts[k]), 1)[0])
    return float(released("quantile.utility", np.array([grid.point(j)]))[0])
