"""Ids to dense codes: the one encoder of user and item ids (and of estimate's users).

Columns of ids of any hashable type (NumPy, PyArrow, pandas, Python lists) are checked once
(:func:`to_arrow`: no nulls, NaN, empty strings, nested values or mixed types; Python integers
beyond int64 kept exactly as their decimal strings) and factorized by :func:`encode_ids` into
dense ``int32`` codes plus a code book, either in order of first appearance (one PyArrow hash
pass: the tables of :mod:`userdp.data`) or in sorted order (MovieLens ids, estimate's users).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from userdp.data._arrow_types import plain_arrow
from userdp.exceptions import DataError, InvalidParameterError

__all__ = ["ORDERS", "check_codes", "check_column_roles", "encode_ids", "to_arrow"]

ORDERS = ("appearance", "sorted")
_MAX_CODE = np.iinfo(np.int32).max

_INT64 = (-(2**63), 2**63 - 1)


def _exact_ints(seq: list[Any]) -> list[Any] | None:
    """Python ints beyond int64 as their exact decimal strings (None if there are none)."""
    big = any(
        isinstance(v, int) and not isinstance(v, bool) and not _INT64[0] <= v <= _INT64[1]
        for v in seq
    )
    if not big:
        return None
    return [str(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in seq]


def _first_odd_type(seq: Any) -> int | None:
    """Index of the first element whose Python type differs from the first element's."""
    try:
        kinds = (type(v) for v in seq)
        first = next(kinds)
    except (TypeError, StopIteration):
        return None
    for k, kind in enumerate(kinds, start=1):
        if kind is not first:
            return k
    return None


def _from_python(values: Any, column: str) -> pa.ChunkedArray:
    seq = values if isinstance(values, np.ndarray) else list(values)
    try:
        return pa.chunked_array([pa.array(seq)])
    except OverflowError:
        exact = _exact_ints(list(seq))  # 20-digit ids: keep them exactly, as strings
        if exact is None:
            raise
        return pa.chunked_array([pa.array(exact)])
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as err:
        row = _first_odd_type(seq)
        where = f" (first at row {row})" if row is not None else ""
        raise DataError(
            f"Column {column!r} cannot be read as one typed column: it mixes value "
            f"types{where}; ids must all be strings or all integers (rerun with --debug to "
            "see the value)."
        ) from err


def to_arrow(values: Any, column: str) -> pa.ChunkedArray:
    """Convert a column-like object to a non-null PyArrow chunked array, naming ``column``.

    Chunks are kept as they are (no copy into one buffer); dictionary columns are decoded.
    Python integers beyond int64 become their exact decimal strings. Nested values (lists,
    structs), nulls, NaN and empty strings are refused with the column and the first row,
    never the value itself.
    """
    try:
        if isinstance(values, pa.ChunkedArray):
            arr = values
        elif isinstance(values, pa.Array):
            arr = pa.chunked_array([values])
        elif (
            hasattr(values, "to_numpy")
            and hasattr(values, "dtype")
            and not isinstance(values, np.ndarray)
        ):  # pandas Series / Index
            arr = pa.chunked_array([pa.Array.from_pandas(values)])
        else:
            arr = _from_python(values, column)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as err:
        raise DataError(
            f"Column {column!r} cannot be read as one typed column of ids ({type(err).__name__}; "
            "rerun with --debug for details)."
        ) from err
    arr = plain_arrow(arr)  # dictionaries decoded; Polars' string views as large strings
    if pa.types.is_nested(arr.type):
        raise DataError(
            f"Column {column!r} holds {arr.type} values; ids must be scalars (strings or "
            "integers). Explode or join the lists first."
        )
    if arr.null_count:
        first = pc.index(pc.is_null(arr), True).as_py()
        raise DataError(
            f"Column {column!r} has {arr.null_count} null value(s) (first at row {first}); "
            "drop or fill them before selecting."
        )
    if pa.types.is_floating(arr.type):
        nan = pc.is_nan(arr)
        if pc.any(nan).as_py():
            first = pc.index(nan, True).as_py()
            raise DataError(f"Column {column!r} has NaN values (first at row {first}).")
    if (
        pa.types.is_string(arr.type)
        or pa.types.is_large_string(arr.type)
        or (pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type))
    ):
        empty = pc.equal(pc.binary_length(arr), 0)
        if pc.any(empty).as_py():
            first = pc.index(empty, True).as_py()
            raise DataError(
                f"Column {column!r} has an empty value (first at row {first}); an empty id "
                "names no user or item. Drop or fill those rows."
            )
    return arr


