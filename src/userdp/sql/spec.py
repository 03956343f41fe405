"""The parsed query, :class:`QuerySpec` and its parts, and the error the parser raises.

Also the small helpers every parsing step shares: the one-line refusal and number literals.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from userdp.exceptions import InvalidParameterError

__all__ = ["Aggregate", "Key", "QuerySpec", "TableRef", "UnsupportedQueryError", "number"]


class UnsupportedQueryError(InvalidParameterError):
    """The query is outside the private GROUP BY class (one line naming the construct)."""


@dataclass(frozen=True)
class TableRef:
    """A table of the FROM clause: its name in ``tables``, the alias used in the query, whether
    it is private, and its privacy unit column (private tables only)."""

    name: str
    alias: str
    private: bool
    unit: str | None


@dataclass(frozen=True)
class Key:
    """A GROUP BY expression (a row expression run by the engine) and its output name."""

    name: str
    expression: exp.Expression = field(repr=False)

    @property
    def sql(self) -> str:
        return self.expression.sql()


#: ``Aggregate.bounds_from`` of a ``COUNT(e)``: a sum of 0/1 row indicators, shown as a count.
COUNT_OF = "count"


@dataclass(frozen=True)
class Aggregate:
    """One released aggregate of the query.

    ``metric`` is the GROUP BY metric it is (``users``, ``count``, ``sum``, ``mean``,
    ``quantile``); ``value`` the row expression inside it (None for the counts), with the public
    ``bounds`` that clip it and where they came from (``clamp``, ``options``).
    """

    text: str
    metric: str
    value: exp.Expression | None = field(default=None, repr=False)
    level: float | None = None
    bounds: tuple[float, float] | None = None
    bounds_from: str | None = None

    @property
    def value_sql(self) -> str | None:
        return None if self.value is None else self.value.sql()


@dataclass(frozen=True)
class QuerySpec:
    """The parsed query: what the engine runs row by row and what userdp releases.

    Attributes
    ----------
    tables : tuple of TableRef
        The FROM and JOIN tables in order; the first private one gives the user column.
    skeleton : sqlglot.exp.Select
        FROM, JOINs and WHERE of the query (the row-level part, for the engine).
    keys : tuple of Key
        The GROUP BY expressions (empty: one global row).
    aggregates : tuple of Aggregate
        Every aggregate of SELECT, in order; ``__a<i>`` in ``outputs`` is ``aggregates[i]``.
    outputs : tuple of (name, expression)
        The SELECT list over the released columns ``__k<j>`` (keys) and ``__a<i>``.
    having, order, limit, offset
        Post-processing of the released table (over the same columns).
    options : Mapping
        The ``OPTIONS(...)`` of ``SELECT WITH DIFFERENTIAL_PRIVACY`` (BigQuery's form).
    """

    query: str
    dialect: str
    tables: tuple[TableRef, ...]
    skeleton: exp.Select = field(repr=False)
    keys: tuple[Key, ...]
    aggregates: tuple[Aggregate, ...]
    outputs: tuple[tuple[str, exp.Expression], ...] = field(repr=False)
    having: exp.Expression | None = field(default=None, repr=False)
    order: tuple[exp.Expression, ...] = field(default=(), repr=False)
    limit: int | None = None
    offset: int | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def user_table(self) -> TableRef:
        """The first private table: its unit column is the query's user column."""
        return next(t for t in self.tables if t.private)

    @property
    def public_keys(self) -> str | None:
        """The public table whose values are the key list (``OPTIONS(public_keys=...)``)."""
        value = self.options.get("public_keys")
        return None if value is None else str(value)


def _fail(construct: str, hint: str = "") -> UnsupportedQueryError:
    text = f"userdp.sql does not support {construct}"
    return UnsupportedQueryError(f"{text}; {hint}" if hint else f"{text}.")


def _short(node: Any, limit: int = 60) -> str:
    """A node's SQL for an error message: the query's own text, which the user wrote."""
    text = " ".join(node.sql().split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _first_line(err: BaseException) -> str:
    text = " ".join(str(err).replace("\x1b[4m", "").replace("\x1b[0m", "").split())
    return text[:200] if text else type(err).__name__


def number(node: Any) -> float | None:
    """The value of a numeric literal (``-1.5`` included), else None."""
    if isinstance(node, exp.Neg):
        inner = number(node.this)
        return None if inner is None else -inner
    if isinstance(node, exp.Paren):
        return number(node.this)
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            return float(node.this)
        except ValueError:
            return None
    return None
