"""Floating-point attacks on the Laplace (Mironov 2012) and Gaussian (Jin et al. 2022, "Are we
there yet? Timing and floating-point attacks on differential privacy systems") mechanisms, tried
on a mean release.

Two neighbouring datasets (one user removed) have exact means ``x0 != x1``. Releases are made
with so much noise that the ideal mechanism lets any classifier win with probability at most
~0.50025 (Laplace at epsilon 0.001; Gaussian with sigma 1000 times the sensitivity). The attacker
knows ``x0``, ``x1``, the noise scale and how the textbook release is computed in floats, and
asks, for each output ``y``, which hypothesis can produce exactly this float (or more often).
The textbook float mechanism is told apart (the tests assert it, so they can fail); the
grid-snapped releases of :meth:`NoiseSource.add_laplace` / :meth:`NoiseSource.add_gaussian` are
not (accuracy within a binomial band of 1/2).

Laplace: NumPy's sampler is ``loc +- scale * log(v)``, ``v`` a multiple of 2^-52 in (0, 1] (see
numpy/random/src/distributions/distributions.c ``random_laplace``), sparse in the tails.

Gaussian: ``x + rng.normal(0, s)`` is ``fl(x + fl(s * z))``. Whatever float ``z`` the sampler
(ziggurat, Box-Muller) gives, ``fl(s * z)`` misses some floats in every binade where the
significand of ``s`` times that of ``z`` stays below 2 (``s`` times one float step is more than
one step there) and hits others twice; adding ``x`` shifts that pattern by an amount that depends
on ``x``'s low bits. The attack counts, for each hypothesis, the floats ``z`` (each weighted by
its spacing, i.e. its mass under a smooth density) with ``fl(x + fl(s * z)) == y``, and picks the
hypothesis with more. It assumes nothing of the sampler beyond smoothness, so it is weaker than
the Laplace attack: ~0.60 accuracy (about 1 output in 6 is unreachable from the wrong
hypothesis, Jin et al.'s reachability test), against ~0.78 for Laplace.
"""

from __future__ import annotations

import math

import numpy as np

from userdp.privacy import NoiseSource
from userdp.privacy.calibrate import grid_noise_scale, grid_spacing

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


# -- Gaussian (Jin et al. 2022) ------------------------------------------------------------------
SIGMA_MULTIPLIER = 1000.0  # ideal Gaussian accuracy <= Phi(1 / (2 * 1000)) ~ 0.5002


def _floats_around(a: np.ndarray, k: int) -> np.ndarray:
    """The floats ``a`` and its ``k`` neighbours on each side, one row per entry of ``a``."""
    out, up, down = [a], a, a
    for _ in range(k):
        up, down = np.nextafter(up, np.inf), np.nextafter(down, -np.inf)
        out += [up, down]
    return np.stack(out, axis=1)


def _float_preimages(y: np.ndarray, x: float, sigma: float) -> np.ndarray:
    """Mass of the floats ``z`` with ``fl(x + fl(sigma * z)) == y``: each counted with its
    spacing (its probability under a smooth density, up to the density's value, which is the
    same for both hypotheses to ~1e-3). Zero when ``y`` cannot be reached from ``x``."""
    noise = _floats_around(y - x, 3)  # the candidate values of fl(sigma * z)
    sums = (x + noise) == y[:, None]
    mass = np.zeros(y.size)
    for j in range(noise.shape[1]):
        z = _floats_around(noise[:, j] / sigma, 3)
        hit = (sigma * z == noise[:, j][:, None]) & sums[:, j][:, None]
        mass += (hit * np.spacing(np.abs(z))).sum(axis=1)
    return mass


def _gaussian_attack_accuracy(
    y0: np.ndarray, y1: np.ndarray, x0: float, x1: float, sigma: float
) -> float:
    ys = np.concatenate([y0, y1])
    truth = np.repeat([0, 1], [y0.size, y1.size])
    m0, m1 = _float_preimages(ys, x0, sigma), _float_preimages(ys, x1, sigma)
    coin = np.random.default_rng(0).integers(0, 2, ys.size)
    guess = np.where(m0 > m1, 0, np.where(m1 > m0, 1, coin))
    return float(np.mean(guess == truth))


def test_low_bits_of_textbook_float_gaussian_reveal_the_input():
    x0, x1, sens = _neighbouring_means()  # 1/99 is the l2 sensitivity too (one value per user)
    sigma = SIGMA_MULTIPLIER * sens
    rng = np.random.default_rng(1)
    y0 = x0 + rng.normal(0.0, sigma, RELEASES)
    y1 = x1 + rng.normal(0.0, sigma, RELEASES)
    # the model is sound: every output is reachable from the input that produced it
    assert (_float_preimages(y0, x0, sigma) > 0).all()
    assert (_float_preimages(y1, x1, sigma) > 0).all()
    # ~0.60 measured (10 seeds: 0.590-0.603); 4 binomial sds of 1/2 are 0.032
    assert _gaussian_attack_accuracy(y0, y1, x0, x1, sigma) > 0.56


def test_low_bits_of_safe_gaussian_do_not_reveal_the_input():
    x0, x1, sens = _neighbouring_means()
    sigma = SIGMA_MULTIPLIER * sens
    noise = NoiseSource(seed=2)

    def releases(x: float) -> np.ndarray:
        return np.array(
            [
                float(noise.add_gaussian(x, sigma, statistic="mean", l2=sens))
                for _ in range(RELEASES)
            ]
        )

    y0, y1 = releases(x0), releases(x1)
    band = 4.0 * math.sqrt(0.25 / (2 * RELEASES))  # 4 binomial sds (+ the ideal 0.0002)
    # the attack needs the exact float scale: try the nominal one and the one the library draws
    # at (sigma grown for the grid, a public function of sigma and the sensitivity)
    grid = grid_spacing(sens, 1, "l2")
    for scale in (sigma, grid_noise_scale(sigma, sens, 1, "l2", grid)):
        accuracy = _gaussian_attack_accuracy(y0, y1, x0, x1, scale)
        assert abs(accuracy - 0.5) <= band + 0.0002, scale
