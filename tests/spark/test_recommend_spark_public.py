"""PublicFeatureRecommender (AM-SSP) on the Spark runner releases the local model.

For a given seed the Spark engine's released encoder parameters, item embeddings, item biases,
counts and centre equal the local engine's to 1e-9, for ssp2, ssp1 and minibatch with and
without biases (the noise is drawn on the driver from the same stream, in the same order); a
user whose items are all outside the fixed item set adds no released item; what the Spark
engine does not run is refused before anything is charged.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import scipy.sparse as sp

from userdp.exceptions import InvalidParameterError
from userdp.privacy import PrivacyAccountant, PrivacyBudget
from userdp.recommend import PublicFeatureRecommender
from userdp.recommend.public.encoders import FeatureFamily, PublicFeatureEncoder
from userdp.recommend.public.id_encoder import IdEncoder

pytestmark = [pytest.mark.spark, pytest.mark.filterwarnings("ignore::UserWarning")]


def _ratings(seed: int) -> tuple[pa.Table, list[str]]:
    """Skewed degrees, ratings in [0, 6] (outside the declared [1, 5] too), items outside the
    catalogue, and catalogue items nobody rated."""
    rng = np.random.default_rng(seed)
    n_users, n_items = int(rng.integers(20, 40)), 10
    rows = set()
    for u in range(n_users):
        for i in rng.choice(n_items + 3, size=int(rng.integers(1, 10)), replace=False):
            rows.add((u, int(i)))
    users, items = zip(*sorted(rows), strict=True)
    table = pa.table(
        {
            "user": [f"u{u}" for u in users],
            "item": [f"i{i}" for i in items],
            "rating": rng.uniform(0.0, 6.0, len(users)).round(1),
        }
    )
    return table, [f"i{i}" for i in range(n_items + 2)]  # i10, i11: unrated; i12: outside


def _encoder(kind: str, n_items: int):
    if kind == "id":
        return IdEncoder(n_items, 3, seed=1)
    rng = np.random.default_rng(2)
    genres = sp.csr_matrix((rng.random((n_items, 4)) < 0.4).astype(float))
    year = sp.csr_matrix((np.ones(n_items), (np.arange(n_items), rng.integers(0, 3, n_items))))
    return PublicFeatureEncoder([FeatureFamily("genres", genres), FeatureFamily("year", year)], 3)


def _model(items: list[str], variant: str, biases: bool, kind: str = "id", private=True):
    budget = {"epsilon": 4.0, "delta": 1e-5} if private else {}
    return PublicFeatureRecommender(
        encoder=_encoder(kind, len(items)),
        items=items,
        variant=variant,
        biases=biases,
        steps=2,
        inner_steps=2,
        batch_items=5,
        rating_range=(1.0, 5.0),
        rating_clip=1.5,
        seed=7,
        **budget,
    )


def _assert_same(remote: PublicFeatureRecommender, local: PublicFeatureRecommender) -> None:
    np.testing.assert_allclose(remote.params_, local.params_, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(remote.item_factors_, local.item_factors_, rtol=1e-9, atol=1e-9)
    if local.item_biases_ is None:
        assert remote.item_biases_ is None
    else:
        np.testing.assert_allclose(remote.item_biases_, local.item_biases_, atol=1e-9)
    assert remote.center_ == pytest.approx(local.center_, abs=1e-9)
    assert remote.item_labels_.equals(local.item_labels_)
    assert remote.model_.method == local.model_.method
    if local.item_counts_ is not None:
        np.testing.assert_array_equal(remote.item_counts_, local.item_counts_)
    assert remote.budget_ == local.budget_
    assert (
        remote.diagnostics_["ratings_outside_item_set"]
        == (local.diagnostics_["ratings_outside_item_set"])
    )
    # training moved the encoder off its data-independent start
    start = local.encoder.init_params()
    assert not np.allclose(local.params_[: start.size], start)


@pytest.mark.parametrize("biases", [False, True])
@pytest.mark.parametrize("variant", ["ssp2", "ssp1", "minibatch"])
def test_seeded_am_ssp_model_equals_the_local_model(spark, variant, biases):
    table, items = _ratings(3)
    local = _model(items, variant, biases).fit(table)
    remote = _model(items, variant, biases).fit(spark.createDataFrame(table.to_pandas()))
    _assert_same(remote, local)


def test_feature_encoder_and_non_private_training_equal_the_local_model(spark):
    table, items = _ratings(5)
    frame = spark.createDataFrame(table.to_pandas())
    local = _model(items, "ssp2", True, kind="features").fit(table)
    _assert_same(_model(items, "ssp2", True, kind="features").fit(frame, engine="spark"), local)
    # without privacy: exact counts, no clipping
    local = _model(items, "ssp1", True, private=False).fit(table)
    _assert_same(_model(items, "ssp1", True, private=False).fit(frame), local)


def test_a_user_with_only_new_items_adds_no_released_item(spark):
    table, items = _ratings(4)
    new = pa.table(
        {"user": ["intruder"] * 4, "item": [f"new{k}" for k in range(4)], "rating": [5.0] * 4}
    )
    without = _model(items, "ssp2", True).fit(spark.createDataFrame(table.to_pandas()))
    grown = pa.concat_tables([table, new]).to_pandas()
    with_user = _model(items, "ssp2", True).fit(spark.createDataFrame(grown))
    assert with_user.item_labels_.to_pylist() == items == without.item_labels_.to_pylist()
    assert with_user.item_factors_.shape == without.item_factors_.shape == (len(items), 3)
    assert with_user.params_.shape == without.params_.shape
    assert with_user.item_counts_.shape == (len(items),)
    dropped = with_user.diagnostics_["ratings_outside_item_set"]
    assert dropped == without.diagnostics_["ratings_outside_item_set"] + 4


@pytest.mark.parametrize(
    ("change", "fit_kw", "match"),
    [
        ({"variant": "dpsgd"}, {}, "'variant' parameter of PublicFeatureRecommender.fit"),
        ({"loss": "logistic", "biases": False}, {}, "'loss' parameter"),
        ({}, {"user_features": sp.identity(3, format="csr")}, "'user_features' parameter"),
        ({"items": None, "epsilon": None, "delta": None}, {}, "'items' parameter"),
    ],
)
def test_what_spark_does_not_run_is_refused_before_any_charge(change, fit_kw, match):
    table, items = _ratings(0)
    model = _model(items, "ssp2", True).set_params(**change)
    accountant = PrivacyAccountant(PrivacyBudget(10.0, 1e-4))
    with pytest.raises(InvalidParameterError, match=match):
        model.fit(table, engine="spark", accountant=accountant, **fit_kw)
    assert accountant.ledger == ()
    assert not hasattr(model, "model_")
