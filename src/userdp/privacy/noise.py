"""The one place userdp draws randomness from, and safe (grid-snapped) Gaussian/Laplace noise.

Cryptographic noise by default
------------------------------
Without a seed, every noise bit comes from a cryptographically secure generator: AES-128 in
counter mode (``randomgen.AESCounter``, AES-NI where the CPU has it) keyed with 128 bits of OS
entropy (``secrets``), one key per stream derived with keyed BLAKE2b. A statistic whose true
value is 0 (an item nobody rated) exposes its noise almost bit for bit; with a
non-cryptographic generator such as PCG64DXSM, outputs like these can reveal the generator's
state, hence the noise added to everything else. Recovering AES-CTR's key from its output is
as hard as breaking AES.

A fixed ``seed`` exists only for tests and reproducible benchmarks and keeps NumPy's
PCG64DXSM, seeded through ``SeedSequence`` exactly as before, so seeded results are
reproducible bit for bit across versions: a released output generated with a known seed
offers no privacy against anyone who knows the seed anyway. Which generator a stream uses is
fixed by its entropy (:func:`spawn_generator`): unseeded sources hold entropy ``>= 2^128``
(a marker bit above the 128 random bits), explicit seeds are below it.

Safe noise
----------
The textbook mechanism ``x + Z`` computed in floating point leaks ``x`` through the low bits of
the result: the set of floats reachable from ``x`` depends on ``x`` (Mironov 2012 for Laplace;
Jin et al. 2022, "Are we there yet? Timing and floating-point attacks on differential privacy
systems", for Gaussian). :func:`gaussian_on_grid` and :func:`laplace_on_grid` (used by
:meth:`NoiseSource.add_gaussian` / :meth:`NoiseSource.add_laplace`) release instead

    ``(rint(x / g) + floor(Z / g + 1/2)) * g``

with ``g`` a power of two fixed by the declared sensitivity and the statistic's size
(:func:`~userdp.privacy.calibrate.grid_spacing`). Every step is exact or a function of an exact
integer: ``x / g`` and ``(.) * g`` are exact (power-of-two scaling), ``rint`` makes an integer,
and the float sum of two integers is the correctly rounded exact sum. So the output is a
deterministic function (post-processing) of ``k + floor(Z/g + 1/2) = floor(k + Z/g + 1/2)``,
i.e. of the continuous mechanism applied to the snapped integer ``k = rint(x/g)``; the low bits
of ``x`` never enter a rounding. Snapping moves each coordinate by at most ``g/2``, so the snapped
statistic's sensitivity is the declared one plus ``g`` per coordinate (``g*sqrt(n)`` in l2,
``g*n`` in l1, for ``n`` coordinates); ``g`` is chosen so that this is at most a factor
``1 + 2^-12`` and the noise scale is multiplied by exactly that factor
(:func:`~userdp.privacy.calibrate.grid_noise_scale`). The noise multiplier, hence every privacy
event and the accountant, is unchanged.

What this covers and what it does not:

* Covered: the value of every numeric release made through these helpers (means, counts,
  coefficients, Gram/moment stacks, weights before a threshold): its low bits carry no
  information about the exact statistic beyond what the ideal mechanism reveals.
* The noise ``Z`` itself is NumPy's float sampler (``normal``/``laplace`` on the bits above), not an
  exact discrete sampler; it is data-independent and is only used at resolution ``g``, which is
  about 2^17 of its own ulps or more (41M values, noise multiplier 100, |Z| up to 10 sigma), so
  its residual deviation from the ideal rounded distribution is a data-independent error of
  that relative order per grid cell (plus the sampler's own tail accuracy), not a channel for
  the input's bits. A vetted exact sampler would remove it at a large cost in time (OpenDP
  0.16's ``make_gaussian`` on floats: ~100 s per 10^6 values here, against ~0.03 s for NumPy);
  userdp does not depend on one.
* Only statistics whose sensitivity is declared get this guarantee: the grid and the inflation
  are computed from the declared bound, so an understated bound is a privacy bug that safe
  noise does not mask (the auditor, :mod:`userdp.audit`, looks for those).
* Released sets (partition selection) expose no float bits, but their threshold decisions
  ``X >= rho`` are only as good as the noise compared with ``rho``; the rounds' noisy weights
  are grid-snapped (one public grid for every item, bucket and engine:
  :class:`userdp.partition.rounds.Round`), so each decision is a function of the snapped
  mechanism's output, and ``rho`` covers the snapping
  (:func:`~userdp.privacy.calibrate.partition_threshold` with ``grid``). GreedyUpdate's
  Laplace weights are the exception (textbook float noise, see its docstring).
* Exponential-mechanism releases (quantiles) draw an index into a public grid
  (:mod:`userdp.estimate.quantile`): the output is a grid point, a function of the index and
  public parameters. The selection probabilities are float64 (exact up to rounding; a run of
  points below about ``2^-53`` of the mass may be unreachable), not an exact sampler such as
  Ilvento 2020's base-2 mechanism. Their utility vectors and grids are recorded for the auditor.
* Timing side channels are not addressed.
"""

