"""Weighting rules for partition selection, vectorized over integer codes.

Every rule maps capped user sets, given as parallel code arrays ``users``/``items`` (pairs
sorted by user, each user with at least one pair), to a weight per item code. In the
weight-and-threshold meta-algorithm (Chen et al. 2025, Alg. 1) the rule's two sensitivities fix
the noise and threshold; each function states them under "Privacy".

Sensitivities are for neighbouring inputs S' = S + one user v (Defs. 3.1 and 3.2 of the paper):
- l2: sqrt(sum_i (w'(i) - w(i))^2) <= 1;
- novel l-infinity: max over the t items only v holds of w'(i) <= h(t).
"""

from __future__ import annotations

import math

import numpy as np

from userdp._validation import check_int, check_real

__all__ = ["basic_weights", "mad_weights", "user_weights"]


#: Round-off allowance of UserWeights' "< 1" test (:func:`user_weights`' ``tol``).
_TOL = 1e-12
_EPS = float(np.finfo(np.float64).eps)


def _index(codes: np.ndarray) -> np.ndarray:
    """Codes as ``np.intp``, the type bincount and take index with (no copy if already)."""
    return np.asarray(codes).astype(np.intp, copy=False)


def basic_weights(
    users: np.ndarray,
    items: np.ndarray,
    n_users: int,
    n_items: int,
    *,
    degrees: np.ndarray | None = None,
) -> np.ndarray:
    """Basic weighting: each user adds 1/sqrt(|S_u|) to each of its items (paper Alg. 5).

    ``degrees`` may pass ``bincount(users, minlength=n_users)`` when the caller has it.

    Privacy
    -------
    l2 sensitivity 1 (the new user's vector has norm exactly 1); novel l-infinity
    h(t) = 1/sqrt(t) since a user with t novel items has degree >= t.
    """
    users, items = _index(users), _index(items)
    ideg = np.bincount(users, minlength=n_users) if degrees is None else degrees
    with np.errstate(divide="ignore"):  # users left with no pair are never indexed
        inv_sqrt = 1.0 / np.sqrt(ideg.astype(np.float64))
    # w(i) = sum_{u : i in S_u} 1/sqrt(|S_u|)
    return np.bincount(items, weights=inv_sqrt.take(users), minlength=n_items)


def user_weights(
    users: np.ndarray,
    items: np.ndarray,
    n_users: int,
    biases: np.ndarray | None = None,
    b_min: float = 1.0,
    b_max: float = 1.0,
    *,
    tol: float = _TOL,
    degrees: np.ndarray | None = None,
) -> np.ndarray:
    """Per-pair weights of UserWeights (paper Alg. 2), for all users at once.

    ``biases`` holds b(i) in [0, 1] per item code (``None``: all ones, giving 1/sqrt(|S_u|)).
    Items with b(i) < 1 are *biased* and start at max(b_min, b(i))/sqrt(|S_u|); unbiased items
    share the remaining l2 budget up to b_max/sqrt(|S_u|) (line 5; a user with no unbiased item
    skips it); the loop of lines 6-9 scales up the small weights until the user's squared weights
    sum to 1. Each loop pass either finishes a user or lifts its largest small weight to the cap,
    so it ends in at most |S_u| passes; ``tol`` absorbs float round-off in the "< 1" test.
    ``degrees`` may pass ``bincount(users, minlength=n_users)`` when the caller has it.

    Privacy
    -------
    Lemma 5.4: every weight lies in [b_min/sqrt(d), b_max/sqrt(d)] and the user's l2 norm is
    <= 1 (= 1 up to round-off).
    """
    users, items = _index(users), _index(items)
    ideg = np.bincount(users, minlength=n_users) if degrees is None else degrees
    deg = ideg.astype(np.float64)
    with np.errstate(divide="ignore"):  # users left with no pair are never indexed
        inv_sqrt = 1.0 / np.sqrt(deg)
    if biases is None:
        return inv_sqrt.take(users)
    return _biased_user_weights(users, items, biases, b_min, b_max, tol, ideg, deg, inv_sqrt)


