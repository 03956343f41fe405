"""Partition selection: capping, weights vs per-user reference loops, algorithms, validation."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections import Counter, defaultdict

import dp_accounting
import numpy as np
import pyarrow as pa
import pytest

from userdp.data import Contributions, section62_instance, zipf_contributions
from userdp.data.hashing import pair_key, salted_hash
from userdp.exceptions import InvalidParameterError
from userdp.partition import (
    ALGORITHMS,
    SelectionResult,
    basic_weights,
    mad_weights,
    select_partitions,
    user_weights,
)
from userdp.partition._local import cap_degrees, cap_pairs
from userdp.partition.select import _SaltedHashes
from userdp.privacy import (
    NoiseSource,
    PrivacyAccountant,
    gaussian_sigma,
    partition_threshold,
)


# -- helpers ------------------------------------------------------------------------------------
def random_sets(seed: int, n_users: int = 60, n_items: int = 25, max_deg: int = 12):
    """Random user sets with a skewed item popularity, as sorted (users, items) code arrays."""
    rng = np.random.default_rng(seed)
    pop = 1.0 / np.arange(1, n_items + 1) ** 0.8
    pop /= pop.sum()
    users, items = [], []
    for u in range(n_users):
        deg = int(rng.integers(1, max_deg + 1))
        its = np.sort(rng.choice(n_items, size=min(deg, n_items), replace=False, p=pop))
        users += [u] * its.size
        items += its.tolist()
    return np.array(users, dtype=np.int32), np.array(items, dtype=np.int32), n_users, n_items


def user_sets(users, items):
    sets = defaultdict(list)
    for u, i in zip(users.tolist(), items.tolist(), strict=True):
        sets[u].append(i)
    return sets


def ref_basic(users, items, n_items):
    w = [0.0] * n_items
    for s in user_sets(users, items).values():
        for i in s:
            w[i] += 1 / math.sqrt(len(s))
    return np.array(w)


def ref_user_weights(s, b, b_min, b_max):
    """Paper Alg. 2 for one user set ``s`` (list of items); returns {item: weight}."""
    d = len(s)
    biased = [i for i in s if b[i] < 1]
    unbiased = [i for i in s if b[i] >= 1]
    w = {}
    for i in biased:
        w[i] = max(b_min, b[i]) / math.sqrt(d)  # line 4
    if unbiased:
        rest = 1 - sum(w[i] ** 2 for i in biased)
        val = min(b_max / math.sqrt(d), math.sqrt(max(rest, 0.0) / len(unbiased)))
        for i in unbiased:
            w[i] = val  # line 5
    for _ in range(10 * d + 10):  # lines 6-9
        total = sum(v * v for v in w.values())
        if total >= 1 - 1e-12:
            break
        small = [i for i in s if w[i] < (1 - 1e-12) / math.sqrt(d)]
        if not small:
            break
        small_sq = sum(w[i] ** 2 for i in small)
        c = min(
            (b_max / math.sqrt(d)) / max(w[i] for i in small),
            math.sqrt(1 + (1 - total) / small_sq),
        )
        if c <= 1:
            break
        for i in small:
            w[i] *= c
    return w


def ref_mad(users, items, n_items, tau, d_max, b=None, b_min=1.0, b_max=1.0, literal=False):
    """Paper Alg. 3 with per-user loops; ``literal=True`` uses the misprinted min{0, ...}."""
    sets = user_sets(users, items)
    b = [1.0] * n_items if b is None else list(b)
    alpha = b_min - 1 / (2 * math.sqrt(d_max))
    adapt = {u for u, s in sets.items() if math.ceil(1 / b_min**2) <= len(s) <= d_max}
    w_init = [0.0] * n_items
    for u in adapt:
        for i in sets[u]:
            w_init[i] += 1 / len(sets[u])
    r = [0.0] * n_items
    for i in range(n_items):
        if w_init[i] > 0:
            frac = (w_init[i] - tau) / w_init[i]
            r[i] = min(0.0, frac) if literal else max(0.0, frac)
    w = [min(x, tau) for x in w_init]
    for u in adapt:
        e = sum(r[i] for i in sets[u]) / len(sets[u])
        for i in sets[u]:
            w[i] += alpha * e / d_max
    for u, s in sets.items():
        wb = ref_user_weights(s, b, b_min, b_max)
        for i in s:
            w[i] += wb[i] - (1 / len(s) if u in adapt else 0.0)
    return np.array(w)


def walk(obj, path="result"):
    """Yield (path, value) for every value reachable from a result."""
    yield path, obj
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            yield from walk(getattr(obj, f.name), f"{path}.{f.name}")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from walk(v, f"{path}[{k!r}]")
    elif isinstance(obj, (list, tuple)):
        for k, v in enumerate(obj):
            yield from walk(v, f"{path}[{k}]")
    elif hasattr(obj, "__dict__") and not isinstance(obj, (np.ndarray, pa.Array, type)):
        for k, v in vars(obj).items():
            yield from walk(v, f"{path}.{k}")


# -- cap_degrees --------------------------------------------------------------------------------
def _cap(users, items, n_users, cap, seed, n_items=None):
    """cap_degrees with the salted hashes of user/item codes under seed ``seed``'s salt."""
    salt = NoiseSource(seed).salt
    n_items = int(items.max()) + 1 if n_items is None else n_items
    uh = salted_hash(np.arange(n_users, dtype=np.int64), salt)
    ih = salted_hash(np.arange(n_items, dtype=np.int64), salt)
    return cap_degrees(users, items, n_users, cap, uh, ih)


