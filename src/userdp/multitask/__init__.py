"""Multi-task learning under user-level DP with adaptive budget allocation.

Krichene, Jain, Song, Sundararajan, Thakurta, Zhang (2023), "Multi-Task Differential Privacy
Under Distribution Skew": every user spreads a fixed sensitivity budget over the tasks they
contribute to (:mod:`~userdp.multitask.allocation`), and the weighted statistics are released
by task-weighted SSP (:func:`task_weighted_ssp`, Algorithm 1) or noisy gradient descent
(:func:`task_weighted_noisy_gd`, Algorithm 2). Both take the budget as ``epsilon=, delta=``
keywords and a shared ``accountant=``; :func:`ssp_mechanism` and :func:`noisy_gd_mechanism`
are the same releases at given noise multipliers, for callers that calibrate themselves.
:mod:`~userdp.multitask.kernels` holds the per-segment statistics both use (public API:
:mod:`userdp.recommend` builds on it).
"""

from userdp.multitask.allocation import (
    PrivateCounts,
    adaptive_weights,
    private_counts,
    sample_per_user,
    tail_sampling,
    uniform_sampling,
    user_load,
)
from userdp.multitask.noisy_gd import GDResult, noisy_gd_mechanism, task_weighted_noisy_gd
from userdp.multitask.ssp import (
    SSPResult,
    clip_rows,
    perturb_statistics,
    project_psd,
    solve_ridge,
    ssp_mechanism,
    task_weighted_ssp,
)

__all__ = [
    "GDResult",
    "PrivateCounts",
    "SSPResult",
    "adaptive_weights",
    "clip_rows",
    "noisy_gd_mechanism",
    "perturb_statistics",
    "private_counts",
    "project_psd",
    "sample_per_user",
    "solve_ridge",
    "ssp_mechanism",
    "tail_sampling",
    "task_weighted_noisy_gd",
    "task_weighted_ssp",
    "uniform_sampling",
    "user_load",
]
