"""A private GROUP BY written as SQL, parsed with sqlglot into a frozen :class:`QuerySpec`.

The query class and what it refuses are in docs/sql.md. The parser reads only the query text
and the names of the tables: never their data.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from sqlglot import exp

from userdp.exceptions import InvalidParameterError
from userdp.sql.aggregates import SUPPORTED, _keys, _Outputs
from userdp.sql.checks import (
    _check_clauses,
    _check_joins,
    _check_no_aggregate,
    _check_public_keys,
    _check_subqueries,
    _statement,
    _tables,
    resolve_name,
)
from userdp.sql.dp_clause import split_dp_clause
from userdp.sql.spec import (
    Aggregate,
    Key,
    QuerySpec,
    TableRef,
    UnsupportedQueryError,
    _fail,
    _short,
    number,
)

__all__ = [
    "Aggregate",
    "Key",
    "QuerySpec",
    "TableRef",
    "UnsupportedQueryError",
    "parse_query",
]

_SEP, _ESC = "|", "!"  # the multi-column key encoding (see rows.encode_keys)


def parse_query(
    query: str,
    *,
    tables: Collection[str],
    public_tables: Collection[str] = (),
    privacy_unit: str | Mapping[str, str] | None = None,
    dialect: str | None = None,
) -> QuerySpec:
    """Parse ``query`` into a :class:`QuerySpec`, or raise :class:`UnsupportedQueryError`.

    Parameters
    ----------
    query : str
        One SELECT of the query class (see the module docstring).
    tables : collection of str
        The names the query may read; only their names are used here.
    public_tables : collection of str
        The tables whose contents are public; every other table is private.
    privacy_unit : str, mapping of table name to column, or None
        The user column of every private table (a str: the same name in each); BigQuery's
        ``OPTIONS(privacy_unit_column=...)`` gives it too.
    dialect : str or None
        sqlglot's dialect the query is read in; None: ``"bigquery"`` for a query in BigQuery's
        ``SELECT WITH DIFFERENTIAL_PRIVACY`` form, else ``"duckdb"``.

    Returns
    -------
    QuerySpec

    Raises
    ------
    UnsupportedQueryError
        The query is outside the class (one line naming the construct).
    InvalidParameterError
        A table is not in ``tables``, or a private table has no privacy unit.
    """
    text, options, bigquery = split_dp_clause(query)
    read = dialect or ("bigquery" if bigquery else "duckdb")
    names = list(tables)
    public = [resolve_name(p, names) or p for p in public_tables]
    unit_option = options.get("privacy_unit_column")
    if unit_option is not None and privacy_unit is not None:
        same = privacy_unit == unit_option or (
            isinstance(privacy_unit, Mapping) and set(privacy_unit.values()) == {unit_option}
        )
        if not same:
            raise InvalidParameterError(
                f"The query's privacy_unit_column={unit_option!r} differs from privacy_unit="
                f"{privacy_unit!r}; give one."
            )
    unit = privacy_unit if privacy_unit is not None else unit_option
    tree = _statement(text, read)
    _check_clauses(tree)
    refs, aliases = _tables(tree, names, public, unit)
    _check_joins(tree, refs, aliases)
    _check_subqueries(tree, public, names)
    where = tree.args.get("where")
    if where is not None:
        _check_no_aggregate(where, "WHERE")
    keys = _keys(tree)
    bounds = options.get("bounds")
    outs = _Outputs(keys, refs, aliases, bounds)
    outputs: list[tuple[str, exp.Expression]] = []
    for item in tree.expressions:
        name = item.alias if isinstance(item, exp.Alias) else None
        inner = item.unalias()
        if name is None:
            name = inner.name if isinstance(inner, exp.Column) else _short(inner, 200)
        if any(name == n for n, _ in outputs):
            raise _fail(f"two output columns named {name!r}", "give them distinct aliases.")
        rewritten = outs.rewrite(inner, "SELECT")
        outputs.append((name, rewritten))
        outs.names[name] = rewritten
    if not outs.aggregates:
        raise _fail("a query without an aggregate", f"release one of {SUPPORTED}.")
    having = tree.args.get("having")
    order = tree.args.get("order")
    spec = QuerySpec(
        query=query,
        dialect=read,
        tables=tuple(refs),
        skeleton=_skeleton(tree),
        keys=tuple(keys),
        aggregates=tuple(outs.aggregates),
        outputs=tuple(outputs),
        having=None if having is None else outs.rewrite(having.this, "HAVING"),
        order=tuple(outs.rewrite(o, "ORDER BY") for o in (order.expressions if order else [])),
        limit=_count(tree.args.get("limit"), "LIMIT"),
        offset=_count(tree.args.get("offset"), "OFFSET"),
        options=options,
    )
    _check_public_keys(spec, public)
    return spec


def _skeleton(tree: exp.Select) -> exp.Select:
    out = exp.Select()
    for arg in ("from_", "joins", "where"):
        if tree.args.get(arg):
            value = tree.args[arg]
            out.set(arg, [v.copy() for v in value] if isinstance(value, list) else value.copy())
    return out


def _count(node: exp.Expression | None, what: str) -> int | None:
    if node is None:
        return None
    value = number(node.expression if node.expression is not None else node.this)
    if value is None or value < 0 or value != int(value):
        raise _fail(f"{what} {_short(node)}", f"{what} takes a non-negative integer.")
    return int(value)
