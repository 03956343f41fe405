"""Property tests of the sensitivity bounds of the partition-selection weighting rules.

Chen et al. 2025, "Scalable Private Partition Selection via Adaptive Weighting":
Defs. 3.1/3.2 (l2 and novel l-infinity sensitivity), Alg. 2 (UserWeights), Alg. 3 (MAD),
Lemmas 5.3, 5.4, 5.6, Cor. 5.2 and Thm. 6.1.

Neighbouring datasets: S' = S plus one new user v (code ``n_users``, so sorting by user is
kept); ``w = weights(S)`` and ``w' = weights(S')`` over one item universe that is large enough
for v's novel items.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, given, settings, target  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from userdp.partition.weights import basic_weights, mad_weights, user_weights  # noqa: E402

L2_TOL = 1e-9
LINF_TOL = 1e-12
WEIGHT_TOL = 1e-12

# USERDP_PROPERTY_EXAMPLES raises the example count for a longer local search.
FAST = settings(
    max_examples=int(os.environ.get("USERDP_PROPERTY_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# -- datasets -----------------------------------------------------------------------------------
class Neighbours:
    """S and S' = S + v as sorted int32 code arrays over one universe of ``n_items`` codes."""

    def __init__(self, sets: list[list[int]], new_set: list[int], n_items: int) -> None:
        self.sets = sets
        self.new_set = new_set
        self.n_items = n_items
        self.n_users = len(sets)
        self.users = np.repeat(np.arange(self.n_users), [len(s) for s in sets]).astype(np.int32)
        self.items = np.array([i for s in sets for i in s], dtype=np.int32)
        self.users2 = np.concatenate(
            [self.users, np.full(len(new_set), self.n_users, dtype=np.int32)]
        )
        self.items2 = np.concatenate([self.items, np.array(new_set, dtype=np.int32)])
        union = {i for s in sets for i in s}
        self.novel = sorted(set(new_set) - union)
        self.check()

    def check(self) -> None:
        """Harness sanity: sorted by user, every user has a pair, pairs distinct, v added."""
        for users, items, n in (
            (self.users, self.items, self.n_users),
            (self.users2, self.items2, self.n_users + 1),
        ):
            assert users.dtype == np.int32 and items.dtype == np.int32
            assert np.all(np.diff(users) >= 0)
            assert np.all(np.bincount(users, minlength=n) > 0)
            assert np.bincount(users, minlength=n).size == n
            assert len({(int(u), int(i)) for u, i in zip(users, items, strict=True)}) == users.size
            assert items.size == 0 or (items.min() >= 0 and items.max() < self.n_items)
        assert self.users2.size == self.users.size + len(self.new_set) > self.users.size
        assert np.array_equal(self.users2[: self.users.size], self.users)

    def weights(self, rule, **kw) -> tuple[np.ndarray, np.ndarray]:
        w = rule(self.users, self.items, self.n_users, self.n_items, **kw)
        w2 = rule(self.users2, self.items2, self.n_users + 1, self.n_items, **kw)
        # removing nothing changes nothing (same input, fresh call)
        w_again = rule(self.users.copy(), self.items.copy(), self.n_users, self.n_items, **kw)
        assert np.linalg.norm(w_again - w) == 0.0
        return w, w2

    def report(self, w: np.ndarray, w2: np.ndarray, **kw) -> str:
        return (
            f"S={self.sets} S_v={self.new_set} n_items={self.n_items} novel={self.novel} "
            f"params={kw}\nw={w.tolist()}\nw'={w2.tolist()}\n"
            f"||w'-w||={np.linalg.norm(w2 - w)!r}"
        )


def w_init(sets: list[list[int]], n_items: int, lo: int, d_max: int) -> np.ndarray:
    """MAD line 5 (initial l1 weights of adaptive users), computed independently."""
    out = np.zeros(n_items)
    for s in sets:
        if lo <= len(s) <= d_max:
            for i in s:
                out[i] += 1.0 / len(s)
    return out


@st.composite
def base_sets(draw, max_deg: int, hubs: bool = True) -> tuple[list[list[int]], int]:
    """1-30 random users over a small universe, plus optional light 'hub' users.

    Hub users have degree 1..4 and all hold item 0 (and maybe other hub items), so with a
    small tau the hub items' initial MAD weight exceeds tau: the heavy items.
    """
    m = draw(st.integers(1, 15))
    n_random = draw(st.integers(0 if hubs else 1, 30))
    sets = []
    for _ in range(n_random):
        deg = draw(st.integers(1, min(m, max_deg)))
        perm = draw(st.permutations(range(m)))
        sets.append(sorted(perm[:deg]))
    n_hub = draw(st.integers(0, 20)) if hubs else 0
    n_hub_items = min(m, draw(st.integers(1, 4)))
    for _ in range(n_hub):
        deg = draw(st.integers(1, min(m, 4)))
        others = [i for i in draw(st.permutations(range(1, m))) if i >= n_hub_items][: deg - 1]
        extra_hubs = draw(st.lists(st.integers(1, max(n_hub_items - 1, 1)), max_size=deg - 1))
        s = sorted({0, *[h for h in extra_hubs if h < n_hub_items], *others})
        sets.append(s)
    if not sets:
        sets.append([0])
    order = draw(st.permutations(range(len(sets))))
    return [sets[k] for k in order], m


