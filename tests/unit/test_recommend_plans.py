"""One noise planner for every recommender: one plan type and one function, the same plan
for the same inputs whichever recommender asks, and the event's two recorded shapes (grouped
per step, or flat) cost the same budget."""

from __future__ import annotations

import pytest

from userdp.data.synthetic import lowrank_ratings
from userdp.privacy import PrivacyAccountant, PrivacyBudget
from userdp.recommend import (
    MatrixFactorization,
    NoisePlan,
    TrainingPlan,
    plan_noise,
    plan_ssp_noise,
)
from userdp.recommend.core.plans import SSPPlan

BUDGET = PrivacyBudget(2.0, 1e-5)


def test_one_plan_type():
    assert TrainingPlan is NoisePlan and SSPPlan is NoisePlan


@pytest.mark.parametrize("solver", ["ssp", "gd"])
@pytest.mark.parametrize("releases", [1, 3])
@pytest.mark.parametrize("user_fraction", [None, 0.05])
def test_the_former_public_feature_name_is_the_same_planner(solver, releases, user_fraction):
    kw = dict(steps=2, releases_per_step=releases, user_fraction=user_fraction)
    assert plan_ssp_noise(BUDGET, gradient=solver == "gd", **kw) == plan_noise(
        BUDGET, solver=solver, **kw
    )


@pytest.mark.parametrize("solver", ["ssp", "gd"])
@pytest.mark.parametrize("gravity_share", [None, 0.05])
def test_grouped_and_flat_events_cost_the_same_budget(solver, gravity_share):
    """``grouped`` shapes the recorded event only: same multipliers, same epsilon."""
    kw = dict(steps=3, solver=solver, releases_per_step=4, gravity_share=gravity_share)
    grouped, flat = plan_noise(BUDGET, grouped=True, **kw), plan_noise(BUDGET, **kw)
    for name in ("counts", "center", "gram", "moment", "gradient", "gravity"):
        assert getattr(grouped, name) == getattr(flat, name)
    spent = [
        PrivacyAccountant().compose(p.event()).spent(BUDGET.delta).epsilon for p in (grouped, flat)
    ]
    assert spent[0] == pytest.approx(spent[1], rel=1e-9)
    assert spent[0] == pytest.approx(BUDGET.epsilon, rel=1e-6)


@pytest.mark.parametrize(
    ("method", "solver", "extra"),
    [
        ("adadpals", "ssp", {}),
        ("dpsgd-uniform", "gd", {"sgd_steps": 3}),
        ("adadpals", "ssp", {"unobserved_weight": 1.0}),
    ],
)
def test_matrix_factorization_plans_with_the_one_planner(method, solver, extra):
    ratings = lowrank_ratings(n_users=60, n_items=20, n_ratings=600, seed=0)
    model = MatrixFactorization(
        method=method,
        dim=2,
        steps=2,
        epsilon=2.0,
        delta=1e-5,
        rating_range=(0.5, 5.0),
        items=ratings.item_labels,
        seed=0,
        **extra,
    )
    model.fit(ratings)
    expected = plan_noise(
        BUDGET,
        steps=2,
        solver=solver,
        releases_per_step=extra.get("sgd_steps", 1),
        count_fraction=model.count_fraction,
        center_fraction=model.center_fraction,
        moment_share=model.moment_share,
        gravity_share=0.05 if extra.get("unobserved_weight") else None,
        grouped=True,
    )
    assert model.plan_ == expected
    assert model.dp_event_ == expected.event()
