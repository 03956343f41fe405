"""userdp.sql's parser: each accepted construct parses to its spec; each refused one fails
closed with one line naming it (sqlglot reads the query; nothing is parsed by hand)."""

from __future__ import annotations

import pytest

from userdp.exceptions import InvalidParameterError
from userdp.sql import UnsupportedQueryError, parse_query

TABLES = ["visits", "orders", "pages", "days"]
PUBLIC = ["pages", "days"]
UNIT = {"visits": "uid", "orders": "uid"}


def parse(query, **kwargs):
    options = {"tables": TABLES, "public_tables": PUBLIC, "privacy_unit": UNIT, **kwargs}
    return parse_query(query, **options)


def test_a_count_by_one_key_parses_to_its_metrics():
    spec = parse("SELECT page, COUNT(DISTINCT uid) AS users, COUNT(*) n FROM visits GROUP BY page")
    assert [k.name for k in spec.keys] == ["page"]
    assert [a.metric for a in spec.aggregates] == ["users", "count"]
    assert [name for name, _ in spec.outputs] == ["page", "users", "n"]
    assert spec.user_table.name == "visits" and spec.user_table.unit == "uid"


@pytest.mark.parametrize(
    ("aggregate", "metric", "level", "bounds"),
    [
        ("SUM(CLAMP(x, 0, 10))", "sum", None, (0.0, 10.0)),
        ("AVG(LEAST(GREATEST(x * 2, -1), 5))", "mean", None, (-1.0, 5.0)),
        ("AVG(GREATEST(LEAST(x, 5), 1))", "mean", None, (1.0, 5.0)),
        ("MEDIAN(CLAMP(x, 0, 1))", "quantile", 0.5, (0.0, 1.0)),
        ("PERCENTILE_CONT(CLAMP(x, 0, 1), 0.9)", "quantile", 0.9, (0.0, 1.0)),
        ("QUANTILE_CONT(CLAMP(x, 0, 1), 0.25)", "quantile", 0.25, (0.0, 1.0)),
        (
            "PERCENTILE_CONT(0.75) WITHIN GROUP (ORDER BY CLAMP(x, 0, 1))",
            "quantile",
            0.75,
            (0.0, 1.0),
        ),
        ("APPROX_QUANTILES(CLAMP(x, 0, 1), 4)[OFFSET(1)]", "quantile", 0.25, (0.0, 1.0)),
    ],
)
def test_each_valued_aggregate_parses_with_its_public_range(aggregate, metric, level, bounds):
    spec = parse(f"SELECT page, {aggregate} AS a FROM visits GROUP BY page")
    (a,) = spec.aggregates
    assert (a.metric, a.level, a.bounds, a.bounds_from) == (metric, level, bounds, "clamp")


def test_the_options_range_applies_to_an_unclamped_aggregate():
    spec = parse(
        "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(bounds=(0, 60)) page, SUM(secs) "
        "FROM visits GROUP BY page"
    )
    assert spec.aggregates[0].bounds == (0.0, 60.0)
    assert spec.aggregates[0].bounds_from == "options"


def test_bigquerys_form_gives_the_budget_and_the_unit():
    spec = parse_query(
        "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=1, delta=1e-5, "
        "privacy_unit_column=uid) page, AVG(x, contribution_bounds_per_group => (0, 5)) AS m, "
        "COUNT(*, contribution_bounds_per_group => (0, 3)) AS n FROM visits GROUP BY page",
        tables=["visits"],
    )
    assert spec.options == {"epsilon": 1.0, "delta": 1e-5, "privacy_unit_column": "uid"}
    assert spec.dialect == "bigquery"
    assert spec.user_table.unit == "uid"
    assert [(a.metric, a.bounds) for a in spec.aggregates] == [
        ("mean", (0.0, 5.0)),
        ("count", None),
    ]


def test_several_group_by_columns_are_one_tuple_key():
    spec = parse(
        "SELECT v.page, d.weekday, COUNT(*) FROM visits v JOIN days d ON v.day = d.day "
        "GROUP BY v.page, d.weekday"
    )
    assert [k.name for k in spec.keys] == ["page", "weekday"]


