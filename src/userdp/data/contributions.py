"""The contributions table: de-duplicated (user, item) pairs as integer codes plus code books.

Users and items of any hashable type are factorized once by
:func:`userdp.data.encoding.encode_ids` (a sort for integers, the indices of dictionary
columns, PyArrow's hash-based ``dictionary_encode`` otherwise); every
algorithm then works on dense ``int32`` codes with ``np.bincount``. Pairs are stored sorted by
user (CSR order), which is what degree capping needs. :class:`~userdp.data.Ratings` is this table
with a value column: its constructors are these.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Self, cast

import numpy as np
import pyarrow as pa

from userdp.data.encoding import check_codes, check_column_roles, encode_ids, run_starts, to_arrow
from userdp.exceptions import DataError

__all__ = ["Contributions", "as_contributions"]


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

    # The value columns a subclass adds to the (user, item) pair (Ratings: "rating"); their
    # values are float64 and a repeated pair keeps its last row's values.
    _value_columns: ClassVar[tuple[str, ...]] = ()
    _rows_name: ClassVar[str] = "(user, item) pairs"
    _empty_input: ClassVar[str] = "The input has no (user, item) pairs; nothing to select from."
    # Zero pairs are a data set (no user): refusing it would tell it apart from one user's.
    _allow_empty: ClassVar[bool] = True

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
    ) -> Self:
        """Build from non-negative integer codes (the fast path: no hashing).

        Pairs are de-duplicated and sorted by user with one ``np.sort`` of packed int64 keys.
        Without labels, the codes themselves are the labels.
        """
        u, i, nu, ni = check_codes(
            users,
            items,
            n_users,
            n_items,
            cls.__name__,
            cls._rows_name,
            allow_empty=cls._allow_empty,
        )
        return cls._sorted(u, i, (), nu, ni, user_labels, item_labels, keep_empty_users=False)

    @classmethod
    def _sorted(
        cls,
        u: np.ndarray,
        i: np.ndarray,
        values: tuple[np.ndarray, ...],
        nu: int,
        ni: int,
        user_labels: pa.Array | None,
        item_labels: pa.Array | None,
        *,
        keep_empty_users: bool,
    ) -> Self:
        """The table of checked codes: rows sorted by (user, item), repeated pairs dropped.

        A repeated pair keeps its last row (stable sort, last of each run), which matters only
        for the ``values`` columns. Users without rows leave the code book (dense user codes)
        unless ``keep_empty_users``.
        """
        # (user, item) packed in one int64, the item in the low bits: sorting groups by user,
        # then item (the order of u * ni + i, with shifts instead of a division to unpack).
        shift = np.int64(max(int(ni - 1).bit_length(), 1))
        key = u.astype(np.int64) << shift
        np.bitwise_or(key, i, out=key, casting="unsafe")  # codes checked: in [0, 2^31)
        if values:
            order = np.argsort(key, kind="stable")
            key = key[order]
            keep = np.empty(key.size, dtype=bool)  # last of each run of equal keys
            keep[-1] = True
            np.not_equal(key[1:], key[:-1], out=keep[:-1])
            values = tuple(v[order[keep]] for v in values)
            del order
        else:  # pairs alone: duplicates are identical, an in-place sort is enough
            key.sort()
            keep = run_starts(key)
        n_dup = int(key.size - np.count_nonzero(keep))
        if n_dup:
            key = key[keep]
        uu = np.right_shift(key, shift, out=np.empty(key.size, np.int32), casting="unsafe")
        ii = np.bitwise_and(
            key, (np.int64(1) << shift) - 1, out=np.empty(key.size, np.int32), casting="unsafe"
        )
        del key
        ul = pa.array(np.arange(nu)) if user_labels is None else user_labels
        il = pa.array(np.arange(ni)) if item_labels is None else item_labels
        if len(ul) < nu or len(il) < ni:
            raise DataError("user_labels/item_labels are shorter than the number of codes.")
        if not keep_empty_users:
            # Users are dense codes 0..n_users-1 of users with at least one row (sorted: cheap).
            first = run_starts(uu)
            if int(np.count_nonzero(first)) != len(ul):
                ul = ul.take(pa.array(uu[first]))
                uu = (np.cumsum(first, dtype=np.int32) - 1).astype(np.int32, copy=False)
        # subclasses take their value columns between the items and the code books
        return cast(Any, cls)(uu, ii, *values, ul, il, n_dup)

    @classmethod
    def from_columns(cls, users: Any, items: Any) -> Self:
        """Build from two columns of any hashable type (NumPy, PyArrow, pandas, lists)."""
        return cls._from_columns(users, items)

    @classmethod
    def _from_columns(cls, *columns: Any) -> Self:
        """Build from the user, item and value columns: ids encoded once, then from_codes."""
        names = ("user", "item", *cls._value_columns)
        # Id columns keep their dictionaries (encoded by their indices); integer NumPy ids
        # stay NumPy (encoded without a copy into Arrow).
        arrays = [
            col if k < 2 and _numpy_ints(col) else to_arrow(col, name, keep_dictionary=k < 2)
            for k, (col, name) in enumerate(zip(columns, names, strict=True))
        ]
        lengths = [len(a) for a in arrays]
        if len(set(lengths)) != 1:
            raise DataError(
                f"Columns {_enumerate(repr(n) for n in names)} must have the same length; got "
                f"{_enumerate(str(n) for n in lengths)}."
            )
        if lengths[0] == 0 and not cls._allow_empty:
            raise DataError(cls._empty_input)
        for name, arr in zip(names[2:], arrays[2:], strict=True):
            if not (pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type)):
                raise DataError(f"Column {name!r} must be numeric; got type {arr.type}.")
        ucodes, ulabels = encode_ids(arrays[0], "user")
        icodes, ilabels = encode_ids(arrays[1], "item")
        values = [
            np.concatenate([c.to_numpy(zero_copy_only=False) for c in arr.chunks])
            for arr in arrays[2:]
        ]
        return cls.from_codes(
            ucodes,
            icodes,
            *values,
            n_users=len(ulabels),
            n_items=len(ilabels),
            user_labels=ulabels,
            item_labels=ilabels,
        )

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[Any, ...]]) -> Self:
        """Build from an iterable of ``(user, item)`` tuples (Ratings: ``(user, item, rating)``)."""
        names = ("user", "item", *cls._value_columns)
        kind = f"({', '.join(names)}) {'pair' if len(names) == 2 else 'row'}"
        columns: list[list[Any]] = [[] for _ in names]
        for row, pair in enumerate(pairs):
            try:
                fields = tuple(pair)
            except TypeError:
                fields = ()
            if len(fields) != len(names):
                raise DataError(
                    f"Row {row} is not a {kind} (got a {type(pair).__name__}"
                    f"{f' of length {len(pair)}' if hasattr(pair, '__len__') else ''})."
                )
            for column, field in zip(columns, fields, strict=True):
                column.append(field)
        return cls._from_columns(*columns)

    @classmethod
    def from_table(cls, table: Any, user_column: str = "user", item_column: str = "item") -> Self:
        """Build from a PyArrow table, pandas DataFrame, mapping of columns, or any table
        exporting the Arrow PyCapsule stream interface (``__arrow_c_stream__``: Polars, DuckDB).
        """
        return cls._from_table(table, {"user": user_column, "item": item_column})

    @classmethod
    def _from_table(cls, table: Any, columns: dict[str, str]) -> Self:
        """Read the columns named by ``columns`` (role -> column name) of any table input."""
        check_column_roles({f"{role} column": name for role, name in columns.items()})
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
        for col in columns.values():
            if col not in names:
                keywords = " / ".join(f"{role}_column=" for role in columns)
                flags = "/".join(f"--{role}-column" for role in columns)
                raise DataError(
                    f"Column {col!r} not found; the input has columns {names!r}. Name the "
                    f"columns with {keywords} (CLI: {flags})."
                )
            if names.count(col) > 1:
                raise DataError(
                    f"Column {col!r} appears {names.count(col)} times in the input's header; "
                    "rename the copies so that each name is one column."
                )
        return cls._from_columns(
            *(
                to_arrow(get(col), col, keep_dictionary=role in ("user", "item"))
                for role, col in columns.items()
            )
        )

    # -- shape ----------------------------------------------------------------------------------
    @property
    def n_users(self) -> int:
        """Number of users (every user code has at least one pair, except in the Ratings splits
        built with ``keep_empty_users``)."""
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

    def to_arrow(self) -> pa.Table:
        """The table with original ids: columns user and item."""
        return pa.table(
            {
                "user": self.user_labels.take(pa.array(self.users)),
                "item": self.item_labels.take(pa.array(self.items)),
            }
        )

    def __repr__(self) -> str:
        return (
            f"Contributions(n_users={self.n_users}, n_items={self.n_items}, n_pairs={self.n_pairs})"
        )


def _numpy_ints(col: Any) -> bool:
    """A one-dimensional NumPy array of integers (never null: no check needed)."""
    return isinstance(col, np.ndarray) and col.ndim == 1 and col.dtype.kind in "iu"


def _enumerate(words: Iterable[str]) -> str:
    """``a and b``, ``a, b and c``."""
    words = list(words)
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


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
