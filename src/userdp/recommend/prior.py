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
2. a prior mean ``m_i = x_i^T theta`` by weighted ridge regression of ``r`` on the covariates
   ``x_i = [1, log max(c_i, s_c), public item features]`` (``c_i``: the released count,
   floored at the count noise's standard deviation ``s_c``; a weak ridge on every coefficient
   but the intercept), weights ``1 / (v_i + tau^2)``, clipped to ``[-half_width, half_width]``;
3. the prior variance ``tau^2`` by moments: the weighted mean of ``(r_i - m_i)^2 - v_i``
   (floored at a small positive value), iterated with step 2;
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
from typing import Any

import numpy as np
from scipy import sparse

__all__ = ["BiasPrior", "bias_prior", "item_covariates", "solve_with_prior"]

#: Precision (in items) of the weak ridge on the non-intercept coefficients of the prior mean.
SLOPE_RIDGE = 10.0
#: Rounds of the (mean, variance) fixed point.
ROUNDS = 4


@dataclass(frozen=True)
class BiasPrior:
    """The fitted prior of one step: per-item mean (rating units), variance, bias ridge."""

    mean: np.ndarray
    variance: float
    ridge: np.ndarray
    coef: np.ndarray


def item_covariates(encoder: Any) -> sparse.csr_matrix | None:
    """Public item features of an encoder as prior covariates (row-normalised feature families
    side by side), or None for an encoder without public features (an id encoder)."""
    families = getattr(encoder, "families", None)
    if not families:
        return None
    blocks = []
    for fam in families:
        m = sparse.csr_matrix(fam.matrix, dtype=np.float64)
        rows = np.asarray(m.sum(axis=1)).ravel()
        blocks.append(sparse.diags(1.0 / np.where(rows > 0, rows, 1.0)) @ m)
    return sparse.hstack(blocks, format="csr")


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
    a = np.maximum(np.asarray(gram_kk, dtype=np.float64), max(gram_sd, 1e-12))
    raw = beta * np.asarray(moment_k, dtype=np.float64) / a
    raw = np.clip(raw, -2.0 * half, 2.0 * half)  # a ratio of two noisy values: bound it
    c = np.maximum(np.asarray(counts, dtype=np.float64), max(count_sd, 1.0))
    spread = (half / 3.0) ** 2
    var = (beta**2 * moment_sd**2 + raw**2 * gram_sd**2) / a**2 + spread / c
    cols: list[Any] = [np.ones_like(c), np.log(c)]
    X = np.column_stack(cols)
    if covariates is not None:
        F = covariates.toarray() if sparse.issparse(covariates) else np.asarray(covariates)
        X = np.column_stack([X, F])
    p = X.shape[1]
    pen = np.full(p, SLOPE_RIDGE)
    pen[0] = 0.0
    tau2 = max(float(np.var(raw)), 1e-6)
    coef = np.zeros(p)
    mean = np.zeros_like(raw)
    for _ in range(ROUNDS):
        w = 1.0 / (var + tau2)
        # Weak ridge scaled to the weights' typical size so it means "about SLOPE_RIDGE items".
        lhs = (X * w[:, None]).T @ X + np.diag(pen * float(np.mean(w)))
        coef = np.linalg.lstsq(lhs, (X * w[:, None]).T @ raw, rcond=None)[0]
        mean = np.clip(X @ coef, -half, half)
        w2 = w**2
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
