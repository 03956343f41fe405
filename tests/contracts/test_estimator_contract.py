"""One contract for every estimator and every function that takes ``accountant=`` (as
scikit-learn runs one ``parametrize_with_checks`` over every estimator).

- the declared parameter table is the signature (every keyword but the data);
- a bad value of any rule is refused in the one message format before the data are read;
- a wrong ``accountant`` is refused in that format, and a shared accountant whose total the
  release would exceed refuses it before any read, with nothing charged;
- estimators clone like scikit-learn's (parameters copied, the fit not).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from helpers import NO_DATA, invalid_values, message
from userdp.aggregate import aggregate
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
from userdp.estimate.weighting import private_size_histogram
from userdp.exceptions import BudgetExceededError, InvalidParameterError
from userdp.multitask.noisy_gd import task_weighted_noisy_gd
from userdp.multitask.ssp import task_weighted_ssp
from userdp.partition import select_partitions
from userdp.privacy import NoiseSource, PrivacyAccountant, PrivacyBudget
from userdp.recommend import IdEncoder, MatrixFactorization, PublicFeatureRecommender
from userdp.recommend.core.base import SHARED_CONSTRAINTS
from userdp.recommend.federated import FederatedPublicFeatureRecommender

#: Bad values for the recommenders' rules stated as a custom check.
RECOMMEND_CUSTOM_BAD = {
    "rating_range": [(5.0, 1.0), (1.0, float("nan")), "1..5", (1.0, 2.0, 3.0)],
    "center": ["typo", float("inf"), None],
    "items": [["a", "a"], [None, "b"]],
    "min_item_count": ["typo", float("nan")],
    "target_clip": ["typo", 0.0, -1.0, float("nan")],
    "biases": ["yes", 1, None],
    "encoder": [object(), None],
    "loss": ["hinge", None, 1.0],
}


@dataclass(frozen=True)
class Estimator:
    """How to build a valid estimator and call its ``fit`` on data that must not be read."""

    cls: type
    valid: dict[str, Any]
    n_data: int  # positional data arguments of fit
    custom_bad: dict[str, list[Any]] = field(default_factory=dict)

    def make(self, **kw: Any) -> Any:
        return self.cls(**(self.valid | kw))

    def fit(self, model: Any, **kw: Any) -> Any:
        return model.fit(*[NO_DATA] * self.n_data, **kw)

    def __str__(self) -> str:
        return self.cls.__name__


ITEMS = [f"i{k}" for k in range(10)]
_REC = dict(rating_range=(0.5, 5.0), epsilon=1.0, delta=1e-5, items=ITEMS)
ESTIMATORS = [
    Estimator(LabelPrivateLinearRegression, dict(epsilon=1.0, label_range=(0.0, 10.0)), 3),
    Estimator(WeightedERM, dict(epsilon=1.0, delta=1e-6), 3),
    Estimator(MatrixFactorization, _REC, 1, RECOMMEND_CUSTOM_BAD),
    Estimator(
        PublicFeatureRecommender, _REC | dict(encoder=IdEncoder(10, 2)), 1, RECOMMEND_CUSTOM_BAD
    ),
    Estimator(
        FederatedPublicFeatureRecommender,
        _REC | dict(encoder=IdEncoder(10, 2)),
        1,
        RECOMMEND_CUSTOM_BAD,
    ),
]


@dataclass(frozen=True)
class Function:
    """A public function: its declared table (None where it checks its keywords in its body),
    valid keywords, and how many positional data arguments it takes."""

    fn: Callable[..., Any]
    table: dict[str, Any] | None
    valid: dict[str, Any]
    n_data: int

    def call(self, **kw: Any) -> Any:
        return self.fn(*[NO_DATA] * self.n_data, **(self.valid | kw))

    @property
    def takes_accountant(self) -> bool:
        return "accountant" in inspect.signature(self.fn).parameters

    def __str__(self) -> str:
        return self.fn.__name__


_TASKS = dict(n_tasks=2, epsilon=1.0, delta=1e-6)
FUNCTIONS = [
    Function(weighted_mean, WEIGHTED_MEAN_PARAMETERS, dict(epsilon=1.0, bounds=(0, 10)), 2),
    Function(
        sample_limited_mean, SAMPLE_LIMITED_MEAN_PARAMETERS, dict(epsilon=1.0, bounds=(0, 10)), 2
    ),
    Function(
        weighted_quantile, WEIGHTED_QUANTILE_PARAMETERS, dict(q=0.5, epsilon=1.0, bounds=(0, 10)), 2
    ),
    Function(
        sample_limited_quantile,
        SAMPLE_LIMITED_QUANTILE_PARAMETERS,
        dict(q=0.5, epsilon=1.0, bounds=(0, 10)),
        2,
    ),
    Function(
        gwa_linear_regression,
        GWA_LINEAR_REGRESSION_PARAMETERS,
        dict(epsilon=1.0, label_range=(0, 10), noise_variance=1.0),
        3,
    ),
    Function(solve_gwa, SOLVE_GWA_PARAMETERS, dict(noise_variance=1.0, laplace_unit=1.0), 2),
    Function(gwa_matrix, SOLVE_GWA_PARAMETERS, dict(noise_variance=1.0, laplace_unit=1.0), 2),
    Function(
        gwa_objective, GWA_OBJECTIVE_PARAMETERS, dict(noise_variance=1.0, laplace_unit=1.0), 2
    ),
    Function(
        best_limit_h_regression,
        BEST_LIMIT_H_REGRESSION_PARAMETERS,
        dict(noise_variance=1.0, laplace_unit=1.0),
        2,
    ),
    Function(sample_limit_design, SAMPLE_LIMIT_DESIGN_PARAMETERS, dict(h=2), 2),
    Function(private_size_histogram, None, dict(epsilon=1.0, noise=NoiseSource(0)), 1),
    Function(select_partitions, None, dict(epsilon=1.0, delta=1e-6), 1),
    Function(aggregate, None, dict(epsilon=1.0, delta=1e-6), 1),
    Function(
        task_weighted_ssp, None, _TASKS | dict(feature_bound=1.0, label_bound=1.0, ridge=1.0), 5
    ),
    Function(
        task_weighted_noisy_gd, None, _TASKS | dict(clip_norm=1.0, steps=2, learning_rate=0.1), 5
    ),
]
TABLED = [f for f in FUNCTIONS if f.table is not None]
WITH_ACCOUNTANT = [f for f in FUNCTIONS if f.takes_accountant]


def test_every_public_function_that_takes_an_accountant_is_in_the_contract():
    import userdp.aggregate
    import userdp.estimate
    import userdp.multitask
    import userdp.partition

    public = {
        fn
        for module in (userdp.aggregate, userdp.estimate, userdp.multitask, userdp.partition)
        for name in module.__all__
        if inspect.isfunction(fn := getattr(module, name))
        and "accountant" in inspect.signature(fn).parameters
    }
    assert public <= {f.fn for f in WITH_ACCOUNTANT}, public - {f.fn for f in WITH_ACCOUNTANT}
    assert len(WITH_ACCOUNTANT) >= 10


# -- the table is the signature -----------------------------------------------------------------
@pytest.mark.parametrize("case", TABLED, ids=str)
def test_every_parameter_of_a_function_but_the_data_is_in_its_table(case):
    names = list(inspect.signature(case.fn).parameters)
    assert sorted(names[case.n_data :]) == sorted(case.table)  # the first n_data are the data


@pytest.mark.parametrize("case", ESTIMATORS, ids=str)
def test_every_constructor_keyword_of_an_estimator_is_in_its_table(case):
    assert sorted(case.cls._get_param_names()) == sorted(case.cls._parameter_constraints)
    assert "accountant" in inspect.signature(case.cls.fit).parameters  # a fit keyword


@pytest.mark.parametrize(
    "case", [e for e in ESTIMATORS if e.custom_bad is RECOMMEND_CUSTOM_BAD], ids=str
)
def test_the_recommenders_share_the_common_rules(case):
    for name, rule in SHARED_CONSTRAINTS.items():
        if name in case.cls._parameter_constraints:
            assert case.cls._parameter_constraints[name] is rule


# -- a bad value of any rule, refused in one format before the data are read -------------------
def _value_id(value: Any) -> str:
    """A test id that is the same in every process (pytest-xdist compares them): no address."""
    text = repr(value)
    return type(value).__name__ if " at 0x" in text else text


def _function_cases() -> list[Any]:
    return [
        pytest.param(case, name, value, id=f"{case}-{name}-{_value_id(value)}")
        for case in TABLED
        for name, rule in case.table.items()
        for value in invalid_values(rule)
    ]


def _estimator_cases() -> list[Any]:
    return [
        pytest.param(case, name, value, id=f"{case}-{name}-{_value_id(value)}")
        for case in ESTIMATORS
        for name, rule in case.cls._parameter_constraints.items()
        for value in invalid_values(rule, case.custom_bad, name)
    ]


@pytest.mark.parametrize(("case", "name", "value"), _function_cases())
def test_a_bad_value_of_any_rule_is_refused_in_one_format_before_the_data_are_read(
    case, name, value
):
    with pytest.raises(InvalidParameterError, match=message(name, case.fn.__name__)):
        case.call(**{name: value})


@pytest.mark.parametrize(("case", "name", "value"), _estimator_cases())
def test_a_bad_estimator_parameter_is_refused_in_one_format_before_the_data_are_read(
    case, name, value
):
    model = case.make().set_params(**{name: value})
    with pytest.raises(InvalidParameterError, match=message(name, case.cls.__name__)):
        case.fit(model)


# -- the accountant: its type, and a total it would exceed, refused before any read -------------
@pytest.mark.parametrize("case", WITH_ACCOUNTANT, ids=str)
def test_a_function_refuses_a_wrong_accountant_in_one_format(case):
    with pytest.raises(InvalidParameterError, match=message("accountant", case.fn.__name__)):
        case.call(accountant=PrivacyBudget(1.0, 1e-6))


@pytest.mark.parametrize("case", ESTIMATORS, ids=str)
def test_an_estimator_refuses_a_wrong_accountant_in_one_format(case):
    with pytest.raises(InvalidParameterError, match=message("accountant", f"{case}.fit")):
        case.fit(case.make(), accountant=PrivacyBudget(1.0, 1e-6))


@pytest.mark.parametrize("case", WITH_ACCOUNTANT, ids=str)
def test_a_function_over_a_shared_total_is_refused_before_any_read(case):
    accountant = PrivacyAccountant(PrivacyBudget(0.5, 1e-3))
    with pytest.raises(BudgetExceededError):
        case.call(accountant=accountant)  # the data raise if they are read
    assert accountant.ledger == ()


@pytest.mark.parametrize("case", ESTIMATORS, ids=str)
def test_an_estimator_over_a_shared_total_is_refused_before_any_read(case):
    accountant = PrivacyAccountant(PrivacyBudget(0.5, 1e-3))
    model = case.make()
    with pytest.raises(BudgetExceededError):
        case.fit(model, accountant=accountant)
    assert accountant.ledger == ()
    assert not hasattr(model, "coef_") and not hasattr(model, "model_")


# -- scikit-learn's clone ---------------------------------------------------------------------
@pytest.mark.parametrize("case", ESTIMATORS, ids=str)
def test_sklearn_clone_copies_the_parameters_and_not_the_fit(case):
    base = pytest.importorskip("sklearn.base")
    model = case.make(seed=3)
    copy = base.clone(model)
    assert type(copy) is case.cls and copy is not model
    params = copy.get_params()
    for name, value in model.get_params().items():  # objects (an encoder) are deep copies
        assert repr(params[name]) == repr(value), name
    assert params["seed"] == 3 and params["epsilon"] == case.valid["epsilon"]
