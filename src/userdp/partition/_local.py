"""Local (NumPy) kernels shared by the partition-selection algorithms.

Degree capping keeps each user's ``cap`` pairs with the smallest keyed hash of (salt, user,
item) (:mod:`userdp.partition._hashing`, bit-identical to Spark's ``xxhash64``), so the local
and Spark engines cap identically for the same salt. Only pairs of users above the cap are
hashed and sorted.
"""

from __future__ import annotations

import numpy as np

from userdp.partition._hashing import pair_key

__all__ = ["cap_degrees", "filter_pairs"]


def cap_degrees(
    users: np.ndarray,
    items: np.ndarray,
    n_users: int,
    cap: int,
    user_hash: np.ndarray,
    item_hash: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, int]:
    """Keep each user's ``cap`` items of smallest keyed hash (paper Alg. 1 lines 3-5).

    ``users`` must be sorted; ``user_hash``/``item_hash`` hold the salted hash of every user /
    item code. A pair's key is ``xxhash64(user_hash, item_hash)`` (signed order, ties broken by
    the item hash), exactly the Spark engine's window order. Returns the capped ``(users,
    items)`` (still sorted by user) and the number of pairs dropped.

    Privacy: each user's kept subset depends only on that user's items and the secret salt,
    so for every salt neighbouring inputs stay neighbouring with every degree <= ``cap``; a
    fresh secret salt per run makes the subset a pseudo-random one.
    """
    deg = np.bincount(users, minlength=n_users)
    heavy = deg > cap
    if not heavy.any():
        return users, items, 0
    pos = np.flatnonzero(heavy[users])  # pairs of users above the cap, sorted by user
    hu = users[pos]
    hi = item_hash[items[pos]]
    key = pair_key(user_hash[hu], hi)
    order = np.lexsort((hi, key, hu))  # by user, then key, then item hash
    del key
    hdeg = deg[heavy]
    starts = np.zeros(hdeg.size, dtype=np.int64)
    np.cumsum(hdeg[:-1], out=starts[1:])
    chosen = order[(starts[:, None] + np.arange(cap)).ravel()]
    keep = np.ones(users.size, dtype=bool)
    keep[pos] = False
    keep[pos[chosen]] = True
    return users[keep], items[keep], int(pos.size - hdeg.size * cap)


def filter_pairs(
    users: np.ndarray, items: np.ndarray, removed_items: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Drop every pair whose item code is flagged in the boolean ``removed_items``."""
    keep = ~removed_items[items]
    return users[keep], items[keep]
