"""The one place userdp draws randomness from.

By default a generator is seeded from the operating system's CSPRNG (``secrets``). A fixed
``seed`` exists only for tests and reproducible benchmarks: a released output generated with a
known seed offers no privacy against anyone who knows the seed.
"""

from __future__ import annotations

import secrets

import numpy as np

from userdp._validation import check_int

__all__ = ["NoiseSource", "spawn_generator"]

_SALT_KEY = 0x5A17
_STREAM_KEY = 0x57EA


def spawn_generator(entropy: int, key: tuple[int, ...]) -> np.random.Generator:
    """PCG64DXSM generator for sub-stream ``key`` of the 128-bit ``entropy``.

    A plain function of picklable arguments, so Spark executors can call it.
    """
    seq = np.random.SeedSequence(entropy, spawn_key=(_STREAM_KEY, *key))
    return np.random.Generator(np.random.PCG64DXSM(seq))


class NoiseSource:
    """Gaussian/Laplace noise and random keys from one PCG64DXSM stream.

    Parameters
    ----------
    seed : int or None, default=None
        ``None`` (the default) seeds from 128 bits of OS entropy. An explicit integer makes the
        stream reproducible: for tests and reproducible benchmarks only.
    """

    def __init__(self, seed: int | None = None) -> None:
        if seed is None:
            entropy = secrets.randbits(128)
            self.seeded = False
        else:
            entropy = check_int(seed, "seed", "NoiseSource", low=0)
            self.seeded = True
        self.entropy: int = entropy
        self._rng = np.random.Generator(np.random.PCG64DXSM(np.random.SeedSequence(entropy)))

    @property
    def salt(self) -> int:
        """A secret signed 64-bit key for keyed hashing (degree capping), fixed per source.

        Derived from the entropy on its own spawn key, so it is independent of the noise
        streams; the local and Spark engines derive the same salt from the same seed.
        """
        (bits,) = np.random.SeedSequence(self.entropy, spawn_key=(_SALT_KEY,)).generate_state(
            1, np.uint64
        )
        return int(bits.view(np.int64))

    def stream(self, *key: int) -> np.random.Generator:
        """An independent generator for sub-stream ``key`` (for example (round, bucket)).

        Lets distributed workers draw their share of the noise from the secret entropy without
        one sequential stream: ``SeedSequence(entropy, spawn_key=key)`` seeds PCG64DXSM.
        """
        return spawn_generator(self.entropy, key)

    def gaussian(self, sigma: float, size: int) -> np.ndarray:
        """``size`` i.i.d. N(0, sigma^2) draws as float64."""
        return self._rng.normal(0.0, sigma, size)

    def laplace(self, scale: float, size: int) -> np.ndarray:
        """``size`` i.i.d. Laplace(0, scale) draws as float64."""
        return self._rng.laplace(0.0, scale, size)

    def random_bits(self, size: int, bits: int) -> np.ndarray:
        """``size`` uniform integers in ``[0, 2**bits)`` as uint64 (``1 <= bits <= 63``)."""
        return self._rng.integers(0, 1 << bits, size, dtype=np.uint64)

    def permutation(self, n: int) -> np.ndarray:
        """A uniformly random permutation of ``range(n)``."""
        return self._rng.permutation(n)

    def uniform(self, size: int) -> np.ndarray:
        """``size`` uniform floats in [0, 1)."""
        return self._rng.random(size)
