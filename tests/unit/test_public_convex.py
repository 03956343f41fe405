"""SSP for convex losses (Krichene et al. 2023b, Appendix D, Algorithm 7): the losses'
derivatives, the quadratic model, the reduction to AM-SSP, validation and the release."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from userdp.data.ratings import Ratings
from userdp.data.synthetic import lowrank_ratings
from userdp.exceptions import InvalidParameterError
from userdp.multitask.kernels import segment_offsets, segment_statistics
from userdp.privacy import PrivacyAccountant, PrivacyBudget
from userdp.recommend import (
    ConvexLoss,
    FeatureFamily,
    IdEncoder,
    PublicFeatureEncoder,
    PublicFeatureRecommender,
)
from userdp.recommend.core.plans import plan_ssp_noise
from userdp.recommend.public.convex import (
    LOGISTIC,
    SQUARED,
    convex_statistics,
    quadratic_model_gradient,
    sample_negatives,
)

HUBER = ConvexLoss(
    "huber",
    value=lambda p, y: np.where(abs(p - y) <= 1, 0.5 * (p - y) ** 2, abs(p - y) - 0.5),
    grad=lambda p, y: np.clip(p - y, -1.0, 1.0),
    hess=lambda p, y: (abs(p - y) <= 1).astype(float),
    hess_bound=1.0,
    grad_bound=1.0,
)


def _encoder(n_items: int, d: int, seed: int = 3) -> PublicFeatureEncoder:
    rng = np.random.default_rng(seed)
    genres = sp.random(n_items, 5, density=0.4, random_state=seed, format="csr")
    genres.data[:] = 1.0
    year = sp.csr_matrix((np.ones(n_items), (np.arange(n_items), rng.integers(0, 4, n_items))))
    ids = sp.identity(n_items, format="csr")
    families = [FeatureFamily("genres", genres), FeatureFamily("year", year)]
    return PublicFeatureEncoder([*families, FeatureFamily("id", ids)], d, seed=seed)


def _problem(seed: int = 0, n_users: int = 25, n_items: int = 10, d: int = 3):
    rng = np.random.default_rng(seed)
    users = np.repeat(np.arange(n_users), 4)
    items = np.concatenate([rng.choice(n_items, 4, replace=False) for _ in range(n_users)])
    y = rng.integers(0, 2, users.size).astype(float)
    w = rng.uniform(0.2, 1.0, users.size)
    U = rng.normal(size=(n_users, d))
    return users, items, y, w, U, rng.uniform(0.1, 1.0, n_items)


# -- the losses -------------------------------------------------------------------------------
@pytest.mark.parametrize("loss", [SQUARED, LOGISTIC, HUBER], ids=lambda x: x.name)
def test_each_losss_derivatives_match_central_finite_differences(loss):
    rng = np.random.default_rng(1)
    p = np.concatenate([rng.normal(scale=3.0, size=40), [-30.0, 30.0]])
    p = p[np.abs(np.abs(p - 0.5) - 1.0) > 1e-3]  # away from Huber's kinks at |p - y| = 1
    y = np.full(p.size, 0.5)
    h = 1e-6
    grad_fd = (loss.value(p + h, y) - loss.value(p - h, y)) / (2 * h)
    hess_fd = (loss.grad(p + h, y) - loss.grad(p - h, y)) / (2 * h)
    np.testing.assert_allclose(loss.grad(p, y), grad_fd, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(loss.hess(p, y), hess_fd, rtol=1e-5, atol=1e-7)
    assert np.all(loss.hess(p, y) >= 0)
    if loss.hess_bound is not None:
        assert loss.hess(p, y).max() <= loss.hess_bound
    if loss.grad_bound is not None:
        assert np.abs(loss.grad(p, y)).max() <= loss.grad_bound


def test_the_logistic_loss_is_the_cross_entropy_of_the_sigmoid_and_stable_far_out():
    p, y = np.array([-800.0, -1.0, 0.0, 2.0, 800.0]), np.array([1.0, 0.0, 1.0, 1.0, 0.0])
    s = 1.0 / (1.0 + np.exp(-p[1:4]))
    ref = -(y[1:4] * np.log(s) + (1 - y[1:4]) * np.log(1 - s))
    np.testing.assert_allclose(LOGISTIC.value(p, y)[1:4], ref, rtol=1e-12)
    np.testing.assert_allclose(LOGISTIC.value(p, y)[[0, 4]], [800.0, 800.0])
    assert np.all(np.isfinite(LOGISTIC.grad(p, y))) and np.all(np.isfinite(LOGISTIC.hess(p, y)))


# -- the quadratic model ----------------------------------------------------------------------
def _true_loss(loss, encoder, params, users, items, y, w, U, ridge) -> float:
    V, _ = encoder.forward(params, None)
    p = np.einsum("nd,nd->n", U[users], V[items])
    return float(np.sum(w * loss.value(p, y)) + 0.5 * np.sum(ridge * np.sum(V * V, axis=1)))


def _model_value(params, encoder, H, g, anchor, ridge) -> float:
    """sum_j g_j.(v_j - v_j^t) + (v_j - v_j^t)^T H_j (v_j - v_j^t) / 2 + ridge_j ||v_j||^2 / 2."""
    V, _ = encoder.forward(params, None)
    delta = V - anchor
    quad = np.einsum("jd,jde,je->j", delta, H, delta)
    return float(np.sum(g * delta) + 0.5 * quad.sum() + 0.5 * np.sum(ridge * np.sum(V * V, 1)))


def _numeric_gradient(f, params, h=1e-6) -> np.ndarray:
    out = np.empty_like(params)
    for k in range(params.size):
        e = np.zeros_like(params)
        e[k] = h
        out[k] = (f(params + e) - f(params - e)) / (2 * h)
    return out


@pytest.mark.parametrize("loss", [LOGISTIC, HUBER], ids=lambda x: x.name)
def test_the_quadratic_models_gradient_matches_finite_differences_away_from_its_centre(loss):
    users, items, y, w, U, ridge = _problem(2)
    enc = _encoder(10, 3)
    anchor_params = enc.init_params()
    anchor, _ = enc.forward(anchor_params, None)
    order, offsets = segment_offsets(items, 10)
    H, g = convex_statistics(loss, U, anchor, users, items, y, w, order, offsets, None, None)
    params = anchor_params + np.random.default_rng(5).normal(scale=0.3, size=anchor_params.size)
    grad = quadratic_model_gradient(enc, params, H, g, anchor, ridge)
    numeric = _numeric_gradient(lambda q: _model_value(q, enc, H, g, anchor, ridge), params)
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("loss", [SQUARED, LOGISTIC, HUBER], ids=lambda x: x.name)
def test_at_its_centre_the_quadratic_model_has_the_true_losss_gradient(loss):
    # Proposition 3 with exact, unclipped statistics: at theta = theta^t the model's gradient
    # is the gradient of sum_i w_i l(u_i . v_j(theta), y_i) + the ridge.
    users, items, y, w, U, ridge = _problem(3)
    enc = _encoder(10, 3, seed=4)
    params = enc.init_params()
    anchor, _ = enc.forward(params, None)
    order, offsets = segment_offsets(items, 10)
    H, g = convex_statistics(loss, U, anchor, users, items, y, w, order, offsets, None, None)
    grad = quadratic_model_gradient(enc, params, H, g, anchor, ridge)
    numeric = _numeric_gradient(
        lambda q: _true_loss(loss, enc, q, users, items, y, w, U, ridge), params
    )
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-6)


def test_the_squared_losss_statistics_are_the_gram_and_the_centred_moment():
    # H_j = A_j and g_j = A_j v_j - b_j: the squared loss's quadratic model is exact.
    users, items, y, w, U, _ = _problem(4)
    V = np.random.default_rng(6).normal(size=(10, 3))
    order, offsets = segment_offsets(items, 10)
    H, g = convex_statistics(SQUARED, U, V, users, items, y, w, order, offsets, None, None)
    A, b = segment_statistics(offsets, order, users, U, w, y)
    np.testing.assert_allclose(H, A, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(g, np.einsum("jde,je->jd", A, V) - b, rtol=1e-10, atol=1e-12)


def test_clipped_statistics_equal_a_row_by_row_clip_of_each_matrix_and_vector():
    # The slow, obviously correct reference: clip every row's l'' u u^T in Frobenius norm and
    # l' u in l2 norm as matrices and vectors, then sum per item.
    users, items, y, w, U, _ = _problem(7)
    U = U * 2.0  # large enough that both clips bind on some rows and not on others
    V = np.random.default_rng(8).normal(size=(10, 3))
    h_clip, g_clip = 0.6, 1.5
    order, offsets = segment_offsets(items, 10)
    H, g = convex_statistics(LOGISTIC, U, V, users, items, y, w, order, offsets, h_clip, g_clip)
    H_ref, g_ref = np.zeros_like(H), np.zeros_like(g)
    bound = [0, 0]
    for i, (k, j) in enumerate(zip(users, items, strict=True)):
        p = np.array([U[k] @ V[j]])
        M = LOGISTIC.hess(p, y[i : i + 1])[0] * np.outer(U[k], U[k])
        v = LOGISTIC.grad(p, y[i : i + 1])[0] * U[k]
        bound[0] += np.linalg.norm(M) > h_clip
        bound[1] += np.linalg.norm(v) > g_clip
        H_ref[j] += w[i] * M * min(1.0, h_clip / np.linalg.norm(M))
        g_ref[j] += w[i] * v * min(1.0, g_clip / np.linalg.norm(v))
    assert 0 < bound[0] < users.size and 0 < bound[1] < users.size
    np.testing.assert_allclose(H, H_ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(g, g_ref, rtol=1e-12, atol=1e-12)


# -- the recommender --------------------------------------------------------------------------
@pytest.mark.parametrize("variant", ["ssp2", "minibatch", "dpsgd"])
def test_the_squared_loss_through_the_convex_path_trains_todays_am_ssp(variant):
    # Same seed, no noise (the released statistics differ once noised: g_j is centred at v^t,
    # b_j is not), no negatives: the same encoder parameters to 1e-9.
    data = lowrank_ratings(n_users=120, n_items=20, n_ratings=1400, seed=3)
    kw = dict(
        rating_range=(0.5, 5.0), steps=3, inner_steps=4, batch_items=8, variant=variant, seed=2
    )
    today = PublicFeatureRecommender(encoder=_encoder(20, 3), biases=False, **kw).fit(data)
    convex = PublicFeatureRecommender(encoder=_encoder(20, 3), loss=SQUARED, negatives=0, **kw).fit(
        data
    )
    np.testing.assert_allclose(convex.params_, today.params_, rtol=0, atol=1e-9)
    np.testing.assert_allclose(convex.item_factors_, today.item_factors_, rtol=0, atol=1e-9)
    assert convex.model_.params["loss"] == "squared" and today.model_.params["loss"] == "squared"


def _implicit(seed: int = 0) -> Ratings:
    return lowrank_ratings(n_users=150, n_items=30, n_ratings=1500, seed=seed).implicit()


def test_a_private_logistic_run_spends_its_budget_and_states_its_clips():
    data = _implicit()
    acc = PrivacyAccountant(PrivacyBudget(5.0, 1e-5))
    model = PublicFeatureRecommender(
        encoder=IdEncoder(30, 3),
        loss="logistic",
        rating_range=(0.0, 1.0),
        center=0.0,
        epsilon=5.0,
        delta=1e-5,
        items=data.item_labels,
        max_norm=0.8,
        seed=1,
    ).fit(data, accountant=acc)
    assert model.budget_.epsilon == pytest.approx(5.0, rel=1e-4)
    assert acc.spent(gaussian_delta=1e-5).epsilon == pytest.approx(5.0, rel=1e-4)
    # the same event as squared-loss SSP2: one (Gram-share, moment-share) release per step
    plan = plan_ssp_noise(PrivacyBudget(5.0, 1e-5), steps=3, center_fraction=None)
    assert model.plan_.gram == pytest.approx(plan.gram) and model.plan_.moment == plan.moment
    assert model.model_.params["hessian_clip"] == pytest.approx(0.25 * 0.8**2)
    assert model.model_.params["gradient_clip"] == pytest.approx(0.8)
    assert np.all(np.isfinite(model.item_factors_))


def test_the_logistic_model_without_noise_ranks_a_users_items_above_the_unrated():
    data = _implicit(1)
    model = PublicFeatureRecommender(
        encoder=IdEncoder(30, 4),
        loss="logistic",
        rating_range=(0.0, 1.0),
        center=0.0,
        steps=5,
        inner_steps=20,
        learning_rate=0.1,
        seed=0,
    ).fit(data)
    V = model.user_factors(data)
    scores = V @ model.item_factors_.T
    rated = np.zeros_like(scores, dtype=bool)
    rated[data.users, data.items] = True
    # AUC over all (rated, unrated) pairs of every user: well above chance
    pairs = zip(scores, rated, strict=True)
    auc = np.mean([np.mean(s[r][:, None] > s[~r][None, :]) for s, r in pairs if 0 < r.sum() < 30])
    assert auc > 0.7


def test_negatives_are_new_distinct_pairs_of_each_users_own_keys():
    rng = np.random.default_rng(0)
    users = np.repeat(np.arange(40), 6)
    items = np.concatenate([rng.choice(50, 6, replace=False) for _ in range(40)])
    keys = rng.integers(0, 2**63, users.size).astype(np.uint64)
    nu, ni = sample_negatives(users, items, 50, 1.5, keys)
    pairs = nu * 50 + ni
    assert np.unique(pairs).size == pairs.size
    assert not np.isin(pairs, users * 50 + items).any()
    assert 0.8 * 1.5 * users.size < pairs.size <= 1.5 * users.size + 40
    # dropping user 0's rows changes no other user's negatives
    keep = users != 0
    nu2, ni2 = sample_negatives(users[keep], items[keep], 50, 1.5, keys[keep])
    np.testing.assert_array_equal(nu2 * 50 + ni2, pairs[nu != 0])


# -- validation -------------------------------------------------------------------------------
_BAD_LOSS = "must be 'squared', 'logistic' or a userdp.recommend.ConvexLoss. Got 'hinge' instead."
_SSP1 = "must be 'ssp2', 'minibatch' or 'dpsgd' with loss 'logistic'"
_NO_BOUND = (
    "must be a float in the range (0, inf) for private training with loss 'squared', whose "
    "derivative states no bound. Got None instead."
)
#: (keywords, the parameter named, the rest of the message)
BAD = [
    ({"loss": "hinge"}, "loss", _BAD_LOSS),
    (
        {"loss": "logistic", "hessian_clip": 0.0},
        "hessian_clip",
        "must be a float in the range (0, inf). Got 0.0 instead.",
    ),
    (
        {"loss": "logistic", "gradient_clip": -1.0},
        "gradient_clip",
        "must be a float in the range (0, inf). Got -1.0 instead.",
    ),
    (
        {"loss": "logistic", "negatives": -0.5},
        "negatives",
        "must be a float in the range [0, inf). Got -0.5 instead.",
    ),
    ({"loss": "logistic", "variant": "ssp1"}, "variant", _SSP1),
    ({"loss": SQUARED, "epsilon": 1.0, "delta": 1e-5}, "gradient_clip", _NO_BOUND),
]


@pytest.mark.parametrize(("kw", "name", "rest"), BAD)
def test_bad_loss_and_clip_parameters_are_refused_in_the_house_format(kw, name, rest):
    message = f"The {name!r} parameter of PublicFeatureRecommender {rest}"
    data = _implicit()
    model = PublicFeatureRecommender(
        encoder=IdEncoder(30, 2),
        rating_range=(0.0, 1.0),
        center=0.0,
        items=data.item_labels,
        **kw,
    )
    with pytest.raises(InvalidParameterError, match=f"^{_escape(message)}"):
        model.fit(data)


def _escape(text: str) -> str:
    import re

    return re.escape(text)


@pytest.mark.parametrize(
    ("kw", "name"),
    [
        ({"hess_bound": -1.0}, "hess_bound"),
        ({"grad_bound": 0.0}, "grad_bound"),
        ({"grad": 3.0}, "grad"),
        ({"name": ""}, "name"),
    ],
)
def test_a_convex_loss_with_bad_parts_is_refused_when_built(kw, name):
    parts = dict(name="x", value=SQUARED.value, grad=SQUARED.grad, hess=SQUARED.hess)
    with pytest.raises(InvalidParameterError, match=f"^The '{name}' parameter of ConvexLoss must"):
        ConvexLoss(**{**parts, **kw})


def test_a_loss_with_negative_curvature_is_refused_when_trained():
    concave = ConvexLoss(
        "concave",
        value=lambda p, y: -(p**2),
        grad=lambda p, y: -2 * p,
        hess=lambda p, y: np.full(np.shape(p), -2.0),
    )
    data = _implicit()
    model = PublicFeatureRecommender(encoder=IdEncoder(30, 2), loss=concave, seed=0)
    with pytest.raises(InvalidParameterError, match="l'' >= 0"):
        model.fit(data)


def test_biases_are_off_by_default_and_refused_when_asked_for_with_a_convex_loss():
    # Algorithm 7's path has no bias coordinate: "auto" resolves to off for it, True is an error
    # raised before anything is read or charged.
    data = _implicit()
    model = PublicFeatureRecommender(encoder=IdEncoder(30, 2), loss="logistic", seed=0)
    assert model._biased is False and model.fit(data).item_biases_ is None
    accountant = PrivacyAccountant(PrivacyBudget(10.0, 1e-5))
    forced = PublicFeatureRecommender(
        encoder=IdEncoder(30, 2),
        loss="logistic",
        biases=True,
        epsilon=1.0,
        delta=1e-6,
        items=data.item_labels,
        rating_range=(0.0, 1.0),
        seed=0,
    )
    with pytest.raises(InvalidParameterError, match=r"^The 'biases' parameter of Public"):
        forced.fit(data, accountant=accountant)
    assert accountant.ledger == ()  # nothing charged


# -- the release on neighbouring datasets -----------------------------------------------------
def test_an_added_users_items_outside_the_item_set_are_never_trained_or_released():
    data = _implicit(2)
    catalogue = data.item_labels.to_pylist()
    users = [str(u) for u in data.user_labels.take(data.users).to_pylist()]
    items = [str(i) for i in data.item_labels.take(data.items).to_pylist()]
    catalogue = [str(i) for i in catalogue]
    data = Ratings.from_columns(users, items, list(data.values))
    both = Ratings.from_columns(
        [*users, "intruder", "intruder", "intruder"],
        [*items, "secret-1", "secret-2", catalogue[0]],
        [*data.values, 1.0, 1.0, 1.0],
    )
    for r in (data, both):
        model = PublicFeatureRecommender(
            encoder=IdEncoder(len(catalogue), 3),
            loss="logistic",
            rating_range=(0.0, 1.0),
            center=0.0,
            items=catalogue,
            epsilon=2.0,
            delta=1e-5,
            seed=4,
        ).fit(r)
        released = model.model_.item_labels.to_pylist()
        assert released == catalogue and model.item_factors_.shape[0] == len(catalogue)
        assert not {"secret-1", "secret-2"} & set(released)
        assert model.diagnostics_["ratings_outside_item_set"] == (2 if r is both else 0)
