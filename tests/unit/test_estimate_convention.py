"""One convention for every release of ``userdp.estimate``.

Every keyword is in a declared table and a bad value of any rule is refused in the one message
format before the data are read; a shared accountant with a total budget refuses a release that
would exceed it before any work and composes the others; estimators clone like scikit-learn's.
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from userdp.estimate import (
    LabelPrivateLinearRegression,
    WeightedERM,
    gwa_linear_regression,
    sample_limited_mean,
    sample_limited_quantile,
    weighted_mean,
    weighted_quantile,
)
from userdp.estimate._gwa import GWA_OBJECTIVE_PARAMETERS, SOLVE_GWA_PARAMETERS
from userdp.estimate._sample_limit import (
    BEST_LIMIT_H_REGRESSION_PARAMETERS,
    SAMPLE_LIMIT_DESIGN_PARAMETERS,
)
from userdp.estimate.mean import SAMPLE_LIMITED_MEAN_PARAMETERS, WEIGHTED_MEAN_PARAMETERS
from userdp.estimate.quantile import (
    SAMPLE_LIMITED_QUANTILE_PARAMETERS,
    WEIGHTED_QUANTILE_PARAMETERS,
)
from userdp.estimate.regression import (
    GWA_LINEAR_REGRESSION_PARAMETERS,
    best_limit_h_regression,
    gwa_matrix,
    gwa_objective,
    sample_limit_design,
    solve_gwa,
)
from userdp.exceptions import BudgetExceededError, InvalidParameterError
from userdp.privacy import PrivacyAccountant, PrivacyBudget


class Untouchable:
    """Data that raise if anything reads them: a release refused earlier never touches them."""

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise RuntimeError("the data were read")

    def __len__(self) -> int:
        raise RuntimeError("the data were read")

    def __iter__(self) -> Any:
        raise RuntimeError("the data were read")


NO_DATA = Untouchable()

# (function, its table, the valid keywords, how many data arguments it takes)
FUNCTIONS: list[tuple[Callable[..., Any], dict[str, Any], dict[str, Any], int]] = [
    (weighted_mean, WEIGHTED_MEAN_PARAMETERS, dict(epsilon=1.0, bounds=(0, 10)), 2),
    (sample_limited_mean, SAMPLE_LIMITED_MEAN_PARAMETERS, dict(epsilon=1.0, bounds=(0, 10)), 2),
    (weighted_quantile, WEIGHTED_QUANTILE_PARAMETERS,
     dict(q=0.5, epsilon=1.0, bounds=(0, 10)), 2),
    (sample_limited_quantile, SAMPLE_LIMITED_QUANTILE_PARAMETERS,
     dict(q=0.5, epsilon=1.0, bounds=(0, 10)), 2),
    (gwa_linear_regression, GWA_LINEAR_REGRESSION_PARAMETERS,
     dict(epsilon=1.0, label_range=(0, 10), noise_variance=1.0), 3),
    (solve_gwa, SOLVE_GWA_PARAMETERS, dict(noise_variance=1.0, laplace_unit=1.0), 2),
    (gwa_matrix, SOLVE_GWA_PARAMETERS, dict(noise_variance=1.0, laplace_unit=1.0), 2),
    (gwa_objective, GWA_OBJECTIVE_PARAMETERS, dict(noise_variance=1.0, laplace_unit=1.0), 2),
    (best_limit_h_regression, BEST_LIMIT_H_REGRESSION_PARAMETERS,
     dict(noise_variance=1.0, laplace_unit=1.0), 2),
    (sample_limit_design, SAMPLE_LIMIT_DESIGN_PARAMETERS, dict(h=2), 2),
]  # fmt: skip

ESTIMATORS: list[tuple[type, dict[str, Any]]] = [
    (LabelPrivateLinearRegression, dict(epsilon=1.0, label_range=(0.0, 10.0))),
    (WeightedERM, dict(epsilon=1.0, delta=1e-6)),
]


def invalid_values(rule: dict[str, Any]) -> list[object]:
    """Values that break ``rule`` (like scikit-learn's ``generate_invalid_param_val``)."""
    if "check" in rule:
        return ["invalid"]
    if "choices" in rule:
        return ["not-a-choice", 1]
    if rule.get("bool"):
        return ["yes", 1]
    if rule.get("int"):
        bad: list[object] = [2.5, "1"]
        if rule.get("low") is not None:
            bad.append(rule["low"] - 1)
        if rule.get("high") is not None:
            bad.append(rule["high"] + 1)
        return bad
    low, high = rule.get("low", -math.inf), rule.get("high", math.inf)
    bad = [math.nan, "1.0"]
    if math.isfinite(low):
        bad.append(low if rule.get("low_open") else low - abs(low) - 1.0)
    if math.isfinite(high):
        bad.append(high if rule.get("high_open") else high + abs(high) + 1.0)
    elif rule.get("high_open"):
        bad.append(math.inf)
    return bad


def message(name: str, caller: str) -> str:
    """The one format: "The 'x' parameter of f must be ... Got ... instead."."""
    return rf"^The '{name}' parameter of {re.escape(caller)} must be .+ Got .+ instead\.$"


def bad_cases(table: dict[str, Any]) -> list[tuple[str, object]]:
    return [(name, value) for name, rule in table.items() for value in invalid_values(rule)]


# -- one table per function and estimator, covering every parameter -------------------------------
@pytest.mark.parametrize(("fn", "table", "valid", "n_data"), FUNCTIONS)
def test_every_parameter_of_a_function_but_the_data_is_in_its_table(fn, table, valid, n_data):
    names = list(inspect.signature(fn).parameters)
    assert sorted(names[n_data:]) == sorted(table)  # the first n_data are the data


@pytest.mark.parametrize(("cls", "valid"), ESTIMATORS)
def test_every_constructor_keyword_of_an_estimator_is_in_its_table(cls, valid):
    assert sorted(cls._get_param_names()) == sorted(cls._parameter_constraints)
    assert "accountant" in inspect.signature(cls.fit).parameters  # a fit keyword, not a param


@pytest.mark.parametrize(
    ("fn", "name", "value"),
    [(fn, name, value) for fn, table, _, _ in FUNCTIONS for name, value in bad_cases(table)],
    ids=str,
)
def test_a_bad_value_of_any_rule_is_refused_in_one_format_before_the_data_are_read(fn, name, value):
    _, _, valid, n_data = next(f for f in FUNCTIONS if f[0] is fn)
    with pytest.raises(InvalidParameterError, match=message(name, fn.__name__)):
        fn(*[NO_DATA] * n_data, **(valid | {name: value}))


@pytest.mark.parametrize(
    ("cls", "name", "value"),
    [(cls, n, v) for cls, _ in ESTIMATORS for n, v in bad_cases(cls._parameter_constraints)],
    ids=str,
)
def test_a_bad_estimator_parameter_is_refused_in_one_format_before_the_data_are_read(
    cls, name, value
):
    valid = dict(next(v for c, v in ESTIMATORS if c is cls))
    model = cls(**valid).set_params(**{name: value})
    with pytest.raises(InvalidParameterError, match=message(name, cls.__name__)):
        model.fit(NO_DATA, NO_DATA, NO_DATA)


def test_a_bad_accountant_is_refused_in_one_format():
    with pytest.raises(InvalidParameterError, match=message("accountant", "WeightedERM.fit")):
        WeightedERM(epsilon=1.0, delta=1e-6).fit(NO_DATA, NO_DATA, NO_DATA, accountant=1.0)


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
    first = weighted_mean(data["values"], data["users"], epsilon=0.7, bounds=(0, 10), seed=0,
                          accountant=acc)  # fmt: skip
    assert acc.ledger == (first.dp_event,)
    with pytest.raises(BudgetExceededError, match="would go over the budget"):
        weighted_quantile(NO_DATA, NO_DATA, q=[0.1, 0.9], epsilon=0.5, bounds=(0, 10),
                          accountant=acc)  # fmt: skip
    with pytest.raises(BudgetExceededError):
        gwa_linear_regression(NO_DATA, NO_DATA, NO_DATA, epsilon=0.31, label_range=(0, 10),
                              noise_variance=1.0, accountant=acc)  # fmt: skip
    model = LabelPrivateLinearRegression(epsilon=0.5, label_range=(0.0, 10.0))
    with pytest.raises(BudgetExceededError):
        model.fit(NO_DATA, NO_DATA, NO_DATA, accountant=acc)
    assert not hasattr(model, "coef_")
    assert acc.ledger == (first.dp_event,)  # nothing was charged by the refused releases
    # what is left is still spendable, to the last bit of the budget
    rest = weighted_quantile(data["values"], data["users"], q=0.5, epsilon=0.3, bounds=(0, 10),
                             seed=0, accountant=acc)  # fmt: skip
    assert acc.spent().epsilon == pytest.approx(1.0, rel=1e-9)
    assert rest.budget.epsilon == pytest.approx(0.3, rel=1e-9) and rest.budget.delta == 0.0


def test_an_erm_fit_over_the_remaining_delta_or_epsilon_is_refused_before_any_work(data):
    acc = PrivacyAccountant(PrivacyBudget(1.0, 1e-6))
    sample_limited_mean(data["values"], data["users"], epsilon=0.2, bounds=(0, 10), seed=0,
                        accountant=acc)  # fmt: skip
    model = WeightedERM(epsilon=0.9, delta=1e-6, steps=5)
    with pytest.raises(BudgetExceededError):
        model.fit(NO_DATA, NO_DATA, NO_DATA, accountant=acc)
    labels = (data["X"][:, 0] > 0).astype(int)
    WeightedERM(epsilon=0.8, delta=1e-6, steps=5, seed=0).fit(
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
        fn(data["values"], data["users"], q=[0.2, 0.6], epsilon=0.8, bounds=(0, 10), h=h,
           seed=1, public_user_sizes=public, accountant=acc)  # fmt: skip
        assert acc.spent().epsilon == pytest.approx(0.8, rel=1e-9)


@pytest.mark.parametrize(
    "params",
    [dict(), dict(noise_variance=1.0), dict(method="sample-limit"),
     dict(method="sample-limit", h="max"), dict(method="sample-limit", h=3)],
)  # fmt: skip
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
    model = WeightedERM(epsilon=0.7, delta=1e-6, steps=3, h=h, weighting=weighting,
                        public_user_sizes=public, seed=0)  # fmt: skip
    model.fit(data["X"], labels, data["users"], accountant=acc)
    assert acc.ledger == (model.dp_event_,)
    assert acc.spent(1e-6).epsilon == pytest.approx(model.budget_.epsilon, rel=1e-12)
    assert model.budget_.epsilon <= 0.7 * (1 + 1e-9)


def test_two_releases_compose_to_what_dp_accounting_computes(data):
    pld = pytest.importorskip("dp_accounting.pld")
    acc = PrivacyAccountant()
    mean = weighted_mean(data["values"], data["users"], epsilon=0.3, bounds=(0, 10),
                         public_user_sizes=True, seed=2, accountant=acc)  # fmt: skip
    x = np.column_stack([data["X"], np.ones(len(data["y"]))])
    reg = gwa_linear_regression(x, data["y"], data["users"], epsilon=0.45, label_range=(0, 10),
                                noise_variance=1.0, seed=2, accountant=acc)  # fmt: skip
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
