"""Unit tests of userdp.estimate.weighting (Epasto et al. 2020, Lemma 3, Claims 1-2, Thm. 3)."""

from __future__ import annotations

import math
from collections import Counter

import dp_accounting
import numpy as np
import pytest

from userdp.estimate.weighting import (
    best_limit_h,
    best_smooth_h,
    effective_count,
    factorize_users,
    limit_mask,
    limit_variance,
    private_size_histogram,
    size_bin_edges,
    smooth_variance,
    smooth_weights,
)
from userdp.exceptions import DataError, InvalidParameterError
from userdp.privacy import NoiseSource, PrivacyAccountant


def random_sizes(rng: np.random.Generator, m: int | None = None, cap: int = 300) -> np.ndarray:
    m = int(rng.integers(1, 60)) if m is None else m
    if rng.random() < 0.5:
        return np.minimum(rng.zipf(1.5, m), cap)
    return rng.integers(1, int(rng.integers(2, 40)), m)


def claim1_v(sizes, h, sigma2, unit):
    """Claim 1 written out with Python loops over users (independent of the vectorised code)."""
    n_h = sum(min(h, s) for s in sizes)
    data = sigma2 * sum(s * (min(h, s) / (n_h * s)) ** 2 for s in sizes)
    return data + 2 * (unit * h / n_h) ** 2


def claim2_v(sizes, h, sigma2, unit):
    n_h = sum(min(h, s) for s in sizes)
    return sigma2 / n_h + 2 * (unit * h / n_h) ** 2


# -- factorize and weights ----------------------------------------------------------------------
def test_factorize_users_codes_identify_users_and_sizes_count_records():
    users = np.array(["b", "a", "c", "a", "b", "a", "zz"])
    codes, sizes = factorize_users(users)
    assert codes.dtype == np.int64 and sizes.dtype == np.int64
    for i in range(users.size):
        for j in range(users.size):
            assert (codes[i] == codes[j]) == (users[i] == users[j])
    counts = Counter(users.tolist())
    assert sorted(sizes.tolist()) == sorted(counts.values())
    for i, u in enumerate(users):
        assert sizes[codes[i]] == counts[u]


@pytest.mark.parametrize("seed", range(20))
def test_smooth_weights_normalised_sum_to_one_and_user_sums_are_min_h_s(seed):
    rng = np.random.default_rng(seed)
    sizes = random_sizes(rng)
    codes = rng.permutation(np.repeat(np.arange(sizes.size), sizes))
    h = float(rng.uniform(0.5, sizes.max() + 3))
    w = smooth_weights(codes, sizes, h)
    n_h = effective_count(sizes, h)
    assert n_h == pytest.approx(sum(min(h, int(s)) for s in sizes), rel=1e-12)
    c = w / n_h
    assert c.sum() == pytest.approx(1.0, rel=1e-12)
    per_user = np.bincount(codes, weights=c, minlength=sizes.size)
    expected = [min(h, int(s)) / n_h for s in sizes]
    np.testing.assert_allclose(per_user, expected, rtol=1e-12)
    # The largest per-user weight -- what the Laplace scale of Alg. 1 uses -- in pure Python.
    user_sums: dict[int, float] = {}
    for code, ci in zip(codes.tolist(), c.tolist(), strict=True):
        user_sums[code] = user_sums.get(code, 0.0) + ci
    assert per_user.max() == pytest.approx(max(user_sums.values()), rel=1e-12)
    assert per_user.max() == pytest.approx(min(h, sizes.max()) / n_h, rel=1e-12)


@pytest.mark.parametrize("seed", range(20))
def test_limit_mask_keeps_min_floor_h_and_size_per_user(seed):
    rng = np.random.default_rng(seed)
    sizes = random_sizes(rng)
    codes = rng.permutation(np.repeat(np.arange(sizes.size), sizes))
    h = float(rng.uniform(1.0, sizes.max() + 2))
    keep = limit_mask(codes, sizes, h, NoiseSource(seed))
    kept = np.bincount(codes[keep], minlength=sizes.size)
    np.testing.assert_array_equal(kept, np.minimum(math.floor(h), sizes))


def test_limit_mask_picks_each_record_of_a_user_with_equal_probability():
    # One user of 6 records, h = 2: each record is kept with probability 1/3. Over 6,000 draws
    # a count has sd sqrt(6000 * 1/3 * 2/3) = 36.5; the band is 5 sd.
    codes = np.array([0, 1, 0, 0, 1, 0, 0, 0])
    sizes = np.array([6, 2])
    noise = NoiseSource(7)
    hits = np.zeros(codes.size)
    runs = 6000
    for _ in range(runs):
        hits += limit_mask(codes, sizes, 2.0, noise)
    user0 = hits[codes == 0]
    assert np.all(np.abs(user0 - runs / 3) < 5 * math.sqrt(runs * (1 / 3) * (2 / 3)))
    assert np.all(hits[codes == 1] == runs)


