"""Read (user, item) pairs from CSV, TSV, Parquet and JSON Lines files.

The format comes from the file name (``.csv``, ``.tsv``/``.tab``, ``.parquet``/``.pq``,
``.jsonl``/``.ndjson``, each optionally ``.gz``/``.bz2``/``.zst``), or from ``format=``.
Text columns are read as strings with *no* null markers, so tokens like "null", "NA", "none" or
"true" stay items instead of silently becoming missing values. JSON integers too large for int64
(20-digit ids) are read as their exact decimal strings, never rounded to float64. A ``.json``
file holding one JSON array (what ``userdp select -o x.json`` writes) is read too: an array of
objects as rows, an array of plain values as one column named ``item``.

Error messages name the file, line or column, never a cell value: pipelines log errors, and a
value may be private. The underlying error (with the value) stays chained for ``--debug``.

``progress=`` (a callable, default None) is told the number of rows of each batch as it is read,
for a progress bar: a CSV/TSV file block by block, a Parquet file row group by row group, JSON
Lines and a directory or pipe of Parquet once, when read; the counts sum to the table's rows.
It only counts: the table, and every error, are the same with it or without it, but for one
case: a quote that never closes in a CSV/TSV file of several 64 MiB blocks is refused, as a
value spanning lines always is, while Arrow's threaded reader, used without ``progress``, drops
the rows of that block without an error.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import sys
import zipfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from userdp.data.contributions import Contributions
from userdp.data.encoding import check_column_roles
from userdp.exceptions import DataError, InvalidParameterError

__all__ = [
    "FORMATS",
    "check_column_roles",
    "check_model_file",
    "infer_format",
    "read",
    "read_table",
    "safe_message",
    "to_float64",
]

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
_INT64_MAX = 2**63 - 1
#: An integer literal of 19 or more digits as a JSON value: it may not fit int64.
_LONG_INT = re.compile(rb"[:\[,]\s*-?\d{19,}\s*[,}\]]")

#: ``progress(rows)``: told the number of rows of each batch as it is read.
RowProgress = Callable[[int], object]

#: Errors after which a counted read is redone as an uncounted one, which then gives the same
#: table or raises the same error as a read without ``progress``.
_RETRY = (pa.ArrowException, OSError, UnicodeDecodeError)


class _Rows:
    """A ``progress`` callback that keeps the sum it was told, so that what it is told in all
    is the table's number of rows (a batch counted before a read is redone is not told again)."""

    def __init__(self, progress: RowProgress) -> None:
        self.progress = progress
        self.told = 0

    def __call__(self, n: int) -> None:
        if n > 0:
            self.told += n
            self.progress(n)

    def finish(self, table: pa.Table) -> None:
        """Tell the rows of ``table`` that no batch told (a format read at once, a redone read)."""
        self(table.num_rows - self.told)