def _capped_check(users, items, n_users, cap, seed):
    out_u, out_i, dropped = _cap(users, items, n_users, cap, seed)
    deg = np.bincount(users, minlength=n_users)
    new_deg = np.bincount(out_u, minlength=n_users)
    np.testing.assert_array_equal(new_deg, np.minimum(deg, cap))
    assert np.all(np.diff(out_u) >= 0)
    assert dropped == int(np.maximum(deg - cap, 0).sum())
    pairs_in = set(zip(users.tolist(), items.tolist(), strict=True))
    pairs_out = list(zip(out_u.tolist(), out_i.tolist(), strict=True))
    assert len(set(pairs_out)) == len(pairs_out) and set(pairs_out) <= pairs_in
    light = np.flatnonzero(deg <= cap)
    in_sets, out_sets = user_sets(users, items), user_sets(out_u, out_i)
    for u in light.tolist():
        assert out_sets[u] == in_sets[u]
    # heavy users keep the cap items of smallest (signed key, item hash): a per-user Python sort
    salt = NoiseSource(seed).salt
    for u in np.flatnonzero(deg > cap).tolist():
        hu = salted_hash(np.array([u]), salt)
        mine = np.array(in_sets[u])
        hi = salted_hash(mine.astype(np.int64), salt)
        keys = pair_key(np.repeat(hu, mine.size), hi)
        ranked = sorted(zip(keys.tolist(), hi.tolist(), mine.tolist(), strict=True))
        assert sorted(out_sets[u]) == sorted(i for _, _, i in ranked[:cap])
    return out_u, out_i


@pytest.mark.parametrize("cap", [1, 3, 7, 40])
def test_cap_degrees_keeps_the_cap_items_of_smallest_keyed_hash(cap):
    for seed in range(3):
        users, items, n_users, _ = random_sets(seed, n_users=80, n_items=30, max_deg=20)
        _capped_check(users, items, n_users, cap, seed)


