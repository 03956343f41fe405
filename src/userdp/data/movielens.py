"""MovieLens (GroupLens) datasets: version specs, fast loaders and a checked download.

:data:`MOVIELENS` describes the six official versions. :func:`load_movielens` reads the
ratings of an extracted folder (or a parent of it) or of the official ``.zip`` into
:class:`~userdp.data.Ratings`; :func:`load_ratings_table`, :func:`load_movies`,
:func:`load_tags` and :func:`load_users` return PyArrow tables. Every data file may also be
stored gzip-compressed (``u.data.gz``). :func:`download` fetches and verifies an official zip.

The data are not part of userdp. Their READMEs forbid redistribution (except for
ml-latest-small) and commercial use, and ask publications to cite F. M. Harper and J. A.
Konstan, *The MovieLens Datasets: History and Context*, ACM TiiS 5(4), 2015.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import re
import shutil
import stat
import sys
import tempfile
import urllib.error
import urllib.request
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from userdp._validation import check_choice
from userdp.data.io import safe_message
from userdp.data.ratings import Ratings
from userdp.exceptions import DataError, InvalidParameterError

__all__ = [
    "MOVIELENS",
    "MovieLensSpec",
    "download",
    "load_genome",
    "load_movielens",
    "load_movies",
    "load_ratings_table",
    "load_tags",
    "load_users",
    "movielens_version",
]


@dataclass(frozen=True)
class MovieLensSpec:
    """Layout of one official MovieLens version.

    Attributes
    ----------
    name : str
        Version name, e.g. ``"ml-100k"``.
    url : str
        Official zip URL.
    folder : str
        Folder inside the zip that holds the files (``"ml-10M100K"`` for ml-10m).
    ratings_file, movies_file : str
        File names of the ratings and the movie catalogue.
    ratings_sep, movies_sep : str
        Field separators: ``"\\t"``, ``"|"``, ``"::"`` or ``","`` (CSV with a header row).
    encoding : str
        Text encoding of the movie, tag and user files.
    tags_file, users_file : str or None
        Tag and user-demographics files, None when the version has none.
    rating_min, rating_max, rating_step : float
        Rating scale: 1..5 in whole stars, or 0.5..5 in half stars.
    sha256 : str or None
        SHA-256 of the official zip, None where no published value was found.
    stable : bool
        False for ml-latest and ml-latest-small, which GroupLens re-releases under the same
        URL: a pinned checksum then describes one release only.
    """

    name: str
    url: str
    folder: str
    ratings_file: str
    ratings_sep: str
    movies_file: str
    movies_sep: str
    encoding: str
    tags_file: str | None
    users_file: str | None
    rating_min: float
    rating_max: float
    rating_step: float
    sha256: str | None
    stable: bool = True

    @property
    def zip_name(self) -> str:
        """File name of the official zip (``ml-10m.zip`` for ml-10m)."""
        return self.url.rsplit("/", 1)[-1]


_URL = "https://files.grouplens.org/datasets/movielens/"

# Checksums (SHA-256 of the official zips) as recorded by third parties; GroupLens itself
# publishes only MD5 files (<zip>.md5):
# - ml-100k, ml-1m, ml-20m, ml-latest-small: TensorFlow Datasets,
#   tensorflow/datasets tensorflow_datasets/url_checksums/movielens.txt; the same values are in
#   ISG-Siegen/OmniRec src/omnirec/data_loaders/ (movielens_100k.py, movielens_small.py,
#   movielens_large.py), and ml-20m / ml-latest-small in dmbates/GroupLens.jl src/GroupLens.jl.
# - ml-10m: ISG-Siegen/OmniRec src/omnirec/data_loaders/movielens_small.py (not in TFDS); public
#   research notes pair it with the official MD5 ce571fd55effeba0271552578f2648bd and a size of
#   65,566,137 bytes.
# - ml-latest-small: the September 2018 release (three sources agree); GroupLens may re-release
#   it, and a download will then fail the check until the caller passes the new sha256=.
# - ml-latest: None. It is refreshed upstream and the sources disagree
#   (dmbates/GroupLens.jl: b9c23b66..., OmniRec: 66a9e518...), so no value can be pinned.
MOVIELENS: dict[str, MovieLensSpec] = {
    "ml-100k": MovieLensSpec(
        name="ml-100k",
        url=_URL + "ml-100k.zip",
        folder="ml-100k",
        ratings_file="u.data",
        ratings_sep="\t",
        movies_file="u.item",
        movies_sep="|",
        encoding="latin-1",
        tags_file=None,
        users_file="u.user",
        rating_min=1.0,
        rating_max=5.0,
        rating_step=1.0,
        sha256="50d2a982c66986937beb9ffb3aa76efe955bf3d5c6b761f4e3a7cd717c6a3229",
    ),
    "ml-1m": MovieLensSpec(
        name="ml-1m",
        url=_URL + "ml-1m.zip",
        folder="ml-1m",
        ratings_file="ratings.dat",
        ratings_sep="::",
        movies_file="movies.dat",
        movies_sep="::",
        encoding="latin-1",
        tags_file=None,
        users_file="users.dat",
        rating_min=1.0,
        rating_max=5.0,
        rating_step=1.0,
        sha256="a6898adb50b9ca05aa231689da44c217cb524e7ebd39d264c56e2832f2c54e20",
    ),
    "ml-10m": MovieLensSpec(
        name="ml-10m",
        url=_URL + "ml-10m.zip",
        folder="ml-10M100K",
        ratings_file="ratings.dat",
        ratings_sep="::",
        movies_file="movies.dat",
        movies_sep="::",
        encoding="utf-8",
        tags_file="tags.dat",
        users_file=None,
        rating_min=0.5,
        rating_max=5.0,
        rating_step=0.5,
        sha256="813c411ccb6122564edfe752e7f80c4dcc5aa25fa94c93622f6877a7ba252862",
    ),
    "ml-20m": MovieLensSpec(
        name="ml-20m",
        url=_URL + "ml-20m.zip",
        folder="ml-20m",
        ratings_file="ratings.csv",
        ratings_sep=",",
        movies_file="movies.csv",
        movies_sep=",",
        encoding="utf-8",
        tags_file="tags.csv",
        users_file=None,
        rating_min=0.5,
        rating_max=5.0,
        rating_step=0.5,
        sha256="96f243c338a8665f6bcc89c53edf6ee39162a846940de6b7c8c48aeada765ff3",
    ),
    "ml-latest": MovieLensSpec(
        name="ml-latest",
        url=_URL + "ml-latest.zip",
        folder="ml-latest",
        ratings_file="ratings.csv",
        ratings_sep=",",
        movies_file="movies.csv",
        movies_sep=",",
        encoding="utf-8",
        tags_file="tags.csv",
        users_file=None,
        rating_min=0.5,
        rating_max=5.0,
        rating_step=0.5,
        sha256=None,
        stable=False,
    ),
    "ml-latest-small": MovieLensSpec(
        name="ml-latest-small",
        url=_URL + "ml-latest-small.zip",
        folder="ml-latest-small",
        ratings_file="ratings.csv",
        ratings_sep=",",
        movies_file="movies.csv",
        movies_sep=",",
        encoding="utf-8",
        tags_file="tags.csv",
        users_file=None,
        rating_min=0.5,
        rating_max=5.0,
        rating_step=0.5,
        sha256="696d65a3dfceac7c45750ad32df2c259311949efec81f0f144fdfb91ebc9e436",
        stable=False,
    ),
}

_NAMES = list(MOVIELENS)

# ml-100k genre flags in column order (README), used when u.genre is absent.
_GENRES_100K = tuple(
    (
        "unknown|Action|Adventure|Animation|Children's|Comedy|Crime|Documentary|Drama|Fantasy|"
        "Film-Noir|Horror|Musical|Mystery|Romance|Sci-Fi|Thriller|War|Western"
    ).split("|")
)
# ml-1m occupation codes 0..20 (README).
_OCCUPATIONS_1M = tuple(
    (
        "other|academic/educator|artist|clerical/admin|college/grad student|customer service|"
        "doctor/health care|executive/managerial|farmer|homemaker|K-12 student|lawyer|"
        "programmer|retired|sales/marketing|scientist|self-employed|technician/engineer|"
        "tradesman/craftsman|unemployed|writer"
    ).split("|")
)
_NO_GENRES = ("", "(no genres listed)")
_YEAR = r".*\((?P<year>\d{4})(?:\s*[-–]\s*\d{0,4}\s*)?\)"  # last "(1995)" or "(2009– )" of a title
_BLOCK = 16 << 20  # CSV block size: large blocks parse big files faster
_UNIT_SEP = "\x1f"  # stands in for "::", which pyarrow's one-character delimiter cannot be
_CHUNK = 1 << 20  # download chunk
_TIMEOUT = 60.0  # seconds without data before a download fails


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


def _spec_for_label(label: str) -> MovieLensSpec | None:
    """The version whose name or zip folder is ``label`` (case-insensitive, ``.zip`` ignored)."""
    low = label.lower().removesuffix(".zip")
    for spec in MOVIELENS.values():
        if low in (spec.name, spec.folder.lower()):
            return spec
    return None


def movielens_version(source: str | os.PathLike[str]) -> MovieLensSpec | None:
    """The MovieLens version a folder or zip holds, or None when it is not a MovieLens one.

    Recognised by the name of the folder or zip, or by the one MovieLens folder inside it.
    """
    path = Path(source)
    if path.is_dir():
        spec = _spec_for_label(path.name)
        if spec is None:
            found = {
                s.name: s for c in path.iterdir() if c.is_dir() and (s := _spec_for_label(c.name))
            }
            spec = next(iter(found.values())) if len(found) == 1 else None
        return spec
    if path.is_file() and zipfile.is_zipfile(path):
        spec = _spec_for_label(path.name)
        if spec is None:
            with zipfile.ZipFile(path) as zf:
                tops = {n.split("/", 1)[0] for n in zf.namelist() if "/" in n}
            found = {s.name: s for t in tops if (s := _spec_for_label(t)) is not None}
            spec = next(iter(found.values())) if len(found) == 1 else None
        return spec
    return None


def _cannot_infer(path: Path, caller: str) -> InvalidParameterError:
    return InvalidParameterError(
        f"{caller} cannot tell which MovieLens version {str(path)!r} holds: its name is not one "
        f"of {_NAMES} (or a zip folder name such as 'ml-10M100K') and it holds no folder named "
        "so. Pass name=."
    )


def _resolve_dir(path: Path, name: str | None, caller: str) -> tuple[MovieLensSpec, Path]:
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


def _read_ratings(files: _Files, *, timestamps: bool, id_type: pa.DataType) -> pa.Table:
    spec = files.spec
    key = files.require(spec.ratings_file, "ratings")
    types = {"user": id_type, "item": id_type, "rating": pa.float64(), "timestamp": pa.int64()}
    keep = ["user", "item", "rating"] + (["timestamp"] if timestamps else [])
    if spec.ratings_sep == ",":
        header = {"userId": "user", "movieId": "item", "rating": "rating"}
        if timestamps:
            header["timestamp"] = "timestamp"
        table = _read_header_csv(files, key, {h: (n, types[n]) for h, n in header.items()})
    else:
        if spec.ratings_sep == "::":  # numeric fields: split on ":" and skip the empty fields
            names = ["user", "_1", "item", "_2", "rating", "_3", "timestamp"]
            delimiter = ":"
        else:
            names = ["user", "item", "rating", "timestamp"]
            delimiter = spec.ratings_sep
        table = _read_csv(
            files,
            key,
            read=pacsv.ReadOptions(column_names=names, block_size=_BLOCK),
            parse=pacsv.ParseOptions(delimiter=delimiter, quote_char=False),
            convert=pacsv.ConvertOptions(
                include_columns=keep, column_types={k: types[k] for k in keep}
            ),
        )
    where = files.describe(key)
    _check_no_nulls(table, where)
    if table.num_rows == 0:
        raise DataError(f"{where} has no ratings.")
    _check_scale(table.column("rating").to_numpy(), spec, where)
    return table


def _check_scale(values: np.ndarray, spec: MovieLensSpec, where: str) -> None:
    steps = values / spec.rating_step
    bad = (values < spec.rating_min) | (values > spec.rating_max) | (steps != np.rint(steps))
    if bad.any():
        first = int(np.argmax(bad))
        raise DataError(
            f"{where}: {int(bad.sum())} rating(s) are off the {spec.name} scale "
            f"{spec.rating_min:g}..{spec.rating_max:g} in steps of {spec.rating_step:g} (first: "
            f"{float(values[first])!r} at row {first}). Is name={spec.name!r} the right version?"
        )


def _dense_codes(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int32 codes and sorted int64 labels of integer ids (a lookup table when ids are compact)."""
    lo, hi = int(ids.min()), int(ids.max())
    if lo >= 0 and hi < max(4 * ids.size, 1 << 20):
        present = np.zeros(hi + 1, dtype=bool)
        present[ids] = True
        lookup = np.cumsum(present, dtype=np.int32) - 1
        return lookup[ids], np.flatnonzero(present).astype(np.int64)
    labels, codes = np.unique(ids, return_inverse=True)
    return codes.astype(np.int32).reshape(-1), labels.astype(np.int64)


