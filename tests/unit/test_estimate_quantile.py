"""Unit tests of userdp.estimate.quantile: the weighted exponential mechanism for quantiles."""

from __future__ import annotations

import math

import numpy as np
import pytest

from userdp.estimate.quantile import sample_limited_quantile, weighted_quantile
from userdp.estimate.weighting import best_limit_h, best_smooth_h
from userdp.exceptions import DataError, InvalidParameterError
from userdp.privacy import ExponentialMechanismDpEvent, PrivacyAccountant

BOUNDS = (0.0, 10.0)
QUANTILES = [weighted_quantile, sample_limited_quantile]


def weighted_quantile_reference(values, users, q, h):
    """Smallest value whose Lemma 3-weighted CDF reaches q, in pure Python."""
    sizes: dict = {}
    for u in users:
        sizes[u] = sizes.get(u, 0) + 1
    pairs = sorted(
        (float(v), min(h, sizes[u]) / sizes[u]) for v, u in zip(values, users, strict=True)
    )
    total = sum(w for _, w in pairs)
    acc = 0.0
    for v, w in pairs:
        acc += w
        if acc >= q * total:
            return v
    return pairs[-1][0]


def skewed_data(seed: int, m: int = 400):
    rng = np.random.default_rng(seed)
    sizes = np.minimum(rng.zipf(1.5, m), 200)
    users = np.repeat(np.arange(m), sizes)
    # Heavy users hold larger values, so weighting changes the quantile.
    values = np.clip(rng.uniform(0, 6, users.size) + np.log(sizes[users]), 0, 10)
    return users, values, sizes


# -- accuracy ------------------------------------------------------------------------------------
@pytest.mark.parametrize("public", [True, False])
@pytest.mark.parametrize("q", [0.1, 0.5, 0.83])
def test_huge_epsilon_returns_the_weighted_quantile(public, q):
    users, values, _ = skewed_data(0)
    h = 3.5
    res = weighted_quantile(
        values, users, q=q, epsilon=1e7, bounds=BOUNDS, public_user_sizes=public, h=h, seed=1
    )
    ref = weighted_quantile_reference(values.tolist(), users.tolist(), q, h)
    # The mechanism picks the interval next to the reference value; data are dense here.
    gap = np.max(np.diff(np.sort(values)))
    assert abs(res.estimate - ref) <= gap
    plain = float(np.quantile(values, q))
    assert abs(plain - ref) > 5 * gap  # the weights matter on this data


def test_huge_epsilon_sample_limited_with_h_above_all_sizes_is_the_plain_quantile():
    users, values, sizes = skewed_data(1)
    res = sample_limited_quantile(
        values, users, q=0.5, epsilon=1e7, bounds=BOUNDS, h=int(sizes.max()) + 1, seed=0
    )
    srt = np.sort(values)
    k = math.ceil(0.5 * values.size)  # smallest value with CDF >= 1/2
    assert srt[k - 2] <= res.estimate <= srt[k]


def test_median_of_5000_uniform_records_at_epsilon_one():
    # 1,000 users with 1..9 records of uniform[0, 10] values. The sample median's sd is about
    # 10 * 0.5 / sqrt(n_eff) with n_eff >= 1,000 users, i.e. <= 0.16, and the mechanism's rank
    # error (Laplace scale ~ 2 Delta / eps = h records) is far smaller; tolerance 0.5 > 3 sd.
    errors = []
    for seed in range(10):
        rng = np.random.default_rng(seed)
        users = np.repeat(np.arange(1000), rng.integers(1, 10, 1000))
        values = rng.uniform(0, 10, users.size)
        for fn in QUANTILES:
            res = fn(values, users, q=0.5, epsilon=1.0, bounds=BOUNDS, seed=seed)
            errors.append(abs(res.estimate - 5.0))
    assert max(errors) < 0.5
    assert np.mean(errors) < 0.15


@pytest.mark.parametrize("fn", QUANTILES)
@pytest.mark.parametrize("public", [True, False])
def test_output_is_always_inside_bounds(fn, public):
    rng = np.random.default_rng(2)
    users = rng.integers(0, 30, 200)
    cases = [
        rng.uniform(-50, 60, 200),  # mostly clipped
        np.full(200, 10.0),  # all at the upper bound: ties
        np.full(200, 0.0),
    ]
    for i, values in enumerate(cases):
        for eps in (1e-3, 1.0, 1e6):
            res = fn(
                values,
                users,
                q=[0.01, 0.5, 0.99],
                epsilon=eps,
                bounds=BOUNDS,
                public_user_sizes=public,
                seed=i,
            )
            assert np.all((res.estimate >= 0.0) & (res.estimate <= 10.0))