def test_cap_degrees_resolves_ties_in_the_packed_sort_exactly():
    """Items sharing a hash tie in the fast packed sort; the exact path must take over."""
    users, items, n_users, n_items = random_sets(2, n_users=50, n_items=30, max_deg=25)
    salt = NoiseSource(1).salt
    uh = salted_hash(np.arange(n_users, dtype=np.int64), salt)
    ih = salted_hash(np.arange(n_items, dtype=np.int64) // 3, salt)  # 3 items per hash
    out_u, out_i, _ = cap_degrees(users, items, n_users, 4, uh, ih)
    in_sets, out_sets = user_sets(users, items), user_sets(out_u, out_i)
    deg = np.bincount(users, minlength=n_users)
    assert np.array_equal(np.bincount(out_u, minlength=n_users), np.minimum(deg, 4))
    for u in np.flatnonzero(deg > 4).tolist():
        mine = in_sets[u]  # sorted item codes: a stable sort keeps this order among ties
        keys = pair_key(np.repeat(uh[u], len(mine)), ih[mine])
        ranked = sorted(zip(keys.tolist(), ih[mine].tolist(), mine, strict=True))
        assert sorted(out_sets[u]) == sorted(i for *_, i in ranked[:4])


@pytest.mark.parametrize("cap", [1, 4, 40])
def test_cap_pairs_is_cap_degrees_as_intp_codes_with_the_capped_degrees(cap):
    """The local runner's variant keeps the same pairs, as np.intp, and counts them per user."""
    for seed in range(3):
        users, items, n_users, n_items = random_sets(seed, n_users=60, n_items=30, max_deg=20)
        salt = NoiseSource(seed).salt
        uh = salted_hash(np.arange(n_users, dtype=np.int64), salt)
        ih = salted_hash(np.arange(n_items, dtype=np.int64), salt)
        u, i, dropped = cap_degrees(users, items, n_users, cap, uh, ih)
        # the hashes as functions of the codes, as the runner passes them
        u2, i2, dropped2, degrees = cap_pairs(users, items, n_users, cap, uh.take, ih.take)
        assert u2.dtype == i2.dtype == np.intp and dropped2 == dropped
        np.testing.assert_array_equal(u2, u)
        np.testing.assert_array_equal(i2, i)
        np.testing.assert_array_equal(degrees, np.bincount(u, minlength=n_users))


@pytest.mark.parametrize(
    "labels", [pa.array(np.arange(500) * 7919), pa.array([f"w{k}" for k in range(500)])]
)
def test_lazy_salted_hashes_equal_hashing_every_label(labels):
    """The runner hashes labels when capping first asks for them: the same values as hashing
    the whole code book, whichever codes are asked for and in whichever order."""
    salt = NoiseSource(3).salt
    every = salted_hash(labels, salt)
    lazy = _SaltedHashes(labels, salt)
    rng = np.random.default_rng(0)
    for size in (0, 5, 40, 5, 600, 30):  # few codes, repeats, more codes than labels
        codes = rng.integers(0, 500, size)
        np.testing.assert_array_equal(lazy(codes), every[codes])
    assert lazy.done.all()


def test_cap_degrees_returns_the_input_when_nobody_is_over_the_cap():
    users, items, n_users, _ = random_sets(0, max_deg=5)
    out_u, out_i, dropped = _cap(users, items, n_users, 5, 0)
    assert dropped == 0 and out_u is users and out_i is items


def test_cap_degrees_of_a_user_ignore_other_users():
    """A user's kept set depends only on its own items and the salt (neighbours stay neighbours)."""
    users, items, n_users, n_items = random_sets(4, n_users=30, n_items=30, max_deg=20)
    out_u, out_i, _ = _cap(users, items, n_users, 4, 9, n_items)
    keep = users != 7  # remove user 7 (codes of the others unchanged)
    out_u2, out_i2, _ = _cap(users[keep], items[keep], n_users, 4, 9, n_items)
    before, after = user_sets(out_u, out_i), user_sets(out_u2, out_i2)
    assert 7 not in after
    assert {u: s for u, s in before.items() if u != 7} == after


def test_cap_degrees_keeps_each_item_with_probability_cap_over_degree():
    # User 0 has degree 10 (cap 3); user 1 (degree 2) is untouched. Salts vary with the seed.
    users = np.array([0] * 10 + [1] * 2, dtype=np.int32)
    items = np.array([*range(10), 0, 1], dtype=np.int32)
    runs = 3000
    counts = Counter()
    for seed in range(runs):
        out_u, out_i, _ = _cap(users, items, 2, 3, seed)
        counts.update(out_i[out_u == 0].tolist())
    expected = runs * 3 / 10
    sd = math.sqrt(runs * 0.3 * 0.7)
    assert sorted(counts) == list(range(10))
    for item in range(10):
        assert abs(counts[item] - expected) < 5 * sd, (item, counts[item])


def test_cap_degrees_draws_every_subset_uniformly_over_salts():
    users = np.zeros(5, dtype=np.int32)
    items = np.arange(5, dtype=np.int32)
    runs = 3000
    counts = Counter()
    for seed in range(runs):
        _, out_i, _ = _cap(users, items, 1, 2, 10_000 + seed)
        counts[tuple(sorted(out_i.tolist()))] += 1
    assert set(counts) == set(itertools.combinations(range(5), 2))
    expected = runs / 10
    chi2 = sum((c - expected) ** 2 / expected for c in counts.values())
    assert chi2 < 33.7  # chi-square, 9 degrees of freedom, p = 1e-4


# -- weights vs reference loops -----------------------------------------------------------------
@pytest.mark.parametrize("seed", range(5))
def test_basic_weights_match_a_per_user_loop(seed):
    users, items, n_users, n_items = random_sets(seed)
    np.testing.assert_allclose(
        basic_weights(users, items, n_users, n_items), ref_basic(users, items, n_items), rtol=1e-12
    )


@pytest.mark.parametrize("seed", range(6))
def test_user_weights_match_paper_algorithm_2(seed):
    users, items, n_users, n_items = random_sets(seed)
    rng = np.random.default_rng(100 + seed)
    biases = np.where(rng.random(n_items) < 0.5, 1.0, rng.uniform(0.0, 1.0, n_items))
    for b_min, b_max in [(0.5, 2.0), (0.7, 1.2), (1.0, 1.0), (0.5, 1.0)]:
        got = user_weights(users, items, n_users, biases, b_min, b_max)
        sets = user_sets(users, items)
        ref = {u: ref_user_weights(s, biases, b_min, b_max) for u, s in sets.items()}
        expected = [ref[u][i] for u, i in zip(users.tolist(), items.tolist(), strict=True)]
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)
        # Lemma 5.4: every weight in [b_min, b_max]/sqrt(d) and each user's l2 norm <= 1.
        d = np.bincount(users)[users]
        assert np.all(got >= b_min / np.sqrt(d) - 1e-12)
        assert np.all(got <= b_max / np.sqrt(d) + 1e-12)
        assert np.all(np.bincount(users, weights=got**2) <= 1 + 1e-9)