from __future__ import annotations

import hashlib
import math
import secrets

import numpy as np
from numpy.typing import ArrayLike

from userdp._validation import check_int, check_real
from userdp.exceptions import InvalidParameterError
from userdp.privacy.calibrate import grid_noise_scale, grid_spacing
from userdp.privacy.recording import is_recording, record, released

__all__ = [
    "SECRET_ENTROPY",
    "NoiseSource",
    "add_on_grid",
    "gaussian_on_grid",
    "laplace_on_grid",
    "snap_to_grid",
    "spawn_generator",
]

_SALT_KEY = 0x5A17
_STREAM_KEY = 0x57EA
#: Entropy at or above this marks a secret (unseeded) source: its streams use the CSPRNG.
SECRET_ENTROPY = 1 << 128


def _derive(entropy: int, key: tuple[int, ...], size: int = 16) -> bytes:
    """``size`` bytes of BLAKE2b keyed with ``entropy``, for stream (or salt) ``key``: a PRF,
    so keys of different streams are independent and reveal nothing about ``entropy``."""
    mac = hashlib.blake2b(
        repr(tuple(int(k) for k in key)).encode(),
        digest_size=size,
        key=entropy.to_bytes((entropy.bit_length() + 7) // 8 or 1, "little"),
        person=b"userdp-noise",
    )
    return mac.digest()


def _secret_generator(entropy: int, key: tuple[int, ...]) -> np.random.Generator:
    """AES-128-CTR generator (randomgen's ``AESCounter``) keyed by ``_derive(entropy, key)``."""
    from randomgen import AESCounter  # imported here: seeded runs do not need it

    return np.random.Generator(AESCounter(key=int.from_bytes(_derive(entropy, key), "little")))


def spawn_generator(entropy: int, key: tuple[int, ...]) -> np.random.Generator:
    """Generator for sub-stream ``key`` of ``entropy``.

    AES-128-CTR keyed from ``entropy`` and ``key`` when ``entropy >= SECRET_ENTROPY`` (an
    unseeded :class:`NoiseSource`); otherwise (an explicit seed, for tests) PCG64DXSM seeded by
    ``SeedSequence(entropy, spawn_key=(_STREAM_KEY, *key))``. A plain function of picklable
    arguments, so Spark executors can call it and draw what the local engine draws.
    """
    if entropy >= SECRET_ENTROPY:
        return _secret_generator(entropy, (_STREAM_KEY, *key))
    seq = np.random.SeedSequence(entropy, spawn_key=(_STREAM_KEY, *key))
    return np.random.Generator(np.random.PCG64DXSM(seq))


def snap_to_grid(value: ArrayLike, grid: float) -> np.ndarray:
    """``rint(value / grid)`` as float64 integers (exact: ``grid`` is a power of two).

    Raises :class:`~userdp.exceptions.InvalidParameterError` on non-finite values (they cannot
    be released with calibrated noise).

    Examples
    --------
    >>> snap_to_grid([0.3, -1.26], 0.5).tolist()
    [1.0, -3.0]
    """
    x = np.asarray(value, dtype=np.float64)
    k = np.array(x / grid, dtype=np.float64)
    # One reduction instead of a boolean temporary; the exact check only if the sum is not finite.
    if not math.isfinite(float(k.sum())) and not np.all(np.isfinite(k)):
        raise InvalidParameterError(
            "A statistic to be noised has non-finite values (or values too large for its grid); "
            "check the inputs' bounds."
        )
    return np.rint(k, out=k)


_CHUNK = 1 << 16  # values per block: the temporaries stay in cache (41M values: ~1.0x naive)


def _release_on_grid(
    rng: np.random.Generator, x: np.ndarray, grid: float, unit_scale: float, kind: str
) -> np.ndarray:
    """``(rint(x/g) + floor(Z/g + 1/2)) * g`` with ``Z/g`` drawn at scale ``unit_scale = s/g``.

    Drawing at scale ``s/g`` gives exactly ``Z/g`` (scaling by a power of two commutes with
    rounding); ``x * (1/g)`` is exact; every later step is exact or a function of an integer.
    Works block by block; the generator is consumed exactly as by one call over all values.
    """
    flat = x.reshape(-1)
    out = np.empty(flat.size, dtype=np.float64)
    inv = 1.0 / grid  # exact: a power of two
    draw = rng.normal if kind == "gaussian" else rng.laplace
    for a in range(0, flat.size, _CHUNK):
        o = out[a : a + _CHUNK]
        np.multiply(flat[a : a + _CHUNK], inv, out=o)
        # One reduction instead of a boolean temporary; the exact check only if not finite.
        if not math.isfinite(float(o.sum())) and not np.all(np.isfinite(o)):
            raise InvalidParameterError(
                "A statistic to be noised has non-finite values (or values too large for its "
                "grid); check the inputs' bounds."
            )
        np.rint(o, out=o)
        z = draw(0.0, unit_scale, o.size)
        z += 0.5
        np.floor(z, out=z)
        o += z
        o *= grid
    return out.reshape(x.shape)


def add_on_grid(value: ArrayLike, noise: ArrayLike, grid: float) -> np.ndarray:
    """``(rint(value / grid) + floor(noise / grid + 1/2)) * grid`` for noise drawn elsewhere.

    The arithmetic of :func:`gaussian_on_grid` with the noise given (for example a test's
    substitute noise), so that a run with injected noise takes the same rounding path as the
    product. ``grid`` must be a power of two.

    Examples
    --------
    >>> add_on_grid([0.3, -1.26], [0.2, 0.76], 0.5).tolist()
    [0.5, -0.5]
    """
    k = snap_to_grid(value, grid)
    z = np.asarray(noise, dtype=np.float64) * (1.0 / grid)
    return (k + np.floor(z + 0.5)) * grid


def gaussian_on_grid(
    rng: np.random.Generator,
    value: ArrayLike,
    sigma: float,
    *,
    l2: float,
    size: int | None = None,
) -> np.ndarray:
    """Safe Gaussian mechanism: ``value`` snapped to a power-of-two grid plus grid-valued noise.

    A pure function of picklable arguments (usable on Spark executors with a generator from
    :func:`spawn_generator`).

    Parameters
    ----------
    rng : numpy.random.Generator
        Source of the noise.
    value : array_like
        The exact statistic (any shape).
    sigma : float
        Noise scale calibrated for l2 sensitivity ``l2`` (before the grid inflation).
    l2 : float
        Declared l2 sensitivity of ``value`` under add/remove one user.
    size : int or None, default=None
        Number of coordinates the grid is fixed for (default: ``value``'s size). A public bound
        on the size of the whole statistic lets its pieces be noised separately on ONE grid
        (e.g. a Spark bucket of items at a time); ``value`` may not have more coordinates.

    Returns
    -------
    ndarray
        Same shape as ``value`` (0-d for a scalar); every entry a multiple of the grid.

    Privacy
    -------
    Post-processing of the Gaussian mechanism with scale ``sigma * (1 + g*sqrt(n)/l2)`` applied
    to the snapped statistic, whose l2 sensitivity is ``<= l2 + g*sqrt(n)``: the same noise
    multiplier ``sigma / l2`` as declared (see the module docstring).
    """
    s = check_real(sigma, "sigma", "gaussian_on_grid", low=0.0, low_open=True)
    d = check_real(l2, "l2", "gaussian_on_grid", low=0.0, low_open=True)
    x = np.asarray(value, dtype=np.float64)
    n = x.size if size is None else check_int(size, "size", "gaussian_on_grid", low=max(x.size, 1))
    g = grid_spacing(d, n, "l2")
    return _release_on_grid(rng, x, g, grid_noise_scale(s, d, n, "l2", g) / g, "gaussian")


def laplace_on_grid(
    rng: np.random.Generator, value: ArrayLike, scale: float, *, l1: float
) -> np.ndarray:
    """Safe Laplace mechanism: ``value`` snapped to a power-of-two grid plus grid-valued noise.

    Same contract as :func:`gaussian_on_grid` with l1 sensitivity: post-processing of the
    Laplace mechanism with scale ``scale * (1 + g*n/l1)`` on the snapped statistic, whose l1
    sensitivity is ``<= l1 + g*n``, so ``scale / l1`` (hence epsilon) is as declared.
    """
    b = check_real(scale, "scale", "laplace_on_grid", low=0.0, low_open=True)
    d = check_real(l1, "l1", "laplace_on_grid", low=0.0, low_open=True)
    x = np.asarray(value, dtype=np.float64)
    g = grid_spacing(d, x.size, "l1")
    return _release_on_grid(rng, x, g, grid_noise_scale(b, d, x.size, "l1", g) / g, "laplace")


def _frozen(state: object) -> object:
    """A hashable copy of a bit generator's state dict (arrays as bytes)."""
    if isinstance(state, dict):
        return tuple((k, _frozen(v)) for k, v in sorted(state.items()))
    if isinstance(state, np.ndarray):
        return state.tobytes()
    return state


def _fingerprint(rng: np.random.Generator) -> int | None:
    """Hash of ``rng``'s state while a recorder is active (None otherwise)."""
    if not is_recording():
        return None
    # The whole state, including the buffered 32-bit half, for any bit generator.
    return hash(_frozen(rng.bit_generator.state))


class NoiseSource:
    """Gaussian/Laplace noise and random keys from one stream: a CSPRNG unless seeded.

    Parameters
    ----------
    seed : int or None, default=None
        ``None`` (the default): AES-128-CTR keyed from 128 bits of OS entropy (see the module
        docstring). An explicit integer makes the stream reproducible (PCG64DXSM, for seeds
        below ``2^128``): for tests and reproducible benchmarks only.
    """

    def __init__(self, seed: int | None = None) -> None:
        if seed is None:
            entropy = SECRET_ENTROPY | secrets.randbits(128)
            self.seeded = False
        else:
            entropy = check_int(seed, "seed", "NoiseSource", low=0)
            self.seeded = True
        self.entropy: int = entropy
        if entropy >= SECRET_ENTROPY:
            self._rng = _secret_generator(entropy, ())
        else:
            self._rng = np.random.Generator(np.random.PCG64DXSM(np.random.SeedSequence(entropy)))

    @property
    def salt(self) -> int:
        """A secret signed 64-bit key for keyed hashing (degree capping), fixed per source.

        Derived from the entropy on its own spawn key, so it is independent of the noise
        streams (keyed BLAKE2b for an unseeded source); the local and Spark engines derive the
        same salt from the same seed.
        """
        if self.entropy >= SECRET_ENTROPY:
            return int.from_bytes(_derive(self.entropy, (_SALT_KEY,), 8), "little", signed=True)
        (bits,) = np.random.SeedSequence(self.entropy, spawn_key=(_SALT_KEY,)).generate_state(
            1, np.uint64
        )
        return int(bits.view(np.int64))

    def stream(self, *key: int) -> np.random.Generator:
        """An independent generator for sub-stream ``key`` (for example (round, bucket)).

        Lets distributed workers draw their share of the noise from the secret entropy without
        one sequential stream (:func:`spawn_generator`: AES-CTR with a derived key, or
        PCG64DXSM from ``SeedSequence(entropy, spawn_key=key)`` when seeded).
        """
        return spawn_generator(self.entropy, key)

    def add_gaussian(
        self,
        value: ArrayLike,
        sigma: float,
        *,
        statistic: str,
        l2: float,
        index: ArrayLike | None = None,
        linf: float | None = None,
        neighbours: str = "add-remove",
        stream: tuple[int, ...] | None = None,
        size: int | None = None,
        thresholded: bool = False,
    ) -> np.ndarray:
        """Record ``value`` (see :func:`~userdp.privacy.recording.record`), then release it
        with safe Gaussian noise of scale ``sigma`` (:func:`gaussian_on_grid`).

        ``l2`` is the declared l2 sensitivity under add/remove one user (or under
        ``neighbours="replace-values"``; ``linf`` optionally), ``statistic`` a stable name and
        ``index`` the labels of the first axis, for the auditor. ``stream`` draws the noise
        from the sub-stream :meth:`stream` ``(*stream)`` instead of the main one (so the
        randomness does not depend on what was drawn before); ``size`` fixes the grid for that
        many coordinates (see :func:`gaussian_on_grid`). ``thresholded``: the output is only
        compared with a threshold (its labels may be the data's; see
        :class:`~userdp.privacy.recording.Release`). Returns an array of ``value``'s shape
        (0-d for a scalar).
        """
        rng = self._rng if stream is None else self.stream(*stream)
        if is_recording():  # the grid gaussian_on_grid uses, declared for the auditor
            n = np.size(value) if size is None else size
            grid = grid_spacing(
                check_real(l2, "l2", "add_gaussian", low=0.0, low_open=True), max(int(n), 1), "l2"
            )
            record(
                statistic,
                value,
                l2=l2,
                linf=linf,
                index=index,
                neighbours=neighbours,
                rng_state=_fingerprint(rng),
                grid=grid,
                thresholded=thresholded,
            )
        return released(statistic, gaussian_on_grid(rng, value, sigma, l2=l2, size=size))

    def add_laplace(
        self,
        value: ArrayLike,
        scale: float,
        *,
        statistic: str,
        l1: float,
        index: ArrayLike | None = None,
        linf: float | None = None,
        neighbours: str = "add-remove",
    ) -> np.ndarray:
        """Record ``value``, then release it with safe Laplace noise of scale ``scale``
        (:func:`laplace_on_grid`); ``l1`` is the declared l1 sensitivity."""
        if is_recording():  # the grid laplace_on_grid uses, declared for the auditor
            d = check_real(l1, "l1", "add_laplace", low=0.0, low_open=True)
            grid = grid_spacing(d, max(np.size(value), 1), "l1")
            record(
                statistic,
                value,
                l1=l1,
                linf=linf,
                index=index,
                neighbours=neighbours,
                rng_state=self.fingerprint(),
                grid=grid,
            )
        return released(statistic, laplace_on_grid(self._rng, value, scale, l1=l1))

    def fingerprint(self) -> int | None:
        """Hash of the generator state while a recorder is active (None otherwise): the auditor
        compares it between runs to tell whether randomness was consumed identically."""
        return _fingerprint(self._rng)

    def gaussian(self, sigma: float, size: int) -> np.ndarray:
        """``size`` i.i.d. N(0, sigma^2) draws as float64 (raw: prefer :meth:`add_gaussian`)."""
        return self._rng.normal(0.0, sigma, size)

    def laplace(self, scale: float, size: int) -> np.ndarray:
        """``size`` i.i.d. Laplace(0, scale) draws as float64 (raw: prefer :meth:`add_laplace`)."""
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

    def integers(self, high: int, size: int) -> np.ndarray:
        """``size`` uniform integers in ``[0, high)`` as int64 (exact, unbiased)."""
        return self._rng.integers(0, high, size, dtype=np.int64)
