"""Quantiles are released on a public grid: the float-bit reachability attack finds nothing.

The attack: draw many outputs on D and on its neighbour D' (one user added) and count the
outputs of one side that the mechanism could not produce on the other. A continuous draw
``edge + U * length`` leaks through its float bits (its reachable floats depend on the data's
edges); a draw of an index into a grid fixed by public parameters cannot.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from userdp.estimate.quantile import (
    default_resolution,
    sample_limited_quantile,
    weighted_quantile,
)
from userdp.exceptions import InvalidParameterError
from userdp.privacy.recording import recording

BOUNDS = (-10.0, 10.0)
D_VALUES = np.r_[np.arange(-10, 0), np.arange(1, 11)].astype(np.float64)  # 20 users, one each
D_USERS = np.arange(20)
DP_VALUES = np.append(D_VALUES, 0.3)  # D' = D plus one user holding 0.3
DP_USERS = np.arange(21)
DRAWS = 4000
CUTOFF = 2.0**-53  # a point less likely than this (relative) may be unreachable in float64


@functools.lru_cache(maxsize=64)
def log_probabilities(values, h, delta, step):
    """Reference log-probability (q = 1/2, epsilon = 1, one value per user, so every weight is
    ``min(h, 1)``) of every grid point ``j * step`` in BOUNDS, from the definition
    ``u(x) = -|sum_{y_i <= x} w_i - q W|``, and the grid's first index."""
    first, last = math.ceil(BOUNDS[0] / step), math.floor(BOUNDS[1] / step)
    points = np.arange(first, last + 1) * step
    weights = np.full(len(values), min(h, 1.0))
    below = np.zeros(points.size)
    for y, w in zip(values, weights, strict=True):
        below += w * (y <= points)
    logp = -np.abs(below - 0.5 * weights.sum()) / (2.0 * delta)
    return logp - np.logaddexp.reduce(logp), first


def draws(fn, values, users, h):
    """DRAWS releases (seeds 0..DRAWS-1) with the grid each run declared to the recorder."""
    out, grids, steps = [], set(), set()
    for seed in range(DRAWS):
        with recording() as rel:
            res = fn(values, users, q=0.5, epsilon=1.0, bounds=BOUNDS, h=h, seed=seed)
        (em,) = [r for r in rel if r.statistic == "quantile.utility"]
        assert em.output is not None and em.output[0] == res.estimate
        grids.add(em.grid)
        steps.add(res.resolution)
        out.append((res.estimate, float(res.h), float(res.sensitivity)))
    assert grids == steps and len(steps) == 1  # one grid, fixed by the public parameters
    return out, steps.pop()


def unreachable(outputs, values, step):
    """How many ``outputs`` the mechanism run on ``values`` cannot produce: off the grid, or
    on a point whose probability there is below the float64 cutoff."""
    count = 0
    for x, h, delta in outputs:
        j = round(x / step)
        logp, first = log_probabilities(tuple(values), h, delta, step)
        on_grid = float(j) * step == x and 0 <= j - first < logp.size
        if not on_grid or logp[j - first] < math.log(CUTOFF):
            count += 1
    return count


@pytest.mark.parametrize("fn", [weighted_quantile, sample_limited_quantile])
@pytest.mark.parametrize("h", [1, None])
def test_no_output_on_a_neighbour_is_unreachable_from_the_other_side(fn, h):
    on_d, step = draws(fn, D_VALUES, D_USERS, h)
    on_dp, step_dp = draws(fn, DP_VALUES, DP_USERS, h)
    assert step == step_dp == default_resolution(BOUNDS)
    # Reachability on D is judged with the h and Delta of each D' draw (h is public or
    # released; with one value per user the weights only depend on it).
    assert unreachable(on_dp, D_VALUES, step) == 0
    assert unreachable(on_d, DP_VALUES, step) == 0
    # The checker does see float bits: the next float after a grid point is unreachable.
    x, hh, delta = on_dp[0]
    assert unreachable([(np.nextafter(x, 20.0), hh, delta)], D_VALUES, step) == 1


def test_a_given_resolution_is_the_grid_and_is_declared():
    rng = np.random.default_rng(0)
    users = rng.integers(0, 50, 300)
    values = rng.uniform(0, 5, 300)
    for fn in (weighted_quantile, sample_limited_quantile):
        with recording() as rel:
            res = fn(
                values, users, q=[0.2, 0.9], epsilon=1.0, bounds=(0.05, 5.0), resolution=0.1, seed=3
            )
        assert res.resolution == 0.1
        assert [r.grid for r in rel if r.statistic == "quantile.utility"] == [0.1, 0.1]
        k = np.rint(res.estimate / 0.1)
        np.testing.assert_array_equal(k * 0.1, res.estimate)
        assert np.all((res.estimate >= 0.05) & (res.estimate <= 5.0))


def test_huge_epsilon_picks_a_grid_point_where_the_weighted_cdf_crosses_q():
    # q W = 2.5; the points 3.0, 3.5, 4.0 have two records at or below them (|2 - 2.5| = 1/2),
    # every other point of the 0.5-grid at least 1.5 away.
    values = np.array([1.3, 2.6, 4.1, 4.2, 9.9])
    found = {
        weighted_quantile(
            values,
            np.arange(5),
            q=0.5,
            epsilon=1e6,
            bounds=(0, 10),
            h=1.0,
            resolution=0.5,
            seed=seed,
        ).estimate
        for seed in range(30)
    }
    assert found == {3.0, 3.5, 4.0}


def test_default_resolution_is_a_power_of_two_about_a_millionth_of_the_range():
    assert default_resolution((0.0, 10.0)) == 2.0**-17
    assert default_resolution((0.5, 5.0)) == 2.0**-18
    assert default_resolution((-1.0, 1.0)) == 2.0**-19


@pytest.mark.parametrize(
    ("bounds", "resolution", "match"),
    [
        ((0.1, 0.2), 1.0, "at least one multiple"),
        ((0.0, 1e6), 1e-12, "too fine"),
        ((0.0, 1.0), 0.0, "'resolution' parameter"),
        ((0.0, 1.0), -0.5, "'resolution' parameter"),
        ((0.0, 1.0), float("nan"), "'resolution' parameter"),
    ],
)
def test_unusable_resolutions_are_refused_before_the_data_are_read(bounds, resolution, match):
    with pytest.raises(InvalidParameterError, match=match):
        weighted_quantile([0.5], [1], q=0.5, epsilon=1.0, bounds=bounds, resolution=resolution)
