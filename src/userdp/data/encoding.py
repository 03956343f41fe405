"""Ids to dense codes: the one encoder of user and item ids (and of estimate's users).

Columns of ids of any hashable type (NumPy, PyArrow, pandas, Python lists) are checked once
(:func:`to_arrow`: no nulls, NaN, empty strings, nested values or mixed types; Python integers
beyond int64 kept exactly as their decimal strings) and factorized by :func:`encode_ids` into
dense ``int32`` codes plus a code book, either in order of first appearance (the tables of
:mod:`userdp.data`) or in sorted order (MovieLens ids, estimate's users).

Order of first appearance is computed without hashing where it can be: integer ids by a table
over their range or by one sort of (id, row) packed in 64 bits, dictionary columns by the
codes of their indices; other ids (strings, floats, ids too spread out to pack) by one PyArrow
hash pass. Every method gives the same codes and code book.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from userdp.data._arrow_types import _plain_type, plain_arrow
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


def to_arrow(values: Any, column: str, *, keep_dictionary: bool = False) -> pa.ChunkedArray:
    """Convert a column-like object to a non-null PyArrow chunked array, naming ``column``.

    Chunks are kept as they are (no copy into one buffer); dictionary columns are decoded,
    unless ``keep_dictionary`` and their dictionaries hold only valid ids of a string, binary
    or integer type (then :func:`encode_ids` encodes the indices instead of the values).
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
    if (
        keep_dictionary
        and pa.types.is_dictionary(arr.type)
        and _plain_type(arr.type.value_type) == arr.type.value_type  # no view types inside
        and _clean_dictionary(arr)
    ):
        return arr  # encoded by its indices (no hash pass)
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
    if _is_text(arr.type):
        empty = pc.equal(pc.binary_length(arr), 0)
        if pc.any(empty).as_py():
            first = pc.index(empty, True).as_py()
            raise DataError(
                f"Column {column!r} has an empty value (first at row {first}); an empty id "
                "names no user or item. Drop or fill those rows."
            )
    return arr


def _is_text(t: pa.DataType) -> bool:
    return (
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
    )


def _dictionaries(arr: pa.ChunkedArray) -> list[pa.Array]:
    """The distinct dictionaries of a dictionary column's chunks (chunks read from one file
    often repeat one dictionary: compared by buffer first, then by value)."""
    seen: dict[tuple[Any, ...], pa.Array] = {}
    for chunk in arr.chunks:
        d = chunk.dictionary
        ident = (len(d), d.offset, *(b.address if b is not None else 0 for b in d.buffers()))
        if ident not in seen and not any(len(o) == len(d) and o.equals(d) for o in seen.values()):
            seen[ident] = d
    return list(seen.values())


def _clean_dictionary(arr: pa.ChunkedArray) -> bool:
    """Whether a dictionary column has no null index and only valid ids in its dictionaries
    (no null, no empty string; strings, binary or integers): then its indices can be encoded
    in place of its values. Anything else is decoded, and :func:`to_arrow` names the bad row."""
    t = arr.type.value_type
    if arr.null_count or not (_is_text(t) or pa.types.is_integer(t)):
        return False
    for d in _dictionaries(arr):
        if d.null_count:
            return False
        if _is_text(t) and len(d) and pc.any(pc.equal(pc.binary_length(d), 0)).as_py():
            return False
    return True


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


def _first_rows(off: np.ndarray, size: int) -> np.ndarray:
    """Row of the first occurrence of each offset ``0..size-1`` (``off.size`` where absent)."""
    n = off.size
    row_type = np.int32 if n < _MAX_CODE else np.int64
    first = np.full(size, n, dtype=row_type)
    np.minimum.at(first, off, np.arange(n, dtype=row_type))
    return first


