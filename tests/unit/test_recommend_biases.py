"""Private user and item biases in MatrixFactorization: the item biases are
released with the item factors (same weights, noise multipliers and accounting), the user biases
are solved from each user's own ratings and never released."""

from __future__ import annotations

import dp_accounting
import numpy as np
import pytest
from bias_data import pure_biases, ratings_table
from dp_accounting import pld

import userdp.recommend.als.estimator as als_module
from helpers import recording_noise
from userdp.data.ratings import Ratings
from userdp.exceptions import InvalidParameterError
from userdp.recommend import MatrixFactorization, RecommenderModel

RARE, WHO = "rare-title-42", "carol-secret-user"


@pytest.mark.filterwarnings("ignore:epsilon=10000.0 gives a very weak guarantee")
@pytest.mark.parametrize("method", ["als", "adadpals", "dpals-uniform", "dpsgd-uniform"])
def test_biases_recover_pure_bias_data_better_than_the_global_mean(method):
    users, items, values, b = pure_biases()
    test = np.random.default_rng(1).random(users.size) < 0.2
    train = ratings_table(users[~test], items[~test], values[~test])
    catalogue = [f"i{i}" for i in range(b.size)]
    budget = {} if method == "als" else {"epsilon": 1e4, "delta": 1e-5}
    model = MatrixFactorization(
        method=method,
        items=catalogue,
        dim=2,
        steps=4,
        rating_range=(0.5, 5.0),
        biases=True,
        reg=1e-3,
        noise_reg=0.0,
        seed=0,
        **budget,
    ).fit(train)
    history = ratings_table(users[~test], items[~test], values[~test])
    codes = {u: k for k, u in enumerate(history.user_labels.to_pylist())}
    rows = np.array([codes[f"u{u}"] for u in users[test]])
    pred = model.predict(history, rows, [f"i{i}" for i in items[test]])
    rmse = np.sqrt(np.mean((pred - values[test]) ** 2))
    baseline = np.sqrt(np.mean((values[~test].mean() - values[test]) ** 2))
    assert rmse < 0.35 * baseline, (rmse, baseline)
    # The released item biases are the planted ones up to the centre's shift.
    released = model.item_biases_[model.item_codes(catalogue)]
    assert np.corrcoef(released, b)[0, 1] > 0.95


@pytest.mark.parametrize("method", ["adadpals", "dpals-tail", "adadpsgd"])
def test_biases_spend_the_same_budget_checked_by_an_independent_composition(monkeypatch, method):
    users, items, values, b = pure_biases(n_users=200, n_items=20)
    data = ratings_table(users, items, values)
    delta = 1e-5
    runs = {}
    for biases in (False, True):
        log: list[tuple[str, float, float]] = []
        monkeypatch.setattr(als_module, "NoiseSource", recording_noise(log))
        model = MatrixFactorization(
            method=method,
            items=[f"i{i}" for i in range(b.size)],
            dim=3,
            steps=2,
            sgd_steps=2,
            rating_range=(0.5, 5.0),
            biases=biases,
            epsilon=1.5,
            delta=delta,
            seed=0,
            target_clip=None,  # the same target bound with and without biases
        ).fit(data)
        runs[biases] = (model, log)
    (plain, log0), (biased, log1) = runs[False], runs[True]
    assert [s for s, _, _ in log0] == [s for s, _, _ in log1]
    # The bias coordinate rides in the same releases: same noise multipliers sigma / l2 ...
    np.testing.assert_allclose([s / l2 for _, s, l2 in log1], [s / l2 for _, s, l2 in log0])
    # ... with the larger stated bound of [v, max_norm] where the factors enter.
    for (stat, _, l0), (_, _, l1) in zip(log0, log1, strict=True):
        if stat == "item gram":
            assert l1 == pytest.approx(2 * l0)
        elif stat == "item moment":
            assert l1 == pytest.approx(np.sqrt(2) * l0)
    assert biased.dp_event_ == plain.dp_event_
    # Independently: compose the Gaussians actually drawn, at their multipliers sigma / l2.
    acc = pld.PLDAccountant(value_discretization_interval=1e-4)
    for _, sigma, l2 in log1:
        acc.compose(dp_accounting.GaussianDpEvent(sigma / l2))
    assert acc.get_epsilon(delta) == pytest.approx(biased.budget_.epsilon, rel=2e-3)
    assert biased.budget_.epsilon <= 1.5 + 1e-9


