"""Loaders of a MovieLens version: ratings, movies, tags, Tag Genome and user demographics."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from userdp.data.encoding import encode_ids
from userdp.data.movielens.files import (
    _BLOCK,
    _check_no_nulls,
    _Files,
    _open,
    _read_csv,
    _read_header_csv,
    _read_text,
    _read_text_bytes,
)
from userdp.data.movielens.versions import MovieLensSpec
from userdp.data.ratings import Ratings
from userdp.exceptions import DataError

__all__ = [
    "load_genome",
    "load_movielens",
    "load_movies",
    "load_ratings_table",
    "load_tags",
    "load_users",
]

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
    names: list[str] = []
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
    users, user_labels = encode_ids(table.column("user").to_numpy(), "user", order="sorted")
    items, item_labels = encode_ids(table.column("item").to_numpy(), "item", order="sorted")
    values = table.column("rating").to_numpy()
    del table
    return Ratings.from_codes(
        users,
        items,
        values,
        n_users=len(user_labels),
        n_items=len(item_labels),
        user_labels=user_labels,
        item_labels=item_labels,
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
