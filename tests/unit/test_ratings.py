"""The Ratings table: construction, validation and the views the recommender relies on."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from userdp.data import Contributions, Ratings, as_contributions, as_ratings
from userdp.exceptions import DataError, InvalidParameterError

ROWS = [("ann", "x", 4.0), ("bob", "x", 2.0), ("ann", "y", 3.0), ("ann", "x", 5.0)]


def triples(r: Ratings) -> list[tuple[object, object, float]]:
    t = r.to_arrow()
    return list(zip(*(t.column(c).to_pylist() for c in ("user", "item", "rating")), strict=True))


def test_a_repeated_pair_keeps_its_last_rating_and_rows_are_sorted_by_user():
    r = Ratings.from_columns(*zip(*ROWS, strict=True))
    assert sorted(triples(r)) == [("ann", "x", 5.0), ("ann", "y", 3.0), ("bob", "x", 2.0)]
    assert r.duplicates_dropped == 1
    assert np.all(np.diff(r.users) >= 0) and r.values.dtype == np.float64
    assert r.user_offsets().tolist() == [0, 2, 3]
    assert r.user_counts().tolist() == [2, 1] and r.item_counts().sum() == 3


@pytest.mark.parametrize(
    "make",
    [
        lambda u, i, v: pd.DataFrame({"user": u, "item": i, "rating": v}),
        lambda u, i, v: pa.table({"user": u, "item": i, "rating": v}),
        lambda u, i, v: {"user": u, "item": i, "rating": v},
        lambda u, i, v: (u, i, v),
    ],
    ids=["pandas", "pyarrow", "dict", "tuple"],
)
def test_as_ratings_reads_tables_and_column_triples(make):
    u, i, v = (list(c) for c in zip(*ROWS, strict=True))
    assert sorted(triples(as_ratings(make(u, i, v)))) == sorted(
        [("ann", "x", 5.0), ("ann", "y", 3.0), ("bob", "x", 2.0)]
    )


def test_subset_keeps_code_books_and_order():
    r = Ratings.from_codes([2, 0, 1, 0], [0, 1, 1, 0], [1.0, 2.0, 3.0, 4.0], n_items=5)
    part = r.subset(np.array([3, 0]))  # unsorted indices are put back in (user, item) order
    assert part.n_items == 5 and part.n_users == r.n_users
    assert np.all(np.diff(part.users) >= 0)
    assert set(zip(part.users.tolist(), part.items.tolist(), strict=True)) == {(0, 0), (2, 0)}


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (([0, 1], [0, 1], [1.0, np.nan]), "non-finite"),
        (([0, 1], [0, 1], [1.0]), "same length"),
        (([0.5, 1], [0, 1], [1.0, 2.0]), "integer codes"),
        (([-1, 1], [0, 1], [1.0, 2.0]), r"codes must lie in"),
        (([], [], []), "no ratings"),
    ],
)
def test_from_codes_rejects_bad_columns(args, match):
    with pytest.raises(DataError, match=match):
        Ratings.from_codes(*args)


def test_from_table_names_the_missing_column_and_rejects_text_ratings():
    with pytest.raises(DataError, match="'rating' not found"):
        Ratings.from_table({"user": [1], "item": [2], "score": [3.0]})
    with pytest.raises(DataError, match="must be numeric"):
        Ratings.from_columns([1], [2], ["good"])


def test_union_of_two_parts_holds_every_row_with_the_same_codes():
    r = Ratings.from_columns(["a", "a", "b", "c"], ["x", "y", "x", "z"], [1.0, 2.0, 3.0, 4.0])
    first, second = r.subset(np.array([0, 3])), r.subset(np.array([1, 2]))
    both = first.union(second)
    assert both.n_users == r.n_users and both.n_items == r.n_items
    got = sorted(zip(both.users.tolist(), both.items.tolist(), both.values.tolist(), strict=True))
    want = sorted(zip(r.users.tolist(), r.items.tolist(), r.values.tolist(), strict=True))
    assert got == want
    other = Ratings.from_columns(["q"], ["x"], [1.0])
    with pytest.raises(DataError, match="same user code book"):
        first.union(other)


def test_implicit_keeps_the_pairs_and_sets_every_value_to_one():
    r = Ratings.from_columns(["a", "b"], ["x", "y"], [4.5, 0.5])
    i = r.implicit()
    assert np.array_equal(i.users, r.users) and np.array_equal(i.items, r.items)
    assert np.all(i.values == 1.0)


# -- Ratings extends Contributions: one set of constructors ----------------------------
def test_ratings_are_contributions_with_a_value_column():
    r = Ratings.from_columns(*zip(*ROWS, strict=True))
    pairs = Contributions.from_columns(*list(zip(*ROWS, strict=True))[:2])
    assert isinstance(r, Contributions) and as_contributions(r) is r
    assert np.array_equal(r.users, pairs.users) and np.array_equal(r.items, pairs.items)
    assert r.user_labels.equals(pairs.user_labels) and r.item_labels.equals(pairs.item_labels)
    assert r.degrees().tolist() == r.user_counts().tolist() == pairs.degrees().tolist()
    assert r.duplicates_dropped == pairs.duplicates_dropped == 1
    assert r.to_arrow().column_names == ["user", "item", "rating"]
    assert pairs.to_arrow().column_names == ["user", "item"]


def test_from_pairs_reads_rating_triples_and_keeps_the_last_rating():
    r = Ratings.from_pairs(ROWS)
    assert sorted(triples(r)) == [("ann", "x", 5.0), ("ann", "y", 3.0), ("bob", "x", 2.0)]
    with pytest.raises(DataError, match=r"Row 1 is not a \(user, item, rating\) row"):
        Ratings.from_pairs([("ann", "x", 1.0), ("bob", "x")])


def test_from_table_reads_arrow_capsules_and_refuses_a_column_in_two_roles():
    class Capsule:  # any table exporting the Arrow PyCapsule stream interface
        def __arrow_c_stream__(self, requested_schema=None):
            table = pa.table({"u": ["a", "b"], "i": [1, 2], "r": [1.0, 2.0]})
            return table.__arrow_c_stream__(requested_schema)

    r = Ratings.from_table(Capsule(), "u", "i", "r")
    assert sorted(triples(r)) == [("a", 1, 1.0), ("b", 2, 2.0)]
    with pytest.raises(InvalidParameterError, match="plays one role only"):
        Ratings.from_table(Capsule(), "u", "u", "r")