def test_group_by_a_position_and_an_alias_resolve_to_the_select_expression():
    spec = parse("SELECT date_trunc('day', ts) AS d, COUNT(*) FROM visits GROUP BY 1")
    same = parse("SELECT date_trunc('day', ts) AS d, COUNT(*) FROM visits GROUP BY d")
    assert spec.keys[0].sql == same.keys[0].sql
    assert "ts" in spec.keys[0].sql
    assert spec.keys[0].name == "d"


def test_no_group_by_is_one_global_row():
    spec = parse("SELECT COUNT(DISTINCT uid) FROM visits WHERE x > 1")
    assert spec.keys == () and spec.aggregates[0].metric == "users"


def test_two_private_tables_joined_on_the_unit_are_one_user():
    spec = parse(
        "SELECT v.page, COUNT(*) FROM visits v JOIN orders o ON v.uid = o.uid AND o.n > 1 "
        "GROUP BY v.page"
    )
    assert [t.private for t in spec.tables] == [True, True]
    joined = parse("SELECT page, COUNT(*) FROM visits JOIN orders USING (uid) GROUP BY page")
    assert joined.user_table.name == "visits"


def test_having_order_and_limit_run_over_released_columns():
    spec = parse(
        "SELECT page, COUNT(*) AS n, SUM(CLAMP(x, 0, 1)) / COUNT(*) AS r FROM visits "
        "GROUP BY page HAVING COUNT(*) > 10 AND n < 100 ORDER BY r DESC, 1 LIMIT 3 OFFSET 1"
    )
    assert len(spec.aggregates) == 2  # COUNT(*) once, however often it is named
    assert spec.having is not None and "__a0" in spec.having.sql()
    assert spec.limit == 3 and spec.offset == 1
    assert spec.outputs[2][1].sql() == "__a1 / __a0"


def test_a_subquery_over_a_public_table_is_allowed_in_where():
    spec = parse(
        "SELECT page, COUNT(*) FROM visits WHERE page IN (SELECT page FROM pages WHERE "
        "kind = 'doc') GROUP BY page"
    )
    assert spec.keys[0].name == "page"


def test_public_keys_name_a_public_table():
    spec = parse(
        "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(public_keys=pages) page, COUNT(*) "
        "FROM visits GROUP BY page"
    )
    assert spec.public_keys == "pages"
    with pytest.raises(InvalidParameterError, match="public_keys=visits"):
        parse(
            "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(public_keys=visits) page, COUNT(*) "
            "FROM visits GROUP BY page"
        )


