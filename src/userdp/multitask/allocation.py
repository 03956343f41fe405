"""Budget allocation: how each user spreads a fixed sensitivity budget over their tasks.

A user j holding tasks Omega^j (items they rated) gets task-user weights w_ij >= 0 with
``sum_{i in Omega^j} w_ij^2 <= beta`` (Krichene et al. 2023, Theorem 3.3: a mechanism whose
per-task statistics are weighted by w has l2 sensitivity proportional to sqrt(beta)). The rules:

- :func:`uniform_sampling`: k tasks per user at random, weight 1 (Chien et al. 2021);
- :func:`tail_sampling`: the k tasks with the smallest *private* counts, weight 1 (Chien et al.);
- :func:`adaptive_weights`: omega_i proportional to n_hat_i^-mu, normalised per user (every user
  spends exactly beta, the paper's experiments) or globally with per-user clipping (eq. 11-12).

Every rule reads only the user's own rows, released values (the private counts of
:func:`private_counts`) and fresh random bits, so the *distribution* of a user's weights does not
depend on anyone else's data: that is what makes the weighted sensitivity bound hold. Pass
``keys`` from :func:`row_keys` (a keyed hash of the user's and the task's *labels* under the
noise source's secret salt) and the random choices of a user are a function of that user's own
rows only: rerunning on a neighbouring dataset with the same seed changes no other user's
sample, which is what an audit that couples D and D' relies on. Without ``keys`` the bits are
drawn by row position (each user's sample is still uniform and independent of the data).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, cast

import dp_accounting
import numpy as np
import pyarrow as pa
from scipy import special

from userdp._validation import check_choice, check_int, check_real
from userdp.data.hashing import pair_key, salted_hash, signed_salt
from userdp.exceptions import DataError
from userdp.privacy.noise import NoiseSource

__all__ = [
    "PrivateCounts",
    "adaptive_weights",
    "check_distinct",
    "check_weighted_rows",
    "private_counts",
    "release_counts",
    "row_keys",
    "sample_per_user",
    "tail_sampling",
    "uniform_sampling",
    "user_load",
]

# Shrinks normalised weights a hair so that sum w^2 <= beta holds whatever the summation order.
_SAFETY = 1.0 - 1e-9


@dataclass(frozen=True)
class PrivateCounts:
    """Noisy task counts and a noisy user count, released together by one Gaussian mechanism.

    Attributes
    ----------
    counts : ndarray of float64, shape (n_tasks,)
        Noisy number of (sampled) users per task. May be negative or fractional.
    n_users : float
        Noisy number of users.
    count_sample : int
        At most this many tasks per user were counted.
    noise_multiplier : float
        Noise standard deviation divided by the l2 sensitivity ``sqrt(count_sample + 1)``.
    dp_event : dp_accounting.GaussianDpEvent
    """

    counts: np.ndarray
    n_users: float
    count_sample: int
    noise_multiplier: float
    dp_event: dp_accounting.DpEvent

    @property
    def sensitivity(self) -> float:
        """l2 sensitivity of (counts, n_users) under adding or removing one user."""
        return math.sqrt(self.count_sample + 1)


def _check_rows(users: np.ndarray, tasks: np.ndarray, caller: str) -> tuple[np.ndarray, np.ndarray]:
    users = np.asarray(users)
    tasks = np.asarray(tasks)
    if users.shape != tasks.shape or users.ndim != 1:
        raise DataError(
            f"{caller}: 'users' and 'tasks' must be one-dimensional and of equal length; got "
            f"shapes {users.shape} and {tasks.shape}."
        )
    return users, tasks


def check_distinct(users: np.ndarray, tasks: np.ndarray, caller: str) -> None:
    """Raise DataError if a (task, user) pair repeats: the weighted sensitivity bounds count
    every pair once (two rows of weight 1/sqrt(2) pass the load check but move A by sqrt(2))."""
    if users.size < 2:
        return
    key = np.sort(users.astype(np.int64) * (int(tasks.max()) + 1) + tasks)
    dup = np.flatnonzero(key[1:] == key[:-1])
    if dup.size:
        raise DataError(
            f"{caller}: {dup.size} repeated (task, user) pair(s); every pair must appear once "
            "(aggregate repeated rows first, e.g. with userdp.data.Ratings)."
        )


def check_weighted_rows(
    caller: str,
    users: object,
    tasks: object,
    features: object,
    labels: object,
    weights: object,
    beta: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Validate the rows of a weighted multi-task mechanism; returns them as arrays.

    Shapes must agree, weights must be finite and >= 0, (task, user) pairs distinct, and every
    user's squared weights must sum to at most ``beta``: otherwise the stated sensitivity would
    not hold, so this raises instead of releasing anything.
    """
    users, tasks = np.asarray(users), np.asarray(tasks)
    x = np.asarray(features, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    n = users.size
    if x.ndim != 2 or x.shape[0] != n or tasks.shape != (n,) or y.shape != (n,) or w.shape != (n,):
        raise DataError(
            f"{caller}: users, tasks, labels and weights must have shape (n_rows,) and features "
            f"(n_rows, d); got {users.shape}, {tasks.shape}, {y.shape}, {w.shape}, {x.shape}."
        )
    if np.any(w < 0) or not np.all(np.isfinite(w)):
        raise DataError(f"{caller}: weights must be finite and >= 0.")
    check_distinct(users, tasks, caller)
    if n and float(user_load(users, w).max()) > beta:
        raise DataError(
            f"{caller}: some user's squared weights sum to more than beta={beta:g}; the stated "
            "sensitivity would not hold. Use userdp.multitask.allocation to build weights."
        )
    return users, tasks, x, y, w


_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


#: Keys the task labels' hashes apart from the users' (the task side of the pair key).
_TASK_SALT = 0x7A5C


def _hashable(labels: object) -> pa.Array | pa.ChunkedArray | np.ndarray:
    """Labels as :func:`salted_hash` reads them: Arrow and NumPy as they are, else via Arrow."""
    if isinstance(labels, pa.Array | pa.ChunkedArray | np.ndarray):
        return labels
    return pa.array(list(cast(Iterable[Any], labels)))


def row_keys(
    users: np.ndarray, tasks: np.ndarray, user_labels: object, task_labels: object, salt: int
) -> np.ndarray:
    """Per-row random keys that depend only on the (user label, task label) pair and ``salt``.

    The library's one keyed hash (:mod:`userdp.data.hashing`, as partition selection keys its
    pairs): ``pair_key(salted_hash(user label, salt), salted_hash(task label, salt'))`` with
    ``salt'`` a fixed offset of ``salt``. ``salt`` is secret (``NoiseSource.salt``), so the keys
    are as unpredictable as fresh random bits, but a user's keys do not change when another
    user is added or removed, or when codes shift. Labels hash by value and Arrow type
    (integers as 64-bit longs, strings by their UTF-8 bytes), so an in-memory table and a Spark
    partition holding the same labels derive the same keys. Returns uint64 of shape
    (n_rows,); pass it as ``keys=`` to the sampling rules.
    """
    salt = signed_salt(salt)
    uk = salted_hash(_hashable(user_labels), salt)
    tk = salted_hash(_hashable(task_labels), salt ^ _TASK_SALT)
    return pair_key(uk[np.asarray(users)], tk[np.asarray(tasks)]).view(np.uint64)


def _random_bits(
    users: np.ndarray, noise: NoiseSource | None, keys: np.ndarray | None
) -> np.ndarray:
    """32 random bits per row as int64: the row's key, or fresh bits by row position."""
    if keys is None:
        assert noise is not None  # callers pass a noise source or the row keys
        return noise.random_bits(users.size, 32).astype(np.int64)
    keys = np.asarray(keys, dtype=np.uint64)
    if keys.shape != users.shape:
        raise DataError(f"'keys' must have shape {users.shape}; got {keys.shape}.")
    return (keys >> np.uint64(32)).astype(np.int64)


def sample_per_user(
    users: np.ndarray, k: int, noise: NoiseSource | None, *, keys: np.ndarray | None = None
) -> np.ndarray:
    """Boolean mask keeping ``min(k, n_j)`` rows of every user j, uniformly at random.

    One ``argsort`` of packed int64 keys ``(user << 32) | random32``: each user's rows come out
    in random order and the first k are kept. ``keys`` (from :func:`row_keys`) makes the
    random order a function of each user's own rows.
    """
    users = np.asarray(users)
    if users.size == 0:
        return np.zeros(0, dtype=bool)
    key = (users.astype(np.int64) << 32) | _random_bits(users, noise, keys)
    order = np.argsort(key)
    return _first_k(users, order, k)


def _first_k(users: np.ndarray, order: np.ndarray, k: int) -> np.ndarray:
    """Mask of the first k rows of each user in ``order`` (which groups rows by user)."""
    su = users[order]
    start = np.ones(su.size, dtype=bool)
    np.not_equal(su[1:], su[:-1], out=start[1:])
    run_start = np.maximum.accumulate(np.where(start, np.arange(su.size), 0))
    keep = np.zeros(users.size, dtype=bool)
    keep[order[np.arange(su.size) - run_start < k]] = True
    return keep


def private_counts(
    users: np.ndarray,
    tasks: np.ndarray,
    n_tasks: int,
    *,
    count_sample: int,
    noise_multiplier: float,
    noise: NoiseSource,
    keys: np.ndarray | None = None,
    index: object = None,
) -> PrivateCounts:
    """Noisy per-task user counts and a noisy user count (one Gaussian release).

    Each user contributes at most ``count_sample`` of their tasks (chosen uniformly at random),
    each counted once, plus 1 to the user count; rows must be distinct (task, user) pairs.

    ``keys`` (from :func:`row_keys`) fixes each user's counted tasks by their own rows;
    ``index`` labels the released vector's axis for the release recorder (None: fixed axis).

    Privacy
    -------
    Adding or removing a user changes at most ``count_sample`` task counts by 1 and the user
    count by 1: l2 sensitivity ``sqrt(count_sample + 1)``. Gaussian noise of standard deviation
    ``noise_multiplier * sqrt(count_sample + 1)`` per coordinate; the release is a
    ``GaussianDpEvent(noise_multiplier)``. The exact counts never leave this function.
    """
    users, tasks = _check_rows(users, tasks, "private_counts")
    n_tasks = check_int(n_tasks, "n_tasks", "private_counts", low=1)
    count_sample = check_int(count_sample, "count_sample", "private_counts", low=1)
    z = check_real(noise_multiplier, "noise_multiplier", "private_counts", low=0.0, low_open=True)
    check_distinct(users, tasks, "private_counts")
    keep = sample_per_user(users, count_sample, noise, keys=keys)
    exact = np.bincount(tasks[keep], minlength=n_tasks).astype(np.float64)
    n_exact = float(np.unique(users).size) if users.size else 0.0
    return release_counts(exact, n_exact, count_sample, z, noise, index=index)


def release_counts(
    exact: np.ndarray,
    n_exact: float,
    count_sample: int,
    noise_multiplier: float,
    noise: NoiseSource,
    *,
    index: Any = None,
) -> PrivateCounts:
    """Release exact sampled counts (at most ``count_sample`` tasks per user) and the exact
    user count as :func:`private_counts` does; for engines that count elsewhere (Spark).

    The caller guarantees the sampling rule, hence the l2 sensitivity ``sqrt(count_sample +
    1)`` stated in :func:`private_counts`; the exact values never leave this function.
    """
    n_tasks = exact.size
    z = noise_multiplier
    sd = z * math.sqrt(count_sample + 1)
    # One vector (task counts, then the user count): its axis is fixed by n_tasks.
    released = noise.add_gaussian(
        np.append(exact, n_exact),
        sd,
        statistic="private counts (tasks, users)",
        l2=math.sqrt(count_sample + 1),
        index=index,
    )
    noisy, n_noisy = released[:n_tasks], float(released[n_tasks])
    del exact, n_exact
    return PrivateCounts(noisy, n_noisy, count_sample, z, dp_accounting.GaussianDpEvent(z))


def _sampled_weight(k: int, beta: float | None, caller: str) -> float:
    """Weight of a sampled task: 1, or ``sqrt(beta / k)`` shrunk so k of them sum to <= beta."""
    if beta is None:
        return 1.0
    beta = check_real(beta, "beta", caller, low=0.0, low_open=True)
    return math.sqrt(beta / k) * _SAFETY


def uniform_sampling(
    users: np.ndarray,
    k: int,
    noise: NoiseSource | None,  # unused when keys are given
    *,
    beta: float | None = None,
    keys: np.ndarray | None = None,
) -> np.ndarray:
    """Equal weights on ``k`` tasks per user chosen uniformly at random, 0 elsewhere.

    With ``beta=None`` the weight is 1 (each user's squared weights sum to ``min(k, n_j)``, so
    use ``beta = k`` downstream); with ``beta`` it is ``sqrt(beta / k)``, a hair less so that
    the sum is at most ``beta`` in floating point. Chien et al. 2021 (DPALS, uniform sampling).
    """
    k = check_int(k, "k", "uniform_sampling", low=1)
    weight = _sampled_weight(k, beta, "uniform_sampling")
    return sample_per_user(users, k, noise, keys=keys) * weight


def tail_sampling(
    users: np.ndarray,
    tasks: np.ndarray,
    counts: np.ndarray,
    k: int,
    noise: NoiseSource | None,  # unused when keys are given
    *,
    beta: float | None = None,
    keys: np.ndarray | None = None,
) -> np.ndarray:
    """Equal weights on each user's ``k`` tasks with the smallest private counts, 0 elsewhere.

    The tail-biased sampling heuristic of Chien et al. 2021. ``counts`` must be released
    (private) counts; ties are broken at random. Weights as in :func:`uniform_sampling`.
    """
    users, tasks = _check_rows(users, tasks, "tail_sampling")
    k = check_int(k, "k", "tail_sampling", low=1)
    weight = _sampled_weight(k, beta, "tail_sampling")
    counts = np.asarray(counts, dtype=np.float64)
    jitter = _random_bits(users, noise, keys)
    order = np.lexsort((jitter, counts[tasks], users))
    return _first_k(users, order, k) * weight


def user_load(users: np.ndarray, weights: np.ndarray, n_users: int | None = None) -> np.ndarray:
    """``sum_i w_ij^2`` for every user j (never release it: it is data-dependent)."""
    return np.bincount(users, weights=np.square(weights), minlength=n_users or 0)


def adaptive_weights(
    users: np.ndarray,
    tasks: np.ndarray,
    counts: np.ndarray,
    *,
    mu: float = 0.25,
    beta: float = 1.0,
    normalization: str = "user",
    n_users: float | None = None,
    load_factor: float = 1.0,
    min_count: float = 1.0,
) -> np.ndarray:
    """Adaptive task-user weights ``w_ij`` proportional to ``n_hat_i^-mu`` (Krichene et al.).

    Parameters
    ----------
    users, tasks : int arrays, shape (n_rows,)
        The (user, task) rows, distinct.
    counts : float array, shape (n_tasks,)
        Released private counts ``n_hat``; values below ``min_count`` are raised to it.
    mu : float, default=0.25
        Exponent. 0 is uniform; the paper's analysis gives 1/4 (convex) and 1/2 (strongly
        convex); 1/4..1/2 work best on MovieLens.
    beta : float, default=1.0
        Per-user budget: ``sum_{i in Omega^j} w_ij^2 <= beta`` for every user.
    normalization : {"user", "global"}, default="user"
        ``"user"``: ``w_ij = sqrt(beta) omega_i / ||omega_{Omega^j}||``, so every user spends
        exactly beta (the paper's experiments, Section 5). ``"global"``: eq. (11) in the form
        of Section 5, ``omega_i = n_hat_i^-mu / sqrt(sum_i' n_hat_i'^(1 - 2 mu) / (n beta_bar))``
        with ``beta_bar = beta / load_factor``, then clipped per user by eq. (12).
    n_users : float, optional
        Released (noisy) number of users; required by ``"global"``.
    load_factor : float, default=1.0
        The c(n) of eq. (10): expected load is beta / load_factor.
    min_count : float, default=1.0

    Returns
    -------
    ndarray of float64, shape (n_rows,)

    Privacy
    -------
    ``w_ij`` depends only on user j's own tasks and released values, and
    ``sum_i w_ij^2 <= beta`` holds for every user (checked exactly).
    """
    users, tasks = _check_rows(users, tasks, "adaptive_weights")
    mu = check_real(mu, "mu", "adaptive_weights", low=0.0, high=8.0)
    beta = check_real(beta, "beta", "adaptive_weights", low=0.0, low_open=True)
    normalization = check_choice(
        normalization, "normalization", "adaptive_weights", ["user", "global"]
    )
    min_count = check_real(min_count, "min_count", "adaptive_weights", low=0.0, low_open=True)
    n_hat = np.maximum(np.asarray(counts, dtype=np.float64), min_count)
    n_seg = int(users.max()) + 1 if users.size else 0
    if normalization == "user":
        # Every user spends exactly beta: w_ij = sqrt(beta) omega_i / ||omega_{Omega^j}||.
        # In log space, relative to the user's largest omega, so no exponent under/overflows.
        log_w = -mu * np.log(n_hat)[tasks]
        top = np.full(n_seg, -np.inf)
        np.maximum.at(top, users, log_w)
        w = np.exp(log_w - top[users])  # in (0, 1], the user's largest is 1
        load = user_load(users, w, n_seg)
        scale = np.zeros(n_seg)
        present = load > 0
        scale[present] = np.sqrt(beta / load[present]) * _SAFETY
        return w * scale[users]
    if n_users is None:
        raise DataError(
            "adaptive_weights(normalization='global') needs the released user count "
            "'n_users' (PrivateCounts.n_users)."
        )
    load_factor = check_real(load_factor, "load_factor", "adaptive_weights", low=1.0)
    n_bar = max(float(n_users), 1.0)
    beta_bar = beta / load_factor
    # eq. (11), Section 5 form: omega_i = n_i^-mu / sqrt(sum_i' n_i'^(1-2mu) / (n beta_bar)),
    # computed as exp(log) so large mu cannot overflow.
    log_omega = -mu * np.log(n_hat)
    log_norm = special.logsumexp((1.0 - 2.0 * mu) * np.log(n_hat)) - math.log(n_bar * beta_bar)
    w = np.exp(log_omega - 0.5 * log_norm)[tasks]
    load = user_load(users, w, n_seg)
    # eq. (12): scale down users whose load exceeds beta.
    over = load > beta * _SAFETY
    clip = np.ones(n_seg)
    clip[over] = np.sqrt(beta / load[over]) * _SAFETY
    return w * clip[users]
