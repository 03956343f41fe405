"""Federated SSP2 (public-features paper, Appendix F, Algorithm 8): what the
server receives, equality with centralised SSP2, accounting, neighbours, traffic, bad input."""

from __future__ import annotations

import dataclasses

import dp_accounting
import numpy as np
import pyarrow as pa
import pytest
import scipy.sparse as sp
from dp_accounting import pld

from userdp.data.ratings import Ratings
from userdp.data.synthetic import lowrank_ratings_with_features
from userdp.exceptions import BudgetExceededError, DataError, InvalidParameterError
from userdp.privacy import PrivacyAccountant, PrivacyBudget
from userdp.privacy.noise import NoiseSource
from userdp.privacy.recording import recording
from userdp.recommend import FeatureFamily, PublicFeatureEncoder, PublicFeatureRecommender
from userdp.recommend.core.model import RecommenderModel
from userdp.recommend.core.plans import plan_ssp_noise
from userdp.recommend.federated import (
    CentreContribution,
    CentreRound,
    CountContribution,
    CountsRound,
    FactorContribution,
    FactorRound,
    FederatedPublicFeatureRecommender,
    NoisyCentre,
    NoisyCounts,
    NoisyItemStatistics,
    SecureAggregator,
    Server,
    secure_aggregation_nbytes,
)

N_SET, DIM, RANGE = 50, 4, (0.5, 5.0)


@pytest.fixture(scope="module")
def data():
    """300 users, 60 items of which the first 50 are the fixed item set (10 stay outside)."""
    ratings, features = lowrank_ratings_with_features(300, 60, 6000, seed=0)
    fams = [FeatureFamily(f.name, f.matrix[:N_SET]) for f in features]
    return ratings, [*fams, FeatureFamily("id", sp.identity(N_SET, format="csr"))]


def _kw(ratings, **extra):
    kw = dict(
        epsilon=5.0,
        delta=1e-5,
        items=ratings.item_labels[:N_SET],
        rating_range=RANGE,
        seed=11,
        steps=2,
    )
    return {**kw, **extra}


def _encoder(fams):
    return PublicFeatureEncoder(fams, DIM, seed=0)


@pytest.mark.parametrize(
    "extra",
    [{}, {"variant": "minibatch", "batch_items": 20, "center": "sampled-mean"}, {"center": 3.0}],
)
def test_federated_ssp2_releases_the_centralised_model_given_the_same_seed(data, extra):
    ratings, fams = data
    # Federated SSP2 trains no biases (Algorithm 8 has none): compare with biases=False.
    central = PublicFeatureRecommender(
        encoder=_encoder(fams), biases=False, **_kw(ratings, **extra)
    )
    federated = FederatedPublicFeatureRecommender(encoder=_encoder(fams), **_kw(ratings, **extra))
    a, b = central.fit(ratings).model_, federated.fit(ratings).model_
    assert type(b) is RecommenderModel and b.method == a.method
    np.testing.assert_allclose(b.item_factors, a.item_factors, rtol=0, atol=1e-9)
    np.testing.assert_allclose(b.encoder_params, a.encoder_params, rtol=0, atol=1e-9)
    np.testing.assert_allclose(b.item_counts, a.item_counts, rtol=0, atol=1e-9)
    assert b.center == pytest.approx(a.center, abs=1e-12)
    assert b.item_labels.equals(a.item_labels) and b.budget == a.budget
    assert federated.diagnostics_["ratings_outside_item_set"] > 0  # the set is a strict subset


