"""Public item encoders: exact VJPs, gradient sparsity, flat parameter blocks, input checks."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import sparse

from userdp.exceptions import DataError, InvalidParameterError
from userdp.recommend.public.encoders import (
    FeatureFamily,
    IdEncoder,
    ItemEncoder,
    PublicFeatureEncoder,
)

N_ITEMS = 7


def random_family(name: str, n_values: int, seed: int, empty_rows=(2,)) -> FeatureFamily:
    """Random nonnegative bag-of-words counts, with the given rows left empty."""
    rng = np.random.default_rng(seed)
    dense = rng.integers(1, 3, size=(N_ITEMS, n_values)) * (rng.random((N_ITEMS, n_values)) < 0.5)
    dense[list(empty_rows)] = 0
    dense[0, 0] = 1  # at least one active value
    return FeatureFamily(name, sparse.csr_matrix(dense.astype(float)))


def families() -> list[FeatureFamily]:
    year = np.zeros((N_ITEMS, 4))
    year[np.arange(N_ITEMS), [0, 1, 1, 3, 0, 2, 3]] = 1.0  # univalent one-hot
    return [
        FeatureFamily("year", sparse.csr_matrix(year)),
        random_family("genres", 5, seed=1, empty_rows=(2, 4)),
        random_family("tags", 6, seed=2, empty_rows=(5,)),
    ]


def central_differences(fn, params: np.ndarray, eps: float) -> np.ndarray:
    """Independent reference: d fn / d params_k = (fn(p + eps e_k) - fn(p - eps e_k)) / 2 eps."""
    grad = np.empty_like(params)
    for k in range(params.size):
        up, down = params.copy(), params.copy()
        up[k] += eps
        down[k] -= eps
        grad[k] = (fn(up) - fn(down)) / (2 * eps)
    return grad


def perturbed(encoder, seed: int = 3) -> np.ndarray:
    """Initial parameters with a non-zero bias, so that every block matters."""
    rng = np.random.default_rng(seed)
    return encoder.init_params() + 0.3 * rng.standard_normal(encoder.n_params)


ITEM_SETS = [None, np.array([0, 3, 3, 5, 2, 3]), np.array([4]), np.array([], dtype=int)]


# -- VJP against finite differences --------------------------------------------------------------
@pytest.mark.parametrize("items", ITEM_SETS, ids=["all", "repeats", "one", "none"])
@pytest.mark.parametrize("activation", ["linear", "tanh"])
def test_feature_encoder_vjp_matches_central_differences(items, activation):
    enc = PublicFeatureEncoder(families(), dim=3, family_dim=2, activation=activation)
    params = perturbed(enc)
    n = N_ITEMS if items is None else len(items)
    g = np.random.default_rng(4).standard_normal((n, 3))

    def objective(theta):  # sum_j <g_j, v_j(theta)>
        return float(np.sum(g * enc.forward(theta, items)[0]))

    _, cache = enc.forward(params, items)
    got = enc.vjp(params, items, cache, g)
    np.testing.assert_allclose(got, central_differences(objective, params, 1e-5), atol=1e-8)


@pytest.mark.parametrize("items", ITEM_SETS, ids=["all", "repeats", "one", "none"])
def test_id_encoder_vjp_matches_central_differences(items):
    enc = IdEncoder(N_ITEMS, 3)
    params = perturbed(enc)
    n = N_ITEMS if items is None else len(items)
    g = np.random.default_rng(5).standard_normal((n, 3))

    def objective(theta):
        return float(np.sum(g * enc.forward(theta, items)[0]))

    got = enc.vjp(params, items, enc.forward(params, items)[1], g)
    np.testing.assert_allclose(got, central_differences(objective, params, 1e-5), atol=1e-8)


def test_vjp_with_quadratic_residuals_is_the_ssp_gradient():
    # eq. (4): grad of sum_j 1/2 v_j^T A_j v_j - b_j^T v_j is sum_j J_j^T (A_j v_j - b_j).
    enc = PublicFeatureEncoder(families(), dim=3)
    params, items = perturbed(enc), np.array([1, 3, 6, 3])
    rng = np.random.default_rng(6)
    half = rng.standard_normal((4, 3, 3))
    A, b = half @ half.transpose(0, 2, 1), rng.standard_normal((4, 3))

    def loss(theta):
        v = enc.forward(theta, items)[0]
        return float(0.5 * np.einsum("jd,jde,je->", v, A, v) - np.sum(b * v))

    v, cache = enc.forward(params, items)
    residual = np.einsum("jde,je->jd", A, v) - b
    got = enc.vjp(params, items, cache, residual)
    np.testing.assert_allclose(got, central_differences(loss, params, 1e-6), rtol=1e-6, atol=1e-7)


def test_vjp_without_cache_recomputes_the_forward_pass():
    enc = PublicFeatureEncoder(families(), dim=3, activation="tanh")
    params, items = perturbed(enc), np.array([6, 0, 6])
    g = np.ones((3, 3))
    np.testing.assert_array_equal(
        enc.vjp(params, items, None, g), enc.vjp(params, items, enc.forward(params, items)[1], g)
    )


def test_forward_of_all_items_equals_forward_of_every_index():
    enc = PublicFeatureEncoder(families(), dim=3)
    params = perturbed(enc)
    everything = np.arange(N_ITEMS)
    np.testing.assert_allclose(enc.forward(params)[0], enc.forward(params, everything)[0])
    g = np.random.default_rng(7).standard_normal((N_ITEMS, 3))
    np.testing.assert_allclose(
        enc.vjp(params, None, None, g), enc.vjp(params, everything, None, g), atol=1e-14
    )


# -- Averaging and the id special case ------------------------------------------------------------
def selecting_kernel(enc: PublicFeatureEncoder, family: int) -> np.ndarray:
    """Parameters with W = [0; I; 0] picking one family's part of h, and c = 0."""
    params = enc.init_params()
    blocks = enc.blocks(params)
    blocks["dense/kernel"][...] = 0.0
    rows = slice(family * enc.family_dim, (family + 1) * enc.family_dim)
    blocks["dense/kernel"][rows] = np.eye(enc.dim)
    return params


