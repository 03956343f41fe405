"""Property tests of the user-level sensitivity of the multi-task item statistics.

Krichene et al. 2023, Theorem 3.3 (proof in Appendix A.1): if every user's task weights satisfy
``sum_i w_ij^2 <= beta``, adding or removing one user changes the stacked statistics
``A_i = sum_j w_ij v_j v_j^T`` by at most ``Gamma_x^2 sqrt(beta)`` in Frobenius norm and
``b_i = sum_j w_ij y_ij v_j`` by at most ``Gamma_x Gamma_y sqrt(beta)`` in l2 norm, provided the
other users' weights do not change. Theorem 3.11 is the same bound for the stacked gradient.

Neighbouring datasets: S' = S plus one new user v, inserted at a random user code p (rows
sorted by user, like :class:`~userdp.data.Ratings`); S is S' without v's rows, re-coded.
Released values (private counts, the noisy user count, the centring value) are the same on
both sides, as they are fixed when the weights are computed.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, given, settings, target  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from userdp.multitask import (  # noqa: E402
    adaptive_weights,
    clip_rows,
    tail_sampling,
    uniform_sampling,
)
from userdp.multitask.kernels import segment_offsets, segment_statistics  # noqa: E402
from userdp.privacy import NoiseSource  # noqa: E402

TOL = 1e-9

FAST = settings(
    max_examples=50,
    deadline=None,
    derandomize=True,  # fixed examples: the same run every time
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


class Neighbours:
    """S' (with the new user at code ``p``) and S (without it, codes above p shifted down)."""

    def __init__(self, data: st.DataObject) -> None:
        draw = data.draw
        self.lo, self.hi = 0.5, 5.0
        self.center = draw(st.floats(self.lo, self.hi), label="center")
        self.half = max(self.hi - self.center, self.center - self.lo)
        self.max_norm = draw(st.floats(0.1, 3.0), label="max_norm")
        self.n_items = draw(st.integers(1, 8), label="n_items")
        self.d = draw(st.integers(1, 3), label="d")
        n_old = draw(st.integers(0, 10), label="n_old")
        self.p = draw(st.integers(0, n_old), label="insert_at")
        self.n_users = n_old + 1  # in S'
        ratings = st.one_of(st.sampled_from([self.lo, self.hi]), st.floats(self.lo, self.hi))
        users, items, values = [], [], []
        for u in range(self.n_users):
            deg = draw(st.integers(1, self.n_items))
            chosen = draw(st.permutations(range(self.n_items)))[:deg]
            users += [u] * deg
            items += sorted(chosen)
            values += [draw(ratings) for _ in range(deg)]
        self.users = np.array(users, dtype=np.int64)
        self.items = np.array(items, dtype=np.int64)
        self.y = np.clip(np.array(values), self.lo, self.hi) - self.center
        seed = draw(st.integers(0, 2**32 - 1), label="seed")
        rng = np.random.default_rng(seed)
        raw = rng.normal(size=(self.n_users, self.d))
        raw *= (rng.uniform(0.0, 2.0 * self.max_norm, self.n_users) / np.linalg.norm(raw, axis=1))[
            :, None
        ]
        if draw(st.booleans(), label="new_user_at_the_bound"):
            raw[self.p] *= 10.0  # clipped to exactly max_norm below
        self.V = clip_rows(raw, self.max_norm)
        self.counts = np.array(
            draw(
                st.lists(st.floats(-5.0, 50.0), min_size=self.n_items, max_size=self.n_items),
                label="released_counts",
            )
        )
        self.released_users = draw(st.floats(1.0, 40.0), label="released_n_users")
        self.noise_seed = seed
        # S: the old users only, re-coded 0..n_old-1.
        self.old = self.users != self.p
        self.users_s = self.users[self.old] - (self.users[self.old] > self.p)
        self.items_s = self.items[self.old]
        self.y_s = self.y[self.old]
        self.V_s = np.delete(self.V, self.p, axis=0)
        assert np.all(np.diff(self.users) >= 0) and np.all(np.diff(self.users_s) >= 0)
        assert np.all(np.linalg.norm(self.V, axis=1) <= self.max_norm * (1 + 1e-12))

    def statistics(self, users, items, y, V, w):
        order, offsets = segment_offsets(items, self.n_items)
        return segment_statistics(offsets, order, users, V, w, y, n_threads=1)

    def check(self, w_big: np.ndarray, w_small: np.ndarray, beta: float) -> None:
        """The sensitivity bounds of Theorem 3.3 between S' (w_big) and S (w_small)."""
        # Up to round-off: w = 1/sqrt(k) can give k w^2 = 1 + 2^-52 (see the unit test
        # test_uniform_sampling_weights_over_sqrt_k_pass_the_unit_budget_check).
        loads = np.bincount(self.users, weights=w_big**2)
        assert loads.max() <= beta * (1 + 1e-12)
        A1, b1 = self.statistics(self.users, self.items, self.y, self.V, w_big)
        A0, b0 = self.statistics(self.users_s, self.items_s, self.y_s, self.V_s, w_small)
        dA = float(np.linalg.norm(A1 - A0))
        db = float(np.linalg.norm(b1 - b0))
        bound_a = self.max_norm**2 * math.sqrt(beta)
        bound_b = self.max_norm * self.half * math.sqrt(beta)
        target(dA / bound_a, label="gram change / bound")
        target(db / bound_b, label="moment change / bound")
        assert dA <= bound_a + TOL, (dA, bound_a)
        assert db <= bound_b + TOL, (db, bound_b)