@st.composite
def neighbours(
    draw, d_max: int, b_min: float = 1.0, tau: float = 1.0, max_deg: int | None = None
) -> Neighbours:
    """S from :func:`base_sets` plus an (adversarial) new user v."""
    max_deg = d_max + 5 if max_deg is None else max_deg
    sets, m = draw(base_sets(max_deg))
    lo = math.ceil(1.0 / b_min**2)
    special = sorted({1, max(lo - 1, 1), lo, d_max, d_max + 1, d_max + 5} | {max_deg})
    d_v = draw(st.one_of(st.sampled_from(special), st.integers(1, max_deg)))
    union = sorted({i for s in sets for i in s})
    init = w_init(sets, m, lo, d_max)
    heavy = [i for i in union if init[i] > tau]
    by_weight = sorted(union, key=lambda i: -init[i])
    mode = draw(st.sampled_from(["novel", "heavy", "mixed", "shared", "random"]))
    if mode == "novel":
        shared = []
    elif mode == "heavy":  # all-heavy when possible, then the heaviest others
        shared = (heavy + [i for i in by_weight if i not in heavy])[:d_v]
    elif mode == "shared":
        shared = draw(st.permutations(union))[:d_v]
    elif mode == "mixed":  # some heavy, some light, some novel
        k = draw(st.integers(0, min(d_v, len(union))))
        pool = heavy + [i for i in draw(st.permutations(union)) if i not in heavy]
        shared = pool[:k]
    else:
        k = draw(st.integers(0, min(d_v, len(union))))
        shared = draw(st.permutations(union))[:k]
    t = d_v - len(shared)
    new_set = sorted(shared) + list(range(m, m + t))
    n_items = m + max_deg + draw(st.integers(0, 2))
    return Neighbours(sets, new_set, n_items)


def biases_for(draw, n_items: int, b_min: float) -> np.ndarray:
    value = st.one_of(
        st.just(1.0),
        st.just(0.0),
        st.floats(0.0, 1.0),
        st.floats(0.0, b_min),
        st.floats(b_min, 1.0),
    )
    return np.array(draw(st.lists(value, min_size=n_items, max_size=n_items)), dtype=np.float64)


# -- 1. Basic -----------------------------------------------------------------------------------
@FAST
@given(st.data())
def test_basic_sensitivity(data):
    nb = data.draw(neighbours(d_max=data.draw(st.integers(4, 12))))
    w, w2 = nb.weights(basic_weights)
    norm = np.linalg.norm(w2 - w)
    # the new user's vector has norm exactly 1: this also proves v was really added
    assert abs(norm - 1.0) <= L2_TOL, nb.report(w, w2)
    if nb.novel:
        t = len(nb.novel)
        assert w2[nb.novel].max() <= 1.0 / math.sqrt(t) + LINF_TOL, nb.report(w, w2)


# -- 2. unbiased MAD (Lemma 5.3, 5.6, Cor. 5.2) ------------------------------------------------
taus = st.one_of(
    st.floats(1.0, 20.0),
    st.floats(1.0, 1.5),
    st.sampled_from([1.0, 1.0 + 1e-9, 1.25, 4.0 / 3.0, 1.5, 2.0, 3.0]),
)


@FAST
@given(st.data())
def test_unbiased_mad_sensitivity(data):
    d_max = data.draw(st.integers(4, 12), label="d_max")
    tau = data.draw(taus, label="tau")
    nb = data.draw(neighbours(d_max=d_max, tau=tau))
    kw = {"tau": tau, "d_max": d_max}
    w, w2 = nb.weights(mad_weights, **kw)
    norm = np.linalg.norm(w2 - w)
    target(float(norm), label="l2")  # steer the search toward large differences
    assert norm <= 1.0 + L2_TOL, nb.report(w, w2, **kw)
    if nb.novel:
        t = len(nb.novel)
        target(float(w2[nb.novel].max() * math.sqrt(t)), label="novel")
        assert w2[nb.novel].max() <= 1.0 / math.sqrt(t) + LINF_TOL, nb.report(w, w2, **kw)