def check_model_file(path: str | os.PathLike[str]) -> None:
    """Check that ``path`` looks like a saved userdp model (a complete ``.npz`` archive).

    Raises :class:`~userdp.exceptions.DataError` with one clear sentence for a missing, empty,
    truncated or foreign file (a CSV given as the model), instead of NumPy's EOFError,
    BadZipFile or its advice about ``allow_pickle``.
    """
    name = os.fspath(path)
    hint = "train one with 'userdp recommend train'"
    try:
        st = os.stat(name)
    except OSError as err:
        raise DataError(f"Cannot read the userdp model {name!r}: {err.strerror}.") from err
    if not stat.S_ISREG(st.st_mode):
        raise DataError(f"{name!r} is not a userdp model file: it is not a regular file.")
    if st.st_size == 0:
        raise DataError(f"{name!r} is not a userdp model file: it is empty; {hint}.")
    try:
        with zipfile.ZipFile(name) as z:
            members = z.namelist()
    except (zipfile.BadZipFile, OSError) as err:
        raise DataError(
            f"{name!r} is not a userdp model file: not a complete .npz archive (truncated, or "
            f"another kind of file); {hint}."
        ) from err
    if not members or not all(m.endswith(".npy") for m in members):
        raise DataError(f"{name!r} is not a userdp model file: unexpected contents; {hint}.")


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
    columns: tuple[str, ...] = ("user", "item"),
    format: str | None = None,
    header: bool = True,
    delimiter: str | None = None,
    progress: RowProgress | None = None,
) -> pa.Table:
    """Read a file into a PyArrow table holding at least ``columns``.

    ``header=False`` (CSV/TSV only) names the first columns after ``columns``. ``delimiter``
    (CSV/TSV only) overrides the format's separator (``,`` for CSV, tab for TSV). A name may
    appear only once in ``columns``: a column plays one role. ``progress`` is told the rows of
    each batch as it is read (see the module docstring); the table is the same without it.
    """
    if len(set(columns)) != len(columns):
        raise InvalidParameterError(
            f"A column is named twice in columns={tuple(columns)!r} (for example as both the "
            "user and the item column); each column plays one role only."
        )
    fmt = infer_format(path) if format is None else format
    if fmt not in FORMATS:
        raise InvalidParameterError(
            f"The 'format' parameter of read must be one of {', '.join(FORMATS)}. "
            f"Got {fmt!r} instead."
        )
    if delimiter is not None and (not isinstance(delimiter, str) or len(delimiter) != 1):
        raise InvalidParameterError(
            f"The 'delimiter' parameter of read must be one character. Got {delimiter!r} instead."
        )
    if progress is not None and not callable(progress):
        raise InvalidParameterError(
            f"The 'progress' parameter of read must be a callable or None. Got {progress!r} "
            "instead."
        )
    rows = None if progress is None else _Rows(progress)
    if not os.path.exists(path):
        raise DataError(f"Cannot read {str(path)!r}: no such file or directory.")
    if os.path.isdir(path) and not any(
        f.is_file() and not f.name.startswith((".", "_")) for f in Path(path).rglob("*")
    ):
        raise DataError(f"Cannot read {str(path)!r}: the directory holds no data files.")
    try:
        if fmt == "parquet":
            piped = _piped_bytes(path)
            source = path if piped is None else pa.BufferReader(piped)
            schema = pq.read_schema(source) if piped is not None or os.path.isfile(path) else None
            _check_unique(schema.names if schema is not None else [], columns, path)
            wanted = list(columns) if schema is None or set(columns) <= set(schema.names) else None
            counted = None
            if rows is not None and piped is None and os.path.isfile(path):
                counted = _parquet_row_groups(path, wanted, rows)
            table = (
                pq.read_table(source if piped is None else pa.BufferReader(piped), columns=wanted)
                if counted is None
                else counted
            )
        elif fmt == "jsonl":
            table = _read_json(path)
        else:
            table = _read_csv(path, columns, fmt, header, delimiter, rows)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError, UnicodeDecodeError) as err:
        raise DataError(f"Cannot read {str(path)!r} as {fmt}: {safe_message(err)}") from err
    _check_unique(table.column_names, columns, path)
    if rows is not None:
        rows.finish(table)
    return table


def _parquet_row_groups(
    path: str | os.PathLike[str], columns: list[str] | None, rows: _Rows
) -> pa.Table | None:
    """A Parquet file read one row group at a time, each one counted: the table
    ``pq.read_table`` reads. None for a file without row groups, or on an error: the caller
    then reads the file whole, as without ``progress`` (and reports that read's error)."""
    try:
        with pq.ParquetFile(path) as f:
            if f.num_row_groups == 0:
                return None
            parts = []
            for group in range(f.num_row_groups):
                parts.append(f.read_row_group(group, columns=columns))
                rows(parts[-1].num_rows)
        return pa.concat_tables(parts)
    except _RETRY:
        return None


def _check_unique(names: Sequence[str], columns: Sequence[str], path: Any) -> None:
    """Refuse a header naming a wanted column twice (Arrow would raise a bare KeyError)."""
    for col in columns:
        if list(names).count(col) > 1:
            raise DataError(
                f"Cannot read {str(path)!r}: column {col!r} appears {list(names).count(col)} "
                "times in the header; rename the copies so that each name is one column."
            )


#: Arrow messages that quote a cell value.
_QUOTES_A_VALUE = ("conversion error", "Could not convert", "Failed to parse", "invalid value")


