"""The auditor's configurations of :mod:`userdp.multitask`: task-weighted SSP and task-weighted
noisy gradient descent, with the catalogue's items as tasks."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from userdp.audit.mechanisms.base import DELTA, EPSILON, Mechanism, bounds, public_catalogue
from userdp.audit.neighbours import Table

__all__ = ["mechanisms"]


def _multitask(solver: str) -> Callable[[Table], Callable[[Table, int], object]]:
    """Task-weighted SSP / noisy GD with tasks = the catalogue's items, features the table's
    (clipped), labels the values centred on their range's midpoint and weights
    ``1/sqrt(n_u)`` (each user's squared weights sum to 1: the user budget ``beta = 1``)."""

    def bind(base: Table) -> Callable[[Table, int], object]:
        n_tasks = int(public_catalogue(base).size)

        def run(t: Table, seed: int) -> object:
            from userdp.multitask import clip_rows, task_weighted_noisy_gd, task_weighted_ssp

            # the multitask audit tables always carry items, values and features
            assert t.item is not None and t.value is not None and t.x is not None
            _, inverse, counts = np.unique(t.user, return_inverse=True, return_counts=True)
            w: np.ndarray = (1.0 - 1e-12) / np.sqrt(counts[inverse])  # squares sum to < 1 in floats
            x = clip_rows(t.x, 1.0)
            lo, hi = bounds(t)
            y = np.clip(t.value, lo, hi) - 0.5 * (lo + hi)
            if solver == "ssp":
                return task_weighted_ssp(
                    t.user,
                    t.item,
                    x,
                    y,
                    w,
                    n_tasks=n_tasks,
                    feature_bound=1.0,
                    label_bound=0.5 * (hi - lo),
                    ridge=1.0,
                    epsilon=EPSILON,
                    delta=DELTA,
                    seed=seed,
                )
            return task_weighted_noisy_gd(
                t.user,
                t.item,
                x,
                y,
                w,
                n_tasks=n_tasks,
                clip_norm=1.0,
                steps=3,
                learning_rate=0.1,
                epsilon=EPSILON,
                delta=DELTA,
                seed=seed,
            )

        return run

    return bind


def mechanisms() -> list[Mechanism]:
    """The two solvers, each on the catalogue's items as tasks."""
    return [
        Mechanism(
            "multitask[ssp]", "multitask", notes="tasks = catalogue items", bind=_multitask("ssp")
        ),
        Mechanism(
            "multitask[noisy-gd]",
            "multitask",
            notes="tasks = catalogue items, steps=3",
            bind=_multitask("noisy-gd"),
        ),
    ]
