"""The item set a recommender trains on and releases, fixed before any statistic is computed.

A released model's item vocabulary must not depend on any single user: if it were the union of
the users' items, an item rated by one user only would appear in the model exactly when that
user is in the data, and a new item would enter every user's implicit-feedback solve. So the
item set is one of:

- **public**: a catalogue the user passes (``ItemSet.public(labels)`` or just the labels), such
  as MovieLens' movie list in the papers' protocol. Costs nothing.
- **private**: chosen by partition selection on the (user, item) pairs, charged to the same
  accountant as the model: ``ItemSet.selected(userdp.select_partitions(pairs, ...))``.

Layering: ``userdp.recommend`` does not import ``userdp.partition`` (capabilities do not import
each other). The selection runs in the caller (the CLI ``userdp recommend train``, or the
user's script) and is passed in as a released value: :meth:`ItemSet.selected` reads only the
result's public fields (``item_array``, ``dp_event``, ``budget``).

Ratings of items outside the set are dropped before training (counted in the estimator's
non-private ``diagnostics_``); items of the set that nobody rated keep a row (noise only).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import dp_accounting
import pyarrow as pa

from userdp.data.ratings import vocabulary_array
from userdp.exceptions import InvalidParameterError
from userdp.privacy.budget import PrivacyBudget

__all__ = ["ItemSet", "as_item_set"]


@dataclass(frozen=True)
class ItemSet:
    """An item vocabulary independent of any single user, with what it cost.

    Attributes
    ----------
    labels : pyarrow.Array
        Distinct item ids; the model's item code ``c`` is ``labels[c]``.
    source : {"public", "private"}
    dp_event : dp_accounting.DpEvent or None
        The selection's event (private), composed into the model's ``dp_event_``.
    budget : PrivacyBudget or None
        What the selection spent (private).
    """

    labels: pa.Array = field(repr=False)
    source: str
    dp_event: dp_accounting.DpEvent | None = field(default=None, repr=False)
    budget: PrivacyBudget | None = None

    @classmethod
    def public(cls, labels: Any) -> ItemSet:
        """A public catalogue: any sequence of distinct item ids (free)."""
        return cls(vocabulary_array(labels), "public")

    @classmethod
    def selected(cls, result: Any) -> ItemSet:
        """The items released by partition selection (a ``SelectionResult``), with its cost."""
        for name in ("item_array", "dp_event", "budget"):
            if not hasattr(result, name):
                raise InvalidParameterError(
                    "ItemSet.selected takes the result of userdp.select_partitions (it needs "
                    f"{name!r}); for a public catalogue use ItemSet.public(labels)."
                )
        return cls(vocabulary_array(result.item_array), "private", result.dp_event, result.budget)

    def __len__(self) -> int:
        return len(self.labels)


def as_item_set(items: Any) -> ItemSet:
    """An :class:`ItemSet` as is; anything else is read as a public catalogue of item ids."""
    return items if isinstance(items, ItemSet) else ItemSet.public(items)
