"""``sql``: a private GROUP BY written as SQL, over DuckDB (in process) or Spark SQL.

The engine runs the row-level part (scan, WHERE, joins, the expressions inside the
aggregates) and yields one ``(user, key, value...)`` table; the private part is
:func:`userdp.aggregate`'s (and :func:`userdp.partition.select_partitions`'s), through their
public signatures; HAVING, ORDER BY, LIMIT and expressions over the released aggregates are
post-processing of the released table.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import dp_accounting
import numpy as np
import pyarrow as pa
from sqlglot import exp

from userdp._engines import is_spark_dataframe
from userdp._validation import check_choice
from userdp.exceptions import BudgetExceededError, InvalidParameterError
from userdp.privacy import PrivacyAccountant, PrivacyBudget, check_accountant
from userdp.sql import rows as rowsql
from userdp.sql.parse import QuerySpec, parse_query
from userdp.sql.result import QueryPlan, Release, SqlResult
from userdp.sql.spec import COUNT_OF

__all__ = ["sql"]

#: With several value expressions the key selection runs once, before the GROUP BY calls,
#: with this share of (epsilon, delta); the calls split the rest equally, and every epsilon is
#: then scaled up by the largest factor at which the composition still fits the budget.
SELECTION_SHARE = 0.5


def sql(
    query: str,
    *,
    tables: Mapping[str, Any],
    privacy_unit: str | Mapping[str, str] | None = None,
    epsilon: float | None = None,
    delta: float | None = None,
    accountant: PrivacyAccountant | None = None,
    engine: str = "auto",
    seed: int | None = None,
    public_tables: Collection[str] = (),
    explain: bool = False,
    dialect: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> SqlResult | QueryPlan:
    """Run a private ``SELECT ... GROUP BY`` over ``tables``; no contribution bounds to guess.

    Parameters
    ----------
    query : str
        One SELECT of the query class of :mod:`userdp.sql.parse`, in DuckDB's SQL or in
        BigQuery's ``SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=..., delta=...,
        privacy_unit_column=...) ...`` form (read as BigQuery SQL).
    tables : mapping of str to table
        The tables the query names: pyarrow Tables or datasets, pandas or Polars DataFrames,
        dicts of columns, file paths (Parquet, CSV, TSV, JSON Lines) or Spark DataFrames.
    privacy_unit : str or mapping of table name to column
        The user column of each private table (a str: the same name in every private table).
        Every table not in ``public_tables`` is private and needs one.
    epsilon, delta : float
        The user-level budget of the whole query, here or in the query's OPTIONS (not both
        with different values).
    accountant : PrivacyAccountant or None
        Charged with every release; refuses before any data is read.
    engine : {"auto", "local", "spark"}
        ``"local"`` runs the rows in DuckDB; ``"spark"`` in Spark SQL (every table a Spark
        DataFrame); ``"auto"``: Spark when a table is a Spark DataFrame.
    seed : int or None
        None draws noise from OS entropy; a fixed seed is for tests and benchmarks only.
    public_tables : collection of str
        The tables whose contents are public (dimension tables, key lists).
    explain : bool
        Return the :class:`QueryPlan` instead of running: nothing is read or charged.
    dialect : str or None
        The SQL dialect of ``query`` (sqlglot's names); None: BigQuery for the
        ``WITH DIFFERENTIAL_PRIVACY`` form, DuckDB otherwise.
    progress : callable or None
        ``progress(done, 100)``: the percent of the row-level query DuckDB has run (local
        engine; called from a second thread while it runs, and with 100 at its end). Counts
        only: it draws no randomness, so a seeded release is the same with it or without.

    Returns
    -------
    SqlResult, or QueryPlan with ``explain=True``

    Raises
    ------
    UnsupportedQueryError
        The query is outside the class; the one line names the construct.
    InvalidParameterError, DataError, BudgetExceededError

    Privacy
    -------
    Add/remove one user: every row whose privacy unit column holds that user's id, in every
    private table (a join of two private tables must equate their units, so it stays one
    user). Public tables are public: a join to one may repeat a user's row, which only
    changes that user's contribution vector, whose l2 norm the GROUP BY bounds after the join.
    Released: the keys (selected privately, or the public key table's values), the noisy
    aggregates and the public parameters. Value ranges are public and must be in the query.
    One GROUP BY call per value expression; they compose on one accountant (see
    :data:`SELECTION_SHARE`).

    Examples
    --------
    >>> rows = {"uid": [u for u in range(3000) for _ in (0, 1)],
    ...         "page": [p for u in range(3000) for p in ("home", f"rare{u}")]}
    >>> r = sql("SELECT page, COUNT(DISTINCT uid) AS users FROM visits GROUP BY page",
    ...         tables={"visits": rows}, privacy_unit="uid", epsilon=1.0, delta=1e-5, seed=0)
    >>> r.to_arrow().column("page").to_pylist()
    ['home']
    """
    if not isinstance(tables, Mapping) or not all(isinstance(k, str) for k in tables):
        raise InvalidParameterError(
            "The 'tables' parameter of sql must be a mapping of table names to tables."
        )
    public = [public_tables] if isinstance(public_tables, str) else list(public_tables)
    unknown = [p for p in public if p not in tables]
    if unknown:
        raise InvalidParameterError(
            f"public_tables names {', '.join(map(repr, unknown))}, which is not in tables=."
        )
    spec = parse_query(
        query, tables=list(tables), public_tables=public, privacy_unit=privacy_unit,
        dialect=dialect,
    )  # fmt: skip
    eps, dlt = _budget(spec, epsilon, delta)
    check_accountant(accountant, "accountant", "sql")
    used = [t.name for t in spec.tables]
    if spec.public_keys:
        used.append(spec.public_keys)
    engine = check_choice(engine, "engine", "sql", ["auto", "local", "spark"])
    if engine == "auto":
        engine = "spark" if any(is_spark_dataframe(tables[n]) for n in used) else "local"
    plan = make_plan(spec, eps, dlt, engine=engine, seed=seed)
    if explain:
        return plan
    return _run(plan, tables, used, accountant, seed, progress)


def _budget(spec: QuerySpec, epsilon: float | None, delta: float | None) -> tuple[float, float]:
    out = []
    for name, given in (("epsilon", epsilon), ("delta", delta)):
        option = spec.options.get(name)
        if given is not None and option is not None and not math.isclose(given, option):
            raise InvalidParameterError(
                f"The query's OPTIONS({name}={option:g}) differs from {name}={given:g}; give one."
            )
        value = given if given is not None else option
        if value is None:
            raise InvalidParameterError(
                f"sql needs {name}: pass {name}= or write OPTIONS({name}=...) in the query."
            )
        out.append(float(value))
    PrivacyBudget(out[0], out[1])  # validated: epsilon > 0, delta in (0, 1)
    return out[0], out[1]


def _groups(spec: QuerySpec) -> list[tuple[str, tuple[float, float]]]:
    """The distinct (value expression, bounds) pairs: one GROUP BY call each."""
    out: list[tuple[str, tuple[float, float]]] = []
    for a in spec.aggregates:
        if a.value_sql is not None and a.bounds is not None and (a.value_sql, a.bounds) not in out:
            out.append((a.value_sql, a.bounds))
    return out


def _column(metric: str, level: float | None) -> str:
    return f"q{level:g}" if metric == "quantile" else metric


def _seeds(seed: int | None, n: int) -> list[int | None]:
    """One seed per release (an accountant refuses a repeated seed): the seed itself for one
    release, else independent children of it."""
    if seed is None:
        return [None] * n
    if n == 1:
        return [seed]
    children = np.random.SeedSequence(seed).spawn(n)
    return [int(c.generate_state(1, np.uint64)[0] >> np.uint64(1)) for c in children]


def make_plan(
    spec: QuerySpec, epsilon: float, delta: float, *, engine: str, seed: int | None
) -> QueryPlan:
    """Split the budget over the query's releases and read their noise from dry runs of
    :func:`userdp.aggregate` on a one-row public table (no private data, nothing charged)."""
    groups = _groups(spec)
    counts = tuple(dict.fromkeys(a.metric for a in spec.aggregates if a.value is None))
    keys = "one" if not spec.keys else ("public" if spec.public_keys else "select")
    n = max(len(groups), 1)
    separate = keys == "select" and n > 1
    share = (1 - SELECTION_SHARE) / n if separate else 1 / n
    seeds = _seeds(seed, n + int(separate))
    releases = []
    for j in range(n):
        columns: dict[int, str] = {}
        metrics: list[str] = []
        levels: list[float] = []
        for i, a in enumerate(spec.aggregates):
            mine = (a.value is None and j == 0) or (
                groups and (a.value_sql, a.bounds) == groups[j] and a.value is not None
            )
            if not mine:
                continue
            metric = "quantiles" if a.metric == "quantile" else a.metric
            if metric not in metrics:
                metrics.append(metric)
            if a.level is not None and a.level not in levels:
                levels.append(a.level)
            columns[i] = _column(a.metric, a.level)
        if not metrics:
            metrics = list(counts)
        releases.append(
            Release(
                metrics=tuple(metrics),
                value=j if groups else None,
                bounds=groups[j][1] if groups else None,
                levels=tuple(levels),
                epsilon=epsilon * share,
                delta=delta * share,
                seed=seeds[j + int(separate)],
                columns=columns,
            )
        )
    selection = (epsilon * SELECTION_SHARE, delta * SELECTION_SHARE) if separate else None
    if len(releases) > 1:
        releases, selection = _calibrate(releases, selection, epsilon, delta, bool(spec.keys))
    noise = tuple(
        _dry_run(r, keys if not separate else "public", bool(spec.keys)) for r in releases
    )
    values = [_value_expression(spec, g) for g in groups]
    dialect = "duckdb" if engine == "local" else "spark"
    return QueryPlan(
        spec=spec,
        engine=engine,
        epsilon=epsilon,
        delta=delta,
        keys=keys,
        selection=selection,
        releases=tuple(releases),
        noise=noise,
        rows_sql=rowsql.rows_statement(spec, values, dialect=dialect),
    )


def _scaled(
    releases: Sequence[Release], selection: tuple[float, float] | None, factor: float
) -> tuple[list[Release], tuple[float, float] | None]:
    out = [dataclasses.replace(r, epsilon=r.epsilon * factor) for r in releases]
    return out, None if selection is None else (selection[0] * factor, selection[1])


def _calibrate(
    releases: Sequence[Release],
    selection: tuple[float, float] | None,
    epsilon: float,
    delta: float,
    grouped: bool,
) -> tuple[list[Release], tuple[float, float] | None]:
    """Scale every release's epsilon by the largest factor whose composition still fits
    (epsilon, delta), by bisection with the accountant in the loop (rounding down: less
    budget, more noise). The basic split (factor 1) always fits; the accountant composes the
    Gaussian parts as one Gaussian, so a larger factor usually does too."""

    def fits(factor: float) -> bool:
        scaled, sel = _scaled(releases, selection, factor)
        try:
            events = [_dry_run(r, "public", grouped)["event"] for r in scaled]
            if sel is not None:
                events.insert(0, _selection_event(*sel))
        except InvalidParameterError:
            return False
        own = PrivacyAccountant(PrivacyBudget(epsilon, delta))
        try:
            own.check(dp_accounting.ComposedDpEvent(events))
        except BudgetExceededError:
            return False
        return True

    lo, hi = 1.0, float(len(releases) + (selection is not None))
    for _ in range(14):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return _scaled(releases, selection, lo)


def _value_expression(spec: QuerySpec, group: tuple[str, tuple[float, float]]) -> exp.Expression:
    return next(a.value for a in spec.aggregates if (a.value_sql, a.bounds) == group and a.value)


def _dry_run(release: Release, keys: str, grouped: bool) -> dict[str, Any]:
    """The parameters and event of ``release`` from a run on one public row (seed 0)."""
    from userdp.aggregate import aggregate

    lo, hi = release.bounds or (0.0, 1.0)
    dummy = pa.table({"u": ["u"], "k": ["k"], "v": [0.5 * (lo + hi)]})
    result = aggregate(
        dummy,
        user_column="u",
        key_column="k" if grouped else None,
        value_column="v" if release.bounds else None,
        metrics=release.metrics,
        bounds=release.bounds,
        keys="select" if keys == "select" else ["k"],
        epsilon=release.epsilon,
        delta=release.delta,
        seed=0,
        **_quantile_option(release),
    )
    p = result.parameters
    return {
        "noise_multipliers": dict(p["noise_multipliers"]),
        "histogram_noise_multipliers": dict(p["histogram_noise_multipliers"]),
        "selection_epsilon": p.get("selection_epsilon"),
        "selection_delta": p.get("selection_delta"),
        "event": result.dp_event,
    }


def _quantile_option(release: Release) -> dict[str, Any]:
    return {"quantiles": release.levels} if release.levels else {}


def _selection_event(epsilon: float, delta: float) -> Any:
    from userdp.partition import select_partitions

    dummy = pa.table({"user": ["u"], "item": ["k"]})
    return select_partitions(dummy, epsilon=epsilon, delta=delta, engine="local", seed=0).dp_event


def _run(
    plan: QueryPlan,
    tables: Mapping[str, Any],
    used: Sequence[str],
    accountant: PrivacyAccountant | None,
    seed: int | None,
    progress: Callable[[int, int], None] | None = None,
) -> SqlResult:
    from userdp.aggregate import aggregate

    spec = plan.spec
    own = PrivacyAccountant(PrivacyBudget(plan.epsilon, plan.delta))
    planned = [n["event"] for n in plan.noise]
    if plan.selection is not None:
        planned.insert(0, _selection_event(*plan.selection))
    whole = dp_accounting.ComposedDpEvent(planned)
    own.check(whole, caller="sql")
    if accountant is not None:  # the whole query is refused before any data is read
        accountant.check(whole, caller="sql")
        for s in _seeds(seed, len(planned)):
            accountant.check(dp_accounting.NoOpDpEvent(), seed=s, caller="sql")
    values = [_value_expression(spec, g) for g in _groups(spec)]
    session = None
    if plan.engine == "local":
        rows, key_types, public_keys = _local_rows(spec, tables, used, values, progress)
    else:
        rows, key_types, public_keys, session = _spark_rows(spec, tables, used, values)
    grouped = bool(spec.keys)
    keys: Any = public_keys if plan.keys == "public" else "select"
    events: list[Any] = []
    if plan.selection is not None:
        keys = _select_keys(rows, plan, accountant, seed)
        events.append(keys[1])
        keys = keys[0]
    results = []
    for r in plan.releases:
        result = aggregate(
            rows,
            user_column=rowsql.USER,
            key_column=rowsql.KEY if grouped else None,
            value_column=rowsql.value_column(r.value) if r.value is not None else None,
            metrics=r.metrics,
            bounds=r.bounds,
            keys=keys,
            epsilon=r.epsilon,
            delta=r.delta,
            accountant=accountant,
            engine=plan.engine,
            seed=r.seed,
            **_quantile_option(r),
        )
        results.append(result)
        events.append(result.dp_event)
    event = dp_accounting.ComposedDpEvent(events)
    own.compose(event)
    released, intervals = _released(plan, results, key_types)
    table, interval_table = _post_process(spec, released, intervals)
    return SqlResult(
        table=table,
        intervals=interval_table,
        budget=own.spent(),
        dp_event=event,
        releases=tuple(results),
        plan=plan,
        engine=plan.engine,
        session=session,
    )


def _local_rows(
    spec: QuerySpec,
    tables: Mapping[str, Any],
    used: Sequence[str],
    values: list[exp.Expression],
    progress: Callable[[int, int], None] | None = None,
) -> tuple[pa.Table, list[str], list[Any] | None]:
    with rowsql.duckdb_connection(tables, used) as con:
        types = rowsql.describe_duckdb(
            con,
            rowsql.rows_statement(spec, values, dialect="duckdb", cast_values=False, encode=False),
        )
        _check_value_types(spec, values, types)
        key_types = [types[f"__k{j}"] for j in range(len(spec.keys))]
        statement = rowsql.rows_statement(spec, values, dialect="duckdb")
        rows = rowsql.run_duckdb(con, statement, progress)
        public_keys = None
        if spec.public_keys:
            statement = rowsql.public_keys_statement(spec, spec.public_keys, dialect="duckdb")
            public_keys = rowsql.run_duckdb(con, statement).column(rowsql.KEY).to_pylist()
    return rows, key_types, public_keys


def _spark_rows(
    spec: QuerySpec, tables: Mapping[str, Any], used: Sequence[str], values: list[exp.Expression]
) -> tuple[Any, list[str], list[Any] | None, Any]:
    with rowsql.spark_views(tables, used) as views:
        session = tables[used[0]].sparkSession
        probe = session.sql(
            rowsql.rows_statement(
                spec, values, dialect="spark", cast_values=False, encode=False, rename=views
            )
        )
        types = {f.name: f.dataType.simpleString() for f in probe.schema.fields}
        _check_value_types(spec, values, types)
        key_types = [types[f"__k{j}"] for j in range(len(spec.keys))]
        statement = rowsql.rows_statement(spec, values, dialect="spark", rename=views)
        rows = session.sql(statement).cache()
        rows.count()  # materialised before the views go
        public_keys = None
        if spec.public_keys:
            keys_sql = rowsql.public_keys_statement(spec, views[spec.public_keys], dialect="spark")
            public_keys = [r[0] for r in session.sql(keys_sql).collect()]
    return rows, key_types, public_keys, session


def _check_value_types(
    spec: QuerySpec, values: list[exp.Expression], types: Mapping[str, str]
) -> None:
    for j, value in enumerate(values):
        kind = types[rowsql.value_column(j)]
        if not rowsql.is_numeric_type(kind):
            users = [
                a.text
                for a in spec.aggregates
                if a.value is not None and a.value_sql == value.sql()
            ]
            raise InvalidParameterError(
                f"{users[0] if users else value.sql()}: its values have the type {kind}; SUM, AVG "
                "and the quantiles take numbers (write CAST(x AS DOUBLE) if they are numbers)."
            )


def _select_keys(
    rows: Any, plan: QueryPlan, accountant: PrivacyAccountant | None, seed: int | None
) -> tuple[list[Any], Any]:
    from userdp.partition import select_partitions

    assert plan.selection is not None  # only called for a separate selection
    pairs = rows.select([rowsql.USER, rowsql.KEY]) if isinstance(rows, pa.Table) else rows
    result = select_partitions(
        pairs,
        epsilon=plan.selection[0],
        delta=plan.selection[1],
        engine=plan.engine,
        accountant=accountant,
        seed=_seeds(seed, len(plan.releases) + 1)[0],
        user_column=rowsql.USER,
        item_column=rowsql.KEY,
    )
    return result.to_arrow().to_pylist(), result.dp_event


def _released(
    plan: QueryPlan, results: list[Any], key_types: list[str]
) -> tuple[pa.Table, dict[int, tuple[pa.Array, pa.Array]]]:
    """The released columns ``__k<j>`` and ``__a<i>``, and the noise intervals of the counts
    and sums, all from the calls' released tables and noise sd."""
    spec = plan.spec
    tables = [r.to_arrow() for r in results]
    n = tables[0].num_rows
    if any(t.num_rows != n for t in tables):  # the calls share one public key list
        raise InvalidParameterError("sql: the GROUP BY calls released different key sets.")
    columns: dict[str, Any] = {}
    if len(spec.keys) == 1:
        columns["__k0"] = tables[0].column("key")
    elif spec.keys:
        parts = rowsql.decode_keys(tables[0].column("key").to_pylist(), len(spec.keys))
        for j, col in enumerate(rowsql.decode_with_duckdb(parts, key_types)):
            columns[f"__k{j}"] = col
    from userdp.aggregate.cells import count_cells

    intervals: dict[int, tuple[pa.Array, pa.Array]] = {}
    for release, table, result in zip(plan.releases, tables, results, strict=True):
        for i, name in release.columns.items():
            columns[f"__a{i}"] = table.column(name)
            if f"{name}_low" in table.column_names:  # the GROUP BY's 95% interval of the cell
                intervals[i] = (table.column(f"{name}_low"), table.column(f"{name}_high"))
            if spec.aggregates[i].bounds_from == COUNT_OF:  # COUNT(e): a sum of 0/1 rows,
                # shown as the GROUP BY shows its counts (post-processing of the noisy sum)
                noisy = np.asarray(table.column(name), dtype=np.float64)
                cells = count_cells(name, noisy, result.noise_sd[name])
                columns[f"__a{i}"] = pa.array(cells[name].astype(np.int64))
                lo, hi = (pa.array(cells[f"{name}_{s}"].astype(np.int64)) for s in ("low", "high"))
                intervals[i] = (lo, hi)
    return pa.table(columns), intervals


def _post_process(
    spec: QuerySpec, released: pa.Table, intervals: Mapping[int, tuple[pa.Array, pa.Array]]
) -> tuple[pa.Table, pa.Table]:
    """SELECT, HAVING, ORDER BY and LIMIT over the released table, in DuckDB."""

    table = released
    for i, (lo, hi) in intervals.items():
        table = table.append_column(f"__lo{i}", lo).append_column(f"__hi{i}", hi)
    items = [exp.alias_(e.copy(), name, quoted=True) for name, e in spec.outputs]
    extra: list[str] = []
    key_names: list[str] = []
    for name, e in spec.outputs:
        if isinstance(e, exp.Column) and e.name.startswith("__k"):
            key_names.append(name)
        if isinstance(e, exp.Column) and e.name.startswith("__a") and int(e.name[3:]) in intervals:
            i = int(e.name[3:])
            for side, suffix in (("lo", "low"), ("hi", "high")):
                items.append(
                    exp.alias_(exp.column(f"__{side}{i}"), f"{name}_{suffix}", quoted=True)
                )
                extra.append(f"{name}_{suffix}")
    sel = exp.select(*items).from_("__released")
    if spec.having is not None:
        sel = sel.where(spec.having.copy())
    if spec.order:
        sel = sel.order_by(*[o.copy() for o in spec.order])
    if spec.limit is not None:
        sel = sel.limit(spec.limit)
    if spec.offset is not None:
        sel = sel.offset(spec.offset)
    con = rowsql.connect_duckdb()
    try:
        con.register("__released", table)
        out = rowsql.run_duckdb(con, sel.sql(dialect="duckdb"))
    finally:
        con.close()
    names = [name for name, _ in spec.outputs]
    return out.select(names), out.select(key_names + extra)