def _hash_encode(arr: pa.ChunkedArray) -> tuple[np.ndarray, pa.Array]:
    """Integer codes and code book of a column, by one hash pass over all chunks."""
    enc = arr.dictionary_encode()  # callers reject empty columns, so there is a chunk
    dictionary = enc.chunk(enc.num_chunks - 1).dictionary
    if any(len(c.dictionary) != len(dictionary) for c in enc.chunks):
        # Chunks carry different dictionaries: encode one contiguous copy instead.
        enc = pa.chunked_array([arr.combine_chunks().dictionary_encode()])
        dictionary = enc.chunk(0).dictionary
    codes = np.concatenate([c.indices.to_numpy(zero_copy_only=False) for c in enc.chunks])
    return codes.astype(np.int32, copy=False), dictionary


def _sorted_numeric(ids: np.ndarray, column: str) -> tuple[np.ndarray, np.ndarray]:
    """int32 codes and sorted labels of a numeric array (a lookup table when ids are compact)."""
    if ids.dtype.kind == "f" and np.isnan(ids).any():
        first = int(np.flatnonzero(np.isnan(ids))[0])
        raise DataError(f"Column {column!r} has NaN values (first at row {first}).")
    if ids.dtype.kind in "iu":
        lo, hi = int(ids.min()), int(ids.max())
        if lo >= 0 and hi < max(4 * ids.size, 1 << 20):
            present = np.zeros(hi + 1, dtype=bool)
            present[ids] = True
            lookup = np.cumsum(present, dtype=np.int32) - 1
            return lookup[ids], np.flatnonzero(present).astype(np.int64)
    labels, codes = np.unique(ids, return_inverse=True)
    if np.can_cast(labels.dtype, np.int64):
        labels = labels.astype(np.int64)
    return codes.astype(np.int32).reshape(-1), labels


def encode_ids(
    ids: Any, column: str = "id", *, order: str = "appearance"
) -> tuple[np.ndarray, pa.Array]:
    """Dense codes of a column of ids and its code book: the one id encoder of userdp.

    Parameters
    ----------
    ids : array-like, shape (n,)
        Ids of one type: NumPy, PyArrow (chunked or not, dictionary columns decoded), pandas or
        a Python sequence. Checked by :func:`to_arrow` unless numeric NumPy.
    column : str, default 'id'
        Name of the column in error messages (``'user'``, ``'item'``).
    order : {'appearance', 'sorted'}, default 'appearance'
        ``'appearance'``: code ``c`` is the ``c``-th distinct id in input order (one hash pass,
        chunks kept). ``'sorted'``: code ``c`` is the ``c``-th smallest id (numeric order for
        numbers, byte order for strings), by a lookup table when integer ids are compact.

    Returns
    -------
    codes : ndarray of int32, shape (n,)
        ``labels[codes[k]]`` is ``ids[k]``.
    labels : pyarrow.Array
        The distinct ids (integers of NumPy input as int64), each once.

    Raises
    ------
    DataError
        If an id is null, NaN or an empty string, ids mix types, or a value is nested.
    InvalidParameterError
        If ``order`` is not one of ``ORDERS``.

    Examples
    --------
    >>> codes, labels = encode_ids(["b", "a", "b"])
    >>> codes.tolist(), labels.to_pylist()
    ([0, 1, 0], ['b', 'a'])
    >>> codes, labels = encode_ids(["b", "a", "b"], order="sorted")
    >>> codes.tolist(), labels.to_pylist()
    ([1, 0, 1], ['a', 'b'])
    """
    if order not in ORDERS:
        raise InvalidParameterError(
            f"The 'order' parameter of encode_ids must be a str among {list(ORDERS)!r}. Got "
            f"{order!r} instead."
        )
    if order == "sorted" and isinstance(ids, np.ndarray) and ids.dtype.kind in "biuf":
        if ids.size == 0:
            return np.zeros(0, dtype=np.int32), pa.array(ids)
        codes, labels = _sorted_numeric(ids.reshape(-1), column)
        return codes, pa.array(labels)
    arr = to_arrow(ids, column)
    if len(arr) == 0:
        return np.zeros(0, dtype=np.int32), pa.array([], type=arr.type)
    codes, labels = _hash_encode(arr)
    if order == "sorted":
        perm = pc.array_sort_indices(labels).to_numpy()
        rank = np.empty(perm.size, dtype=np.int32)
        rank[perm] = np.arange(perm.size, dtype=np.int32)
        codes, labels = rank[codes], labels.take(pa.array(perm))
    return codes, labels