def _biased_user_weights(
    users: np.ndarray,
    items: np.ndarray,
    biases: np.ndarray,
    b_min: float,
    b_max: float,
    tol: float,
    ideg: np.ndarray,
    deg: np.ndarray,
    inv_sqrt: np.ndarray,
) -> np.ndarray:
    """:func:`user_weights` with biases, on ``np.intp`` codes, with the users' degrees (as
    integers and floats) and ``1/sqrt(degree)``.

    Only biased pairs can be small (line 7): a user's unbiased value is
    min(b_max/sqrt(d), sqrt((1 - sum_biased w^2)/n_unbiased)) and, biased weights being at most
    1/sqrt(d) each, sum_biased w^2 <= n_biased/d, so both terms are >= 1/sqrt(d). The loop of
    lines 6-9 therefore runs on the biased pairs alone, with each user's unbiased part of the
    squared norm (n_unbiased times its value squared) as a constant.
    """
    n_users = ideg.size
    # line 4 on the biased pairs (sorted by user, as the pairs)
    biased = np.flatnonzero((biases < 1.0).take(items))
    b_users = users.take(biased)
    wb = np.maximum(b_min, biases.take(items.take(biased))) * inv_sqrt.take(b_users)
    b_deg = np.bincount(b_users, minlength=n_users)
    sum_biased_sq = np.bincount(b_users, weights=wb * wb, minlength=n_users)
    n_unbiased = deg - b_deg
    # a user with no unbiased item (n_unbiased = 0) never reads its share: divide by 1 there
    share = np.maximum(1.0 - sum_biased_sq, 0.0)
    share /= np.maximum(n_unbiased, 1.0)
    unbiased_value = np.minimum(b_max * inv_sqrt, np.sqrt(share))  # line 5
    unbiased_sq = n_unbiased * (unbiased_value * unbiased_value)

    # The users still to scale (sorted; a user without biased pairs has none small) and their
    # squared norms. Each pass works on the contiguous segments of these users' biased pairs,
    # summing per segment with bincount over segment ranks.
    total = unbiased_sq + sum_biased_sq
    seg_users = np.flatnonzero((total < 1.0 - tol) & (b_deg > 0))
    seg_total = total.take(seg_users)
    first = np.zeros(n_users, dtype=np.intp)  # each user's first biased pair
    np.cumsum(b_deg[:-1], out=first[1:])
    for _ in range(int(deg.max(initial=0)) + 2):  # lines 6-9; terminates (see user_weights)
        if not seg_users.size:
            break
        seg_deg = b_deg.take(seg_users)
        starts = np.zeros(seg_users.size, dtype=np.intp)
        np.cumsum(seg_deg[:-1], out=starts[1:])
        rank = np.repeat(np.arange(seg_users.size, dtype=np.intp), seg_deg)
        idx = np.arange(rank.size, dtype=np.intp)
        idx += (first.take(seg_users) - starts).take(rank)
        seg_inv_sqrt = inv_sqrt.take(seg_users)
        ww, ss = wb.take(idx), seg_inv_sqrt.take(rank)
        small = ww < ss * (1.0 - tol)  # line 7: S_small = {w < 1/sqrt(|S_u|)}
        max_small = np.full(seg_users.size, -np.inf)  # (maximum.at: faster than reduceat)
        np.maximum.at(max_small, rank, np.where(small, ww, -np.inf))
        ss_u = np.bincount(rank, weights=np.where(small, ww * ww, 0.0), minlength=seg_users.size)
        # line 8: C = min(b_max/sqrt(d) / max_small w, sqrt(1 + (1 - sum w^2)/sum_small w^2))
        with np.errstate(divide="ignore", invalid="ignore"):
            c = np.minimum(
                b_max * seg_inv_sqrt / max_small,
                np.sqrt(1.0 + (1.0 - seg_total) / ss_u),
            )
        c = np.where((ss_u > 0) & np.isfinite(c), np.maximum(c, 1.0), 1.0)
        ww = np.where(small, ww * c.take(rank), ww)  # line 9
        wb[idx] = ww
        seg_total = unbiased_sq.take(seg_users)
        seg_total += np.bincount(rank, weights=ww * ww, minlength=seg_users.size)
        go_on = (seg_total < 1.0 - tol) & (c > 1.0)  # below budget and still progressing
        seg_users, seg_total = seg_users.compress(go_on), seg_total.compress(go_on)
    w = unbiased_value.take(users)
    w[biased] = wb
    return w


