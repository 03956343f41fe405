"""The pandas bodies the Spark partition runner calls once per partition, checked without Spark:
biased MAD's per-item sums against the local kernels, the guard that a partition holds whole
users, and the join of a round's weights with the items it carries over."""

from __future__ import annotations

import math

import numpy as np
import pytest

from userdp.partition.weights import user_weights

pd = pytest.importorskip("pandas")

from userdp.partition._spark_weights import (  # noqa: E402 - needs pandas
    _partition_biased_sums,
    _sorted_user_weights,
)
from userdp.partition.spark import _join_sides  # noqa: E402


def _partition(seed: int) -> tuple[pd.DataFrame, np.ndarray, np.ndarray, np.ndarray]:
    """Random distinct (user, item) pairs of one partition in a scrambled row order, with
    per-item biases; also the local engine's codes (users, items) and biases."""
    rng = np.random.default_rng(seed)
    n_users, n_items = 60, 40
    keys = np.unique(rng.integers(0, n_users * n_items, size=900))
    users, items = keys // n_items, keys % n_items
    biases = np.where(rng.random(n_items) < 0.4, rng.uniform(0.2, 0.99, n_items), 1.0)
    deg = np.bincount(users, minlength=n_users).astype(float)
    order = rng.permutation(users.size)
    pdf = pd.DataFrame(
        {
            "_u": users[order] * 7 + 3,  # ids, not codes
            "_i": items[order] * 11 + 5,
            "_hi": items[order] * 1_000_003,
            "_deg": deg[users[order]],
            "_b": biases[items[order]],
        }
    )
    return pdf, users, items, biases


@pytest.mark.parametrize("seed", range(5))
def test_biased_sums_are_the_local_sums_per_item(seed):
    """Per item: the sum of its pairs' UserWeights weights and of the adaptive users' 1/|S_u|,
    as the local engine computes them over the same pairs (to round-off)."""
    b_min, b_max, d_max = 0.75, 1.25, 12
    pdf, users, items, biases = _partition(seed)
    out = _partition_biased_sums(b_min, b_max, d_max, pdf)
    n_users, n_items = int(users.max()) + 1, int(items.max()) + 1
    wb = user_weights(users, items, n_users, biases=biases, b_min=b_min, b_max=b_max)
    deg = np.bincount(users, minlength=n_users).astype(float)
    adaptive = (deg >= math.ceil(1.0 / b_min**2)) & (deg <= d_max)
    init = np.where(adaptive, 1.0 / np.maximum(deg, 1.0), 0.0)[users]
    want_w = np.bincount(items, weights=wb, minlength=n_items)
    want_wi = np.bincount(items, weights=init, minlength=n_items)
    codes = (out["_i"].to_numpy() - 5) // 11
    assert sorted(codes) == sorted(np.unique(items))  # one row per item of the partition
    np.testing.assert_allclose(out["_w"].to_numpy(), want_w[codes], rtol=1e-12)
    np.testing.assert_allclose(out["_wi"].to_numpy(), want_wi[codes], rtol=1e-12)
    # the item's hash travels with it (its bucket is added in Spark, from the hash)
    assert list(out.columns) == ["_i", "_hi", "_w", "_wi"]
    assert (out["_hi"].to_numpy() == codes * 1_000_003).all()


def test_a_partition_with_a_split_user_is_refused():
    """If a user's pairs were split across partitions, its UserWeights would be computed on
    part of its set (weights too large for its l2 budget): the count of its pairs here then
    differs from the degree the window by user gave them, and the body refuses to go on."""
    pdf, *_ = _partition(0)
    user = pdf["_u"].iloc[0]
    rows = np.flatnonzero(pdf["_u"].to_numpy() == user)
    assert rows.size >= 2
    split = pdf.drop(index=rows[0])  # one of the user's pairs is elsewhere
    with pytest.raises(RuntimeError, match="whole"):
        _sorted_user_weights(split, 0.75, 1.25)
    _sorted_user_weights(pdf, 0.75, 1.25)  # the whole partition passes


