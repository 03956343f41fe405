"""Public item features of a movie catalogue: genres, release year, tags and the Tag Genome."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from userdp._validation import check_choice, check_int, check_real
from userdp.data.features.container import (
    SparseFeatures,
    _as_array,
    _bag,
    _check_families,
    _key_column,
    _matrix,
    _require_columns,
    _rows_of,
)
from userdp.data.movielens.loaders import _NO_GENRES
from userdp.exceptions import DataError, InvalidParameterError

__all__ = ["genome_features", "item_features", "tag_features"]

_ITEM_FAMILIES = ("genres", "year")
_YEAR_BUCKETS = ("year", "decade")


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
    codes[relevance < low] = -1
    tags = genome.column("tag").combine_chunks()
    return _bag("genome", codes, tags, len(labels), weights=relevance)