def test_federated_accounting_equals_the_centralised_one_and_an_independent_composition(data):
    ratings, fams = data
    acc_c, acc_f = PrivacyAccountant(), PrivacyAccountant()
    central = PublicFeatureRecommender(
        encoder=_encoder(fams), biases=False, **_kw(ratings, steps=3)
    )
    federated = FederatedPublicFeatureRecommender(encoder=_encoder(fams), **_kw(ratings, steps=3))
    central.fit(ratings, accountant=acc_c)
    federated.fit(ratings, accountant=acc_f)
    assert federated.plan_ == central.plan_
    assert repr(federated.dp_event_) == repr(central.dp_event_)
    assert acc_f.spent(1e-5).epsilon == pytest.approx(acc_c.spent(1e-5).epsilon, rel=1e-12)
    # Independently: counts, centre, and one (A, b) pair of Gaussians per alternating step.
    plan = federated.plan_
    ref = pld.PLDAccountant(value_discretization_interval=1e-4)
    ref.compose(dp_accounting.GaussianDpEvent(plan.counts))
    ref.compose(dp_accounting.GaussianDpEvent(plan.center))
    ref.compose(dp_accounting.GaussianDpEvent(plan.gram), 3)
    ref.compose(dp_accounting.GaussianDpEvent(plan.moment), 3)
    assert ref.get_epsilon(1e-5) == pytest.approx(5.0, rel=2e-3)
    assert federated.budget_.epsilon == pytest.approx(5.0)


def _exact_first_statistics(ratings, fams, counts, center, half, kw):
    """A_j, b_j of the first step, user by user in plain loops (independent of the module)."""
    data, _ = ratings.restrict_items(ratings.item_labels[:N_SET])
    V = _encoder(fams).forward(_encoder(fams).init_params(), None)[0]
    A, b = np.zeros((N_SET, DIM, DIM)), np.zeros((N_SET, DIM))
    n_hat = np.maximum(counts, 1.0)
    for k in range(data.n_users):
        rows = np.flatnonzero(data.users == k)
        if rows.size == 0:
            continue
        items, y = data.items[rows], np.clip(data.values[rows], *RANGE) - center
        u = np.linalg.solve(V[items].T @ V[items] + 0.02 * rows.size * np.eye(DIM), V[items].T @ y)
        u = u * min(1.0, 1.0 / np.linalg.norm(u))
        omega = n_hat[items] ** -0.25
        w = omega / np.linalg.norm(omega)
        for j, wi, yi in zip(items, w, np.clip(y, -half, half), strict=True):
            A[j] += wi * np.outer(u, u)
            b[j] += wi * yi * u
    return A, b


