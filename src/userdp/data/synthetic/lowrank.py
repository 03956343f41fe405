"""Long-tail ratings shaped like MovieLens-10M with a planted low-rank signal (and features).

:func:`lowrank_ratings` draws Lomax user activity and log-normal item popularity by successive
sampling, then ratings from a planted low-rank model; :func:`lowrank_ratings_with_features` adds
public item features that explain the item factors. The pair drawing, inner products and rating
scale are shared with :func:`userdp.data.longtail.longtail_ratings`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa
from scipy import sparse, special

from userdp._validation import check_int, check_real
from userdp.data.features import SparseFeatures
from userdp.data.ratings import Ratings
from userdp.exceptions import InvalidParameterError

__all__ = ["lowrank_ratings", "lowrank_ratings_with_features"]


# -- ratings: a MovieLens-10M-shaped long-tail set ------------------------------------------------
_ML_MIN_USER_RATINGS = 20  # MovieLens keeps only users with at least 20 ratings
_MAX_USER_FRACTION = 0.7  # cap on a user's share of the items (the heaviest ML10M users)


def _lomax_degrees(
    rng: np.random.Generator, n_users: int, total: int, exponent: float, low: int, high: int
) -> np.ndarray:
    """Per-user counts ``low + floor(c * E)`` clipped to ``high``, summing exactly to ``total``.

    ``E`` is a unit-scale Lomax (shifted Pareto) draw with tail ``P(E > x) ~ x^-exponent``; the
    scale ``c`` is found by bisection and the last few units are added to random users below the
    cap.
    """
    tail = np.expm1(-np.log1p(-rng.random(n_users)) / exponent)  # (1 - U)^(-1/a) - 1

    def degrees(c: float) -> np.ndarray:
        d = np.floor(c * tail)
        np.minimum(d, high - low, out=d)
        return d.astype(np.int64) + low

    lo_c, hi_c = 0.0, 1.0
    while degrees(hi_c).sum() < total and hi_c < 1e15:
        hi_c *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo_c + hi_c)
        if degrees(mid).sum() <= total:
            lo_c = mid
        else:
            hi_c = mid
        if hi_c - lo_c <= 1e-12 * hi_c:
            break
    d = degrees(lo_c)
    short = total - int(d.sum())
    while short > 0:  # at most a few rounds: the jump at hi_c is a handful of users
        open_ = np.flatnonzero(d < high)
        pick = rng.choice(open_, size=min(short, open_.size), replace=False)
        d[pick] += 1
        short -= pick.size
    return d


def _successive_sampling(
    rng: np.random.Generator, degrees: np.ndarray, weights: np.ndarray, max_rounds: int = 8
) -> tuple[np.ndarray, np.ndarray]:
    """Draw ``degrees[u]`` distinct items per user, successively in proportion to ``weights``.

    Exact weighted sampling without replacement (Plackett-Luce order), done in vectorized
    rounds: each round draws with replacement for the users still short, sized by the
    probability mass the user has not drawn yet, and keeps, in draw order, the first new items
    up to the user's need. Users still short after ``max_rounds`` (the heaviest ones) finish
    with Gumbel-top-k keys over the items they do not hold, which is the same distribution.
    Returns ``(users, items)`` as int64 arrays, unsorted.
    """
    n_items = weights.size
    p = weights / weights.sum()
    cdf = np.cumsum(p)
    cdf /= cdf[-1]
    need = degrees.astype(np.int64).copy()
    users_out: list[np.ndarray] = [np.empty(0, dtype=np.int64)]
    items_out: list[np.ndarray] = [np.empty(0, dtype=np.int64)]
    held_mass = np.zeros(need.size)
    for _ in range(max_rounds):
        active = np.flatnonzero(need > 0)
        if active.size == 0:
            break
        remaining = np.maximum(1.0 - held_mass[active], 1e-12)
        draws = np.ceil(need[active] / remaining * 1.15 + 2.0)
        draws = np.minimum(draws, 20.0 * n_items).astype(np.int64)
        new_u = np.repeat(active, draws)
        new_i = np.searchsorted(cdf, rng.random(new_u.size), side="right")
        np.minimum(new_i, n_items - 1, out=new_i)
        # Items the active users already hold come first, so a re-draw of one is a duplicate.
        is_active = np.zeros(need.size, dtype=bool)
        is_active[active] = True
        all_u = np.concatenate(users_out)
        all_i = np.concatenate(items_out)
        sel = is_active[all_u]
        old_u, old_i = all_u[sel], all_i[sel]
        keys = np.concatenate([old_u * n_items + old_i, new_u * n_items + new_i])
        order = np.argsort(keys, kind="stable")
        sk = keys[order]
        first = np.ones(sk.size, dtype=bool)
        np.not_equal(sk[1:], sk[:-1], out=first[1:])
        fresh = order[first & (order >= old_u.size)] - old_u.size
        fresh.sort()  # back to (user, draw) order: new draws are grouped by user
        fu = new_u[fresh]
        run_start = np.ones(fu.size, dtype=bool)
        np.not_equal(fu[1:], fu[:-1], out=run_start[1:])
        starts = np.flatnonzero(run_start)
        rank = np.arange(fu.size) - np.repeat(starts, np.diff(np.append(starts, fu.size)))
        keep = fresh[rank < need[fu]]
        ku, ki = new_u[keep], new_i[keep]
        users_out.append(ku)
        items_out.append(ki)
        need -= np.bincount(ku, minlength=need.size)
        held_mass += np.bincount(ku, weights=p[ki], minlength=need.size)
    stragglers = np.flatnonzero(need > 0)
    if stragglers.size:
        all_u = np.concatenate(users_out)
        all_i = np.concatenate(items_out)
        row_of = np.full(need.size, -1, dtype=np.int64)
        batch = max(1, 4_000_000 // n_items)
        logp = np.log(p)
        for s in range(0, stragglers.size, batch):
            block = stragglers[s : s + batch]
            row_of[block] = np.arange(block.size)
            keys = logp[None, :] + rng.gumbel(size=(block.size, n_items))
            sel = row_of[all_u] >= 0
            keys[row_of[all_u[sel]], all_i[sel]] = -np.inf
            for r, u in enumerate(block):  # few heavy users: a loop over users, not ratings
                top = np.argpartition(-keys[r], need[u] - 1)[: need[u]]
                users_out.append(np.full(top.size, u, dtype=np.int64))
                items_out.append(top.astype(np.int64))
            row_of[block] = -1
    return np.concatenate(users_out), np.concatenate(items_out)


def _item_weights(n_items: int, skew: float) -> np.ndarray:
    """Popularity weight of the item of each rank: ``exp(skew * z_r)``, decreasing in ``r``.

    ``z_r`` is the standard normal quantile at ``1 - (r + 1/2) / n_items``: weights spread like a
    log-normal sample sorted in decreasing order.
    """
    ranks = np.arange(n_items, dtype=np.float64)
    return np.exp(skew * special.ndtri(1.0 - (ranks + 0.5) / n_items))


def _check_range(value: Any, caller: str) -> tuple[float, float]:
    ok = isinstance(value, tuple | list) and len(value) == 2
    if ok:
        try:
            lo, hi = (check_real(v, "rating_range", caller) for v in value)
        except InvalidParameterError:
            ok = False
        else:
            ok = math.isfinite(lo) and math.isfinite(hi) and lo < hi
    if not ok:
        raise InvalidParameterError(
            f"The 'rating_range' parameter of {caller} must be a pair (low, high) of finite "
            f"floats with low < high. Got {value!r} instead."
        )
    return lo, hi


def _draw_pairs(
    rng: np.random.Generator,
    n_users: int,
    n_items: int,
    n_ratings: int,
    user_exponent: float,
    item_skew: float,
    caller: str,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct (user, item) pairs sorted by (user, item), and the item popularity weights.

    Users get Lomax activity (at least ``min(20, n_ratings // n_users)`` ratings, at most 70% of
    the items), items log-normal popularity (:func:`_item_weights`, in a random order).
    """
    max_degree = max(1, int(_MAX_USER_FRACTION * n_items))
    if not n_users <= n_ratings <= n_users * max_degree:
        raise InvalidParameterError(
            f"The 'n_ratings' parameter of {caller} must be an int in the range "
            f"[{n_users}, {n_users * max_degree}] (at least one rating per user, at most 70% of "
            f"the items per user). Got {n_ratings!r} instead."
        )
    low = min(_ML_MIN_USER_RATINGS, n_ratings // n_users, max_degree)
    degrees = _lomax_degrees(rng, n_users, n_ratings, user_exponent, low, max_degree)
    weights = np.empty(n_items)
    weights[rng.permutation(n_items)] = _item_weights(n_items, item_skew)
    users, items = _successive_sampling(rng, degrees, weights)
    keys = users * n_items + items
    del users, items
    keys.sort()
    users = (keys // n_items).astype(np.int32)
    items = (keys - users.astype(np.int64) * n_items).astype(np.int32)
    return users, items, weights


def _inner_products(
    user_factors: np.ndarray, item_factors: np.ndarray, users: np.ndarray, items: np.ndarray
) -> np.ndarray:
    """``<u_users[k], v_items[k]>`` for every pair, in chunks that bound the temporaries."""
    values = np.empty(users.size)
    chunk = 1 << 20
    for s in range(0, users.size, chunk):
        e = min(s + chunk, users.size)
        np.einsum("ij,ij->i", user_factors[users[s:e]], item_factors[items[s:e]], out=values[s:e])
    return values


def _on_scale(values: np.ndarray, lo: float, hi: float, step: float | None) -> np.ndarray:
    """Round to the rating grid (``step`` from ``lo``; None: continuous) and clip to the range."""
    if step is not None:
        top = lo + np.floor((hi - lo) / step + 1e-9) * step
        values = lo + np.round((values - lo) / step) * step
        return np.clip(values, lo, top, out=values)
    return np.clip(values, lo, hi, out=values)


def lowrank_ratings(
    n_users: int = 69_878,
    n_items: int = 10_677,
    n_ratings: int = 10_000_054,
    *,
    rank: int = 16,
    item_skew: float = 2.1,
    user_exponent: float = 2.0,
    noise: float = 0.5,
    rating_range: tuple[float, float] = (0.5, 5.0),
    step: float | None = 0.5,
    seed: int = 0,
) -> Ratings:
    """A long-tail ratings set shaped like MovieLens-10M, with a known low-rank structure.

    The defaults match ML10M's size (69,878 users, 10,677 movies, 10,000,054 ratings) and
    shape:

    * **Item popularity** is log-normal over item ranks: the item of rank ``r`` has weight
      ``exp(item_skew * z_r)`` with ``z_r`` the normal quantile at ``1 - (r + 1/2) / n_items``,
      and each user draws items without replacement in proportion to the weights (so the head
      saturates: no item is rated by more users than exist). Ranks are shuffled over item
      codes. With the defaults the top 10% of items hold about 67% of the ratings and the
      bottom half about 3.6% (ML10M: roughly 60-70% and a few percent). A Zipf law
      ``(r + r0)^-s`` cannot match both shares: when its top 10% hold 70% its bottom half
      still hold about 5%, and a pure Zipf (r0 = 1) has every user rating the top item.
    * **User activity** is heavy-tailed: ``low + floor(c * E)`` ratings, where ``E`` is a unit
      Lomax (shifted Pareto) draw, ``P(E > x) = (1 + x)^-user_exponent``, and ``c`` is set so
      that the counts sum to exactly ``n_ratings``. ``low`` is 20 (MovieLens keeps users with
      at least 20 ratings) or ``n_ratings // n_users`` if that is smaller; a user rates at most
      70% of the items (about the share of the heaviest ML10M users). The defaults give a
      median of 71 ratings per user, a mean of 143 (as ML10M) and a 99th percentile of 1,176.
    * **Ratings** are ``3.5 + signal + noise``: ``signal = 0.9 * <x_u, y_i> / sqrt(rank)`` with
      user and item factors drawn i.i.d. N(0, 1) (so the signal's standard deviation is about
      0.9), ``noise ~ N(0, noise^2)``; rounded to the grid ``low, low + step, ...`` of
      ``rating_range`` (``step=None`` keeps them continuous) and clipped to the range.

    There are no duplicate (user, item) pairs and exactly ``n_ratings`` rows; every user code
    has at least one rating, while the rarest item codes may have none (64 of 10,677 with the
    defaults). Drawing without replacement is exact (successive sampling, done in vectorized
    rounds with a Gumbel-top-k finish). The defaults take about 8 s and 1.3 GB peak on a
    2-core machine.

    Parameters
    ----------
    n_users, n_items, n_ratings : int
        Size; ``n_users <= n_ratings <= n_users * floor(0.7 * n_items)``.
    rank : int, default 16
        Dimension of the low-rank signal.
    item_skew : float, default 2.1
        Log-normal spread of item popularity, >= 0 (0: uniform; larger: more skew).
    user_exponent : float, default 2.0
        Tail exponent of user activity, > 0 (smaller: heavier tail).
    noise : float, default 0.5
        Standard deviation of the Gaussian noise added to the signal.
    rating_range : (float, float), default (0.5, 5.0)
        Ratings are clipped to it.
    step : float or None, default 0.5
        Rating grid step, anchored at ``rating_range[0]``.
    seed : int, default 0
        Seed of the NumPy generator; the same seed gives the same data.

    Returns
    -------
    Ratings
        Codes ``0..n_users-1`` and ``0..n_items-1`` (the code books are the codes).

    Examples
    --------
    >>> r = lowrank_ratings(500, 200, 20_000, seed=1)
    >>> r.n_ratings, r.n_users, r.n_items
    (20000, 500, 200)
    """
    return _lowrank(
        n_users, n_items, n_ratings, rank, item_skew, user_exponent, noise, rating_range, step, seed
    )[0]


def _lowrank(
    n_users: Any,
    n_items: Any,
    n_ratings: Any,
    rank: Any,
    item_skew: Any,
    user_exponent: Any,
    noise: Any,
    rating_range: Any,
    step: Any,
    seed: Any,
) -> tuple[Ratings, np.ndarray]:
    """:func:`lowrank_ratings` and its item factors (arguments as the user gave them: checked
    here)."""
    caller = "lowrank_ratings"
    n_users = check_int(n_users, "n_users", caller, low=1)
    n_items = check_int(n_items, "n_items", caller, low=1)
    n_ratings = check_int(n_ratings, "n_ratings", caller, low=1)
    rank = check_int(rank, "rank", caller, low=1)
    item_skew = check_real(item_skew, "item_skew", caller, low=0.0)
    user_exponent = check_real(user_exponent, "user_exponent", caller, low=0.0, low_open=True)
    noise = check_real(noise, "noise", caller, low=0.0)
    lo, hi = _check_range(rating_range, caller)
    if step is not None:
        step = check_real(step, "step", caller, low=0.0, low_open=True)
    rng = np.random.default_rng(seed)
    users, items, _ = _draw_pairs(
        rng, n_users, n_items, n_ratings, user_exponent, item_skew, caller
    )
    user_factors = rng.standard_normal((n_users, rank))
    item_factors = rng.standard_normal((n_items, rank))
    values = _inner_products(user_factors, item_factors, users, items)
    values *= 0.9 / np.sqrt(rank)
    values += 3.5
    if noise > 0:
        values += rng.normal(0.0, noise, size=values.size)
    values = _on_scale(values, lo, hi, step)
    codes_u, codes_i = pa.array(np.arange(n_users)), pa.array(np.arange(n_items))
    return Ratings(users, items, values, codes_u, codes_i), item_factors


def lowrank_ratings_with_features(
    n_users: int = 69_878,
    n_items: int = 10_677,
    n_ratings: int = 10_000_054,
    *,
    rank: int = 16,
    n_genres: int = 20,
    genre_share: float = 0.15,
    flip: float = 0.1,
    n_years: int = 10,
    seed: int = 0,
    **kwargs: Any,
) -> tuple[Ratings, list[SparseFeatures]]:
    """:func:`lowrank_ratings` (same data for the same arguments) plus public item features.

    Features carry part of the hidden item factors y_i, like genres and release years do:

    * ``genres``: ``n_genres`` random directions g_k; item i has genre k when <y_i, g_k> is in
      the top ``genre_share`` of items, then a ``flip`` share of all memberships is redrawn at
      random (so features inform but do not determine the factors);
    * ``year``: ``n_years`` equal-size buckets of ``y_i[0]`` plus unit Gaussian noise.

    The features use their own random stream, so the ratings equal ``lowrank_ratings``'s.
    """
    ratings, factors = _lowrank(
        n_users,
        n_items,
        n_ratings,
        rank,
        kwargs.pop("item_skew", 2.1),
        kwargs.pop("user_exponent", 2.0),
        kwargs.pop("noise", 0.5),
        kwargs.pop("rating_range", (0.5, 5.0)),
        kwargs.pop("step", 0.5),
        seed,
    )
    if kwargs:
        raise InvalidParameterError(f"Unknown keyword(s) {sorted(kwargs)!r}.")
    n_genres = check_int(n_genres, "n_genres", "lowrank_ratings_with_features", low=1)
    n_years = check_int(n_years, "n_years", "lowrank_ratings_with_features", low=1)
    rng = np.random.default_rng([seed, 0xFEA7])
    proj = factors @ rng.standard_normal((factors.shape[1], n_genres))
    member = proj >= np.quantile(proj, 1.0 - genre_share, axis=0)
    redraw = rng.random(member.shape) < flip
    member[redraw] = rng.random(int(redraw.sum())) < genre_share
    rows, cols = np.nonzero(member)
    genres = sparse.csr_matrix(
        (np.ones(rows.size), (rows, cols)), shape=(n_items, n_genres), dtype=np.float64
    )
    score = factors[:, 0] + rng.standard_normal(n_items)
    bucket = np.minimum((np.argsort(np.argsort(score)) * n_years) // n_items, n_years - 1)
    year = sparse.csr_matrix(
        (np.ones(n_items), (np.arange(n_items), bucket)), shape=(n_items, n_years)
    )
    return ratings, [
        SparseFeatures("genres", genres, [f"genre{k}" for k in range(n_genres)]),
        SparseFeatures("year", year, [f"bucket{k}" for k in range(n_years)]),
    ]