def test_user_weights_without_biases_are_one_over_sqrt_degree():
    users, items, n_users, _ = random_sets(3)
    got = user_weights(users, items, n_users)
    np.testing.assert_allclose(got, 1 / np.sqrt(np.bincount(users)[users]))


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize(("tau", "d_max"), [(1.0, 4), (2.5, 8), (4.0, 50)])
def test_unbiased_mad_weights_match_paper_algorithm_3(seed, tau, d_max):
    users, items, n_users, n_items = random_sets(seed)
    got = mad_weights(users, items, n_users, n_items, tau=tau, d_max=d_max)
    np.testing.assert_allclose(got, ref_mad(users, items, n_items, tau, d_max), rtol=1e-9)


@pytest.mark.parametrize("seed", range(5))
def test_biased_mad_weights_match_paper_algorithm_3(seed):
    users, items, n_users, n_items = random_sets(seed)
    rng = np.random.default_rng(seed)
    biases = np.where(rng.random(n_items) < 0.4, 1.0, rng.uniform(0.0, 1.0, n_items))
    for b_min, b_max, tau, d_max in [(0.5, 2.0, 1.5, 8), (0.8, 1.5, 3.0, 12)]:
        got = mad_weights(
            users,
            items,
            n_users,
            n_items,
            tau=tau,
            d_max=d_max,
            biases=biases,
            b_min=b_min,
            b_max=b_max,
        )
        ref = ref_mad(users, items, n_items, tau, d_max, biases, b_min, b_max)
        np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("biased", [False, True])
def test_mad_weights_are_the_same_floats_when_most_user_codes_have_no_pair(seed, biased):
    # Later rounds leave most user codes without a pair; mad_weights then renumbers the users
    # that have one. Spreading the codes over 5x as many users (empty codes in between) must
    # give the very same floats as the compact codes, unbiased and biased.
    users, items, n_users, n_items = random_sets(seed)
    rng = np.random.default_rng(seed)
    biases = np.where(rng.random(n_items) < 0.4, 1.0, rng.uniform(0.0, 1.0, n_items))
    kw = dict(tau=1.5, d_max=8, biases=biases, b_min=0.5, b_max=2.0) if biased else {}
    kw = {"tau": 1.5, "d_max": 8, **kw}
    compact = mad_weights(users, items, n_users, n_items, **kw)
    spread = mad_weights(5 * users + 2, items, 5 * n_users + 3, n_items, **kw)
    np.testing.assert_array_equal(spread, compact)


@pytest.mark.parametrize("seed", range(6))
def test_biased_mad_weights_match_algorithm_3_on_both_sides_of_truncation(seed):
    # Biased MAD skips the w_init passes when no item can exceed tau (its UserWeights sums
    # bound w_init from above). Put tau just above and just below the largest w_init, and
    # between it and the largest UserWeights sum, where the bound says "maybe" but nothing is
    # truncated: each must match the per-user loops of Alg. 3.
    users, items, n_users, n_items = random_sets(seed, n_users=400, n_items=30, max_deg=10)
    rng = np.random.default_rng(seed)
    biases = np.where(rng.random(n_items) < 0.4, 1.0, rng.uniform(0.0, 1.0, n_items))
    kw = {"d_max": 8, "biases": biases, "b_min": 0.5, "b_max": 1.5}
    deg = np.bincount(users)
    adaptive = (deg >= 4) & (deg <= kw["d_max"])
    w_init = np.bincount(items, weights=np.where(adaptive, 1.0 / deg, 0.0)[users])
    w_user = np.bincount(items, weights=user_weights(users, items, n_users, biases, 0.5, 1.5))
    top, top_user = w_init.max(), w_user.max()
    assert top >= 1.0 and top_user > 1.01 * top  # tau >= 1 is required; room in between
    for tau in (0.99 * top, 1.01 * top, (top + top_user) / 2, 1.01 * top_user):
        got = mad_weights(users, items, n_users, n_items, tau=max(tau, 1.0), **kw)
        ref = ref_mad(users, items, n_items, max(tau, 1.0), 8, biases, 0.5, 1.5)
        np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("seed", range(8))
