"""Noise bits come from AES-128-CTR unless a seed is given; seeded runs keep PCG64DXSM."""

from __future__ import annotations

import numpy as np
import pytest
from randomgen import AESCounter

from userdp.privacy.noise import SECRET_ENTROPY, NoiseSource, spawn_generator
from userdp.privacy.recording import recording


def test_an_unseeded_source_draws_every_stream_from_aes_ctr():
    source = NoiseSource()
    assert not source.seeded and source.entropy >= SECRET_ENTROPY
    assert isinstance(source._rng.bit_generator, AESCounter)
    assert isinstance(source.stream(1, 2).bit_generator, AESCounter)
    assert isinstance(spawn_generator(source.entropy, (0, 3)).bit_generator, AESCounter)


def test_two_unseeded_sources_differ_and_their_streams_are_distinct():
    a, b = NoiseSource(), NoiseSource()
    assert a.entropy != b.entropy and a.salt != b.salt
    assert not np.array_equal(a.gaussian(1.0, 8), b.gaussian(1.0, 8))
    assert not np.array_equal(a.stream(0, 1).random(4), a.stream(0, 2).random(4))
    assert not np.array_equal(a.stream(0, 1).random(4), a.stream(1, 0).random(4))


def test_executors_rebuild_an_unseeded_stream_from_the_entropy_alone():
    # What the Spark runner relies on: the entropy (picklable) fixes every sub-stream.
    source = NoiseSource()
    expected = source.stream(2, 7).normal(size=5)
    np.testing.assert_array_equal(spawn_generator(source.entropy, (2, 7)).normal(size=5), expected)
    assert -(2**63) <= source.salt < 2**63 and source.salt == source.salt


def test_seeded_sources_are_bit_for_bit_the_previous_pcg64dxsm_streams():
    seed = 12345
    old = np.random.Generator(np.random.PCG64DXSM(np.random.SeedSequence(seed)))
    np.testing.assert_array_equal(NoiseSource(seed).gaussian(2.0, 16), old.normal(0.0, 2.0, 16))
    seq = np.random.SeedSequence(seed, spawn_key=(0x57EA, 1, 4))
    old_stream = np.random.Generator(np.random.PCG64DXSM(seq))
    np.testing.assert_array_equal(NoiseSource(seed).stream(1, 4).random(6), old_stream.random(6))
    (bits,) = np.random.SeedSequence(seed, spawn_key=(0x5A17,)).generate_state(1, np.uint64)
    assert NoiseSource(seed).salt == int(bits.view(np.int64))


def test_safe_noise_from_the_csprng_has_the_declared_scale_and_stays_on_its_grid():
    source = NoiseSource()
    with recording() as rel:
        out = source.add_gaussian(np.zeros(20_000), 3.0, statistic="zeros", l2=1.0)
    assert rel[0].grid is not None and rel[0].rng_state is not None
    np.testing.assert_array_equal(np.rint(out / rel[0].grid) * rel[0].grid, out)
    assert np.std(out) == pytest.approx(3.0, rel=0.03)
    lap = source.add_laplace(np.zeros(20_000), 2.0, statistic="zeros", l1=1.0)
    assert np.mean(np.abs(lap)) == pytest.approx(2.0, rel=0.04)