def mad_weights(
    users: np.ndarray,
    items: np.ndarray,
    n_users: int,
    n_items: int,
    *,
    tau: float,
    d_max: int,
    biases: np.ndarray | None = None,
    b_min: float = 1.0,
    b_max: float = 1.0,
    degrees: np.ndarray | None = None,
) -> np.ndarray:
    """MaxAdaptiveDegree weights (paper Alg. 3), optionally biased.

    Users with ceil(1/b_min^2) <= |S_u| <= d_max are adaptive: they start from l1 weights
    1/|S_u|, item weights above ``tau`` are truncated, and each adaptive user gets back the
    average fraction of its weight that was cut, rerouted to its items discounted by
    alpha/d_max with alpha = b_min - 1/(2 sqrt(d_max)). Every user finally adds its UserWeights
    (Alg. 2) weights, minus the 1/|S_u| it already spent when adaptive. ``degrees`` may pass
    ``bincount(users, minlength=n_users)`` when the caller has it.

    .. note:: Erratum
       Alg. 3 line 6 prints ``r(i) <- min{0, (w_init(i) - tau)/w_init(i)}``, which is never
       positive and makes MAD reroute nothing (or negative weight). The proofs need the fraction
       of weight above tau: ``r(i) = max{0, (w_init(i) - tau)/w_init(i)}``, used here.

    Privacy
    -------
    For tau >= 1, d_max >= 4 and 1/2 <= b_min <= 1 <= b_max: l2 sensitivity <= 1 (Lemma 5.6)
    and novel l-infinity h(t) = b_max/sqrt(t) (Lemma 5.3; 1/sqrt(t) when unbiased). These
    ranges are checked here; :func:`userdp.partition.mad` sets tau = rho + beta * sigma >= 1.

    Raises
    ------
    InvalidParameterError
        If tau < 1, d_max < 4, b_min outside [0.5, 1] or b_max < 1: the proofs do not cover them.
    """
    check_real(tau, "tau", "mad_weights", low=1.0)
    check_int(d_max, "d_max", "mad_weights", low=4)
    check_real(b_min, "b_min", "mad_weights", low=0.5, high=1.0)
    check_real(b_max, "b_max", "mad_weights", low=1.0)
    users, items = _index(users), _index(items)
    ideg = np.bincount(users, minlength=n_users) if degrees is None else degrees
    users, n_users, ideg = _active_users(users, n_users, ideg)
    if items.size >= n_items:  # pair passes dominate: no need to look for unused codes
        return _mad_weights(users, items, n_users, n_items, tau, d_max, biases, b_min, b_max, ideg)
    present = np.zeros(n_items, dtype=bool)
    present[items] = True
    codes = np.flatnonzero(present)
    if 4 * codes.size >= n_items:
        return _mad_weights(users, items, n_users, n_items, tau, d_max, biases, b_min, b_max, ideg)
    # Few item codes left (later rounds): work on compact codes, which keeps every per-item
    # array small; the same sums in the same order, so the same floats.
    compact = np.zeros(n_items, dtype=np.intp)
    compact[codes] = np.arange(codes.size)
    w = _mad_weights(
        users,
        compact.take(items),
        n_users,
        codes.size,
        tau,
        d_max,
        None if biases is None else biases.take(codes),
        b_min,
        b_max,
        ideg,
    )
    out = np.zeros(n_items)
    out[codes] = w
    return out


def _active_users(
    users: np.ndarray, n_users: int, ideg: np.ndarray
) -> tuple[np.ndarray, int, np.ndarray]:
    """``(users, n_users, degrees)`` renumbered over the users with a pair when at most 60%
    of them have one (later rounds): every per-user array shrinks with them. The new codes
    keep the old ones' order (pairs sorted by user stay sorted) and each user's values are
    computed from the same floats in the same order, so the item weights are the same floats."""
    active = np.flatnonzero(ideg)
    if 5 * active.size > 3 * n_users:  # renumbering costs a pass over the pairs
        return users, n_users, ideg
    code = np.zeros(n_users, dtype=np.intp)
    code[active] = np.arange(active.size, dtype=np.intp)
    return code.take(users), active.size, ideg.take(active)


