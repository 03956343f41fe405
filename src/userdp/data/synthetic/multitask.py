"""The skewed multi-task linear regression of the multi-task DP paper (Appendix C)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from userdp._validation import check_int, check_real

__all__ = ["MultiTaskData", "multitask_regression"]


# -- multi-task regression: paper Appendix C ----------------------------------------------------
@dataclass(frozen=True)
class MultiTaskData:
    """Observations of a synthetic multi-task linear regression, sorted by (user, task).

    Attributes
    ----------
    tasks, users : ndarray of int32, shape (n_obs,)
        Task and user of every observation.
    labels : ndarray of float64, shape (n_obs,)
        ``<task_parameters[task], user_features[user]> + N(0, noise^2)``.
    user_features : ndarray of float64, shape (n_users, dim)
        The features ``x_j`` (in the unit ball) shared by all of a user's tasks.
    task_parameters : ndarray of float64, shape (n_tasks, dim)
        The true parameters ``theta_i`` (in the unit ball).
    task_probabilities : ndarray of float64, shape (n_tasks,)
        ``q_i``, the probability that a user contributes to task ``i``; ``q_i * n_users`` is the
        expected task count.
    """

    tasks: np.ndarray
    users: np.ndarray
    labels: np.ndarray
    user_features: np.ndarray
    task_parameters: np.ndarray
    task_probabilities: np.ndarray

    @property
    def n_observations(self) -> int:
        """Number of (task, user) observations."""
        return int(self.tasks.size)


def _project_unit_ball(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, 1.0)


def multitask_regression(
    n_tasks: int = 100,
    dim: int = 5,
    n_users: int = 10_000,
    *,
    power: float = 1.0,
    tasks_per_user: float = 20,
    noise: float = 1e-3,
    seed: int = 0,
) -> MultiTaskData:
    """Skewed multi-task linear regression of Appendix C of the multi-task DP paper.

    User vectors ``x_j`` and task parameters ``theta_i`` are drawn from N(0, I_dim) and
    projected onto the unit ball. Task ``i`` gets ``q_i`` drawn from the power law with pdf
    ``f(x) = a x^(a - 1)`` on [0, 1] (``a = power``; the paper uses a = 1 and 2), then the
    ``q_i`` are scaled to sum to ``tasks_per_user`` and clipped to at most 1 (so the expected
    number of tasks per user is ``tasks_per_user`` unless clipping bites, which needs
    ``tasks_per_user`` close to ``n_tasks``). Every (task, user) pair is observed independently
    with probability ``q_i``, with label ``<theta_i, x_j> + N(0, noise^2)``. The paper then
    splits observations 80/20 into train and test (not done here).
    """
    caller = "multitask_regression"
    n_tasks = check_int(n_tasks, "n_tasks", caller, low=1)
    dim = check_int(dim, "dim", caller, low=1)
    n_users = check_int(n_users, "n_users", caller, low=1)
    power = check_real(power, "power", caller, low=0.0, low_open=True)
    tasks_per_user = check_real(
        tasks_per_user, "tasks_per_user", caller, low=0.0, high=float(n_tasks), low_open=True
    )
    noise = check_real(noise, "noise", caller, low=0.0)
    rng = np.random.default_rng(seed)
    user_features = _project_unit_ball(rng.standard_normal((n_users, dim)))
    task_parameters = _project_unit_ball(rng.standard_normal((n_tasks, dim)))
    q = rng.random(n_tasks) ** (1.0 / power)  # inverse CDF of a x^(a-1): F(x) = x^a
    q *= tasks_per_user / q.sum()
    np.minimum(q, 1.0, out=q)
    task_chunk = max(1, 8_000_000 // n_users)
    tasks_l: list[np.ndarray] = []
    users_l: list[np.ndarray] = []
    for s in range(0, n_tasks, task_chunk):  # chunks of tasks bound the mask's memory
        present = rng.random((min(task_chunk, n_tasks - s), n_users)) < q[s : s + task_chunk, None]
        t, u = np.nonzero(present)
        tasks_l.append((t + s).astype(np.int32))
        users_l.append(u.astype(np.int32))
    tasks = np.concatenate(tasks_l)
    users = np.concatenate(users_l)
    order = np.lexsort((tasks, users))
    tasks, users = tasks[order], users[order]
    labels = np.einsum("ij,ij->i", task_parameters[tasks], user_features[users])
    if noise > 0:
        labels += rng.normal(0.0, noise, size=labels.size)
    return MultiTaskData(tasks, users, labels, user_features, task_parameters, q)
