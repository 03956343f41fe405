"""Task-weighted sufficient statistics perturbation (Krichene et al. 2023, Algorithm 1).

For every task i the weighted statistics ``A_i = sum_j w_ij x_ij x_ij^T`` and
``b_i = sum_j w_ij y_ij x_ij`` are released with Gaussian noise, projected onto the PSD cone,
and the ridge solution ``theta_i = (A_i + lambda_i I)^-1 b_i`` is post-processing.

.. note:: Erratum (Algorithm 1, line 5)
   The paper writes ``A_i = sum_j w_ij (x_ij x_ij^T + lambda I) + noise``: the ridge term sits
   inside the weighted, data-dependent sum, but the sensitivity proof (Theorem 3.3) only bounds
   ``w_ij x_ij x_ij^T``. Here the ridge term is added after the release (``lambda_i`` is a
   parameter or a function of released values), so the stated sensitivity is true.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import dp_accounting
import numpy as np

from userdp._validation import check_arguments, check_int, check_real
from userdp.exceptions import InvalidParameterError
from userdp.multitask.allocation import check_weighted_rows
from userdp.multitask.kernels import batched, segment_offsets, segment_statistics
from userdp.privacy.accountant import PrivacyAccountant
from userdp.privacy.budget import PrivacyBudget
from userdp.privacy.calibrate import calibrate_noise_scale
from userdp.privacy.checks import check_accountant
from userdp.privacy.noise import NoiseSource

__all__ = [
    "SSPResult",
    "clip_rows",
    "perturb_statistics",
    "project_psd",
    "solve_ridge",
    "ssp_mechanism",
    "task_weighted_ssp",
]

#: The budget keywords of the multi-task entry points (:func:`task_weighted_ssp`,
#: :func:`~userdp.multitask.task_weighted_noisy_gd`).
_BUDGET_CONSTRAINTS: dict[str, dict[str, Any]] = {
    "epsilon": {"low": 1e-9},
    "delta": {"low": 0.0, "high": 1.0, "low_open": True, "high_open": True},
    "moment_share": {"low": 0.0, "high": 1.0, "low_open": True, "high_open": True},
    "seed": {"int": True, "low": 0, "none": True},
}


@dataclass(frozen=True)
class SSPResult:
    """Released per-task parameters of :func:`task_weighted_ssp`.

    Attributes
    ----------
    parameters : ndarray, shape (n_tasks, d)
        ``theta_i``, post-processing of the noisy statistics.
    gram_sensitivity, moment_sensitivity : float
        l2 sensitivities of the stacked ``(A_i)`` and ``(b_i)`` under adding/removing a user.
    dp_event : dp_accounting.DpEvent
        Two Gaussian releases (A and b).
    budget : PrivacyBudget or None
        What the release spends (:func:`task_weighted_ssp`; None from :func:`ssp_mechanism`,
        whose caller calibrated the noise and accounts for it).
    """

    parameters: np.ndarray
    gram_sensitivity: float
    moment_sensitivity: float
    dp_event: dp_accounting.DpEvent
    budget: PrivacyBudget | None = None

    def summary(self) -> str:
        """One line: the released shape and the spend (declared values only)."""
        n, d = self.parameters.shape
        spent = "budget not accounted" if self.budget is None else str(self.budget)
        return f"task-weighted SSP: {n} tasks x {d} parameters, {spent}"


def clip_rows(x: np.ndarray, bound: float) -> np.ndarray:
    """``x * min(1, bound / ||x||)`` row by row (Algorithm 1, line 2)."""
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return x * np.minimum(1.0, bound / np.maximum(norms, 1e-300))


def perturb_statistics(
    gram: np.ndarray,
    moment: np.ndarray,
    *,
    gram_sigma: float,
    moment_sigma: float,
    noise: NoiseSource,
    gram_l2: float | None = None,
    moment_l2: float | None = None,
    index: Any = None,
    gram_statistic: str = "item gram",
    moment_statistic: str = "item moment",
) -> tuple[np.ndarray, np.ndarray]:
    """Add Gaussian noise to stacked Gram matrices (symmetric) and moment vectors.

    The Gram noise is drawn on the upper triangle (diagonal included) and mirrored, so each
    noisy ``A_i`` is symmetric and the mechanism's l2 sensitivity is that of the upper
    triangle, which is at most the Frobenius norm of the change (Algorithm 1, lines 4-6).
    ``gram_l2`` / ``moment_l2`` are the declared sensitivities given to the release recorder
    (``gram_l2`` defaults to ``gram_sigma``, i.e. noise multiplier 1); ``moment_l2=None`` with
    ``moment_sigma=0``-like use releases the Gram alone. ``index`` labels the tasks.
    """
    if gram_l2 is None:
        gram_l2 = gram_sigma
    if moment_l2 is None and moment.size:
        moment_l2 = moment_sigma
    d = gram.shape[1]
    iu = np.triu_indices(d)
    tri = noise.add_gaussian(
        gram[:, iu[0], iu[1]],
        gram_sigma,
        statistic=gram_statistic,
        l2=gram_l2,
        index=index,
    )
    out = np.empty_like(gram)
    out[:, iu[0], iu[1]] = tri
    out[:, iu[1], iu[0]] = tri
    if moment_l2 is None:  # no moment release (the gravity Gram)
        return out, moment
    noisy = noise.add_gaussian(
        moment, moment_sigma, statistic=moment_statistic, l2=moment_l2, index=index
    )
    return out, noisy


def project_psd(gram: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eigen-decomposition of symmetric ``gram`` with negative eigenvalues set to 0.

    Returns ``(eigenvalues, eigenvectors)`` of the projection onto the PSD cone (the nearest
    PSD matrix in Frobenius norm), batched over the leading axis.
    """
    vals, vecs = batched(np.linalg.eigh, gram)
    return np.maximum(vals, 0.0), vecs


