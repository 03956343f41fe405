"""Results as data: selection results iterate, answer ``in`` and export to pandas, Polars and
Arrow; estimate results export to dicts with the noise of their numbers; Polars frames and
every Arrow string type go in."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
import pytest

from userdp import Contributions, select_partitions
from userdp.data.synthetic import zipf_user_values
from userdp.estimate import gwa_linear_regression, weighted_mean, weighted_quantile

N = 300


@pytest.fixture(scope="module")
def result():
    users = np.repeat(np.arange(N), 2)
    items = np.tile(np.array(["the", "a"]), N)
    return select_partitions(
        Contributions.from_columns(users, items), epsilon=1.0, delta=1e-5, seed=1
    )


def test_selection_result_iterates_and_answers_in(result):
    assert sorted(result) == ["a", "the"] == sorted(result.items)
    assert len(result) == 2
    assert "a" in result and "zzz" not in result
    assert 5 not in result and None not in result


def test_integer_items_compare_as_integers():
    c = Contributions.from_columns(np.repeat(np.arange(N), 2), np.tile([7, 9], N))
    r = select_partitions(c, epsilon=1.0, delta=1e-5, seed=1)
    assert 7 in r and np.int64(9) in r
    assert "7" not in r and 8 not in r and 2**70 not in r


def test_selection_exports(result):
    frame = result.to_pandas()
    assert list(frame.columns) == ["item"] and sorted(frame["item"]) == ["a", "the"]
    assert result.to_table().column_names == ["item"]
    assert isinstance(result.to_arrow(), pa.Array)
    record = result.to_dict()
    assert record["items"] == result.items and record["algorithm"] == result.algorithm
    assert record["epsilon"] == result.budget.epsilon and record["unit"] == "user"
    assert "n_users" not in json.dumps(record)  # the non-private diagnostics stay out


def test_selection_to_polars(result):
    pl = pytest.importorskip("polars")
    frame = result.to_polars()
    assert isinstance(frame, pl.DataFrame) and sorted(frame["item"].to_list()) == ["a", "the"]


def _polars_frames():
    pl = pytest.importorskip("polars")
    df = pl.DataFrame(
        {"user": [f"u{u}" for u in range(N) for _ in range(2)], "item": ["the", "a"] * N}
    )
    return {
        "string_view": df,
        "categorical item": df.with_columns(pl.col("item").cast(pl.Categorical)),
        "categorical user": df.with_columns(pl.col("user").cast(pl.Categorical)),
        "enum": df.with_columns(pl.col("item").cast(pl.Enum(["a", "b", "the"]))),
    }


@pytest.mark.parametrize("kind", ["string_view", "categorical item", "categorical user", "enum"])
def test_polars_frames_go_in(kind):
    frame = _polars_frames()[kind]
    r = select_partitions(frame, epsilon=1.0, delta=1e-5, seed=1)
    assert sorted(r) == ["a", "the"]


@pytest.mark.parametrize(
    "cast",
    [
        lambda a: a.cast(pa.string_view()),
        lambda a: a.cast(pa.large_string()),
        lambda a: a.dictionary_encode(),
        lambda a: a.cast(pa.string_view()).dictionary_encode(),
        lambda a: a.cast(pa.large_string()).dictionary_encode(),
    ],
    ids=["string_view", "large_string", "dictionary", "dict<string_view>", "dict<large_string>"],
)
def test_every_arrow_string_type_goes_in(cast):
    users = pa.array([f"u{u}" for u in range(N) for _ in range(2)])
    items = pa.array(["the", "a"] * N)
    table = pa.table({"user": cast(users), "item": cast(items)})
    c = Contributions.from_table(table)
    assert c.n_users == N and c.n_items == 2
    assert sorted(select_partitions(c, epsilon=1.0, delta=1e-5, seed=1)) == ["a", "the"]


# -- estimate results: to_dict and the noise of the released numbers ----------------------------
@pytest.fixture(scope="module")
def values():
    return zipf_user_values(500, alpha=1.5, seed=0)


@pytest.mark.parametrize("public", [False, True])
def test_mean_to_dict_holds_the_noise(values, public):
    m = weighted_mean(
        values.values,
        values.users,
        epsilon=1.0,
        bounds=(0.0, 10.0),
        public_user_sizes=public,
        seed=2,
    )
    record = json.loads(json.dumps(m.to_dict()))
    assert record["estimate"] == m.estimate and record["epsilon"] == m.budget.epsilon
    lo, hi = record["interval95"]
    assert lo < m.estimate < hi
    if public:  # Laplace(b): sd sqrt(2) b, 95% of its mass within b ln 20
        b = m.noise_scale
        assert record["noise"] == "laplace"
        assert record["noise_sd"] == pytest.approx(math.sqrt(2) * b)
        assert hi - m.estimate == pytest.approx(b * math.log(20))
    else:
        assert record["noise"] == "approximate" and record["noise_sd"] == m.noise_scale
    assert "noise sd" in m.summary() and "not the bias of bounding" in m.summary()


def test_laplace_interval_covers_95_percent_of_the_noise(values):
    """Over many seeds the noise-free statistic (the public-size mean at h) is inside the
    interval about 95% of the time: the interval is about the noise, computed without data."""
    kw = dict(epsilon=1.0, bounds=(0.0, 10.0), public_user_sizes=True, h=5.0)
    runs = [weighted_mean(values.values, values.users, seed=s, **kw) for s in range(400)]
    centre = float(np.median([r.estimate for r in runs]))  # the noise is symmetric
    inside = np.mean(
        [r.noise()["interval95"][0] <= centre <= r.noise()["interval95"][1] for r in runs]
    )
    assert 0.91 <= inside <= 0.99


def test_quantile_and_regression_to_dict(values):
    q = weighted_quantile(
        values.values, values.users, q=[0.25, 0.5], epsilon=1.0, bounds=(0.0, 10.0), seed=3
    )
    record = json.loads(json.dumps(q.to_dict()))
    assert record["q"] == [0.25, 0.5] and len(record["estimate"]) == 2
    assert "noise_sd" not in record  # drawn by the exponential mechanism, not noised
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 3))
    users = np.repeat(np.arange(100), 4)
    y = np.clip(X @ [1.0, -2.0, 0.5] + rng.normal(size=400), -10, 10)
    r = gwa_linear_regression(
        X, y, users, epsilon=1.0, label_range=(-10.0, 10.0), noise_variance=1.0, seed=4
    )
    record = json.loads(json.dumps(r.to_dict()))
    assert "matrix" not in record and len(record["coef"]) == 3
    assert record["noise_sd"] == pytest.approx([math.sqrt(2) * r.noise_scale] * 3)
    low, high = record["interval95"]
    assert all(lo < c < hi for lo, c, hi in zip(low, record["coef"], high, strict=True))


# -- --json on the commands that release ---------------------------------------------------------
def test_select_and_estimate_print_json(tmp_path, capsys):
    from userdp.cli import main

    pairs = tmp_path / "pairs.csv"
    pairs.write_text("user,item\n" + "".join(f"u{u},the\nu{u},a\n" for u in range(N)))
    assert (
        main(
            [
                "select",
                str(pairs),
                "--epsilon",
                "1",
                "--delta",
                "1e-5",
                "--seed",
                "1",
                "--json",
                "-q",
            ]
        )
        == 0
    )
    record = json.loads(capsys.readouterr().out)
    assert sorted(record["items"]) == ["a", "the"] and record["unit"] == "user"
    out = tmp_path / "items.txt"
    assert (
        main(
            [
                "select",
                str(pairs),
                "--epsilon",
                "1",
                "--delta",
                "1e-5",
                "--seed",
                "1",
                "--json",
                "-q",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    record = json.loads(capsys.readouterr().out)
    assert record["n_items"] == 2 and "items" not in record and out.exists()
    values = tmp_path / "values.csv"
    values.write_text("user,value\n" + "".join(f"u{u},{(u % 10) / 10}\n" for u in range(N)))
    assert (
        main(
            [
                "estimate",
                "mean",
                str(values),
                "--epsilon",
                "1",
                "--bounds",
                "0",
                "1",
                "--json",
                "-q",
                "--seed",
                "1",
            ]
        )
        == 0
    )
    record = json.loads(capsys.readouterr().out)
    lo, hi = record["interval95"]
    assert record["noise_sd"] > 0 and lo < record["estimates"]["mean"] < hi


@pytest.fixture(scope="module")
def grouped():
    import userdp

    rows = {"user": np.repeat(np.arange(N), 2), "key": np.tile(np.array(["a", "b"]), N)}
    return userdp.aggregate(rows, keys=["a", "b", "c"], epsilon=1.0, delta=1e-5, seed=1)


def test_aggregate_to_polars_holds_the_arrow_table(grouped):
    pl = pytest.importorskip("polars")
    frame = grouped.to_polars()
    assert isinstance(frame, pl.DataFrame)
    cells = [c for m in ("users", "count") for c in (m, f"{m}_low", f"{m}_high")]
    assert frame.columns == grouped.to_arrow().column_names == ["key", *cells]
    assert frame.to_dicts() == grouped.to_arrow().to_pylist()  # the same released values


def test_aggregate_to_polars_without_polars_names_the_install(grouped, monkeypatch):
    import sys

    from userdp.exceptions import InvalidParameterError

    monkeypatch.setitem(sys.modules, "polars", None)  # import polars raises ImportError
    with pytest.raises(InvalidParameterError, match=r"pip install polars") as info:
        grouped.to_polars()
    assert "\n" not in str(info.value)