def safe_message(err: BaseException) -> str:
    """First line of a reader's error (Arrow, NumPy), without the cell values it may quote.

    Arrow appends the offending row to "CSV parse error: Expected 2 columns, got 3: <row>" and
    quotes the value in "CSV conversion error to double: invalid value 'alice@example.com'";
    a pipeline's log must not receive either. The full error stays chained for ``--debug``.
    """
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    if text.startswith("CSV parse error") or "JSON parse error" in text:
        kept = re.match(r"CSV parse error: (Row #\d+: )?Expected \d+ columns, got \d+", text)
        head = kept.group(0) if kept else text.split(": ", 1)[0] + ": a malformed row"
        return head + " (rerun with --debug to see the row)"
    if "FieldRef" in text:
        return "a file of the directory lacks the requested columns"
    if any(marker in text for marker in _QUOTES_A_VALUE):
        return re.sub(r"'[^']*'|\"[^\"]*\"", "<value>", text) + " (rerun with --debug to see it)"
    return text


def _read_csv(
    path: str | os.PathLike[str],
    columns: Sequence[str],
    fmt: str,
    header: bool,
    delimiter: str | None,
    rows: _Rows | None = None,
) -> pa.Table:
    # Every column is read as strings: "01" and "1" are different items, and no token
    # ("null", "nan", "true", "") turns into a missing value or a number.
    names = list(columns) if header else [f"f{k}" for k in range(len(columns))]
    parse = pacsv.ParseOptions(
        delimiter=delimiter or ("," if fmt == "csv" else "\t"),
        quote_char='"' if fmt == "csv" else False,
    )
    convert = pacsv.ConvertOptions(
        column_types={n: pa.string() for n in names},
        null_values=[],
        strings_can_be_null=False,
        quoted_strings_can_be_null=False,
    )
    if not header:
        convert.include_columns = names[:2]  # extra columns are left out

    def read(use_threads: bool, bad: list[Any], counted: _Rows | None = None) -> pa.Table:
        read_opts = pacsv.ReadOptions(
            block_size=1 << 26, use_threads=use_threads, autogenerate_column_names=not header
        )
        # append returns None, so each bad row is kept and the handler answers "error"
        parse.invalid_row_handler = lambda row: bad.append(row) or "error"  # type: ignore[func-returns-value]
        source = path if piped is None else pa.BufferReader(piped)
        if counted is None:
            return pacsv.read_csv(
                source, read_options=read_opts, parse_options=parse, convert_options=convert
            )
        # Counted: block by block. A streaming reader types the columns not given a type
        # (extra columns) from the first block; a later block that does not convert raises, and
        # the file is then read whole, which types them from every block, as without progress.
        with pacsv.open_csv(
            source, read_options=read_opts, parse_options=parse, convert_options=convert
        ) as reader:
            batches = []
            for batch in reader:
                batches.append(batch)
                counted(batch.num_rows)
            return pa.Table.from_batches(batches, schema=reader.schema)

    _check_text(path, fmt)
    piped = _piped_bytes(path)
    bad: list[Any] = []
    try:
        with _quiet_undecodable_rows():
            table = None
            if rows is not None:
                try:
                    table = read(True, [], rows)
                except _RETRY:
                    table = None  # read again, uncounted: its table or its error, as without
            if table is None:
                table = read(True, bad)
    except pa.ArrowInvalid as err:
        if not bad:
            raise
        row = bad[0]
        if row.number is None:  # parallel reads do not number rows: find it serially
            again: list[Any] = []
            try:
                with _quiet_undecodable_rows():
                    read(False, again)
            except pa.ArrowInvalid:
                pass
            row = again[0] if again else row
        where = f"line {row.number}" if row.number is not None else "a line"
        raise DataError(
            f"Cannot read {str(path)!r} as {fmt}: {where} has {row.actual_columns} columns, "
            f"expected {row.expected_columns} (is the delimiter right? see --delimiter)."
        ) from err
    if not header:
        if table.num_columns < 2:
            raise DataError(
                f"{str(path)!r} has {table.num_columns} column(s); a header-less file needs "
                "the user in column 1 and the item in column 2."
            )
        table = table.rename_columns(list(columns[:2]))
    _check_no_line_breaks(table, path, fmt, header)
    return table


