"""The empirical-Bayes prior on the released item biases: post-processing of each SSP step's
released statistics (same releases and event with and without it), and it helps where item
biases follow popularity and the tail's statistics are mostly noise."""

from __future__ import annotations

import numpy as np
import pytest
from bias_data import ratings_table

import userdp.recommend.als.estimator as als_module
import userdp.recommend.public.estimator as public_module
from helpers import recording_noise
from userdp.data.longtail import longtail_ratings
from userdp.recommend import (
    IdEncoder,
    MatrixFactorization,
    PublicFeatureRecommender,
    frequency_buckets,
    holdout_rmse,
    ml10m_split,
)
from userdp.recommend.core.prior import bias_prior, solve_with_prior


def _recording(monkeypatch, module):
    log: list = []
    base = recording_noise([])

    class Values(base):
        def add_gaussian(self, value, sigma, *, statistic, l2, index=None, linf=None):
            out = super().add_gaussian(
                value, sigma, statistic=statistic, l2=l2, index=index, linf=linf
            )
            log.append((statistic, float(sigma), float(l2), np.array(out, copy=True)))
            return out

    monkeypatch.setattr(module, "NoiseSource", Values)
    return log


def _planted(seed=0, n_users=300, n_items=60):
    """Biases that follow popularity (log count) plus item noise; a long tail of items."""
    rng = np.random.default_rng(seed)
    pop = rng.pareto(1.2, n_items) + 0.05
    p = pop / pop.sum()
    users = np.repeat(np.arange(n_users), 12)
    items = np.array([rng.choice(n_items, 12, replace=False, p=p) for _ in range(n_users)]).ravel()
    counts = np.bincount(items, minlength=n_items)
    b = 0.4 * (np.log1p(counts) - np.log1p(counts).mean()) + rng.normal(0, 0.1, n_items)
    values = np.clip(3.5 + b[items] + rng.normal(0, 0.5, items.size), 0.5, 5.0)
    return users, items, values


@pytest.mark.parametrize("method", ["adadpals", "dpals-tail"])
def test_matrix_factorization_prior_is_post_processing(monkeypatch, method):
    users, items, values = _planted()
    data = ratings_table(users, items, values)
    runs = {}
    for prior in (False, True):
        log = _recording(monkeypatch, als_module)
        model = MatrixFactorization(
            method=method,
            items=[f"i{i}" for i in range(60)],
            dim=3,
            steps=1,
            rating_range=(0.5, 5.0),
            epsilon=2.0,
            delta=1e-5,
            seed=0,
            bias_prior=prior,
        ).fit(data)
        runs[prior] = (model, log)
    (plain, log0), (eb, log1) = runs[False], runs[True]
    # One step: every release is drawn before the solve, so the released values are equal ...
    assert [r[:3] for r in log0] == [r[:3] for r in log1]
    for a, b in zip(log0, log1, strict=True):
        np.testing.assert_array_equal(a[3], b[3])
    assert eb.dp_event_ == plain.dp_event_
    assert eb.budget_.epsilon == plain.budget_.epsilon
    # ... and only the solve of the biases changes.
    assert not np.allclose(eb.item_biases_, plain.item_biases_)


def test_every_step_records_the_same_releases_with_and_without_the_prior(monkeypatch):
    users, items, values = _planted(1)
    data = ratings_table(users, items, values)
    logs = []
    for prior in (False, True):
        log = _recording(monkeypatch, als_module)
        MatrixFactorization(
            items=[f"i{i}" for i in range(60)],
            dim=3,
            steps=3,
            rating_range=(0.5, 5.0),
            epsilon=2.0,
            delta=1e-5,
            seed=0,
            bias_prior=prior,
        ).fit(data)
        logs.append([r[:3] for r in log])
    assert logs[0] == logs[1]


def test_public_feature_recommender_prior_is_post_processing(monkeypatch):
    users, items, values = _planted(2)
    data = ratings_table(users, items, values)
    runs = {}
    for prior in (False, True):
        log = _recording(monkeypatch, public_module)
        model = PublicFeatureRecommender(
            encoder=IdEncoder(60, 3),
            items=[f"i{i}" for i in range(60)],
            steps=1,
            rating_range=(0.5, 5.0),
            epsilon=2.0,
            delta=1e-5,
            seed=0,
            bias_prior=prior,
        ).fit(data)
        runs[prior] = (model, log)
    (plain, log0), (eb, log1) = runs[False], runs[True]
    assert [r[:3] for r in log0] == [r[:3] for r in log1]
    for a, b in zip(log0, log1, strict=True):
        np.testing.assert_array_equal(a[3], b[3])
    assert eb.dp_event_ == plain.dp_event_
    assert not np.allclose(eb.item_biases_, plain.item_biases_)


