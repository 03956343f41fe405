"""The floating-point attack on the Laplace mechanism (Mironov 2012), tried on a mean release.

Two neighbouring datasets (one user removed) have exact means ``x0 != x1``. Releases are made
with epsilon so small (0.001) that the ideal mechanism lets any classifier win with probability at
most ``e^0.001 / (1 + e^0.001) ~ 0.50025``. The attacker knows ``x0``, ``x1`` and NumPy's Laplace
sampler (``loc +- scale * log(v)``, ``v`` a multiple of 2^-52 in (0, 1], see
numpy/random/src/distributions/distributions.c ``random_laplace``) and asks, for each output
``y``, which hypothesis can produce exactly this float. The textbook float mechanism is told
apart (the test asserts it, so it can fail); the grid-snapped release of
:meth:`NoiseSource.add_laplace` is not (accuracy within a binomial band of 1/2). Issue 12.
"""

from __future__ import annotations

import math

import numpy as np

from userdp.privacy import NoiseSource

TWO52 = 2.0**52
RELEASES = 2000  # per hypothesis


def _reachable(y: np.ndarray, loc: float, scale: float, window: int = 64) -> np.ndarray:
    """Whether NumPy's ``laplace(loc, scale)`` can output exactly ``y`` (searched near the
    inverse of the sampler; ``math.log`` is the C library's ``log`` that NumPy calls)."""
    out = np.zeros(y.size, dtype=bool)
    for i, yi in enumerate(y.tolist()):
        s = yi - loc
        k0 = round(math.exp(-abs(s) / scale) * TWO52)
        for k in range(max(k0 - window, 1), min(k0 + window, int(TWO52)) + 1):
            t = scale * math.log(k / TWO52)
            if ((loc - t) if s >= 0 else (loc + t)) == yi:
                out[i] = True
                break
    return out


def _attack_accuracy(y0: np.ndarray, y1: np.ndarray, x0: float, x1: float, scale: float) -> float:
    ys = np.concatenate([y0, y1])
    truth = np.repeat([0, 1], [y0.size, y1.size])
    r0, r1 = _reachable(ys, x0, scale), _reachable(ys, x1, scale)
    coin = np.random.default_rng(0).integers(0, 2, ys.size)
    guess = np.where(r0 & ~r1, 0, np.where(r1 & ~r0, 1, coin))
    return float(np.mean(guess == truth))


def _neighbouring_means() -> tuple[float, float, float]:
    """Exact means of a dataset in [0, 1] and of the same without its first user."""
    rng = np.random.default_rng(12)
    per_user = rng.uniform(0.0, 1.0, 100)  # one value per user
    return float(per_user.mean()), float(per_user[1:].mean()), 1.0 / 99  # l1 sensitivity


def test_low_bits_of_textbook_float_laplace_reveal_the_input():
    x0, x1, sens = _neighbouring_means()
    scale = sens / 1e-3
    rng = np.random.default_rng(1)
    y0 = rng.laplace(x0, scale, RELEASES)
    y1 = rng.laplace(x1, scale, RELEASES)
    assert _attack_accuracy(y0, y1, x0, x1, scale) > 0.65


def test_low_bits_of_safe_laplace_do_not_reveal_the_input():
    x0, x1, sens = _neighbouring_means()
    scale = sens / 1e-3
    noise = NoiseSource(seed=2)

    def releases(x: float) -> np.ndarray:
        return np.array(
            [float(noise.add_laplace(x, scale, statistic="mean", l1=sens)) for _ in range(RELEASES)]
        )

    y0, y1 = releases(x0), releases(x1)
    accuracy = _attack_accuracy(y0, y1, x0, x1, scale)
    band = 4.0 * math.sqrt(0.25 / (2 * RELEASES))  # 4 binomial sds (+ the ideal 0.00025)
    assert abs(accuracy - 0.5) <= band + 0.00025
