"""Locating and parsing the files of a MovieLens folder or zip (plain or gzip-compressed)."""

from __future__ import annotations

import contextlib
import os
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv

from userdp._validation import check_choice
from userdp.data.io import safe_message
from userdp.data.movielens.versions import _NAMES, MOVIELENS, MovieLensSpec, _spec_for_label
from userdp.exceptions import DataError, InvalidParameterError

_BLOCK = 16 << 20  # CSV block size: large blocks parse big files faster
_UNIT_SEP = "\x1f"  # stands in for "::", which pyarrow's one-character delimiter cannot be


# -- locating the files -------------------------------------------------------------------------
class _Files:
    """The data files of one MovieLens folder, on disk or inside an open zip."""

    def __init__(
        self,
        spec: MovieLensSpec,
        *,
        root: Path | None = None,
        zf: zipfile.ZipFile | None = None,
        prefix: str = "",
        label: str = "",
    ) -> None:
        self.spec = spec
        self.root = root
        self.zf = zf
        self.prefix = prefix
        self.label = label or str(root)
        self._members = set(zf.namelist()) if zf is not None else set()

    def find(self, filename: str) -> str | None:
        """Path or member name of ``filename`` or of ``filename.gz``; None if neither exists."""
        for candidate in (filename, filename + ".gz"):
            if self.zf is not None:
                if self.prefix + candidate in self._members:
                    return self.prefix + candidate
            elif self.root is not None and (self.root / candidate).is_file():
                return str(self.root / candidate)
        return None

    def require(self, filename: str, what: str) -> str:
        """Like :meth:`find`, raising DataError that names the missing file."""
        key = self.find(filename)
        if key is None:
            raise DataError(
                f"The {self.spec.name} {what} file {filename!r} (or {filename + '.gz'!r}) is "
                f"missing from {self.label}; it holds: {self._listing()}."
            )
        return key

    def open(self, key: str) -> pa.NativeFile:
        """A readable stream of the file, decompressed when it ends in ``.gz``."""
        if self.zf is None:
            return pa.input_stream(key)  # detects .gz from the name
        raw = pa.PythonFile(self.zf.open(key), mode="r")
        return pa.CompressedInputStream(raw, "gzip") if key.endswith(".gz") else raw

    def describe(self, key: str) -> str:
        """Where ``key`` lives, for error messages."""
        return f"{self.label}: {key}" if self.zf is not None else key

    def _listing(self) -> str:
        if self.zf is not None:
            names = sorted(
                n[len(self.prefix) :]
                for n in self._members
                if n.startswith(self.prefix) and not n.endswith("/")
            )
        else:
            names = sorted(p.name for p in self.root.iterdir()) if self.root else []
        if not names:
            return "nothing"
        shown = ", ".join(names[:20])
        return shown + (f" and {len(names) - 20} more" if len(names) > 20 else "")


def _cannot_infer(path: Path, caller: str) -> InvalidParameterError:
    return InvalidParameterError(
        f"{caller} cannot tell which MovieLens version {str(path)!r} holds: its name is not one "
        f"of {_NAMES} (or a zip folder name such as 'ml-10M100K') and it holds no folder named "
        "so. Pass name=."
    )


def _resolve_dir(path: Path, name: str | None, caller: str) -> tuple[MovieLensSpec, Path]:
    spec: MovieLensSpec | None
    if name is not None:
        spec = MOVIELENS[name]
        if _spec_for_label(path.name) is not spec:
            for child in (spec.folder, spec.name):
                if (path / child).is_dir():
                    return spec, path / child
        return spec, path
    spec = _spec_for_label(path.name)
    if spec is not None:
        return spec, path
    hits = [
        (s, child)
        for child in sorted(path.iterdir())
        if child.is_dir() and (s := _spec_for_label(child.name)) is not None
    ]
    if len(hits) == 1:
        return hits[0]
    if len(hits) > 1:
        found = [s.name for s, _ in hits]
        raise InvalidParameterError(
            f"{str(path)!r} holds several MovieLens versions ({found}); pass name= to pick one."
        )
    raise _cannot_infer(path, caller)