def _sides() -> pd.DataFrame:
    """Round weights for items 2, 3 and 9 (side 0) and carried items 1, 2, 3 (side 1)."""
    weights = pd.DataFrame(
        {"_i": [9, 3, 2], "_hi": [90, 30, 20], "_ib": [0, 0, 0], "_w": [0.5, 3.0, 2.0]}
    )
    carried = pd.DataFrame(
        {
            "_i": [1, 2, 3],
            "_hi": [10, 20, 30],
            "_ib": [0, 0, 0],
            "_w": [np.nan] * 3,
            "_x0": [1.5, 2.5, 3.5],
            "_gone": [False, True, False],
        }
    )
    weights["_x0"], weights["_gone"] = np.nan, None
    return pd.concat([weights.assign(_side=0), carried.assign(_side=1)], ignore_index=True).sample(
        frac=1.0, random_state=1
    )


def test_join_keeps_every_carried_item_on_the_left():
    out = _join_sides("left", ["_x0", "_gone"], _sides()).sort_values("_i")
    assert list(out.columns) == ["_i", "_hi", "_ib", "_w", "_present", "_x0", "_gone"]
    assert out["_i"].tolist() == [1, 2, 3]  # item 9 is not carried: not in the frame
    assert out["_w"].tolist() == [0.0, 2.0, 3.0]
    assert out["_present"].tolist() == [False, True, True]
    assert out["_x0"].tolist() == [1.5, 2.5, 3.5]
    assert out["_gone"].tolist() == [False, True, False]


def test_inner_join_keeps_the_rounds_carried_items():
    out = _join_sides("inner", ["_x0"], _sides()).sort_values("_i")
    assert list(out.columns) == ["_i", "_hi", "_ib", "_w", "_present", "_x0"]
    assert out["_i"].tolist() == [2, 3]
    assert out["_w"].tolist() == [2.0, 3.0]
    assert out["_present"].tolist() == [True, True]
    assert out["_x0"].tolist() == [2.5, 3.5]


def _partial_sides() -> pd.DataFrame:
    """:func:`_sides` with the round's weights as partial sums: item 3's weight 3.0 and item
    2's 2.0 each split over two partitions' rows, each row with its share of w_init."""
    rows = _sides()
    weights = pd.DataFrame(
        {
            "_i": [9, 3, 2, 3, 2],
            "_hi": [90, 30, 20, 30, 20],
            "_ib": [0] * 5,
            "_w": [0.5, 1.25, 0.5, 1.75, 1.5],
            "_wi": [0.0, 4.0, 1.0, 7.0, 0.5],
            "_x0": [np.nan] * 5,
            "_gone": [None] * 5,
            "_side": [0] * 5,
        }
    )
    carried = rows[rows["_side"] == 1].assign(_wi=np.nan)
    return pd.concat([weights, carried], ignore_index=True).sample(frac=1.0, random_state=2)


@pytest.mark.parametrize("how", ["left", "inner"])
def test_partial_sums_are_added_up_before_the_join(how):
    """A biased round's partial sums reach the noise as several rows per item (one per
    partition of pairs): the join must see each item once, with its summed weight and w_init
    (what the truncation check reads), and agree with the join of the summed weights."""
    from userdp.partition._spark_weights import sum_per_item

    carried = ["_x0", "_gone"] if how == "left" else ["_x0"]
    out = _join_sides(how, carried, _partial_sides(), partial=True).sort_values("_i")
    want = _join_sides(how, carried, _sides()).sort_values("_i")
    assert list(out.columns) == [*want.columns, "_wi"]
    pd.testing.assert_frame_equal(
        out.drop(columns="_wi").reset_index(drop=True), want.reset_index(drop=True)
    )
    wi = dict(zip(out["_i"], out["_wi"], strict=True))
    assert wi[2] == 1.5 and wi[3] == 11.0
    if how == "left":
        assert wi[1] == 0.0  # carried, not in the round
    # without a join (a round noising only its own items), the same sums
    own = _partial_sides()
    own = own[own["_side"] == 0].drop(columns=["_side", "_x0", "_gone"])
    summed = sum_per_item(own).sort_values("_i")
    assert summed["_i"].tolist() == [2, 3, 9]
    assert summed["_w"].tolist() == [2.0, 3.0, 0.5]
    assert summed["_wi"].tolist() == [1.5, 11.0, 0.0]
    assert summed["_hi"].tolist() == [20, 30, 90]
