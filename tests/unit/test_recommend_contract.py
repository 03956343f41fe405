"""One contract for every recommender (as implicit runs one test mixin on every model): the
private estimators MatrixFactorization, PublicFeatureRecommender and the federated recommender
each pass the same checks of their release, their accounting and implicit's call forms."""

from __future__ import annotations

import dp_accounting
import numpy as np
import pytest
import scipy.sparse as sp
from dp_accounting import pld

from userdp.data.synthetic import lowrank_ratings_with_features
from userdp.exceptions import NotFittedError
from userdp.privacy import PrivacyAccountant, PrivacyBudget
from userdp.recommend import (
    FeatureFamily,
    MatrixFactorization,
    PublicFeatureEncoder,
    PublicFeatureRecommender,
    RecommenderModel,
)
from userdp.recommend.federated import FederatedPublicFeatureRecommender

N_SET, DIM, RANGE, EPS, DELTA = 30, 3, (0.5, 5.0), 4.0, 1e-5


@pytest.fixture(scope="module")
def data():
    """200 users, 36 items of which the first 30 are the fixed item set."""
    ratings, features = lowrank_ratings_with_features(200, 36, 3000, seed=2)
    fams = [FeatureFamily(f.name, f.matrix[:N_SET]) for f in features]
    return ratings, [*fams, FeatureFamily("id", sp.identity(N_SET, format="csr"))]


class RecommenderContract:
    """The checks; a subclass says how to build its estimator (``make``)."""

    def make(self, data):  # pragma: no cover - every subclass overrides it
        raise NotImplementedError

    @pytest.fixture(scope="class")
    @classmethod
    def fitted(cls, data):
        ratings, _ = data
        accountant = PrivacyAccountant(PrivacyBudget(10.0, 1e-4))
        model = cls().make(data)
        assert model.fit(ratings, accountant=accountant) is model
        return model, accountant

    def test_unfitted_use_raises_not_fitted(self, data):
        with pytest.raises(NotFittedError, match="call fit first"):
            self.make(data).similar_items(0)

    def test_the_release_is_a_recommender_model_over_the_item_set(self, data, fitted):
        ratings, _ = data
        model, _ = fitted
        release = model.model_
        assert isinstance(release, RecommenderModel)
        assert release.item_labels.equals(ratings.item_labels[:N_SET])
        assert release.item_factors.shape == (N_SET, DIM)
        assert release.item_source == "public"
        assert "seed" not in release.params
        assert "\n" not in model.summary()

    def test_the_budget_is_met_and_charged_once(self, fitted):
        model, accountant = fitted
        assert model.budget_.epsilon <= EPS + 1e-9
        assert len(accountant.ledger) == 1  # one charge for the whole run
        assert accountant.ledger[0] == model.dp_event_
        acc = pld.PLDAccountant(value_discretization_interval=1e-4)
        acc.compose(model.dp_event_)
        assert acc.get_epsilon(DELTA) == pytest.approx(model.budget_.epsilon, rel=2e-3)
        assert isinstance(model.dp_event_, dp_accounting.DpEvent)

    def test_predictions_stay_in_the_rating_range(self, data, fitted):
        ratings, _ = data
        model, _ = fitted
        items = ratings.item_labels.take(ratings.items[:200])
        pred = model.predict(ratings, ratings.users[:200], items)
        assert pred.shape == (200,) and np.all((pred >= RANGE[0]) & (pred <= RANGE[1]))

    def test_implicit_call_forms(self, data, fitted):
        ratings, _ = data
        model, _ = fitted
        ids, scores = model.recommend(0, ratings, N=4)
        assert ids.shape == scores.shape == (4,)
        ids, scores = model.recommend(np.arange(3), ratings, N=4)
        assert ids.shape == scores.shape == (3, 4)
        assert np.all(ids < N_SET)
        ids, scores = model.similar_items(1, N=3)
        assert ids.shape == (3,) and 1 not in ids
        assert model.similar_items([1, 2], N=3)[0].shape == (2, 3)

    def test_saved_release_loads_back_and_predicts_the_same(self, data, fitted, tmp_path):
        ratings, _ = data
        model, _ = fitted
        model.save(tmp_path / "m.npz")
        back = RecommenderModel.load(tmp_path / "m.npz")
        items = ratings.item_labels.take(ratings.items[:50])
        np.testing.assert_array_equal(
            back.predict(ratings, ratings.users[:50], items),
            model.predict(ratings, ratings.users[:50], items),
        )
        assert back.dp_event == model.dp_event_

    def test_params_round_trip(self, data):
        model = self.make(data)
        params = model.get_params()
        assert type(model)(**params).get_params().keys() == params.keys()


def _common(data):
    ratings, _ = data
    return dict(
        epsilon=EPS,
        delta=DELTA,
        items=ratings.item_labels[:N_SET],
        rating_range=RANGE,
        seed=3,
        steps=2,
    )


class TestMatrixFactorization(RecommenderContract):
    def make(self, data):
        return MatrixFactorization(dim=DIM, **_common(data))


class TestPublicFeatureRecommender(RecommenderContract):
    def make(self, data):
        return PublicFeatureRecommender(
            encoder=PublicFeatureEncoder(data[1], DIM, seed=0), **_common(data)
        )


class TestFederatedPublicFeatureRecommender(RecommenderContract):
    def make(self, data):
        return FederatedPublicFeatureRecommender(
            encoder=PublicFeatureEncoder(data[1], DIM, seed=0), **_common(data)
        )