def test_a_release_with_biases_hides_the_added_users_unique_item(tmp_path):
    users, items, values, b = pure_biases(n_users=300, n_items=30)
    d = ratings_table(users, items, values)
    d2 = Ratings.from_columns(
        [*[f"u{u}" for u in users], WHO, WHO],
        [*[f"i{i}" for i in items], RARE, "i0"],
        [*values, 5.0, 1.0],
    )
    catalogue = [f"i{i}" for i in range(b.size)]
    saved = []
    for k, data in enumerate((d, d2)):
        model = MatrixFactorization(
            method="adadpals",
            items=catalogue,
            dim=3,
            steps=1,
            rating_range=(0.5, 5.0),
            biases=True,
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
    with np.load(tmp_path / "1.npz", allow_pickle=False) as z:
        assert z["item_biases"].shape == (len(catalogue),)


def test_saved_biases_load_back_and_predict_the_same(tmp_path):
    users, items, values, b = pure_biases(n_users=100, n_items=15)
    data = ratings_table(users, items, values)
    model = MatrixFactorization(
        method="dpals-uniform",
        items=[f"i{i}" for i in range(b.size)],
        dim=2,
        steps=2,
        rating_range=(0.5, 5.0),
        biases=True,
        epsilon=3.0,
        delta=1e-5,
        seed=2,
    ).fit(data)
    model.save(tmp_path / "m.npz")
    loaded = RecommenderModel.load(tmp_path / "m.npz")
    np.testing.assert_array_equal(loaded.item_biases, model.item_biases_)
    assert loaded.params["biases"] is True
    rows = np.arange(data.n_users)
    item = ["i3"] * data.n_users
    np.testing.assert_array_equal(loaded.predict(data, rows, item), model.predict(data, rows, item))
    # A user's bias is solved from their own history: higher ratings, higher bias.
    c = loaded.user_biases(data)
    mean = np.bincount(data.users, data.values) / np.bincount(data.users)
    assert np.corrcoef(c, mean)[0, 1] > 0.8
    # Recommendation scores include the released item biases.
    _, scores = loaded.recommend(rows[:1], data, N=3, filter_already_liked_items=False)
    assert scores[0].shape == (3,)
    assert np.all(np.diff(scores[0]) <= 0)


def test_a_model_without_biases_saves_none_and_solves_no_user_bias():
    users, items, values, _ = pure_biases(n_users=60, n_items=10)
    data = ratings_table(users, items, values)
    model = MatrixFactorization(method="als", dim=2, steps=1, biases=False).fit(data)
    assert model.item_biases_ is None
    np.testing.assert_array_equal(model.model_.user_biases(data), np.zeros(data.n_users))
    with pytest.raises(InvalidParameterError, match="biases"):
        MatrixFactorization(method="als", biases="yes").fit(data)


# -- the private centre -----------------------------------------------------
def _heavy_users_rate_lower(seed: int = 0) -> Ratings:
    """40 heavy users (100 ratings, mean ~2.5) and 400 light users (5 ratings, mean ~4)."""
    rng = np.random.default_rng(seed)
    rows = []
    for u in range(440):
        heavy = u < 40
        items = rng.choice(120, 100 if heavy else 5, replace=False)
        mean = 2.5 if heavy else 4.0
        rows += [(f"u{u}", f"i{i}", float(np.clip(rng.normal(mean, 0.5), 1.0, 5.0))) for i in items]
    return Ratings.from_columns(*(list(c) for c in zip(*rows, strict=True)))


@pytest.mark.filterwarnings("ignore:epsilon=")
def test_the_default_private_mean_does_not_lean_toward_light_users():
    data = _heavy_users_rate_lower()
    true = float(data.values.mean())  # ~2.93: the heavy users hold 2/3 of the ratings
    centres = {}
    for center in ("sampled-mean", "private-mean"):
        model = MatrixFactorization(
            method="adadpals",
            items=data.item_labels,
            dim=2,
            steps=1,
            count_sample=10,
            rating_range=(1.0, 5.0),
            center=center,
            epsilon=200.0,
            delta=1e-5,
            seed=0,
        ).fit(data)
        centres[center] = model.center_
        events = model.dp_event_
        if center == "sampled-mean":
            sampled_event = events
    # At most 10 ratings per heavy user: the sampled mean sits near the light users' 4. The
    # smooth mean's cap grows with the released counts over the noise (about 200 here).
    assert centres["sampled-mean"] - true > 0.5
    assert abs(centres["private-mean"] - true) < 0.1
    # Charged the same: one Gaussian of the plan's centre multiplier in the fit's event.
    assert events == sampled_event
    assert MatrixFactorization().center == "private-mean"


def test_a_free_centre_charges_no_mean_and_the_sampled_mean_still_does():
    data = _heavy_users_rate_lower()

    def event(center):
        return (
            MatrixFactorization(
                method="adadpals",
                items=data.item_labels,
                dim=2,
                steps=1,
                rating_range=(1.0, 5.0),
                center=center,
                epsilon=2.0,
                delta=1e-5,
                seed=0,
            )
            .fit(data)
            .plan_
        )

    assert event("midpoint").center is None and event(3.0).center is None
    assert event("sampled-mean").center == event("private-mean").center is not None
