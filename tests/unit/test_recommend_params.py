"""The recommenders' budget convention (epsilon, delta in the constructor; a shared
accountant in fit) and their declared parameter tables, from which the bad values are made."""

from __future__ import annotations

import math
from typing import Any

import dp_accounting
import pytest

from userdp.data.synthetic import lowrank_ratings
from userdp.exceptions import BudgetExceededError, InvalidParameterError
from userdp.privacy import PrivacyAccountant, PrivacyBudget
from userdp.recommend import IdEncoder, MatrixFactorization, PublicFeatureRecommender
from userdp.recommend._base import SHARED_CONSTRAINTS

#: Bad values for the rules a table states as a custom check.
_CUSTOM_BAD = {
    "rating_range": [(5.0, 1.0), (1.0, math.nan), "1..5", (1.0, 2.0, 3.0)],
    "center": ["typo", math.inf, None],
    "items": [["a", "a"], [None, "b"]],
    "min_item_count": ["typo", math.nan],
    "target_clip": ["typo", 0.0, -1.0, math.nan],
    "biases": ["yes", 1, None],
    "encoder": [object(), None],
    "loss": ["hinge", None, 1.0],
}


def _bad_values(name: str, rule: dict[str, Any]) -> list[Any]:
    """Values each rule of a declared table must refuse (like scikit-learn's
    ``generate_invalid_param_val``)."""
    if "check" in rule:
        return _CUSTOM_BAD[name]
    if "choices" in rule:
        return ["not-a-choice", 1]
    if rule.get("bool"):
        return ["yes", 1]
    out: list[Any] = ["1"]
    if rule.get("int"):
        out.append(1.5)
        if rule.get("low") is not None:
            out.append(rule["low"] - 1)
        if rule.get("high") is not None:
            out.append(rule["high"] + 1)
        return out
    out.append(math.nan)
    low, high = rule.get("low", -math.inf), rule.get("high", math.inf)
    if math.isfinite(low):
        out.append(low if rule.get("low_open") else low - 1.0)
    if math.isfinite(high):
        out.append(high if rule.get("high_open") else high + 1.0)
    return out


def _make(cls: type, **kw: Any) -> Any:
    if cls is PublicFeatureRecommender:
        kw.setdefault("encoder", IdEncoder(10, 2))
    return cls(rating_range=(0.5, 5.0), **kw)


def _cases() -> list[Any]:
    out = []
    for cls in (MatrixFactorization, PublicFeatureRecommender):
        for name, rule in cls._parameter_constraints.items():
            for value in _bad_values(name, rule):
                out.append(pytest.param(cls, name, value, id=f"{cls.__name__}-{name}-{value!r}"))
    return out


@pytest.fixture(scope="module")
def data():
    return lowrank_ratings(n_users=60, n_items=10, n_ratings=400, seed=1)


@pytest.mark.parametrize("cls", [MatrixFactorization, PublicFeatureRecommender])
def test_the_table_covers_every_constructor_keyword_and_shares_the_common_ones(cls):
    assert set(cls._parameter_constraints) == set(cls._get_param_names())
    for name, rule in SHARED_CONSTRAINTS.items():
        assert cls._parameter_constraints[name] is rule


@pytest.mark.parametrize(("cls", "name", "value"), _cases())
def test_every_declared_rule_refuses_its_bad_values_before_reading_the_data(cls, name, value):
    model = _make(cls).set_params(**{name: value})
    with pytest.raises(
        InvalidParameterError, match=f"'{name}(\\[[01]\\])?' parameter of {cls.__name__}"
    ):
        model.fit(None)  # the table is checked first: None is never read


@pytest.mark.parametrize("cls", [MatrixFactorization, PublicFeatureRecommender])
def test_sklearn_clone_copies_the_parameters_budget_included(cls):
    base = pytest.importorskip("sklearn.base")
    model = _make(cls, epsilon=2.0, delta=1e-5, steps=2)
    copy = base.clone(model)
    assert type(copy) is cls and copy is not model
    assert copy.get_params()["epsilon"] == 2.0 and copy.get_params()["steps"] == 2


@pytest.mark.parametrize("cls", [MatrixFactorization, PublicFeatureRecommender])
def test_get_params_round_trips_through_the_constructor(cls, data):
    model = _make(cls, epsilon=2.0, delta=1e-5, items=data.item_labels, steps=1, seed=3)
    twin = cls(**model.get_params())
    a, b = model.fit(data), twin.fit(data)
    assert (a.item_factors_ == b.item_factors_).all()
    assert a.budget_ == b.budget_ and a.summary() == b.summary()


@pytest.mark.parametrize("cls", [MatrixFactorization, PublicFeatureRecommender])
def test_an_accountant_with_a_total_refuses_before_any_work(cls):
    accountant = PrivacyAccountant(PrivacyBudget(1.0, 1e-5))
    model = _make(cls, epsilon=2.0, delta=1e-5, items=[f"i{k}" for k in range(10)])
    with pytest.raises(BudgetExceededError):
        model.fit(None, accountant=accountant)  # None would fail if it were read
    assert accountant.ledger == () and not hasattr(model, "model_")


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
