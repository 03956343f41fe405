"""A seed may be used once per accountant: seeds never repeat noise across releases charged to
one accountant.

Two releases with the same seed draw the same noise, so differencing them cancels it: two seeded
means over data that differ in one user's value give that user's value exactly, though each
release's noise is ten times the change. The accountant keeps the seeds of the releases composed
into it and refuses a release whose seed it holds, before any data is read; ``seed=None`` (fresh
OS entropy) is never refused, and a seeded release on its own is unchanged, bit for bit.
"""

from __future__ import annotations

import dp_accounting
import numpy as np
import pytest

import userdp
from helpers import NO_DATA
from userdp.data.synthetic import lowrank_ratings
from userdp.estimate import LabelPrivateLinearRegression, WeightedERM, weighted_mean
from userdp.exceptions import InvalidParameterError
from userdp.multitask import task_weighted_noisy_gd, task_weighted_ssp
from userdp.partition import select_partitions
from userdp.privacy import PrivacyAccountant, PrivacyBudget
from userdp.recommend import IdEncoder, MatrixFactorization, PublicFeatureRecommender
from userdp.recommend.federated import FederatedPublicFeatureRecommender

REUSED = "The 'seed' parameter of {} must not repeat the seed of a release already charged"
EVENT = dp_accounting.LaplaceDpEvent(1.0)


# -- the accountant -------------------------------------------------------------------------------
def test_a_seed_the_accountant_holds_is_refused_and_nothing_is_recorded():
    acc = PrivacyAccountant().compose(EVENT, seed=11)
    assert acc.seeds == {11}
    with pytest.raises(InvalidParameterError, match=REUSED.format("my_release")):
        acc.check(EVENT, seed=11, caller="my_release")
    with pytest.raises(InvalidParameterError, match="use a different seed per release, or seed"):
        acc.compose(EVENT, seed=11)
    assert len(acc.ledger) == 1 and acc.seeds == {11}


def test_other_seeds_unseeded_releases_and_other_accountants_are_not_refused():
    acc = PrivacyAccountant().compose(EVENT, seed=11)
    acc.compose(EVENT, seed=12).compose(EVENT).compose(EVENT, seed=None)
    assert acc.seeds == {11, 12} and len(acc.ledger) == 4
    assert PrivacyAccountant().compose(EVENT, seed=11).seeds == {11}  # another accountant


def test_a_release_refused_for_its_budget_does_not_take_its_seed():
    acc = PrivacyAccountant(PrivacyBudget(1.0, 1e-5)).compose(EVENT, seed=1)
    with pytest.raises(userdp.BudgetExceededError):
        acc.compose(EVENT, seed=2)
    assert acc.seeds == {1}


def test_a_seed_that_is_not_a_non_negative_int_is_refused_in_the_house_format():
    with pytest.raises(
        InvalidParameterError, match=r"'seed' parameter of PrivacyAccountant\.check"
    ):
        PrivacyAccountant().check(EVENT, seed=-1)


# -- the differencing attack a repeated seed allows -----------------------------------------------
def _neighbouring_values() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """2,000 users of one value each in [0, 1]; the neighbour changes user 0's value 0 -> 1."""
    values = np.random.default_rng(0).uniform(0.0, 1.0, 2000)
    values[0] = 0.0
    other = values.copy()
    other[0] = 1.0
    return np.arange(values.size), values, other


MEAN = dict(epsilon=0.1, bounds=(0.0, 1.0), public_user_sizes=True, h=1.0, noise_variance=0.1)


def test_two_releases_with_one_seed_cancel_their_noise_and_one_accountant_refuses_the_second():
    users, values, other = _neighbouring_values()
    change = (other.sum() - values.sum()) / users.size  # user 0's effect on the mean: 1/2000
    first = weighted_mean(values, users, seed=11, **MEAN)
    second = weighted_mean(other, users, seed=11, **MEAN)
    assert first.noise_scale >= 9 * change  # each release alone hides the change ...
    # ... but the same seed drew the same noise: the difference is the change (to the grid)
    assert second.estimate - first.estimate == pytest.approx(change, rel=1e-3)
    fresh = weighted_mean(other, users, seed=12, **MEAN)  # another seed: the noise stays
    assert abs((fresh.estimate - first.estimate) - change) > change

    acc = PrivacyAccountant()
    again = weighted_mean(values, users, seed=11, accountant=acc, **MEAN)
    assert again.estimate == first.estimate  # a seeded release alone: unchanged, bit for bit
    with pytest.raises(InvalidParameterError, match=REUSED.format("weighted_mean")):
        weighted_mean(NO_DATA, NO_DATA, seed=11, accountant=acc, **MEAN)  # never read
    assert len(acc.ledger) == 1