def _run_starts(sorted_values: np.ndarray) -> np.ndarray:
    """Boolean mask of the first element of each run of equal values in a sorted array."""
    first = np.empty(sorted_values.size, dtype=bool)
    first[0] = True
    np.not_equal(sorted_values[1:], sorted_values[:-1], out=first[1:])
    return first


def check_codes(
    users: Any, items: Any, n_users: int | None, n_items: int | None, cls: str, what: str
) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Validate integer code columns; returns them as arrays with the code-book sizes.

    Shared by the ``from_codes`` constructors: one-dimensional, integer, equal length, codes in
    ``[0, 2^31 - 1]`` and below ``n_users`` / ``n_items`` (default: the largest code + 1).
    """
    u = np.asarray(users)
    i = np.asarray(items)
    if u.size == 0 and i.size == 0:
        raise DataError(f"The input has no {what}.")
    for name, a in (("user", u), ("item", i)):
        if a.ndim != 1:
            raise DataError(f"Column {name!r} must be one-dimensional; got shape {a.shape}.")
        if not np.issubdtype(a.dtype, np.integer):
            raise DataError(
                f"Column {name!r} must hold integer codes for from_codes; got dtype "
                f"{a.dtype}. Use {cls}.from_columns for other types."
            )
    if u.shape != i.shape:
        raise DataError(
            f"Columns 'user' and 'item' must have the same length; got {u.size} and {i.size}."
        )
    for name, a in (("user", u), ("item", i)):
        if a.min() < 0 or a.max() > _MAX_CODE:
            raise DataError(
                f"Column {name!r} codes must lie in [0, {_MAX_CODE}]; got [{a.min()}, {a.max()}]."
            )
    nu = int(u.max()) + 1 if n_users is None else int(n_users)
    ni = int(i.max()) + 1 if n_items is None else int(n_items)
    if nu <= u.max() or ni <= i.max():
        raise DataError(
            f"n_users={nu} / n_items={ni} are smaller than the largest codes "
            f"({u.max()}, {i.max()})."
        )
    return u, i, nu, ni


def check_column_roles(roles: Mapping[str, str | Sequence[str]]) -> None:
    """Refuse a column that plays two roles, e.g. the user column also given as the item.

    ``roles`` maps a role (``"user column"`` or a CLI flag ``"--user-column"``) to a column
    name or a sequence of names. Reading one column as both the privacy unit and the released
    item (or a private label as a public feature) would silently break the guarantee.

    Examples
    --------
    >>> check_column_roles({"user column": "uid", "item column": "query"})  # distinct: fine
    """
    seen: dict[str, str] = {}
    for role, names in roles.items():
        for name in [names] if isinstance(names, str) else list(names):
            if name in seen:
                first = seen[name]
                both = f"both the {first}" if first != role else f"the {role} twice"
                raise InvalidParameterError(
                    f"The column {name!r} is given as {both}"
                    f"{'' if first == role else f' and the {role}'}; each column plays one "
                    "role only."
                )
            seen[name] = role
