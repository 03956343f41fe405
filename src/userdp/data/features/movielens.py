"""MovieLens features: the public item features of a version and the private demographics."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from userdp.data.features.container import SparseFeatures, _as_array, _bag, _key_column, _rows_of
from userdp.data.features.items import genome_features, item_features, tag_features
from userdp.data.movielens import (
    MOVIELENS,
    load_genome,
    load_movies,
    load_tags,
    load_users,
    movielens_version,
)
from userdp.data.movielens.loaders import _OCCUPATIONS_1M
from userdp.exceptions import DataError, InvalidParameterError

__all__ = ["movielens_item_features", "movielens_user_features"]

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
    columns = {
        "age": (pa.array(np.asarray(_AGE_NAMES, dtype=object)[bucket], pa.string()), _AGE_NAMES),
        "gender": (users.column("gender").combine_chunks(), _GENDERS),
        "occupation": (users.column("occupation").combine_chunks(), occupations),
    }
    return [
        _bag(family, codes, column, n, vocabulary=vocab, where=f"The users file, {family!r}")
        for family, (column, vocab) in columns.items()
    ]
