"""The ratings table: (user, item, value) triples as integer codes plus code books.

The recommender capability works on this table: ``users`` and ``items`` are dense ``int32``
codes, ``values`` are float64 ratings, and rows are sorted by (user, item) so that a user's
ratings are one contiguous slice (CSR order). Ids of any type are factorized once, like
:class:`~userdp.data.Contributions`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from userdp.data.contributions import _encode, _run_starts, _to_arrow, check_codes
from userdp.exceptions import DataError

__all__ = ["Ratings", "as_ratings", "vocabulary_array"]


class Ratings:
    """Ratings of items by users, stored as codes sorted by (user, item).

    Build with :meth:`from_columns`, :meth:`from_table` or, for integer-coded data,
    :meth:`from_codes`. A (user, item) pair rated more than once keeps its **last** rating in
    input order (MovieLens has none; event logs often do) and the number dropped is counted.

    Attributes
    ----------
    users, items : ndarray of int32, shape (n_ratings,)
        Codes, sorted by user then item.
    values : ndarray of float64, shape (n_ratings,)
        The ratings.
    user_labels, item_labels : pyarrow.Array
        Code books: ``item_labels[c]`` is the original id of item code ``c``. Item codes may
        exist without ratings (for example items of a catalogue nobody in a split rated).
    duplicates_dropped : int
        Rows that repeated a (user, item) pair rated again later in the input.

    Examples
    --------
    >>> r = Ratings.from_columns(["ann", "ann", "bob"], ["x", "y", "x"], [4.0, 2.5, 5.0])
    >>> r.n_users, r.n_items, r.n_ratings
    (2, 2, 3)
    """

    def __init__(
        self,
        users: np.ndarray,
        items: np.ndarray,
        values: np.ndarray,
        user_labels: pa.Array,
        item_labels: pa.Array,
        duplicates_dropped: int = 0,
    ) -> None:
        self.users = users
        self.items = items
        self.values = values
        self.user_labels = user_labels
        self.item_labels = item_labels
        self.duplicates_dropped = duplicates_dropped

    # -- constructors ---------------------------------------------------------------------------
    @classmethod
    def from_codes(
        cls,
        users: Any,
        items: Any,
        values: Any,
        *,
        n_users: int | None = None,
        n_items: int | None = None,
        user_labels: pa.Array | None = None,
        item_labels: pa.Array | None = None,
        keep_empty_users: bool = False,
    ) -> Ratings:
        """Build from non-negative integer codes and float ratings (no hashing).

        Rows are sorted by (user, item) with one stable ``np.argsort`` of packed int64 keys;
        a repeated pair keeps its last rating. Users without ratings are dropped from the code
        book unless ``keep_empty_users`` (used by splits that must keep codes aligned).
        """
        u, i, nu, ni = check_codes(users, items, n_users, n_items, "Ratings", "ratings")
        v = np.asarray(values, dtype=np.float64)
        if v.shape != u.shape:
            raise DataError(
                "Columns 'user', 'item' and 'rating' must have the same length; got "
                f"{u.size}, {i.size} and {v.size}."
            )
        bad = ~np.isfinite(v)
        if bad.any():
            raise DataError(
                f"Column 'rating' has {int(bad.sum())} non-finite value(s) (first at row "
                f"{int(np.argmax(bad))})."
            )
        key = u.astype(np.int64) * ni + i
        order = np.argsort(key, kind="stable")
        key = key[order]
        # Keep the last of each run of equal keys (stable sort keeps input order in a run).
        last = np.empty(key.size, dtype=bool)
        last[-1] = True
        np.not_equal(key[1:], key[:-1], out=last[:-1])
        n_dup = int(key.size - np.count_nonzero(last))
        order = order[last]
        key = key[last]
        uu = (key // ni).astype(np.int32)
        ii = (key - uu.astype(np.int64) * ni).astype(np.int32)
        vv = v[order]
        ul = pa.array(np.arange(nu)) if user_labels is None else user_labels
        il = pa.array(np.arange(ni)) if item_labels is None else item_labels
        if len(ul) < nu or len(il) < ni:
            raise DataError("user_labels/item_labels are shorter than the number of codes.")
        if not keep_empty_users:
            first = _run_starts(uu)
            if int(np.count_nonzero(first)) != len(ul):
                ul = ul.take(pa.array(uu[first]))
                uu = (np.cumsum(first, dtype=np.int32) - 1).astype(np.int32, copy=False)
        return cls(uu, ii, vv, ul, il, n_dup)

    @classmethod
    def from_columns(cls, users: Any, items: Any, values: Any) -> Ratings:
        """Build from a user column and an item column of any hashable type, and ratings."""
        ua = _to_arrow(users, "user")
        ia = _to_arrow(items, "item")
        va = _to_arrow(values, "rating")
        if not (len(ua) == len(ia) == len(va)):
            raise DataError(
                "Columns 'user', 'item' and 'rating' must have the same length; got "
                f"{len(ua)}, {len(ia)} and {len(va)}."
            )
        if len(ua) == 0:
            raise DataError("The input has no ratings.")
        if not (pa.types.is_integer(va.type) or pa.types.is_floating(va.type)):
            raise DataError(f"Column 'rating' must be numeric; got type {va.type}.")
        ucodes, ulabels = _encode(ua)
        icodes, ilabels = _encode(ia)
        vals = np.concatenate([c.to_numpy(zero_copy_only=False) for c in va.chunks])
        return cls.from_codes(
            ucodes,
            icodes,
            vals,
            n_users=len(ulabels),
            n_items=len(ilabels),
            user_labels=ulabels,
            item_labels=ilabels,
        )

    @classmethod
    def from_table(
        cls,
        table: Any,
        user_column: str = "user",
        item_column: str = "item",
        rating_column: str = "rating",
    ) -> Ratings:
        """Build from a PyArrow table, pandas DataFrame or mapping of columns."""
        if isinstance(table, pa.Table):
            names = table.column_names
            get = table.column
        elif isinstance(table, Mapping):
            names = list(table.keys())
            get = table.__getitem__
        elif hasattr(table, "columns") and hasattr(table, "__getitem__"):
            names = [str(c) for c in table.columns]
            get = table.__getitem__
        else:
            raise DataError(f"Cannot read columns from an object of type {type(table).__name__}.")
        for col in (user_column, item_column, rating_column):
            if col not in names:
                raise DataError(
                    f"Column {col!r} not found; the input has columns {names!r}. Name the "
                    "columns with user_column= / item_column= / rating_column= (CLI: "
                    "--user-column/--item-column/--rating-column)."
                )
        return cls.from_columns(get(user_column), get(item_column), get(rating_column))

    # -- shape ----------------------------------------------------------------------------------
    @property
    def n_users(self) -> int:
        """Number of user codes."""
        return len(self.user_labels)

    @property
    def n_items(self) -> int:
        """Number of item codes (the size of the item code book)."""
        return len(self.item_labels)

    @property
    def n_ratings(self) -> int:
        """Number of (user, item, rating) rows."""
        return int(self.users.size)

    def user_counts(self) -> np.ndarray:
        """Ratings per user code, int64."""
        return np.bincount(self.users, minlength=self.n_users)

    def item_counts(self) -> np.ndarray:
        """Ratings per item code, int64 (exact: data-dependent, never release it)."""
        return np.bincount(self.items, minlength=self.n_items)

    def user_offsets(self) -> np.ndarray:
        """CSR offsets: user ``u``'s rows are ``offsets[u]:offsets[u + 1]``."""
        offsets = np.zeros(self.n_users + 1, dtype=np.int64)
        np.cumsum(self.user_counts(), out=offsets[1:])
        return offsets

    def subset(self, rows: np.ndarray) -> Ratings:
        """The rows selected by a boolean mask or index array, with the same code books.

        Codes stay aligned with the parent (users without rows are kept), which is what
        train/test splits need to score the same users and items.
        """
        rows = np.asarray(rows)
        if rows.dtype != bool:
            rows = np.sort(rows)  # keep (user, item) order
        return Ratings(
            self.users[rows],
            self.items[rows],
            self.values[rows],
            self.user_labels,
            self.item_labels,
            0,
        )

    def union(self, other: Ratings) -> Ratings:
        """The rows of two parts with the same code books (e.g. train and validation) as one.

        Codes are unchanged and users without rows are kept, as for :meth:`subset`.
        """
        if other.user_labels is not self.user_labels and not other.user_labels.equals(
            self.user_labels
        ):
            raise DataError("Ratings.union needs two parts with the same user code book.")
        return Ratings.from_codes(
            np.concatenate([self.users, other.users]),
            np.concatenate([self.items, other.items]),
            np.concatenate([self.values, other.values]),
            n_users=self.n_users,
            n_items=self.n_items,
            user_labels=self.user_labels,
            item_labels=self.item_labels,
            keep_empty_users=True,
        )

    def implicit(self) -> Ratings:
        """The same (user, item) pairs with every value 1: implicit feedback (ML20M protocol)."""
        return Ratings(
            self.users, self.items, np.ones_like(self.values), self.user_labels, self.item_labels
        )

    def restrict_items(self, vocabulary: Any) -> tuple[Ratings, int]:
        """The ratings re-coded on a fixed item ``vocabulary``; ratings of other items dropped.

        Returns ``(ratings, dropped)``: item code ``c`` is ``vocabulary[c]`` (items of the
        vocabulary nobody rated keep a code without rows), user codes are unchanged, and
        ``dropped`` counts the ratings of items outside the vocabulary (exact: report it to
        the curator only). A recommender trained on the result has shapes that depend only on
        the vocabulary, never on which items the users happened to rate.
        """
        vocab = vocabulary_array(vocabulary)
        labels = self.item_labels
        if labels.type != vocab.type:
            try:
                labels = labels.cast(vocab.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
                raise DataError(
                    f"Item ids of type {self.item_labels.type} cannot be matched to the item "
                    f"vocabulary ({vocab.type})."
                ) from err
        recode = np.asarray(
            pc.index_in(labels, value_set=vocab).fill_null(-1).to_numpy(zero_copy_only=False),
            dtype=np.int64,
        )
        codes = recode[self.items]
        keep = codes >= 0
        if not keep.any():  # nobody rated an item of the vocabulary: no rows, same code books
            empty = np.zeros(0, dtype=np.int32)
            out = Ratings(empty, empty.copy(), np.zeros(0), self.user_labels, vocab)
            return out, int(keep.size)
        out = Ratings.from_codes(
            self.users[keep], codes[keep], self.values[keep],
            n_users=self.n_users, n_items=len(vocab),
            user_labels=self.user_labels, item_labels=vocab, keep_empty_users=True,
        )  # fmt: skip
        return out, int(keep.size - np.count_nonzero(keep))

    def item_values(self, codes: np.ndarray) -> pa.Array:
        """Original item ids of ``codes``."""
        return self.item_labels.take(pa.array(np.asarray(codes, dtype=np.int64)))

    def to_arrow(self) -> pa.Table:
        """The table with original ids: columns user, item, rating."""
        return pa.table(
            {
                "user": self.user_labels.take(pa.array(self.users)),
                "item": self.item_labels.take(pa.array(self.items)),
                "rating": pa.array(self.values),
            }
        )

    def __repr__(self) -> str:
        return (
            f"Ratings(n_users={self.n_users}, n_items={self.n_items}, n_ratings={self.n_ratings})"
        )


def vocabulary_array(vocabulary: Any) -> pa.Array:
    """An item vocabulary (labels of any one type) as a PyArrow array; duplicates refused."""
    if isinstance(vocabulary, pa.ChunkedArray):
        vocab = vocabulary.combine_chunks()
    elif isinstance(vocabulary, pa.Array):
        vocab = vocabulary
    else:
        try:
            vocab = pa.array(list(vocabulary))
        except (TypeError, pa.ArrowInvalid, pa.ArrowTypeError) as err:
            raise DataError(
                "The item vocabulary must be a sequence of item ids of one type."
            ) from err
    if vocab.null_count:
        raise DataError(f"The item vocabulary has {vocab.null_count} empty id(s).")
    if len(pc.unique(vocab)) != len(vocab):
        raise DataError("The item vocabulary repeats an item id; every id must appear once.")
    return vocab


def as_ratings(
    data: Any,
    *,
    user_column: str = "user",
    item_column: str = "item",
    rating_column: str = "rating",
) -> Ratings:
    """A Ratings from a Ratings, a table (PyArrow, pandas, mapping) or (users, items, ratings)."""
    if isinstance(data, Ratings):
        return data
    if isinstance(data, (pa.Table, Mapping)) or (
        hasattr(data, "columns") and hasattr(data, "iloc")
    ):
        return Ratings.from_table(data, user_column, item_column, rating_column)
    if isinstance(data, tuple) and len(data) == 3:
        return Ratings.from_columns(*data)
    raise DataError(
        f"Cannot read (user, item, rating) rows from an object of type {type(data).__name__}."
    )
