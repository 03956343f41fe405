"""The data of a GROUP BY as an engine: Spark's DataFrame as is, any local input as an Arrow
table (frames, dicts of columns, file paths) with its role columns checked."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from userdp.aggregate.local import Columns, LocalEngine, not_scalar
from userdp.exceptions import DataError


def _as_table(data: Any, cols: Columns) -> pa.Table:
    """Any local input as an Arrow table: Arrow tables and record-batch readers, pandas and
    Polars frames, dicts of columns, and file paths (CSV, TSV, Parquet, JSON Lines, read with
    the columns the roles name)."""
    import os

    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatchReader):
        return data.read_all()
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if isinstance(data, str | os.PathLike):
        from userdp.data.io import read_table

        roles = tuple(c for c in (cols.user, cols.key, cols.value) if c is not None)
        return read_table(data, columns=roles)
    if isinstance(data, Mapping):
        return pa.table(
            {
                k: pa.array(np.asarray(v)) if isinstance(v, np.ndarray) else v
                for k, v in data.items()
            }
        )
    module = type(data).__module__
    if module.startswith("pandas") and hasattr(data, "columns"):
        return pa.Table.from_pandas(data, preserve_index=False)
    if module.startswith("polars") and hasattr(data, "collect"):  # a LazyFrame
        data = data.collect()
    if module.startswith("polars") and hasattr(data, "to_arrow"):
        return data.to_arrow()
    raise DataError(
        "aggregate: 'data' must be a pyarrow.Table or RecordBatchReader, a pandas or Polars "
        "DataFrame, a dict of columns, a file path or a pyspark.sql.DataFrame; got "
        f"{type(data).__name__}."
    )


def _engine(engine: str, data: Any, cols: Columns) -> Any:
    if engine == "spark":
        from userdp.aggregate.spark import SparkEngine  # pyspark only when asked for

        return SparkEngine(data, cols)
    table = _as_table(data, cols)
    for role, name in (("user", cols.user), ("key", cols.key), ("value", cols.value)):
        if name is not None and name not in table.column_names:
            raise DataError(
                f"aggregate: the {role} column {name!r} is not in the data (columns: "
                f"{', '.join(table.column_names)})."
            )
    for role, name in (("user", cols.user), ("key", cols.key)):
        if name is not None and pa.types.is_nested(table.schema.field(name).type):
            raise DataError(not_scalar(role, name, str(table.schema.field(name).type)))
    return LocalEngine(table, cols)
