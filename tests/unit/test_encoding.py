"""The one id encoder (issue 14): codes and code books in appearance or sorted order."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from userdp.data.encoding import encode_ids
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