def test_family_embedding_is_the_weighted_average_of_value_embeddings():
    counts = sparse.csr_matrix([[2.0, 1.0, 0.0], [0.0, 0.0, 0.5], [0.0, 0.0, 0.0]])
    enc = PublicFeatureEncoder([FeatureFamily("persons", counts)], dim=2)
    params = selecting_kernel(enc, 0)
    E = enc.blocks(params)["embedding/persons"]
    v, _ = enc.forward(params)
    np.testing.assert_allclose(v[0], (2 * E[0] + E[1]) / 3)
    np.testing.assert_allclose(v[1], E[2])


def test_row_summing_to_zero_gives_zero_family_embedding():
    fams = families()
    enc = PublicFeatureEncoder(fams, dim=3)
    params = selecting_kernel(enc, 1)  # v_j = h_genres,j
    empty = np.flatnonzero(np.asarray(fams[1].matrix.sum(axis=1)).ravel() == 0)
    assert set(empty) == {2, 4}
    v, _ = enc.forward(params, np.array([2, 4, 0]))
    assert np.all(v[:2] == 0.0)
    assert np.any(v[2] != 0.0)


def test_identity_family_with_identity_kernel_is_the_id_encoder():
    enc = PublicFeatureEncoder(
        [FeatureFamily("id", sparse.identity(N_ITEMS, format="csr"))], dim=4, family_dim=4
    )
    params = enc.init_params()
    blocks = enc.blocks(params)
    blocks["dense/kernel"][...] = np.eye(4)
    blocks["dense/bias"][...] = 0.0
    table = blocks["embedding/id"]
    np.testing.assert_array_equal(enc.forward(params)[0], table)

    ids = IdEncoder(N_ITEMS, 4)
    items = np.array([3, 1, 3])
    g = np.random.default_rng(8).standard_normal((3, 4))
    id_params = table.ravel().copy()
    np.testing.assert_array_equal(enc.forward(params, items)[0], ids.forward(id_params, items)[0])
    np.testing.assert_allclose(
        enc.blocks(enc.vjp(params, items, None, g))["embedding/id"].ravel(),
        ids.vjp(id_params, items, None, g),
    )