# -- Claims 1 and 2 ------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(10))
def test_variance_functions_match_claims_written_out(seed):
    rng = np.random.default_rng(seed)
    sizes = random_sizes(rng)
    sigma2, unit = float(rng.uniform(0, 5)), float(rng.uniform(0.1, 20))
    hs = rng.uniform(1, sizes.max() + 5, 7)
    s = [int(x) for x in sizes]
    np.testing.assert_allclose(
        smooth_variance(sizes, hs, sigma2, unit), [claim1_v(s, h, sigma2, unit) for h in hs]
    )
    np.testing.assert_allclose(
        limit_variance(sizes, hs, sigma2, unit), [claim2_v(s, h, sigma2, unit) for h in hs]
    )


def test_counts_keyword_is_the_same_as_repeating_sizes():
    values, counts = np.array([1.0, 3.5, 20.0]), np.array([5, 0, 2])
    rep = np.repeat(values, counts)
    hs = np.array([1.0, 2.0, 4.0, 25.0])
    np.testing.assert_allclose(
        smooth_variance(values, hs, 2.0, 3.0, counts=counts), smooth_variance(rep, hs, 2.0, 3.0)
    )
    assert best_smooth_h(values, 2.0, 3.0, counts=counts) == best_smooth_h(rep, 2.0, 3.0)
    assert best_limit_h(values, 2.0, 3.0, counts=counts) == best_limit_h(rep, 2.0, 3.0)


@pytest.mark.parametrize("seed", range(30))
def test_best_smooth_h_is_no_worse_than_a_fine_grid(seed):
    rng = np.random.default_rng(100 + seed)
    sizes = random_sizes(rng)
    sigma2 = float(rng.choice([0.0, rng.uniform(0.01, 10)]))
    unit = float(rng.uniform(0.05, 30))
    h = best_smooth_h(sizes, sigma2, unit)
    assert sizes.min() <= h <= sizes.max()
    grid = np.linspace(sizes.min(), sizes.max(), 20_001)
    v_grid = smooth_variance(sizes, grid, sigma2, unit)
    v_best = claim1_v([int(s) for s in sizes], h, sigma2, unit)
    # Compare values: the exact minimiser can only beat (or tie) every grid point, and v is
    # Lipschitz, so the grid minimum is close to it.
    assert v_best <= v_grid.min() * (1 + 1e-9)
    assert v_best >= v_grid.min() * (1 - 1e-3)


@pytest.mark.parametrize("seed", range(30))
def test_best_limit_h_equals_brute_force_over_all_integers(seed):
    rng = np.random.default_rng(200 + seed)
    sizes = random_sizes(rng)
    sigma2 = float(rng.choice([0.0, rng.uniform(0.01, 10)]))
    unit = float(rng.uniform(0.05, 30))
    h = best_limit_h(sizes, sigma2, unit)
    assert isinstance(h, int)
    s = [int(x) for x in sizes]
    brute = [claim2_v(s, k, sigma2, unit) for k in range(1, max(s) + 1)]
    assert claim2_v(s, h, sigma2, unit) == pytest.approx(min(brute), rel=1e-12)


@pytest.mark.parametrize("seed", range(40))
def test_weighting_beats_sample_limiting_by_at_most_four(seed):
    # Sample limiting is the special case of weights 1[i in T]/n_h, so min v <= min v'; and
    # Theorem 3 bounds the other side: min v' <= 4 min v.
    rng = np.random.default_rng(300 + seed)
    sizes = random_sizes(rng, m=int(rng.integers(1, 200)), cap=2000)
    sigma2, unit = float(rng.uniform(0.01, 10)), float(rng.uniform(0.05, 30))
    v_min = float(smooth_variance(sizes, best_smooth_h(sizes, sigma2, unit), sigma2, unit))
    vp_min = float(limit_variance(sizes, best_limit_h(sizes, sigma2, unit), sigma2, unit))
    assert v_min <= vp_min * (1 + 1e-12)
    assert vp_min <= 4 * v_min


# -- private sizes -------------------------------------------------------------------------------
def test_size_bins_are_exact_to_16_then_geometric_to_2_31():
    edges = size_bin_edges()
    assert edges[:17].tolist() == list(range(1, 18))
    ratios = edges[17:] / edges[16:-1]
    assert np.all(ratios <= 2**0.25 * 1.06) and np.all(ratios > 1)
    assert edges[-1] == 2**31