def test_mad_weight_is_at_least_min_of_basic_weight_and_tau(seed):
    # Thm. 6.1, for tau >= 1 and d_max >= 4.
    users, items, n_users, n_items = random_sets(seed, n_users=150, n_items=40)
    basic = basic_weights(users, items, n_users, n_items)
    for tau, d_max in [(1.0, 4), (2.0, 6), (5.0, 12), (30.0, 12)]:
        mad = mad_weights(users, items, n_users, n_items, tau=tau, d_max=d_max)
        present = np.bincount(items, minlength=n_items) > 0
        assert np.all(mad[present] >= np.minimum(basic[present], tau) - 1e-9)


def test_literal_min_in_line_6_makes_mad_select_nothing_while_the_erratum_selects_many():
    data = zipf_contributions(20_000, n_items=200_000, seed=3)
    noise = NoiseSource(5)
    users, items, _ = _cap(data.users, data.items, data.n_users, 100, 5, data.n_items)
    sigma = gaussian_sigma(1.0, 5e-6)
    rho = partition_threshold(sigma, 1e-5, 100)
    tau = rho + 2 * sigma
    z = noise.gaussian(sigma, data.n_items)
    present = np.zeros(data.n_items, dtype=bool)
    present[items] = True
    lit = ref_mad(users, items, data.n_items, tau, 50, literal=True)
    fixed = ref_mad(users, items, data.n_items, tau, 50)
    np.testing.assert_allclose(
        fixed, mad_weights(users, items, data.n_users, data.n_items, tau=tau, d_max=50), rtol=1e-9
    )
    n_literal = int(np.sum(present & (lit + z >= rho)))
    n_fixed = int(np.sum(present & (fixed + z >= rho)))
    assert n_fixed > 100
    assert n_literal <= 0.05 * n_fixed, (n_literal, n_fixed)


# -- algorithms ---------------------------------------------------------------------------------
ALL = list(ALGORITHMS)


@pytest.fixture(scope="module")
def mixed_data():
    """3000 users hold "common"; 60 hold "mid"; each user has a singleton and a few Zipf items."""
    rng = np.random.default_rng(0)
    rows = []
    for u in range(3000):
        rows += [(f"u{u}", "common"), (f"u{u}", f"single{u}")]
        if u < 60:
            rows.append((f"u{u}", "mid"))
        for k in rng.zipf(1.5, size=int(rng.integers(0, 8))):
            rows.append((f"u{u}", f"z{min(int(k), 5000)}"))
        if u % 100 == 0:  # some heavy users and some duplicated rows
            rows += [(f"u{u}", f"h{k}") for k in range(150)]
            rows.append((f"u{u}", "common"))
    return rows


@pytest.fixture(scope="module")
def mixed_contributions(mixed_data):
    return Contributions.from_pairs(mixed_data)


@pytest.fixture(scope="module")
def results(mixed_contributions):
    return {
        name: select_partitions(
            mixed_contributions, epsilon=1.0, delta=1e-5, algorithm=name, seed=3
        )
        for name in ALL
    }


@pytest.mark.parametrize("name", ALL)
def test_every_algorithm_outputs_a_subset_of_the_input_items(name, results, mixed_data):
    res = results[name]
    assert isinstance(res, SelectionResult)
    assert set(res.items) <= {i for _, i in mixed_data}
    assert len(set(res.items)) == len(res)
    assert res.algorithm == name


@pytest.mark.parametrize("name", ALL)
def test_every_algorithm_selects_frequent_items_and_never_singletons(name, results):
    items = set(results[name].items)
    assert "common" in items
    assert not any(str(i).startswith("single") for i in items)


@pytest.mark.parametrize("name", ALL)
def test_every_algorithm_is_reproducible_with_a_seed(name, mixed_contributions):
    kw = {"epsilon": 1.0, "delta": 1e-5, "algorithm": name}
    a = select_partitions(mixed_contributions, seed=9, **kw)
    b = select_partitions(mixed_contributions, seed=9, **kw)
    assert a.items == b.items
    assert a.diagnostics.pairs_dropped_by_capping == b.diagnostics.pairs_dropped_by_capping


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize(("eps", "delta"), [(1.0, 1e-5), (0.3, 1e-7)])
def test_every_algorithm_spends_exactly_the_requested_budget(name, eps, delta, mixed_contributions):
    res = select_partitions(mixed_contributions, epsilon=eps, delta=delta, algorithm=name, seed=1)
    # gaussian composition rounds sigma up by 1e-12 relative: epsilon is spent to 1e-9
    assert res.budget.epsilon == pytest.approx(eps, rel=1e-9)
    assert res.budget.epsilon <= eps
    assert res.budget.delta == pytest.approx(delta, rel=1e-12)
    assert isinstance(res.dp_event, dp_accounting.DpEvent)
    spent = (
        PrivacyAccountant().compose(res.dp_event).spent(res.parameters.get("gaussian_delta", 0.0))
    )
    assert spent.epsilon == pytest.approx(eps, rel=1e-9)
    assert spent.delta == pytest.approx(delta, rel=1e-12)


