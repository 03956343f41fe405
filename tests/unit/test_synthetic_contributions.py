"""The synthetic data of the contribution-bounding estimators have the stated shape."""

from __future__ import annotations

import numpy as np
import pytest

from userdp.data.synthetic import zipf_regression, zipf_user_sizes, zipf_user_values
from userdp.exceptions import InvalidParameterError


def test_zipf_user_sizes_stay_in_range_and_follow_the_power_law():
    sizes = zipf_user_sizes(200_000, alpha=2.0, max_size=50, seed=3)
    assert sizes.min() >= 1 and sizes.max() <= 50
    # P(1)/P(2) = 2^alpha for a power law with exponent alpha.
    counts = np.bincount(sizes)
    assert counts[1] / counts[2] == pytest.approx(4.0, rel=0.05)


def test_zipf_user_values_match_the_stated_mean_and_variance():
    data = zipf_user_values(2_000, seed=1)
    n = data.values.size
    assert 45_000 < n < 80_000  # about 31 records per user
    assert data.values.min() >= 0.0 and data.values.max() <= 10.0
    assert np.all(np.diff(data.users) >= 0)
    # The mean of n i.i.d. values is within 5 standard errors of the stated mean.
    assert abs(data.values.mean() - data.mean) < 5 * np.sqrt(data.variance / n)
    assert data.values.var() == pytest.approx(data.variance, rel=0.05)


def test_zipf_regression_deals_exactly_n_records_and_follows_the_linear_model():
    data = zipf_regression(3_000, 10, noise=20.0, seed=2)
    assert data.X.shape == (3_000, 10) and data.y.shape == (3_000,)
    assert data.users.size == 3_000 and np.bincount(data.users).min() >= 1
    low, high = data.label_range
    assert low <= data.y.min() and data.y.max() <= high
    coef, *_ = np.linalg.lstsq(data.X, data.y, rcond=None)
    residual = data.y - data.X @ coef
    assert residual.std() == pytest.approx(20.0, rel=0.1)
    assert np.abs(coef - data.coef).max() < 5 * 20.0 / np.sqrt(3_000)


def test_zipf_generators_reject_bad_parameters():
    with pytest.raises(InvalidParameterError, match="'alpha' parameter of zipf_user_sizes"):
        zipf_user_sizes(10, alpha=0.0)
    with pytest.raises(InvalidParameterError, match="n_records"):
        zipf_regression(1)
