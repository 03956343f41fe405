"""An empirical-Bayes prior on the released item biases (post-processing of one SSP step).

In an SSP item update (Krichene et al. 2023, Algorithm 1; AM-SSP, Krichene et al. 2023b,
Algorithm 3) the bias coordinate ``z_i`` of item ``i`` (bias ``b_i = beta z_i``) is solved
with a ridge toward 0. For a tail item whose statistics are mostly noise that pulls its bias to
the centre, whatever its popularity says. Here the ridge of that coordinate pulls toward a
*pooled prior mean* instead, with a per-item strength set by how noisy the item's own
statistics are (a James-Stein / Efron-Morris shrinkage):

1. per item, the raw bias ``r_i = beta * b~_i[k] / a_i`` from the released moment's bias
   coordinate and the released Gram's bias diagonal ``a_i = max(A~_i[k, k], s_A)`` (floored
   at the Gram noise's standard deviation ``s_A``), and its sampling variance
   ``v_i = (beta^2 s_b^2 + r_i^2 s_A^2) / a_i^2 + s^2 / max(c_i, 1)`` (the noise of the moment
   and of the Gram, plus the ratings' spread ``s = half_width / 3`` over the released count);
2. a prior mean ``m_i = theta_0 + theta_1 x_i (+ f_i^T gamma)``: ``x_i = asinh(c_i / s_c)``
   (standardised; ``c_i`` the released count, ``s_c`` the count noise's standard deviation:
   log-like for large counts, linear and signed within the noise); ``theta`` is fitted on
   ``BINS`` bins of items sorted by ``x``, each bin one equal-weight point with its pooled
   ratio of sums ``beta * sum b~[k] / sum A~[k, k]`` (the noise averages out in the sums where
   a tail item's own ratio is noise); with public item features ``f_i``, ``gamma`` is a ridge
   fit of ``r_i - theta^T x_i`` weighted by ``1 / (v_i + tau^2)``; clipped to ``[-half_width,
   half_width]``;
3. the prior variance ``tau^2`` by moments: the mean of ``(r_i - m_i)^2 - v_i`` weighted by
   ``1 / (v_i + tau^2)^2`` (a fixed point, floored at a small positive value);
4. the bias coordinate's ridge becomes ``rho_i = a_i v_i / tau^2`` toward ``m_i / beta``, so
   its marginal solve is ``(tau^2 r_i + v_i m_i) / (tau^2 + v_i)``.

Privacy: every input is a released value (the step's noisy ``(A~, b~)``, the released counts)
or public (the noise scales of the plan, the rating range, public item features). The prior is
a function of them only, so the released model is post-processing of the same releases: the
dp-accounting event and every recorded release are unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from scipy import sparse

__all__ = ["BiasPrior", "bias_prior", "item_covariates", "solve_with_prior"]

#: Items per pooled bin of the prior mean's count trend: ``BINS`` bins (fewer for small item
#: sets, at least ``BIN_SIZE`` items each).
BINS = 20
BIN_SIZE = 50
#: Precision (in items) of the ridge on the public item features' coefficients.
FEATURE_RIDGE = 10.0
#: Rounds of the variance's fixed point.
ROUNDS = 4
#: The ratings' spread about an item's bias, as a fraction of the targets' half width.
SPREAD = 1.0 / 3.0


@dataclass(frozen=True)
class BiasPrior:
    """The fitted prior of one step: per-item mean (rating units), variance, bias ridge."""

    mean: np.ndarray
    variance: float
    ridge: np.ndarray
    coef: np.ndarray


def item_covariates(encoder: Any, max_values: int = 200) -> sparse.csr_matrix | None:
    """Public item features of an encoder as prior covariates: its row-normalised feature
    families of at most ``max_values`` values side by side (an id family, one value per item,
    would fit each item's own noise), or None for an encoder without such families."""
    blocks = []
    for fam in getattr(encoder, "families", None) or ():
        m = sparse.csr_matrix(fam.matrix, dtype=np.float64)
        if m.shape[1] > max_values:
            continue
        rows = np.asarray(m.sum(axis=1)).ravel()
        blocks.append(sparse.diags(1.0 / np.where(rows > 0, rows, 1.0)) @ m)
    return sparse.hstack(blocks, format="csr") if blocks else None


def bias_prior(
    gram_kk: np.ndarray,
    moment_k: np.ndarray,
    *,
    beta: float,
    counts: np.ndarray,
    count_sd: float,
    gram_sd: float,
    moment_sd: float,
    half: float,
    covariates: sparse.spmatrix | np.ndarray | None = None,
) -> BiasPrior:
    """The empirical-Bayes prior of the bias coordinate from one step's released statistics.

    ``gram_kk`` (m,) and ``moment_k`` (m,): the released Gram's bias diagonal and moment's bias
    coordinate; ``counts``: the released item counts; ``*_sd``: the noise's standard deviations
    (in the statistics' units); ``half``: the targets' bound. Steps 1-4 of the module docstring.
    """
    gram_kk = np.asarray(gram_kk, dtype=np.float64)
    moment_k = np.asarray(moment_k, dtype=np.float64)
    counts = np.asarray(counts, dtype=np.float64)
    a = np.maximum(gram_kk, max(gram_sd, 1e-12))
    raw = np.clip(beta * moment_k / a, -2.0 * half, 2.0 * half)  # a ratio of noisy values
    scale = max(count_sd, 1.0)
    spread = (half * SPREAD) ** 2
    var = (beta**2 * moment_sd**2 + raw**2 * gram_sd**2) / a**2
    var = var + spread / np.maximum(counts, scale)
    # The count trend: asinh(c / s_c) is log-like for large counts and linear (signed) within
    # the count noise, so a released count below the noise still says "rare".
    x = np.arcsinh(counts / scale)
    x = (x - x.mean()) / max(float(x.std()), 1e-12)
    X = np.column_stack([np.ones_like(x), x])
    # Fitted on pooled bins of similar released count, one equal-weight point each: a bin's
    # ratio of sums beta * sum b~ / sum A~ averages the noise out where an item's own ratio
    # is noise (tail items: their floored ratio says nothing, and a fit weighted by item
    # precision extrapolates the head's trend to them).
    n_bins = max(1, min(BINS, x.size // BIN_SIZE))
    groups = np.array_split(np.argsort(x, kind="stable"), n_bins)
    gx = np.array([X[g].mean(axis=0) for g in groups])
    gb = np.array(
        [
            beta
            * np.sum(moment_k[g])
            / max(float(np.sum(gram_kk[g])), math.sqrt(g.size) * gram_sd, 1e-12)
            for g in groups
        ]
    )
    coef = np.linalg.lstsq(gx, np.clip(gb, -half, half), rcond=None)[0]
    mean = X @ coef
    tau2 = max(float(np.var(raw - mean)), 1e-4 * spread)
    if covariates is not None:  # public item features: a ridge fit of what the trend leaves
        F = (
            cast(sparse.spmatrix, covariates).toarray()
            if sparse.issparse(covariates)
            else np.asarray(covariates)
        )
        w = 1.0 / (var + tau2)
        lhs = (F * w[:, None]).T @ F + FEATURE_RIDGE * float(np.mean(w)) * np.eye(F.shape[1])
        gamma = np.linalg.solve(lhs, (F * w[:, None]).T @ (raw - mean))
        mean = mean + F @ gamma
        coef = np.concatenate([coef, gamma])
    mean = np.clip(mean, -half, half)
    for _ in range(ROUNDS):  # tau^2 by moments, weights 1 / (v + tau^2)^2
        w2 = 1.0 / (var + tau2) ** 2
        tau2 = max(float(np.sum(w2 * ((raw - mean) ** 2 - var)) / np.sum(w2)), 1e-4 * spread)
    ridge = a * var / tau2
    return BiasPrior(mean=mean, variance=tau2, ridge=ridge, coef=coef)


def solve_with_prior(
    gram: np.ndarray, moment: np.ndarray, ridge: np.ndarray, prior: BiasPrior, beta: float
) -> np.ndarray:
    """``theta_i = (A_i + R_i)^-1 (b_i + R_i theta0_i)``: ``R_i`` is ``ridge_i`` on every
    coordinate but the last (the bias), ``prior.ridge_i`` there, and ``theta0_i`` is
    ``prior.mean_i / beta`` on the bias coordinate, 0 elsewhere. ``gram`` must be PSD."""
    m, k = gram.shape[0], gram.shape[1] - 1
    lhs = gram.copy()
    diag = np.broadcast_to(np.asarray(ridge, dtype=np.float64), (m,))
    idx = np.arange(k)
    lhs[:, idx, idx] += diag[:, None]
    lhs[:, k, k] += prior.ridge
    rhs = moment.copy()
    rhs[:, k] += prior.ridge * prior.mean / beta
    return np.linalg.solve(lhs, rhs[..., None])[..., 0]


def noise_sd(multiplier: float | None, l2: float) -> float:
    """The standard deviation of a release with noise multiplier ``multiplier`` (0 if None)."""
    return 0.0 if multiplier is None else float(multiplier) * float(l2)


def count_noise_sd(multiplier: float | None, count_sample: int) -> float:
    """The released counts' noise standard deviation (sensitivity ``sqrt(count_sample + 1)``)."""
    return noise_sd(multiplier, math.sqrt(int(count_sample) + 1))