def test_unseeded_releases_on_one_accountant_draw_fresh_noise():
    users, values, _ = _neighbouring_values()
    acc = PrivacyAccountant()
    a = weighted_mean(values, users, accountant=acc, **MEAN)
    b = weighted_mean(values, users, accountant=acc, **MEAN)
    assert a.estimate != b.estimate and len(acc.ledger) == 2 and acc.seeds == set()


# -- one test per kind of entry point -------------------------------------------------------------
def test_an_estimate_function_refuses_a_seed_its_accountant_holds_before_reading():
    users, values, _ = _neighbouring_values()
    acc = PrivacyAccountant()
    userdp.estimate.weighted_quantile(
        values, users, q=0.5, epsilon=1.0, bounds=(0, 1), seed=3, accountant=acc
    )
    with pytest.raises(InvalidParameterError, match=REUSED.format("sample_limited_mean")):
        userdp.estimate.sample_limited_mean(
            NO_DATA, NO_DATA, epsilon=1.0, bounds=(0, 1), seed=3, accountant=acc
        )
    userdp.estimate.sample_limited_mean(
        values, users, epsilon=1.0, bounds=(0, 1), seed=4, accountant=acc
    )
    assert acc.seeds == {3, 4}


@pytest.fixture(scope="module")
def design():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(300, 2))
    y = np.clip(3.0 + x @ np.array([0.8, -0.5]) + rng.normal(0.0, 0.5, 300), 1.0, 5.0)
    return x, y, np.repeat(np.arange(100), 3)


@pytest.mark.parametrize(
    "make",
    [
        lambda seed: LabelPrivateLinearRegression(
            epsilon=1.0, label_range=(1.0, 5.0), noise_variance=0.25, seed=seed
        ),
        lambda seed: WeightedERM(loss="squared", epsilon=1.0, delta=1e-5, steps=5, seed=seed),
    ],
    ids=["LabelPrivateLinearRegression", "WeightedERM"],
)
def test_an_estimator_refuses_a_seed_its_accountant_holds_before_reading(make, design):
    acc = PrivacyAccountant()
    make(7).fit(*design, accountant=acc)
    name = type(make(7)).__name__
    with pytest.raises(InvalidParameterError, match=REUSED.format(f"{name}.fit")):
        make(7).fit(NO_DATA, NO_DATA, NO_DATA, accountant=acc)
    make(8).fit(*design, accountant=acc)
    assert acc.seeds == {7, 8} and len(acc.ledger) == 2


@pytest.fixture(scope="module")
def ratings():
    return lowrank_ratings(n_users=60, n_items=10, n_ratings=400, seed=1)


@pytest.mark.parametrize(
    "make",
    [
        lambda data, seed: MatrixFactorization(
            epsilon=2.0,
            delta=1e-5,
            items=data.item_labels,
            steps=1,
            dim=2,
            rating_range=(0.5, 5.0),
            seed=seed,
        ),
        lambda data, seed: PublicFeatureRecommender(
            encoder=IdEncoder(10, 2),
            epsilon=2.0,
            delta=1e-5,
            items=data.item_labels,
            steps=1,
            rating_range=(0.5, 5.0),
            seed=seed,
        ),
        lambda data, seed: FederatedPublicFeatureRecommender(
            encoder=IdEncoder(10, 2),
            epsilon=2.0,
            delta=1e-5,
            items=data.item_labels,
            steps=1,
            rating_range=(0.5, 5.0),
            seed=seed,
        ),
    ],
    ids=["MatrixFactorization", "PublicFeatureRecommender", "FederatedPublicFeatureRecommender"],
)
def test_a_recommender_refuses_a_seed_its_accountant_holds_before_training(make, ratings):
    acc = PrivacyAccountant()
    make(ratings, 5).fit(ratings, accountant=acc)
    twin = make(ratings, 5)
    with pytest.raises(InvalidParameterError, match=REUSED.format(f"{type(twin).__name__}.fit")):
        twin.fit(ratings, accountant=acc)
    assert len(acc.ledger) == 1 and not hasattr(twin, "model_")
    make(ratings, 6).fit(ratings, accountant=acc)
    assert acc.seeds == {5, 6}


