"""AM-SSP with public item features: the SSP gradient, sparsity, accounting and training."""

from __future__ import annotations

import dp_accounting
import numpy as np
import pytest
import scipy.sparse as sp
from dp_accounting import pld

from userdp.data.synthetic import lowrank_ratings
from userdp.exceptions import InvalidParameterError
from userdp.multitask.kernels import segment_offsets, segment_statistics
from userdp.privacy import PrivacyAccountant, PrivacyBudget
from userdp.recommend.als.estimator import MatrixFactorization
from userdp.recommend.public.encoders import FeatureFamily, IdEncoder, PublicFeatureEncoder
from userdp.recommend.public.estimator import (
    PublicFeatureRecommender,
    plan_ssp_noise,
    ssp_gradient,
    ssp_noise_ridge,
    user_feature_matrix,
    user_prior_statistics,
)


def _families(n_items: int, rng: np.random.Generator) -> list[FeatureFamily]:
    genres = sp.random(n_items, 6, density=0.3, random_state=1, format="csr")
    genres.data[:] = 1.0
    year = sp.csr_matrix((np.ones(n_items), (np.arange(n_items), rng.integers(0, 5, n_items))))
    return [FeatureFamily("genres", genres), FeatureFamily("year", year)]


def _loss(encoder, params, users, items, y, w, U, ridge) -> float:
    """sum_i w_i/2 (u_i . v_j - y_i)^2 + sum_j ridge_j/2 ||v_j||^2, computed row by row."""
    V, _ = encoder.forward(params, None)
    pred = np.einsum("nd,nd->n", U[users], V[items])
    return float(0.5 * np.sum(w * (pred - y) ** 2) + 0.5 * np.sum(ridge * np.sum(V * V, axis=1)))


@pytest.mark.parametrize("kind", ["features", "id"])
def test_ssp_gradient_with_exact_statistics_is_the_gradient_of_the_loss(kind):
    rng = np.random.default_rng(0)
    n_users, n_items, d = 30, 12, 3
    users = np.repeat(np.arange(n_users), 4)
    items = np.concatenate([rng.choice(n_items, 4, replace=False) for _ in range(n_users)])
    y, w = rng.normal(size=users.size), rng.uniform(0.2, 1.0, users.size)
    U = rng.normal(size=(n_users, d))
    ridge = rng.uniform(0.1, 1.0, n_items)
    if kind == "features":
        encoder = PublicFeatureEncoder(_families(n_items, rng), d, seed=3, init_scale=0.5)
    else:
        encoder = IdEncoder(n_items, d, seed=3, init_scale=0.5)
    params = encoder.init_params()
    order, offsets = segment_offsets(items, n_items)
    A, b = segment_statistics(offsets, order, users, U, w, y)
    grad = ssp_gradient(encoder, params, A, b, ridge)
    eps = 1e-6
    numeric = np.empty_like(params)
    for k in range(params.size):
        step = np.zeros_like(params)
        step[k] = eps
        numeric[k] = (
            _loss(encoder, params + step, users, items, y, w, U, ridge)
            - _loss(encoder, params - step, users, items, y, w, U, ridge)
        ) / (2 * eps)
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-6)


def test_a_mini_batch_gradient_leaves_feature_values_of_other_items_exactly_unchanged():
    rng = np.random.default_rng(1)
    n_items, d = 20, 3
    year = sp.csr_matrix((np.ones(n_items), (np.arange(n_items), np.arange(n_items) % 10)))
    encoder = PublicFeatureEncoder([FeatureFamily("year", year)], d, seed=0)
    params = encoder.init_params()
    A = np.stack([np.eye(d)] * n_items)
    b = rng.normal(size=(n_items, d))
    batch = np.array([0, 1, 2])  # years 0, 1, 2 only
    grad = encoder.blocks(ssp_gradient(encoder, params, A, b, np.ones(n_items), batch))
    table = grad["embedding/year"]
    assert np.all(table[3:] == 0.0)  # values absent from the batch: exactly zero
    assert np.all(np.abs(table[:3]).sum(axis=1) > 0)


@pytest.mark.parametrize("variant", ["ssp2", "ssp1"])
def test_ssp_accounting_equals_an_independent_dp_accounting_composition(variant):
    steps, inner, delta = 3, 10, 1e-5
    releases = inner if variant == "ssp1" else 1
    plan = plan_ssp_noise(PrivacyBudget(2.0, delta), steps=steps, releases_per_step=releases)
    # Independently: counts, centre, and 2 Gaussians (A and b) per release.
    acc = pld.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(dp_accounting.GaussianDpEvent(plan.counts))
    acc.compose(dp_accounting.GaussianDpEvent(plan.center))
    acc.compose(dp_accounting.GaussianDpEvent(plan.gram), steps * releases)
    acc.compose(dp_accounting.GaussianDpEvent(plan.moment), steps * releases)
    assert acc.get_epsilon(delta) == pytest.approx(2.0, rel=2e-3)
    assert PrivacyAccountant().compose(plan.event()).spent(delta).epsilon == pytest.approx(2.0)