REFUSED = [
    ("SELECT page, COUNT(*) FROM (SELECT page FROM visits) t GROUP BY page", "subquery in FROM"),
    (
        "SELECT page, COUNT(*) FROM visits WHERE uid IN (SELECT uid FROM orders) GROUP BY page",
        "subquery over the private table 'orders'",
    ),
    ("WITH t AS (SELECT * FROM visits) SELECT COUNT(*) FROM t", "common table expression"),
    ("SELECT page, COUNT(*) OVER () FROM visits", "window function"),
    ("SELECT page, x, COUNT(*) FROM visits GROUP BY page", "column 'x' outside an aggregate"),
    ("SELECT * FROM visits", r"SELECT \*"),
    ("SELECT DISTINCT page FROM visits", "SELECT DISTINCT"),
    ("SELECT COUNT(*) FROM visits UNION SELECT COUNT(*) FROM orders", "UNION"),
    ("SELECT page, MAX(x) FROM visits GROUP BY page", "MAX"),
    ("SELECT page, COUNT(DISTINCT page) FROM visits GROUP BY page", "other than the privacy"),
    ("SELECT page, SUM(x) FROM visits GROUP BY page", "needs a public range"),
    ("SELECT page, AVG(x) FROM visits GROUP BY page", "CLAMP"),
    ("SELECT page, COUNT(*) FROM visits GROUP BY page HAVING SUM(x) > 1", "does not release"),
    ("SELECT page, COUNT(*) FROM visits GROUP BY page ORDER BY COUNT(DISTINCT uid)", "ORDER BY"),
    ("SELECT page, COUNT(*) FROM visits GROUP BY page HAVING x > 1", "HAVING of the column"),
    (
        "SELECT v.page, COUNT(*) FROM visits v JOIN orders o ON v.page = o.page GROUP BY v.page",
        "not on the privacy unit",
    ),
    ("SELECT COUNT(*) FROM visits v CROSS JOIN pages", "CROSS"),
    ("SELECT COUNT(*) FROM visits v, pages p", "without ON"),
    ("SELECT COUNT(*) FROM visits v RIGHT JOIN pages p ON v.page = p.page", "RIGHT"),
    ("SELECT COUNT(*) FROM visits v FULL JOIN pages p ON v.page = p.page", "FULL"),
    ("SELECT COUNT(*) FROM read_csv('x.csv')", "in FROM"),
    ("SELECT COUNT(*) FROM main.visits", "qualified table name"),
    ("SELECT page, COUNT(*) FROM visits GROUP BY ROLLUP (page)", "ROLLUP"),
    ("SELECT page, COUNT(*) FROM visits GROUP BY ALL", "GROUP BY ALL"),
    ("SELECT page, SUM(COUNT(*)) FROM visits GROUP BY page", "nested aggregate"),
    ("SELECT page, COUNT(*) FILTER (WHERE x > 1) FROM visits GROUP BY page", "FILTER"),
    ("SELECT page, COUNT(*) FROM visits GROUP BY page LIMIT x", "LIMIT"),
    ("SELECT page FROM visits GROUP BY page", "without an aggregate"),
    ("SELECT COUNT(*) FROM pages", "public tables only"),
    ("DELETE FROM visits", "DELETE"),
    ("SELECT 1; SELECT 2", "several statements"),
    ("", "empty query"),
    ("SELECT page, COUNT(*) FROM visits WHERE SUM(x) > 1 GROUP BY page", "aggregate in WHERE"),
    ("SELECT page, APPROX_QUANTILES(CLAMP(x,0,1), 4) FROM visits GROUP BY page", "an array"),
    ("SELECT page, MEDIAN(CLAMP(x, 5, 1)) FROM visits GROUP BY page", "lower bound"),
    ("SELECT page, PERCENTILE_CONT(CLAMP(x,0,1), 2) FROM visits GROUP BY page", r"\(0, 1\)"),
    ("SELECT page, COUNT(*) AS n, COUNT(*) AS n FROM visits GROUP BY page", "two output"),
    ("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(noise=1) COUNT(*) FROM visits", "option 'noise'"),
    ("SELECT COUNT(*) FROM visits QUALIFY 1 = 1", "QUALIFY"),
    ("SELECT page, COUNT(*) FROM visits GROUP BY page HAVING ((", "cannot be read"),
]


@pytest.mark.parametrize(("query", "named"), REFUSED, ids=[q for q, _ in REFUSED])
def test_a_query_outside_the_class_fails_closed_with_one_line(query, named):
    with pytest.raises(UnsupportedQueryError, match=named) as info:
        parse(query)
    assert "\n" not in str(info.value)


def test_an_unannotated_table_is_private_and_refused_without_a_unit():
    with pytest.raises(InvalidParameterError, match="'pages' is private"):
        parse_query("SELECT page, COUNT(*) FROM pages GROUP BY page", tables=["pages"])


def test_a_table_not_given_is_refused_by_name():
    with pytest.raises(InvalidParameterError, match="'secret', which is not in tables"):
        parse("SELECT COUNT(*) FROM secret")


def test_a_unit_in_the_query_that_differs_from_the_argument_is_refused():
    with pytest.raises(InvalidParameterError, match="differs"):
        parse_query(
            "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(privacy_unit_column=other) COUNT(*) "
            "FROM visits",
            tables=["visits"],
            privacy_unit="uid",
        )
