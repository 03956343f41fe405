"""The row-level part of a private SQL query, run by the engine: scan, WHERE, joins and the
expressions inside the aggregates, one statement that yields the ``(user, key, value...)`` rows
the GROUP BY core consumes. Nothing here adds noise or releases anything.

DuckDB runs in process (a fresh in-memory database per query, the input tables registered as
Arrow or pandas sources, file system access and Python variable look-ups switched off before
the query runs); Spark SQL runs the same statement, transpiled by sqlglot, over temporary views.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
from sqlglot import exp

from userdp.exceptions import DataError, InvalidParameterError
from userdp.sql.parse import QuerySpec, UnsupportedQueryError

__all__ = [
    "USER",
    "decode_keys",
    "duckdb_connection",
    "encode_keys",
    "rows_statement",
]

#: Column names of the rows table (``KEY`` only with GROUP BY; ``value<j>`` per value group).
USER, KEY = "__user", "__key"
_SEP, _ESC = "|", "!"

#: DuckDB types whose values SUM, AVG and the quantiles take (schema, never data).
_NUMERIC = (
    "TINYINT",
    "SMALLINT",
    "INTEGER",
    "BIGINT",
    "HUGEINT",
    "UTINYINT",
    "USMALLINT",
    "UINTEGER",
    "UBIGINT",
    "UHUGEINT",
    "FLOAT",
    "DOUBLE",
    "DECIMAL",
    "BOOLEAN",
)


def value_column(j: int) -> str:
    """The name of value group ``j``'s column in the rows table."""
    return f"__v{j}"


def encode_keys(keys: Sequence[exp.Expression]) -> exp.Expression:
    """One string per row for several GROUP BY expressions, unambiguous and null-aware: each
    part is ``n`` (NULL) or ``v`` + the value's text with ``!`` and ``|`` escaped by ``!``,
    joined by ``|``."""
    parts: list[exp.Expression] = []
    for key in keys:
        text = exp.cast(key.copy(), "VARCHAR")
        escaped = exp.Anonymous(
            this="REPLACE",
            expressions=[
                exp.Anonymous(
                    this="REPLACE",
                    expressions=[text, exp.Literal.string(_ESC), exp.Literal.string(_ESC * 2)],
                ),
                exp.Literal.string(_SEP),
                exp.Literal.string(_ESC + _SEP),
            ],
        )
        parts.append(
            exp.Coalesce(
                this=exp.DPipe(this=exp.Literal.string("v"), expression=escaped),
                expressions=[exp.Literal.string("n")],
            )
        )
    out = parts[0]
    for part in parts[1:]:
        out = exp.DPipe(
            this=exp.DPipe(this=out, expression=exp.Literal.string(_SEP)), expression=part
        )
    return out


def decode_keys(encoded: Sequence[str | None], n: int) -> list[list[str | None]]:
    """The ``n`` text parts (None for NULL) of each key made by :func:`encode_keys`."""
    columns: list[list[str | None]] = [[] for _ in range(n)]
    for text in encoded:
        parts: list[str] = []
        current: list[str] = []
        chars = iter(text or "")
        for c in chars:
            if c == _ESC:
                current.append(next(chars, ""))
            elif c == _SEP:
                parts.append("".join(current))
                current = []
            else:
                current.append(c)
        parts.append("".join(current))
        if len(parts) != n:
            raise DataError(f"A released key has {len(parts)} parts, not {n}.")
        for j, part in enumerate(parts):
            columns[j].append(None if part == "n" else part[1:])
    return columns


def rows_statement(
    spec: QuerySpec,
    values: Sequence[exp.Expression],
    *,
    dialect: str,
    cast_values: bool = True,
    rename: Mapping[str, str] | None = None,
    encode: bool = True,
) -> str:
    """``SELECT unit AS __user[, key AS __key][, value AS __v<j>...] FROM ... WHERE ...``.

    Several GROUP BY expressions become one key column (:func:`encode_keys`) unless
    ``encode=False`` (then ``__k<j>`` each: for reading their types). Rows without a privacy
    unit belong to no user and are left out. CAST becomes TRY_CAST, so that no value of the
    data can make the statement fail (a failure would depend on one user's row).
    """
    user_table = spec.user_table
    sel: Any = spec.skeleton.copy()
    if rename:
        sel = sel.transform(lambda n: _renamed(n, rename))
    user = exp.column(user_table.unit or "", table=user_table.alias, quoted=True)
    items: list[Any] = [exp.alias_(user.copy(), USER, quoted=True)]
    if spec.keys and encode and len(spec.keys) > 1:
        items.append(exp.alias_(encode_keys([k.expression for k in spec.keys]), KEY, quoted=True))
    elif spec.keys and len(spec.keys) == 1 and encode:
        items.append(exp.alias_(spec.keys[0].expression.copy(), KEY, quoted=True))
    else:
        items += [
            exp.alias_(k.expression.copy(), f"__k{j}", quoted=True) for j, k in enumerate(spec.keys)
        ]
    for j, value in enumerate(values):
        v = exp.cast(value.copy(), "DOUBLE") if cast_values else value.copy()
        items.append(exp.alias_(v, value_column(j), quoted=True))
    sel.set("expressions", items)
    present = exp.Not(this=exp.Is(this=user, expression=exp.Null()))
    where = sel.args.get("where")
    sel.set("where", exp.Where(this=exp.and_(where.this, present) if where else present))
    for node in list(sel.find_all(exp.Cast)):
        if type(node) is exp.Cast:  # nested casts too: their nodes stay in the tree
            node.replace(exp.TryCast(this=node.this, to=node.args["to"]))
    return sel.sql(dialect=dialect)


