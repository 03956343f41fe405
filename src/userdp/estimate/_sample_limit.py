"""Sample limiting for label-private regression (Epasto et al., NeurIPS 2020, Section 5.2).

The baseline :class:`~userdp.estimate.LabelPrivateLinearRegression` compares GWA with: OLS on
``min(h, s_l)`` random records of each user, ``C^s = (U^T U)^-1 U^T`` expanded with zero columns
for the dropped records, so ``C^s X = I`` and ``GWA_{C^s}`` (Algorithm 3) is the sample-limiting
algorithm. :func:`best_limit_h_regression` chooses ``h`` by Section 5.2's total variance on one
nested random sample. Everything here reads only public values (the design, the partition and
the planning parameters); the release itself is in :mod:`userdp.estimate.regression`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import linalg

from userdp._validation import check_arguments
from userdp.estimate._gwa import NONNEGATIVE, _as_codes, _check_rank
from userdp.estimate.weighting import check_features, limit_mask
from userdp.exceptions import DataError, InvalidParameterError
from userdp.privacy.noise import NoiseSource

__all__ = [
    "BEST_LIMIT_H_REGRESSION_PARAMETERS",
    "SAMPLE_LIMIT_DESIGN_PARAMETERS",
    "SampleLimitDesign",
    "best_limit_h_regression",
    "sample_limit_design",
]

_FULL_CANDIDATES = 256  # best_limit_h_regression tries every h up to this size, then a grid


def _check_noise_source(value: object, name: str, caller: str) -> None:
    """Rule for ``noise``: a :class:`~userdp.privacy.NoiseSource` (or None)."""
    if not isinstance(value, NoiseSource):
        raise InvalidParameterError(
            f"The {name!r} parameter of {caller} must be a NoiseSource or None. "
            f"Got {value!r} instead."
        )


_NOISE: dict[str, Any] = {"check": _check_noise_source, "none": True, "cli": False}
#: Rules for every keyword of :func:`sample_limit_design`.
SAMPLE_LIMIT_DESIGN_PARAMETERS: dict[str, dict[str, Any]] = {
    "h": {"int": True, "low": 1},
    "noise": _NOISE,
}
#: Rules for every keyword of :func:`best_limit_h_regression`.
BEST_LIMIT_H_REGRESSION_PARAMETERS: dict[str, dict[str, Any]] = {
    "noise_variance": NONNEGATIVE,
    "laplace_unit": NONNEGATIVE,
    "noise": _NOISE,
}


# -- the design -----------------------------------------------------------------
@dataclass(frozen=True)
class SampleLimitDesign:
    """Sample limiting's estimator: OLS on ``min(h, s_l)`` random records of each user.

    Attributes
    ----------
    h : int
        The threshold.
    keep : bool ndarray, shape (n,)
        The records kept (a uniformly random ``min(h, s_l)`` of user ``l``'s).
    matrix : ndarray, shape (d, n)
        ``C^s = (U^T U)^-1 U^T`` expanded to n columns, zero for dropped records (Section 5.2),
        so ``C^s X = I`` and ``GWA_{C^s}`` is the sample-limiting algorithm.
    """

    h: int
    keep: np.ndarray
    matrix: np.ndarray


def _within_user_rank(codes: np.ndarray, sizes: np.ndarray, noise: NoiseSource) -> np.ndarray:
    """A uniformly random order of each user's records: rank 0 .. s_l - 1 per record.

    The construction of :func:`~userdp.estimate.weighting.limit_mask` (31-bit random keys,
    one sort by ``(user, key)``), so ``rank < h`` is a sample-limiting mask for every ``h`` at
    once and the masks are nested in ``h``.
    """
    n = codes.size
    keys = (codes << 31) | noise.random_bits(n, 31).astype(np.int64)
    order = np.argsort(keys)
    starts = np.cumsum(sizes) - sizes
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n, dtype=np.int64) - starts[codes[order]]
    return rank


def _ols_on(x: np.ndarray, keep: np.ndarray) -> np.ndarray | None:
    """``(U^T U)^-1 U^T`` on the kept rows, expanded with zero columns; None if rank-deficient."""
    u = x[keep]
    d = x.shape[1]
    if u.shape[0] < d:
        return None
    q, r = np.linalg.qr(u)
    diag = np.abs(np.diag(r))
    if np.linalg.matrix_rank(r) < d or diag.min() <= 0:
        return None
    rinv = linalg.solve_triangular(r, np.eye(d))
    c_keep = rinv @ q.T
    for _ in range(2):  # exact projection onto C U = I, as in _Design.project
        c_keep = c_keep - ((c_keep @ u - np.eye(d)) @ rinv) @ q.T
    c = np.zeros((d, x.shape[0]))
    c[:, keep] = c_keep
    return c


def _limit_candidates(s_max: int) -> np.ndarray:
    """Every h in 1..s_max when s_max <= 256; else 1..64 and a geometric grid up to s_max."""
    if s_max <= _FULL_CANDIDATES:
        return np.arange(1, s_max + 1)
    grid = np.round(np.geomspace(64, s_max, _FULL_CANDIDATES - 64)).astype(np.int64)
    return np.unique(np.concatenate([np.arange(1, 65), grid, [s_max]]))


def _best_limit(
    x: np.ndarray,
    codes: np.ndarray,
    sizes: np.ndarray,
    noise_variance: float,
    laplace_unit: float,
    noise: NoiseSource,
) -> SampleLimitDesign:
    """Minimise Section 5.2's total variance over h on one nested random sample."""
    d = x.shape[1]
    rank = _within_user_rank(codes, sizes, noise)
    by_rank = np.argsort(rank, kind="stable")
    cands = _limit_candidates(int(sizes.max()))
    ends = np.searchsorted(rank[by_rank], cands)  # records with rank < h come first
    xs, cs = x[by_rank], codes[by_rank]  # the sample at h is the prefix xs[:end]
    gram, done = np.zeros((d, d)), 0
    best_h, best_f = int(cands[-1]), math.inf
    for h, end in zip(cands.tolist(), ends.tolist(), strict=True):
        gram += xs[done:end].T @ xs[done:end]  # U^T U of the records kept at h
        done = end
        eig = np.linalg.eigvalsh(gram)
        if end < d or eig[0] <= 1e-12 * eig[-1]:
            continue  # the kept records do not identify beta
        cols = np.linalg.inv(gram) @ xs[:end].T  # c_i = (U^T U)^-1 x_i
        t = float(np.bincount(cs[:end], weights=np.abs(cols).sum(axis=0)).max())
        f = noise_variance * float(np.vdot(cols, cols)) + 2.0 * d * (laplace_unit * t) ** 2
        if f < best_f:
            best_h, best_f = h, f
    keep = rank < best_h
    matrix = _ols_on(x, keep)
    if matrix is None:  # unreachable: h = max s keeps every record and X has full rank
        raise DataError("best_limit_h_regression: no threshold h identifies beta.")
    return SampleLimitDesign(best_h, keep, matrix)


def _limit_design(
    x: np.ndarray, codes: np.ndarray, sizes: np.ndarray, h: int, noise: NoiseSource, caller: str
) -> SampleLimitDesign:
    keep = limit_mask(codes, sizes, h, noise)
    matrix = _ols_on(x, keep)
    if matrix is None:
        raise DataError(
            f"{caller}: the {int(keep.sum())} records kept at h={h} do not determine all "
            f"{x.shape[1]} coefficients (U^T U is singular); use a larger h."
        )
    return SampleLimitDesign(int(h), keep, matrix)


def sample_limit_design(
    X: object, users: object, h: int, *, noise: NoiseSource | None = None
) -> SampleLimitDesign:
    """Sample limiting with threshold ``h`` (Section 5.2): OLS on ``min(h, s_l)`` records each.

    The records are drawn by :func:`~userdp.estimate.weighting.limit_mask` from ``noise``
    (OS entropy when None). The draw reads only the public partition, never the labels.

    Raises
    ------
    DataError
        Bad shapes, or the kept records do not determine ``beta`` (``U^T U`` singular).
    """
    caller = "sample_limit_design"
    check_arguments(dict(h=h, noise=noise), SAMPLE_LIMIT_DESIGN_PARAMETERS, caller)
    h = int(h)
    x = check_features(X, caller)
    codes, sizes = _as_codes(users, x.shape[0], caller)
    return _limit_design(x, codes, sizes, h, noise if noise is not None else NoiseSource(), caller)


def best_limit_h_regression(
    X: object,
    users: object,
    *,
    noise_variance: float,
    laplace_unit: float,
    noise: NoiseSource | None = None,
) -> SampleLimitDesign:
    """Sample limiting at the integer ``h`` minimising Section 5.2's total variance.

    For a kept sample ``U`` the variance is Theorem 6's ``f(C^s)``, which depends on *which*
    records were kept. One random order of each user's records is drawn (from ``noise``) and
    the sample at ``h`` is the first ``min(h, s_l)`` records of user ``l`` in that order, so the
    samples are nested in ``h``; ``f`` is evaluated on these actual samples and the sample of
    the best ``h`` is the one returned and used (no re-draw). Candidates: every ``h`` up to
    ``max s_l`` when that is <= 256, else 1..64 and a geometric grid of ~190 values up to
    ``max s_l``; ties go to the smallest ``h``. Cost ``O(#candidates * n d^2)``.

    Only public values are read (``X``, the partition, ``noise_variance`` and
    ``laplace_unit``, which must themselves be public or released), so the choice spends no
    privacy budget.
    """
    caller = "best_limit_h_regression"
    params = dict(noise_variance=noise_variance, laplace_unit=laplace_unit, noise=noise)
    check_arguments(params, BEST_LIMIT_H_REGRESSION_PARAMETERS, caller)
    nv, lu = float(noise_variance), float(laplace_unit)
    x = check_features(X, caller)
    codes, sizes = _as_codes(users, x.shape[0], caller)
    _check_rank(x, caller)
    return _best_limit(x, codes, sizes, nv, lu, noise if noise is not None else NoiseSource())