def test_exponential_mechanism_draws_grid_points_with_the_stated_probabilities():
    # Four users, one record each at 2, 2, 6, 8; h = 1 so every weight is 1 and Delta = 1/2.
    # A grid point x counts the records <= x: the runs [0,2), [2,6), [6,8), [8,10] of the
    # public grid count 0, 2, 3, 4 against q W = 2, so at eps = 1 each point of a run has
    # weight exp(eps u / (2 Delta)) = e^-2, 1, e^-1, e^-2 and the runs (lengths 2, 4, 2, 2)
    # get (2 e^-2, 4, 2 e^-1, 2 e^-2) up to one grid point.
    values = [2.0, 2.0, 6.0, 8.0]
    users = [1, 2, 3, 4]
    weights = np.array([2 * math.exp(-2), 4.0, 2 * math.exp(-1), 2 * math.exp(-2)])
    expected = weights / weights.sum()
    runs = 8000
    results = [
        weighted_quantile(values, users, q=0.5, epsilon=1.0, bounds=BOUNDS, h=1.0, seed=r)
        for r in range(runs)
    ]
    draws = np.array([r.estimate for r in results])
    step = results[0].resolution
    np.testing.assert_array_equal(np.rint(draws / step) * step, draws)  # on the public grid
    counts = np.histogram(draws, bins=[0, 2, 6, 8, 10.5])[0]  # half-open but the last
    assert counts.sum() == runs
    sd = np.sqrt(runs * expected * (1 - expected))
    assert np.all(np.abs(counts - runs * expected) < 5 * sd)
    # Uniform inside a run: half of [2, 6) lies below 4.
    inner = draws[(draws >= 2) & (draws < 6)]
    assert abs(np.mean(inner < 4) - 0.5) < 5 * 0.5 / math.sqrt(inner.size)


# -- accounting, sensitivity and the choice of h ---------------------------------------------------
MODES = [
    dict(public_user_sizes=True),
    dict(public_user_sizes=True, h=3),
    dict(public_user_sizes=False),
    dict(public_user_sizes=False, h=3),
    dict(public_user_sizes=False, selection_share=0.4),
]


