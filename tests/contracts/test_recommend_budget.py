"""The recommenders' budget convention beyond the shared contract (``test_estimator_contract.py``):
epsilon and delta in the constructor, both or neither; a shared accountant in ``fit`` that
composes a training run with other releases; ``get_params`` round-trips."""

from __future__ import annotations

from typing import Any

import dp_accounting
import pytest

from userdp.data.synthetic import lowrank_ratings
from userdp.exceptions import BudgetExceededError, InvalidParameterError
from userdp.privacy import PrivacyAccountant, PrivacyBudget
from userdp.recommend import IdEncoder, MatrixFactorization, PublicFeatureRecommender


def _make(cls: type, **kw: Any) -> Any:
    if cls is PublicFeatureRecommender:
        kw.setdefault("encoder", IdEncoder(10, 2))
    return cls(rating_range=(0.5, 5.0), **kw)


@pytest.fixture(scope="module")
def data():
    return lowrank_ratings(n_users=60, n_items=10, n_ratings=400, seed=1)


@pytest.mark.parametrize("cls", [MatrixFactorization, PublicFeatureRecommender])
def test_get_params_round_trips_through_the_constructor(cls, data):
    model = _make(cls, epsilon=2.0, delta=1e-5, items=data.item_labels, steps=1, seed=3)
    twin = cls(**model.get_params())
    a, b = model.fit(data), twin.fit(data)
    assert (a.item_factors_ == b.item_factors_).all()
    assert a.budget_ == b.budget_ and a.summary() == b.summary()


@pytest.mark.parametrize("cls", [MatrixFactorization, PublicFeatureRecommender])
def test_a_fit_composes_with_another_release_in_one_accountant(cls, data):
    accountant = PrivacyAccountant(PrivacyBudget(3.0, 1e-5))
    accountant.compose(dp_accounting.LaplaceDpEvent(1.0))  # e.g. a count, epsilon 1
    model = _make(cls, epsilon=2.0, delta=1e-5, items=data.item_labels, steps=1, seed=0)
    model.fit(data, accountant=accountant)
    assert len(accountant.ledger) == 2 and accountant.ledger[1] == model.dp_event_
    assert accountant.spent(1e-5).epsilon == pytest.approx(3.0, rel=1e-4)
    with pytest.raises(BudgetExceededError):  # nothing left for a second training run
        _make(cls, epsilon=0.5, delta=1e-5, items=data.item_labels).fit(data, accountant=accountant)


def test_a_private_method_needs_both_epsilon_and_delta_and_als_takes_neither(data):
    with pytest.raises(InvalidParameterError, match="missing delta"):
        _make(MatrixFactorization, epsilon=1.0, items=data.item_labels).fit(data)
    with pytest.raises(InvalidParameterError, match="not private; drop epsilon"):
        _make(MatrixFactorization, method="als", epsilon=1.0).fit(data)
    with pytest.raises(InvalidParameterError, match="missing epsilon"):
        _make(PublicFeatureRecommender, delta=1e-5, items=data.item_labels).fit(data)


def test_a_wrong_accountant_is_an_invalid_parameter(data):
    with pytest.raises(InvalidParameterError, match="'accountant' parameter"):
        _make(MatrixFactorization, method="als").fit(data, accountant=PrivacyBudget(1.0, 1e-5))