def _piped_bytes(path: str | os.PathLike[str]) -> pa.Buffer | None:
    """The whole content of a pipe or device (a FIFO, ``/dev/stdin``), decompressed by the
    name's suffix, or None for a regular file or a directory. Arrow seeks in what it reads, and
    a pipe cannot seek ("lseek failed"); a pipe's bytes are read once and parsed from memory
    (a table is held in memory anyway)."""
    name = os.fspath(path)
    if os.path.isfile(name) or os.path.isdir(name):
        return None
    with open(name, "rb") as f:
        data = pa.py_buffer(f.read())
    for suffix, codec in zip(_COMPRESSION, ("gzip", "bz2", "zstd", "lz4"), strict=True):
        if name.lower().endswith(suffix):
            with pa.CompressedInputStream(pa.BufferReader(data), codec) as stream:
                return pa.py_buffer(stream.read())
    return data


#: Leading bytes of compressed streams, by the suffix the file name should carry.
_MAGIC = {b"\x1f\x8b": ".gz", b"BZh": ".bz2", b"\x28\xb5\x2f\xfd": ".zst", b"PAR1": ".parquet"}


def _check_text(path: str | os.PathLike[str], fmt: str) -> None:
    """Refuse a compressed or binary file named as text before Arrow parses (and echoes) it."""
    name = os.fspath(path)
    if not os.path.isfile(name):
        return  # a pipe or device: read as it comes
    if any(name.lower().endswith(c) for c in _COMPRESSION):
        return  # Arrow decompresses by the suffix and reports a corrupt stream itself
    with open(name, "rb") as f:
        head = f.read(1 << 16)
    for magic, suffix in _MAGIC.items():
        if head.startswith(magic):
            raise DataError(
                f"Cannot read {name!r} as {fmt}: it starts like a {suffix} file; name it with "
                f"the {suffix} suffix (or pass the right --format)."
            )
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as err:
        if err.start < len(head) - 3:  # not merely a character cut at the 64 KiB boundary
            raise DataError(
                f"Cannot read {name!r} as {fmt}: it is not UTF-8 text (byte {err.start} is not "
                "valid); is it a binary or compressed file?"
            ) from None
        text = ""
    if "\x00" in text:
        raise DataError(f"Cannot read {name!r} as {fmt}: it holds NUL bytes (a binary file?).")


