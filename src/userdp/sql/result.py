"""What a private SQL query returns: the released table (and its plan, for EXPLAIN)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import dp_accounting
import pyarrow as pa

from userdp.exceptions import InvalidParameterError
from userdp.privacy import PrivacyBudget
from userdp.sql.parse import QuerySpec
from userdp.sql.spec import COUNT_OF

__all__ = ["QueryPlan", "Release", "SqlResult"]


@dataclass(frozen=True)
class Release:
    """One call of :func:`userdp.aggregate` that a query makes (one per value expression).

    ``columns`` maps the index of each aggregate of the query it answers to its column in the
    call's table (``users``, ``count``, ``sum``, ``mean``, ``q<level>``).
    """

    metrics: tuple[str, ...]
    value: int | None
    bounds: tuple[float, float] | None
    levels: tuple[float, ...]
    epsilon: float
    delta: float
    seed: int | None
    columns: Mapping[int, str]


@dataclass(frozen=True)
class QueryPlan:
    """A query's plan, decided from the query text and public parameters only (no data).

    Attributes
    ----------
    spec : QuerySpec
        The parsed query.
    engine : str
        ``"local"`` (DuckDB) or ``"spark"``.
    epsilon, delta : float
        The budget of the whole query.
    keys : str
        ``"select"`` (released keys chosen privately), ``"public"`` (the values of the public
        table in ``spec.public_keys``) or ``"one"`` (no GROUP BY: one global row).
    selection : (float, float) or None
        The (epsilon, delta) of the separate key selection (queries with several value
        expressions); None when the key set comes with the one GROUP BY call, or is public.
    releases : tuple of Release
        The GROUP BY calls, each with its share of the budget.
    noise : tuple of Mapping
        Per call: the noise multiplier z of each released vector (noise sd = z times the
        user bound C, which is chosen privately at run time) and of the bound histograms.
    rows_sql : str
        The row-level statement the engine runs.
    """

    spec: QuerySpec
    engine: str
    epsilon: float
    delta: float
    keys: str
    selection: tuple[float, float] | None
    releases: tuple[Release, ...]
    noise: tuple[Mapping[str, Any], ...] = field(repr=False)
    rows_sql: str = field(repr=False)

    @property
    def text(self) -> str:
        """The plan as the lines ``--explain`` prints."""
        spec = self.spec
        lines = [f"userdp sql plan (engine {self.engine}; nothing is read or charged)"]
        for t in spec.tables:
            role = f"private, privacy unit {t.unit!r}" if t.private else "public"
            alias = f" AS {t.alias}" if t.alias != t.name else ""
            lines.append(f"  table {t.name}{alias}: {role}")
        lines.append(
            f"  user: {spec.user_table.alias}.{spec.user_table.unit} (one user = one unit)"
        )
        if spec.keys:
            key_from = {
                "select": "selected privately (MAD2R partition selection)",
                "public": f"public: the values of table {spec.public_keys!r} (cost nothing)",
            }[self.keys]
            names = ", ".join(k.sql for k in spec.keys)
            lines.append(f"  GROUP BY {names}: keys {key_from}")
        else:
            lines.append("  no GROUP BY: one global row")
        for a in spec.aggregates:
            what = a.metric if a.level is None else f"quantile {a.level:g}"
            value = f" of {a.value_sql}" if a.value is not None else ""
            bounds = f", public range {a.bounds} (from {a.bounds_from})" if a.bounds else ""
            if a.bounds_from == COUNT_OF:  # COUNT(e): a sum of 0/1 row indicators
                bounds = ", each row 0 or 1: a count, released as an integer"
            lines.append(f"  aggregate {a.text}: {what}{value}{bounds}")
        if spec.options.get("max_groups_contributed") is not None:
            lines.append(
                "  max_groups_contributed: not used (userdp bounds each user's contribution "
                "itself, with a privately chosen bound)"
            )
        lines.append(f"  budget: epsilon={self.epsilon:g}, delta={self.delta:g} (user-level)")
        if self.selection is not None:
            lines.append(
                f"    key selection: epsilon={self.selection[0]:g}, delta={self.selection[1]:g}"
            )
        for r, noise in zip(self.releases, self.noise, strict=True):
            lines.append(
                f"    GROUP BY call ({', '.join(r.metrics)}): epsilon={r.epsilon:g}, "
                f"delta={r.delta:g}"
            )
            if noise.get("selection_epsilon") is not None:
                lines.append(
                    "      of which key selection: "
                    f"epsilon={noise['selection_epsilon']:g}, delta={noise['selection_delta']:g}"
                )
            z = ", ".join(f"{k} z={v:.4g}" for k, v in noise["noise_multipliers"].items())
            lines.append(
                f"      noise per cell: sd = z * C with {z}; C, each user's l2 bound, is chosen "
                "privately at run time (users: C <= sqrt(keys))"
            )
        post = [
            w
            for w, on in (
                ("HAVING", spec.having is not None),
                ("ORDER BY", bool(spec.order)),
                ("LIMIT", spec.limit is not None),
            )
            if on
        ]
        if post:
            lines.append(f"  then {', '.join(post)} on the released table (post-processing)")
        lines.append(f"  row-level query ({'DuckDB' if self.engine == 'local' else 'Spark SQL'}):")
        lines.append(f"    {self.rows_sql}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class SqlResult:
    """A private SQL query's release.

    Attributes
    ----------
    table : pyarrow.Table
        The SELECT list's columns, after HAVING, ORDER BY and LIMIT on the released values.
    intervals : pyarrow.Table
        The key columns and, for each released COUNT, SUM and AVG column ``c``, ``c_low`` and
        ``c_high``: the GROUP BY's 95% interval of the cell, from the released noise alone
        (the bias of bounding heavy users down is not in it).
    budget : PrivacyBudget
        The (epsilon, delta) the query spent (every call composed).
    dp_event : dp_accounting.DpEvent
        Every release of the query as one ``ComposedDpEvent``.
    releases : tuple of AggregateResult
        The GROUP BY calls' own results (bounds chosen, noise sd): all released values.
    plan : QueryPlan
    engine : str
    """

    table: pa.Table = field(repr=False)
    intervals: pa.Table = field(repr=False)
    budget: PrivacyBudget
    dp_event: dp_accounting.DpEvent = field(repr=False)
    releases: tuple[Any, ...] = field(repr=False)
    plan: QueryPlan = field(repr=False)
    engine: str = "local"
    session: Any = field(default=None, repr=False, compare=False)

    def to_arrow(self) -> pa.Table:
        """The released table as PyArrow."""
        return self.table

    def to_pandas(self) -> Any:
        """The released table as a pandas DataFrame."""
        return self.table.to_pandas()

    def to_polars(self) -> Any:
        """The released table as a Polars DataFrame."""
        import polars as pl

        return pl.from_arrow(self.table)

    def to_spark(self) -> Any:
        """The released table as a Spark DataFrame (Spark engine only: its session)."""
        if self.session is None:
            raise InvalidParameterError(
                "to_spark needs a result of the Spark engine; use to_arrow or to_pandas."
            )
        return self.session.createDataFrame(self.table.to_pandas())

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.table.to_pylist())

    def __len__(self) -> int:
        return int(self.table.num_rows)

    def to_dict(self, *, rows: bool = True) -> dict[str, Any]:
        """The release as plain data: budget, unit, the calls' bounds and noise, the rows."""
        out: dict[str, Any] = {
            "epsilon": self.budget.epsilon,
            "delta": self.budget.delta,
            "unit": "user",
            "rows_released": len(self),
            "columns": self.table.column_names,
            "releases": [r.to_dict(rows=False) for r in self.releases],
        }
        if rows:
            out["rows"] = self.table.to_pylist()
        return out

    def summary(self) -> str:
        """One line of released facts only: rows, columns and budget."""
        n = len(self)
        return (
            f"sql: {n} row{'' if n == 1 else 's'}, columns {', '.join(self.table.column_names)}, "
            f"{len(self.releases)} GROUP BY release{'' if len(self.releases) == 1 else 's'} at "
            f"epsilon={self.budget.epsilon:g}, delta={self.budget.delta:g}"
        )