def _renamed(node: exp.Expression, rename: Mapping[str, str]) -> exp.Expression:
    if isinstance(node, exp.Table) and node.name in rename:
        alias = node.alias_or_name
        return exp.Table(
            this=exp.to_identifier(rename[node.name], quoted=True),
            alias=exp.TableAlias(this=exp.to_identifier(alias)),
        )
    return node


def public_keys_statement(spec: QuerySpec, table: str, *, dialect: str) -> str:
    """``SELECT DISTINCT`` the GROUP BY columns from the public key table (encoded alike)."""
    cols = [exp.column(k.expression.name, quoted=True) for k in spec.keys]
    item = encode_keys(cols) if len(cols) > 1 else cols[0]
    sel = exp.select(exp.alias_(item, KEY, quoted=True)).distinct()
    sel = sel.from_(exp.Table(this=exp.to_identifier(table, quoted=True)))
    return sel.order_by(exp.column(KEY, quoted=True)).sql(dialect=dialect)


# --- DuckDB ----------------------------------------------------------------------------------


def _arrow_source(data: Any, name: str) -> Any:
    """What DuckDB scans for ``data``: Arrow tables, datasets and pandas frames as they are,
    Polars and dicts of columns as Arrow, files as an Arrow dataset (Parquet) or table."""
    from userdp._engines import is_spark_dataframe

    if isinstance(data, pa.Table | pa.RecordBatchReader):
        return data
    if type(data).__module__.startswith("pyarrow.") and hasattr(data, "to_batches"):
        return data  # a pyarrow.dataset.Dataset
    module = type(data).__module__
    if module.startswith("pandas") and hasattr(data, "columns"):
        return data
    if module.startswith("polars") and hasattr(data, "to_arrow"):
        return data.to_arrow()
    if isinstance(data, Mapping):
        import numpy as np

        return pa.table(
            {
                k: pa.array(np.asarray(v)) if isinstance(v, np.ndarray) else v
                for k, v in data.items()
            }
        )
    if isinstance(data, str | os.PathLike):
        return _file_source(data, name)
    if is_spark_dataframe(data):
        raise InvalidParameterError(
            f"The table {name!r} is a Spark DataFrame; run the query with engine='spark' (or "
            "'auto')."
        )
    raise DataError(
        f"The table {name!r} must be a pyarrow.Table, a pandas or Polars DataFrame, a dict of "
        f"columns, a file path or a Spark DataFrame; got {type(data).__name__}."
    )


def _file_source(path: str | os.PathLike[str], name: str) -> Any:
    from userdp.data.io import infer_format, read_table

    if not os.path.exists(path):
        raise DataError(f"Cannot read the table {name!r} from {os.fspath(path)!r}: no such file.")
    fmt = "parquet" if os.path.isdir(path) else infer_format(path)
    if fmt == "parquet":
        import pyarrow.dataset as ds

        return ds.dataset(Path(path), format="parquet")
    return read_table(path, columns=(), format=fmt)


def connect_duckdb() -> Any:
    """A fresh in-memory DuckDB that never prints: its own progress bar writes to stdout (where
    ``userdp sql`` writes the result) once a query runs 2 s, so it is off; callers follow a
    query with :func:`run_duckdb`'s ``progress`` instead. Integer division by zero is NULL
    instead of an error (an error would depend on a row's value)."""
    import duckdb

    con = duckdb.connect(":memory:")
    con.execute("SET enable_progress_bar = false")  # a session option: not in connect's config
    con.execute("SET error_on_division_by_zero = false")
    return con


#: Seconds between two reads of a running query's progress.
PROGRESS_POLL_S = 0.25


@contextmanager
def _polled(con: Any, progress: Callable[[int, int], None] | None) -> Iterator[None]:
    """While the block runs, report ``con``'s query progress (percent) to ``progress``."""
    if progress is None:
        yield
        return
    done = threading.Event()

    def poll() -> None:
        while not done.wait(PROGRESS_POLL_S):
            percent = con.query_progress()  # -1 while no query runs
            if percent >= 0:
                progress(min(int(percent), 99), 100)  # 100 once it has ended

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
    progress(100, 100)


