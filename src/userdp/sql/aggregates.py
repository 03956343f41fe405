"""Keys, aggregates and outputs: the GROUP BY keys, each aggregate recognised as a metric with
its public bounds, and the SELECT, HAVING and ORDER BY expressions over the released columns."""

from __future__ import annotations

from collections.abc import Mapping

from sqlglot import exp

from userdp.sql.checks import _check_no_aggregate, _is_unit
from userdp.sql.spec import (
    COUNT_OF,
    Aggregate,
    Key,
    TableRef,
    UnsupportedQueryError,
    _fail,
    _short,
    number,
)

#: The aggregates the query class releases, as named in errors.
SUPPORTED = (
    "COUNT(*), COUNT(e), COUNT(DISTINCT <privacy unit>), SUM, AVG, MEDIAN, PERCENTILE_CONT, "
    "QUANTILE_CONT, APPROX_QUANTILES(x, n)[OFFSET(i)]"
)


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
            return self._count_of(text, arg)
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

    def _count_of(self, text: str, arg: exp.Expression) -> Aggregate:
        """``COUNT(e)``, the rows where ``e`` is not NULL: the sum of the row indicator
        ``CASE WHEN e IS NULL THEN 0 ELSE 1 END``, whose public range [0, 1] needs no bounds
        from the user; released as a non-negative integer (post-processing)."""
        for sub in arg.walk():
            if isinstance(sub, exp.AggFunc):
                raise _fail(f"a nested aggregate ({text})")
            if isinstance(sub, exp.Select | exp.Subquery):
                raise _fail(f"a subquery inside an aggregate ({text})")
        indicator = exp.Case(
            ifs=[
                exp.If(
                    this=exp.Is(this=arg.copy(), expression=exp.Null()), true=exp.Literal.number(0)
                )
            ],
            default=exp.Literal.number(1),
        )
        return Aggregate(text, "sum", indicator, None, (0.0, 1.0), COUNT_OF)

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
