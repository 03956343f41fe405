"""Zipf-shaped users: contribution sets for partition selection and records for estimation.

:func:`zipf_contributions` mimics a long-tailed query/vocabulary log, :func:`section62_instance`
is the explicit instance of Chen et al. 2025, Section 6.2, where MAD provably beats Basic;
:func:`zipf_user_values` and :func:`zipf_regression` give Zipf-sized users with i.i.d. values or
regression records, for the contribution-bounding estimators.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from userdp._validation import check_int, check_real
from userdp.data.contributions import Contributions
from userdp.data.synthetic.lowrank import _check_range

__all__ = [
    "UserRegression",
    "UserValues",
    "section62_instance",
    "zipf_contributions",
    "zipf_regression",
    "zipf_user_sizes",
    "zipf_user_values",
]


def _truncated_power_law(
    rng: np.random.Generator, n: int, exponent: float, high: int
) -> np.ndarray:
    sizes = np.arange(1, high + 1, dtype=np.float64)
    cdf = np.cumsum(sizes**-exponent)
    cdf /= cdf[-1]
    return (np.searchsorted(cdf, rng.random(n), side="right") + 1).astype(np.int64)


def zipf_contributions(
    n_users: int = 200_000,
    *,
    n_items: int = 1_000_000,
    item_exponent: float = 1.1,
    size_exponent: float = 1.4,
    max_set_size: int = 300,
    seed: int = 0,
    string_items: bool = False,
) -> Contributions:
    """Users with power-law set sizes drawing items from a Zipf popularity.

    Set sizes follow P(s) ~ s^-size_exponent on 1..max_set_size; items are ranks 0..n_items-1
    with P(k) ~ (k+1)^-item_exponent, drawn with replacement and de-duplicated per user (so a
    user may end up with fewer items than drawn). The defaults give about 2.6M distinct pairs
    (200k users, ~13 per user), a long-tailed shape like ``synth_zipf_200k`` in the team's
    benchmark data. ``string_items`` labels items ``"i{k}"`` instead of integers.
    """
    n_users = check_int(n_users, "n_users", "zipf_contributions", low=1)
    n_items = check_int(n_items, "n_items", "zipf_contributions", low=1)
    check_real(item_exponent, "item_exponent", "zipf_contributions", low=0.0)
    check_real(size_exponent, "size_exponent", "zipf_contributions", low=0.0)
    max_set_size = check_int(max_set_size, "max_set_size", "zipf_contributions", low=1)
    rng = np.random.default_rng(seed)
    sizes = _truncated_power_law(rng, n_users, size_exponent, max_set_size)
    users = np.repeat(np.arange(n_users, dtype=np.int32), sizes)
    cdf = np.cumsum(np.arange(1, n_items + 1, dtype=np.float64) ** -item_exponent)
    cdf /= cdf[-1]
    items = np.searchsorted(cdf, rng.random(users.size), side="right").astype(np.int32)
    np.minimum(items, n_items - 1, out=items)
    labels = pa.array([f"i{k}" for k in range(n_items)]) if string_items else None
    return Contributions.from_codes(users, items, n_items=n_items, item_labels=labels)


def section62_instance(
    n_users: int = 15_000, n_light: int = 1_000, *, seed: int = 0
) -> Contributions:
    """Chen et al. 2025, Section 6.2: every user holds one heavy item and two of m light items.

    Item 0 is the heavy item; items 1..n_light are light, two distinct ones per user.
    At epsilon=1, delta=1e-5 the paper reports MAD ~610 items, Basic ~519.
    """
    n_users = check_int(n_users, "n_users", "section62_instance", low=1)
    n_light = check_int(n_light, "n_light", "section62_instance", low=2)
    rng = np.random.default_rng(seed)
    first = rng.integers(0, n_light, n_users)
    second = (first + rng.integers(1, n_light, n_users)) % n_light  # distinct from first
    users = np.repeat(np.arange(n_users, dtype=np.int32), 3)
    items = np.stack([np.zeros(n_users, dtype=np.int64), first + 1, second + 1], axis=1).ravel()
    return Contributions.from_codes(users, items.astype(np.int32), n_items=n_light + 1)


@dataclass(frozen=True)
class UserValues:
    """Records ``values`` owned by ``users`` (int64 codes, sorted), drawn i.i.d. with a known
    ``mean`` and ``variance`` (the paper's model y_i = beta + xi_i of Section 3)."""

    users: np.ndarray
    values: np.ndarray
    mean: float
    variance: float


@dataclass(frozen=True)
class UserRegression:
    """Linear-regression records with user ids: ``y = X @ coef + N(0, noise^2)``.

    ``label_range`` is a public range that holds the labels with high probability under the
    generating model (``+-5`` standard deviations of y around 0); labels outside it, if any,
    are clipped to it so the range is exact.
    """

    X: np.ndarray
    y: np.ndarray
    users: np.ndarray
    coef: np.ndarray
    noise: float
    label_range: tuple[float, float]


def zipf_user_sizes(
    n_users: int, *, alpha: float = 1.5, max_size: int = 1_600, seed: int = 0
) -> np.ndarray:
    """User sizes with P(s) ~ s^-alpha on 1..max_size (a truncated Zipf law).

    The defaults give 2,000 users about 31 records each (62k records): the setting the
    contribution-bounding issue measured PipelineDP on.
    """
    n_users = check_int(n_users, "n_users", "zipf_user_sizes", low=1)
    alpha = check_real(alpha, "alpha", "zipf_user_sizes", low=0.0, low_open=True)
    max_size = check_int(max_size, "max_size", "zipf_user_sizes", low=1)
    return _truncated_power_law(np.random.default_rng(seed), n_users, alpha, max_size)


def zipf_user_values(
    n_users: int = 2_000,
    *,
    alpha: float = 1.5,
    max_size: int = 1_600,
    bounds: tuple[float, float] = (0.0, 10.0),
    shape: tuple[float, float] = (2.0, 5.0),
    seed: int = 0,
) -> UserValues:
    """Values in ``bounds`` from a scaled Beta(``shape``) law, owned by Zipf-sized users.

    The Beta law keeps every value inside the bounds (no clipping bias) and puts the mean
    away from the range's midpoint (2/7 of the way for the default shape), so an estimator
    that centres the range does not get the mean for free.
    """
    caller = "zipf_user_values"
    low, high = _check_range(bounds, caller)
    a = check_real(shape[0], "shape[0]", caller, low=0.0, low_open=True)
    b = check_real(shape[1], "shape[1]", caller, low=0.0, low_open=True)
    sizes = zipf_user_sizes(n_users, alpha=alpha, max_size=max_size, seed=seed)
    rng = np.random.default_rng([seed, 1])
    users = np.repeat(np.arange(sizes.size, dtype=np.int64), sizes)
    width = high - low
    values = low + width * rng.beta(a, b, users.size)
    mean = low + width * a / (a + b)
    variance = width**2 * a * b / ((a + b) ** 2 * (a + b + 1))
    return UserValues(users, values, float(mean), float(variance))


def zipf_regression(
    n_records: int = 3_000,
    n_features: int = 10,
    *,
    noise: float = 20.0,
    alpha: float = 1.5,
    max_size: int | None = None,
    seed: int = 0,
) -> UserRegression:
    """The synthetic regression of the contribution-bounding paper (Section 6).

    Like scikit-learn's ``make_regression(n_records, n_features, bias=0, noise=noise)`` with
    every feature informative: ``X ~ N(0, I)``, ``coef ~ 100 * U(0, 1)``, Gaussian label
    noise. Records are dealt to users with Zipf(``alpha``) sizes on 1..``max_size`` (default
    ``n_records // 4``), drawn until they cover ``n_records``; the last user is truncated.
    """
    caller = "zipf_regression"
    n_records = check_int(n_records, "n_records", caller, low=2)
    n_features = check_int(n_features, "n_features", caller, low=1)
    noise = check_real(noise, "noise", caller, low=0.0)
    alpha = check_real(alpha, "alpha", caller, low=0.0, low_open=True)
    cap = n_records // 4 if max_size is None else check_int(max_size, "max_size", caller, low=1)
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_records, n_features))
    coef = 100.0 * rng.random(n_features)
    y = X @ coef + noise * rng.standard_normal(n_records)
    sizes: list[np.ndarray] = []
    total = 0
    while total < n_records:
        draw = _truncated_power_law(rng, max(16, n_records // 8), alpha, max(cap, 1))
        sizes.append(draw)
        total += int(draw.sum())
    size = np.concatenate(sizes)
    ends = np.cumsum(size)
    n_users = int(np.searchsorted(ends, n_records) + 1)
    size = size[:n_users].copy()
    size[-1] -= int(ends[n_users - 1] - n_records)
    users = np.repeat(np.arange(n_users, dtype=np.int64), size)
    half = 5.0 * math.sqrt(float(coef @ coef) + noise**2)
    np.clip(y, -half, half, out=y)
    return UserRegression(X, y, users, coef, float(noise), (-half, half))