@FAST
@given(st.data())
def test_uniform_sampling_statistics_have_the_stated_sensitivity(data):
    nb = Neighbours(data)
    k = data.draw(st.integers(1, 5), label="k")
    # One draw of the random bits on S'; S reuses the old users' rows (the same samples).
    w_big = uniform_sampling(nb.users, k, NoiseSource(nb.noise_seed)) / math.sqrt(k)
    nb.check(w_big, w_big[nb.old], beta=1.0)


@FAST
@given(st.data())
def test_tail_sampling_statistics_have_the_stated_sensitivity(data):
    nb = Neighbours(data)
    k = data.draw(st.integers(1, 5), label="k")
    w_big = tail_sampling(nb.users, nb.items, nb.counts, k, NoiseSource(nb.noise_seed))
    w_big = w_big / math.sqrt(k)
    nb.check(w_big, w_big[nb.old], beta=1.0)


@FAST
@given(st.data())
def test_user_normalised_adaptive_statistics_have_the_stated_sensitivity(data):
    nb = Neighbours(data)
    mu = data.draw(st.floats(0.0, 1.0), label="mu")
    beta = data.draw(st.floats(0.05, 5.0), label="beta")
    w_big = adaptive_weights(nb.users, nb.items, nb.counts, mu=mu, beta=beta)
    w_small = adaptive_weights(nb.users_s, nb.items_s, nb.counts, mu=mu, beta=beta)
    # The rule reads only each user's own rows and released values: old users keep their weights.
    np.testing.assert_array_equal(w_small, w_big[nb.old])
    nb.check(w_big, w_small, beta)


@FAST
@given(st.data())
def test_globally_normalised_adaptive_statistics_have_the_stated_sensitivity(data):
    nb = Neighbours(data)
    mu = data.draw(st.floats(0.0, 1.0), label="mu")
    beta = data.draw(st.floats(0.05, 5.0), label="beta")
    load_factor = data.draw(st.floats(1.0, 3.0), label="load_factor")
    kw = dict(
        mu=mu,
        beta=beta,
        normalization="global",
        n_users=nb.released_users,
        load_factor=load_factor,
    )
    w_big = adaptive_weights(nb.users, nb.items, nb.counts, **kw)
    w_small = adaptive_weights(nb.users_s, nb.items_s, nb.counts, **kw)
    np.testing.assert_array_equal(w_small, w_big[nb.old])
    nb.check(w_big, w_small, beta)


