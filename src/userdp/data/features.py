"""Sparse item and user features aligned to a code book: the public matrix X_pub and friends.

Private learning with public features (Krichene et al., https://arxiv.org/abs/2310.15454,
Section 2.1 in v1) joins each private rating with a row of a public item-feature matrix
``X_pub``. Appendix E.1 (in v1) builds it for MovieLens from the release year (univalent, one
value per movie) and the genres (multivalent, a bag of words whose repetitions count as
weights), plus richer metadata when available. This module builds those families as
:class:`SparseFeatures`, one CSR matrix each, whose row ``c`` describes item code ``c`` of the
model's code book (``Ratings.item_labels``):

- :func:`item_features`: genres (multi-hot) and year or decade (one-hot) of a movie table;
- :func:`tag_features`: bags of user-written tags (public only by the caller's choice);
- :func:`movielens_item_features`, :func:`movielens_user_features`: the same for a MovieLens
  folder or zip, the latter giving the *private* demographics of ml-100k and ml-1m.

Everything is vectorized with PyArrow compute and NumPy: ml-20m's 27k movies take
milliseconds. The recommender's encoders accept any object with ``.name`` and ``.matrix``;
this module does not import them (the data layer imports no capability).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import scipy.sparse as sp

from userdp._validation import check_choice, check_int, check_real
from userdp.data.movielens import (
    MOVIELENS,
    load_genome,
    load_movies,
    load_tags,
    load_users,
    movielens_version,
)
from userdp.exceptions import DataError, InvalidParameterError

__all__ = [
    "SparseFeatures",
    "genome_features",
    "item_features",
    "movielens_item_features",
    "movielens_user_features",
    "tag_features",
]

_ITEM_FAMILIES = ("genres", "year")
_YEAR_BUCKETS = ("year", "decade")
_NO_GENRES = ("", "(no genres listed)")

# ml-1m age codes (README) and their ranges; ml-100k ages (years) are bucketed into them.
_AGE_CODES = np.array([1, 18, 25, 35, 45, 50, 56])
_AGE_NAMES = ("under 18", "18-24", "25-34", "35-44", "45-49", "50-55", "56+")
_GENDERS = ("F", "M")
# ml-100k u.occupation, in file order; ml-1m occupations are the names of its README.
_OCCUPATIONS_100K = (
    "administrator|artist|doctor|educator|engineer|entertainment|executive|healthcare|homemaker|"
    "lawyer|librarian|marketing|none|other|programmer|retired|salesman|scientist|student|"
    "technician|writer"
).split("|")
_OCCUPATIONS_1M = (
    "other|academic/educator|artist|clerical/admin|college/grad student|customer service|"
    "doctor/health care|executive/managerial|farmer|homemaker|K-12 student|lawyer|"
    "programmer|retired|sales/marketing|scientist|self-employed|technician/engineer|"
    "tradesman/craftsman|unemployed|writer"
).split("|")


@dataclass(frozen=True, eq=False)
class SparseFeatures:
    """One feature family: a nonnegative sparse matrix whose row ``c`` describes code ``c``.

    Attributes
    ----------
    name : str
        Family name, e.g. ``"genres"``, ``"year"``, ``"tags"``, ``"age"``.
    matrix : scipy.sparse.csr_matrix of float64, shape (n_rows, n_values)
        Weights: 1.0 for a one-hot or multi-hot value, the number of repetitions for a bag of
        words. An all-zero row means "no value" (unknown item, missing year, ...).
    values : list of str
        ``values[k]`` names column ``k`` (``"Comedy"``, ``"1995"``, ``"1990s"``, ``"pixar"``).

    Raises
    ------
    InvalidParameterError
        If the matrix is not CSR, has negative or non-finite weights, or does not have one
        column per value.
    """

    name: str
    matrix: sp.csr_matrix
    values: list[str]

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidParameterError(
                f"The 'name' parameter of SparseFeatures must be a non-empty str. Got "
                f"{self.name!r} instead."
            )
        if not sp.issparse(self.matrix) or self.matrix.format != "csr":
            raise InvalidParameterError(
                "The 'matrix' parameter of SparseFeatures must be a scipy.sparse CSR matrix. "
                f"Got {type(self.matrix).__name__} instead."
            )
        if self.matrix.shape[1] != len(self.values):
            raise InvalidParameterError(
                f"SparseFeatures {self.name!r} has {self.matrix.shape[1]} columns but "
                f"{len(self.values)} values; name each column once."
            )
        data = self.matrix.data
        if data.size and not (np.isfinite(data).all() and data.min() >= 0):
            raise InvalidParameterError(
                f"SparseFeatures {self.name!r} must have finite nonnegative weights."
            )

    @property
    def shape(self) -> tuple[int, int]:
        """(n_rows, n_values)."""
        return self.matrix.shape

    def __repr__(self) -> str:
        n, p = self.matrix.shape
        return (
            f"SparseFeatures(name={self.name!r}, n_rows={n}, n_values={p}, nnz={self.matrix.nnz})"
        )


# -- building blocks ----------------------------------------------------------------------------
def _as_array(labels: Any, what: str, caller: str) -> pa.Array:
    if isinstance(labels, pa.ChunkedArray):
        return labels.combine_chunks()
    if isinstance(labels, pa.Array):
        return labels
    if isinstance(labels, (str, bytes)) or labels is None:
        raise InvalidParameterError(
            f"The {what!r} parameter of {caller} must be an array of ids (the code book). Got "
            f"{labels!r} instead."
        )
    try:
        return pa.array(np.asarray(labels) if isinstance(labels, np.ndarray) else list(labels))
    except (pa.ArrowException, TypeError) as err:
        raise InvalidParameterError(
            f"The {what!r} parameter of {caller} must be an array of ids (the code book): {err}"
        ) from err


def _rows_of(ids: pa.Array, labels: pa.Array, column: str, what: str) -> np.ndarray:
    """For each table row, the code whose label is its id, or -1 when the code book lacks it.

    ``ids`` is a key column (no nulls; duplicates allowed, e.g. tag applications).
    """
    if labels.type != ids.type:
        # Only integer widths are reconciled: "10" is not the movie 10.
        mismatch = DataError(
            f"The {what} has type {labels.type} but column {column!r} has type {ids.type}; "
            "they must hold the same kind of ids."
        )
        if not (pa.types.is_integer(labels.type) and pa.types.is_integer(ids.type)):
            raise mismatch
        try:
            labels = labels.cast(ids.type)
        except pa.ArrowException as err:
            raise mismatch from err
    if pc.count_distinct(labels, mode="only_valid").as_py() != len(labels) - labels.null_count:
        raise DataError(f"The {what} holds some id more than once; a code book is unique.")
    code = pc.index_in(ids, value_set=labels)
    return pc.fill_null(code, -1).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def _key_column(table: pa.Table, column: str, where: str, unique: bool) -> pa.Array:
    ids = table.column(column).combine_chunks()
    if ids.null_count:
        raise DataError(f"{where}: column {column!r} has {ids.null_count} empty value(s).")
    if unique and pc.count_distinct(ids).as_py() != len(ids):
        raise DataError(f"{where}: column {column!r} holds some id on more than one row.")
    return ids


def _require_columns(table: Any, columns: Sequence[str], where: str, caller: str) -> None:
    if not isinstance(table, pa.Table):
        raise InvalidParameterError(
            f"The 'table' parameter of {caller} must be a pyarrow.Table. Got "
            f"{type(table).__name__} instead."
        )
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise DataError(
            f"{where} lacks column(s) {missing!r}; it has {table.column_names!r}. Required: "
            f"{list(columns)!r}."
        )


def _matrix(
    name: str,
    rows: np.ndarray,
    cols: np.ndarray,
    values: list[str],
    n_rows: int,
    min_count: int = 1,
) -> SparseFeatures:
    """Sum 1.0 per (row, col) pair into a CSR matrix, dropping columns of total < min_count."""
    if min_count > 1:
        # Column sums: the number of items holding a value (or of a tag's applications).
        kept = np.bincount(cols, minlength=len(values)) >= min_count
        new = np.cumsum(kept) - 1
        sel = kept[cols]
        rows, cols = rows[sel], new[cols[sel]]
        values = [v for v, k in zip(values, kept, strict=True) if k]
    weights = np.ones(rows.size, dtype=np.float64)
    # coo -> csr sums repeated (row, value) pairs: a bag of words counts repetitions.
    matrix = sp.coo_matrix((weights, (rows, cols)), shape=(n_rows, len(values))).tocsr()
    matrix.sum_duplicates()
    matrix.sort_indices()
    return SparseFeatures(name, matrix, values)


def _bag(
    name: str,
    codes: np.ndarray,
    tokens: pa.Array,
    n_rows: int,
    *,
    min_count: int = 1,
    vocabulary: Sequence[str] | None = None,
    where: str = "",
) -> SparseFeatures:
    """Counts of string ``tokens[i]`` in row ``codes[i]`` (rows < 0 and null tokens dropped).

    Without ``vocabulary`` the columns are the distinct tokens, sorted, of total weight at least
    ``min_count``; with it they are exactly ``vocabulary`` (another token is a DataError naming
    ``where``).
    """
    keep = codes >= 0
    if tokens.null_count:
        keep &= pc.is_valid(tokens).to_numpy(zero_copy_only=False)
    rows = codes[keep]
    tokens = tokens.filter(pa.array(keep))
    if vocabulary is None:
        vocab = pc.unique(tokens)
        vocab = vocab.take(pc.array_sort_indices(vocab))
    else:
        vocab = pa.array(list(vocabulary), pa.string())
    cols = pc.index_in(tokens, value_set=vocab)
    if cols.null_count:
        bad = tokens.filter(pc.is_null(cols))[0].as_py()
        raise DataError(f"{where}: unknown value {bad!r}; expected one of {vocab.to_pylist()!r}.")
    cols = cols.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    return _matrix(name, rows, cols, vocab.to_pylist(), n_rows, min_count)


def _check_families(families: Any, allowed: Sequence[str], caller: str) -> tuple[str, ...]:
    if isinstance(families, str) or not isinstance(families, Sequence) or not families:
        raise InvalidParameterError(
            f"The 'families' parameter of {caller} must be a non-empty sequence of names from "
            f"{list(allowed)!r}, such as ('genres', 'year'). Got {families!r} instead."
        )
    for f in families:
        check_choice(f, "families", caller, list(allowed))
    if len(set(families)) != len(families):
        raise InvalidParameterError(
            f"The 'families' parameter of {caller} must not repeat a name. Got {families!r} "
            "instead."
        )
    return tuple(families)


# -- item features ------------------------------------------------------------------------------
def _genres(table: pa.Table, codes: np.ndarray, n: int, min_count: int) -> SparseFeatures:
    genres = table.column("genres").combine_chunks()
    if not (pa.types.is_list(genres.type) or pa.types.is_large_list(genres.type)):
        raise DataError(
            f"The movie table's column 'genres' must be a list of strings; got {genres.type}."
        )
    tokens = pc.list_flatten(genres).cast(pa.string())
    parent = pc.list_parent_indices(genres).to_numpy(zero_copy_only=False)
    rows = codes[parent]
    rows[pc.is_in(tokens, value_set=pa.array(_NO_GENRES)).to_numpy(zero_copy_only=False)] = -1
    return _bag("genres", rows, tokens, n, min_count=min_count)


def _years(
    table: pa.Table, codes: np.ndarray, n: int, buckets: str, min_count: int
) -> SparseFeatures:
    year = table.column("year").combine_chunks()
    if not pa.types.is_integer(year.type):
        raise DataError(f"The movie table's column 'year' must be integers; got {year.type}.")
    keep = codes >= 0
    if year.null_count:
        keep &= pc.is_valid(year).to_numpy(zero_copy_only=False)
    key = pc.fill_null(year.cast(pa.int64()), 0).to_numpy(zero_copy_only=False)[keep]
    if buckets == "decade":
        key = np.floor_divide(key, 10) * 10
    # Numeric order: "995" before "1995", unlike string order.
    uniq, cols = np.unique(key, return_inverse=True)
    suffix = "s" if buckets == "decade" else ""
    values = [f"{v}{suffix}" for v in uniq.tolist()]
    return _matrix("year", codes[keep], cols.reshape(-1), values, n, min_count)


def item_features(
    table: pa.Table,
    item_labels: Any,
    *,
    families: Sequence[str] = ("genres", "year"),
    year_buckets: str = "year",
    min_count: int = 1,
) -> list[SparseFeatures]:
    """Genres (multi-hot) and release year (one-hot) of a movie table, row-aligned to a code book.

    The public item features of Appendix E.1 (in v1) of https://arxiv.org/abs/2310.15454: the
    release year is univalent (one-hot), the genres multivalent (a bag of words).

    Parameters
    ----------
    table : pyarrow.Table
        Movie catalogue with column ``item`` (the ids of ``item_labels``, unique) and, as the
        families need, ``genres`` (list<string>) and ``year`` (integer, null when unknown), as
        returned by :func:`~userdp.data.movielens.load_movies`.
    item_labels : pyarrow.Array or array-like
        The model's item code book (``Ratings.item_labels``): row ``c`` of every matrix
        describes item ``item_labels[c]``. Items missing from ``table`` get all-zero rows.
    families : sequence of {'genres', 'year'}, default ('genres', 'year')
        Families to build, in the order returned.
    year_buckets : {'year', 'decade'}, default 'year'
        One value per year (``"1995"``) or per decade (``"1990s"``).
    min_count : int, default 1
        Drop values held by fewer than ``min_count`` items of the code book; range [1, inf).

    Returns
    -------
    list of SparseFeatures
        One per family, named ``"genres"`` and ``"year"``, each of shape
        ``(len(item_labels), n_values)`` with weights 1.0. Values are sorted (genres by name,
        years and decades by number). "(no genres listed)" and empty genres give no value; a
        null year gives an all-zero row.

    Raises
    ------
    DataError
        If a needed column is missing or of the wrong type, ``item`` has nulls or repeats, or
        ``item_labels`` repeats an id or cannot be compared with ``item``.
    InvalidParameterError
        If ``families``, ``year_buckets`` or ``min_count`` is out of range.

    Privacy
    -------
    The matrices are a function of ``table`` and ``item_labels`` only, so they are public when
    both are (Section 2.1 in v1: X_pub is public, which row a user's example reads is not).
    ``min_count`` counts items, not users. A code book taken from private ratings (the movies
    someone rated) is itself data-dependent; pass the catalogue's ids where that matters.

    Examples
    --------
    >>> t = pa.table({"item": [10, 20], "genres": [["Drama", "Comedy"], []], "year": [1995, None]})
    >>> genres, year = item_features(t, pa.array([20, 10, 30]))
    >>> genres.values, genres.matrix.toarray().tolist()
    (['Comedy', 'Drama'], [[0.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
    >>> year.values, year.matrix.toarray().tolist()
    (['1995'], [[0.0], [1.0], [0.0]])
    """
    caller = "item_features"
    families = _check_families(families, _ITEM_FAMILIES, caller)
    check_choice(year_buckets, "year_buckets", caller, list(_YEAR_BUCKETS))
    min_count = check_int(min_count, "min_count", caller, low=1)
    _require_columns(table, ["item", *families], "The movie table", caller)
    labels = _as_array(item_labels, "item_labels", caller)
    ids = _key_column(table, "item", "The movie table", unique=True)
    codes = _rows_of(ids, labels, "item", "item code book (item_labels)")
    n = len(labels)
    out = []
    for family in families:
        if family == "genres":
            out.append(_genres(table, codes, n, min_count))
        else:
            out.append(_years(table, codes, n, year_buckets, min_count))
    return out


def tag_features(
    tags: pa.Table,
    item_labels: Any,
    *,
    min_count: int = 2,
    lowercase: bool = True,
    public: bool = False,
) -> SparseFeatures:
    """Bag of tags per item with repetition counts, row-aligned to a code book.

    Each tag application (one user writing one tag on one item) adds 1 to the item's weight for
    that tag, as Appendix E.1 (in v1) of https://arxiv.org/abs/2310.15454 counts repetitions
    of multivalent features. Tags are trimmed (and lowercased by default); empty ones are
    dropped, as are tags applied fewer than ``min_count`` times in all to items of the code
    book.

    Parameters
    ----------
    tags : pyarrow.Table
        Tag applications with columns ``item`` (ids of ``item_labels``) and ``tag`` (str), as
        returned by :func:`~userdp.data.movielens.load_tags`; other columns are ignored.
    item_labels : pyarrow.Array or array-like
        The model's item code book; row ``c`` describes item ``item_labels[c]``.
    min_count : int, default 2
        Minimum number of applications of a tag; range [1, inf).
    lowercase : bool, default True
        Merge tags that differ only in case (``"Pixar"`` and ``"pixar"``).
    public : bool, default False
        Must be True: the caller's acknowledgement that it treats the aggregated tags as public
        (see Privacy).

    Returns
    -------
    SparseFeatures
        Named ``"tags"``, shape ``(len(item_labels), n_tags)``, values sorted.

    Raises
    ------
    InvalidParameterError
        If ``public`` is not True, or ``min_count`` or ``lowercase`` is out of range.
    DataError
        If a column is missing or ``item_labels`` repeats an id or cannot be compared with
        ``item``.

    Privacy
    -------
    Tags are written by users, so a tag table is **not** public in general: who tagged what
    reveals what a user watched, and every count and every rare tag in the result depends on
    individual users. Under add/remove-one-user neighbours these features are not covered by
    the guarantee of a model trained on them, and ``min_count`` is a filter, not a DP
    mechanism. Treating them as public item features is the caller's choice, sound when the
    aggregated tags are already published independently of the private data, as GroupLens
    publishes MovieLens's tags. ``public=True`` records that choice.
    """
    caller = "tag_features"
    if public is not True:
        raise InvalidParameterError(
            "tag_features needs public=True: tags are written by users, so who tagged what is "
            "private in general. Pass public=True only if the aggregated tags may be treated as "
            "public item features (for example MovieLens tags, published by GroupLens)."
        )
    min_count = check_int(min_count, "min_count", caller, low=1)
    if not isinstance(lowercase, bool):
        raise InvalidParameterError(
            f"The 'lowercase' parameter of {caller} must be a bool. Got {lowercase!r} instead."
        )
    if not isinstance(tags, pa.Table):
        raise InvalidParameterError(
            f"The 'tags' parameter of {caller} must be a pyarrow.Table. Got "
            f"{type(tags).__name__} instead."
        )
    _require_columns(tags, ["item", "tag"], "The tag table", caller)
    labels = _as_array(item_labels, "item_labels", caller)
    ids = _key_column(tags, "item", "The tag table", unique=False)
    codes = _rows_of(ids, labels, "item", "item code book (item_labels)")
    text = pc.utf8_trim_whitespace(tags.column("tag").combine_chunks().cast(pa.string()))
    if lowercase:
        text = pc.utf8_lower(text)
    codes[pc.fill_null(pc.equal(text, ""), True).to_numpy(zero_copy_only=False)] = -1
    return _bag("tags", codes, text, len(labels), min_count=min_count)


def genome_features(
    genome: pa.Table, item_labels: Any, *, min_relevance: float = 0.5, public: bool = False
) -> SparseFeatures:
    """The MovieLens Tag Genome as a weighted bag of tags per item, row-aligned to a code book.

    Each (item, tag) score of at least ``min_relevance`` becomes that tag's weight for the item
    (the encoder averages a multivalent family by these weights); lower scores are dropped,
    which keeps the matrix sparse (the genome scores all 1,128 tags for every movie).

    Parameters
    ----------
    genome : pyarrow.Table
        Columns ``item``, ``tag`` and ``relevance``, as returned by
        :func:`~userdp.data.movielens.load_genome`.
    item_labels : pyarrow.Array or array-like
        The model's item code book; row ``c`` describes item ``item_labels[c]``.
    min_relevance : float, default 0.5
        Smallest relevance kept, in (0, 1].
    public : bool, default False
        Must be True, as for :func:`tag_features`: the genome is computed from users' tags,
        ratings and reviews.

    Returns
    -------
    SparseFeatures
        Named ``"genome"``, shape ``(len(item_labels), n_tags)`` (tags kept somewhere), values
        sorted.

    Privacy
    -------
    As for :func:`tag_features`: GroupLens derived the genome from user data and publishes it;
    treating it as public item features is the caller's choice, recorded by ``public=True``.
    """
    caller = "genome_features"
    if public is not True:
        raise InvalidParameterError(
            "genome_features needs public=True: the Tag Genome is computed from users' tags, "
            "ratings and reviews. Pass public=True only if it may be treated as public item "
            "features (GroupLens publishes it)."
        )
    low = check_real(min_relevance, "min_relevance", caller, low=0.0, high=1.0, low_open=True)
    if not isinstance(genome, pa.Table):
        raise InvalidParameterError(
            f"The 'genome' parameter of {caller} must be a pyarrow.Table. Got "
            f"{type(genome).__name__} instead."
        )
    _require_columns(genome, ["item", "tag", "relevance"], "The genome table", caller)
    labels = _as_array(item_labels, "item_labels", caller)
    ids = _key_column(genome, "item", "The genome table", unique=False)
    codes = _rows_of(ids, labels, "item", "item code book (item_labels)")
    relevance = genome.column("relevance").to_numpy().astype(np.float64, copy=False)
    keep = (codes >= 0) & (relevance >= low)
    tags = genome.column("tag").combine_chunks().filter(pa.array(keep))
    vocab = pc.unique(tags)
    vocab = vocab.take(pc.array_sort_indices(vocab))
    cols = pc.index_in(tags, value_set=vocab).to_numpy(zero_copy_only=False).astype(np.int64)
    matrix = sp.coo_matrix(
        (relevance[keep], (codes[keep], cols)), shape=(len(labels), len(vocab))
    ).tocsr()
    matrix.sum_duplicates()
    matrix.sort_indices()
    return SparseFeatures("genome", matrix, vocab.to_pylist())


def movielens_item_features(
    source: str | os.PathLike[str],
    item_labels: Any,
    *,
    name: str | None = None,
    families: Sequence[str] = ("genres", "year"),
    year_buckets: str = "year",
    min_count: int = 1,
    tags: bool = False,
    tag_min_count: int = 2,
    genome: bool = False,
    genome_min_relevance: float = 0.5,
) -> list[SparseFeatures]:
    """Public item features of a MovieLens version: :func:`item_features` on its movies.

    Every version has genres (ml-100k from its 0/1 flags, including its ``"unknown"`` flag) and
    a year in most titles. ml-10m, ml-20m, ml-latest and ml-latest-small also have tags.

    Parameters
    ----------
    source : str or path-like
        As for :func:`~userdp.data.movielens.load_movielens`.
    item_labels : pyarrow.Array or array-like
        The model's item code book (MovieLens movie ids), e.g. ``Ratings.item_labels``.
    name : str, optional
        Version name; inferred from the folder or zip name when omitted.
    families, year_buckets, min_count
        As for :func:`item_features`.
    tags : bool, default False
        Append :func:`tag_features` (family ``"tags"``). Passing True is the acknowledgement
        that ``public=True`` gives :func:`tag_features`: read its Privacy section.
    tag_min_count : int, default 2
        ``min_count`` of :func:`tag_features`.
    genome : bool, default False
        Append :func:`genome_features` (family ``"genome"``; ml-20m and ml-latest). True
        acknowledges ``public=True`` as for ``tags``.
    genome_min_relevance : float, default 0.5
        ``min_relevance`` of :func:`genome_features`.

    Returns
    -------
    list of SparseFeatures
        The families in order, then ``"tags"`` and ``"genome"`` when asked for.

    Raises
    ------
    DataError
        If a file is missing or malformed, or ``tags=True`` for a version without tags.
    InvalidParameterError
        If a parameter is out of range, or ``name`` is unknown or cannot be inferred.
    """
    caller = "movielens_item_features"
    for flag, value in (("tags", tags), ("genome", genome)):
        if not isinstance(value, bool):
            raise InvalidParameterError(
                f"The {flag!r} parameter of {caller} must be a bool. Got {value!r} instead."
            )
    features = item_features(
        load_movies(source, name),
        item_labels,
        families=families,
        year_buckets=year_buckets,
        min_count=min_count,
    )
    if tags:
        table = load_tags(source, name)
        if table is None:
            raise DataError(
                f"{os.fspath(source)!r} has no tags file; only ml-10m, ml-20m, ml-latest and "
                "ml-latest-small have tags. Pass tags=False."
            )
        features.append(tag_features(table, item_labels, min_count=tag_min_count, public=True))
    if genome:
        scores = load_genome(source, name)
        if scores is None:
            raise DataError(
                f"{os.fspath(source)!r} has no Tag Genome (genome-scores.csv and "
                "genome-tags.csv); only ml-20m and ml-latest have one. Pass genome=False."
            )
        features.append(
            genome_features(scores, item_labels, min_relevance=genome_min_relevance, public=True)
        )
    return features


def movielens_user_features(
    source: str | os.PathLike[str], user_labels: Any, *, name: str | None = None
) -> list[SparseFeatures]:
    """Private user features of ml-100k or ml-1m: one-hot age bucket, gender and occupation.

    For a private-feature user encoder. The vocabularies are fixed by the version's README, not
    read from the data: ages in the seven ml-1m buckets (ml-100k ages in years are bucketed
    into them: under 18, 18-24, 25-34, 35-44, 45-49, 50-55, 56+), genders F and M, and the 21
    occupations of the version.

    Parameters
    ----------
    source : str or path-like
        As for :func:`~userdp.data.movielens.load_users`.
    user_labels : pyarrow.Array or array-like
        The model's user code book (MovieLens user ids), e.g. ``Ratings.user_labels``; row
        ``c`` describes user ``user_labels[c]``; users missing from the file get zero rows.
    name : str, optional
        ``'ml-100k'`` or ``'ml-1m'``; inferred from the folder or zip name when omitted.

    Returns
    -------
    list of SparseFeatures
        ``"age"`` (7 values), ``"gender"`` (2) and ``"occupation"`` (21), each of shape
        ``(len(user_labels), n_values)`` with one 1.0 per known user.

    Raises
    ------
    DataError
        If the version has no user file, the file is malformed, or a value is outside the
        README's vocabulary.
    InvalidParameterError
        If ``name`` is unknown or cannot be inferred.

    Privacy
    -------
    These are **private** features (x_priv of Section 2.1 in v1 of
    https://arxiv.org/abs/2310.15454): age, gender and occupation describe the users whose
    data are protected, so anything trained on them must account for them like the ratings
    (add/remove one user changes that user's row). Never pass them where public item features
    are expected. The fixed vocabularies keep the dimensions independent of the data.
    """
    caller = "movielens_user_features"
    users = load_users(source, name)
    labels = _as_array(user_labels, "user_labels", caller)
    ids = _key_column(users, "user", "The users file", unique=True)
    codes = _rows_of(ids, labels, "user", "user code book (user_labels)")
    n = len(labels)
    spec = MOVIELENS[name] if name is not None else movielens_version(source)
    occupations = (
        _OCCUPATIONS_1M if spec is not None and spec.name == "ml-1m" else _OCCUPATIONS_100K
    )
    # ml-100k ages in years fall in the ml-1m buckets [1, 18), [18, 25), ...; ml-1m's age codes
    # (1, 18, 25, ...) are the buckets' lower ends, so both map the same way.
    age = users.column("age").to_numpy()
    bucket = np.maximum(np.searchsorted(_AGE_CODES, age, side="right") - 1, 0)  # 24 -> 18-24
    ages = pa.array(np.asarray(_AGE_NAMES, dtype=object)[bucket], pa.string())
    return [
        _bag("age", codes, ages, n, vocabulary=_AGE_NAMES, where="The users file, 'age'"),
        _bag(
            "gender",
            codes,
            users.column("gender").combine_chunks(),
            n,
            vocabulary=_GENDERS,
            where="The users file, 'gender'",
        ),
        _bag(
            "occupation",
            codes,
            users.column("occupation").combine_chunks(),
            n,
            vocabulary=occupations,
            where="The users file, 'occupation'",
        ),
    ]
