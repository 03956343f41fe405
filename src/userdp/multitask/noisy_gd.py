"""Task-weighted noisy gradient descent (Krichene et al. 2023, Algorithm 2).

Every step computes, for each task i, the weighted gradient ``g_i = sum_j w_ij grad l(theta_i;
x_ij, y_ij)`` with every per-example gradient clipped to ``clip_norm``, adds Gaussian noise and
takes a projected step. The ridge term's gradient is added after the noise (data-independent).

.. note:: Deviation from the printed Algorithm 2 (line 5)
   The paper clips the *per-task sum* ``clip(sum_j w_ij grad l, Gamma)`` and assumes l is
   Gamma-Lipschitz (Assumption 3.9) for the sensitivity. Clipping every per-example gradient to
   Gamma makes that assumption true by construction for any loss, which is what the proof of
   Theorem 3.11 uses: user j's stacked contribution has norm at most ``Gamma sqrt(sum_i w_ij^2)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import dp_accounting
import numpy as np
from scipy import sparse, special

from userdp._validation import check_arguments, check_choice, check_int, check_real
from userdp.exceptions import DataError
from userdp.multitask.allocation import check_weighted_rows
from userdp.multitask.kernels import segment_offsets
from userdp.multitask.ssp import _BUDGET_CONSTRAINTS
from userdp.privacy.accountant import PrivacyAccountant
from userdp.privacy.budget import PrivacyBudget
from userdp.privacy.calibrate import calibrate_noise_scale
from userdp.privacy.checks import check_accountant
from userdp.privacy.noise import NoiseSource

__all__ = ["GDResult", "noisy_gd_mechanism", "task_weighted_noisy_gd"]


@dataclass(frozen=True)
class GDResult:
    """Released per-task parameters of :func:`task_weighted_noisy_gd`.

    Attributes
    ----------
    parameters : ndarray, shape (n_tasks, d)
        The last iterate.
    sensitivity : float
        l2 sensitivity of one step's stacked gradient, ``clip_norm * sqrt(beta)``.
    dp_event : dp_accounting.DpEvent
        ``steps`` Gaussian releases.
    budget : PrivacyBudget or None
        What the release spends (:func:`task_weighted_noisy_gd`; None from
        :func:`noisy_gd_mechanism`, whose caller calibrated the noise and accounts for it).
    """

    parameters: np.ndarray
    sensitivity: float
    dp_event: dp_accounting.DpEvent
    budget: PrivacyBudget | None = None

    def summary(self) -> str:
        """One line: the released shape and the spend (declared values only)."""
        n, d = self.parameters.shape
        spent = "budget not accounted" if self.budget is None else str(self.budget)
        return f"task-weighted noisy GD: {n} tasks x {d} parameters, {spent}"


def _example_gradient_scale(loss: str, pred: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``c`` with grad l(theta; x, y) = c * x for the two supported losses."""
    if loss == "squared":  # l = (theta.x - y)^2
        return 2.0 * (pred - y)
    # logistic, y in {-1, +1}: l = log(1 + exp(-y theta.x))
    return -y * special.expit(-y * pred)