# -- Sparsity: values and items not given get exactly zero gradient --------------------------------
def test_values_absent_from_the_items_get_exactly_zero_gradient():
    fams = families()
    enc = PublicFeatureEncoder(fams, dim=3, family_dim=2, activation="tanh")
    params, items = perturbed(enc), np.array([1, 3, 3])
    g = np.random.default_rng(9).standard_normal((3, 3))
    grad = enc.blocks(enc.vjp(params, items, None, g))
    for fam in fams:
        active = np.asarray(fam.matrix[items].sum(axis=0)).ravel() > 0
        rows = grad[f"embedding/{fam.name}"]
        assert np.all(rows[~active] == 0.0), fam.name
        assert np.all(np.any(rows[active] != 0.0, axis=1)), fam.name
        assert (~active).any()  # the check above is not vacuous


def test_id_encoder_rows_of_items_not_given_get_exactly_zero_gradient():
    enc = IdEncoder(N_ITEMS, 3)
    items = np.array([5, 0, 5])
    g = np.arange(9.0).reshape(3, 3) + 1
    grad = enc.blocks(enc.vjp(enc.init_params(), items, None, g))["embedding"]
    np.testing.assert_array_equal(grad[[1, 2, 3, 4, 6]], 0.0)
    np.testing.assert_array_equal(grad[5], g[0] + g[2])
    np.testing.assert_array_equal(grad[0], g[1])


# -- Flat parameters and blocks -------------------------------------------------------------------
def test_blocks_are_views_that_tile_the_parameter_vector():
    enc = PublicFeatureEncoder(families(), dim=3, family_dim=2)
    params = enc.init_params()
    blocks = enc.blocks(params)
    embeddings = ["embedding/year", "embedding/genres", "embedding/tags"]
    assert list(blocks) == [*embeddings, "dense/kernel", "dense/bias"]
    assert blocks["embedding/genres"].shape == (5, 2)
    assert blocks["dense/kernel"].shape == (6, 3)
    assert sum(b.size for b in blocks.values()) == enc.n_params == params.size
    for block in blocks.values():
        assert np.shares_memory(block, params)
    blocks["dense/bias"][1] = 42.0
    assert params[-2] == 42.0
    blocks["embedding/year"][0, 0] = -7.0
    assert params[0] == -7.0


def test_id_encoder_blocks_are_views():
    enc = IdEncoder(5, 2)
    params = enc.init_params()
    enc.blocks(params)["embedding"][4, 1] = 3.0
    assert params[-1] == 3.0 and enc.n_params == 10


def test_initialisation_depends_only_on_shapes_and_seed():
    a = PublicFeatureEncoder(families(), dim=3)
    other = [FeatureFamily(f.name, np.ones(f.matrix.shape)) for f in families()]  # same shapes
    b = PublicFeatureEncoder(other, dim=3)
    np.testing.assert_array_equal(a.init_params(), b.init_params())
    np.testing.assert_array_equal(a.init_params(), a.init_params())
    c = PublicFeatureEncoder(families(), dim=3, seed=1)
    assert not np.array_equal(a.init_params(), c.init_params())
    assert np.all(a.blocks(a.init_params())["dense/bias"] == 0.0)


def test_both_encoders_satisfy_the_item_encoder_protocol():
    feat = PublicFeatureEncoder(families(), dim=3)
    ids = IdEncoder(N_ITEMS, 3)
    for enc in (feat, ids):
        assert isinstance(enc, ItemEncoder)
        assert (enc.n_items, enc.dim) == (N_ITEMS, 3)
        assert enc.init_params().shape == (enc.n_params,)
        assert enc.init_params().dtype == np.float64


# -- Bad input ------------------------------------------------------------------------------------
def test_feature_family_rejects_negative_weights():
    m = sparse.csr_matrix([[1.0, 0.0], [0.0, -2.0]])
    with pytest.raises(DataError, match=r"'genres' has weight -2.0 at row 1, column 1"):
        FeatureFamily("genres", m)