def _resolve_zip(
    path: Path, zf: zipfile.ZipFile, name: str | None, caller: str
) -> tuple[MovieLensSpec, str]:
    tops = sorted({n.split("/", 1)[0] for n in zf.namelist() if "/" in n})
    spec: MovieLensSpec | None
    if name is not None:
        spec = MOVIELENS[name]
    else:
        spec = _spec_for_label(path.name)
        if spec is None:
            found = {s.name: s for t in tops if (s := _spec_for_label(t)) is not None}
            if len(found) != 1:
                raise _cannot_infer(path, caller)
            spec = next(iter(found.values()))
    for top in tops:
        if top.lower() in (spec.folder.lower(), spec.name):
            return spec, top + "/"
    return spec, (tops[0] + "/" if len(tops) == 1 else "")


@contextlib.contextmanager
def _open(source: str | os.PathLike[str], name: str | None, caller: str) -> Iterator[_Files]:
    if not isinstance(source, (str, os.PathLike)):
        raise InvalidParameterError(
            f"The 'source' parameter of {caller} must be a path to a folder or a .zip file. "
            f"Got {source!r} instead."
        )
    if name is not None:
        check_choice(name, "name", caller, _NAMES)
    path = Path(source)
    if path.is_dir():
        spec, root = _resolve_dir(path, name, caller)
        yield _Files(spec, root=root)
    elif path.is_file():
        if not zipfile.is_zipfile(path):
            raise DataError(f"{str(path)!r} is neither a folder nor a zip file.")
        with zipfile.ZipFile(path) as zf:
            spec, prefix = _resolve_zip(path, zf, name, caller)
            yield _Files(spec, zf=zf, prefix=prefix, label=str(path))
    else:
        raise DataError(f"{str(path)!r} does not exist.")


# -- parsing ------------------------------------------------------------------------------------
_READ_ERRORS = (pa.ArrowException, OSError, EOFError, zipfile.BadZipFile, zlib.error)


def _read_csv(
    files: _Files,
    key: str,
    *,
    read: pacsv.ReadOptions,
    parse: pacsv.ParseOptions,
    convert: pacsv.ConvertOptions,
) -> pa.Table:
    try:
        with files.open(key) as stream:
            return pacsv.read_csv(
                stream, read_options=read, parse_options=parse, convert_options=convert
            )
    except _READ_ERRORS as err:
        raise DataError(f"Cannot read {files.describe(key)}: {safe_message(err)}") from err


def _read_header_csv(
    files: _Files, key: str, columns: dict[str, tuple[str, pa.DataType]]
) -> pa.Table:
    """Read named columns of a CSV with a header row; ``columns`` maps header -> (name, type)."""
    table = _read_csv(
        files,
        key,
        read=pacsv.ReadOptions(block_size=_BLOCK),
        parse=pacsv.ParseOptions(delimiter=","),
        convert=pacsv.ConvertOptions(
            include_columns=list(columns),
            column_types={h: t for h, (_, t) in columns.items()},
            strings_can_be_null=False,
        ),
    )
    return table.rename_columns([name for name, _ in columns.values()])


def _read_text_bytes(files: _Files, key: str) -> bytes:
    try:
        with files.open(key) as stream:
            return stream.read()
    except _READ_ERRORS as err:
        raise DataError(f"Cannot read {files.describe(key)}: {err}") from err


def _read_text(
    files: _Files,
    key: str,
    sep: str,
    columns: list[tuple[str, pa.DataType]],
    encoding: str,
) -> pa.Table:
    """Read a small headerless text file split on ``sep`` (``"::"`` allowed), without quoting."""
    raw = _read_text_bytes(files, key)
    try:
        data = raw.decode(encoding).encode("utf-8")
    except UnicodeDecodeError as err:
        raise DataError(f"{files.describe(key)} is not valid {encoding}: {err}") from err
    if len(sep) > 1:
        if _UNIT_SEP.encode() in data:
            raise DataError(f"{files.describe(key)} contains the control character \\x1f.")
        data, sep = data.replace(sep.encode(), _UNIT_SEP.encode()), _UNIT_SEP
    try:
        return pacsv.read_csv(
            pa.BufferReader(data),
            read_options=pacsv.ReadOptions(column_names=[n for n, _ in columns]),
            parse_options=pacsv.ParseOptions(delimiter=sep, quote_char=False),
            convert_options=pacsv.ConvertOptions(
                column_types=dict(columns), strings_can_be_null=False
            ),
        )
    except pa.ArrowException as err:
        raise DataError(f"Cannot read {files.describe(key)}: {safe_message(err)}") from err


def _check_no_nulls(table: pa.Table, where: str) -> None:
    for col in table.column_names:
        n = table.column(col).null_count
        if n:
            raise DataError(f"{where}: column {col!r} has {n} empty value(s).")
