"""Sequential baselines: per-user steps of PolicyGaussian and GreedyUpdate respect their budgets."""

from __future__ import annotations

import numpy as np
import pytest

from userdp.partition import select_partitions
from userdp.partition.baselines import greedy_update_weights, policy_gaussian_weights

TOL = 1e-9


def random_sets(seed: int, n_users: int = 40, n_items: int = 15, max_deg: int = 10):
    rng = np.random.default_rng(seed)
    pop = 1.0 / np.arange(1, n_items + 1)
    pop /= pop.sum()
    users, items = [], []
    for u in range(n_users):
        deg = int(rng.integers(1, max_deg + 1))
        its = rng.choice(n_items, size=deg, replace=False, p=pop)  # unsorted within a user
        users += [u] * deg
        items += its.tolist()
    order = rng.permutation(n_users)
    return np.array(users, dtype=np.int32), np.array(items, dtype=np.int32), n_users, n_items, order


def steps(fn, users, items, n_users, n_items, gamma, order):
    """Histogram before and after each user's update, by running on growing prefixes of order."""
    prev = np.zeros(n_items)
    for k, u in enumerate(order):
        cur = fn(users, items, n_users, n_items, gamma, order[: k + 1])
        yield int(u), prev, cur
        prev = cur


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("gamma", [1.0, 2.5, 50.0])
def test_policy_gaussian_steps_have_l2_norm_at_most_one_and_never_exceed_gamma(seed, gamma):
    users, items, n_users, n_items, order = random_sets(seed)
    final = None
    for u, before, after in steps(
        policy_gaussian_weights, users, items, n_users, n_items, gamma, order
    ):
        step = after - before
        own = np.zeros(n_items, dtype=bool)
        own[items[users == u]] = True
        assert np.all(step >= -TOL)
        assert np.all(np.abs(step[~own]) <= TOL), "a user changed items it does not hold"
        assert np.linalg.norm(step) <= 1 + TOL
        assert np.all(after <= gamma + TOL)
        # The l2 step goes all the way (norm 1) unless every item of the user reaches gamma.
        if np.linalg.norm(step) < 1 - 1e-6:
            assert np.allclose(after[own], np.maximum(before[own], gamma))
        final = after
    np.testing.assert_allclose(
        final, policy_gaussian_weights(users, items, n_users, n_items, gamma, order)
    )


def test_policy_gaussian_first_user_with_t_items_gets_one_over_sqrt_t():
    users = np.array([0, 0, 0, 0], dtype=np.int32)
    items = np.array([0, 1, 2, 3], dtype=np.int32)
    w = policy_gaussian_weights(users, items, 1, 4, 10.0, np.array([0]))
    np.testing.assert_allclose(w, 0.5)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("gamma", [1.0, 2.5, 50.0])
def test_greedy_update_steps_spend_at_most_one_and_fill_at_most_one_item_partially(seed, gamma):
    users, items, n_users, n_items, order = random_sets(seed)
    for u, before, after in steps(
        greedy_update_weights, users, items, n_users, n_items, gamma, order
    ):
        step = after - before
        own_items = items[users == u]
        own = np.zeros(n_items, dtype=bool)
        own[own_items] = True
        assert np.all(step >= -TOL)
        assert np.all(np.abs(step[~own]) <= TOL)
        assert step.sum() <= 1 + TOL
        assert np.all(after <= gamma + TOL)
        touched = step > TOL
        partial = touched & (after < gamma - TOL)
        assert partial.sum() <= 1, "more than one item partially filled"
        # Greedy in the user's own order: the budget is used up unless all items hit gamma.
        if step.sum() < 1 - 1e-6:
            assert np.allclose(after[own], np.maximum(before[own], gamma))
        # Items are filled in the user's order: once one is partial, later ones get nothing.
        seq = [i for i in own_items.tolist() if before[i] < gamma - TOL]
        got = [step[i] > TOL for i in seq]
        assert got == sorted(got, reverse=True), "filled out of order"


def test_greedy_update_first_user_puts_its_whole_budget_on_its_first_item():
    users = np.array([0, 0, 0], dtype=np.int32)
    items = np.array([2, 0, 1], dtype=np.int32)
    w = greedy_update_weights(users, items, 1, 3, 5.0, np.array([0]))
    np.testing.assert_allclose(w, [0.0, 0.0, 1.0])


def test_greedy_update_added_user_can_make_an_item_present_at_weight_zero_positive():
    """Why GreedyUpdate offers every present item, not only positive ones.

    D: user 0 holds [a, i] in that order and spends its whole budget on a, so i is present at
    weight 0. D' adds user 1 = [a] first: it fills a to Gamma = 1, so user 0 now spends on i.
    Item i is not the added user's, yet it turns positive only in D'; offering only positive
    items would let it be released in D' and never in D, outside the delta of the threshold.
    """
    a, i = 0, 1
    d_users, d_items = np.array([0, 0], dtype=np.int32), np.array([a, i], dtype=np.int32)
    without = greedy_update_weights(d_users, d_items, 1, 2, 1.0, np.array([0]))
    users, items = np.append(d_users, 1), np.append(d_items, a)
    with_user = greedy_update_weights(users, items, 2, 2, 1.0, np.array([1, 0]))
    assert without[i] == 0.0 and with_user[i] == 1.0
    assert np.abs(with_user - without).sum() <= 2.0  # both orders: l1 change <= 1 each way


@pytest.mark.parametrize("algorithm", ["policy-gaussian", "greedy-update"])
def test_sequential_baselines_show_a_per_user_progress_bar_only_when_asked(algorithm, capsys):
    pairs = [(u, w) for u in range(3000) for w in ("the", "a")]
    quiet = select_partitions(pairs, epsilon=1.0, delta=1e-5, algorithm=algorithm, seed=0)
    assert capsys.readouterr().err == ""
    shown = select_partitions(
        pairs, epsilon=1.0, delta=1e-5, algorithm=algorithm, seed=0, show_progress=True
    )
    err = capsys.readouterr().err
    assert algorithm in err and "user" in err
    assert shown.items == quiet.items  # the bar does not change the result
