"""The one container of feature values per code: :class:`SparseFeatures`, and its builders.

A feature family is a nonnegative sparse matrix whose row ``c`` describes code ``c`` of a code
book (``Ratings.item_labels`` for item features, ``Ratings.user_labels`` for user features).
The readers of :mod:`userdp.data.features` build them; the recommender's encoders embed them
(``userdp.recommend.FeatureFamily`` is this class). The helpers below turn (row, token) pairs
into such matrices.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import scipy.sparse as sp

from userdp._validation import check_choice
from userdp.exceptions import DataError, InvalidParameterError

__all__ = ["SparseFeatures"]


@dataclass(frozen=True, eq=False, repr=False)
class SparseFeatures:
    """One feature family: a nonnegative sparse matrix whose row ``c`` describes code ``c``.

    The one container of per-item (or per-user) feature values: the readers of
    :mod:`userdp.data.features` return it and the encoders of :mod:`userdp.recommend` embed it
    (``userdp.recommend.FeatureFamily`` is another name for this class).

    Parameters
    ----------
    name : str
        Non-empty family name, e.g. ``"genres"``, ``"year"``, ``"tags"``, ``"age"``; unique
        within an encoder, where it names the parameter block ``"embedding/<name>"``.
    matrix : scipy sparse matrix or 2-D ndarray, shape (n_rows, n_values)
        Weights: 1.0 for a one-hot or multi-hot value, the number of repetitions for a bag of
        words (Appendix E.1 in v1 of https://arxiv.org/abs/2310.15454). An all-zero row means
        "no value" (unknown item, missing year, ...). Stored as a canonical float64
        ``csr_matrix`` copy (duplicates summed, explicit zeros dropped, indices sorted).
    values : sequence of str, optional
        ``values[k]`` names column ``k`` (``"Comedy"``, ``"1995"``, ``"1990s"``, ``"pixar"``);
        the column numbers ``"0"``, ``"1"``, ... when omitted.

    Attributes
    ----------
    name : str
    matrix : scipy.sparse.csr_matrix of float64, shape (n_rows, n_values)
    values : list of str

    Raises
    ------
    InvalidParameterError
        If ``name`` is not a non-empty str, ``matrix`` is not a 2-D matrix of real weights, or
        ``values`` does not name each column once.
    DataError
        If a weight is negative or non-finite (the row and column are named), or the matrix has
        no rows.

    Examples
    --------
    >>> f = SparseFeatures("genres", np.array([[1, 1], [0, 0]]), ["Comedy", "Drama"])
    >>> f
    SparseFeatures(name='genres', n_rows=2, n_values=2, nnz=2)
    """

    name: str
    matrix: sp.csr_matrix
    values: Sequence[str] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidParameterError(
                f"The 'name' parameter of SparseFeatures must be a non-empty str. Got "
                f"{self.name!r} instead."
            )
        m = self.matrix
        if not sp.issparse(m) and not isinstance(m, np.ndarray):
            raise InvalidParameterError(
                "The 'matrix' parameter of SparseFeatures must be a scipy sparse matrix or a "
                f"2-D ndarray. Got {type(m).__name__} instead."
            )
        if m.ndim != 2:
            raise InvalidParameterError(
                "The 'matrix' parameter of SparseFeatures must be 2-D (n_rows, n_values). Got "
                f"shape {m.shape!r} instead."
            )
        try:
            csr = sp.csr_matrix(m, dtype=np.float64, copy=True)
        except (TypeError, ValueError) as err:
            raise InvalidParameterError(
                "The 'matrix' parameter of SparseFeatures must hold real weights. Got dtype "
                f"{m.dtype} instead."
            ) from err
        csr.sum_duplicates()
        if csr.shape[0] == 0:
            raise DataError(
                f"Feature family {self.name!r} has shape {csr.shape!r}; it needs at least one "
                "row (one per code of the code book)."
            )
        bad = np.flatnonzero(~np.isfinite(csr.data) | (csr.data < 0))
        if bad.size:
            k = int(bad[0])
            row = int(np.searchsorted(csr.indptr, k, side="right") - 1)
            raise DataError(
                f"Feature family {self.name!r} has weight {float(csr.data[k])!r} at row {row}, "
                f"column {int(csr.indices[k])}; weights must be finite and >= 0 (counts or "
                "one-hot)."
            )
        csr.eliminate_zeros()
        csr.sort_indices()
        values = [str(k) for k in range(csr.shape[1])] if self.values is None else self.values
        if isinstance(values, str) or len(values) != csr.shape[1]:
            raise InvalidParameterError(
                f"SparseFeatures {self.name!r} has {csr.shape[1]} columns but "
                f"{len(values)} values; name each column once."
            )
        object.__setattr__(self, "matrix", csr)
        object.__setattr__(self, "values", list(values))

    @property
    def shape(self) -> tuple[int, int]:
        """(n_rows, n_values)."""
        return self.matrix.shape

    @property
    def n_items(self) -> int:
        """Number of rows: item codes (user codes for user features)."""
        return int(self.matrix.shape[0])

    @property
    def n_values(self) -> int:
        """Number of feature values (columns; embedding rows in an encoder)."""
        return int(self.matrix.shape[1])

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
    weights: np.ndarray | None = None,
) -> SparseFeatures:
    """Sum ``weights`` (default 1.0) per (row, col) pair into a CSR matrix, dropping columns
    held by fewer than ``min_count`` pairs."""
    if min_count > 1:
        # Column sums: the number of items holding a value (or of a tag's applications).
        kept = np.bincount(cols, minlength=len(values)) >= min_count
        new = np.cumsum(kept) - 1
        sel = kept[cols]
        rows, cols = rows[sel], new[cols[sel]]
        weights = None if weights is None else weights[sel]
        values = [v for v, k in zip(values, kept, strict=True) if k]
    if weights is None:
        weights = np.ones(rows.size, dtype=np.float64)
    # The container sums repeated (row, value) pairs: a bag of words counts repetitions.
    matrix = sp.coo_matrix((weights, (rows, cols)), shape=(n_rows, len(values)))
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
    weights: np.ndarray | None = None,
) -> SparseFeatures:
    """Counts (or summed ``weights``) of string ``tokens[i]`` in row ``codes[i]`` (rows < 0 and
    null tokens dropped).

    Without ``vocabulary`` the columns are the distinct tokens, sorted, of total weight at least
    ``min_count``; with it they are exactly ``vocabulary`` (another token is a DataError naming
    ``where``).
    """
    keep = codes >= 0
    if tokens.null_count:
        keep &= pc.is_valid(tokens).to_numpy(zero_copy_only=False)
    rows = codes[keep]
    weights = None if weights is None else weights[keep]
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
    return _matrix(name, rows, cols, vocab.to_pylist(), n_rows, min_count, weights)


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
