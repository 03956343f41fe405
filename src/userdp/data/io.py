"""Read (user, item) pairs from CSV, TSV, Parquet and JSON Lines files.

The format comes from the file name (``.csv``, ``.tsv``/``.tab``, ``.parquet``/``.pq``,
``.jsonl``/``.ndjson``, each optionally ``.gz``/``.bz2``/``.zst``), or from ``format=``.
Text columns are read as strings with *no* null markers, so tokens like "null", "NA", "none" or
"true" stay items instead of silently becoming missing values.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from userdp.data.contributions import Contributions
from userdp.exceptions import DataError, InvalidParameterError

__all__ = ["FORMATS", "infer_format", "read", "read_table"]

FORMATS = ("csv", "tsv", "parquet", "jsonl")
_SUFFIXES = {
    ".csv": "csv",
    ".tsv": "tsv",
    ".tab": "tsv",
    ".txt": "tsv",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
}
_COMPRESSION = (".gz", ".bz2", ".zst", ".lz4")


def infer_format(path: str | os.PathLike[str]) -> str:
    """Format name from the file name, ignoring a compression suffix."""
    p = Path(path)
    suffixes = [s.lower() for s in p.suffixes]
    if suffixes and suffixes[-1] in _COMPRESSION:
        suffixes = suffixes[:-1]
    if suffixes and suffixes[-1] in _SUFFIXES:
        return _SUFFIXES[suffixes[-1]]
    if p.is_dir():  # a directory of part files, named without a format suffix
        return "parquet"
    raise InvalidParameterError(
        f"Cannot tell the format of {str(path)!r} from its name; pass format= one of "
        f"{', '.join(FORMATS)} (CLI: --format)."
    )


def read_table(
    path: str | os.PathLike[str],
    *,
    columns: tuple[str, str] = ("user", "item"),
    format: str | None = None,
    header: bool = True,
) -> pa.Table:
    """Read a file into a PyArrow table holding at least ``columns``.

    ``header=False`` (CSV/TSV only) names the first two columns after ``columns``.
    """
    fmt = infer_format(path) if format is None else format
    if fmt not in FORMATS:
        raise InvalidParameterError(
            f"The 'format' parameter of read must be one of {', '.join(FORMATS)}. "
            f"Got {fmt!r} instead."
        )
    if not os.path.exists(path):
        raise DataError(f"Cannot read {str(path)!r}: no such file or directory.")
    try:
        if fmt == "parquet":
            schema = pq.read_schema(path) if os.path.isfile(path) else None
            wanted = list(columns) if schema is None or set(columns) <= set(schema.names) else None
            return pq.read_table(path, columns=wanted)
        if fmt == "jsonl":
            return pajson.read_json(path)
        # Both columns are read as strings: "01" and "1" are different items, and no token
        # ("null", "nan", "true", "") turns into a missing value or a number.
        if header:
            read_opts = pacsv.ReadOptions(block_size=1 << 26)
            names = list(columns)
        else:
            read_opts = pacsv.ReadOptions(autogenerate_column_names=True, block_size=1 << 26)
            names = ["f0", "f1"]
        parse = pacsv.ParseOptions(
            delimiter="," if fmt == "csv" else "\t", quote_char='"' if fmt == "csv" else False
        )
        convert = pacsv.ConvertOptions(
            column_types={n: pa.string() for n in names},
            null_values=[],
            strings_can_be_null=False,
            quoted_strings_can_be_null=False,
        )
        if not header:
            convert.include_columns = names  # extra columns are left out
        table = pacsv.read_csv(
            path, read_options=read_opts, parse_options=parse, convert_options=convert
        )
        if not header:
            if table.num_columns < 2:
                raise DataError(
                    f"{str(path)!r} has {table.num_columns} column(s); a header-less file needs "
                    "the user in column 1 and the item in column 2."
                )
            table = table.rename_columns(list(columns))
        return table
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError, UnicodeDecodeError) as err:
        msg = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise DataError(f"Cannot read {str(path)!r} as {fmt}: {msg}") from err


def read(
    path: str | os.PathLike[str],
    *,
    user_column: str = "user",
    item_column: str = "item",
    format: str | None = None,
    header: bool = True,
) -> Contributions:
    """Read a file of (user, item) rows into :class:`Contributions`.

    Examples
    --------
    >>> import tempfile, os
    >>> d = tempfile.mkdtemp(); p = os.path.join(d, "pairs.csv")
    >>> _ = open(p, "w").write("user,item\\nann,null\\nbob,null\\nann,NA\\n")
    >>> read(p).item_values([0, 1]).to_pylist()
    ['null', 'NA']
    """
    table = read_table(path, columns=(user_column, item_column), format=format, header=header)
    return Contributions.from_table(table, user_column, item_column)