@pytest.mark.parametrize("name", ALL)
def test_no_result_attribute_holds_noisy_weights(name, results, mixed_contributions):
    res = results[name]
    for path, value in walk(res):
        if isinstance(value, np.ndarray):
            assert not np.issubdtype(value.dtype, np.floating), path
            assert value.size < mixed_contributions.n_items, path
        if isinstance(value, pa.Array) and path != "result.item_array":
            assert not pa.types.is_floating(value.type), path
        if isinstance(value, (list, tuple)) and len(value) >= 50:
            assert not all(isinstance(v, float) for v in value), path


@pytest.mark.parametrize("name", ALL)
def test_every_algorithm_reports_exact_input_diagnostics(name, results, mixed_data):
    d = results[name].diagnostics
    distinct = set(mixed_data)
    assert d.n_users == len({u for u, _ in mixed_data}) == 3000
    assert d.n_pairs == len(distinct)
    assert d.duplicates_dropped == len(mixed_data) - len(distinct) > 30
    assert sum(d.round_sizes) == len(results[name])
    assert d.seconds >= 0


@pytest.mark.parametrize(
    ("name", "n_capped_rounds"),
    [
        ("basic", 1),
        ("mad", 1),
        ("policy-gaussian", 1),
        ("greedy-update", 1),
        ("dp-sips", 2),
        ("mad2r", 1),  # pooled by default: capped once
    ],
)
@pytest.mark.parametrize("cap", [5, 100])
def test_pairs_dropped_by_capping_matches_the_degrees(name, n_capped_rounds, cap, mixed_data):
    kw = {"max_items_per_user": cap}
    if name in ("mad", "mad2r"):
        kw["d_max"] = min(cap, 50)
    res = select_partitions(mixed_data, epsilon=1.0, delta=1e-5, algorithm=name, seed=2, **kw)
    deg = Counter(u for u, _ in set(mixed_data))
    expected_first = sum(max(0, d - cap) for d in deg.values())
    dropped = res.diagnostics.pairs_dropped_by_capping
    assert len(dropped) == n_capped_rounds
    assert dropped[0] == expected_first
    assert all(0 <= x <= expected_first for x in dropped)
    assert res.parameters["max_items_per_user"] == cap


def test_mad2r_parameters_hold_the_reference_round_values(results, mixed_contributions):
    basic = select_partitions(  # docs/papers.md's reference values: the papers' settings
        mixed_contributions, epsilon=1.0, delta=1e-5, composition="basic", b_max=2.0, seed=3
    )
    rounds = basic.parameters["rounds"]
    assert rounds[0]["sigma"] == pytest.approx(37.867, abs=1e-3)
    assert _textbook_or_safe(rounds[0]["rho"], 217.11, 1e-2)
    assert rounds[1]["sigma"] == pytest.approx(4.3039, abs=1e-4)
    assert _textbook_or_safe(rounds[1]["rho"], 23.208, 1e-3)
    p = results["mad"].parameters
    assert _textbook_or_safe(p["rho"], 20.7897, 1e-4)
    assert _textbook_or_safe(p["tau"], 28.558, 1e-3)
    assert _textbook_or_safe(results["policy-gaussian"].parameters["gamma"], 36.326, 1e-3)


def _textbook_or_safe(value: float, textbook: float, tol: float) -> bool:
    """``value`` is the papers' ``textbook`` threshold (to ``tol``) grown by safe noise only.

    Safe noise draws ``sigma (1 + 2^-12)`` and adds two grid steps ``2^-27`` and a relative
    ``2^-52`` to rho, so a threshold lies between the textbook one and ``(1 + 2^-11)``
    times it plus ``2^-25``.
    """
    return textbook - tol < value <= (textbook + tol) * (1 + 2.0**-11) + 2.0**-25


