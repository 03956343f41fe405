"""The one id encoder: codes and code books in appearance or sorted order."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from userdp.data import Contributions
from userdp.data.encoding import _hash_encode, encode_ids
from userdp.estimate.weighting import factorize_users
from userdp.exceptions import DataError, InvalidParameterError


def decoded(codes: np.ndarray, labels: pa.Array) -> list[object]:
    return labels.take(pa.array(codes)).to_pylist()


@pytest.mark.parametrize(
    "ids",
    [
        ["b", "a", "b", "c"],
        np.array([7, 3, 7, 1_000_000_007, -2]),
        np.array([5, 0, 5, 2], dtype=np.int32),  # compact: the lookup-table path
        np.array([0.5, -1.0, 0.5]),
        pd.Series(["x", "y", "x"]),
        pa.chunked_array([["q", "p"], ["q"]]),
    ],
)
def test_both_orders_decode_to_the_input_and_sorted_matches_np_unique(ids):
    values = list(ids.to_pylist() if isinstance(ids, pa.ChunkedArray) else ids)
    for order in ("appearance", "sorted"):
        codes, labels = encode_ids(ids, "user", order=order)
        assert codes.dtype == np.int32 and decoded(codes, labels) == values
        assert len(labels) == len(set(values))
    _, want = np.unique(np.asarray(values), return_inverse=True)
    assert encode_ids(ids, order="sorted")[0].tolist() == want.ravel().tolist()
    first_seen = list(dict.fromkeys(values))
    assert encode_ids(ids)[1].to_pylist() == first_seen


def test_ids_beyond_int64_stay_exact_strings():
    big = 2**64 + 1
    codes, labels = encode_ids([big, 5, big], "user")
    assert codes.tolist() == [0, 1, 0] and labels.to_pylist() == [str(big), "5"]


def test_empty_nan_and_mixed_ids_are_refused_with_column_and_row():
    with pytest.raises(DataError, match=r"Column 'user' has an empty value \(first at row 1\)"):
        encode_ids(["a", "", "b"], "user", order="sorted")
    with pytest.raises(DataError, match=r"Column 'user' has NaN values \(first at row 2\)"):
        encode_ids(np.array([1.0, 2.0, np.nan]), "user", order="sorted")
    with pytest.raises(DataError, match=r"mixes value types \(first at row 1\)"):
        encode_ids(["a", 1], "user")
    with pytest.raises(InvalidParameterError, match="'order' parameter of encode_ids"):
        encode_ids(["a"], order="random")


def test_factorize_users_is_the_sorted_encoder_with_user_sizes():
    users = np.array(["carl", "ann", "carl", "bob", "carl"])
    codes, sizes = factorize_users(users)
    assert codes.dtype == np.int64 and codes.tolist() == [2, 0, 2, 1, 2]
    assert sizes.tolist() == [1, 1, 3]


def hashed(values: pa.ChunkedArray) -> tuple[list[int], list[object], pa.DataType]:
    """The reference encoding: one PyArrow hash pass over the decoded values."""
    if pa.types.is_dictionary(values.type):
        values = values.cast(values.type.value_type)
    codes, labels = _hash_encode(values)
    return codes.tolist(), labels.to_pylist(), labels.type


@settings(max_examples=60, deadline=None)
@given(
    dtype=st.sampled_from(["int8", "uint8", "int32", "uint32", "int64", "uint64"]),
    n=st.integers(1, 300),
    n_distinct=st.integers(1, 40),
    spread=st.sampled_from([1, 7, 2**20 + 3, 2**40 + 1, 2**62]),  # compact .. too wide to pack
    offset=st.sampled_from([0, 1, -(2**62), 2**62]),
    seed=st.integers(0, 2**32 - 1),
)
def test_integer_ids_encode_exactly_as_the_hash_pass(dtype, n, n_distinct, spread, offset, seed):
    """Table, sort and hash give the same appearance codes and code book (values and type)."""
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    pool = np.array([offset + spread * int(k) for k in rng.integers(0, 1 << 20, n_distinct)])
    pool = pool[(pool >= int(info.min)) & (pool <= int(info.max))]
    if pool.size == 0:
        pool = np.array([int(info.max)])
    ids = np.array([int(v) for v in rng.choice(pool, n)], dtype=object).astype(dtype)
    want = hashed(pa.chunked_array([pa.array(ids)]))
    for column in (ids, pa.array(ids), pa.chunked_array([ids[: n // 2], ids[n // 2 :]])):
        codes, labels = encode_ids(column, "user")
        assert codes.dtype == np.int32
        assert (codes.tolist(), labels.to_pylist(), labels.type) == want


def test_dictionary_columns_encode_by_their_indices_exactly_as_their_values():
    words = ["b", "a", "c", "b", "d", "a"]
    same_dict = pa.array(words).dictionary_encode()
    chunks = pa.chunked_array(  # each chunk its own dictionary, in its own order
        [pa.array(words[:3]).dictionary_encode(), pa.array(words[3:]).dictionary_encode()]
    )
    repeated = pa.DictionaryArray.from_arrays(  # "b" under two indices; unused "" entry
        pa.array([0, 1, 2, 3, 4, 1], pa.int8()), pa.array(["b", "a", "c", "b", "d", ""])
    )
    unused_empty = pa.DictionaryArray.from_arrays(
        pa.array([0, 1, 2, 0, 3, 1]), pa.array(["b", "a", "c", "d", ""])
    )
    category = pd.Series(words).astype("category")
    ints = pa.array([5, -1, 5, 2**40]).dictionary_encode()
    for column in (same_dict, chunks, repeated, unused_empty, category, ints):
        arrow = (
            pa.chunked_array([pa.Array.from_pandas(column)])
            if isinstance(column, pd.Series)
            else column
        )
        arrow = arrow if isinstance(arrow, pa.ChunkedArray) else pa.chunked_array([arrow])
        codes, labels = encode_ids(column, "item")
        assert (codes.tolist(), labels.to_pylist(), labels.type) == hashed(arrow)


def test_bad_dictionary_entries_in_use_are_refused_with_the_row():
    empty = pa.DictionaryArray.from_arrays(pa.array([0, 1, 0]), pa.array(["a", ""]))
    with pytest.raises(DataError, match=r"Column 'item' has an empty value \(first at row 1\)"):
        Contributions.from_columns([1, 2, 3], empty)
    null_index = pa.DictionaryArray.from_arrays(pa.array([0, None, 0]), pa.array(["a", "b"]))
    with pytest.raises(DataError, match=r"Column 'item' has 1 null value\(s\) \(first at row 1\)"):
        Contributions.from_columns([1, 2, 3], null_index)
    null_entry = pa.DictionaryArray.from_arrays(pa.array([0, 0, 1]), pa.array(["a", None]))
    with pytest.raises(DataError, match=r"null value\(s\) \(first at row 2\)"):
        Contributions.from_columns([1, 2, 3], null_entry)


def test_contributions_from_dictionary_and_integer_columns_match_decoded_strings():
    rng = np.random.default_rng(3)
    users = rng.integers(0, 50, 2_000) * 1_000_003 - 7
    items = [f"w{k}" for k in rng.zipf(1.5, 2_000) % 300]
    slow = Contributions.from_columns([str(u) for u in users], items)
    fast = Contributions.from_columns(users, pa.array(items).dictionary_encode())
    for name in ("users", "items"):
        assert np.array_equal(getattr(fast, name), getattr(slow, name))
    assert fast.item_labels.equals(slow.item_labels)
    assert fast.user_labels.to_pylist() == [int(u) for u in slow.user_labels.to_pylist()]
    assert fast.duplicates_dropped == slow.duplicates_dropped
