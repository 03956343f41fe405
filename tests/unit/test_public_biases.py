"""Private user and item biases in PublicFeatureRecommender: the item biases
come from one more encoder output and ride in the same releases as the factors (same weights,
noise multipliers and accounting), the user biases are solved from each user's own ratings and
never released; ``biases=False`` is the earlier training."""

from __future__ import annotations

import dp_accounting
import numpy as np
import pytest
import scipy.sparse as sp
from bias_data import pure_biases, ratings_table
from dp_accounting import pld

import userdp.recommend.public.estimator as public_module
import userdp.recommend.public.training as training_module
from helpers import recording_noise
from userdp.data.ratings import Ratings
from userdp.data.synthetic import lowrank_ratings
from userdp.exceptions import InvalidParameterError
from userdp.multitask.kernels import segment_statistics
from userdp.privacy import PrivacyBudget
from userdp.recommend import (
    FeatureFamily,
    IdEncoder,
    PublicFeatureEncoder,
    PublicFeatureRecommender,
    RecommenderModel,
)
from userdp.recommend.core.plans import plan_ssp_noise
from userdp.recommend.public.steps import BiasedEncoder, item_bias_encoder, ssp_gradient

RARE, WHO = "rare-title-42", "carol-secret-user"
VARIANTS = ("ssp2", "ssp1", "minibatch", "dpsgd")


def _families(n_items: int, seed: int = 3) -> list[FeatureFamily]:
    rng = np.random.default_rng(seed)
    genres = sp.csr_matrix((rng.random((n_items, 5)) < 0.4).astype(float))
    ids = FeatureFamily("id", sp.identity(n_items, format="csr"))
    return [FeatureFamily("genres", genres), ids]


# -- the encoder of the bias coordinate ----------------------------------------------------------
@pytest.mark.parametrize("kind", ["id", "features"])
def test_the_biased_encoders_vjp_is_the_gradient_of_its_forward_pass(kind):
    n = 9
    factors = IdEncoder(n, 3) if kind == "id" else PublicFeatureEncoder(_families(n), 3, seed=1)
    enc = BiasedEncoder(factors, item_bias_encoder(factors))
    assert (enc.dim, enc.n_items) == (4, n)
    rng = np.random.default_rng(0)
    params = enc.init_params() + rng.normal(0, 0.3, enc.n_params)
    items = np.array([0, 3, 3, 8])
    g = rng.normal(size=(items.size, 4))
    v, cache = enc.forward(params, items)
    np.testing.assert_array_equal(v[:, :3], factors.forward(params[: factors.n_params], items)[0])
    grad = enc.vjp(params, items, cache, g)
    # Central differences of sum <g, v(params)> (linear encoders: exact up to rounding).
    eps = 1e-6
    fd = np.empty(enc.n_params)
    for k in range(enc.n_params):
        e = np.zeros(enc.n_params)
        e[k] = eps
        up, down = enc.forward(params + e, items)[0], enc.forward(params - e, items)[0]
        fd[k] = np.sum(g * (up - down)) / (2 * eps)
    np.testing.assert_allclose(grad, fd, atol=1e-7)
    np.testing.assert_array_equal(enc.vjp(params, items, None, g), grad)


def test_the_bias_of_a_feature_encoder_is_a_linear_model_of_the_public_features():
    fam = FeatureFamily("genres", sp.csr_matrix([[1.0, 0, 0], [0, 1.0, 0], [1.0, 1.0, 0]]))
    bias = item_bias_encoder(PublicFeatureEncoder([fam], 4, seed=0))
    assert bias.dim == 1 and bias.family_dim == 1
    params = np.random.default_rng(1).normal(size=bias.n_params)
    z = bias.forward(params, None)[0][:, 0]
    # Item 2 holds both genres: its bias is the average of the two one-genre items'.
    assert z[2] == pytest.approx((z[0] + z[1]) / 2)
    assert isinstance(item_bias_encoder(IdEncoder(5, 2)), IdEncoder)
    with pytest.raises(InvalidParameterError, match="1 column"):
        BiasedEncoder(IdEncoder(5, 2), IdEncoder(5, 2))


