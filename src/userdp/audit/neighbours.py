"""Datasets the auditor works on, and their neighbours.

A :class:`Table` is a small columnar dataset (user, item, value, features), one row per
record. :func:`neighbours` builds the neighbouring datasets the auditor replays a mechanism on:
each user removed in turn (the heaviest first, then others up to a budget) and adversarial users
added, built from the data's own items and value range (all-new items, the most popular items,
extreme values, a heavy user twice the largest one, a single record), and, for statistics whose
sensitivity is stated for replaced values with public sizes, users whose values are replaced by
extremes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

__all__ = ["Neighbour", "Table", "neighbours"]


@dataclass(frozen=True)
class Table:
    """Records of users: ``user`` (int64 ids), optional ``item`` (int64 labels), ``value``
    (float64, within ``value_range``) and ``x`` (float64 features, shape (n, d))."""

    user: np.ndarray
    item: np.ndarray | None = None
    value: np.ndarray | None = None
    x: np.ndarray | None = None
    value_range: tuple[float, float] | None = None

    @property
    def n_records(self) -> int:
        return int(self.user.size)

    def take(self, rows: np.ndarray) -> Table:
        """The records at ``rows`` (a boolean mask or integer positions)."""

        def pick(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else a[rows]

        return replace(
            self, user=self.user[rows], item=pick(self.item), value=pick(self.value), x=pick(self.x)
        )

    def append(self, other: Table) -> Table:
        """This table's records followed by ``other``'s (same columns)."""

        def cat(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else np.concatenate([a, b])

        return replace(
            self,
            user=np.concatenate([self.user, other.user]),
            item=cat(self.item, other.item),
            value=cat(self.value, other.value),
            x=cat(self.x, other.x),
        )

    def sizes(self) -> tuple[np.ndarray, np.ndarray]:
        """(user ids, record counts), heaviest first (ties by id)."""
        ids, counts = np.unique(self.user, return_counts=True)
        order = np.lexsort((ids, -counts))
        return ids[order], counts[order]


@dataclass(frozen=True)
class Neighbour:
    """A neighbouring dataset: its label, the relation it belongs to and the data."""

    label: str
    relation: str  # "add-remove" or "replace-values"
    table: Table


def _added_user(
    table: Table, rows: np.ndarray, item: np.ndarray | None, value: float | None
) -> Table:
    """A new user whose records copy ``rows`` (features), with the given items and value."""
    new = table.take(rows)
    uid = int(table.user.max()) + 1 if table.n_records else 0
    new = replace(new, user=np.full(rows.size, uid, dtype=table.user.dtype))
    if item is not None and new.item is not None:
        new = replace(new, item=item.astype(new.item.dtype))
    if value is not None and new.value is not None:
        new = replace(new, value=np.full(rows.size, value, dtype=np.float64))
    return new


def _added(table: Table) -> list[Neighbour]:
    ids, counts = table.sizes()
    heaviest = np.flatnonzero(table.user == ids[0])
    k = int(counts[0])
    lo, hi = table.value_range if table.value_range is not None else (None, None)
    out: list[tuple[str, Table]] = []
    if table.item is not None:
        labels, freq = np.unique(table.item, return_counts=True)
        popular = labels[np.argsort(-freq, kind="stable")]
        novel = int(table.item.max()) + 1 + np.arange(2 * k)
        out.append(("added: all-new items", _added_user(table, heaviest, novel[:k], hi)))
        top = popular[np.arange(k) % popular.size]
        out.append(("added: most popular items", _added_user(table, heaviest, top, hi)))
        rows2 = heaviest[np.arange(2 * k) % heaviest.size]
        out.append(
            (
                "added: heavy, 2x the largest user, popular + new items",
                _added_user(table, rows2, np.concatenate([popular[:k], novel[k:]])[: 2 * k], hi),
            )
        )
        out.append(
            (
                "added: single record, most popular item",
                _added_user(table, heaviest[:1], popular[:1], hi),
            )
        )
    if table.value is not None and lo is not None:
        out.append(("added: extreme high values", _added_user(table, heaviest, None, hi)))
        out.append(("added: extreme low values", _added_user(table, heaviest, None, lo)))
        out.append(("added: single record, low value", _added_user(table, heaviest[:1], None, lo)))
    return [Neighbour(label, "add-remove", table.append(extra)) for label, extra in out]


def _replaced(table: Table, users: np.ndarray) -> list[Neighbour]:
    if table.value is None or table.value_range is None:
        return []
    lo, hi = table.value_range
    out = []
    for u in users.tolist():
        mine = table.user == u
        for name, new in (
            ("high", np.full(int(mine.sum()), hi)),
            ("low", np.full(int(mine.sum()), lo)),
            ("reflected", lo + hi - table.value[mine]),
        ):
            value = table.value.copy()
            value[mine] = new
            out.append(
                Neighbour(
                    f"user {u}: values replaced ({name})",
                    "replace-values",
                    replace(table, value=value),
                )
            )
    return out


def neighbours(
    table: Table,
    *,
    relations: tuple[str, ...] = ("add-remove",),
    max_removals: int = 20,
    heaviest: int = 3,
    seed: int = 0,
) -> list[Neighbour]:
    """Neighbouring datasets of ``table`` for the given relations.

    ``add-remove``: the ``heaviest`` largest users removed one at a time, then other users in a
    random order up to ``max_removals`` removals in all, then the adversarial added users of the
    module docstring. ``replace-values``: the values of the same users set to the range's ends
    and reflected.
    """
    ids, _ = table.sizes()
    rest = np.random.default_rng(seed).permutation(ids[heaviest:])
    chosen = np.concatenate([ids[:heaviest], rest])[: max(max_removals, 0)]
    out: list[Neighbour] = []
    if "add-remove" in relations:
        for u in chosen.tolist():
            out.append(Neighbour(f"removed user {u}", "add-remove", table.take(table.user != u)))
        out.extend(_added(table))
    if "replace-values" in relations:
        out.extend(_replaced(table, chosen[: max(1, max_removals // 3)]))
    return out


def far_tables(table: Table) -> list[Neighbour]:
    """Data sets far from ``table``, for the replay check only (never for a sensitivity): every
    user's records twice (the copies under new ids), and the lighter half of the users. Under
    replayed noise a release must not change even there, since everything it publishes is a
    function of the noisy outputs and public inputs; an exact statistic that one user cannot
    move (a threshold crossed, an argmin flipped) moves with half of them."""
    if not table.n_records:
        return []
    ids, _ = table.sizes()
    shift = int(table.user.max()) + 1
    copy = replace(table, user=table.user + shift)
    light = table.take(np.isin(table.user, ids[ids.size // 2 :]))
    return [
        Neighbour("far: every user twice", "add-remove", table.append(copy)),
        Neighbour("far: the lighter half of the users", "add-remove", light),
    ]
