"""BigQuery's ``SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(...)`` clause, found with sqlglot's
tokenizer and removed before the statement is parsed."""

from __future__ import annotations

from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from userdp.sql.spec import UnsupportedQueryError, _fail, _first_line, _short, number

#: Options of ``SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(...)``.
OPTIONS = (
    "epsilon",
    "delta",
    "privacy_unit_column",
    "bounds",
    "public_keys",
    "max_groups_contributed",
)


def _tokens(query: str, dialect: str) -> list[Any]:
    try:
        return list(sqlglot.Dialect.get_or_raise(dialect).tokenize(query))
    except SqlglotError as err:
        raise UnsupportedQueryError(f"The query cannot be read as SQL: {_first_line(err)}") from err


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
