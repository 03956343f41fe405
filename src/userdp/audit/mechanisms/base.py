"""What every audited configuration shares: :class:`Mechanism`, the audit's budgets, the
columns each capability reads (:data:`NEEDS`) and the synthetic :func:`audit_table`.

The capability modules (:mod:`.estimate`, :mod:`.partition`, :mod:`.multitask`,
:mod:`.recommend`, :mod:`.aggregate`) build their configurations on this module alone; the
registry (:mod:`userdp.audit.mechanisms`) imports them, never the reverse.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from userdp.audit.neighbours import Table

__all__ = [
    "DELTA",
    "EPSILON",
    "FEATURES",
    "NEEDS",
    "RATING_RANGE",
    "SELECT_DELTA",
    "SELECT_EPSILON",
    "Mechanism",
    "audit_table",
    "bounds",
    "public_catalogue",
]
EPSILON, DELTA = 1.0, 1e-5
SELECT_EPSILON, SELECT_DELTA = 8.0, 1e-2  # the private item set's selection on the audit table
RATING_RANGE = (1.0, 5.0)

#: The :class:`Table` columns (besides ``user``) a capability's configurations read, unless a
#: :class:`Mechanism` names its own ``needs``: ``item``, ``value`` (with the table's declared,
#: public ``value_range``) and ``x`` (features).
NEEDS: dict[str, tuple[str, ...]] = {
    "estimate": ("value",),
    "partition": ("item",),
    "recommend": ("item", "value"),
    "multitask": ("item", "value", "x"),
    "aggregate": ("item", "value"),
}
FEATURES = ("value", "x")  # regression and ERM: labels and features
_NEEDS_TEXT = {"item": "an item column", "value": "a value column", "x": "features"}


@dataclass(frozen=True)
class Mechanism:
    """A release to audit: ``runner(data)(table, seed)`` performs it (imports lazily)."""

    name: str
    capability: str
    run: Callable[[Table, int], object] | None = None
    notes: str = ""
    bind: Callable[[Table], Callable[[Table, int], object]] | None = None
    needs: tuple[str, ...] | None = None  # None: its capability's NEEDS

    def missing(self, table: Table) -> str:
        """Why this release cannot run on ``table`` ("" when it can): the columns it reads
        that the table lacks, e.g. "needs a value column and features"."""
        needs = self.needs if self.needs is not None else NEEDS[self.capability]
        lacking = [_NEEDS_TEXT[c] for c in needs if getattr(table, c) is None]
        if "value" in needs and table.value is not None and table.value_range is None:
            lacking.append("a declared value range")
        return f"needs {' and '.join(lacking)}" if lacking else ""

    def runner(self, base: Table) -> Callable[[Table, int], object]:
        """``run``, or ``bind(base)`` for mechanisms with public inputs fixed from the data."""
        if self.bind is not None:
            return self.bind(base)
        if self.run is None:
            raise TypeError(f"Mechanism {self.name!r} has neither run nor bind.")
        return self.run


def bounds(t: Table) -> tuple[float, float]:
    """The declared, public range of the table's values (never the data's own min and max):
    ``value_range`` (``userdp audit --value-range``), else the configurations' rating range."""
    return t.value_range if t.value_range is not None else RATING_RANGE


def public_catalogue(base: Table) -> np.ndarray:
    """A public item catalogue fixed from the audited data before any neighbour is built: its
    items and the new labels the adversarial added users take (up to twice the largest user)."""
    largest = int(base.sizes()[1][0]) if base.n_records else 0
    assert base.item is not None  # the recommend audit tables always carry items
    return np.arange(int(base.item.max()) + 1 + 2 * largest, dtype=np.int64)


def audit_table(n_users: int = 40, n_items: int = 30, *, seed: int = 0) -> Table:
    """Synthetic ratings with skewed user sizes and item popularity, 2 public features per
    record, labels in ``RATING_RANGE`` linear in the features (for regression and ERM)."""
    rng = np.random.default_rng(seed)
    sizes = np.minimum(rng.zipf(1.8, n_users), max(2, n_items // 2))
    pop = 1.0 / np.arange(1, n_items + 1)
    pop /= pop.sum()
    user = np.repeat(np.arange(n_users, dtype=np.int64), sizes)
    item = np.concatenate([rng.choice(n_items, s, replace=False, p=pop) for s in sizes])
    x = rng.normal(0.0, 1.0, (user.size, 2))
    y = np.clip(3.0 + x @ np.array([0.8, -0.5]) + rng.normal(0.0, 0.5, user.size), *RATING_RANGE)
    return Table(user=user, item=item.astype(np.int64), value=y, x=x, value_range=RATING_RANGE)