@pytest.mark.parametrize(
    ("name", "matrix", "error", "match"),
    [
        ("g", sparse.csr_matrix([[np.nan, 1.0]]), DataError, "must be finite and >= 0"),
        ("g", sparse.csr_matrix((0, 3)), DataError, "at least one row"),
        ("", sparse.csr_matrix([[1.0]]), InvalidParameterError, "'name' parameter"),
        ("g", [[1.0]], InvalidParameterError, "scipy sparse matrix or a 2-D ndarray"),
        ("g", np.ones(3), InvalidParameterError, "must be 2-D"),
    ],
)
def test_feature_family_rejects_bad_input(name, matrix, error, match):
    with pytest.raises(error, match=match):
        FeatureFamily(name, matrix)


def test_feature_family_stores_a_canonical_float_csr_copy():
    dense = np.array([[1, 0, 2], [0, 0, 0]])
    fam = FeatureFamily("tags", dense)
    assert isinstance(fam.matrix, sparse.csr_matrix) and fam.matrix.dtype == np.float64
    assert (fam.n_items, fam.n_values, fam.matrix.nnz) == (2, 3, 2)
    assert "n_values=3" in repr(fam)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"families": []}, InvalidParameterError, "non-empty sequence of FeatureFamily"),
        ({"families": ["year"]}, InvalidParameterError, "non-empty sequence of FeatureFamily"),
        ({"dim": 0}, InvalidParameterError, "'dim' parameter of PublicFeatureEncoder"),
        ({"family_dim": 0}, InvalidParameterError, "'family_dim' parameter"),
        ({"init_scale": -1.0}, InvalidParameterError, "'init_scale' parameter"),
        ({"seed": -1}, InvalidParameterError, "'seed' parameter"),
        ({"activation": "relu"}, InvalidParameterError, "'activation' parameter"),
    ],
)
def test_feature_encoder_rejects_bad_parameters(kwargs, error, match):
    args = {"families": families(), "dim": 3, **kwargs}
    with pytest.raises(error, match=match):
        PublicFeatureEncoder(**args)


def test_feature_encoder_rejects_inconsistent_families():
    a, b = families()[:2]
    with pytest.raises(InvalidParameterError, match="distinct names"):
        PublicFeatureEncoder([a, FeatureFamily(a.name, b.matrix)], dim=2)
    short = FeatureFamily("short", sparse.csr_matrix(np.ones((3, 2))))
    with pytest.raises(DataError, match="one row per item"):
        PublicFeatureEncoder([a, short], dim=2)


@pytest.mark.parametrize(
    "make", [lambda: PublicFeatureEncoder(families(), dim=3), lambda: IdEncoder(N_ITEMS, 3)]
)
def test_encoders_reject_bad_items_params_and_cotangents(make):
    enc = make()
    params = enc.init_params()
    name = type(enc).__name__
    with pytest.raises(InvalidParameterError, match=r"range \[0, 6\]. Got 7 at position 1"):
        enc.forward(params, np.array([0, 7]))
    with pytest.raises(InvalidParameterError, match=r"Got -1 at position 0"):
        enc.forward(params, [-1])
    with pytest.raises(InvalidParameterError, match="1-D array of ints"):
        enc.forward(params, np.array([0.0, 1.0]))
    with pytest.raises(InvalidParameterError, match="1-D array of ints"):
        enc.forward(params, np.array([[0, 1]]))
    with pytest.raises(InvalidParameterError, match=f"'params' parameter of {name}.forward"):
        enc.forward(params[:-1])
    with pytest.raises(InvalidParameterError, match=f"'params' parameter of {name}.blocks"):
        enc.blocks(list(params))
    items = np.array([1, 2])
    _, cache = enc.forward(params, items)
    with pytest.raises(InvalidParameterError, match=r"shape \(2, 3\), one row per item"):
        enc.vjp(params, items, cache, np.ones((2, 2)))
    with pytest.raises(InvalidParameterError, match="computed by forward for other items"):
        enc.vjp(params, np.array([2, 1]), cache, np.ones((2, 3)))
    with pytest.raises(InvalidParameterError, match="cache returned by"):
        enc.vjp(params, items, object(), np.ones((2, 3)))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"n_items": 0}, "'n_items' parameter of IdEncoder"), ({"dim": 1.5}, "'dim' parameter")],
)
def test_id_encoder_rejects_bad_parameters(kwargs, match):
    with pytest.raises(InvalidParameterError, match=match):
        IdEncoder(**{"n_items": 3, "dim": 2, **kwargs})
