"""Sequential baselines: PolicyGaussian (Gopi et al. 2020) and GreedyUpdate (Carvalho et al. 2022).

Each user, in a random order, updates a shared weight histogram toward an adaptive threshold
Gamma above the release threshold; the weights then get noise and are thresholded. The order
chain makes them inherently sequential: they loop over users (with NumPy inside each step) and
exist to be compared against the parallel algorithms.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

from userdp._validation import check_real
from userdp.data.hashing import pair_key
from userdp.partition.result import SelectionResult
from userdp.partition.select import _Round, _Run, release_mask
from userdp.privacy import (
    LaplaceThresholdDpEvent,
    approximate_budget,
    laplace_scale,
    laplace_threshold,
    record,
)
from userdp.privacy.recording import is_recording, released

__all__ = ["greedy_update", "policy_gaussian"]


def _progress(order: np.ndarray, show: bool, name: str) -> Any:
    """Iterate over users, with a tqdm bar on stderr when asked (the loop is the slow part)."""
    if not show:
        return order
    from tqdm import tqdm

    return tqdm(order, desc=name, unit="user", leave=False, mininterval=0.5, file=sys.stderr)


def _user_segments(users: np.ndarray, n_users: int) -> np.ndarray:
    """CSR index pointer of pairs sorted by user."""
    indptr = np.zeros(n_users + 1, dtype=np.int64)
    np.cumsum(np.bincount(users, minlength=n_users), out=indptr[1:])
    return indptr


def policy_gaussian_weights(
    users: np.ndarray,
    items: np.ndarray,
    n_users: int,
    n_items: int,
    gamma: float,
    order: np.ndarray,
    show_progress: bool = False,
) -> np.ndarray:
    """l2-descent policy histogram (Gopi et al. 2020, Alg. 8): users in ``order``.

    Each user takes the step ``gap * min(1, 1/||gap||)`` where ``gap = Gamma - w`` on its items
    still below Gamma: the closest point to the all-Gamma vector within l2 distance 1.
    """
    indptr = _user_segments(users, n_users)
    w = np.zeros(n_items)
    for u in _progress(order, show_progress, "policy-gaussian"):
        its = items[indptr[u] : indptr[u + 1]]
        gap = gamma - w[its]
        below = gap > 0
        if not below.any():
            continue
        g = gap[below]
        norm = math.sqrt(float(g @ g))
        w[its[below]] += g * min(1.0, 1.0 / norm)
    return w


def greedy_update_weights(
    users: np.ndarray,
    items: np.ndarray,
    n_users: int,
    n_items: int,
    gamma: float,
    order: np.ndarray,
    show_progress: bool = False,
) -> np.ndarray:
    """Greedy policy histogram (Carvalho et al. 2022, GW): users in ``order``.

    Each user spends an l1 budget of 1 on its items in (the given) order, filling each item
    still below Gamma up to Gamma until the budget runs out.
    """
    indptr = _user_segments(users, n_users)
    w = np.zeros(n_items)
    for u in _progress(order, show_progress, "greedy-update"):
        its = items[indptr[u] : indptr[u + 1]]
        gap = gamma - w[its]
        below = gap > 0
        if not below.any():
            continue
        g = gap[below]
        spent_before = np.cumsum(g) - g
        add = np.clip(1.0 - spent_before, 0.0, g)
        w[its[below]] += add
    return w


def _shuffle_within_users(users: np.ndarray, items: np.ndarray, run: _Run) -> np.ndarray:
    """Each user's items (``users`` sorted) in a pseudo-random order: by keyed hash of (secret
    salt, user, item), ties by the item's hash. A user's order depends only on its own items
    and the salt, so neighbouring inputs keep every other user's order (and the auditor's
    replay sees the same order on both)."""
    h_user, h_item = run.hashes()
    hi = h_item[items]
    order = np.lexsort((hi, pair_key(h_user[users], hi), users))
    return items[order]


def policy_gaussian(
    data: Any,
    *,
    epsilon: float,
    delta: float,
    max_items_per_user: int = 100,
    beta: float = 4.0,
    seed: int | None = None,
    user_column: str = "user",
    item_column: str = "item",
    show_progress: bool = False,
) -> SelectionResult:
    """PolicyGaussian (Gopi et al. 2020): sequential l2 descent toward Gamma = rho + beta*sigma.

    Parameters not listed are as in :func:`userdp.partition.basic`.

    Parameters
    ----------
    beta : float, default=4.0
        The adaptive threshold sits beta noise standard deviations above rho.
    show_progress : bool, default=False
        Show a tqdm bar over users on stderr (the sequential loop is the slow part).

    Privacy
    -------
    The l2-descent policy is contractive, so the histogram has l2 sensitivity <= 1 (Gopi et al.
    2020, Thm. 5.2); a new user's t novel items start at 0 and get Gamma/||gap|| <= 1/sqrt(t)
    each. With sets capped to ``max_items_per_user``, the sigma and rho of Basic give
    (epsilon, delta)-DP (Thm. 3.3 of Chen et al. 2025). The user order is pseudo-random,
    by keyed hash of (secret salt, user label): the sensitivity bound holds for every fixed
    order, and a neighbour's order is the same order with one user inserted or removed.
    """
    caller = "policy_gaussian"
    total = approximate_budget(epsilon, delta, caller)
    check_real(beta, "beta", caller, low=0.0)
    run = _Run(data, caller, user_column, item_column, max_items_per_user, seed)
    d = run.data
    users, items = run.capped(d.users, d.items)
    rnd = _Round.calibrate(total, run.cap)
    gamma = rnd.rho + beta * rnd.sigma
    order = run.user_order()
    weights = policy_gaussian_weights(
        users, items, d.n_users, d.n_items, gamma, order, show_progress
    )
    _, selected = run.release(rnd, weights, items)
    params = {
        "max_items_per_user": run.cap,
        "beta": beta,
        "sigma": rnd.sigma,
        "rho": rnd.rho,
        "gamma": gamma,
    }
    return run.finish(selected, "policy-gaussian", params, total)


def greedy_update(
    data: Any,
    *,
    epsilon: float,
    delta: float,
    max_items_per_user: int = 10,
    beta: float = 4.0,
    seed: int | None = None,
    user_column: str = "user",
    item_column: str = "item",
    show_progress: bool = False,
) -> SelectionResult:
    """GreedyUpdate (Carvalho et al. 2022, "GW"): sequential greedy l1 filling, Laplace noise.

    Users in a pseudo-random order, each with its (capped) items in a pseudo-random order
    (keyed hashes of the secret salt, user and item, as for capping), fill items up to
    Gamma = rho + beta * (noise standard deviation) with an l1 budget of 1. Every item present in
    the capped input is a candidate for release, including items left at weight 0.

    Parameters not listed are as in :func:`userdp.partition.basic`.

    Parameters
    ----------
    max_items_per_user : int, default=10
        Keep at most this many items of each user (keyed random subsampling, as in
        :func:`userdp.partition.basic`). The threshold grows with it (every novel item of the
        added user is a candidate), while a user rarely spends its l1 budget of 1 on more than
        a few items below Gamma. Chosen on a pilot Zipf draw (``zipf_contributions(seed=0)``,
        epsilon 1, delta 1e-5, 3 seeds): 1,181 items at 1, 1,769 at 5, 1,765 at 10, 1,680 at
        20, 1,511 at 100.
    beta : float, default=4.0
        Gamma sits beta Laplace standard deviations (sqrt(2)/epsilon) above rho.
    show_progress : bool, default=False
        Show a tqdm bar over users on stderr.

    Privacy
    -------
    Neighbouring inputs D and D' = D + user v, v's set capped to ``max_items_per_user`` items.
    The weight vector has l1 sensitivity <= 1 (Carvalho et al. 2022, Thm. 1, needs Gamma >= 1),
    so Laplace noise of scale 1/epsilon makes the noisy weights of the items present in D
    epsilon-DP, including present items whose weight is 0 in D and positive in D' (later users
    shift their budget when v fills an item they shared; the chain can reach many items).
    v's novel items (present in D' only) number at most ``max_items_per_user``; only the first
    one v reaches gets weight, at most 1 (Gamma >= 1 absorbs the rest of v's budget), the
    others 0. ``rho`` from :func:`userdp.privacy.laplace_threshold` with that many candidates
    keeps the chance that any novel item is released <= delta: (epsilon, delta)-DP.

    .. note:: Fix of a release that broke delta: before, the cap was absent and
       every novel item was a candidate against ``rho = 1 + ln(1/(2 delta))/epsilon``, so one
       user with 200,000 items had items released in most runs. Offering only positive-weight
       items would fix that case but not the chain above, where items present in D at weight 0
       become positive (and candidates) only in D'.
    """
    caller = "greedy_update"
    total = approximate_budget(epsilon, delta, caller)
    check_real(beta, "beta", caller, low=0.0)
    run = _Run(data, caller, user_column, item_column, max_items_per_user, seed)
    d = run.data
    users, items = run.capped(d.users, d.items)
    scale = laplace_scale(total.epsilon)
    rho = laplace_threshold(scale, total.delta, 1.0, run.cap)
    gamma = max(rho + beta * math.sqrt(2.0) * scale, 1.0)
    items = _shuffle_within_users(users, items, run)
    order = run.user_order()
    weights = greedy_update_weights(users, items, d.n_users, d.n_items, gamma, order, show_progress)
    # Recorded for the auditor (l1 <= 1). The noise is textbook float Laplace, not safe noise:
    # these weights are never released, only thresholded, and a Laplace grid fixed for every
    # possible item (l1 grows with the number of coordinates) would be finer than NumPy's
    # Laplace sampler resolves in the tail where rho sits.
    name = "partition.weights[greedy-update]"
    labels = d.item_labels if is_recording() else None
    record(name, weights, l1=1.0, index=labels, rng_state=run.noise.fingerprint(), thresholded=True)
    noisy = released(name, weights + run.noise.laplace(scale, weights.size))
    selected = release_mask(noisy, items, rho)
    run.accountant.compose(LaplaceThresholdDpEvent(total.epsilon, total.delta, scale, rho))
    run.round_sizes.append(int(selected.sum()))
    params = {
        "max_items_per_user": run.cap,
        "beta": beta,
        "laplace_scale": scale,
        "rho": rho,
        "gamma": gamma,
    }
    return run.finish(selected, "greedy-update", params, total)