# -- training ------------------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore:epsilon=10000.0 gives a very weak guarantee")
@pytest.mark.parametrize("variant", VARIANTS)
def test_biases_recover_pure_bias_data_better_than_the_global_mean(variant):
    users, items, values, b = pure_biases()
    test = np.random.default_rng(1).random(users.size) < 0.2
    train = ratings_table(users[~test], items[~test], values[~test])
    catalogue = [f"i{i}" for i in range(b.size)]
    model = PublicFeatureRecommender(
        encoder=IdEncoder(b.size, 2),
        items=catalogue,
        variant=variant,
        steps=4,
        inner_steps=10,
        batch_items=20,
        rating_range=(0.5, 5.0),
        biases=True,
        reg=1e-3,
        noise_reg=0.0,
        seed=0,
        epsilon=1e4,
        delta=1e-5,
    ).fit(train)
    codes = {u: k for k, u in enumerate(train.user_labels.to_pylist())}
    rows = np.array([codes[f"u{u}"] for u in users[test]])
    pred = model.predict(train, rows, [f"i{i}" for i in items[test]])
    rmse = np.sqrt(np.mean((pred - values[test]) ** 2))
    baseline = np.sqrt(np.mean((values[~test].mean() - values[test]) ** 2))
    assert rmse < 0.2 * baseline, (rmse, baseline)
    # The released item biases are the planted ones up to the centre's shift.
    released = model.item_biases_[model.item_codes(catalogue)]
    assert np.corrcoef(released, b)[0, 1] > 0.95


@pytest.mark.parametrize("variant", VARIANTS)
def test_biases_spend_the_same_budget_checked_by_an_independent_composition(monkeypatch, variant):
    users, items, values, b = pure_biases(n_users=150, n_items=20)
    data = ratings_table(users, items, values)
    delta = 1e-5
    runs = {}
    for biases in (False, True):
        log: list[tuple[str, float, float]] = []
        monkeypatch.setattr(public_module, "NoiseSource", recording_noise(log))
        model = PublicFeatureRecommender(
            encoder=IdEncoder(b.size, 3),
            items=[f"i{i}" for i in range(b.size)],
            variant=variant,
            steps=2,
            inner_steps=3,
            rating_range=(0.5, 5.0),
            biases=biases,
            max_norm=0.8,
            epsilon=1.5,
            delta=delta,
            seed=0,
        ).fit(data)
        runs[biases] = (model, log)
    (plain, log0), (biased, log1) = runs[False], runs[True]
    assert plain.item_biases_ is None and biased.item_biases_.shape == (b.size,)
    assert [s for s, _, _ in log0] == [s for s, _, _ in log1]
    # The bias coordinate rides in the same releases: same noise multipliers sigma / l2 ...
    np.testing.assert_allclose([s / l2 for _, s, l2 in log1], [s / l2 for _, s, l2 in log0])
    # ... with the larger stated bound of [u, max_norm] where the factors enter.
    for (stat, _, l0), (_, _, l1) in zip(log0, log1, strict=True):
        if stat == "item gram":
            assert l1 == pytest.approx(2 * l0)
        elif stat == "item moment":
            assert l1 == pytest.approx(np.sqrt(2) * l0)
        else:  # counts, centre, encoder gradient (clip_norm)
            assert l1 == l0
    assert biased.dp_event_ == plain.dp_event_
    acc = pld.PLDAccountant(value_discretization_interval=1e-4)
    for _, sigma, l2 in log1:
        acc.compose(dp_accounting.GaussianDpEvent(sigma / l2))
    assert acc.get_epsilon(delta) == pytest.approx(biased.budget_.epsilon, rel=2e-3)
    assert biased.budget_.epsilon <= 1.5 + 1e-9


@pytest.mark.parametrize("variant", ["ssp2", "ssp1"])
def test_the_noise_scaled_ridge_uses_the_biased_bound_and_dimension(variant, monkeypatch):
    # noise_reg * sigma * n^2 * sqrt(d + 1), n^2 = 2 max_norm^2: the spectral size of the
    # Gram noise of the (d + 1)-dimensional statistics (as MatrixFactorization's).
    seen = []

    def spy(encoder, params, gram, moment, ridge, items=None):
        seen.append(ridge.copy())
        return ssp_gradient(encoder, params, gram, moment, ridge, items)

    monkeypatch.setattr(training_module, "ssp_gradient", spy)
    data = lowrank_ratings(n_users=150, n_items=20, n_ratings=2000, seed=3)
    d, inner, noise_reg, reg, max_norm = 3, 4, 2.0, 0.05, 0.8
    model = PublicFeatureRecommender(
        encoder=IdEncoder(20, d),
        variant=variant,
        steps=2,
        inner_steps=inner,
        reg=reg,
        noise_reg=noise_reg,
        max_norm=max_norm,
        rating_range=(0.5, 5.0),
        seed=0,
        biases=True,
        items=data.item_labels,
        epsilon=2.0,
        delta=1e-5,
    ).fit(data)
    single = plan_ssp_noise(PrivacyBudget(2.0, 1e-5), steps=2, releases_per_step=1)
    expected = reg * np.maximum(model.item_counts_, 1.0) + (
        noise_reg * single.gram * 2 * max_norm**2 * np.sqrt(d + 1)
    )
    assert len(seen) == 2 * inner
    # The factor coordinates keep this ridge; the bias column's is the prior's (own test).
    np.testing.assert_allclose(seen[0][:, :d], np.repeat(expected[:, None], d, 1), rtol=2e-3)


