"""The auditor's configurations of :func:`userdp.aggregate` (one per metric and bounding form).

Each runs the library's defaults (epsilon = 1, delta = 1e-5, keys selected privately) on the
audit table, with the table's items as keys and its values (clipped to the table's value range)
as values.
"""

from __future__ import annotations

from collections.abc import Callable

from userdp.audit.mechanisms.base import DELTA, EPSILON, Mechanism
from userdp.audit.neighbours import Table

__all__ = ["mechanisms"]


def _aggregate(metrics: str, bounding: str, public: bool) -> Callable[[Table], Callable]:
    """``bind(base)``: public keys (when ``public``) are fixed from the audited table before any
    neighbour is built, with room for the new items added users bring."""

    def bind(base: Table) -> Callable[[Table, int], object]:
        assert base.item is not None  # the aggregate audit tables always carry items
        top = int(base.item.max()) + 1 if base.n_records else 1
        keys = list(range(2 * top + 2 * int(base.sizes()[1][0]))) if public else "select"

        def run(t: Table, seed: int) -> object:
            from userdp.aggregate import aggregate

            return aggregate(
                {"user": t.user, "key": t.item, "v": t.value},
                value_column="v",
                bounds=t.value_range,
                metrics=metrics,
                keys=keys,
                epsilon=EPSILON,
                delta=DELTA,
                seed=seed,
                bounding=bounding,
                max_partitions_contributed=3,
                max_contributions_per_partition=2,
            )

        return run

    return bind


def mechanisms() -> list[Mechanism]:
    """Every metric with smooth bounding (selected and public keys), and the hard-limit form."""
    out = []
    for metric in ("users", "count", "sum", "mean", "quantiles"):
        out.append(
            Mechanism(f"aggregate[{metric}]", "aggregate", bind=_aggregate(metric, "smooth", False))
        )
    out.append(
        Mechanism(
            "aggregate[all metrics, public keys]",
            "aggregate",
            bind=_aggregate("users,count,sum,mean,quantiles", "smooth", True),
        )
    )
    out.append(
        Mechanism(
            "aggregate[limit]",
            "aggregate",
            bind=_aggregate("users,count,sum,mean", "limit", True),
            notes="hard limits L0=3, Linf=2; rows kept by keyed hashes (replayable)",
        )
    )
    return out
