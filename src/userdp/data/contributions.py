"""The contributions table: de-duplicated (user, item) pairs as integer codes plus code books.

Users and items of any hashable type are factorized once (PyArrow's hash-based
``dictionary_encode``); every algorithm then works on dense ``int32`` codes with
``np.bincount``. Pairs are stored sorted by user (CSR order), which is what degree capping needs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from userdp.exceptions import DataError

__all__ = ["Contributions", "as_contributions"]

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


def _to_arrow(values: Any, column: str) -> pa.ChunkedArray:
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
    if pa.types.is_dictionary(arr.type):
        arr = arr.cast(arr.type.value_type)
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


def _encode(arr: pa.ChunkedArray) -> tuple[np.ndarray, pa.Array]:
    """Integer codes and code book of a column, by one hash pass over all chunks."""
    enc = arr.dictionary_encode()  # callers reject empty columns, so there is a chunk
    dictionary = enc.chunk(enc.num_chunks - 1).dictionary
    if any(len(c.dictionary) != len(dictionary) for c in enc.chunks):
        # Chunks carry different dictionaries: encode one contiguous copy instead.
        enc = pa.chunked_array([arr.combine_chunks().dictionary_encode()])
        dictionary = enc.chunk(0).dictionary
    codes = np.concatenate([c.indices.to_numpy(zero_copy_only=False) for c in enc.chunks])
    return codes.astype(np.int32, copy=False), dictionary


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


class Contributions:
    """De-duplicated (user, item) pairs stored as int32 codes sorted by user.

    Build with :meth:`from_columns`, :meth:`from_pairs`, :meth:`from_table` or, for data that
    is already integer-coded, :meth:`from_codes`. Files are read by :func:`userdp.data.read`.

    Attributes
    ----------
    users, items : ndarray of int32, shape (n_pairs,)
        Codes of each distinct pair, sorted by user.
    user_labels, item_labels : pyarrow.Array
        Code books: ``item_labels[c]`` is the original item of code ``c``.
    duplicates_dropped : int
        Input rows that repeated an earlier (user, item) pair.

    Examples
    --------
    >>> c = Contributions.from_pairs([("ann", "x"), ("ann", "y"), ("bob", "x"), ("ann", "x")])
    >>> c.n_users, c.n_items, c.n_pairs, c.duplicates_dropped
    (2, 2, 3, 1)
    """

    def __init__(
        self,
        users: np.ndarray,
        items: np.ndarray,
        user_labels: pa.Array,
        item_labels: pa.Array,
        duplicates_dropped: int = 0,
    ) -> None:
        self.users = users
        self.items = items
        self.user_labels = user_labels
        self.item_labels = item_labels
        self.duplicates_dropped = duplicates_dropped

    # -- constructors ---------------------------------------------------------------------------
    @classmethod
    def from_codes(
        cls,
        users: Any,
        items: Any,
        *,
        n_users: int | None = None,
        n_items: int | None = None,
        user_labels: pa.Array | None = None,
        item_labels: pa.Array | None = None,
    ) -> Contributions:
        """Build from non-negative integer codes (the fast path: no hashing).

        Pairs are de-duplicated and sorted by user with one ``np.sort`` of packed int64 keys.
        Without labels, the codes themselves are the labels.
        """
        u, i, nu, ni = check_codes(
            users, items, n_users, n_items, "Contributions", "(user, item) pairs"
        )
        key = u.astype(np.int64) * ni + i  # (user, item) packed; sorting groups by user
        key.sort()
        keep = _run_starts(key)
        n_dup = int(key.size - np.count_nonzero(keep))
        if n_dup:
            key = key[keep]
        uu = (key // ni).astype(np.int32)
        ii = (key - uu.astype(np.int64) * ni).astype(np.int32)
        del key
        ul = pa.array(np.arange(nu)) if user_labels is None else user_labels
        il = pa.array(np.arange(ni)) if item_labels is None else item_labels
        if len(ul) < nu or len(il) < ni:
            raise DataError("user_labels/item_labels are shorter than the number of codes.")
        # Users are dense codes 0..n_users-1 of users with at least one pair (sorted: cheap).
        first = _run_starts(uu)
        n_present = int(np.count_nonzero(first))
        if n_present != len(ul):
            ul = ul.take(pa.array(uu[first]))
            uu = (np.cumsum(first, dtype=np.int32) - 1).astype(np.int32, copy=False)
        return cls(uu, ii, ul, il, n_dup)

    @classmethod
    def from_columns(cls, users: Any, items: Any) -> Contributions:
        """Build from two columns of any hashable type (NumPy, PyArrow, pandas, lists)."""
        ua = _to_arrow(users, "user")
        ia = _to_arrow(items, "item")
        if len(ua) != len(ia):
            raise DataError(
                f"Columns 'user' and 'item' must have the same length; got {len(ua)} and {len(ia)}."
            )
        if len(ua) == 0:
            raise DataError("The input has no (user, item) pairs; nothing to select from.")
        ucodes, ulabels = _encode(ua)
        icodes, ilabels = _encode(ia)
        return cls.from_codes(
            ucodes,
            icodes,
            n_users=len(ulabels),
            n_items=len(ilabels),
            user_labels=ulabels,
            item_labels=ilabels,
        )

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[Any, Any]]) -> Contributions:
        """Build from an iterable of ``(user, item)`` tuples."""
        users: list[Any] = []
        items: list[Any] = []
        for row, pair in enumerate(pairs):
            try:
                u, i = pair
            except (TypeError, ValueError) as err:
                raise DataError(
                    f"Row {row} is not a (user, item) pair (got a {type(pair).__name__}"
                    f"{f' of length {len(pair)}' if hasattr(pair, '__len__') else ''})."
                ) from err
            users.append(u)
            items.append(i)
        return cls.from_columns(users, items)

    @classmethod
    def from_table(
        cls, table: Any, user_column: str = "user", item_column: str = "item"
    ) -> Contributions:
        """Build from a PyArrow table, pandas DataFrame, mapping of columns, or any table
        exporting the Arrow PyCapsule stream interface (``__arrow_c_stream__``: Polars, DuckDB).
        """
        from userdp.data.io import check_column_roles

        check_column_roles({"user column": user_column, "item column": item_column})
        if not isinstance(table, (pa.Table, Mapping)) and not _is_pandas(table):
            table = _arrow_table(table)
        if isinstance(table, pa.Table):
            names = table.column_names
            get = table.column
        elif isinstance(table, Mapping):
            names = list(table.keys())
            get = table.__getitem__
        else:  # pandas DataFrame
            names = [str(c) for c in table.columns]
            get = table.__getitem__
        for col in (user_column, item_column):
            if col not in names:
                raise DataError(
                    f"Column {col!r} not found; the input has columns {names!r}. Name the "
                    "columns with user_column= / item_column= (CLI: --user-column/--item-column)."
                )
        return cls.from_columns(
            _to_arrow(get(user_column), user_column), _to_arrow(get(item_column), item_column)
        )

    # -- shape ----------------------------------------------------------------------------------
    @property
    def n_users(self) -> int:
        """Number of users (every user code has at least one pair)."""
        return len(self.user_labels)

    @property
    def n_items(self) -> int:
        """Number of item codes (the size of the item code book)."""
        return len(self.item_labels)

    @property
    def n_pairs(self) -> int:
        """Number of distinct (user, item) pairs."""
        return int(self.users.size)

    def degrees(self) -> np.ndarray:
        """Set size of every user code, as int64."""
        return np.bincount(self.users, minlength=self.n_users)

    def item_values(self, codes: np.ndarray) -> pa.Array:
        """Original item values of ``codes`` (a PyArrow array of the input's type)."""
        return self.item_labels.take(pa.array(np.asarray(codes, dtype=np.int64)))

    def __repr__(self) -> str:
        return (
            f"Contributions(n_users={self.n_users}, n_items={self.n_items}, n_pairs={self.n_pairs})"
        )


def _is_pandas(obj: Any) -> bool:
    return hasattr(obj, "columns") and hasattr(obj, "iloc")


def _arrow_table(obj: Any) -> pa.Table:
    """An object with the Arrow PyCapsule stream interface as a table; DataError otherwise."""
    kind = f"{type(obj).__module__.split('.')[0]}.{type(obj).__name__}"
    if hasattr(obj, "__arrow_c_stream__"):
        try:
            return pa.table(obj)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as err:
            raise DataError(f"Cannot read a table from an object of type {kind}.") from err
    raise DataError(
        f"Cannot read columns from an object of type {kind}; pass a PyArrow table, a pandas "
        "DataFrame, a mapping of columns or an object with the Arrow PyCapsule interface "
        "(for Polars: upgrade it, or call .to_arrow())."
    )


def as_contributions(
    data: Any, *, user_column: str = "user", item_column: str = "item"
) -> Contributions:
    """Turn any supported input into :class:`Contributions`.

    Accepts a Contributions, PyArrow table, pandas DataFrame, mapping of columns, a NumPy
    array of shape (n, 2), a pair ``(users, items)`` of equal-length columns, or an iterable of
    ``(user, item)`` tuples.
    """
    if isinstance(data, Contributions):
        return data
    if (
        isinstance(data, (pa.Table, Mapping))
        or _is_pandas(data)
        or hasattr(data, "__arrow_c_stream__")
        or hasattr(data, "columns")  # another DataFrame library: refused with a short message
    ):
        return Contributions.from_table(data, user_column, item_column)
    if isinstance(data, np.ndarray):
        if data.ndim != 2 or data.shape[1] != 2:
            raise DataError(
                f"A NumPy input must have shape (n_pairs, 2) = (user, item); got {data.shape}."
            )
        if np.issubdtype(data.dtype, np.integer) and data.size and data.min() >= 0:
            return Contributions.from_codes(data[:, 0], data[:, 1])
        return Contributions.from_columns(data[:, 0], data[:, 1])
    if (
        isinstance(data, tuple)
        and len(data) == 2
        and all(hasattr(c, "__len__") and not isinstance(c, (str, bytes, tuple)) for c in data)
    ):
        return Contributions.from_columns(data[0], data[1])
    if isinstance(data, (str, bytes)):
        raise DataError("Pass a file path to userdp.data.read, not to select_partitions.")
    if isinstance(data, Iterable):
        return Contributions.from_pairs(data)
    raise DataError(f"Cannot read (user, item) pairs from an object of type {type(data).__name__}.")