def _split_genres(genres: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """``"A|B"`` -> ``["A", "B"]``; empty and ``"(no genres listed)"`` -> ``[]``."""
    none = pc.is_in(genres, value_set=pa.array(_NO_GENRES))
    lists = pc.split_pattern(pc.if_else(none, pa.scalar(None, pa.string()), genres), "|")
    return pc.fill_null(lists, pa.scalar([], type=pa.list_(pa.string())))


def _movies_table(
    item: pa.ChunkedArray, title: pa.ChunkedArray, genres: pa.Array, **extra: pa.Array
) -> pa.Table:
    title = pc.utf8_trim_whitespace(title)
    year = pc.struct_field(pc.extract_regex(title, _YEAR), [0]).cast(pa.int32())
    return pa.table(
        {"item": item.cast(pa.int64()), "title": title, "genres": genres, "year": year, **extra}
    )


def _genre_names_100k(files: _Files) -> tuple[str, ...]:
    key = files.find("u.genre")
    if key is None:
        return _GENRES_100K
    text = _read_text_bytes(files, key).decode(files.spec.encoding)
    names = []
    for line in filter(None, (ln.strip() for ln in text.splitlines())):
        genre, _, index = line.rpartition("|")
        if not genre or index != str(len(names)):
            raise DataError(f"{files.describe(key)}: expected 'name|{len(names)}', got {line!r}.")
        names.append(genre)
    return tuple(names)


def _movies_100k(files: _Files, key: str) -> pa.Table:
    names = _genre_names_100k(files)
    flags = [f"_g{i}" for i in range(len(names))]
    columns = [
        ("item", pa.int64()),
        ("title", pa.string()),
        ("release_date", pa.string()),
        ("_video_date", pa.string()),
        ("_url", pa.string()),
    ] + [(f, pa.int8()) for f in flags]
    table = _read_text(files, key, "|", columns, files.spec.encoding)
    _check_no_nulls(table, files.describe(key))
    matrix = np.column_stack([table.column(f).to_numpy() for f in flags])
    if not np.isin(matrix, (0, 1)).all():
        raise DataError(f"{files.describe(key)}: genre flags must be 0 or 1.")
    rows, cols = np.nonzero(matrix)  # row-major: grouped by movie, genres in column order
    offsets = np.zeros(table.num_rows + 1, dtype=np.int32)
    np.cumsum(np.bincount(rows, minlength=table.num_rows), out=offsets[1:])
    genres = pa.ListArray.from_arrays(
        pa.array(offsets), pa.array(np.asarray(names, dtype=object)[cols], pa.string())
    )
    date = table.column("release_date")
    date = pc.if_else(pc.equal(date, ""), pa.scalar(None, pa.string()), date)
    released = pc.strptime(date, format="%d-%b-%Y", unit="s", error_is_null=True)
    return _movies_table(
        table.column("item"),
        table.column("title"),
        genres,
        release_date=released.cast(pa.date32()),
    )


# -- public loaders -----------------------------------------------------------------------------
def load_ratings_table(source: str | os.PathLike[str], name: str | None = None) -> pa.Table:
    """Read the raw ratings of a MovieLens version, in file order, with timestamps.

    Parameters
    ----------
    source : str or path-like
        The extracted folder, a folder holding it, or the official ``.zip``.
    name : str, optional
        Version name, one of :data:`MOVIELENS`; inferred from the folder or zip name when
        omitted.

    Returns
    -------
    pyarrow.Table
        Columns ``user`` and ``item`` (int64 MovieLens ids), ``rating`` (float64) and
        ``timestamp`` (int64 seconds since 1970-01-01 UTC).

    Raises
    ------
    DataError
        If the ratings file is missing or malformed, or a rating is off the version's scale.
    InvalidParameterError
        If ``name`` is unknown, or omitted and cannot be inferred.
    """
    with _open(source, name, "load_ratings_table") as files:
        return _read_ratings(files, timestamps=True, id_type=pa.int64())


def load_movielens(source: str | os.PathLike[str], name: str | None = None) -> Ratings:
    """Load the ratings of a MovieLens version as :class:`~userdp.data.Ratings`.

    The files are parsed by ``pyarrow.csv`` (ml-20m's 20M rows take seconds). ``::``-separated
    files are split on ``:``, skipping the empty fields in between, so they stream too.

    Parameters
    ----------
    source : str or path-like
        The extracted folder (e.g. ``.../ml-10M100K``), a folder holding it, or the official
        ``.zip``. Each data file may instead be gzip-compressed with a ``.gz`` suffix.
    name : str, optional
        Version name, one of ``'ml-100k'``, ``'ml-1m'``, ``'ml-10m'``, ``'ml-20m'``,
        ``'ml-latest'``, ``'ml-latest-small'``; inferred from the folder or zip name when
        omitted.

    Returns
    -------
    Ratings
        Float64 ratings; the code books ``user_labels`` and ``item_labels`` are the original
        MovieLens ids (int64, ascending), holding only users and movies with ratings.

    Raises
    ------
    DataError
        If the ratings file is missing or malformed, or a rating is off the version's scale.
    InvalidParameterError
        If ``name`` is unknown, or omitted and cannot be inferred.

    Examples
    --------
    >>> r = load_movielens("data/ml-100k")  # doctest: +SKIP
    >>> r.n_users, r.n_items, r.n_ratings  # doctest: +SKIP
    (943, 1682, 100000)
    """
    with _open(source, name, "load_movielens") as files:
        table = _read_ratings(files, timestamps=False, id_type=pa.int32())
    users, user_labels = _dense_codes(table.column("user").to_numpy())
    items, item_labels = _dense_codes(table.column("item").to_numpy())
    values = table.column("rating").to_numpy()
    del table
    return Ratings.from_codes(
        users,
        items,
        values,
        n_users=user_labels.size,
        n_items=item_labels.size,
        user_labels=pa.array(user_labels),
        item_labels=pa.array(item_labels),
    )


def load_movies(source: str | os.PathLike[str], name: str | None = None) -> pa.Table:
    """Read the movie catalogue of a MovieLens version.

    Parameters
    ----------
    source : str or path-like
        As for :func:`load_movielens`.
    name : str, optional
        As for :func:`load_movielens`.

    Returns
    -------
    pyarrow.Table
        Columns ``item`` (int64 movie id, as in the ratings' ``item_labels``), ``title``
        (str, as in the file, trimmed), ``genres`` (list<string>; empty for "(no genres
        listed)") and ``year`` (int32, from the last "(1995)" of the title, null when there is
        none). ml-100k adds ``release_date`` (date32, null when empty) and takes the genres from
        its 0/1 flag columns, named by ``u.genre``.

    Raises
    ------
    DataError
        If the movies file is missing or malformed.
    InvalidParameterError
        If ``name`` is unknown, or omitted and cannot be inferred.
    """
    with _open(source, name, "load_movies") as files:
        spec = files.spec
        key = files.require(spec.movies_file, "movies")
        if spec.name == "ml-100k":
            return _movies_100k(files, key)
        if spec.movies_sep == ",":
            table = _read_header_csv(
                files,
                key,
                {
                    "movieId": ("item", pa.int64()),
                    "title": ("title", pa.string()),
                    "genres": ("genres", pa.string()),
                },
            )
        else:
            columns = [("item", pa.int64()), ("title", pa.string()), ("genres", pa.string())]
            table = _read_text(files, key, spec.movies_sep, columns, spec.encoding)
        _check_no_nulls(table, files.describe(key))
    return _movies_table(
        table.column("item"), table.column("title"), _split_genres(table.column("genres"))
    )


def load_tags(source: str | os.PathLike[str], name: str | None = None) -> pa.Table | None:
    """Read the tag applications of a MovieLens version, or None when it has none.

    ml-10m (``tags.dat``), ml-20m, ml-latest and ml-latest-small (``tags.csv``) have tags;
    ml-100k and ml-1m do not.

    Parameters
    ----------
    source : str or path-like
        As for :func:`load_movielens`.
    name : str, optional
        As for :func:`load_movielens`.

    Returns
    -------
    pyarrow.Table or None
        Columns ``user``, ``item`` (int64), ``tag`` (str) and ``timestamp`` (int64 seconds), in
        file order; None when the version has no tags or the tags file is absent.

    Raises
    ------
    DataError
        If the tags file is malformed.
    InvalidParameterError
        If ``name`` is unknown, or omitted and cannot be inferred.
    """
    with _open(source, name, "load_tags") as files:
        spec = files.spec
        key = files.find(spec.tags_file) if spec.tags_file else None
        if key is None:
            return None
        if spec.ratings_sep == ",":
            columns = {
                "userId": ("user", pa.int64()),
                "movieId": ("item", pa.int64()),
                "tag": ("tag", pa.string()),
                "timestamp": ("timestamp", pa.int64()),
            }
            table = _read_header_csv(files, key, columns)
        else:
            cols = [
                ("user", pa.int64()),
                ("item", pa.int64()),
                ("tag", pa.string()),
                ("timestamp", pa.int64()),
            ]
            table = _read_text(files, key, "::", cols, spec.encoding)
        _check_no_nulls(table, files.describe(key))
        return table


def load_genome(source: str | os.PathLike[str], name: str | None = None) -> pa.Table | None:
    """Read the Tag Genome of a MovieLens version, or None when it has none.

    ml-20m and ml-latest ship ``genome-scores.csv`` (movieId, tagId, relevance) and
    ``genome-tags.csv`` (tagId, tag): the relevance in [0, 1] of each of 1,128 tags to each
    movie, computed by GroupLens from tags, ratings and reviews.

    Returns
    -------
    pyarrow.Table or None
        Columns ``item`` (int64), ``tag`` (str) and ``relevance`` (float64), one row per
        (movie, tag) score; None when either genome file is absent.

    Raises
    ------
    DataError
        If a genome file is malformed or a score names an unknown tag id.
    """
    with _open(source, name, "load_genome") as files:
        scores_key = files.find("genome-scores.csv")
        tags_key = files.find("genome-tags.csv")
        if scores_key is None or tags_key is None:
            return None
        scores = _read_header_csv(
            files,
            scores_key,
            {
                "movieId": ("item", pa.int64()),
                "tagId": ("tag_id", pa.int64()),
                "relevance": ("relevance", pa.float64()),
            },
        )
        names = _read_header_csv(
            files, tags_key, {"tagId": ("tag_id", pa.int64()), "tag": ("tag", pa.string())}
        )
    _check_no_nulls(scores, files.describe(scores_key))
    position = pc.index_in(scores.column("tag_id"), value_set=names.column("tag_id"))
    if position.null_count:
        raise DataError(
            f"{files.describe(scores_key)}: {position.null_count} score(s) name a tag id "
            "missing from genome-tags.csv."
        )
    tag = names.column("tag").combine_chunks().take(position.combine_chunks())
    return pa.table(
        {"item": scores.column("item"), "tag": tag, "relevance": scores.column("relevance")}
    )


def load_users(source: str | os.PathLike[str], name: str | None = None) -> pa.Table:
    """Read the user demographics of ml-100k (``u.user``) or ml-1m (``users.dat``).

    Parameters
    ----------
    source : str or path-like
        As for :func:`load_movielens`.
    name : str, optional
        ``'ml-100k'`` or ``'ml-1m'``; inferred from the folder or zip name when omitted.

    Returns
    -------
    pyarrow.Table
        Columns ``user`` (int64), ``age`` (int32), ``gender`` (``"M"``/``"F"``),
        ``occupation`` (str) and ``zip_code`` (str). ml-1m ages are range codes (1: under 18,
        18: 18-24, 25, 35, 45, 50, 56: 56+) and its occupation codes are mapped to the names of
        its README.

    Raises
    ------
    DataError
        If the version has no user file, or the file is missing or malformed.
    InvalidParameterError
        If ``name`` is unknown, or omitted and cannot be inferred.
    """
    with _open(source, name, "load_users") as files:
        spec = files.spec
        if spec.users_file is None:
            raise DataError(
                f"MovieLens {spec.name} has no user demographics; only ml-100k (u.user) and "
                "ml-1m (users.dat) do."
            )
        key = files.require(spec.users_file, "users")
        if spec.name == "ml-100k":
            columns = [
                ("user", pa.int64()),
                ("age", pa.int32()),
                ("gender", pa.string()),
                ("occupation", pa.string()),
                ("zip_code", pa.string()),
            ]
            table = _read_text(files, key, "|", columns, spec.encoding)
            _check_no_nulls(table, files.describe(key))
            return table
        columns = [
            ("user", pa.int64()),
            ("gender", pa.string()),
            ("age", pa.int32()),
            ("occupation", pa.int64()),
            ("zip_code", pa.string()),
        ]
        table = _read_text(files, key, "::", columns, spec.encoding)
        _check_no_nulls(table, files.describe(key))
        codes = table.column("occupation").to_numpy()
        if codes.size and (codes.min() < 0 or codes.max() >= len(_OCCUPATIONS_1M)):
            raise DataError(
                f"{files.describe(key)}: occupation codes must be 0..{len(_OCCUPATIONS_1M) - 1}."
            )
    occupation = pa.array(_OCCUPATIONS_1M).take(codes)
    return pa.table(
        {
            "user": table.column("user"),
            "age": table.column("age"),
            "gender": table.column("gender"),
            "occupation": occupation,
            "zip_code": table.column("zip_code"),
        }
    )


# -- download -----------------------------------------------------------------------------------
def _expected_sha256(spec: MovieLensSpec, sha256: str | None, verify: bool) -> str | None:
    if not isinstance(verify, bool):
        raise InvalidParameterError(
            f"The 'verify' parameter of download must be a bool. Got {verify!r} instead."
        )
    if sha256 is not None and not (
        isinstance(sha256, str) and re.fullmatch(r"[0-9a-fA-F]{64}", sha256)
    ):
        raise InvalidParameterError(
            "The 'sha256' parameter of download must be a string of 64 hexadecimal digits or "
            f"None. Got {sha256!r} instead."
        )
    if not verify:
        if sha256 is not None:
            raise InvalidParameterError(
                "download got sha256= together with verify=False; pass one or the other."
            )
        return None
    if sha256 is not None:
        return sha256.lower()
    if spec.sha256 is None:
        raise InvalidParameterError(
            f"No SHA-256 is pinned for {spec.name!r}: GroupLens re-releases it under the same "
            "URL. Pass sha256='<64 hex digits>' to check the file you expect, or verify=False "
            "to download it without any check."
        )
    return spec.sha256


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _is_tty(stream: object) -> bool:
    try:
        return bool(stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, ValueError, OSError):
        return False


def _fetch(
    url: str, zip_path: Path, expected: str | None, spec: MovieLensSpec, progress: bool
) -> None:
    """Stream ``url`` into a temporary file next to ``zip_path``, check it, then rename it."""
    from tqdm import tqdm

    try:
        request = urllib.request.Request(url, headers={"User-Agent": "userdp"})
    except ValueError as err:
        raise InvalidParameterError(
            f"The 'url' parameter of download must be a URL such as 'https://host/file.zip'. "
            f"Got {url!r} instead."
        ) from err
    fd, tmp_name = tempfile.mkstemp(
        dir=zip_path.parent, prefix=f".{zip_path.name}.", suffix=".part"
    )
    tmp = Path(tmp_name)
    try:
        digest = hashlib.sha256()
        received = 0
        with (
            os.fdopen(fd, "wb") as out,
            urllib.request.urlopen(request, timeout=_TIMEOUT) as response,
        ):
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
            with tqdm(
                total=total,
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                desc=zip_path.name,
                file=sys.stderr,
                disable=not (progress and _is_tty(sys.stderr)),
            ) as bar:
                while chunk := response.read(_CHUNK):
                    out.write(chunk)
                    digest.update(chunk)
                    received += len(chunk)
                    bar.update(len(chunk))
        if total is not None and received != total:
            raise DataError(
                f"The download of {url} stopped after {received} of {total} bytes; the partial "
                "file was deleted."
            )
        got = digest.hexdigest()
        if expected is not None and got != expected:
            hint = (
                " GroupLens re-releases this version under the same URL; if you trust the new "
                f"file, pass sha256={got!r}."
                if not spec.stable
                else ""
            )
            raise DataError(
                f"SHA-256 mismatch for {zip_path.name} downloaded from {url}: expected "
                f"{expected}, got {got}. The file was deleted.{hint}"
            )
        os.replace(tmp, zip_path)
    except (urllib.error.URLError, http.client.HTTPException, OSError) as err:
        tmp.unlink(missing_ok=True)
        raise DataError(f"The download of {url} failed: {err}") from err
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _check_member(info: zipfile.ZipInfo, root: Path, zip_path: Path) -> None:
    """Refuse members that are links or absolute, or that would land outside ``root``."""
    name = info.filename
    parts = PurePosixPath(name.replace("\\", "/")).parts
    unsafe = (
        not parts
        or name.startswith(("/", "\\"))
        or ".." in parts
        or ":" in parts[0]
        or stat.S_ISLNK(info.external_attr >> 16)
        or not (root / name).resolve().is_relative_to(root)
    )
    if unsafe:
        raise DataError(
            f"Refusing to extract {zip_path}: member {name!r} is a link, an absolute path or "
            "leaves the target folder."
        )


def _extract(zip_path: Path, spec: MovieLensSpec, target: Path) -> None:
    """Extract the zip through a temporary folder, then move its ``spec.folder`` to ``target``."""
    try:
        with zipfile.ZipFile(zip_path) as zf:
            infos = zf.infolist()
            root = zip_path.parent.resolve()
            for info in infos:
                _check_member(info, root, zip_path)
            if not any(i.filename.startswith(spec.folder + "/") for i in infos):
                raise DataError(
                    f"{zip_path} has no folder {spec.folder + '/'!r}; is it the {spec.name} zip?"
                )
            tmp = Path(tempfile.mkdtemp(dir=zip_path.parent, prefix=f".{spec.name}.extract."))
            try:
                zf.extractall(tmp)
                if target.exists():
                    shutil.rmtree(target)
                os.replace(tmp / spec.folder, target)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    except zipfile.BadZipFile as err:
        raise DataError(f"{zip_path} is not a valid zip file: {err}") from err


def download(
    name: str,
    directory: str | os.PathLike[str],
    *,
    sha256: str | None = None,
    verify: bool = True,
    url: str | None = None,
    progress: bool = True,
    overwrite: bool = False,
) -> Path:
    """Download, verify and extract an official MovieLens zip.

    The zip is streamed to a temporary file in ``directory``, its SHA-256 is checked, and only
    then is it renamed to ``directory / <zip name>`` and extracted (members that would land
    outside the folder are refused). A zip already there is reused when it passes the check
    (and downloaded again otherwise); an extracted folder already holding the ratings file is
    returned as is, without any request or check.

    A download is checked against ``sha256`` or, when omitted, the value pinned in
    :data:`MOVIELENS`. ml-latest has none (GroupLens refreshes it), so it needs ``sha256=`` or an
    explicit ``verify=False``; downloading without a checksum is never the default.

    Parameters
    ----------
    name : str
        Version name, one of :data:`MOVIELENS`.
    directory : str or path-like
        Where the zip and the extracted folder go; created if needed.
    sha256 : str, optional
        Expected SHA-256 (64 hex digits), overriding the pinned one.
    verify : bool, default True
        False downloads without any checksum (not allowed together with ``sha256``).
    url : str, optional
        Download from here instead of GroupLens (a mirror, or a local server in tests); the
        checksum rules are the same.
    progress : bool, default True
        Show a progress bar on stderr when it is a terminal.
    overwrite : bool, default False
        Download and extract again, replacing the zip and the extracted folder.

    Returns
    -------
    pathlib.Path
        The extracted folder, e.g. ``directory / "ml-10M100K"``; pass it to
        :func:`load_movielens`.

    Raises
    ------
    DataError
        If the download fails or is truncated, the checksum does not match (the file is then
        deleted), the zip is unsafe or lacks the expected folder, or ``directory / folder``
        exists without the ratings file.
    InvalidParameterError
        If ``name`` is unknown, ``sha256`` is malformed, or no checksum is available while
        ``verify`` is True.
    """
    spec = MOVIELENS[check_choice(name, "name", "download", _NAMES)]
    expected = _expected_sha256(spec, sha256, verify)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / spec.folder
    zip_path = directory / spec.zip_name
    if not overwrite and target.exists():
        if _Files(spec, root=target).find(spec.ratings_file) is not None:
            return target
        raise DataError(
            f"{target} exists but holds no {spec.ratings_file!r}; remove it or pass overwrite=True."
        )
    reuse = (
        not overwrite
        and zip_path.is_file()
        and (expected is None or _sha256_file(zip_path) == expected)
    )
    if not reuse:
        _fetch(url or spec.url, zip_path, expected, spec, progress)
    _extract(zip_path, spec, target)
    return target
