"""The implicit library's call forms on the released model: ``recommend(userid, user_items, N)``
and ``similar_items(itemid, N)`` return ``(ids, scores)`` arrays of shape (N,) for one id and
(n, N) for an array, and take CSR user histories; old call forms fail with a one-line message."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import sparse

from userdp.data.synthetic import lowrank_ratings
from userdp.exceptions import InvalidParameterError
from userdp.recommend import IdEncoder, MatrixFactorization, PublicFeatureRecommender


@pytest.fixture(scope="module")
def fitted():
    data = lowrank_ratings(n_users=60, n_items=25, n_ratings=600, seed=4)
    model = MatrixFactorization(method="als", dim=3, steps=2, rating_range=(0.5, 5.0), seed=0)
    return data, model.fit(data)


def _csr(data, model):
    codes = model.item_codes(data.item_labels)[data.items]
    return sparse.csr_matrix(
        (data.values, (data.users, codes)), shape=(data.n_users, model.model_.n_items)
    )


def test_recommend_shapes_for_a_scalar_and_an_array(fitted):
    data, model = fitted
    ids, scores = model.recommend(3, data, N=5)
    assert ids.shape == scores.shape == (5,) and ids.dtype == np.int64
    ids2, scores2 = model.recommend(np.array([3, 7, 9]), data, N=5)
    assert ids2.shape == scores2.shape == (3, 5)
    np.testing.assert_array_equal(ids2[0], ids)
    np.testing.assert_allclose(scores2[0], scores)
    assert np.all(np.diff(scores2, axis=1) <= 0)


def test_a_csr_history_gives_what_the_table_gives_and_filters_rated_items(fitted):
    data, model = fitted
    csr = _csr(data, model)
    users = np.array([0, 5, 11])
    a_ids, a_scores = model.recommend(users, data, N=6)
    b_ids, b_scores = model.recommend(users, csr, N=6)
    np.testing.assert_array_equal(a_ids, b_ids)
    np.testing.assert_allclose(a_scores, b_scores, rtol=1e-10)
    for row, u in zip(b_ids, users, strict=True):
        assert not set(row.tolist()) & set(csr[u].indices.tolist())
    # Without the filter, rated items may come back; the best score is the unfiltered max.
    _, scores = model.recommend(0, csr, N=1, filter_already_liked_items=False)
    V, c = model.user_factors(data), model.model_.user_biases(data)
    full = V[0] @ model.item_factors_.T + model.item_biases_ + c[0]
    assert scores[0] == pytest.approx(full.max())


def test_similar_items_shapes_and_the_item_itself_excluded(fitted):
    _, model = fitted
    ids, scores = model.similar_items(2, N=4)
    assert ids.shape == scores.shape == (4,) and 2 not in ids
    ids2, _ = model.similar_items([2, 6], N=4)
    assert ids2.shape == (2, 4)
    np.testing.assert_array_equal(ids2[0], ids)


def test_old_call_forms_fail_with_a_one_line_message_naming_the_new_one(fitted):
    data, model = fitted
    with pytest.raises(InvalidParameterError, match=r"now recommend\(userid, user_items\)") as e:
        model.recommend(data, np.arange(3))
    assert "\n" not in str(e.value)
    for call in (
        lambda: model.recommend(data, users=np.arange(3), N=2),
        lambda: model.recommend(data),
    ):
        with pytest.raises(InvalidParameterError, match=r"now recommend\(userid, user_items\)"):
            call()
    with pytest.raises(InvalidParameterError, match=r"similar_items\(model.item_codes\(ids\)\)"):
        model.similar_items(["a label"])
    with pytest.raises(InvalidParameterError, match="userid must be"):
        model.recommend(10_000, data)


def test_implicit_data_turn_the_public_recommenders_auto_biases_off():
    data = lowrank_ratings(n_users=40, n_items=10, n_ratings=250, seed=1)
    kw = dict(encoder=IdEncoder(10, 2), items=data.item_labels, steps=1, seed=0)
    explicit = PublicFeatureRecommender(rating_range=(0.5, 5.0), **kw).fit(data)
    implicit = PublicFeatureRecommender(rating_range=(0.5, 5.0), implicit=True, **kw).fit(data)
    assert explicit.item_biases_ is not None and implicit.item_biases_ is None
