"""MatrixFactorization.fit's engine keyword and the local runner: the Spark engine's
own tests are in tests/spark/test_recommend_spark.py."""

from __future__ import annotations

import numpy as np
import pytest

from userdp.data.synthetic import lowrank_ratings
from userdp.exceptions import InvalidParameterError
from userdp.multitask.kernels import segment_statistics_reference
from userdp.recommend import MatrixFactorization
from userdp.recommend.engines.local import LocalRunner, UserSolve


@pytest.fixture(scope="module")
def data():
    return lowrank_ratings(n_users=40, n_items=9, n_ratings=200, seed=2)


def _model(data, method="adadpals", **extra):
    return MatrixFactorization(
        method=method,
        items=data.item_labels,
        dim=2,
        steps=1,
        rating_range=(0.5, 5.0),
        epsilon=2.0,
        delta=1e-5,
        seed=0,
        **extra,
    )


def test_engine_must_be_one_of_the_engines(data):
    model = _model(data)
    with pytest.raises(InvalidParameterError, match="The 'engine' parameter of Matrix"):
        model.fit(data, engine="gpu")
    assert not hasattr(model, "model_")


def test_auto_and_local_engines_give_the_same_model(data):
    a = _model(data).fit(data)
    b = _model(data).fit(data, engine="local")
    np.testing.assert_array_equal(a.item_factors_, b.item_factors_)


def test_local_runner_item_statistics_match_a_plain_loop(data):
    """A_i = sum_j w_ij x_j x_j^T and b_i = sum_j w_ij t_ij x_j, x_j = [clip(v_j), beta]."""
    rng = np.random.default_rng(0)
    users, items = data.users, data.items
    y = rng.normal(size=users.size)
    w = rng.uniform(0.0, 0.3, size=users.size)
    runner = LocalRunner.from_codes(users, items, y, w, data.n_users, data.n_items)
    U = rng.normal(size=(data.n_items, 3))
    runner.solve_users(U, UserSolve(2, True, 0.5, 0.0, 1.0, 1.5), reg=0.1)
    gram, moment = runner.item_statistics(weighted=True)
    V = runner.V
    assert np.all(np.linalg.norm(V[:, :2], axis=1) <= 1.0 + 1e-12)
    assert np.all(V[:, 2] == 0.5)
    assert np.all(np.abs(runner.target) <= 1.5)
    ref_a, ref_b = segment_statistics_reference(items, data.n_items, users, V, w, runner.target)
    np.testing.assert_allclose(gram, ref_a, atol=1e-12)
    np.testing.assert_allclose(moment, ref_b, atol=1e-12)
    np.testing.assert_allclose(runner.gravity(), V.T @ V)
