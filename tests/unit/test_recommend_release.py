"""What a released recommender holds: neighbouring datasets D and D' = D + one user
who holds a unique item ('rare-title-42') under a unique user label. The release (model
attributes, saved file bytes, summary strings, warnings) must not contain them, and the saved
file's structure (keys, shapes, dtypes) must not depend on them."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from userdp.data.ratings import Ratings
from userdp.data.synthetic import lowrank_ratings
from userdp.exceptions import InvalidParameterError
from userdp.partition import select_partitions
from userdp.privacy import PrivacyAccountant, PrivacyBudget
from userdp.recommend import (
    IdEncoder,
    ItemSet,
    MatrixFactorization,
    PublicFeatureRecommender,
    RecommenderModel,
)

RARE, WHO = "rare-title-42", "carol-secret-user"
PRIVATE = ("dpals-uniform", "dpals-tail", "adadpals", "dpsgd-uniform", "dpsgd-tail", "adadpsgd")
BUDGET = PrivacyBudget(2.0, 1e-5)


def _neighbours(n_users: int = 300, n_items: int = 30) -> tuple[Ratings, Ratings, list[str]]:
    base = lowrank_ratings(n_users=n_users, n_items=n_items, n_ratings=n_users * 8, seed=3)
    users = [f"u{u}" for u in base.users]
    items = [f"i{i}" for i in base.items]
    values = list(base.values)
    d = Ratings.from_columns(users, items, values)
    d2 = Ratings.from_columns([*users, WHO, WHO], [*items, RARE, "i0"], [*values, 5.0, 1.0])
    return d, d2, [f"i{i}" for i in range(n_items)]


def _structure(path) -> dict[str, tuple]:
    with np.load(path, allow_pickle=False) as z:
        out = {k: (z[k].shape, z[k].dtype.str) for k in z.files if k != "meta"}
        meta = json.loads(str(z["meta"]))
    out["meta"] = (tuple(sorted(meta)), tuple(sorted(meta["params"])))
    return out


def _release(make, data, path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fitted = make().set_params(epsilon=BUDGET.epsilon, delta=BUDGET.delta).fit(data)
    fitted.model_.save(path)
    return fitted.model_, path.read_bytes(), [str(w.message) for w in caught]


def _assert_hidden(model: RecommenderModel, raw: bytes, messages: list[str]) -> None:
    for secret in (RARE, WHO):
        assert secret not in model.item_labels.to_pylist()
        assert secret.encode() not in raw
        assert secret not in model.summary() and secret not in repr(model)
        assert not any(secret in m for m in messages)


@pytest.mark.parametrize("method", PRIVATE)
def test_a_public_catalogue_release_hides_the_added_users_unique_item(method, tmp_path):
    d, d2, catalogue = _neighbours()

    def make():
        return MatrixFactorization(
            method=method,
            items=catalogue,
            dim=3,
            steps=1,
            sgd_steps=1,
            top_items=0.5,
            rating_range=(0.5, 5.0),
            seed=1,
        )

    a, _, _ = _release(make, d, tmp_path / "a.npz")
    b, raw_b, msg_b = _release(make, d2, tmp_path / "b.npz")
    _assert_hidden(b, raw_b, msg_b)
    assert a.item_labels.equals(b.item_labels)
    assert a.item_labels.to_pylist() == catalogue
    assert a.item_factors.shape == b.item_factors.shape == (len(catalogue), 3)
    assert int(a.trained_items.sum()) == int(b.trained_items.sum()) == 15  # of the catalogue
    assert _structure(tmp_path / "a.npz") == _structure(tmp_path / "b.npz")


@pytest.mark.parametrize("variant", ["ssp2", "dpsgd"])
def test_a_public_feature_release_hides_the_added_users_unique_item(variant, tmp_path):
    d, d2, catalogue = _neighbours()

    def make():
        return PublicFeatureRecommender(
            encoder=IdEncoder(len(catalogue), 3, seed=0),
            items=catalogue,
            variant=variant,
            steps=1,
            inner_steps=2,
            rating_range=(0.5, 5.0),
            seed=1,
        )

    a, _, _ = _release(make, d, tmp_path / "a.npz")
    b, raw_b, msg_b = _release(make, d2, tmp_path / "b.npz")
    _assert_hidden(b, raw_b, msg_b)
    assert b.encoder_params is not None and b.encoder_params.shape == a.encoder_params.shape
    assert _structure(tmp_path / "a.npz") == _structure(tmp_path / "b.npz")


def test_a_privately_selected_item_set_leaves_out_one_users_item_and_is_charged(tmp_path):
    _, d2, _ = _neighbours(n_users=3000, n_items=20)
    pairs = (d2.users, d2.item_labels.take(d2.items))
    selection_budget, model_budget = BUDGET.split([0.2, 0.8])
    chosen = select_partitions(  # basic composition: the two budgets add up exactly (below)
        pairs,
        epsilon=selection_budget.epsilon,
        delta=selection_budget.delta,
        composition="basic",
        seed=2,
    )
    assert RARE not in chosen.items and len(chosen) > 0
    model = MatrixFactorization(
        method="adadpals",
        items=ItemSet.selected(chosen),
        dim=3,
        steps=1,
        rating_range=(0.5, 5.0),
        seed=1,
        epsilon=model_budget.epsilon,
        delta=model_budget.delta,
    ).fit(d2)
    release = model.model_
    assert release.item_source == "private"
    assert sorted(release.item_labels.to_pylist()) == sorted(chosen.items)
    # The selection is part of the release's event and budget: the two add up to the total.
    assert release.dp_event.events[0] == chosen.dp_event
    assert release.budget.epsilon == pytest.approx(BUDGET.epsilon, rel=1e-3)
    assert release.budget.epsilon <= BUDGET.epsilon * (1 + 1e-9)
    assert release.budget.delta == pytest.approx(BUDGET.delta)
    again = PrivacyAccountant().compose(release.dp_event).spent(model_budget.delta)
    assert again.epsilon == pytest.approx(release.budget.epsilon)
    release.save(tmp_path / "m.npz")
    back = RecommenderModel.load(tmp_path / "m.npz")
    assert back.dp_event == release.dp_event and back.item_source == "private"
    assert model.diagnostics_["ratings_outside_item_set"] >= 1  # at least the rare rating


def test_private_training_needs_an_item_set_fixed_before_training():
    d, _, _ = _neighbours(n_users=50)
    with pytest.raises(InvalidParameterError, match="item set fixed before training"):
        MatrixFactorization(
            method="adadpals", rating_range=(0.5, 5.0), epsilon=2.0, delta=1e-5
        ).fit(d)
    with pytest.raises(InvalidParameterError, match="item set fixed before training"):
        PublicFeatureRecommender(
            encoder=IdEncoder(30, 2), rating_range=(0.5, 5.0), epsilon=2.0, delta=1e-5
        ).fit(d)
    with pytest.raises(InvalidParameterError, match=r"ItemSet\.selected takes the result"):
        ItemSet.selected(["i0"])


def test_the_saved_file_holds_no_seed_no_fit_time_and_no_diagnostics(tmp_path):
    d, _, catalogue = _neighbours(n_users=50)
    model = MatrixFactorization(
        method="adadpals",
        items=catalogue,
        dim=2,
        steps=1,
        rating_range=(0.5, 5.0),
        seed=987654321,
        epsilon=BUDGET.epsilon,
        delta=BUDGET.delta,
    ).fit(d)
    assert model.fit_seconds_ > 0 and model.diagnostics_["non_private"] is True
    model.save(tmp_path / "m.npz")
    with np.load(tmp_path / "m.npz", allow_pickle=False) as z:
        assert sorted(z.files) == [
            "item_biases",
            "item_counts",
            "item_factors",
            "item_labels",
            "meta",
            "trained_items",
        ]
        meta = json.loads(str(z["meta"]))
    assert sorted(meta) == [
        "budget",
        "center",
        "dp_event",
        "format",
        "item_source",
        "item_type",
        "method",
        "params",
        "rating_range",
    ]
    text = json.dumps(meta)
    for absent in ("seed", "fit_seconds", "diagnostics", "ratings_outside", "987654321"):
        assert absent not in text


def test_an_item_set_nobody_rated_still_gives_a_model_of_its_shape():
    # The shapes depend on the item set only, even when no rating falls in it.
    d, _, _ = _neighbours(n_users=50)
    model = MatrixFactorization(
        method="adadpals",
        items=["zz-1", "zz-2"],
        dim=2,
        steps=1,
        rating_range=(0.5, 5.0),
        unobserved_weight=0.5,
        seed=0,
        epsilon=BUDGET.epsilon,
        delta=BUDGET.delta,
    ).fit(d)
    assert model.item_factors_.shape == (2, 2)
    assert model.diagnostics_["ratings_outside_item_set"] == d.n_ratings
    restricted, dropped = d.restrict_items(["zz-1", "zz-2"])
    assert (restricted.n_ratings, restricted.n_items, dropped) == (0, 2, d.n_ratings)
