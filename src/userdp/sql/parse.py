"""A private GROUP BY written as SQL, parsed with sqlglot into a frozen :class:`QuerySpec`.

The query class (anything else fails closed with :class:`UnsupportedQueryError`, one line
naming the construct)::

    SELECT [WITH DIFFERENTIAL_PRIVACY OPTIONS(...)] k1[, k2 ...], <aggregates>
    FROM private [[LEFT] JOIN public ON/USING ...] [[LEFT] JOIN private2 ON <unit> = <unit>]
    [WHERE <row predicate>] [GROUP BY k1[, k2 ...]] [HAVING <released values>]
    [ORDER BY <released values>] [LIMIT n [OFFSET m]]

Aggregates: ``COUNT(DISTINCT <unit>)``, ``COUNT(*)``, ``SUM(e)``, ``AVG(e)``, ``MEDIAN(e)``,
``PERCENTILE_CONT(e, q)`` (also ``PERCENTILE_CONT(q) WITHIN GROUP (ORDER BY e)``),
``QUANTILE_CONT(e, q)`` and ``APPROX_QUANTILES(e, n)[OFFSET(i)]``, where ``e`` is any row
expression. Expressions over released aggregates and keys (``SUM(x) / COUNT(*)``,
``ROUND(AVG(x), 1)``) are post-processing and are allowed in SELECT, HAVING and ORDER BY.

The parser reads only the query text and the names of the tables: never their data.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from userdp.exceptions import InvalidParameterError

__all__ = [
    "Aggregate",
    "Key",
    "QuerySpec",
    "TableRef",
    "UnsupportedQueryError",
    "parse_query",
]

#: Options of ``SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(...)``.
OPTIONS = (
    "epsilon",
    "delta",
    "privacy_unit_column",
    "bounds",
    "public_keys",
    "max_groups_contributed",
)

#: The aggregates the query class releases, as named in errors.
SUPPORTED = (
    "COUNT(*), COUNT(DISTINCT <privacy unit>), SUM, AVG, MEDIAN, PERCENTILE_CONT, "
    "QUANTILE_CONT, APPROX_QUANTILES(x, n)[OFFSET(i)]"
)

_SEP, _ESC = "|", "!"  # the multi-column key encoding (see rows.encode_keys)

#: Clauses of a SELECT that the query class does not have.
_REFUSED_CLAUSES = {
    "distinct": "SELECT DISTINCT (use COUNT(DISTINCT <privacy unit>) or GROUP BY)",
    "into": "SELECT ... INTO",
    "qualify": "QUALIFY (it filters on window functions)",
    "windows": "a WINDOW clause (window functions)",
    "connect": "CONNECT BY",
    "prewhere": "PREWHERE",
    "distribute": "DISTRIBUTE BY",
    "sort": "SORT BY",
    "cluster": "CLUSTER BY",
    "locks": "a locking clause (FOR UPDATE)",
    "sample": "TABLESAMPLE",
    "settings": "SETTINGS",
    "format": "FORMAT",
    "options": "an OPTIONS clause outside SELECT WITH DIFFERENTIAL_PRIVACY",
    "for_": "FOR",
    "laterals": "LATERAL",
    "pivots": "PIVOT/UNPIVOT",
    "kind": "SELECT AS STRUCT/VALUE",
    "exclude": "EXCLUDE",
    "match": "MATCH_RECOGNIZE",
    "operation_modifiers": "a SELECT modifier",
}


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


# --- 1. BigQuery's clause, found with sqlglot's tokenizer ------------------------------------


def _tokens(query: str, dialect: str) -> list[Any]:
    try:
        return list(sqlglot.Dialect.get_or_raise(dialect).tokenize(query))
    except SqlglotError as err:
        raise UnsupportedQueryError(f"The query cannot be read as SQL: {_first_line(err)}") from err


def _first_line(err: BaseException) -> str:
    text = " ".join(str(err).replace("\x1b[4m", "").replace("\x1b[0m", "").split())
    return text[:200] if text else type(err).__name__


def _closing(tokens: list[Any], i: int) -> int:
    """Index of the parenthesis closing the one opened at ``tokens[i]``."""
    depth = 0
    for j in range(i, len(tokens)):
        kind = tokens[j].token_type.name
        depth += kind == "L_PAREN"
        depth -= kind == "R_PAREN"
        if depth == 0:
            return j
    raise UnsupportedQueryError("The query has an unclosed parenthesis.")


def split_dp_clause(query: str) -> tuple[str, dict[str, Any], bool]:
    """Remove ``WITH DIFFERENTIAL_PRIVACY OPTIONS(...)`` after the first SELECT.

    Returns the query without it, its options, and whether it was there. BigQuery's per-call
    ``contribution_bounds_per_group => (lo, hi)`` argument becomes ``CLAMP(e, lo, hi)`` (a
    public range for each row's value; ``COUNT`` drops it: its bound is chosen privately).
    """
    tokens = _tokens(query, "bigquery")
    names = [t.text.upper() for t in tokens]
    found = len(tokens) > 2 and names[:3] == ["SELECT", "WITH", "DIFFERENTIAL_PRIVACY"]
    if "DIFFERENTIAL_PRIVACY" in names and not found:
        raise _fail(
            "DIFFERENTIAL_PRIVACY outside the first SELECT",
            "write SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(...) at the start of the query.",
        )
    options: dict[str, Any] = {}
    text = query
    if found:
        end = tokens[2].end + 1
        if len(tokens) > 4 and names[3] == "OPTIONS" and tokens[4].token_type.name == "L_PAREN":
            close = _closing(tokens, 4)
            options = _options(query[tokens[4].end + 1 : tokens[close].start])
            end = tokens[close].end + 1
        text = query[: tokens[1].start] + query[end:]
    return _bigquery_bounds(text), options, found


def _options(inner: str) -> dict[str, Any]:
    if not inner.strip():
        return {}
    try:
        items = sqlglot.parse_one(f"SELECT {inner}", read="bigquery").expressions
    except SqlglotError as err:
        raise UnsupportedQueryError(f"Cannot read OPTIONS({inner.strip()}).") from err
    out: dict[str, Any] = {}
    for item in items:
        if not isinstance(item, exp.EQ) or not isinstance(item.this, exp.Column):
            raise _fail(f"the option {_short(item)!r}", "write OPTIONS(name=value, ...).")
        name = item.this.name.lower()
        if name not in OPTIONS:
            raise _fail(f"the option {name!r}", f"the options are {', '.join(OPTIONS)}.")
        out[name] = _option_value(name, item.expression)
    return out


def _option_value(name: str, node: exp.Expression) -> Any:
    if name in ("privacy_unit_column", "public_keys"):
        if isinstance(node, exp.Column | exp.Literal):
            return node.name
        raise _fail(f"{name}={_short(node)}", "name a column or a table.")
    if name == "bounds":
        values = [number(v) for v in getattr(node, "expressions", [])]
        if not isinstance(node, exp.Tuple) or len(values) != 2 or None in values:
            raise _fail(f"bounds={_short(node)}", "write bounds=(lo, hi) with two numbers.")
        return (float(values[0]), float(values[1]))  # type: ignore[arg-type]
    value = number(node)
    if value is None:
        raise _fail(f"{name}={_short(node)}", f"{name} must be a number.")
    return value


def _bigquery_bounds(query: str) -> str:
    tokens = _tokens(query, "bigquery")
    for i, tok in enumerate(tokens):
        if tok.text.lower() != "contribution_bounds_per_group":
            continue
        if not (
            i + 2 < len(tokens)
            and tokens[i - 1].token_type.name == "COMMA"
            and tokens[i + 1].token_type.name == "FARROW"
            and tokens[i + 2].token_type.name == "L_PAREN"
        ):
            raise _fail("contribution_bounds_per_group here", "write f(x, name => (lo, hi)).")
        close_bounds = _closing(tokens, i + 2)
        depth, j = 0, i - 1
        while j > 0:  # the call's opening parenthesis
            j -= 1
            kind = tokens[j].token_type.name
            if kind == "R_PAREN":
                depth += 1
            elif kind == "L_PAREN":
                if depth == 0:
                    break
                depth -= 1
        if j <= 0 or close_bounds + 1 >= len(tokens):
            raise _fail("contribution_bounds_per_group outside a call")
        end = tokens[close_bounds + 1]
        if end.token_type.name != "R_PAREN":
            raise _fail("an argument after contribution_bounds_per_group")
        argument = query[tokens[j].end + 1 : tokens[i - 1].start]
        bounds = query[tokens[i + 2].end + 1 : tokens[close_bounds].start]
        inside = (
            argument if tokens[j - 1].text.upper() == "COUNT" else f"CLAMP({argument}, {bounds})"
        )
        return _bigquery_bounds(query[: tokens[j].end + 1] + inside + query[end.start :])
    return query


# --- 2. the statement --------------------------------------------------------------------------


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


def _statement(query: str, dialect: str) -> exp.Select:
    if not isinstance(query, str):
        raise InvalidParameterError(
            f"The 'query' parameter of sql must be a str. Got {type(query).__name__} instead."
        )
    try:
        trees = [t for t in sqlglot.parse(query, read=dialect) if t is not None]
    except SqlglotError as err:
        raise UnsupportedQueryError(f"The query cannot be read as SQL: {_first_line(err)}") from err
    if len(trees) != 1:
        raise _fail("several statements" if trees else "an empty query", "give one SELECT.")
    tree = trees[0]
    if isinstance(tree, exp.SetOperation):
        raise _fail(f"{tree.key.upper()} (a set operation)", "give one SELECT ... GROUP BY.")
    if not isinstance(tree, exp.Select):
        raise _fail(f"a {tree.key.upper()} statement", "only a SELECT is run.")
    return tree


def _check_clauses(tree: exp.Select) -> None:
    if tree.args.get("with_"):
        raise _fail("WITH (a common table expression)", "join the tables in the FROM clause.")
    for arg, what in _REFUSED_CLAUSES.items():
        if tree.args.get(arg):
            raise _fail(what)
    for node in tree.walk():
        if isinstance(node, exp.Window):
            raise _fail(f"a window function ({_short(node)})", "OVER is not private here.")
        if isinstance(node, exp.Star) and not isinstance(node.parent, exp.Count):
            raise _fail("SELECT * or t.*", "name the keys and the aggregates.")
        if isinstance(node, exp.Placeholder | exp.Parameter):
            raise _fail("a query parameter", "write the values in the query.")


def _tables(
    tree: exp.Select,
    names: Collection[str],
    public: Collection[str],
    unit: str | Mapping[str, str] | None,
) -> tuple[list[TableRef], dict[str, TableRef]]:
    from_ = tree.args.get("from_")
    if from_ is None:
        raise _fail("a SELECT without FROM", "name a private table.")
    items = [from_.this] + [j.this for j in tree.args.get("joins") or []]
    refs: list[TableRef] = []
    for item in items:
        refs.append(_table_ref(item, names, public, unit))
    aliases: dict[str, TableRef] = {}
    for ref in refs:
        if ref.alias.lower() in aliases:
            raise _fail(f"the table name {ref.alias!r} twice", "give each table its own alias.")
        aliases[ref.alias.lower()] = ref
    if not any(r.private for r in refs):
        raise _fail(
            "a query over public tables only",
            "it releases nothing private; run it in your engine directly.",
        )
    return refs, aliases


def resolve_name(name: str, names: Collection[str]) -> str | None:
    """``name`` as spelled in ``names`` (exactly, else the one case-insensitive match)."""
    if name in names:
        return name
    folded = [n for n in names if n.lower() == name.lower()]
    return folded[0] if len(folded) == 1 else None


def _table_ref(
    item: exp.Expression,
    names: Collection[str],
    public: Collection[str],
    unit: str | Mapping[str, str] | None,
) -> TableRef:
    if isinstance(item, exp.Subquery):
        raise _fail("a subquery in FROM", "join the tables directly.")
    if not isinstance(item, exp.Table) or not isinstance(item.this, exp.Identifier):
        raise _fail(f"{_short(item)!r} in FROM", "name a table given in tables=.")
    if item.args.get("db") or item.args.get("catalog"):
        raise _fail(f"the qualified table name {_short(item)!r}", "name a key of tables=.")
    for arg in ("joins", "pivots", "laterals", "sample", "version", "when", "changes"):
        if item.args.get(arg):
            raise _fail(f"{arg.upper()} on the table {item.name!r}")
    alias = item.args.get("alias")
    if alias is not None and alias.args.get("columns"):
        raise _fail("column aliases on a table", "refer to the columns by their names.")
    name = resolve_name(item.name, names)
    if name is None:
        raise InvalidParameterError(
            f"The query reads the table {item.name!r}, which is not in tables= (given: "
            f"{', '.join(map(repr, names)) or 'none'})."
        )
    private = name not in public
    col = None
    if private:
        col = unit.get(name) if isinstance(unit, Mapping) else unit
        if not col:
            raise InvalidParameterError(
                f"The table {name!r} is private (not in public_tables) and has no privacy unit: "
                f"name its user column in privacy_unit= (e.g. {{{name!r}: 'uid'}}) or "
                "OPTIONS(privacy_unit_column=...), or list it in public_tables if it is public."
            )
    elif isinstance(unit, Mapping) and name in unit:
        raise InvalidParameterError(
            f"The table {name!r} is listed in public_tables and has a privacy unit; it is one or "
            "the other."
        )
    return TableRef(name, item.alias_or_name, private, col)


def _column_table(col: exp.Column, aliases: Mapping[str, TableRef]) -> TableRef | None:
    return aliases.get(col.table.lower()) if col.table else None


def _is_unit(node: exp.Expression, aliases: Mapping[str, TableRef], refs: list[TableRef]) -> bool:
    """Whether ``node`` is the privacy unit column of a private table (qualified or not)."""
    if not isinstance(node, exp.Column) or isinstance(node.this, exp.Star):
        return False
    table = _column_table(node, aliases)
    if node.table:
        return table is not None and table.private and table.unit == node.name
    return any(r.private and r.unit == node.name for r in refs)


def _check_joins(tree: exp.Select, refs: list[TableRef], aliases: Mapping[str, TableRef]) -> None:
    for k, join in enumerate(tree.args.get("joins") or [], start=1):
        new = refs[k]
        side = (join.args.get("side") or "").upper()
        kind = (join.args.get("kind") or "").upper()
        if (
            side not in ("", "LEFT")
            or kind not in ("", "INNER", "OUTER")
            or join.args.get("method")
        ):
            what = " ".join(x for x in (join.args.get("method"), side, kind) if x)
            raise _fail(f"a {what or 'CROSS'} JOIN", "use JOIN or LEFT JOIN with ON or USING.")
        on, using = join.args.get("on"), join.args.get("using")
        if on is None and not using:
            raise _fail(f"a join of {new.name!r} without ON or USING (a cross product)")
        if on is not None:
            _check_no_aggregate(on, "JOIN ... ON")
        if not new.private:
            continue
        earlier = [r for r in refs[:k] if r.private]
        if not earlier:
            continue  # the first private table: a public table before it is joined to it
        if using:
            cols = {i.name for i in using}
            if new.unit in cols and any(r.unit == new.unit for r in earlier):
                continue
        elif on is not None and _joins_on_unit(on, new, earlier, aliases):
            continue
        raise _fail(
            f"a join of the private table {new.name!r} not on the privacy unit",
            f"join two private tables ON {earlier[0].alias}.{earlier[0].unit} = "
            f"{new.alias}.{new.unit} (one user on both sides), or list the table in "
            "public_tables if it is public.",
        )


def _joins_on_unit(
    on: exp.Expression, new: TableRef, earlier: list[TableRef], aliases: Mapping[str, TableRef]
) -> bool:
    """Whether the conjunction ``on`` holds ``earlier.unit = new.unit`` (qualified columns)."""
    for cond in on.flatten() if isinstance(on, exp.And) else [on]:
        if not isinstance(cond, exp.EQ):
            continue
        a, b = cond.this, cond.expression
        if not (isinstance(a, exp.Column) and isinstance(b, exp.Column)):
            continue
        for x, y in ((a, b), (b, a)):
            tx, ty = _column_table(x, aliases), _column_table(y, aliases)
            if (
                ty is new
                and y.name == new.unit
                and tx in earlier
                and tx is not None
                and x.name == tx.unit
            ):
                return True
    return False


def _check_no_aggregate(node: exp.Expression, where: str) -> None:
    for sub in node.walk():
        if isinstance(sub, exp.AggFunc):
            raise _fail(f"an aggregate in {where} ({_short(sub)})")


def _check_subqueries(tree: exp.Select, public: Collection[str], names: Collection[str]) -> None:
    """Subqueries may read public tables only (in WHERE or ON); never a private one."""
    for node in tree.walk():
        if node is tree or not isinstance(node, exp.Select | exp.SetOperation):
            continue
        for table in node.find_all(exp.Table):
            name = resolve_name(table.name, names) or table.name
            if name not in public:
                raise _fail(
                    f"a subquery over the private table {table.name!r}",
                    "a subquery may read public tables only.",
                )
        inside = node.find_ancestor(exp.Where, exp.Join)
        if inside is None:
            raise _fail("a subquery outside WHERE and JOIN ... ON")


# --- 3. keys, aggregates and outputs ----------------------------------------------------------


def same_expression(a: exp.Expression, b: exp.Expression) -> bool:
    """Whether two expressions are the same column or the same SQL (``page`` = ``v.page``)."""
    if isinstance(a, exp.Column) and isinstance(b, exp.Column):
        return a.name == b.name and (not a.table or not b.table or a.table == b.table)
    return a.sql() == b.sql()


def _keys(tree: exp.Select) -> list[Key]:
    group = tree.args.get("group")
    if group is None:
        return []
    for arg in ("all", "rollup", "cube", "grouping_sets", "totals"):
        if group.args.get(arg):
            raise _fail(f"GROUP BY {arg.upper().replace('_', ' ')}", "name the key columns.")
    selected = list(tree.expressions)
    keys: list[Key] = []
    for node in group.expressions:
        if isinstance(node, exp.Rollup | exp.Cube | exp.GroupingSets):
            raise _fail(f"GROUP BY {node.key.upper()}", "name the key columns.")
        expression = node
        position = number(node)
        if position is not None:  # GROUP BY 1
            if not (position == int(position) and 1 <= position <= len(selected)):
                raise _fail(f"GROUP BY {_short(node)}", "the position is not in the SELECT list.")
            expression = selected[int(position) - 1].unalias()
        elif isinstance(node, exp.Column) and not node.table:  # GROUP BY an output alias
            for item in selected:
                if isinstance(item, exp.Alias) and item.alias == node.name:
                    inner = item.unalias()
                    if not (isinstance(inner, exp.Column) and inner.name == node.name):
                        expression = inner
        _check_no_aggregate(expression, "GROUP BY")
        if any(same_expression(expression, k.expression) for k in keys):
            continue
        name = next(
            (
                item.alias_or_name
                for item in selected
                if not item.find(exp.AggFunc) and same_expression(item.unalias(), expression)
            ),
            _short(expression, 200),
        )
        keys.append(Key(name, expression.copy()))
    return keys


def _clamp(value: exp.Expression) -> tuple[exp.Expression, tuple[float, float] | None]:
    """``CLAMP(e, lo, hi)`` / ``LEAST(GREATEST(e, lo), hi)`` / ``GREATEST(LEAST(e, hi), lo)``
    with number literals: the clamped expression (as LEAST/GREATEST) and its public range."""
    node = value.unnest() if isinstance(value, exp.Paren) else value
    lo = hi = None
    inner: exp.Expression | None = None
    if isinstance(node, exp.Anonymous) and node.name.lower() == "clamp":
        if len(node.expressions) == 3:
            inner, lo, hi = node.expressions[0], *map(number, node.expressions[1:])
    elif isinstance(node, exp.Least | exp.Greatest) and len(node.expressions) == 1:
        outer_bound = number(node.expressions[0])
        inside = node.this
        other = exp.Greatest if isinstance(node, exp.Least) else exp.Least
        if isinstance(inside, other) and len(inside.expressions) == 1:
            inner_bound = number(inside.expressions[0])
            inner = inside.this
            lo, hi = (
                (inner_bound, outer_bound)
                if isinstance(node, exp.Least)
                else (outer_bound, inner_bound)
            )
    if inner is None or lo is None or hi is None:
        return value, None
    if not lo < hi:
        raise _fail(f"the clamp {_short(value)}", "its lower bound must be below its upper.")
    clamped = exp.Least(
        this=exp.Greatest(this=inner.copy(), expressions=[exp.Literal.number(lo)]),
        expressions=[exp.Literal.number(hi)],
    )
    return clamped, (float(lo), float(hi))


def _level(node: exp.Expression, what: str) -> float:
    q = number(node)
    if q is None or not 0 < q < 1:
        raise _fail(f"{what} at the level {_short(node)}", "the level must be a number in (0, 1).")
    return q


class _Outputs:
    """Collects the aggregates of SELECT and rewrites expressions over the released columns."""

    def __init__(
        self,
        keys: list[Key],
        refs: list[TableRef],
        aliases: Mapping[str, TableRef],
        bounds: tuple[float, float] | None,
    ) -> None:
        self.keys, self.refs, self.aliases, self.bounds = keys, refs, aliases, bounds
        self.aggregates: list[Aggregate] = []
        self.nodes: list[exp.Expression] = []
        self.names: dict[str, exp.Expression] = {}

    def rewrite(self, node: exp.Expression, clause: str) -> exp.Expression:
        """``node`` over ``__k<j>`` and ``__a<i>``; new aggregates only in SELECT."""

        def visit(sub: exp.Expression) -> exp.Expression:
            for j, key in enumerate(self.keys):
                if not isinstance(sub, exp.Literal) and same_expression(sub, key.expression):
                    return exp.column(f"__k{j}")
            if isinstance(sub, exp.AggFunc | exp.WithinGroup | exp.Filter) or (
                isinstance(sub, exp.Bracket) and isinstance(sub.this, exp.ApproxQuantiles)
            ):
                return exp.column(f"__a{self._aggregate(sub, clause)}")
            if isinstance(sub, exp.Column):
                if clause != "SELECT" and not sub.table and sub.name in self.names:
                    return self.names[sub.name].copy()
                raise _fail(
                    f"a {clause} of the column {_short(sub)!r} outside an aggregate",
                    "only GROUP BY keys and aggregates are released.",
                )
            return sub

        return node.copy().transform(visit)

    def _aggregate(self, node: exp.Expression, clause: str) -> int:
        for i, seen in enumerate(self.nodes):
            if seen.sql() == node.sql():
                return i
        if clause != "SELECT":
            raise _fail(
                f"{clause} on {_short(node)}, which the SELECT does not release",
                f"add it to the SELECT list ({clause} filters and sorts released values only).",
            )
        self.aggregates.append(self._recognise(node))
        self.nodes.append(node.copy())
        return len(self.nodes) - 1

    def _recognise(self, node: exp.Expression) -> Aggregate:
        text = _short(node, 200)
        if isinstance(node, exp.Filter):
            raise _fail(f"an aggregate FILTER clause ({text})", "write the condition in WHERE.")
        if isinstance(node, exp.Count):
            arg = node.this
            if isinstance(arg, exp.Distinct):
                cols = arg.expressions
                if len(cols) == 1 and _is_unit(cols[0], self.aliases, self.refs):
                    return Aggregate(text, "users")
                raise _fail(
                    f"{text}: COUNT(DISTINCT ...) of something other than the privacy unit",
                    "only COUNT(DISTINCT <privacy unit>) is released (distinct users).",
                )
            if isinstance(arg, exp.Star) or (number(arg) is not None):
                return Aggregate(text, "count")
            raise _fail(
                f"{text}: COUNT of a column",
                "write COUNT(*) with WHERE <column> IS NOT NULL.",
            )
        if isinstance(node, exp.Sum | exp.Avg):
            if isinstance(node.this, exp.Distinct):
                raise _fail(f"{text}: DISTINCT inside {node.key.upper()}")
            return self._valued(text, "sum" if isinstance(node, exp.Sum) else "mean", node.this)
        if isinstance(node, exp.Median):
            return self._valued(text, "quantile", node.this, 0.5)
        if isinstance(node, exp.PercentileCont | exp.PercentileDisc | exp.Quantile):
            arg = node.args.get("expression") or node.args.get("quantile")
            if arg is None:
                raise _fail(f"{text} without WITHIN GROUP (ORDER BY ...)")
            return self._valued(text, "quantile", node.this, _level(arg, text))
        if isinstance(node, exp.WithinGroup):
            inner, order = node.this, node.expression
            ordered = order.expressions if isinstance(order, exp.Order) else []
            if isinstance(inner, exp.PercentileCont | exp.PercentileDisc) and len(ordered) == 1:
                q = _level(inner.this, text)
                return self._valued(
                    text, "quantile", ordered[0].this, 1 - q if ordered[0].args.get("desc") else q
                )
            raise _fail(f"{text}", f"the private aggregates are {SUPPORTED}.")
        if isinstance(node, exp.Bracket) and isinstance(node.this, exp.ApproxQuantiles):
            return self._approx_quantile(node, text)
        if isinstance(node, exp.ApproxQuantiles):
            raise _fail(f"{text} (an array)", "pick one level: APPROX_QUANTILES(x, n)[OFFSET(i)].")
        raise _fail(f"{text}", f"the private aggregates are {SUPPORTED}.")

    def _approx_quantile(self, node: exp.Bracket, text: str) -> Aggregate:
        n = number(node.this.expression)
        index = node.expressions[0] if len(node.expressions) == 1 else None
        base = node.args.get("offset") or 0
        if isinstance(index, exp.Anonymous) and index.name.upper() in ("OFFSET", "ORDINAL"):
            base = 1 if index.name.upper() == "ORDINAL" else 0
            index = index.expressions[0] if len(index.expressions) == 1 else None
        i = number(index)
        if n is None or i is None or n != int(n) or i != int(i) or not 0 < i - base < n:
            raise _fail(f"{text}", "write APPROX_QUANTILES(x, n)[OFFSET(i)] with 0 < i < n.")
        return self._valued(text, "quantile", node.this.this, (i - base) / n)

    def _valued(
        self, text: str, metric: str, value: exp.Expression, level: float | None = None
    ) -> Aggregate:
        for sub in value.walk():
            if isinstance(sub, exp.AggFunc):
                raise _fail(f"a nested aggregate ({text})")
            if isinstance(sub, exp.Select | exp.Subquery):
                raise _fail(f"a subquery inside an aggregate ({text})")
        clamped, bounds = _clamp(value)
        source = "clamp" if bounds else None
        if bounds is None and self.bounds is not None:
            bounds, source = self.bounds, "options"
        if bounds is None:
            raise UnsupportedQueryError(
                f"{text} needs a public range for its values, which userdp never takes from the "
                "data: write it in the query as CLAMP(x, lo, hi) (or LEAST(GREATEST(x, lo), hi)) "
                "inside the aggregate, or as SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(bounds=(lo, "
                "hi)). COUNT(*) and COUNT(DISTINCT <unit>) need none."
            )
        return Aggregate(text, metric, clamped.copy(), level, bounds, source)


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


def _check_public_keys(spec: QuerySpec, public: Collection[str]) -> None:
    table = spec.public_keys
    if table is None:
        return
    if table not in public:
        raise InvalidParameterError(
            f"OPTIONS(public_keys={table}) must name a table in public_tables; its values are "
            "released as keys."
        )
    if not spec.keys:
        raise _fail("public_keys without GROUP BY")
    for key in spec.keys:
        if not isinstance(key.expression, exp.Column):
            raise _fail(
                f"public_keys with the GROUP BY expression {key.sql!r}",
                "group by columns of the public key table.",
            )