def _mad_weights(
    users: np.ndarray,
    items: np.ndarray,
    n_users: int,
    n_items: int,
    tau: float,
    d_max: int,
    biases: np.ndarray | None,
    b_min: float,
    b_max: float,
    ideg: np.ndarray,
) -> np.ndarray:
    """:func:`mad_weights` on validated ``np.intp`` codes, with the users' degrees."""
    deg = ideg.astype(np.float64)
    with np.errstate(divide="ignore"):  # users without pairs are never indexed
        inv = 1.0 / deg
        inv_sqrt = 1.0 / np.sqrt(deg)
    adaptive = (deg >= math.ceil(1.0 / b_min**2)) & (deg <= d_max)  # line 3
    inv_adaptive = np.where(adaptive, inv, 0.0)
    wb = None
    if biases is not None:  # line 13 (UserWeights)
        wb = _biased_user_weights(users, items, biases, b_min, b_max, _TOL, ideg, deg, inv_sqrt)
        total = _untruncated(users, items, n_items, tau, wb, inv_adaptive)
        if total is not None:
            return total
    init_pair = inv_adaptive.take(users)  # 1/|S_u| for adaptive users' pairs, else 0
    w_init = np.bincount(items, weights=init_pair, minlength=n_items)  # line 5
    w_trunc = np.minimum(w_init, tau)  # line 8
    alpha = b_min - 1.0 / (2.0 * math.sqrt(d_max))  # line 2
    over = w_init > tau
    extra = None  # line 11's rerouted alpha/d_max e_u per user; None when no item is cut
    if over.any():  # else every r(i) = 0 and e_u = 0: adding 0.0 changes no weight's bits
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.where(over, (w_init - tau) / w_init, 0.0)  # line 6 (erratum: max)
        # line 10: e_u = (1/|S_u|) sum_{i in S_u} r(i), adaptive users only (the others'
        # finite sums of r >= 0 are multiplied by 0)
        excess = np.bincount(users, weights=r.take(items), minlength=n_users) * inv_adaptive
        extra = alpha / d_max * excess
    # line 11 (rerouted alpha/d_max e_u) and lines 14-17 (adaptive users add w_b - 1/|S_u|, the
    # others add w_b) in one pass over the pairs; unbiased, w_b = 1/sqrt(|S_u|) is one value per
    # user, so the whole per-pair term is (the same float operations, once per user)
    if wb is None:
        per_user = inv_sqrt
        if extra is not None:
            per_user += extra
        per_user -= inv_adaptive
        wb = per_user.take(users)
    else:
        if extra is not None:
            wb += extra.take(users)
        wb -= init_pair
    return w_trunc + np.bincount(items, weights=wb, minlength=n_items)


def _untruncated(
    users: np.ndarray,
    items: np.ndarray,
    n_items: int,
    tau: float,
    wb: np.ndarray,
    inv_adaptive: np.ndarray,
) -> np.ndarray | None:
    """Biased MAD's item weights when no item's w_init exceeds ``tau``, else None.

    Then every r(i) = 0 and e_u = 0 (lines 6-11), and the weights w_init + sum (w_b -
    1/|S_u|) are the sums W of the UserWeights weights: one pass over the pairs instead of
    three. Which items to check: every UserWeights weight is >= b_min/sqrt(d) >= 1/d for an
    adaptive user (d >= 1/b_min^2), its pair's share of w_init, so W bounds w_init from above
    and only items with W > tau (a few hundred in later rounds, whose items are below the
    threshold) can be truncated; their w_init is summed over their pairs alone (the same
    additions in the same order as over every pair). The margin covers round-off: each float
    sum of n >= 0 terms is within n eps of its exact value.
    """
    total = np.bincount(items, weights=wb, minlength=n_items)
    maybe = total * (1.0 + 4.0 * items.size * _EPS) > tau
    if maybe.any():
        pos = np.flatnonzero(maybe.take(items))
        w_init = np.bincount(
            items.take(pos), weights=inv_adaptive.take(users.take(pos)), minlength=n_items
        )
        if (w_init > tau).any():
            return None
    return total