def solve_ridge(gram: np.ndarray, moment: np.ndarray, ridge: np.ndarray | float) -> np.ndarray:
    """``theta_i = (P(A_i) + ridge_i I)^-1 b_i`` with P the PSD projection, batched.

    One ``eigh`` per task does both the projection and the solve:
    ``theta = Q diag(1 / (max(lambda, 0) + ridge)) Q^T b``.
    """
    vals, vecs = project_psd(gram)
    ridge = np.broadcast_to(np.asarray(ridge, dtype=np.float64), (gram.shape[0],))
    if np.any(ridge <= 0):
        raise InvalidParameterError("The ridge term must be > 0 for every task.")
    coef = np.einsum("mdk,md->mk", vecs, moment) / (vals + ridge[:, None])
    return np.einsum("mdk,mk->md", vecs, coef)


def ssp_mechanism(
    users: np.ndarray,
    tasks: np.ndarray,
    features: np.ndarray,
    labels: np.ndarray,
    weights: np.ndarray,
    *,
    n_tasks: int,
    feature_bound: float,
    label_bound: float,
    ridge: float | np.ndarray,
    noise_multiplier: float,
    noise: NoiseSource,
    beta: float = 1.0,
    moment_noise_multiplier: float | None = None,
) -> SSPResult:
    """Task-weighted SSP at given noise multipliers (Krichene et al. 2023, Algorithm 1).

    The mechanism behind :func:`task_weighted_ssp`, for callers that calibrate the noise
    themselves (and for tests of its sensitivity): it charges no accountant.

    Parameters
    ----------
    users, tasks : int arrays, shape (n_rows,)
        Who contributed each row and to which task; (task, user) pairs must be distinct.
    features : float array, shape (n_rows, d)
        ``x_ij``, clipped to ``feature_bound`` in l2 norm (Algorithm 1, line 2).
    labels : float array, shape (n_rows,)
        ``y_ij``, clipped to ``[-label_bound, label_bound]``.
    weights : float array, shape (n_rows,)
        Task-user weights (from :mod:`userdp.multitask.allocation`); every user's squared
        weights must sum to at most ``beta`` (checked: a violation raises).
    n_tasks : int
    feature_bound, label_bound : float
        Gamma_x and Gamma_x * Gamma_* of the paper.
    ridge : float or array of shape (n_tasks,)
        lambda_i > 0, added outside the noisy sum (see the erratum in the module docstring).
    noise_multiplier : float
        Noise standard deviation of A over its sensitivity; ``moment_noise_multiplier``
        (default: the same) for b.
    noise : NoiseSource
    beta : float, default=1.0

    Privacy
    -------
    Adding or removing user j changes ``(A_i)_i`` by ``(w_ij x_ij x_ij^T)_i``, of l2 (Frobenius)
    norm at most ``Gamma_x^2 sqrt(beta)``, and ``(b_i)_i`` by at most
    ``Gamma_x Gamma_y sqrt(beta)`` (Theorem 3.3). The release is two ``GaussianDpEvent``s with
    noise multipliers z_A and z_b, i.e. (alpha, alpha/(2 z_A^2) + alpha/(2 z_b^2))-RDP; the
    paper's (alpha, alpha beta) is the case of noise scales Gamma_x^2 and Gamma_x^2 Gamma_*
    (z = 1/sqrt(beta)).
    """
    caller = "ssp_mechanism"
    beta = check_real(beta, "beta", caller, low=0.0, low_open=True)
    users, tasks, x, y, w = check_weighted_rows(
        caller, users, tasks, features, labels, weights, beta
    )
    n = users.size
    n_tasks = check_int(n_tasks, "n_tasks", caller, low=1)
    gx = check_real(feature_bound, "feature_bound", caller, low=0.0, low_open=True)
    gy = check_real(label_bound, "label_bound", caller, low=0.0, low_open=True)
    z_a = check_real(noise_multiplier, "noise_multiplier", caller, low=0.0, low_open=True)
    z_b = z_a
    if moment_noise_multiplier is not None:
        z_b = check_real(
            moment_noise_multiplier, "moment_noise_multiplier", caller, low=0.0, low_open=True
        )
    x = clip_rows(x, gx)
    y = np.clip(y, -gy, gy)
    order, offsets = segment_offsets(tasks, n_tasks)
    gram, moment = segment_statistics(offsets, order, np.arange(n), x, w, y)
    root = math.sqrt(beta)
    d_a, d_b = gx * gx * root, gx * gy * root
    gram_hat, moment_hat = perturb_statistics(
        gram,
        moment,
        gram_sigma=z_a * d_a,
        moment_sigma=z_b * d_b,
        noise=noise,
        gram_l2=d_a,
        moment_l2=d_b,
        gram_statistic="task gram",
        moment_statistic="task moment",
    )
    del gram, moment
    theta = solve_ridge(gram_hat, moment_hat, ridge)
    event = dp_accounting.ComposedDpEvent(
        [dp_accounting.GaussianDpEvent(z_a), dp_accounting.GaussianDpEvent(z_b)]
    )
    return SSPResult(theta, d_a, d_b, event)