def test_with_biases_every_users_change_of_the_moments_stays_within_sqrt2_max_norm_clip(
    monkeypatch,
):
    # The targets y - c_u are clipped to rating_clip c whatever the user bias c_u is, and the
    # user vectors [u, max_norm] have norm <= sqrt(2) max_norm: checked user by user on the
    # statistics fit() computes, and the noise is calibrated to that bound.
    stats, releases = [], []

    def spy_stats(offsets, order, users, U, w, y):
        if w is not None:  # the item statistics (the user solves pass no weights)
            stats.append((users.copy(), U.copy(), w.copy(), y.copy()))
        return segment_statistics(offsets, order, users, U, w, y)

    real = training_module.perturb_statistics

    def spy_release(gram, moment, **kw):
        releases.append(kw)
        return real(gram, moment, **kw)

    monkeypatch.setattr(public_module, "segment_statistics", spy_stats)
    monkeypatch.setattr(training_module, "perturb_statistics", spy_release)
    data = lowrank_ratings(n_users=120, n_items=20, n_ratings=1000, seed=8)
    c, max_norm = 0.7, 0.9
    model = PublicFeatureRecommender(
        encoder=IdEncoder(20, 3),
        steps=2,
        inner_steps=2,
        rating_clip=c,
        max_norm=max_norm,
        rating_range=(0.5, 5.0),
        seed=0,
        items=data.item_labels,
        epsilon=2.0,
        delta=1e-5,
        biases=True,
    ).fit(data)
    assert len(stats) == 2 and len(releases) == 2
    for users, X, w, y in stats:
        assert X.shape[1] == 4 and np.all(X[:, -1] == max_norm)
        assert np.abs(y).max() == pytest.approx(c)
        change = np.sqrt(np.bincount(users, w * w * y * y)) * np.linalg.norm(X, axis=1)
        assert change.max() <= np.sqrt(2) * max_norm * c * (1 + 1e-12)
    for kw in releases:
        assert kw["moment_l2"] == pytest.approx(np.sqrt(2) * max_norm * c)
        assert kw["moment_sigma"] == pytest.approx(model.plan_.moment * np.sqrt(2) * max_norm * c)
        assert kw["gram_l2"] == pytest.approx(2 * max_norm**2)