# -- 3. biased MAD (Lemma 5.3, 5.6 with biases) ------------------------------------------------
@pytest.mark.slow
@FAST
@given(st.data())
def test_biased_mad_sensitivity(data):
    d_max = data.draw(st.integers(4, 12), label="d_max")
    tau = data.draw(taus, label="tau")
    b_min = data.draw(st.one_of(st.floats(0.5, 1.0), st.sampled_from([0.5, 0.6, 0.75, 1.0])))
    b_max = data.draw(st.one_of(st.floats(1.0, 3.0), st.sampled_from([1.0, 2.0, 3.0])))
    nb = data.draw(neighbours(d_max=d_max, b_min=b_min, tau=tau))
    # biases for every code, novel ones included (in MAD2R they come from noise)
    biases = biases_for(data.draw, nb.n_items, b_min)
    kw = {"tau": tau, "d_max": d_max, "biases": biases, "b_min": b_min, "b_max": b_max}
    w, w2 = nb.weights(mad_weights, **kw)
    norm = np.linalg.norm(w2 - w)
    target(float(norm), label="l2")
    assert norm <= 1.0 + L2_TOL, nb.report(w, w2, **kw)
    if nb.novel:
        t = len(nb.novel)
        target(float(w2[nb.novel].max() * math.sqrt(t) / b_max), label="novel")
        assert w2[nb.novel].max() <= b_max / math.sqrt(t) + LINF_TOL, nb.report(w, w2, **kw)


# -- 4. UserWeights (Lemma 5.4 and Alg. 2's loop) ----------------------------------------------
@st.composite
def user_weights_input(draw):
    b_min = draw(st.one_of(st.floats(0.5, 1.0), st.sampled_from([0.5, 1.0])))
    b_max = draw(st.one_of(st.floats(1.0, 3.0), st.sampled_from([1.0, 3.0])))
    sets, m = draw(base_sets(max_deg=17))
    users = np.repeat(np.arange(len(sets)), [len(s) for s in sets]).astype(np.int32)
    items = np.array([i for s in sets for i in s], dtype=np.int32)
    biases = biases_for(draw, m, b_min)
    return users, items, len(sets), biases, b_min, b_max


def _check_user_weights(users, items, n_users, biases, b_min, b_max):
    wb = user_weights(users, items, n_users, biases, b_min, b_max)
    assert wb.shape == users.shape
    deg = np.bincount(users, minlength=n_users)
    for u in range(n_users):
        ww = wb[users == u]
        d = deg[u]
        msg = f"user {u}: items={items[users == u].tolist()} b={biases[items[users == u]]} "
        msg += f"b_min={b_min} b_max={b_max} w={ww.tolist()}"
        assert np.all(ww >= b_min / math.sqrt(d) - WEIGHT_TOL), msg
        assert np.all(ww <= b_max / math.sqrt(d) + WEIGHT_TOL), msg
        total = float(np.sum(ww * ww))
        assert total <= 1.0 + L2_TOL, msg
        # utility: the loop of lines 6-9 spends the whole budget when that is achievable,
        # i.e. when d * (b_max / sqrt(d))^2 = b_max^2 >= 1 (always, since b_max >= 1)
        if b_max**2 >= 1.0:
            assert total >= 1.0 - 1e-6, msg + f" sum of squares={total!r}"


@FAST
@given(user_weights_input())
def test_user_weights_bounds_and_budget(args):
    _check_user_weights(*args)


@FAST
@given(base_sets(max_deg=17))
def test_user_weights_unbiased_is_inverse_sqrt_degree(sets_m):
    sets, _ = sets_m
    users = np.repeat(np.arange(len(sets)), [len(s) for s in sets]).astype(np.int32)
    items = np.array([i for s in sets for i in s], dtype=np.int32)
    wb = user_weights(users, items, len(sets))
    deg = np.array([len(s) for s in sets])
    np.testing.assert_allclose(wb, 1.0 / np.sqrt(deg[users]), rtol=0, atol=1e-15)


# -- 5. stochastic dominance (Thm. 6.1) --------------------------------------------------------
@FAST
@given(st.data())
def test_mad_dominates_basic_up_to_tau(data):
    d_max = data.draw(st.integers(4, 12), label="d_max")
    tau = data.draw(taus, label="tau")
    nb = data.draw(neighbours(d_max=d_max, tau=tau))
    for users, items, n in (
        (nb.users, nb.items, nb.n_users),
        (nb.users2, nb.items2, nb.n_users + 1),
    ):
        basic = basic_weights(users, items, n, nb.n_items)
        mad = mad_weights(users, items, n, nb.n_items, tau=tau, d_max=d_max)
        bad = mad < np.minimum(basic, tau) - 1e-9
        assert not bad.any(), (
            f"S={nb.sets} tau={tau} d_max={d_max} basic={basic.tolist()} mad={mad.tolist()}"
        )


