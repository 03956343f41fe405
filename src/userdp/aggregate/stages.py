"""Two stages of a GROUP BY that run other parts of userdp: the private key selection
(:func:`userdp.partition.select_partitions`, its own seed stream) and the per-key quantiles
(the weighted exponential mechanism)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from userdp.aggregate.plan import Plan
from userdp.privacy import PrivacyAccountant

_SELECTION_SEED_KEY = 0xA66E


def _select(eng: Any, plan: Plan, options: Mapping[str, Any], seed: int | None) -> Any:
    """Run the key selection with its planned budget (its own seed stream)."""
    from userdp.partition import select_partitions

    sel_seed = None
    if seed is not None:
        seq = np.random.SeedSequence(seed, spawn_key=(_SELECTION_SEED_KEY,))
        sel_seed = int(seq.generate_state(1, np.uint64)[0] >> np.uint64(1))
    opts = {k: v for k, v in options.items() if k not in ("user_column", "item_column")}
    # a plan that selects keys has a selection budget
    assert plan.selection_epsilon is not None and plan.selection_delta is not None
    return select_partitions(
        eng.selection_input(),
        epsilon=plan.selection_epsilon,
        delta=plan.selection_delta,
        engine=eng.name,
        seed=sel_seed,
        **opts,
    )


def _quantiles(
    eng: Any,
    plan: Plan,
    levels: tuple[float, ...],
    lo_hi: Any,
    smooth: bool,
    given: Mapping[str, float],
    limit_h: int,
    noise: Any,
    events: list[Any],
    c_bound: dict[str, float],
) -> dict[str, np.ndarray]:
    """Per-key weighted exponential mechanism, one level at a time (see ``aggregate``).

    ``h`` is chosen as :func:`userdp.estimate.weighted_quantile` chooses it (Claim 1's v(h) on
    the released size histogram), for the users' row counts over all keys.
    """
    from userdp.estimate.weighting import best_smooth_h, private_size_histogram
    from userdp.privacy import ExponentialMechanismDpEvent

    sizes, counts = eng.quantile_sizes()  # distinct sizes and their users: no per-user array
    table_h: tuple[Any, Any] = (sizes, counts)
    if smooth and "h" not in given:
        acc = PrivacyAccountant()
        hist = private_size_histogram(sizes, plan.size_histogram_epsilon, noise, acc, counts=counts)
        events.extend(acc.ledger)
        table_h = (hist.representatives, hist.counts)
    out = {}
    for j, q in enumerate(levels):
        eps = plan.quantile_epsilon
        spread = max(q, 1.0 - q)
        if not smooth:
            h = float(limit_h)
        elif "h" in given:
            h = float(given["h"])
        else:  # from the noisy histogram, whether or not any user holds a row on K
            h = best_smooth_h(table_h[0], q * (1 - q), 2 * spread / eps, counts=table_h[1])
        c_bound[f"h(q{q:g})"] = h
        out[f"q{q:g}"] = eng.key_quantiles(
            q,
            j,
            h,
            smooth,
            epsilon=eps,
            sensitivity=spread * h,
            bounds=lo_hi,
            entropy=noise.entropy,
        )
        events.append(ExponentialMechanismDpEvent(eps))
    return out
