"""The checks that refuse what is outside the query class: the statement, its clauses, its
tables, joins and subqueries (each refusal one line naming the construct)."""

from __future__ import annotations

from collections.abc import Collection, Mapping

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from userdp.exceptions import InvalidParameterError
from userdp.sql.spec import QuerySpec, TableRef, UnsupportedQueryError, _fail, _first_line, _short

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