def task_weighted_ssp(
    users: np.ndarray,
    tasks: np.ndarray,
    features: np.ndarray,
    labels: np.ndarray,
    weights: np.ndarray,
    *,
    n_tasks: int,
    feature_bound: float,
    label_bound: float,
    ridge: float | np.ndarray,
    epsilon: float,
    delta: float,
    moment_share: float = 0.5,
    beta: float = 1.0,
    accountant: PrivacyAccountant | None = None,
    seed: int | None = None,
) -> SSPResult:
    """Multi-task ridge regression by task-weighted SSP (Krichene et al. 2023, Algorithm 1).

    Releases the per-task statistics (A_i, b_i) with Gaussian noise calibrated so the two
    releases together meet (``epsilon``, ``delta``), split in precision: ``moment_share`` to
    b, the rest to A. Arguments as in :func:`ssp_mechanism`, plus:

    Parameters
    ----------
    epsilon : float
        In (0, inf).
    delta : float
        In (0, 1).
    moment_share : float, default=0.5
        Share of the (RDP) budget spent on the moments b, in (0, 1).
    accountant : PrivacyAccountant or None, default=None
        Charged with the release before any data is read; refused there (nothing read,
        nothing charged) when it would exceed the accountant's total budget.
    seed : int or None, default=None
        For tests and reproducible benchmarks only; None draws from OS entropy.
        A seed may be used once per accountant: a second release with a seed its
        ``accountant`` already holds is refused before any data is read (the same seed
        draws the same noise, and differencing the two releases would cancel it).

    Returns
    -------
    SSPResult
        With ``budget`` (the spend at ``delta``, from the accountant) and ``dp_event``.
    """
    caller = "task_weighted_ssp"
    check_arguments(
        {"epsilon": epsilon, "delta": delta, "moment_share": moment_share, "seed": seed},
        _BUDGET_CONSTRAINTS,
        caller,
    )
    check_accountant(accountant, "accountant", caller)
    ms = float(moment_share)

    def event(scale: float) -> dp_accounting.DpEvent:
        return dp_accounting.ComposedDpEvent(
            [
                dp_accounting.GaussianDpEvent(scale / math.sqrt(1.0 - ms)),
                dp_accounting.GaussianDpEvent(scale / math.sqrt(ms)),
            ]
        )

    scale = calibrate_noise_scale(event, epsilon, delta)
    if accountant is not None:  # refuses before any data is read, a held seed included
        accountant.compose(event(scale), seed=seed, caller=caller)
    result = ssp_mechanism(
        users,
        tasks,
        features,
        labels,
        weights,
        n_tasks=n_tasks,
        feature_bound=feature_bound,
        label_bound=label_bound,
        ridge=ridge,
        noise_multiplier=scale / math.sqrt(1.0 - ms),
        moment_noise_multiplier=scale / math.sqrt(ms),
        noise=NoiseSource(seed),
        beta=beta,
    )
    spent = PrivacyAccountant().compose(result.dp_event).spent(gaussian_delta=delta)
    return replace(result, budget=spent)
