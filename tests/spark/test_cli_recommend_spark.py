"""``userdp recommend train --engine spark``: the same released model as ``--engine local``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from userdp.cli import main
from userdp.recommend import RecommenderModel

pytestmark = [pytest.mark.spark, pytest.mark.filterwarnings("ignore::UserWarning")]

FLAGS = ["--rating-range", "1", "5", "--dim", "3", "--steps", "2", "--seed", "5", "-q"]
PRIVATE = ["--epsilon", "4", "--delta", "1e-5"]


@pytest.fixture(scope="module")
def ratings(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """400 users over 12 items (ids 100..111) plus one rare item each; columns named apart."""
    rng = np.random.default_rng(0)
    users, items = [], []
    for u in range(400):
        for i in rng.choice(12, size=int(rng.integers(2, 9)), replace=False):
            users.append(u)
            items.append(100 + int(i))
        users.append(u)
        items.append(1000 + u)
    path = tmp_path_factory.mktemp("data") / "ratings.parquet"
    stars = rng.integers(1, 6, len(users)).astype(float)
    pq.write_table(pa.table({"uid": users, "movie": items, "stars": stars}), path)
    return path


def _train(path: Path, out: Path, *extra: str) -> int:
    columns = ["--user-column", "uid", "--item-column", "movie", "--rating-column", "stars"]
    return main(["recommend", "train", str(path), "-o", str(out), *columns, *FLAGS, *extra])


def test_spark_engine_saves_the_local_model(spark, ratings, tmp_path):
    catalogue = tmp_path / "items.txt"
    catalogue.write_text("".join(f"{100 + i}\n" for i in range(13)))  # 112: nobody rated it
    for method in ("adadpals", "dpals-tail"):
        local, remote = tmp_path / f"{method}-local.npz", tmp_path / f"{method}-spark.npz"
        args = ["--method", method, *PRIVATE, "--items", str(catalogue)]
        assert _train(ratings, local, *args) == 0
        assert _train(ratings, remote, *args, "--engine", "spark") == 0
        a, b = RecommenderModel.load(local), RecommenderModel.load(remote)
        assert b.item_labels.to_pylist() == list(range(100, 113)) == a.item_labels.to_pylist()
        np.testing.assert_allclose(b.item_factors, a.item_factors, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(b.item_biases, a.item_biases, rtol=1e-9, atol=1e-9)
        assert b.center == pytest.approx(a.center, abs=1e-12)
        assert b.budget == a.budget and b.item_source == "public"


def test_private_item_selection_on_spark(spark, ratings, tmp_path, capsys):
    out = tmp_path / "model.npz"
    args = ["--method", "adadpals", "--epsilon", "8", "--delta", "1e-5", "--engine", "spark"]
    assert _train(ratings, out, *args) == 0
    model = RecommenderModel.load(out)
    assert model.item_source == "private"
    # the rare items (one user each) are never released; the common ones are
    assert set(model.item_labels.to_pylist()) <= set(range(100, 112))
    assert model.n_items >= 6
    assert model.budget.epsilon <= 8.0 + 1e-9


@pytest.mark.parametrize(
    ("method", "features"),
    [
        ("am-ssp", ["--features", "id"]),
        ("am-ssp-minibatch", ["--item-features", "FEATURES", "--batch-items", "6"]),
    ],
)
def test_spark_engine_saves_the_local_am_ssp_model(spark, ratings, tmp_path, method, features):
    """AM-SSP on Spark: the public item features read on the driver for the item
    set, the statistics on the executors; the saved model is --engine local's."""
    catalogue = tmp_path / "items.txt"
    catalogue.write_text("".join(f"{100 + i}\n" for i in range(13)))  # 112: nobody rated it
    table = tmp_path / "features.csv"
    table.write_text("item,feature\n" + "".join(f"{100 + i},g{i % 3}\n" for i in range(13)))
    features = [str(table) if f == "FEATURES" else f for f in features]
    args = ["--method", method, *features, *PRIVATE, "--items", str(catalogue)]
    local, remote = tmp_path / "local.npz", tmp_path / "spark.npz"
    assert _train(ratings, local, *args) == 0
    assert _train(ratings, remote, *args, "--engine", "spark") == 0
    a, b = RecommenderModel.load(local), RecommenderModel.load(remote)
    assert a.method == b.method == method
    assert b.item_labels.to_pylist() == list(range(100, 113)) == a.item_labels.to_pylist()
    np.testing.assert_allclose(b.item_factors, a.item_factors, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(b.item_biases, a.item_biases, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(b.encoder_params, a.encoder_params, rtol=1e-9, atol=1e-9)
    assert b.center == pytest.approx(a.center, abs=1e-12)
    assert b.budget == a.budget and b.item_source == "public"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--method", "am-dpsgd", *PRIVATE], "has no Spark engine"),
        (["--method", "am-ssp", *PRIVATE, "--user-features"], "--user-features"),
    ],
)
def test_methods_without_a_spark_engine_are_one_error_line(
    spark, ratings, tmp_path, capsys, args, message
):
    code = _train(ratings, tmp_path / "m.npz", *args, "--features", "id", "--engine", "spark")
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not (tmp_path / "m.npz").exists()