@FAST
@given(st.data())
def test_sampling_of_old_users_is_unchanged_when_the_new_users_rows_come_last(data):
    """With the same seed, rows appended after the old ones leave the old users' samples alone
    (the random bits are drawn row by row, so the prefix is the same)."""
    nb = Neighbours(data)
    users, items = nb.users, nb.items
    # Move the new user's rows to the end (its code stays p; rows no longer sorted by user).
    last = np.concatenate([np.flatnonzero(nb.old), np.flatnonzero(~nb.old)])
    k = data.draw(st.integers(1, 5), label="k")
    big = uniform_sampling(users[last], k, NoiseSource(nb.noise_seed))
    small = uniform_sampling(users[nb.old], k, NoiseSource(nb.noise_seed))
    np.testing.assert_array_equal(big[: small.size], small)
    big = tail_sampling(users[last], items[last], nb.counts, k, NoiseSource(nb.noise_seed))
    small = tail_sampling(users[nb.old], items[nb.old], nb.counts, k, NoiseSource(nb.noise_seed))
    np.testing.assert_array_equal(big[: small.size], small)


# -- DPSGD: user-level clipped gradient (recommend/als.py, _GradientOperator's docstring) --------
def user_clipped_gradient(users, items, y, w, U, V, clip, n_items):
    """``g_i = sum_j c_j w_ij 2 (<u_i, v_j> - y_ij) v_j`` with ``c_j = min(1, C / ||G_j||)``,
    ``||G_j||`` the norm of user j's whole stacked gradient, computed block by block."""
    g = np.zeros((n_items, V.shape[1]))
    for j in np.unique(users):
        rows = np.flatnonzero(users == j)
        G = np.zeros_like(g)  # user j's stacked gradient
        for r in rows:
            G[items[r]] += 2.0 * w[r] * (U[items[r]] @ V[j] - y[r]) * V[j]
        norm = float(np.linalg.norm(G))
        g += min(1.0, clip / norm) * G if norm > 0 else G
    return g


@FAST
@given(st.data())
def test_user_clipped_item_gradient_changes_by_at_most_the_clip_norm(data):
    """Note: MatrixFactorization's gradient operator is private and its per-step gradient is not
    observable through the public API without knowing its internal initialisation, so this checks
    the formula of its docstring, written independently, not the operator itself."""
    nb = Neighbours(data)
    clip = data.draw(st.floats(0.01, 10.0), label="clip")
    mu = data.draw(st.floats(0.0, 1.0), label="mu")
    rng = np.random.default_rng(nb.noise_seed + 1)
    U = rng.normal(0.0, 2.0, (nb.n_items, nb.d))
    w_big = adaptive_weights(nb.users, nb.items, nb.counts, mu=mu)
    w_small = adaptive_weights(nb.users_s, nb.items_s, nb.counts, mu=mu)
    g1 = user_clipped_gradient(nb.users, nb.items, nb.y, w_big, U, nb.V, clip, nb.n_items)
    g0 = user_clipped_gradient(nb.users_s, nb.items_s, nb.y_s, w_small, U, nb.V_s, clip, nb.n_items)
    change = float(np.linalg.norm(g1 - g0))
    target(change / clip, label="gradient change / clip")
    assert change <= clip + TOL
    # The docstring's shortcut: a user's rows touch distinct items, so the blocks are orthogonal
    # and ||G_j||^2 = sum_i (2 w_ij e_ij)^2 ||v_j||^2.
    for j in np.unique(nb.users):
        rows = nb.users == j
        e = np.einsum("nd,d->n", U[nb.items[rows]], nb.V[j]) - nb.y[rows]
        shortcut = math.sqrt(float(np.sum((2 * w_big[rows] * e) ** 2)) * float(nb.V[j] @ nb.V[j]))
        G = user_clipped_gradient(
            nb.users[rows], nb.items[rows], nb.y[rows], w_big[rows], U, nb.V, math.inf, nb.n_items
        )
        assert math.isclose(float(np.linalg.norm(G)), shortcut, rel_tol=1e-9, abs_tol=1e-12)