def _integer_codes(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Codes in order of first appearance of a non-empty integer array, without hashing.

    Returns ``(codes, distinct)`` with ``distinct[codes[k]] == ids[k]`` and ``distinct`` in
    order of first appearance (what a hash pass gives), or None when the ids are too spread out
    for either method below (the caller then hashes). Compact ids (range at most about the row
    count) go through a table over the range: first rows by ``np.minimum.at``, one gather.
    Other ids are offset, packed with their row number into one uint64 and sorted once: equal
    ids become runs in row order, so each run's first element is the id's first row.
    """
    n = ids.size
    lo, hi = ids.min(), ids.max()
    compact = n + (1 << 20)
    if 0 <= lo and int(hi) < compact and ids.dtype.itemsize == 8:
        lo = ids.dtype.type(0)  # small non-negative ids are their own offsets: no copy
        off = ids.view(np.int64)
    else:
        # Offsets id - lo in [0, span), modulo 2^64: exact for every integer dtype, and an
        # int64 index (no conversion when indexing) whenever span < 2^63.
        lo_64 = np.uint64(int(lo) % (1 << 64)).view(np.int64)
        off = np.subtract(ids, lo_64, dtype=np.int64, casting="unsafe")
    span = int(hi) - int(lo) + 1
    if span <= compact:
        first = _first_rows(off, span)
        present = np.flatnonzero(first < n)
        by_row = present[np.argsort(first[present])]  # distinct offsets, first appearance
        del first
        table = np.empty(span, dtype=np.int32)
        table[by_row] = np.arange(by_row.size, dtype=np.int32)
        codes = table[off]
        distinct = by_row.astype(np.uint64)
    else:
        row_bits = max(int(n - 1).bit_length(), 1)
        if int(span - 1).bit_length() + row_bits > 64:
            return None
        key = np.left_shift(off.view(np.uint64), np.uint64(row_bits))
        del off
        key |= np.arange(n, dtype=np.uint64)
        key.sort()
        value = key >> np.uint64(row_bits)
        key &= np.uint64((1 << row_bits) - 1)  # rows, grouped by id
        start = run_starts(value)
        rank = np.cumsum(start, dtype=np.int32)
        rank -= 1  # sorted rank of each id, per sorted element
        order = np.argsort(key[start])  # sorted ranks by first row (distinct rows)
        distinct = value[start][order]
        del value
        to_appearance = np.empty(order.size, dtype=np.int32)
        to_appearance[order] = np.arange(order.size, dtype=np.int32)
        codes = np.empty(n, dtype=np.int32)
        codes[key.view(np.int64)] = to_appearance[rank]
    distinct += np.uint64(int(lo) % (1 << 64))  # back to the ids (modulo 2^64: exact)
    if ids.dtype.kind == "i":
        distinct = distinct.view(np.int64)
    return codes, distinct.astype(ids.dtype, copy=False)


def _numpy_ints(arr: pa.ChunkedArray) -> np.ndarray:
    """The values of a null-free integer chunked array as one NumPy array."""
    chunks = [c.to_numpy(zero_copy_only=False) for c in arr.chunks]
    return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)


def _appearance_codes(ids: Any) -> tuple[np.ndarray, pa.Array] | None:
    """:func:`encode_ids` in order of first appearance without hashing, where it applies.

    Integer ids (NumPy, or PyArrow without nulls) go through :func:`_integer_codes`; a
    dictionary column whose dictionary is clean and free of repeats goes through the codes of
    its indices, and its labels are the dictionary entries those codes name. Both give exactly
    the codes and code book of a hash pass over the values. None where neither applies.
    """
    if isinstance(ids, np.ndarray):
        if ids.ndim != 1 or ids.dtype.kind not in "iu" or ids.size == 0:
            return None
        out = _integer_codes(ids)
        return None if out is None else (out[0], pa.array(out[1]))
    if isinstance(ids, pa.Array):
        ids = pa.chunked_array([ids])
    if not isinstance(ids, pa.ChunkedArray) or len(ids) == 0 or ids.null_count:
        return None
    if pa.types.is_integer(ids.type):
        out = _integer_codes(_numpy_ints(ids))
        return None if out is None else (out[0], pa.array(out[1], type=ids.type))
    if not (pa.types.is_dictionary(ids.type) and _clean_dictionary(ids)):
        return None
    dictionaries = _dictionaries(ids)
    if len(dictionaries) > 1:
        if sum(len(d) for d in dictionaries) > len(ids):
            return None  # unifying would hash more values than decoding the column
        ids = ids.unify_dictionaries()
        dictionaries = [ids.chunk(0).dictionary]
    indices = pa.chunked_array([c.indices for c in ids.chunks])
    out = _integer_codes(_numpy_ints(indices))
    if out is None:  # pragma: no cover - indices span at most the dictionary
        return None
    labels = dictionaries[0].take(pa.array(out[1]))  # the entries in use, first appearance
    if pc.count_distinct(labels).as_py() != len(labels):
        return None  # an id under two indices: the hash pass over the values merges them
    return out[0], labels


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
        # np.unique(return_inverse=True) argsorts (slow on large arrays); the vectorised sort
        # and a binary search give the same labels and codes.
        values = np.sort(ids)
        labels = values[run_starts(values)]
        del values
        codes: np.ndarray = np.searchsorted(labels, ids).astype(np.int32)
        return codes, labels.astype(np.int64) if np.can_cast(labels.dtype, np.int64) else labels
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
        Ids of one type: NumPy, PyArrow (chunked or not; dictionary columns), pandas or
        a Python sequence. Checked by :func:`to_arrow` unless numeric NumPy.
    column : str, default 'id'
        Name of the column in error messages (``'user'``, ``'item'``).
    order : {'appearance', 'sorted'}, default 'appearance'
        ``'appearance'``: code ``c`` is the ``c``-th distinct id in input order (a sort or a
        table for integer and dictionary ids, else one hash pass; chunks kept). ``'sorted'``:
        code ``c`` is the ``c``-th smallest id (numeric order for numbers, byte order for
        strings), by a lookup table when integer ids are compact.

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
    if order == "appearance":
        fast = _appearance_codes(ids)
        if fast is not None:
            return fast
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


def run_starts(sorted_values: np.ndarray) -> np.ndarray:
    """Boolean mask of the first element of each run of equal values in a sorted array."""
    first = np.empty(sorted_values.size, dtype=bool)
    if not sorted_values.size:
        return first
    first[0] = True
    np.not_equal(sorted_values[1:], sorted_values[:-1], out=first[1:])
    return first


def run_bounds(sorted_values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(starts, ends)`` of the runs of equal values in a sorted (non-empty) array: run ``j``
    is ``sorted_values[starts[j]:ends[j]]``."""
    starts = np.flatnonzero(run_starts(sorted_values))
    return starts, np.r_[starts[1:], sorted_values.size]


def check_codes(
    users: Any,
    items: Any,
    n_users: int | None,
    n_items: int | None,
    cls: str,
    what: str,
    *,
    allow_empty: bool = False,
) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Validate integer code columns; returns them as arrays with the code-book sizes.

    Shared by the ``from_codes`` constructors: one-dimensional, integer, equal length, codes in
    ``[0, 2^31 - 1]`` and below ``n_users`` / ``n_items`` (default: the largest code + 1).
    ``allow_empty``: zero rows are a data set like any other (no user), not an error.
    """
    u = np.asarray(users)
    i = np.asarray(items)
    if u.size == 0 and i.size == 0:
        if not allow_empty:
            raise DataError(f"The input has no {what}.")
        u, i = u.astype(np.int64, copy=False), i.astype(np.int64, copy=False)
        return u, i, int(n_users or 0), int(n_items or 0)
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