def test_ssp1_pays_for_every_inner_step_with_more_noise_than_ssp2():
    ssp2 = plan_ssp_noise(PrivacyBudget(1.0, 1e-5), steps=2, releases_per_step=1)
    ssp1 = plan_ssp_noise(PrivacyBudget(1.0, 1e-5), steps=2, releases_per_step=25)
    assert ssp1.moment == pytest.approx(ssp2.moment * 5.0, rel=0.05)  # sqrt(25) more noise


@pytest.mark.parametrize("variant", ["ssp2", "ssp1", "minibatch"])
def test_am_ssp_trains_to_the_budget_and_beats_the_mean_without_noise(variant):
    data = lowrank_ratings(n_users=400, n_items=60, n_ratings=12_000, rank=2, seed=4)
    ids = FeatureFamily("id", sp.identity(60, format="csr"))
    enc = PublicFeatureEncoder([*_families(60, np.random.default_rng(2)), ids], 4, seed=0)
    private = PublicFeatureRecommender(
        encoder=enc,
        variant=variant,
        rating_range=(0.5, 5.0),
        inner_steps=20,
        batch_items=16,
        seed=1,
        items=data.item_labels,
        epsilon=3.0,
        delta=1e-5,
    )
    private.fit(data)
    assert private.budget_.epsilon == pytest.approx(3.0, rel=1e-4)
    assert private.item_factors_.shape == (60, 4) and np.all(np.isfinite(private.item_factors_))
    exact = PublicFeatureRecommender(
        encoder=enc,
        variant=variant,
        rating_range=(0.5, 5.0),
        inner_steps=100,
        batch_items=16,
        seed=1,
    ).fit(data)
    V = exact.user_factors(data)
    pred = exact.center_ + np.einsum("nd,nd->n", V[data.users], exact.item_factors_[data.items])
    train_rmse = np.sqrt(np.mean((pred - data.values) ** 2))
    assert train_rmse < 0.8 * np.std(data.values)


@pytest.mark.parametrize("variant", ["ssp2", "ssp1"])
def test_the_noise_scaled_ridge_follows_the_total_noise_the_encoder_fits(variant, monkeypatch):
    # SSP1's T releases of sqrt(T) more noise each average to the noise of one SSP2 release at
    # the same budget (Gaussian composition), so both must get the ridge of SSP2's single
    # release: noise_reg * sigma * max_norm^2 * sqrt(d), sigma from an independent SSP2 plan.
    import userdp.recommend.public.training as training

    seen = []

    def spy(encoder, params, gram, moment, ridge, items=None):
        seen.append(ridge.copy())
        return ssp_gradient(encoder, params, gram, moment, ridge, items)

    monkeypatch.setattr(training, "ssp_gradient", spy)
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
        biases=False,
        items=data.item_labels,
        epsilon=2.0,
        delta=1e-5,
    ).fit(data)
    single = plan_ssp_noise(PrivacyBudget(2.0, 1e-5), steps=2, releases_per_step=1)
    expected = reg * np.maximum(model.item_counts_, 1.0) + noise_reg * single.gram * max_norm**2 * (
        np.sqrt(d)
    )
    assert len(seen) == 2 * inner
    np.testing.assert_allclose(seen[0], expected, rtol=2e-3)
    # and the helper against the formula, for a plan of T releases
    plan = plan_ssp_noise(PrivacyBudget(2.0, 1e-5), steps=2, releases_per_step=9)
    assert ssp_noise_ridge(1.5, plan.gram, 9, 2.0, 4) == pytest.approx(1.5 * plan.gram / 3 * 8)


