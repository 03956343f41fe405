"""Algorithm 3's training of :class:`~userdp.recommend.MatrixFactorization` over a runner: the
items trained, the data-independent start, the user solve's settings and the alternating loop
(exact user solves, private item updates). The estimator validates, plans and packs."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable
from typing import Any, cast

import numpy as np

from userdp.privacy.noise import NoiseSource
from userdp.recommend.als.steps import gravity_gram, ssp_update, trained_items
from userdp.recommend.core.model import solve_users
from userdp.recommend.core.plans import NoisePlan
from userdp.recommend.core.spec import ItemUpdateSpec
from userdp.recommend.engines import Runner
from userdp.recommend.engines.local import Preamble, UserSolve

__all__ = ["GD_INIT_SCALE", "alternate", "train"]

GD_INIT_SCALE = 0.1  # initial item-factor norm of the DPSGD family (1 for the others)


def train(
    spec: ItemUpdateSpec,
    runner: Runner,
    prep: Preamble,
    plan: NoisePlan | None,
    noise: NoiseSource,
    rng: np.random.Generator,
    *,
    solver: str,
    steps: int,
    target_clip: float | str | None,
    progress: bool,
) -> tuple[np.ndarray, np.ndarray, float]:
    """Train on ``runner`` after its preamble ``prep`` (``plan`` None without privacy) and close
    it. Returns the item factors (the bias coordinate last when ``spec.biased``), the trained
    items and beta, the user side's bias coordinate (``b_i = beta * U[i, dim]``)."""
    private = plan is not None
    center, lo, hi = prep.center, prep.lo, prep.hi
    d = int(spec.dim)
    n_items, labels = prep.n_items, prep.labels
    item_counts = cast(np.ndarray, prep.counts)  # released counts when private
    freq = np.maximum(item_counts, 0.0) if private else cast(np.ndarray, prep.exact_counts)
    trained = trained_items(spec, item_counts if private else freq, n_items, plan)
    runner.restrict(trained)
    if not trained.any():
        # Nothing clears the cutoff (decided from released counts only): every item
        # predicts the centre. A legitimate private answer, not an error.
        warnings.warn(
            f"{spec.method}: no item reaches min_item_count/top_items at this budget; "
            "all item factors are 0 (predictions are the centre).",
            UserWarning,
            stacklevel=3,  # the caller of MatrixFactorization.fit
        )
    half = max(hi - center, center - lo)
    runner.allocate(spec.allocation, item_counts if private else None, noise)
    # Algorithm 3's U^(0), data-independent. Gradient descent starts small: items its noisy
    # steps barely move then predict the centre instead of the random start (the SSP
    # update replaces U at once and needs user factors of norm ~max_norm from step 1).
    scale = GD_INIT_SCALE if private and solver == "gd" else 1.0
    U = rng.normal(0.0, scale / math.sqrt(d), (n_items, d))
    biased = spec.biased
    # The user side's bias coordinate: b_i = beta * U[i, d]. Gradient descent uses the
    # initial scale too: its noise enters b_i with weight beta but u_i with weight ||v||,
    # and beta = max_norm let the bias noise dominate at small epsilon (pilot, seed 0).
    beta = scale * float(spec.max_norm)
    if biased:
        U = np.column_stack([U, np.zeros(n_items)])
    outer: Iterable[int] = range(steps)
    if progress:
        from tqdm.auto import tqdm

        outer = tqdm(outer, desc=f"{spec.method} d={d}", unit="step", leave=False)
    alpha = float(spec.unobserved_weight)
    bound = half  # the item update's target bound (the moments' sensitivity uses it)
    if private and solver == "ssp" and target_clip is not None:
        if target_clip == "auto":
            bound = 0.5 * half if biased else half
        else:
            bound = min(half, float(target_clip))
    clip = float(spec.max_norm) if private else None
    how = UserSolve(d, biased, beta, alpha, clip, bound, clip_target=bound < half)
    U[~trained] = 0.0
    try:
        U = alternate(
            spec, runner, U, outer, how, trained, freq, bound, plan, noise, labels, solver
        )
    finally:
        runner.close()
    return U, trained, beta


def alternate(
    spec: ItemUpdateSpec,
    runner: Runner,
    U: np.ndarray,
    steps: Iterable[int],
    how: UserSolve,
    trained: np.ndarray,
    freq: np.ndarray,
    half: float,
    plan: NoisePlan | None,
    noise: NoiseSource,
    labels: Any,
    solver: str,
) -> np.ndarray:
    """Algorithm 3's loop over a runner: exact user solves, private item updates."""
    private = plan is not None
    alpha = how.alpha
    for _ in steps:
        # Line 4: exact user solve, V = argmin_V L(U, V); never released.
        runner.solve_users(U, how, spec.reg)
        gravity = gravity_gram(spec, runner.gravity(), plan, noise) if alpha else None
        # Line 5: item update.
        if not private:
            gram, moment = runner.item_statistics(weighted=False)
            if gravity is not None:  # alpha > 0
                gram += alpha * gravity
            U = solve_users(gram, moment, spec.reg * np.maximum(freq, 1.0))
        elif solver == "ssp":
            gram, moment = runner.item_statistics(weighted=True)
            U = ssp_update(spec, gram, moment, freq, half, plan, noise, gravity, labels)
        else:
            U = runner.gd_update(spec, U, freq, plan, noise, gravity, labels)
        U[~trained] = 0.0
    return U