# -- deterministic worst cases ------------------------------------------------------------------
def _light_users(item_lists: list[list[int]], copies: int) -> list[list[int]]:
    return [list(s) for s in item_lists for _ in range(copies)]


def _worst_cases():
    cases = []
    for d_max in (4, 5, 8, 12):
        for tau in (1.0, 1.5, 3.0):
            n_sat = int(4 * tau) + 2
            # many degree-1 users saturate item 0; v shares it and has d_max - 1 novel items
            sets = _light_users([[0]], n_sat)
            cases.append(("sat1-shared+novel", sets, [0, *range(1, d_max)], d_max, tau))
            # v at d_max, every item heavy (all its initial weight is truncated: gamma = 1)
            sets = _light_users([[i] for i in range(d_max)], n_sat)
            cases.append(("all-heavy-dmax", sets, list(range(d_max)), d_max, tau))
            # heavy items held by adaptive users of degree d_max that reroute to light items
            hub = list(range(d_max))
            spokes = [
                [0, *range(d_max + 1 + k * (d_max - 1), d_max + (k + 1) * (d_max - 1))]
                for k in range(int(d_max * tau) + 2)
            ]
            sets = _light_users([[i] for i in hub], n_sat) + spokes
            cases.append(("heavy+reroute", sets, hub, d_max, tau))
            # item just below tau: v pushes it above (partial truncation)
            k = max(math.floor(tau * 2) - 1, 1)
            sets = _light_users([[0, 1]], k)
            cases.append(("edge-of-tau", sets, [0, 1, *range(2, d_max)], d_max, tau))
            # v one above d_max (non-adaptive) sharing heavy items
            sets = _light_users([[i] for i in range(d_max + 1)], n_sat)
            cases.append(("dmax+1", sets, list(range(d_max + 1)), d_max, tau))
            # v degree 1 on a saturated item, and on a novel item
            cases.append(("deg1-heavy", _light_users([[0]], n_sat), [0], d_max, tau))
            cases.append(("deg1-novel", _light_users([[0]], n_sat), [1], d_max, tau))
    return cases


WORST = _worst_cases()


def _nb(sets, new_set):
    n_items = max(max(max(s) for s in sets), max(new_set)) + 1
    return Neighbours(sets, new_set, n_items)


@pytest.mark.parametrize(("name", "sets", "new_set", "d_max", "tau"), WORST)
def test_worst_cases_unbiased(name, sets, new_set, d_max, tau):
    nb = _nb(sets, new_set)
    kw = {"tau": tau, "d_max": d_max}
    w, w2 = nb.weights(mad_weights, **kw)
    assert np.linalg.norm(w2 - w) <= 1.0 + L2_TOL, nb.report(w, w2, **kw)
    if nb.novel:
        bound = 1.0 / math.sqrt(len(nb.novel)) + LINF_TOL
        assert w2[nb.novel].max() <= bound, nb.report(w, w2, **kw)
    basic = basic_weights(nb.users2, nb.items2, nb.n_users + 1, nb.n_items)
    assert np.all(w2 >= np.minimum(basic, tau) - 1e-9)


@pytest.mark.parametrize(("name", "sets", "new_set", "d_max", "tau"), WORST)
@pytest.mark.parametrize("b_min", [0.5, 0.75, 1.0])
@pytest.mark.parametrize("b_max", [1.0, 3.0])
@pytest.mark.parametrize("bias_pattern", ["heavy-low", "novel-low", "all-zero", "alternate"])
def test_worst_cases_biased(name, sets, new_set, d_max, tau, b_min, b_max, bias_pattern):
    nb = _nb(sets, new_set)
    biases = np.ones(nb.n_items)
    union = sorted({i for s in sets for i in s})
    if bias_pattern == "heavy-low":  # v's shared items cheap, leaving budget for the rest
        biases[[i for i in new_set if i in union]] = 0.0
    elif bias_pattern == "novel-low":
        biases[nb.novel] = 0.0
    elif bias_pattern == "all-zero":
        biases[:] = 0.0
    else:
        biases[::2] = b_min / 2
    kw = {"tau": tau, "d_max": d_max, "biases": biases, "b_min": b_min, "b_max": b_max}
    w, w2 = nb.weights(mad_weights, **kw)
    assert np.linalg.norm(w2 - w) <= 1.0 + L2_TOL, nb.report(w, w2, **kw)
    if nb.novel:
        bound = b_max / math.sqrt(len(nb.novel)) + LINF_TOL
        assert w2[nb.novel].max() <= bound, nb.report(w, w2, **kw)
