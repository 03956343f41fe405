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

from userdp.data.contributions import Contributions
from userdp.data.encoding import check_codes
from userdp.exceptions import DataError

__all__ = ["Ratings", "as_ratings", "vocabulary_array"]


class Ratings(Contributions):
    """Ratings of items by users, stored as codes sorted by (user, item).

    A :class:`~userdp.data.Contributions` table with a value column: the constructors are the
    same, each taking the ratings as one more column. Build with :meth:`from_columns`,
    :meth:`from_table`, :meth:`from_pairs` (``(user, item, rating)`` rows) or, for
    integer-coded data, :meth:`from_codes`. A (user, item) pair rated more than once keeps its
    **last** rating in input order (MovieLens has none; event logs often do) and the number
    dropped is counted.

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

    _value_columns = ("rating",)
    _rows_name = "ratings"
    _empty_input = "The input has no ratings."
    _allow_empty = False  # the recommenders need ratings to train on

    def __init__(
        self,
        users: np.ndarray,
        items: np.ndarray,
        values: np.ndarray,
        user_labels: pa.Array,
        item_labels: pa.Array,
        duplicates_dropped: int = 0,
    ) -> None:
        super().__init__(users, items, user_labels, item_labels, duplicates_dropped)
        self.values = values

    # -- constructors ---------------------------------------------------------------------------
    @classmethod
    # Ratings add the required value column: a deliberate signature change
    def from_codes(  # type: ignore[override]
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
        return cls._sorted(
            u, i, (v,), nu, ni, user_labels, item_labels, keep_empty_users=keep_empty_users
        )

    @classmethod
    def from_columns(cls, users: Any, items: Any, values: Any) -> Ratings:  # type: ignore[override]
        """Build from a user column and an item column of any hashable type, and ratings."""
        return cls._from_columns(users, items, values)

    @classmethod
    def from_table(
        cls,
        table: Any,
        user_column: str = "user",
        item_column: str = "item",
        rating_column: str = "rating",
    ) -> Ratings:
        """Build from a PyArrow table, pandas DataFrame, mapping of columns, or any table
        exporting the Arrow PyCapsule stream interface (``__arrow_c_stream__``).
        """
        columns = {"user": user_column, "item": item_column, "rating": rating_column}
        return cls._from_table(table, columns)

    # -- shape ----------------------------------------------------------------------------------
    @property
    def n_ratings(self) -> int:
        """Number of (user, item, rating) rows."""
        return int(self.users.size)

    def user_counts(self) -> np.ndarray:
        """Ratings per user code, int64 (the degrees of :class:`Contributions`)."""
        return self.degrees()

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
            self.users[keep],
            codes[keep],
            self.values[keep],
            n_users=self.n_users,
            n_items=len(vocab),
            user_labels=self.user_labels,
            item_labels=vocab,
            keep_empty_users=True,
        )
        return out, int(keep.size - np.count_nonzero(keep))

    def to_arrow(self) -> pa.Table:
        """The table with original ids: columns user, item, rating."""
        return super().to_arrow().append_column("rating", pa.array(self.values))

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