def test_rating_clip_bounds_every_users_change_of_the_released_moments(monkeypatch):
    # With rating_clip c the moments b_j take the centred ratings clipped to [-c, c], so one
    # user's change of the stacked b is ||u_k|| sqrt(sum_i w_i^2 y_i^2) <= max_norm * c: checked
    # user by user on the statistics fit() computes, and the noise is calibrated to that bound.
    import userdp.recommend.public.estimator as public
    import userdp.recommend.public.training as training

    stats, releases = [], []

    def spy_stats(offsets, order, users, U, w, y):
        if w is not None:  # the item statistics (the user solves pass no weights)
            stats.append((users.copy(), U.copy(), w.copy(), y.copy()))
        return segment_statistics(offsets, order, users, U, w, y)

    real = training.perturb_statistics

    def spy_release(gram, moment, **kw):
        releases.append(kw)
        return real(gram, moment, **kw)

    monkeypatch.setattr(public, "segment_statistics", spy_stats)
    monkeypatch.setattr(training, "perturb_statistics", spy_release)
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
        biases=False,  # the bound with biases: tests/unit/test_public_biases.py
    ).fit(data)
    assert len(stats) == 2 and len(releases) == 2
    for users, U, w, y in stats:
        assert np.abs(y).max() <= c and np.abs(y).max() == pytest.approx(c)  # some clipped
        change = np.sqrt(np.bincount(users, w * w * y * y)) * np.linalg.norm(U, axis=1)
        assert change.max() <= max_norm * c * (1 + 1e-12)
    for kw in releases:
        assert kw["moment_l2"] == pytest.approx(max_norm * c)
        assert kw["moment_sigma"] == pytest.approx(model.plan_.moment * max_norm * c)
    with pytest.raises(InvalidParameterError, match="rating_clip"):
        PublicFeatureRecommender(encoder=IdEncoder(20, 3), rating_clip=0.0).fit(data)


def test_am_ssp_refuses_an_encoder_for_another_catalogue_and_a_private_run_without_range():
    data = lowrank_ratings(n_users=100, n_items=30, n_ratings=2000, seed=1)
    with pytest.raises(InvalidParameterError, match="describes 10 items"):
        PublicFeatureRecommender(encoder=IdEncoder(10, 2), rating_range=(0.5, 5)).fit(data)
    with pytest.raises(InvalidParameterError, match="rating range"):
        PublicFeatureRecommender(encoder=IdEncoder(30, 2), epsilon=1.0, delta=1e-5).fit(data)


def test_am_dpsgd_without_noise_follows_the_same_gradients_as_exact_ssp():
    # Without privacy neither clips nor adds noise: the per-user gradients summed must equal
    # the SSP gradient from exact statistics, so both trainings end at the same parameters.
    data = lowrank_ratings(n_users=120, n_items=25, n_ratings=1500, seed=6)
    enc = PublicFeatureEncoder(_families(25, np.random.default_rng(5)), 3, seed=0)
    kw = dict(encoder=enc, rating_range=(0.5, 5.0), steps=2, inner_steps=5, seed=0)
    ssp = PublicFeatureRecommender(variant="ssp2", **kw).fit(data)
    dpsgd = PublicFeatureRecommender(variant="dpsgd", **kw).fit(data)
    np.testing.assert_allclose(dpsgd.params_, ssp.params_, rtol=1e-7, atol=1e-9)


def test_am_dpsgd_charges_one_gradient_release_per_inner_step():
    steps, inner, delta = 2, 7, 1e-5
    plan = plan_ssp_noise(
        PrivacyBudget(4.0, delta), steps=steps, releases_per_step=inner, gradient=True
    )
    assert plan.gram is None and plan.moment is None
    acc = pld.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(dp_accounting.GaussianDpEvent(plan.counts))
    acc.compose(dp_accounting.GaussianDpEvent(plan.center))
    acc.compose(dp_accounting.GaussianDpEvent(plan.gradient), steps * inner)
    assert acc.get_epsilon(delta) == pytest.approx(4.0, rel=2e-3)
    data = lowrank_ratings(n_users=80, n_items=20, n_ratings=1000, seed=7)
    model = PublicFeatureRecommender(
        encoder=IdEncoder(20, 2),
        variant="dpsgd",
        steps=steps,
        inner_steps=inner,
        rating_range=(0.5, 5.0),
        seed=2,
        items=data.item_labels,
        epsilon=4.0,
        delta=delta,
    ).fit(data)
    assert model.budget_.epsilon == pytest.approx(4.0, rel=1e-4)
    assert np.all(np.isfinite(model.item_factors_))


# -- the private user-feature prior ---------------------------------------------------------------
def _user_families(n_users: int, seed: int) -> list[FeatureFamily]:
    rng = np.random.default_rng(seed)
    gender = sp.csr_matrix((np.ones(n_users), (np.arange(n_users), rng.integers(0, 2, n_users))))
    hobbies = sp.random(n_users, 5, density=0.4, random_state=seed, format="csr")
    hobbies.data[:] = 1.0
    return [FeatureFamily("gender", gender), FeatureFamily("hobbies", hobbies)]


