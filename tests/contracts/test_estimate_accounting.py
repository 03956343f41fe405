"""The estimate releases' accounting: a shared accountant refuses a release over its total
before any work and composes the others; the cost planned before the work is the cost spent;
a fitted estimator's clone refits to the same release (the parameter contract itself is in
``test_estimator_contract.py``)."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import NO_DATA
from userdp.estimate import (
    LabelPrivateLinearRegression,
    WeightedERM,
    gwa_linear_regression,
    sample_limited_mean,
    sample_limited_quantile,
    weighted_mean,
    weighted_quantile,
)
from userdp.exceptions import BudgetExceededError
from userdp.privacy import PrivacyAccountant, PrivacyBudget

ESTIMATORS = [
    (LabelPrivateLinearRegression, dict(epsilon=1.0, label_range=(0.0, 10.0))),
    (WeightedERM, dict(epsilon=1.0, delta=1e-6)),
]


# -- one accountant across releases ----------------------------------------------------------------
@pytest.fixture(scope="module")
def data() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    users = np.repeat(np.arange(200), rng.integers(1, 12, 200))
    x = rng.normal(size=(users.size, 2))
    y = np.clip(5.0 + x @ [1.0, -1.0] + rng.normal(size=users.size), 0.0, 10.0)
    return {"users": users, "values": rng.uniform(0, 10, users.size), "X": x, "y": y}


def test_a_release_over_the_total_budget_is_refused_before_any_work(data):
    acc = PrivacyAccountant(PrivacyBudget(1.0))
    first = weighted_mean(
        data["values"], data["users"], epsilon=0.7, bounds=(0, 10), seed=0, accountant=acc
    )
    assert acc.ledger == (first.dp_event,)
    with pytest.raises(BudgetExceededError, match="would go over the budget"):
        weighted_quantile(
            NO_DATA, NO_DATA, q=[0.1, 0.9], epsilon=0.5, bounds=(0, 10), accountant=acc
        )
    with pytest.raises(BudgetExceededError):
        gwa_linear_regression(
            NO_DATA,
            NO_DATA,
            NO_DATA,
            epsilon=0.31,
            label_range=(0, 10),
            noise_variance=1.0,
            accountant=acc,
        )
    model = LabelPrivateLinearRegression(epsilon=0.5, label_range=(0.0, 10.0))
    with pytest.raises(BudgetExceededError):
        model.fit(NO_DATA, NO_DATA, NO_DATA, accountant=acc)
    assert not hasattr(model, "coef_")
    assert acc.ledger == (first.dp_event,)  # nothing was charged by the refused releases
    # what is left is still spendable, to the last bit of the budget
    rest = weighted_quantile(  # its own seed: a seed may be used once per accountant
        data["values"], data["users"], q=0.5, epsilon=0.3, bounds=(0, 10), seed=1, accountant=acc
    )
    assert acc.spent().epsilon == pytest.approx(1.0, rel=1e-9)
    assert rest.budget.epsilon == pytest.approx(0.3, rel=1e-9) and rest.budget.delta == 0.0


def test_an_erm_fit_over_the_remaining_delta_or_epsilon_is_refused_before_any_work(data):
    acc = PrivacyAccountant(PrivacyBudget(1.0, 1e-6))
    sample_limited_mean(
        data["values"], data["users"], epsilon=0.2, bounds=(0, 10), seed=0, accountant=acc
    )
    model = WeightedERM(epsilon=0.9, delta=1e-6, steps=5)
    with pytest.raises(BudgetExceededError):
        model.fit(NO_DATA, NO_DATA, NO_DATA, accountant=acc)
    labels = (data["X"][:, 0] > 0).astype(int)
    WeightedERM(epsilon=0.8, delta=1e-6, steps=5, seed=1).fit(  # one seed per accountant
        data["X"], labels, data["users"], accountant=acc
    )
    assert acc.spent(1e-6).epsilon == pytest.approx(1.0, rel=1e-6)


@pytest.mark.parametrize("public", [False, True])
@pytest.mark.parametrize("h", [None, 3])
@pytest.mark.parametrize("noise_variance", [None, 4.0])
def test_the_planned_cost_is_the_cost_spent(data, public, h, noise_variance):
    # An accountant holding exactly epsilon accepts every mode: the plan checked before the
    # work never asks for more than the release then spends, and the release spends it all.
    for fn in (weighted_mean, sample_limited_mean):
        acc = PrivacyAccountant(PrivacyBudget(0.8))
        kw = dict(public_user_sizes=public, noise_variance=noise_variance, accountant=acc)
        res = fn(data["values"], data["users"], epsilon=0.8, bounds=(0, 10), h=h, seed=1, **kw)
        assert acc.spent().epsilon == pytest.approx(0.8, rel=1e-9) == res.budget.epsilon
    for fn in (weighted_quantile, sample_limited_quantile):
        acc = PrivacyAccountant(PrivacyBudget(0.8))
        fn(
            data["values"],
            data["users"],
            q=[0.2, 0.6],
            epsilon=0.8,
            bounds=(0, 10),
            h=h,
            seed=1,
            public_user_sizes=public,
            accountant=acc,
        )
        assert acc.spent().epsilon == pytest.approx(0.8, rel=1e-9)


@pytest.mark.parametrize(
    "params",
    [
        dict(),
        dict(noise_variance=1.0),
        dict(method="sample-limit"),
        dict(method="sample-limit", h="max"),
        dict(method="sample-limit", h=3),
    ],
)
def test_a_regression_fit_spends_exactly_what_it_planned(data, params):
    acc = PrivacyAccountant(PrivacyBudget(0.7))
    model = LabelPrivateLinearRegression(epsilon=0.7, label_range=(0.0, 10.0), seed=0, **params)
    model.fit(data["X"], data["y"], data["users"], accountant=acc)
    assert acc.spent().epsilon == pytest.approx(0.7, rel=1e-9) == model.budget_.epsilon


@pytest.mark.parametrize("public", [False, True])
@pytest.mark.parametrize("h", [None, 2.0])
@pytest.mark.parametrize("weighting", ["smooth", "limit"])
def test_an_erm_fit_spends_exactly_what_it_planned(data, public, h, weighting):
    acc = PrivacyAccountant(PrivacyBudget(0.7, 1e-6))
    labels = (data["X"][:, 0] > 0).astype(int)
    model = WeightedERM(
        epsilon=0.7, delta=1e-6, steps=3, h=h, weighting=weighting, public_user_sizes=public, seed=0
    )
    model.fit(data["X"], labels, data["users"], accountant=acc)
    assert acc.ledger == (model.dp_event_,)
    assert acc.spent(1e-6).epsilon == pytest.approx(model.budget_.epsilon, rel=1e-12)
    assert model.budget_.epsilon <= 0.7 * (1 + 1e-9)


def test_two_releases_compose_to_what_dp_accounting_computes(data):
    pld = pytest.importorskip("dp_accounting.pld")
    acc = PrivacyAccountant()
    mean = weighted_mean(
        data["values"],
        data["users"],
        epsilon=0.3,
        bounds=(0, 10),
        public_user_sizes=True,
        seed=2,
        accountant=acc,
    )
    x = np.column_stack([data["X"], np.ones(len(data["y"]))])
    reg = gwa_linear_regression(
        x,
        data["y"],
        data["users"],
        epsilon=0.45,
        label_range=(0, 10),
        noise_variance=1.0,
        seed=3,  # not the mean's: a seed may be used once per accountant
        accountant=acc,
    )
    assert acc.ledger == (mean.dp_event, reg.dp_event)
    # Independent: dp-accounting's PLD accountant on the same Laplace events (pure DP: its
    # epsilon at a negligible delta is the sum).
    independent = pld.PLDAccountant(value_discretization_interval=1e-4)
    independent.compose(acc.event)
    assert acc.spent().epsilon == pytest.approx(independent.get_epsilon(1e-12), rel=1e-6)
    assert acc.spent().epsilon == pytest.approx(0.75, rel=1e-9)


# -- estimators: scikit-learn's clone, budget_ and summary() --------------------------------------
@pytest.mark.parametrize(("cls", "valid"), ESTIMATORS)
def test_sklearn_clone_copies_the_parameters_and_not_the_fit(cls, valid, data):
    base = pytest.importorskip("sklearn.base")
    model = cls(**valid, seed=3)
    y = (data["X"][:, 0] > 0).astype(int) if cls is WeightedERM else data["y"]
    model.fit(data["X"], y, data["users"])
    copy = base.clone(model)
    assert copy.get_params() == model.get_params()
    assert not hasattr(copy, "coef_")
    refit = copy.fit(data["X"], y, data["users"])
    np.testing.assert_array_equal(refit.coef_, model.coef_)  # same seed, same release
    assert model.budget_.epsilon == pytest.approx(1.0, rel=1e-9)
    assert model.budget_.delta == valid.get("delta", 0.0)
    assert model.epsilon_ == model.budget_.epsilon
    assert f"epsilon={model.budget_.epsilon:g}" in model.summary()


def test_results_expose_budget_dp_event_and_summary(data):
    res = weighted_mean(data["values"], data["users"], epsilon=0.5, bounds=(0, 10), seed=0)
    assert res.budget.epsilon == pytest.approx(0.5, rel=1e-9) and res.budget.delta == 0.0
    assert res.epsilon == res.budget.epsilon  # derived, one source
    assert PrivacyAccountant().compose(res.dp_event).spent().epsilon == res.budget.epsilon
    assert "epsilon=0.5, delta=0" in res.summary()