def test_the_prior_is_a_no_op_without_privacy_or_biases():
    users, items, values = _planted(3)
    data = ratings_table(users, items, values)
    kw = dict(items=[f"i{i}" for i in range(60)], dim=3, steps=2, rating_range=(0.5, 5.0), seed=0)
    for extra in (
        {"method": "als"},
        {"epsilon": 2.0, "delta": 1e-5, "biases": False},
        {"epsilon": 2.0, "delta": 1e-5, "method": "adadpsgd"},
    ):
        a = MatrixFactorization(bias_prior=True, **kw, **extra).fit(data)
        b = MatrixFactorization(bias_prior=False, **kw, **extra).fit(data)
        np.testing.assert_array_equal(a.item_factors_, b.item_factors_)


def test_bias_prior_recovers_the_planted_slope_and_variance():
    rng = np.random.default_rng(0)
    m, beta, tau = 4000, 1.0, 0.3
    counts = np.exp(rng.uniform(0, 6, m))
    truth = 0.2 * np.log(counts) - 0.5 + rng.normal(0, tau, m)
    a = beta**2 * counts  # Gram bias diagonal: sum of w beta^2 with w = 1
    sd_b = 3.0
    moment = truth * a / beta + rng.normal(0, sd_b, m)
    prior = bias_prior(
        a, moment, beta=beta, counts=counts, count_sd=1.0, gram_sd=1e-9, moment_sd=sd_b, half=3.0
    )
    trend = 0.2 * np.log(counts) - 0.5  # the planted prior mean
    assert np.sqrt(np.mean((prior.mean - trend) ** 2)) < 0.1
    assert np.sqrt(prior.variance) == pytest.approx(tau, rel=0.25)
    raw = beta * moment / a
    post = prior.mean + prior.variance / (prior.variance + prior.ridge * prior.variance / a) * (
        raw - prior.mean
    )
    assert np.mean((post - truth) ** 2) < 0.7 * np.mean((raw - truth) ** 2)


def test_solve_with_prior_pulls_the_bias_coordinate_toward_the_mean():
    rng = np.random.default_rng(1)
    m, k = 5, 3
    x = rng.normal(size=(m, 10, k + 1))
    gram = np.einsum("mnd,mne->mde", x, x)
    moment = rng.normal(size=(m, k + 1))
    weak = solve_with_prior(gram, moment, 1e-3, _Prior(np.full(m, 2.0), np.full(m, 1e-9)), 1.0)
    np.testing.assert_allclose(
        weak, np.linalg.solve(gram + 1e-3 * _eye(k, m), moment[..., None])[..., 0], atol=1e-4
    )
    strong = solve_with_prior(gram, moment, 1e-3, _Prior(np.full(m, 2.0), np.full(m, 1e9)), 0.5)
    np.testing.assert_allclose(strong[:, k], 4.0, rtol=1e-6)  # mean / beta


class _Prior:
    def __init__(self, mean, ridge):
        self.mean, self.ridge = mean, ridge


def _eye(k, m):
    e = np.zeros((m, k + 1, k + 1))
    e[:, np.arange(k), np.arange(k)] = 1.0
    return e


@pytest.mark.filterwarnings("ignore")
def test_the_prior_lowers_held_out_error_on_a_long_tail():
    r = longtail_ratings(1500, 300, 40_000, seed=5)
    split = ml10m_split(r)
    buckets = frequency_buckets(split.train.item_counts())
    scores = {}
    for prior in (False, True):
        m = MatrixFactorization(
            dim=8,
            rating_range=(0.5, 5.0),
            epsilon=3.0,
            delta=1e-5,
            seed=0,
            items=split.train.item_labels,
            bias_prior=prior,
        ).fit(split.train)
        scores[prior] = holdout_rmse(m, split.train, split.validation, buckets)
    assert scores[True]["rmse"] < scores[False]["rmse"]
    assert scores[True]["buckets"][0] < scores[False]["buckets"][0]


def test_item_covariates_take_feature_families_but_not_an_id_family():
    from userdp.recommend import FeatureFamily, PublicFeatureEncoder
    from userdp.recommend.core.prior import item_covariates

    genre = FeatureFamily("genre", sparse_matrix([[1, 1, 0], [0, 1, 0], [0, 0, 1], [1, 0, 0]]))
    ids = FeatureFamily("id", sparse_matrix(np.eye(4)))
    X = item_covariates(PublicFeatureEncoder([genre, ids], 2, seed=0), max_values=3)
    assert X.shape == (4, 3)  # the 4-value id family is left out
    np.testing.assert_allclose(X.toarray().sum(axis=1), 1.0)  # rows normalised
    assert item_covariates(IdEncoder(4, 2)) is None


def sparse_matrix(rows):
    import scipy.sparse as sp

    return sp.csr_matrix(np.asarray(rows, dtype=float))