def test_integer_items_are_returned_as_ints():
    pairs = [(f"u{u}", 7) for u in range(3000)] + [(f"u{u}", u + 100) for u in range(3000)]
    res = select_partitions(pairs, epsilon=1.0, delta=1e-5, algorithm="mad", seed=0)
    assert res.items == [7]
    assert type(res.items[0]) is int


# -- validation ---------------------------------------------------------------------------------
SMALL = [(u, "a") for u in range(10)]


@pytest.mark.parametrize(
    ("algorithm", "kwargs", "match"),
    [
        ("mad2r", {"epsilon": 0.0}, "'epsilon' parameter of mad2r must be a float in the range"),
        ("basic", {"epsilon": -1.0}, "'epsilon' parameter of basic"),
        ("mad", {"delta": 0.0}, "'delta' parameter of mad must be a float in the range \\(0, 1\\)"),
        ("dp-sips", {"delta": 1.0}, "'delta' parameter of dp_sips"),
        ("greedy-update", {"delta": 1.0}, "'delta' parameter of greedy_update"),
        ("policy-gaussian", {"epsilon": float("nan")}, "'epsilon' parameter of policy_gaussian"),
        ("quantum", {}, "'algorithm' parameter of select_partitions must be one of 'mad2r'"),
        ("mad", {"d_max": 3}, "'d_max' parameter of mad must be an int in the range \\[4"),
        ("mad2r", {"d_max": 3}, "'d_max' parameter of mad2r"),
        (
            "mad",
            {"d_max": 60, "max_items_per_user": 50},
            "'d_max' parameter of mad must be an int in the range \\[4, max_items_per_user=50\\]",
        ),
        ("mad", {"beta": -0.5}, "'beta' parameter of mad"),
        ("mad2r", {"beta": -0.5}, "'beta' parameter of mad2r"),
        ("policy-gaussian", {"beta": -1.0}, "'beta' parameter of policy_gaussian"),
        ("greedy-update", {"beta": -1.0}, "'beta' parameter of greedy_update"),
        ("mad2r", {"b_min": 0.4}, "'b_min' parameter of mad2r .*\\[0.5, 1\\]"),
        ("mad2r", {"b_min": 1.1}, "'b_min' parameter of mad2r"),
        ("mad2r", {"b_max": 0.9}, "'b_max' parameter of mad2r"),
        ("mad2r", {"c_lb": -1.0}, "'c_lb' parameter of mad2r"),
        ("mad2r", {"fractions": (0.5, 0.4)}, "'fractions' parameter of mad2r .*summing to 1"),
        ("dp-sips", {"fractions": (0.5, 0.6)}, "'fractions' parameter of dp_sips"),
        ("mad2r", {"fractions": (0.2, 0.3, 0.5)}, "'fractions' parameter of mad2r must have"),
        ("mad2r", {"fractions": (1.0,)}, "exactly 4 parts"),
        ("basic", {"max_items_per_user": 0}, "'max_items_per_user' parameter of basic"),
        ("dp-sips", {"max_items_per_user": 0}, "'max_items_per_user' parameter of dp_sips"),
        ("policy-gaussian", {"max_items_per_user": 0}, "'max_items_per_user' parameter"),
        ("mad", {"max_items_per_user": 2.5}, "'max_items_per_user' parameter of mad"),
        ("basic", {"seed": -3}, "'seed' parameter of NoiseSource"),
    ],
)
def test_invalid_parameters_are_rejected_with_a_clear_message(algorithm, kwargs, match):
    params = {"epsilon": 1.0, "delta": 1e-5, **kwargs}
    with pytest.raises(InvalidParameterError, match=match):
        select_partitions(SMALL, algorithm=algorithm, **params)


# -- Section 6.2 and Zipf comparisons -----------------------------------------------------------
def test_mad_beats_basic_on_the_section_6_2_instance():
    data = section62_instance()
    kw = {"epsilon": 1.0, "delta": 1e-5, "max_items_per_user": 4}
    mad = [len(select_partitions(data, algorithm="mad", d_max=4, seed=s, **kw)) for s in range(5)]
    basic = [len(select_partitions(data, algorithm="basic", seed=s, **kw)) for s in range(5)]
    assert np.mean(mad) > 1.2 * np.mean(basic), (mad, basic)
    assert np.mean(basic) > 200


@pytest.mark.parametrize("extra", [[], [(3000, "b")]], ids=["nothing-left", "one-item-left"])
def test_mad2r_survives_a_round_two_with_users_left_without_items(extra):
    pairs = [(u, "a") for u in range(3000)] + extra
    res = select_partitions(pairs, epsilon=1.0, delta=1e-5, algorithm="mad2r", seed=0)
    assert "a" in res.items