@contextmanager
def duckdb_connection(tables: Mapping[str, Any], names: Sequence[str]) -> Iterator[Any]:
    """A fresh in-memory DuckDB with ``names`` registered, closed afterwards.

    External access (files, extensions, the network) and Python variable look-ups are off
    before any query runs, so the query reads exactly the registered tables; integer division
    by zero is NULL instead of an error (an error would depend on a row's value).
    """

    con = connect_duckdb()
    try:
        for name in dict.fromkeys(names):
            con.register(name, _arrow_source(tables[name], name))
        for setting in (
            "SET python_enable_replacements = false",
            "SET enable_external_access = false",
            "SET lock_configuration = true",
        ):
            con.execute(setting)
        yield con
    finally:
        con.close()


def run_duckdb(
    con: Any, statement: str, progress: Callable[[int, int], None] | None = None
) -> pa.Table:
    """Run ``statement``; an engine error on the data never shows its message (it may quote a
    value of the data), only its type; errors of binding (names and types) show in full.

    ``progress(done, 100)`` is called from a second thread with the percent of the query
    DuckDB has run (``query_progress``, polled every :data:`PROGRESS_POLL_S` seconds)."""
    import duckdb

    try:
        with _polled(con, progress):
            return con.sql(statement).to_arrow_table()
    except (duckdb.BinderException, duckdb.CatalogException, duckdb.ParserException) as err:
        raise UnsupportedQueryError(f"DuckDB refused the query: {_duckdb_message(err)}") from err
    except duckdb.Error as err:
        raise DataError(
            f"DuckDB failed while running the row-level query ({type(err).__name__}); its "
            "message is withheld because it may quote a value of the data. Check the "
            "expressions for values they cannot take (use TRY_CAST, NULLIF)."
        ) from err


def describe_duckdb(con: Any, statement: str) -> dict[str, str]:
    """Column name -> DuckDB type of ``statement``'s result, from binding only (no data)."""
    import duckdb

    try:
        rows = con.execute(f"DESCRIBE {statement}").fetchall()
    except (duckdb.BinderException, duckdb.CatalogException, duckdb.ParserException) as err:
        raise UnsupportedQueryError(f"DuckDB refused the query: {_duckdb_message(err)}") from err
    return {str(r[0]): str(r[1]) for r in rows}


def _duckdb_message(err: BaseException) -> str:
    first = str(err).split("\n", 1)[0].strip()
    return first[:240] or type(err).__name__


def is_numeric_type(type_name: str) -> bool:
    """Whether a DuckDB or Spark SQL type name holds numbers (or booleans)."""
    upper = type_name.upper()
    spark = ("BYTE", "SHORT", "INT", "LONG", "FLOAT", "DOUBLE", "DECIMAL", "BOOLEAN", "BIGINT")
    return upper.startswith(_NUMERIC) or upper.replace("TYPE", "").startswith(spark)


def decode_with_duckdb(parts: list[list[str | None]], types: Sequence[str]) -> list[pa.Array]:
    """The key parts cast back to the GROUP BY expressions' DuckDB types (DuckDB's own text
    form of a value casts back to it)."""

    table = pa.table({f"p{j}": pa.array(p, pa.string()) for j, p in enumerate(parts)})
    con = connect_duckdb()
    try:
        con.register("parts", table)
        items = ", ".join(f'TRY_CAST(p{j} AS {t}) AS "__k{j}"' for j, t in enumerate(types))
        out = con.sql(f"SELECT {items} FROM parts").to_arrow_table()
    finally:
        con.close()
    return [out.column(j).combine_chunks() for j in range(len(types))]


# --- Spark SQL -------------------------------------------------------------------------------


@contextmanager
def spark_views(tables: Mapping[str, Any], names: Sequence[str]) -> Iterator[dict[str, str]]:
    """Temporary views of the query's tables under fresh names (the session's own views are
    untouched); dropped afterwards. Yields table name -> view name."""
    from userdp._engines import is_spark_dataframe

    views: dict[str, str] = {}
    session = None
    try:
        for name in dict.fromkeys(names):
            data = tables[name]
            if not is_spark_dataframe(data):
                raise InvalidParameterError(
                    f"On the Spark engine every table must be a Spark DataFrame; {name!r} is "
                    f"{type(data).__name__}."
                )
            session = data.sparkSession
            view = f"userdp_sql_{uuid.uuid4().hex[:12]}"
            data.createOrReplaceTempView(view)
            views[name] = view
        yield views
    finally:
        if session is not None:
            for view in views.values():
                session.catalog.dropTempView(view)


def spark_session_of(tables: Mapping[str, Any], names: Sequence[str]) -> Any:
    return tables[names[0]].sparkSession