def test_am_dpsgd_without_noise_follows_exact_ssp_with_biases_too():
    data = lowrank_ratings(n_users=120, n_items=25, n_ratings=1500, seed=6)
    enc = PublicFeatureEncoder(_families(25, 5), 3, seed=0)
    kw = dict(encoder=enc, rating_range=(0.5, 5.0), steps=2, inner_steps=5, seed=0, biases=True)
    ssp = PublicFeatureRecommender(variant="ssp2", **kw).fit(data)
    dpsgd = PublicFeatureRecommender(variant="dpsgd", **kw).fit(data)
    np.testing.assert_allclose(dpsgd.params_, ssp.params_, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(dpsgd.item_biases_, ssp.item_biases_, rtol=1e-7, atol=1e-9)


# -- the release ---------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", VARIANTS)
def test_a_release_with_biases_hides_the_added_users_unique_item(tmp_path, variant):
    users, items, values, b = pure_biases(n_users=120, n_items=15)
    d = ratings_table(users, items, values)
    d2 = Ratings.from_columns(
        [*[f"u{u}" for u in users], WHO, WHO],
        [*[f"i{i}" for i in items], RARE, "i0"],
        [*values, 5.0, 1.0],
    )
    catalogue = [f"i{i}" for i in range(b.size)]
    saved = []
    for k, data in enumerate((d, d2)):
        model = PublicFeatureRecommender(
            encoder=PublicFeatureEncoder(_families(b.size), 3, seed=0),
            items=catalogue,
            variant=variant,
            steps=1,
            inner_steps=2,
            rating_range=(0.5, 5.0),
            epsilon=2.0,
            delta=1e-5,
            seed=1,
        ).fit(data)
        path = tmp_path / f"{k}.npz"
        model.save(path)
        saved.append((model.model_, path.read_bytes()))
    (a, _), (m, raw) = saved
    for secret in (RARE, WHO):
        assert secret not in m.item_labels.to_pylist()
        assert secret.encode() not in raw
        assert secret not in m.summary()
    assert m.item_biases.shape == a.item_biases.shape == (len(catalogue),)
    assert m.encoder_params.shape == a.encoder_params.shape
    assert m.trained_items.all() and m.trained_items.shape == (len(catalogue),)
    with np.load(tmp_path / "1.npz", allow_pickle=False) as z:
        assert z["item_biases"].shape == (len(catalogue),)
        assert not any("user" in key and "prior" not in key for key in z.files)


def test_saved_biases_load_back_and_predict_and_recommend_with_them(tmp_path):
    users, items, values, b = pure_biases(n_users=100, n_items=15)
    data = ratings_table(users, items, values)
    model = PublicFeatureRecommender(
        encoder=IdEncoder(b.size, 2),
        items=[f"i{i}" for i in range(b.size)],
        steps=2,
        rating_range=(0.5, 5.0),
        epsilon=3.0,
        delta=1e-5,
        seed=2,
    ).fit(data)
    assert model.biases == "auto" and model.item_biases_ is not None  # auto: on
    model.save(tmp_path / "m.npz")
    loaded = RecommenderModel.load(tmp_path / "m.npz")
    np.testing.assert_array_equal(loaded.item_biases, model.item_biases_)
    assert loaded.params["biases"] == "auto"
    rows = np.arange(data.n_users)
    item = ["i3"] * data.n_users
    np.testing.assert_array_equal(loaded.predict(data, rows, item), model.predict(data, rows, item))
    # A user's bias is solved from their own history: higher ratings, higher bias.
    c = loaded.user_biases(data)
    mean = np.bincount(data.users, data.values) / np.bincount(data.users)
    assert np.corrcoef(c, mean)[0, 1] > 0.8
    np.testing.assert_array_equal(model.user_factors(data), loaded.user_factors(data))
    # Recommendation scores are the centred predictions: u.v + b_i + c_u.
    ids, scores = loaded.recommend(rows[:1], data, N=3, filter_already_liked_items=False)
    codes = ids[0]
    V = loaded.user_factors(data)
    expected = V[0] @ loaded.item_factors[codes].T + loaded.item_biases[codes] + c[0]
    np.testing.assert_allclose(scores[0], expected)


def test_biases_are_checked_like_matrix_factorizations():
    data = lowrank_ratings(n_users=60, n_items=10, n_ratings=300, seed=0)
    with pytest.raises(InvalidParameterError, match="'biases' parameter"):
        PublicFeatureRecommender(encoder=IdEncoder(10, 2), biases="yes").fit(data)


# Test-set values of the training before biases existed (commit 0d1b793, the parent of this
# feature), same data, seed and keywords: biases=False must reproduce it. Measured equal
# bit-for-bit there; the tolerance allows only for a different BLAS summation order.
OLD = {
    "ssp2": (0.05021574552298067, -0.1716829730026046, 3.3977036417181057),
    "ssp1": (0.17820550704105065, -0.18899352287425367, 2.8681694144820638),
    "minibatch": (0.008890469497169748, -0.03428465302604762, 2.4301322211687477),
    "dpsgd": (-0.13044996114361862, 0.05455441331080389, 4.10269586024463),
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_biases_off_is_the_training_before_biases(variant):
    data = lowrank_ratings(n_users=60, n_items=12, n_ratings=400, seed=2)
    m = PublicFeatureRecommender(
        encoder=IdEncoder(12, 2),
        variant=variant,
        steps=2,
        inner_steps=2,
        batch_items=5,
        rating_range=(0.5, 5.0),
        seed=7,
        biases=False,
        epsilon=3.0,
        delta=1e-5,
        items=data.item_labels,
    ).fit(data)
    got = (m.item_factors_[0, 0], m.item_factors_[5, 1], float(np.abs(m.item_factors_).sum()))
    np.testing.assert_allclose(got, OLD[variant], rtol=1e-10, atol=0)
    assert m.item_biases_ is None and m.model_.item_biases is None
