"""The read-only mapping behind every result's non-private ``diagnostics`` (base layer)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import fields
from typing import Any

__all__ = ["NotPrivateMapping"]


class NotPrivateMapping(Mapping[str, Any]):
    """A frozen dataclass's fields as a mapping, labelled not private when described.

    Subclasses are ``@dataclass(frozen=True)`` records of exact, un-noised input statistics for
    the operator who runs a job; they are never part of a release.
    """

    private = False  #: a reminder for code that handles it: these values are not DP

    def __getitem__(self, key: str) -> Any:
        if key not in self._keys():
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

    @classmethod
    def _keys(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))  # type: ignore[arg-type]

    def describe(self) -> str:
        """One line for logs, labelled as not private."""
        body = ", ".join(f"{k}={v}" for k, v in self.items())
        return f"NOT PRIVATE (exact, for the operator only): {body}"