@pytest.mark.parametrize("fn", QUANTILES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("q", [0.3, [0.1, 0.5, 0.9]])
def test_dp_event_spends_exactly_epsilon(fn, mode, q):
    users, values, _ = skewed_data(3, m=80)
    res = fn(values, users, q=q, epsilon=1.3, bounds=BOUNDS, seed=2, **mode)
    spent = PrivacyAccountant().compose(res.dp_event).spent().epsilon
    assert spent == pytest.approx(1.3, rel=1e-9)
    assert res.epsilon == pytest.approx(1.3, rel=1e-9)
    k = 1 if isinstance(q, float) else len(q)
    em = [e for e in res.dp_event.events if isinstance(e, ExponentialMechanismDpEvent)]
    assert len(em) == k
    chooses = not mode["public_user_sizes"] and "h" not in mode
    share = mode.get("selection_share", 0.1) if chooses else 0.0
    assert res.selection_epsilon == pytest.approx(share * 1.3)
    assert all(e.epsilon == pytest.approx(1.3 * (1 - share) / k) for e in em)


@pytest.mark.parametrize("fn", QUANTILES)
def test_sensitivity_is_max_q_h_or_the_largest_user_weight(fn):
    users, values, sizes = skewed_data(4, m=120)
    h = 5
    res = fn(values, users, q=[0.2, 0.5, 0.7], epsilon=1.0, bounds=BOUNDS, h=h, seed=0)
    np.testing.assert_allclose(res.sensitivity, [0.8 * h, 0.5 * h, 0.7 * h])
    res = fn(values, users, q=[0.2, 0.7], epsilon=1.0, bounds=BOUNDS, h=h, public_user_sizes=True)
    # Replacement with public sizes: the largest user's share of the total weight, in Python.
    s = [int(x) for x in sizes]
    n_h = sum(min(h, x) for x in s)
    np.testing.assert_allclose(res.sensitivity, [max(min(h, x) for x in s) / n_h] * 2)


@pytest.mark.parametrize(
    ("fn", "choose"), [(weighted_quantile, best_smooth_h), (sample_limited_quantile, best_limit_h)]
)
def test_h_minimises_the_rank_space_variance(fn, choose):
    # Sizes 1..16 fall in exact histogram bins, so at huge epsilon the private choice sees the
    # true sizes: h must be Claim 1's (Claim 2's) minimiser with sigma^2 = q(1-q) and noise
    # unit 2 max(q, 1-q) / epsilon_q (2 / epsilon_q with public sizes).
    rng = np.random.default_rng(5)
    sizes = rng.integers(1, 17, 500)
    users = np.repeat(np.arange(500), sizes)
    values = rng.uniform(0, 10, users.size)
    eps, qs = 3000.0, [0.2, 0.5]
    # Nearly all the budget on the histogram (exact counts), 3 left for the two quantiles.
    res = fn(values, users, q=qs, epsilon=eps, bounds=BOUNDS, selection_share=0.999, seed=0)
    eps_q = (eps - 0.999 * eps) / 2
    expected = [choose(sizes, q * (1 - q), 2 * max(q, 1 - q) / eps_q) for q in qs]
    np.testing.assert_allclose(res.h, expected)
    assert 1 < min(expected) and max(expected) < 16  # an interior optimum
    res = fn(values, users, q=qs, epsilon=eps, bounds=BOUNDS, public_user_sizes=True, seed=0)
    expected = [choose(sizes, q * (1 - q), 2 / (eps / 2)) for q in qs]
    np.testing.assert_allclose(res.h, expected)
    assert res.selection_epsilon == 0.0


def test_scalar_q_gives_floats_and_a_sequence_gives_arrays():
    users, values, _ = skewed_data(6, m=50)
    one = weighted_quantile(values, users, q=0.5, epsilon=1.0, bounds=BOUNDS, seed=0)
    assert isinstance(one.estimate, float) and isinstance(one.h, float)
    many = weighted_quantile(values, users, q=(0.25, 0.75), epsilon=1.0, bounds=BOUNDS, seed=0)
    assert many.estimate.shape == (2,) and many.h.shape == (2,) and many.q == (0.25, 0.75)
    assert "q=0.25" in many.summary()


# -- bad input -----------------------------------------------------------------------------------
@pytest.mark.parametrize("fn", QUANTILES)
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(q=0.0), "'q' parameter of {name} must be a float in the range \\(0, 1\\)"),
        (dict(q=1.0), "'q' parameter of {name}"),
        (dict(q=[0.5, 1.5]), "'q' parameter of {name}.*Got 1.5 instead"),
        (dict(q=[]), "'q' parameter of {name}.*non-empty sequence"),
        (dict(q="0.5"), "'q' parameter of {name}"),
        (dict(epsilon=0.0), "'epsilon' parameter of {name}"),
        (dict(epsilon=-1.0), "'epsilon' parameter of {name}"),
        (dict(bounds=(3.0, 3.0)), "'bounds' parameter of {name}"),
        (dict(selection_share=1.5), "'selection_share' parameter of {name}"),
        (dict(selection_share=0.0), "'selection_share' parameter of {name}"),
        (dict(h=0), "'h' parameter of {name}"),
        (dict(h=-1), "'h' parameter of {name}"),
    ],
)
def test_bad_parameters_raise_invalid_parameter_error(fn, kwargs, match):
    args = dict(q=0.5, epsilon=1.0, bounds=BOUNDS) | kwargs
    with pytest.raises(InvalidParameterError, match=match.format(name=fn.__name__)):
        fn([1.0, 2.0], [1, 2], **args)


@pytest.mark.parametrize("fn", QUANTILES)
def test_bad_data_raise_data_error(fn):
    kw = dict(q=0.5, epsilon=1.0, bounds=BOUNDS)
    with pytest.raises(DataError, match="same length; got 2 values and 3 users"):
        fn([1.0, 2.0], [1, 2, 3], **kw)
    with pytest.raises(DataError, match=f"{fn.__name__} needs at least one record"):
        fn([], [], **kw)


@pytest.mark.parametrize("fn", QUANTILES)
def test_a_missing_value_is_a_record_without_a_value(fn):
    """A NaN never moves a quantile: the release equals the one without that record (before
    this policy a NaN drew the top of the grid), and +-inf is clipped like any value."""
    rng = np.random.default_rng(6)
    y, u = rng.uniform(0, 10, 300), rng.integers(0, 60, 300)
    kw = dict(q=0.5, epsilon=1.0, bounds=BOUNDS, seed=7)
    nan = fn(np.append(y, [np.nan, np.nan]), np.append(u, [999, 999]), **kw)
    assert nan.estimate == fn(y, u, **kw).estimate
    inf = fn(np.append(y, np.inf), np.append(u, 999), **kw)
    assert inf.estimate == fn(np.append(y, 10.0), np.append(u, 999), **kw).estimate