def test_user_weights_ignore_users_without_pairs():
    w = user_weights(
        np.array([1], dtype=np.int32), np.array([0], dtype=np.int32), 2, np.ones(1), 0.5, 2.0
    )
    np.testing.assert_allclose(w, [1.0])


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_released_order_does_not_depend_on_the_input_row_order(algorithm):
    # Regression: items came out in order of first appearance, which depends on users' rows.
    p1 = [(u, w) for u in range(3000) for w in ("the", "a", "of")]
    p2 = [(u, w) for u in range(3000) for w in ("of", "a", "the")]
    r1 = select_partitions(p1, epsilon=1.0, delta=1e-5, algorithm=algorithm, seed=3)
    r2 = select_partitions(p2, epsilon=1.0, delta=1e-5, algorithm=algorithm, seed=3)
    assert r1.items == r2.items == ["a", "of", "the"]


@pytest.mark.parametrize("algorithm", ["mad", "mad2r"])
def test_mad_default_d_max_follows_a_small_cap(algorithm):
    pairs = [(u, w) for u in range(3000) for w in ("the", "a")]
    r = select_partitions(
        pairs, epsilon=1.0, delta=1e-5, algorithm=algorithm, max_items_per_user=10, seed=0
    )
    assert r.parameters["d_max"] == 10
    assert r.items == ["a", "the"]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"tau": 0.5, "d_max": 10}, "'tau' parameter of mad_weights"),
        ({"tau": 5.0, "d_max": 3}, "'d_max' parameter of mad_weights"),
        ({"tau": 5.0, "d_max": 10, "b_min": 0.4}, "'b_min' parameter of mad_weights"),
        ({"tau": 5.0, "d_max": 10, "b_max": 0.9}, "'b_max' parameter of mad_weights"),
    ],
)
def test_mad_weights_rejects_parameters_its_privacy_proof_does_not_cover(kwargs, match):
    users = np.array([0, 0, 1], dtype=np.int32)
    items = np.array([0, 1, 0], dtype=np.int32)
    with pytest.raises(InvalidParameterError, match=match):
        mad_weights(users, items, 2, 2, **kwargs)


@pytest.mark.parametrize(
    ("algorithm", "options"),
    [("mad", {"d_max": 2}), ("mad2r", {"b_max": 0.5}), ("mad2r", {"fractions": (0.5, 0.6)})],
)
def test_parameters_are_checked_before_the_data_is_read(algorithm, options):
    unreadable = object()  # would raise DataError if it were read first
    with pytest.raises(InvalidParameterError):
        select_partitions(unreadable, epsilon=1.0, delta=1e-5, algorithm=algorithm, **options)


def test_release_mask_never_releases_a_code_outside_the_rounds_input():
    from userdp.partition.select import release_mask

    noisy = np.full(6, 1e9)  # every code far above the threshold, as pure noise could put it
    items = np.array([1, 1, 4], dtype=np.int32)
    assert np.flatnonzero(release_mask(noisy, items, threshold=20.0)).tolist() == [1, 4]
    noisy[4] = 19.999
    assert np.flatnonzero(release_mask(noisy, items, threshold=20.0)).tolist() == [1]


def test_a_failing_cleanup_never_replaces_the_error_that_stopped_a_run(monkeypatch):
    # Ctrl-C inside a Spark job can leave py4j unable to answer the cleanup's calls; the
    # user must still see the interrupt (exit 130 on the command line), not the cleanup's error.
    from userdp.partition.select import LocalRunner

    def interrupted(self, rule):
        raise KeyboardInterrupt

    def broken(self):
        raise RuntimeError("Answer from Java side is empty")

    monkeypatch.setattr(LocalRunner, "weights", interrupted)
    monkeypatch.setattr(LocalRunner, "abort", broken)
    with pytest.raises(KeyboardInterrupt):
        select_partitions([("u1", "a"), ("u2", "a")], epsilon=1.0, delta=1e-5, seed=0)


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_no_user_and_one_user_are_released_alike(algorithm):
    """Neighbours D = {} and D' = {one user}: no error on either (a refusal of the empty input
    alone would tell them apart), the same event, budget and parameters, no item released."""
    empty = Contributions.from_codes(np.array([], dtype=np.int64), np.array([], dtype=np.int64))
    one = Contributions.from_columns(["u", "u", "u"], ["a", "b", "c"])
    a, b = (
        select_partitions(d, epsilon=1.0, delta=1e-5, algorithm=algorithm, seed=5)
        for d in (empty, one)
    )
    assert len(a) == len(b) == 0
    assert a.dp_event == b.dp_event and a.budget == b.budget
    assert a.parameters == b.parameters