def _multitask(fn, data, seed, acc):
    users, tasks, x, y, w = data
    common = dict(n_tasks=3, epsilon=1.0, delta=1e-5, seed=seed, accountant=acc)
    if fn is task_weighted_ssp:
        return fn(users, tasks, x, y, w, feature_bound=1.0, label_bound=1.0, ridge=1.0, **common)
    return fn(users, tasks, x, y, w, clip_norm=1.0, steps=2, learning_rate=0.1, **common)


@pytest.mark.parametrize(
    "fn", [task_weighted_ssp, task_weighted_noisy_gd], ids=lambda f: f.__name__
)
def test_a_multitask_function_refuses_a_seed_its_accountant_holds_before_reading(fn):
    rng = np.random.default_rng(2)
    users = np.repeat(np.arange(50), 3)
    tasks = np.tile(np.arange(3), 50)
    x = rng.uniform(-0.5, 0.5, (150, 2))
    w = np.full(150, (1.0 - 1e-12) / np.sqrt(3.0))  # 3 rows a user: squares sum below 1
    data = (users, tasks, x, np.clip(x.sum(axis=1), -1.0, 1.0), w)
    acc = PrivacyAccountant()
    _multitask(fn, data, 9, acc)
    with pytest.raises(InvalidParameterError, match=REUSED.format(fn.__name__)):
        _multitask(fn, (NO_DATA,) * 5, 9, acc)
    _multitask(fn, data, None, acc)
    assert acc.seeds == {9} and len(acc.ledger) == 2


PAIRS = [(u, w) for u in range(3000) for w in ("the", "a", f"rare{u}")]


def test_a_selection_refuses_a_seed_its_accountant_holds_before_reading():
    acc = PrivacyAccountant()
    select_partitions(PAIRS, epsilon=1.0, delta=1e-5, seed=11, accountant=acc)
    with pytest.raises(InvalidParameterError, match=REUSED.format("select_partitions")):
        select_partitions(NO_DATA, epsilon=1.0, delta=1e-5, seed=11, accountant=acc)


def test_different_seeds_or_accountants_let_selections_through():
    acc, other = PrivacyAccountant(), PrivacyAccountant()
    a = select_partitions(PAIRS, epsilon=1.0, delta=1e-5, seed=11, accountant=acc)
    select_partitions(PAIRS, epsilon=1.0, delta=1e-5, seed=12, accountant=acc)
    select_partitions(PAIRS, epsilon=1.0, delta=1e-5, accountant=acc)
    b = select_partitions(PAIRS, epsilon=1.0, delta=1e-5, seed=11, accountant=other)
    assert sorted(a.items) == sorted(b.items) == ["a", "the"] and len(acc.ledger) == 3


ROWS = {"user": [u for u, _ in PAIRS], "key": [k for _, k in PAIRS]}


def test_a_group_by_refuses_a_seed_its_accountant_holds_before_reading():
    acc = PrivacyAccountant()
    userdp.aggregate(ROWS, epsilon=1.0, delta=1e-5, seed=11, accountant=acc)
    with pytest.raises(InvalidParameterError, match=REUSED.format("aggregate")):
        userdp.aggregate(NO_DATA, epsilon=1.0, delta=1e-5, seed=11, accountant=acc)


def test_a_group_by_with_selected_keys_charges_its_seed_once():
    """Its key selection runs with a seed derived from aggregate's own and no user accountant:
    it must not take the seed before aggregate charges it."""
    acc = PrivacyAccountant()
    r = userdp.aggregate(ROWS, epsilon=1.0, delta=1e-5, keys="select", seed=11, accountant=acc)
    assert sorted(r.to_arrow().column("key").to_pylist()) == ["a", "the"]
    assert acc.ledger == (r.dp_event,)