def test_the_server_receives_only_noised_aggregates_of_public_shape(data):
    ratings, fams = data
    kw = _kw(ratings, count_sample=1000)  # every rating counted: exact counts are bincounts
    inbox = []
    model = FederatedPublicFeatureRecommender(encoder=_encoder(fams), **kw)
    with recording() as releases:
        model.fit(ratings, on_server_message=inbox.append)
    assert [type(m) for m in inbox] == [NoisyCounts, NoisyCentre] + [NoisyItemStatistics] * 2
    for m in inbox:  # released floats on the item axis only: no ids, nothing per user
        for f in dataclasses.fields(m):
            value = getattr(m, f.name)
            assert isinstance(value, np.ndarray) or f.name == "step"
            if isinstance(value, np.ndarray):
                assert value.dtype == np.float64 and value.shape[0] in (N_SET, N_SET + 1, 2)
    assert inbox[0].values.shape == (N_SET + 1,) and inbox[1].statistic.shape == (2,)
    assert inbox[2].gram.shape == (N_SET, DIM, DIM) and inbox[2].moment.shape == (N_SET, DIM)
    # Each message is the noised output of the release recorded with its exact value ...
    by_name = {r.statistic: [] for r in releases}
    for r in releases:
        by_name[r.statistic].append(r)
    counts_rel = by_name["private counts (tasks, users)"][0]
    np.testing.assert_array_equal(inbox[0].values, counts_rel.output)
    data_in_set, _ = ratings.restrict_items(ratings.item_labels[:N_SET])
    exact = np.append(np.bincount(data_in_set.items, minlength=N_SET), data_in_set.n_users)
    np.testing.assert_array_equal(counts_rel.value, exact)
    # ... which for the first item statistics equals an independent computation, and the
    # server's input differs from it by Gaussian noise of the plan's scale in every coordinate.
    plan, center = model.plan_, model.center_
    half = max(RANGE[1] - center, center - RANGE[0])
    A, b = _exact_first_statistics(ratings, fams, inbox[0].counts, center, half, kw)
    iu = np.triu_indices(DIM)
    gram_rel, moment_rel = by_name["item gram"][0], by_name["item moment"][0]
    # (the module's weights are shrunk by 1 - 1e-9 so their squares sum below 1 in floats)
    np.testing.assert_allclose(gram_rel.value, A[:, iu[0], iu[1]], rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(moment_rel.value, b, rtol=1e-8, atol=1e-12)
    for noisy, exact_value, sigma in (
        (inbox[2].gram[:, iu[0], iu[1]], A[:, iu[0], iu[1]], plan.gram),
        (inbox[2].moment, b, plan.moment * half),
        (inbox[0].values, exact, plan.counts * np.sqrt(1001)),
    ):
        z = ((noisy - exact_value) / sigma).ravel()
        assert np.mean(z == 0) < 0.01  # not the exact sums, in any coordinate but by chance
        bound = 4.0 / np.sqrt(z.size)  # the noise has the plan's scale
        assert abs(np.std(z) - 1.0) < 2 * bound and abs(np.mean(z)) < bound


def test_a_users_items_outside_the_item_set_are_never_released_and_shapes_do_not_move(data):
    ratings, fams = data
    t = ratings.to_arrow()
    outside = ["x-1", "x-2", "x-3"]
    inside = [str(v) for v in ratings.item_labels[:2].to_pylist()]
    new_user = pa.table({"user": ["newcomer"] * 5, "rating": [5.0] * 5, "item": inside + outside})
    base = pa.table(
        {
            "user": pa.array([str(u) for u in t["user"].to_pylist()]),
            "item": pa.array([str(i) for i in t["item"].to_pylist()]),
            "rating": t["rating"],
        }
    )
    d = Ratings.from_table(base)
    d_prime = Ratings.from_table(pa.concat_tables([base, new_user.select(base.column_names)]))
    items = [str(v) for v in ratings.item_labels[:N_SET].to_pylist()]
    runs = []
    for table in (d, d_prime):
        inbox = []
        m = FederatedPublicFeatureRecommender(encoder=_encoder(fams), **_kw(ratings, items=items))
        m.fit(table, on_server_message=inbox.append)
        runs.append((m, inbox))
    (m0, in0), (m1, in1) = runs
    assert (
        m1.diagnostics_["ratings_outside_item_set"]
        == 3 + m0.diagnostics_["ratings_outside_item_set"]
    )
    for m in (m0, m1):
        assert m.model_.item_labels.to_pylist() == items
        assert not set(outside) & set(m.model_.item_labels.to_pylist())
    assert [type(x) for x in in0] == [type(x) for x in in1]
    for x, y in zip(in0, in1, strict=True):
        for f in dataclasses.fields(x):
            assert np.shape(getattr(x, f.name)) == np.shape(getattr(y, f.name))


def _round(**kw) -> FactorRound:
    fields = dict(
        step=0,
        item_factors=np.zeros((5, 2)),
        counts=np.ones(5),
        center=3.0,
        half=2.0,
        rating_range=RANGE,
        mu=0.25,
        max_norm=1.0,
        reg=0.02,
    )
    return FactorRound(**{**fields, **kw})


def _plan():
    return plan_ssp_noise(PrivacyBudget(5.0, 1e-5), steps=2)


def _factor(u, items, w, y):
    return FactorContribution(
        np.asarray(u, float),
        np.asarray(items, np.int32),
        np.asarray(w, float),
        np.asarray(y, float),
    )


@pytest.mark.parametrize(
    "contribution, fragment",
    [
        (_factor([0.6, 0.0], [0, 1], [1.0, 1.0], [1.0, 1.0]), "squares sum to <= 1"),
        (_factor([0.6, 0.0], [0, 1], [-0.5, 0.5], [1.0, 1.0]), "weights >= 0"),
        (_factor([0.0, 0.0], [0, 0], [0.5, 0.5], [0.0, 0.0]), "distinct item codes"),
        (_factor([0.0, 0.0], [5], [1.0], [0.0]), r"distinct item codes in \[0, 5\)"),
        (_factor([0.0, 0.0, 0.0], [1], [1.0], [0.0]), "a factor of shape"),
        (_factor([np.nan, 0.0], [1], [1.0], [0.0]), "finite"),
        (CountContribution(np.array([0], np.int32)), "type FactorContribution"),
    ],
)
def test_the_aggregator_refuses_a_malformed_contribution_and_releases_nothing(
    contribution, fragment
):
    noise = NoiseSource(0)
    with recording() as releases, pytest.raises(DataError, match=fragment):
        SecureAggregator(_plan(), noise).aggregate(_round(), [contribution])
    assert releases == []
    with pytest.raises(DataError, match="at most 2 items"):
        SecureAggregator(_plan(), noise).aggregate(
            CountsRound(5, 2), [CountContribution(np.arange(3, dtype=np.int32))]
        )


def test_the_aggregator_clips_factors_labels_and_mean_statistics_as_algorithm_8():
    big = [_factor([2.0, 0.0], [0, 3], [0.6, 0.8], [2.5, -9.0])]
    clipped = [_factor([1.0, 0.0], [0, 3], [0.6, 0.8], [2.0, -2.0])]
    out = [SecureAggregator(_plan(), NoiseSource(4)).aggregate(_round(), c) for c in (big, clipped)]
    np.testing.assert_array_equal(out[0].gram, out[1].gram)
    np.testing.assert_array_equal(out[0].moment, out[1].moment)
    r = CentreRound("private-mean", 50.0, RANGE, 50)
    big, clipped = CentreContribution(np.array([1.5, -3.0])), CentreContribution(np.array([1, -1]))
    out = [SecureAggregator(_plan(), NoiseSource(4)).aggregate(r, [c]) for c in (big, clipped)]
    np.testing.assert_array_equal(out[0].statistic, out[1].statistic)


def test_messages_count_their_bytes_and_the_fit_reports_each_clients_traffic(data):
    c = FactorContribution(np.zeros(4), np.arange(7, dtype=np.int32), np.zeros(7), np.zeros(7))
    assert c.nbytes == 4 * 8 + 7 * (4 + 8 + 8)
    assert secure_aggregation_nbytes(100, 4) == 100 * (10 + 4) * 8
    assert NoisyItemStatistics(0, np.zeros((3, 4, 4)), np.zeros((3, 4))).nbytes == 8 + 8 * 60
    ratings, fams = data
    model = FederatedPublicFeatureRecommender(encoder=_encoder(fams), **_kw(ratings))
    diag = model.fit(ratings).diagnostics_
    data_in_set, _ = ratings.restrict_items(ratings.item_labels[:N_SET])
    n = np.bincount(data_in_set.users, minlength=ratings.n_users)
    # counts (sampled items, int32) + centre (2 floats) + 2 steps x (factor + items' triples)
    expected = 4 * np.minimum(n, 50) + 16 + 2 * (DIM * 8 + 20 * n)
    assert diag["uplink_bytes_mean"] == pytest.approx(expected.mean())
    assert diag["uplink_bytes_max"] == expected.max() and diag["rounds"] == 4


@pytest.mark.parametrize(
    "kw, fragment",
    [
        ({"variant": "ssp1"}, "The 'variant' parameter of FederatedPublicFeatureRecommender"),
        ({"steps": 0}, "The 'steps' parameter of FederatedPublicFeatureRecommender"),
        ({"max_norm": -1.0}, "The 'max_norm' parameter of FederatedPublicFeatureRecommender"),
        ({"epsilon": None, "delta": None}, "Private training needs a budget"),
        ({"rating_range": None}, "Private training needs the declared rating range"),
        ({"items": None}, "Private training needs an item set"),
    ],
)
def test_bad_parameters_are_refused_in_the_house_format(data, kw, fragment):
    ratings, fams = data
    model = FederatedPublicFeatureRecommender(encoder=_encoder(fams), **_kw(ratings, **kw))
    with pytest.raises(InvalidParameterError, match=fragment):
        model.fit(ratings)


def test_bad_arguments_of_fit_and_of_the_roles_are_refused_in_the_house_format(data):
    ratings, fams = data
    model = FederatedPublicFeatureRecommender(encoder=_encoder(fams), **_kw(ratings))
    with pytest.raises(
        InvalidParameterError,
        match=r"The 'on_server_message' parameter of "
        r"FederatedPublicFeatureRecommender.fit must be a callable or None. "
        r"Got 3 instead.",
    ):
        model.fit(ratings, on_server_message=3)
    plan = model.fit(ratings).plan_
    with pytest.raises(InvalidParameterError, match="The 'r' parameter of SecureAggregator"):
        SecureAggregator(plan, NoiseSource(0)).aggregate("round", [])
    server = Server(_encoder(fams), plan, {}, np.random.default_rng(0))
    leak = CountContribution(np.array([1], np.int32))
    with pytest.raises(
        InvalidParameterError,
        match=r"The 'message' parameter of Server\.receive "
        r"must be a NoisyCounts, NoisyCentre or NoisyItemStatistics\. Got "
        r"CountContribution instead\.",
    ):
        server.receive(leak)
    wrong = FederatedPublicFeatureRecommender(encoder=_encoder(fams[:1]), **_kw(ratings))
    wrong.encoder = PublicFeatureEncoder([FeatureFamily("id", sp.identity(7, format="csr"))], 2)
    with pytest.raises(InvalidParameterError, match="The encoder describes 7 items"):
        wrong.fit(ratings)


def test_every_keyword_has_a_rule_and_every_rule_a_keyword():
    names = sorted(FederatedPublicFeatureRecommender(encoder=None).get_params())
    assert sorted(FederatedPublicFeatureRecommender._parameter_constraints) == names


def _bad(rule: dict) -> list:
    """Values a simple rule of the table must refuse (as the estimator contract does)."""
    if "check" in rule:
        return []
    if "choices" in rule:
        return ["not-a-choice", 1]
    if rule.get("bool"):
        return ["yes", 1]
    out = ["1", 1.5] if rule.get("int") else ["1", np.nan]
    low = rule.get("low")
    if low is not None and np.isfinite(low):
        out.append(low if rule.get("low_open") and not rule.get("int") else low - 1)
    return out


@pytest.mark.parametrize(
    "name, value",
    [
        (n, v)
        for n, rule in FederatedPublicFeatureRecommender._parameter_constraints.items()
        for v in _bad(rule)
    ],
)
def test_every_simple_rule_refuses_its_bad_values_before_reading_the_data(data, name, value):
    ratings, fams = data
    model = FederatedPublicFeatureRecommender(encoder=_encoder(fams), **_kw(ratings))
    model.set_params(**{name: value})
    match = f"The '{name}' parameter of FederatedPublicFeatureRecommender must be"
    with pytest.raises(InvalidParameterError, match=match):
        model.fit(None)  # the table is checked first: None is never read


def test_an_accountant_with_a_total_refuses_the_run_before_any_client_is_asked(data):
    ratings, fams = data
    accountant = PrivacyAccountant(PrivacyBudget(1.0, 1e-5))
    model = FederatedPublicFeatureRecommender(encoder=_encoder(fams), **_kw(ratings))
    with pytest.raises(BudgetExceededError):
        model.fit(None, accountant=accountant)  # None would fail if it were read
    assert accountant.ledger == () and not hasattr(model, "model_")