def test_user_prior_statistics_average_each_family_and_sum_factors_per_value():
    fams = _user_families(30, 3)
    phi, n_families = user_feature_matrix(fams, 30)
    assert n_families == 2 and phi.shape == (30, 7)
    U = np.random.default_rng(0).standard_normal((30, 3))
    sums, counts = user_prior_statistics(phi, U)
    # Independently, row by row: each family's row is divided by its number of values.
    dense = [f.matrix.toarray() for f in fams]
    want_sums = np.zeros((7, 3))
    want_counts = np.zeros(7)
    for k in range(30):
        row = np.concatenate([d[k] / d[k].sum() if d[k].sum() else d[k] for d in dense])
        assert np.sum(row**2) <= n_families + 1e-12  # the sensitivity bound's premise
        want_sums += np.outer(row, U[k])
        want_counts += row
    np.testing.assert_allclose(sums, want_sums, atol=1e-12)
    np.testing.assert_allclose(counts, want_counts, atol=1e-12)


def test_user_prior_accounting_equals_an_independent_dp_accounting_composition():
    steps, delta = 3, 1e-5
    plan = plan_ssp_noise(PrivacyBudget(1.0, delta), steps=steps, user_fraction=0.05)
    acc = pld.PLDAccountant(value_discretization_interval=1e-4)
    releases = [(plan.counts, 1), (plan.center, 1), (plan.gram, steps), (plan.moment, steps)]
    releases += [(plan.user_counts, 1), (plan.user_prior, steps)]
    for z, count in releases:
        acc.compose(dp_accounting.GaussianDpEvent(z), count)
    assert acc.get_epsilon(delta) == pytest.approx(1.0, rel=2e-3)
    without = plan_ssp_noise(PrivacyBudget(1.0, delta), steps=steps)
    assert plan.gram > without.gram  # the prior's share is paid by the item statistics


def test_a_model_with_user_features_spends_the_budget_and_gives_cold_users_their_prior():
    data = lowrank_ratings(n_users=300, n_items=50, n_ratings=9_000, rank=2, seed=5)
    fams = _user_families(data.n_users, 4)
    enc = PublicFeatureEncoder(_families(50, np.random.default_rng(2)), 4, seed=0)
    m = PublicFeatureRecommender(
        encoder=enc,
        rating_range=(0.5, 5.0),
        seed=1,
        items=data.item_labels,
        epsilon=2.0,
        delta=1e-5,
    )
    m.fit(data, user_features=fams)
    assert PrivacyAccountant().compose(m.dp_event_).spent(1e-5).epsilon == pytest.approx(2.0)
    assert m.user_prior_.shape == (7, 4)
    assert np.all(np.linalg.norm(m.user_prior_, axis=1) <= m.max_norm + 1e-12)
    # A user without ratings gets exactly the prior of their features.
    cold = data.subset(np.isin(data.users, np.arange(1, data.n_users)))
    U = m.user_factors(cold, user_features=fams)
    phi, _ = user_feature_matrix(fams, data.n_users)
    np.testing.assert_allclose(U[0], (phi @ m.user_prior_)[0], atol=1e-10)
    assert np.allclose(m.user_factors(cold)[0], 0.0)  # without features: shrunk to 0


def test_user_features_are_refused_when_the_model_has_none_or_the_rows_do_not_match():
    data = lowrank_ratings(n_users=100, n_items=20, n_ratings=1_200, rank=2, seed=6)
    enc = IdEncoder(20, 3, seed=0)
    plain = PublicFeatureRecommender(encoder=enc, rating_range=(0.5, 5.0), seed=1).fit(data)
    with pytest.raises(InvalidParameterError, match="trained without user features"):
        plain.user_factors(data, user_features=_user_families(100, 1))
    with pytest.raises(InvalidParameterError, match="rows but the ratings have 100 users"):
        PublicFeatureRecommender(encoder=enc, rating_range=(0.5, 5.0)).fit(
            data, user_features=_user_families(99, 1)
        )


@pytest.mark.parametrize(
    ("kw", "fragment"),
    [
        ({"center": "typo"}, "'center' parameter"),
        ({"rating_range": (5.0, 1.0)}, "low < high"),
        ({"count_fraction": 1.5}, "'count_fraction' parameter"),
        ({"mu": -1.0}, "'mu' parameter"),
    ],
)
def test_the_common_keywords_are_checked_as_in_matrix_factorization(kw, fragment):
    # PublicFeatureRecommender checked 9 of its keywords; the shared base checks all
    # the ones it shares with MatrixFactorization, with the same wording.
    data = lowrank_ratings(n_users=50, n_items=10, n_ratings=300, seed=1)
    for make in (
        lambda: PublicFeatureRecommender(encoder=IdEncoder(10, 2), **kw),
        lambda: MatrixFactorization(method="als", **kw),
    ):
        with pytest.raises(InvalidParameterError, match=fragment):
            make().fit(data)
