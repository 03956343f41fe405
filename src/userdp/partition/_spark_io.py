"""Reading files as Spark DataFrames, as :func:`userdp.data.read` reads them locally (CSV/TSV
as strings). Re-exported as :func:`userdp.partition.spark.read`, which the CLI's Spark commands use.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from userdp.exceptions import DataError, InvalidParameterError

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame

__all__ = ["read"]


def read(
    path: str | os.PathLike[str],
    *,
    format: str | None = None,
    header: bool = True,
    spark: Any = None,
) -> DataFrame:
    """Read a CSV/TSV/Parquet/JSON Lines file or directory of part files as a DataFrame.

    CSV/TSV columns are strings, as in :func:`userdp.data.read`: no schema inference and no
    null markers, so "", "NA" and "01" are distinct items on both engines.
    """
    from userdp.data.io import FORMATS, infer_format
    from userdp.spark import spark_session

    session = spark or spark_session()
    fmt = format or infer_format(path)
    if fmt not in FORMATS:
        raise InvalidParameterError(
            f"The 'format' parameter of read must be one of {', '.join(FORMATS)}. Got {fmt!r}."
        )
    path = os.fspath(path)
    if "://" not in path and not path.startswith("file:"):
        # Spark resolves relative paths against the JVM's directory, not Python's
        path = os.path.abspath(path)
    reader = session.read
    try:
        if fmt in ("csv", "tsv"):
            frame = reader.csv(
                path,
                sep="\t" if fmt == "tsv" else ",",
                header=header,
                inferSchema=False,
                # a row with more or fewer fields than the header fails, as on the local engine
                mode="FAILFAST",
            )
            # Spark reads an empty field as null; the local engine reads it as the empty
            # string, which is what the file holds. No other value is a null marker.
            return frame.na.fill("")
        if fmt == "parquet":
            return reader.parquet(path)
        return reader.json(path)
    except Exception as err:  # AnalysisException (missing path, bad file) has no stable import
        raise DataError(f"Spark cannot read {path!r} as {fmt}: {err}") from err