def test_private_size_histogram_charges_epsilon_and_recovers_counts_at_huge_epsilon():
    rng = np.random.default_rng(3)
    sizes = np.minimum(rng.zipf(1.3, 5000), 10**7)
    acc = PrivacyAccountant()
    hist = private_size_histogram(sizes, 1e6, NoiseSource(0), acc)
    assert acc.spent().epsilon == pytest.approx(1e6, rel=1e-9)
    assert acc.ledger == (dp_accounting.LaplaceDpEvent(1e-6),)
    edges = size_bin_edges().tolist()
    # Bin of each size by a linear scan (independent of searchsorted).
    exact = Counter(max(j for j, e in enumerate(edges) if e <= s) for s in sizes.tolist())
    assert hist.counts.tolist() == [exact.get(j, 0) for j in range(len(edges))]
    assert hist.user_count == sizes.size
    # Representatives sit inside their bins and are exact for sizes 1..16.
    hi = [*edges[1:], edges[-1] + 1]
    assert all(lo <= r < h for lo, r, h in zip(edges, hist.representatives, hi, strict=True))
    assert hist.representatives[:16].tolist() == list(range(1, 17))
    assert hist.sizes.size == sizes.size


def test_private_size_histogram_noise_has_scale_one_over_epsilon():
    # 10,000 users of size 1: the first bin passes the threshold on its own, so the released
    # count minus 10,000 is Laplace(1/eps) rounded: mean |X| = 1/eps = 4, sd 4.
    acc = PrivacyAccountant()
    errs = []
    noise = NoiseSource(11)
    for _ in range(1500):
        hist = private_size_histogram(np.ones(10_000, dtype=int), 0.25, noise, acc)
        errs.append(hist.counts[0] - 10_000)
    mad = float(np.mean(np.abs(errs)))
    assert abs(mad - 4.0) < 5 * 4.0 / math.sqrt(1500) + 0.25  # + rounding
    assert acc.spent().epsilon == pytest.approx(0.25 * 1500, rel=1e-9)


def test_private_size_histogram_rarely_invents_users_above_the_real_sizes():
    # 3,000 users of size 4 at epsilon 0.05 (scale 20): merely clipping the ~120 empty bins at
    # 0 would add ~10 phantom users to each, most of them huge. The threshold makes a phantom
    # group rare (probability ~5% per release by design; 10% allowed here over 200 releases).
    acc = PrivacyAccountant()
    noise = NoiseSource(5)
    above = []
    for _ in range(200):
        hist = private_size_histogram(np.full(3000, 4), 0.05, noise, acc)
        assert hist.counts[3] > 2800
        above.append(hist.counts[hist.representatives > 4].sum())
    assert np.mean(np.array(above) > 0) < 0.1


def test_private_size_histogram_pools_a_thin_tail_of_large_users():
    # 3,000 users of size 1 and 1,000 users with sizes log-uniform in [100, 10000]: ~37 per
    # bin, far below the threshold of one bin (~143 at scale 20), after ~28 empty bins; pooled
    # they are seen, and nothing is placed far above the largest real size.
    rng = np.random.default_rng(12)
    sizes = np.concatenate([np.ones(3000), np.exp(rng.uniform(np.log(100), np.log(1e4), 1000))])
    seen = 0
    for seed in range(20):
        hist = private_size_histogram(
            sizes.astype(int), 0.05, NoiseSource(seed), PrivacyAccountant()
        )
        big = hist.counts[hist.representatives >= 90].sum()
        seen += 600 < big < 1600
        assert hist.counts[hist.representatives > 2e4].sum() == 0
    # Near the detection limit (1,000 users against noise sd ~150 over the tail's bins).
    assert seen >= 16


# -- bad input -----------------------------------------------------------------------------------
@pytest.mark.parametrize("h", [0.0, -1.0, float("nan")])
def test_nonpositive_h_is_rejected(h):
    with pytest.raises(InvalidParameterError, match="'h' parameter of smooth_weights"):
        smooth_weights(np.array([0, 0]), np.array([2]), h)
    with pytest.raises(InvalidParameterError, match="'h' parameter of limit_mask"):
        limit_mask(np.array([0, 0]), np.array([2]), h, NoiseSource(0))


def test_variance_arguments_are_checked():
    with pytest.raises(InvalidParameterError, match="'noise_variance' parameter of best_smooth"):
        best_smooth_h([1, 2], -1.0, 1.0)
    with pytest.raises(InvalidParameterError, match="'noise_unit' parameter of best_limit_h"):
        best_limit_h([1, 2], 1.0, float("inf"))
    with pytest.raises(DataError, match="at least one user"):
        best_smooth_h([], 1.0, 1.0)
    with pytest.raises(DataError, match="sizes must be finite and > 0"):
        smooth_variance([0, 2], 1.0, 1.0, 1.0)
    with pytest.raises(InvalidParameterError, match="'epsilon' parameter of private_size"):
        private_size_histogram([1, 2], 0.0, NoiseSource(0), PrivacyAccountant())
