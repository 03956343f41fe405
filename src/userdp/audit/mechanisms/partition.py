"""The auditor's configurations of :func:`userdp.partition.select_partitions`: every
algorithm's default, more rounds (MAD2R, DP-SIPS) and MAD2R's automatic cap."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from userdp.audit.mechanisms.base import DELTA, EPSILON, Mechanism
from userdp.audit.neighbours import Table

__all__ = ["mechanisms"]


def _selection(algorithm: str, **options: Any) -> Callable[[Table, int], object]:
    def run(t: Table, seed: int) -> object:
        from userdp.partition import select_partitions

        return select_partitions(
            (t.user, t.item),
            epsilon=EPSILON,
            delta=DELTA,
            algorithm=algorithm,
            seed=seed,
            **options,
        )

    return run


def mechanisms() -> list[Mechanism]:
    """Every selection algorithm's default, then the options that change a sensitivity."""
    out = [
        Mechanism(f"select[{algorithm}]", "partition", _selection(algorithm))
        for algorithm in ("mad2r", "mad", "basic", "dp-sips", "policy-gaussian", "greedy-update")
    ]
    out += [
        Mechanism("select[mad2r, rounds=3]", "partition", _selection("mad2r", rounds=3)),
        Mechanism(
            "select[mad2r, auto cap]", "partition", _selection("mad2r", max_items_per_user="auto")
        ),
        Mechanism("select[dp-sips, rounds=3]", "partition", _selection("dp-sips", rounds=3)),
    ]
    return out
