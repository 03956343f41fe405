"""Safe (grid-snapped) noise and the release-recording hook."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from userdp.exceptions import InvalidParameterError
from userdp.privacy import (
    SAFE_NOISE_INFLATION,
    NoiseSource,
    gaussian_on_grid,
    grid_noise_scale,
    grid_spacing,
    laplace_on_grid,
    record,
    recording,
)


def test_record_is_a_no_op_without_a_recorder():
    record("x", np.arange(3.0), l2=1.0)  # nothing to assert: it must not fail or store


def test_recording_copies_the_exact_value_with_its_sensitivity_and_labels():
    value = np.array([1.0, 2.0])
    with recording() as releases:
        record("counts", value, l1=2.0, linf=1.0, index=["a", "b"])
        value[0] = 99.0
    (rel,) = releases
    assert rel.statistic == "counts"
    assert rel.value.tolist() == [1.0, 2.0]
    assert (rel.l1, rel.l2, rel.linf) == (2.0, None, 1.0)
    assert rel.index.tolist() == ["a", "b"]


def test_nested_recorders_see_only_their_own_block():
    with recording() as outer:
        record("a", 1.0, l1=1.0)
        with recording() as inner:
            record("b", 2.0, l1=1.0)
        record("c", 3.0, l1=1.0)
    assert [r.statistic for r in outer] == ["a", "c"]
    assert [r.statistic for r in inner] == ["b"]


def test_add_gaussian_records_the_pre_noise_value_then_noises_it():
    noise = NoiseSource(seed=3)
    x = np.linspace(0.0, 1.0, 7)
    with recording() as releases:
        out = noise.add_gaussian(x, 0.5, statistic="s", l2=1.0, index=np.arange(7))
    assert releases[0].value.tolist() == x.tolist()
    assert releases[0].l2 == 1.0
    assert out.shape == x.shape
    assert not np.array_equal(out, x)


def test_add_laplace_of_a_scalar_returns_a_0d_array():
    out = NoiseSource(seed=1).add_laplace(0.25, 1.0, statistic="m", l1=1.0)
    assert out.shape == ()
    assert isinstance(float(out), float)


@pytest.mark.parametrize(
    ("sens", "size", "norm"),
    [(1.0, 1, "l1"), (3.7, 10, "l1"), (0.01, 4096, "l2"), (2.0, 409_600, "l2")],
)
def test_grid_is_the_largest_power_of_two_within_the_declared_inflation(sens, size, norm):
    # Independent computation in exact rational arithmetic.
    g = grid_spacing(sens, size, norm)
    assert math.frexp(g)[0] == 0.5  # a power of two
    eta = Fraction(SAFE_NOISE_INFLATION)
    if norm == "l1":
        ok = lambda gg: Fraction(gg) * size <= eta * Fraction(sens)  # noqa: E731
    else:
        ok = lambda gg: Fraction(gg) ** 2 * size <= (eta * Fraction(sens)) ** 2  # noqa: E731
    assert ok(g)
    assert not ok(2 * g)


@pytest.mark.parametrize(
    ("sens", "size", "norm", "scale"),
    [
        (1.0, 1, "l1", 2.0),
        (0.3, 50, "l1", 7.1),
        (1.0, 10_000 * 4096, "l2", 3.3),
        (5.0, 3, "l2", 1e-3),
        (0.7, 4097, "l2", 12.0),
    ],
)
def test_grid_noise_scale_keeps_the_noise_multiplier_exactly(sens, size, norm, scale):
    """new / (sens + g c) >= scale / sens in exact rational arithmetic, c = n or sqrt(n)."""
    g = grid_spacing(sens, size, norm)
    new = Fraction(grid_noise_scale(scale, sens, size, norm, g))
    s, d, gg = Fraction(scale), Fraction(sens), Fraction(g)
    # new * d >= s * (d + g c)  <=>  (new - s) * d >= s * g * c
    lhs = (new - s) * d / (s * gg)
    assert lhs > 0
    assert (lhs >= size) if norm == "l1" else (lhs * lhs >= size)
    assert new <= s * (1 + 2 * Fraction(SAFE_NOISE_INFLATION))


def test_snapped_neighbours_stay_within_the_inflated_sensitivity():
    rng = np.random.default_rng(0)
    n, sens = 1000, 1.0
    g = grid_spacing(sens, n, "l2")
    for _ in range(50):
        x = rng.normal(0, 100, n)
        d = rng.normal(0, 1, n)
        xp = x + d / np.linalg.norm(d) * sens
        dist = np.linalg.norm(np.rint(x / g) * g - np.rint(xp / g) * g)
        assert dist <= sens + g * math.sqrt(n)


@pytest.mark.parametrize("draw", [gaussian_on_grid, laplace_on_grid])
def test_every_output_lies_on_the_grid_whatever_the_input_bits(draw):
    rng = np.random.default_rng(5)
    x = rng.normal(0, 1, 1000) * 10.0 ** rng.integers(-3, 4, 1000)
    key = "l2" if draw is gaussian_on_grid else "l1"
    out = draw(rng, x, 1.0, **{key: 1.0})
    g = grid_spacing(1.0, x.size, key)
    assert np.all(out / g == np.rint(out / g))


def test_safe_noise_has_the_declared_spread():
    rng = np.random.default_rng(11)
    out = gaussian_on_grid(rng, np.zeros(200_000), 2.0, l2=1.0)
    assert abs(out.std() - 2.0) < 0.02
    out = laplace_on_grid(rng, np.full(200_000, 3.0), 0.5, l1=1.0)
    assert abs(out.mean() - 3.0) < 0.01
    assert abs(np.abs(out - 3.0).mean() - 0.5) < 0.01


def test_non_finite_statistics_are_refused():
    with pytest.raises(InvalidParameterError, match="non-finite"):
        gaussian_on_grid(np.random.default_rng(0), np.array([1.0, np.nan]), 1.0, l2=1.0)


@pytest.mark.parametrize("kind", ["gaussian", "laplace"])
def test_blockwise_release_equals_the_one_shot_formula(kind):
    """The fast kernel works in blocks; the reference draws all noise at once (same stream)."""
    x = np.random.default_rng(1).normal(0, 50, (3, 100_001))  # several blocks, ragged end
    sigma, sens = 2.5, 1.5
    norm = "l2" if kind == "gaussian" else "l1"
    g = grid_spacing(sens, x.size, norm)
    scale = grid_noise_scale(sigma, sens, x.size, norm, g)
    fast = (gaussian_on_grid if kind == "gaussian" else laplace_on_grid)(
        np.random.default_rng(9), x, sigma, **{norm: sens}
    )
    rng = np.random.default_rng(9)
    z = (rng.normal if kind == "gaussian" else rng.laplace)(0.0, scale / g, x.size)
    reference = (np.rint(x / g) + np.floor(z.reshape(x.shape) + 0.5)) * g
    assert np.array_equal(fast, reference)