def noisy_gd_mechanism(
    users: np.ndarray,
    tasks: np.ndarray,
    features: np.ndarray,
    labels: np.ndarray,
    weights: np.ndarray,
    *,
    n_tasks: int,
    clip_norm: float,
    steps: int,
    learning_rate: float | np.ndarray,
    noise_multiplier: float,
    noise: NoiseSource,
    loss: str = "squared",
    ridge: float = 0.0,
    radius: float | None = None,
    init: np.ndarray | None = None,
    beta: float = 1.0,
) -> GDResult:
    """Task-weighted noisy gradient descent at a given noise multiplier (Algorithm 2).

    The mechanism behind :func:`task_weighted_noisy_gd`, for callers that calibrate the noise
    themselves (and for tests of its sensitivity): it charges no accountant.

    Parameters
    ----------
    users, tasks : int arrays, shape (n_rows,)
        Distinct (task, user) rows.
    features : float array, shape (n_rows, d)
    labels : float array, shape (n_rows,)
        Real for ``loss="squared"``, in {-1, +1} for ``loss="logistic"``.
    weights : float array, shape (n_rows,)
        Every user's squared weights must sum to at most ``beta`` (checked).
    n_tasks : int
    clip_norm : float
        Gamma: every per-example gradient is clipped to this l2 norm.
    steps : int
        T, the number of noisy releases.
    learning_rate : float or array of shape (n_tasks,)
        eta_i (constant over steps; Theorem 3.12's schedules can be passed per task).
    noise_multiplier : float
        Noise standard deviation over the per-step sensitivity ``clip_norm * sqrt(beta)``.
    noise : NoiseSource
    loss : {"squared", "logistic"}, default="squared"
    ridge : float, default=0.0
        Gradient of ``ridge/2 ||theta_i||^2`` added outside the noisy sum.
    radius : float or None
        Project every theta_i onto the ball of this radius (the domain C); None: no projection.
    init : array of shape (n_tasks, d) or None (zeros)
    beta : float, default=1.0

    Privacy
    -------
    Adding or removing a user changes the stacked per-step gradient by at most
    ``clip_norm * sqrt(beta)`` (Theorem 3.11); ``steps`` Gaussian releases with the same noise
    multiplier, composed as ``SelfComposedDpEvent(GaussianDpEvent(z), steps)``.
    """
    caller = "noisy_gd_mechanism"
    beta = check_real(beta, "beta", caller, low=0.0, low_open=True)
    users, tasks, x, y, w = check_weighted_rows(
        caller, users, tasks, features, labels, weights, beta
    )
    n = users.size
    n_tasks = check_int(n_tasks, "n_tasks", caller, low=1)
    gamma = check_real(clip_norm, "clip_norm", caller, low=0.0, low_open=True)
    steps = check_int(steps, "steps", caller, low=1)
    z = check_real(noise_multiplier, "noise_multiplier", caller, low=0.0, low_open=True)
    loss = check_choice(loss, "loss", caller, ["squared", "logistic"])
    ridge = check_real(ridge, "ridge", caller, low=0.0)
    if radius is not None:
        radius = check_real(radius, "radius", caller, low=0.0, low_open=True)
    if loss == "logistic" and not np.all(np.isin(y, (-1.0, 1.0))):
        raise DataError(f"{caller}: logistic loss needs labels in {{-1, +1}}.")
    d = x.shape[1]
    eta = np.broadcast_to(np.asarray(learning_rate, dtype=np.float64), (n_tasks,))[:, None]
    theta = np.zeros((n_tasks, d)) if init is None else np.array(init, dtype=np.float64)
    if theta.shape != (n_tasks, d):
        raise DataError(f"{caller}: init must have shape {(n_tasks, d)}; got {theta.shape}.")
    order, offsets = segment_offsets(tasks, n_tasks)
    x_norm = np.linalg.norm(x, axis=1)
    sensitivity = gamma * math.sqrt(beta)
    for _ in range(steps):
        pred = np.einsum("nd,nd->n", theta[tasks], x)
        c = _example_gradient_scale(loss, pred, y)
        # Per-example clip: ||c x|| <= Gamma.
        c *= np.minimum(1.0, gamma / np.maximum(np.abs(c) * x_norm, 1e-300))
        # grad_i = sum_{j in Omega_i} w_ij c_ij x_ij, as a (tasks x rows) sparse product.
        s = sparse.csr_matrix(((w * c)[order], order, offsets), shape=(n_tasks, n))
        grad = noise.add_gaussian(s @ x, z * sensitivity, statistic="task gradient", l2=sensitivity)
        theta = theta - eta * (grad + ridge * theta)
        if radius is not None:
            theta *= np.minimum(1.0, radius / np.maximum(np.linalg.norm(theta, axis=1), 1e-300))[
                :, None
            ]
    event = dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), steps)
    return GDResult(theta, sensitivity, event)


def task_weighted_noisy_gd(
    users: np.ndarray,
    tasks: np.ndarray,
    features: np.ndarray,
    labels: np.ndarray,
    weights: np.ndarray,
    *,
    n_tasks: int,
    clip_norm: float,
    steps: int,
    learning_rate: float | np.ndarray,
    epsilon: float,
    delta: float,
    loss: str = "squared",
    ridge: float = 0.0,
    radius: float | None = None,
    init: np.ndarray | None = None,
    beta: float = 1.0,
    accountant: PrivacyAccountant | None = None,
    seed: int | None = None,
) -> GDResult:
    """Multi-task ERM by task-weighted noisy gradient descent (Algorithm 2).

    The ``steps`` Gaussian releases are calibrated together to meet (``epsilon``, ``delta``).
    Arguments as in :func:`noisy_gd_mechanism`, plus:

    Parameters
    ----------
    epsilon : float
        In (0, inf).
    delta : float
        In (0, 1).
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
    GDResult
        With ``budget`` (the spend at ``delta``, from the accountant) and ``dp_event``.
    """
    caller = "task_weighted_noisy_gd"
    check_arguments(
        {"epsilon": epsilon, "delta": delta, "seed": seed, "steps": steps},
        {
            **{k: v for k, v in _BUDGET_CONSTRAINTS.items() if k != "moment_share"},
            "steps": {"int": True, "low": 1},
        },
        caller,
    )
    check_accountant(accountant, "accountant", caller)

    def event(scale: float) -> dp_accounting.DpEvent:
        return dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(scale), steps)

    scale = calibrate_noise_scale(event, epsilon, delta)
    if accountant is not None:  # refuses before any data is read, a held seed included
        accountant.compose(event(scale), seed=seed, caller=caller)
    result = noisy_gd_mechanism(
        users,
        tasks,
        features,
        labels,
        weights,
        n_tasks=n_tasks,
        clip_norm=clip_norm,
        steps=steps,
        learning_rate=learning_rate,
        noise_multiplier=scale,
        noise=NoiseSource(seed),
        loss=loss,
        ridge=ridge,
        radius=radius,
        init=init,
        beta=beta,
    )
    spent = PrivacyAccountant().compose(result.dp_event).spent(gaussian_delta=delta)
    return replace(result, budget=spent)