@contextlib.contextmanager
def _quiet_undecodable_rows() -> Iterator[None]:
    """Silence Arrow's "Exception ignored" report of a malformed row that is not UTF-8.

    Arrow decodes the row's text before calling the invalid-row handler; undecodable bytes
    raise inside its callback, and Python prints that (with a traceback) on stderr. The read
    then fails with the ordinary parse error, which the caller reports in one line.
    """
    saved = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        if not isinstance(unraisable.exc_value, UnicodeDecodeError):
            saved(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = saved


def _check_no_line_breaks(
    table: pa.Table, path: str | os.PathLike[str], fmt: str, header: bool
) -> None:
    """Refuse a value that spans lines: in practice an unterminated quote.

    Arrow reads a quote that is never closed up to the end of the file, so the rows after it
    would silently become one value. Values holding line breaks are refused as a whole (the
    Spark engine reads CSV line by line too, so both engines agree); the message names the line
    where the value starts.
    """
    import pyarrow.compute as pc

    for name, col in zip(table.column_names, table.columns, strict=True):
        if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
            continue
        broken = pc.match_substring_regex(col, r"[\r\n]")
        if not pc.any(broken).as_py():
            continue
        first = int(pc.index(broken, True).as_py())
        line = first + (2 if header else 1)
        raise DataError(
            f"Cannot read {str(path)!r} as {fmt}: the value of column {name!r} on line {line} "
            "spans several lines (an unterminated quote?); values may not hold line breaks."
        )


def _read_json(path: str | os.PathLike[str]) -> pa.Table:
    """JSON Lines (or one JSON array) with integers beyond int64 kept as exact strings."""
    piped = _piped_bytes(path)
    if piped is not None:
        data = piped.to_pybytes()
    else:
        with pa.input_stream(os.fspath(path), compression="detect") as f:
            data = f.read()
    if data.lstrip()[:1] == b"[":
        try:
            rows = json.loads(data)
        except ValueError as err:
            raise DataError(
                f"Cannot read {str(path)!r} as a JSON array: malformed JSON at line "
                f"{getattr(err, 'lineno', '?')}."
            ) from err
        if not isinstance(rows, list):
            raise DataError(f"Cannot read {str(path)!r}: expected a JSON array.")
        if rows and not all(isinstance(r, dict) for r in rows):
            rows = [{"item": r} for r in rows]  # a list of values: userdp select's .json output
        return _table_from_rows(rows)
    if not _LONG_INT.search(data):
        return pajson.read_json(pa.BufferReader(data))
    rows = []
    for number, line in enumerate(data.splitlines(), start=1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError as err:
                raise DataError(
                    f"Cannot read {str(path)!r} as jsonl: line {number} is not valid JSON."
                ) from err
    return _table_from_rows(rows)


#: A cell of a text column that reads as a number (what Arrow's float parser takes); any other
#: cell is a missing value.
_NUMBER = r"(?i)^\s*[+-]?((\d+\.?\d*|\.\d+)(e[+-]?\d+)?|nan|inf|infinity)\s*$"


def to_float64(values: pa.ChunkedArray, column: str, where: str) -> pa.ChunkedArray:
    """Cast a value column to float64 by the non-finite policy (docs/guarantees.md): a text cell
    that is not a number (empty, ``NA``, a word) is a missing value (null), like ``nan``; a
    column is refused by its type only (a DataError names the column), never by one row's
    content, so no refusal happens only because one user wrote such a cell.

    ``where`` prefixes the message (the file name).
    """
    import pyarrow.compute as pc

    try:
        return values.cast(pa.float64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
        if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
            raise DataError(
                f"{where}: column {column!r} must hold numbers; it holds {values.type}."
            ) from err
        number = pc.match_substring_regex(values, _NUMBER).fill_null(False)
        return pc.if_else(number, values, pa.scalar(None, values.type)).cast(pa.float64())


def _beyond_int64(value: object) -> bool:
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and not -_INT64_MAX - 1 <= value <= _INT64_MAX
    )


def _table_from_rows(rows: list[Any]) -> pa.Table:
    """A table from parsed JSON objects; a column with an integer beyond int64 becomes strings
    (exact decimal text), as does any id-like column mixing such integers with other values."""
    names: dict[str, None] = {}
    for r in rows:
        if not isinstance(r, dict):
            raise DataError("Every JSON row must be an object of column values.")
        names.update(dict.fromkeys(r))
    columns = {}
    for name in names:
        values = [r.get(name) for r in rows]
        if any(
            isinstance(v, int)
            and not isinstance(v, bool)
            and not -_INT64_MAX - 1 <= v <= _INT64_MAX
            for v in values
        ):
            values = [v if v is None or isinstance(v, str) else json.dumps(v) for v in values]
        try:
            columns[name] = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as err:
            raise DataError(f"Column {name!r} mixes types that cannot form one column.") from err
    return pa.table(columns)


def read(
    path: str | os.PathLike[str],
    *,
    user_column: str = "user",
    item_column: str = "item",
    format: str | None = None,
    header: bool = True,
    delimiter: str | None = None,
    progress: RowProgress | None = None,
) -> Contributions:
    """Read a file of (user, item) rows into :class:`Contributions`.

    ``delimiter`` (CSV/TSV only) overrides the format's separator. ``progress`` is told the
    rows of each batch as it is read (:func:`read_table`); the result is the same without it.

    Examples
    --------
    >>> import tempfile, os
    >>> d = tempfile.mkdtemp(); p = os.path.join(d, "pairs.csv")
    >>> _ = open(p, "w").write("user,item\\nann,null\\nbob,null\\nann,NA\\n")
    >>> read(p).item_values([0, 1]).to_pylist()
    ['null', 'NA']
    """
    check_column_roles({"user column": user_column, "item column": item_column})
    table = read_table(
        path,
        columns=(user_column, item_column),
        format=format,
        header=header,
        delimiter=delimiter,
        progress=progress,
    )
    return Contributions.from_table(table, user_column, item_column)


def polars_frame(table: pa.Table) -> Any:
    """``table`` as a Polars DataFrame, for the results' ``to_polars``; a one-line error naming
    ``pip install polars`` when Polars is missing (it is not a dependency of userdp)."""
    try:
        import polars as pl
    except ImportError as err:
        raise InvalidParameterError(
            "to_polars needs Polars, which is not installed: pip install polars (or use "
            "to_arrow() / to_pandas())."
        ) from err
    return pl.from_arrow(table)
