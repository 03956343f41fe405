"""``userdp recommend train|evaluate|neighbors`` with the public-feature methods (am-*): an item
encoder on MovieLens genres/years, a feature table or item ids, on tiny synthetic data."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from userdp.cli import ExitCode, main
from userdp.cli import recommend as recommend_cli
from userdp.data.synthetic import lowrank_ratings
from userdp.recommend import RecommenderModel, ml10m_split
from userdp.recommend.public import estimator as public_module

EPS_DELTA = ["--epsilon", "1", "--delta", "1e-5"]
FAST = ["--dim", "4", "--steps", "2", "--seed", "0", "--inner-steps", "5"]
N_USERS, N_ITEMS = 200, 60
N_RATED = 59  # lowrank_ratings(seed=0) leaves item 58 without ratings
CATALOGUE: list[Path] = []  # the fixture's item catalogue file
N_CATALOGUE = 61  # ids 0..60
TRAIN = "userdp recommend train"
EVALUATE = "userdp recommend evaluate"


def _variants() -> set[str]:
    return set(getattr(public_module, "SSP_VARIANTS", ())) | set(
        getattr(public_module, "VARIANTS", ())
    )


needs_dpsgd = pytest.mark.skipif(
    "dpsgd" not in _variants(), reason="PublicFeatureRecommender has no 'dpsgd' variant yet"
)


def _flags(*on: int) -> str:
    return "|".join("1" if i in on else "0" for i in range(19))


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Ratings as CSV (items 0..59, read as strings), a history/test split, an item feature
    table, and a fake ml-100k folder whose movies have genres and years."""
    d = tmp_path_factory.mktemp("public")
    r = lowrank_ratings(n_users=N_USERS, n_items=N_ITEMS, n_ratings=4000, seed=0)
    pacsv.write_csv(r.to_arrow(), d / "ratings.csv")
    split = ml10m_split(r)
    pacsv.write_csv(split.train.to_arrow(), d / "history.csv")
    pacsv.write_csv(split.test.to_arrow(), d / "test.csv")
    # Two kinds per item (and a weight), items 50.. without features, one unknown item 999.
    rows = [(i, f"kind{i % 5}", 1.0) for i in range(50)] + [
        (i, "even", 2.0) for i in range(0, 50, 2)
    ]
    rows.append((999, "kind0", 1.0))
    items, features, weights = zip(*rows, strict=True)
    pacsv.write_csv(
        pa.table({"item": list(items), "feature": list(features), "weight": list(weights)}),
        d / "kinds.csv",
    )
    # A fake ml-100k in the official layout, with two genres and a year per movie.
    stars = lowrank_ratings(
        n_users=N_USERS, n_items=N_ITEMS, n_ratings=4000, rating_range=(1, 5), step=1, seed=1
    )
    u_data = "".join(
        f"{u + 1}\t{i + 1}\t{v:.0f}\t881250949\n"
        for u, i, v in zip(stars.users, stars.items, stars.values, strict=True)
    )
    u_item = "".join(
        f"{i}|Movie {i} ({1985 + i % 12})|01-Jan-{1985 + i % 12}||http://x|"
        f"{_flags(1 + i % 18, 1 + (7 * i) % 18)}\n"
        for i in range(1, N_ITEMS + 1)
    )
    # The public catalogue passed with --items: ids 0..60 cover the synthetic items (0..59) and
    # the fake ml-100k's (1..60); ids nobody rated get rows of noise only.
    (d / "items.txt").write_text("".join(f"{i}\n" for i in range(N_ITEMS + 1)))
    CATALOGUE.append(d / "items.txt")
    folder = d / "ml-100k"
    folder.mkdir()
    (folder / "u.data").write_text(u_data)
    (folder / "u.item").write_text(u_item, encoding="latin-1")
    jobs = ("student", "engineer", "writer")
    u_user = "".join(
        f"{u}|{15 + (7 * u) % 50}|{'FM'[u % 2]}|{jobs[u % 3]}|0000{u % 10}\n"
        for u in range(1, N_USERS + 1)
    )
    (folder / "u.user").write_text(u_user, encoding="latin-1")
    return {
        "dir": d,
        "csv": d / "ratings.csv",
        "history": d / "history.csv",
        "test": d / "test.csv",
        "kinds": d / "kinds.csv",
        "ml": folder,
    }


@pytest.fixture(scope="module")
def ml_model(data: dict[str, Path]) -> Path:
    """An am-ssp model trained on the fake ml-100k with the default features."""
    path = data["dir"] / "am-ssp.npz"
    argv = [str(data["ml"]), "-o", str(path), "--method", "am-ssp", *EPS_DELTA, *FAST, "-q"]
    assert _train(*argv) == ExitCode.OK
    return path


def _train(*args: str, catalogue: bool = True) -> int:
    """``userdp recommend train ARGS``, with the fixture's public catalogue (``--items``) unless
    ``catalogue=False`` (then private methods choose their items privately)."""
    extra = ["--items", str(CATALOGUE[-1])] if catalogue and CATALOGUE else []
    return main(["recommend", "train", *args, *extra])


def _evaluate(*args: str) -> int:
    return main(["recommend", "evaluate", *args])


def _one_error_line(err: str, prog: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{prog}: error: "), err
    assert "Traceback" not in err
    return lines[0]


def _rows(out: str) -> list[list[str]]:
    lines = out.splitlines()
    assert lines[0].split()[:5] == ["method", "epsilon", "delta", "metric", "value"]
    return [line.split() for line in lines[1:]]


# -- train --------------------------------------------------------------------------------------
def test_train_am_ssp_on_movielens_writes_the_item_embeddings_and_budget(data, tmp_path, capsys):
    out = tmp_path / "m.npz"
    argv = [str(data["ml"]), "-o", str(out), "--method", "am-ssp", *EPS_DELTA, *FAST]
    assert _train(*argv) == ExitCode.OK
    stdout, err = capsys.readouterr()
    assert stdout == ""
    model = RecommenderModel.load(out)
    assert model.method == "am-ssp"
    assert model.budget.epsilon == pytest.approx(1.0, rel=1e-3)
    assert model.budget.epsilon <= 1.0 + 1e-9
    assert model.budget.delta == pytest.approx(1e-5)
    assert model.item_factors.shape == (N_CATALOGUE, 4)  # the catalogue, not the rated items
    assert np.all(np.isfinite(model.item_factors))
    assert model.rating_range == (1.0, 5.0)  # the version's scale
    assert model.item_counts is not None and model.item_counts.shape == (N_CATALOGUE,)
    assert model.trained_items.all()
    assert sorted(model.item_labels.to_pylist()) == list(range(N_CATALOGUE))
    assert model.encoder_params is not None and model.encoder_params.ndim == 1
    lines = err.splitlines()
    assert lines[1].split()[:3] == ["method", "epsilon", "delta"]
    assert lines[2].split()[:6] == ["am-ssp", "1", "1e-05", str(N_CATALOGUE), "(public)", "61"]
    assert "genres (18), year (12), id (61)" in err
    assert "and the encoder's parameters" in err
    assert "not private" not in err  # exact counts and timings only with -v


@pytest.mark.parametrize(("flag", "implicit"), [([], False), (["--implicit"], True)])
def test_implicit_flag_turns_the_auto_biases_off(flag, implicit, data, tmp_path, capsys):
    """--implicit says the data are implicit feedback: biases auto is then off."""
    out = tmp_path / "m.npz"
    argv = [str(data["ml"]), "-o", str(out), "--method", "am-ssp", *EPS_DELTA, *FAST, *flag]
    assert _train(*argv, "--no-bias-prior") == ExitCode.OK
    assert "only appl" not in capsys.readouterr().err
    model = RecommenderModel.load(out)
    assert (model.params["implicit"], model.params["bias_prior"]) == (implicit, False)
    assert (model.item_biases is None) is implicit


@pytest.mark.parametrize(("flag", "saved"), [([], True), (["--biases", "off"], False)])
def test_biases_flag_reaches_the_public_feature_model(flag, saved, data, tmp_path, capsys):
    """Item biases are on by default for the am-* methods too; --biases off trains without."""
    out = tmp_path / "m.npz"
    argv = [str(data["ml"]), "-o", str(out), "--method", "am-ssp", *EPS_DELTA, *FAST, *flag]
    assert _train(*argv) == ExitCode.OK
    err = capsys.readouterr().err
    assert "--biases only applies" not in err
    assert ("item biases and the encoder's parameters" in err) is saved
    model = RecommenderModel.load(out)
    assert model.params["biases"] == ("auto" if saved else False)
    if saved:
        assert model.item_biases.shape == (N_CATALOGUE,)
        assert np.all(np.isfinite(model.item_biases))
    else:
        assert model.item_biases is None


@pytest.mark.parametrize(
    "method", ["am-ssp1", "am-ssp-minibatch", pytest.param("am-dpsgd", marks=needs_dpsgd)]
)
def test_every_public_method_trains(method, data, tmp_path):
    out = tmp_path / "m.npz"
    argv = [str(data["ml"]), "-o", str(out), "--method", method, *EPS_DELTA, *FAST, "-q"]
    argv += ["--features", "decade,genres", "--family-dim", "3", "--batch-items", "16"]
    if method != "am-ssp-minibatch":
        argv = argv[:-2]
    assert _train(*argv) == ExitCode.OK
    model = RecommenderModel.load(out)
    assert model.method == method
    assert model.budget.epsilon == pytest.approx(1.0, rel=1e-3)
    assert np.all(np.isfinite(model.item_factors))


def test_features_id_alone_trains_the_id_only_model_on_a_ratings_file(data, tmp_path, capsys):
    out = tmp_path / "m.npz"
    argv = [str(data["csv"]), "-o", str(out), "--method", "am-ssp", "--features", "id"]
    argv += [*EPS_DELTA, *FAST, "--rating-range", "0.5", "5"]
    assert _train(*argv) == ExitCode.OK
    err = capsys.readouterr().err
    assert f"id-only encoder ({N_CATALOGUE} item embeddings)" in err
    model = RecommenderModel.load(out)
    assert model.item_factors.shape == (N_CATALOGUE, 4)
    assert model.rating_range == (0.5, 5.0)


def test_item_features_file_is_one_family(data, tmp_path, capsys):
    out = tmp_path / "m.npz"
    argv = [str(data["csv"]), "-o", str(out), "--method", "am-ssp"]
    argv += ["--item-features", str(data["kinds"]), *EPS_DELTA, *FAST, "--rating-range", "0.5", "5"]
    assert _train(*argv) == ExitCode.OK  # default --features genres,year,id: the file and id
    err = capsys.readouterr().err
    assert f"kinds (6), id ({N_CATALOGUE})" in err
    model = RecommenderModel.load(out)
    assert model.item_factors.shape == (N_CATALOGUE, 4)
    # Without id: the file's family alone; items 50.. have no feature and embed to the bias.
    argv += ["--features", "genres", "--overwrite"]
    assert _train(*argv) == ExitCode.OK
    assert "encoder on kinds (6) with family dimension 4" in capsys.readouterr().err
    model = RecommenderModel.load(out)
    codes = model.item_codes(pa.array(["50", "51", "52"]))
    rows = model.item_factors[codes]
    np.testing.assert_allclose(rows, np.broadcast_to(rows[0], rows.shape))


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["{csv}", "--features", "genres"], "--item-features FILE"),
        (["{csv}"], "(the default) needs MovieLens INPUT"),
        (["{csv}", "--features", "genres,nope"], "invalid feature: 'nope'"),
        (["{ml}", "--features", "tags"], "ml-100k has no tags"),
        (["{ml}", "--features", "genres,genome"], "ml-100k has no Tag Genome"),
        (["{csv}", "--item-features", "{dir}/missing.csv"], "missing.csv"),
        (["{csv}", "--item-features", "{csv}"], "column 'feature' not found"),
    ],
)
def test_bad_feature_input_is_one_error_line_and_exit_2(args, fragment, data, tmp_path, capsys):
    argv = [a.format(csv=data["csv"], ml=data["ml"], dir=tmp_path) for a in args]
    argv += ["-o", str(tmp_path / "m.npz"), "--method", "am-ssp", *EPS_DELTA, *FAST]
    assert _train(*argv, "--rating-range", "0.5", "5") == ExitCode.USAGE
    out, err = capsys.readouterr()
    assert out == ""
    assert fragment in _one_error_line(err, TRAIN)
    assert not (tmp_path / "m.npz").exists()


def test_inapplicable_flags_warn(data, tmp_path, capsys):
    argv = [str(data["ml"]), "-o", str(tmp_path / "a.npz"), *EPS_DELTA, *FAST]
    assert _train(*argv, "--features", "id") == ExitCode.OK  # adadpals
    err = capsys.readouterr().err
    assert "--inner-steps only applies to the am-* methods; ignored." in err
    assert "--features only apply to the am-* methods; ignored." in err
    argv = [str(data["ml"]), "-o", str(tmp_path / "b.npz"), "--method", "am-ssp", *EPS_DELTA]
    assert _train(*argv, *FAST, "--top-items", "0.5", "--sample-size", "3") == ExitCode.OK
    err = capsys.readouterr().err
    assert "--top-items only applies to the matrix-factorization methods, not am-*" in err
    assert "--sample-size only applies to the uniform and tail methods; ignored." in err


def test_help_names_the_public_methods(capsys):
    assert main(["recommend", "train", "--help"]) == ExitCode.OK
    out = capsys.readouterr().out
    assert "am-ssp-minibatch" in out and "am-dpsgd" in out
    assert "encoder's parameters" in out and "--items FILE" in out
    assert "Default: genres,year,id." in out and "Default: 50." in out  # --inner-steps


# -- evaluate and neighbors ---------------------------------------------------------------------
def test_evaluate_protocol_ml10m_with_a_public_method(data, capsys):
    argv = [str(data["ml"]), "--protocol", "ml10m", "--method", "am-ssp,adadpals"]
    assert _evaluate(*argv, *EPS_DELTA, *FAST) == ExitCode.OK
    out, err = capsys.readouterr()
    rows = _rows(out)
    assert [r[:4] for r in rows] == [
        ["am-ssp", "1", "1e-05", "rmse"],
        ["adadpals", "1", "1e-05", "rmse"],
        ["global-mean", "non-private", "-", "rmse"],
    ]
    assert all(0 < float(r[4]) < 5 for r in rows)
    assert "2 runs on the ml10m split" in err
    # --inner-steps reached am-ssp; adadpals does not read it, so no warning.
    assert "ignored" not in err


def test_evaluate_protocol_ml20m_with_a_public_method(data, capsys):
    argv = [str(data["ml"]), "--protocol", "ml20m", "--method", "am-ssp", "--k", "10"]
    assert _evaluate(*argv, *EPS_DELTA, *FAST, "--features", "genres,id") == ExitCode.OK
    rows = _rows(capsys.readouterr().out)
    assert [r[:4] for r in rows] == [
        ["am-ssp", "1", "1e-05", "recall@10"],
        ["popularity", "non-private", "-", "recall@10"],
    ]
    assert all(0 <= float(r[4]) <= 1 for r in rows)


def test_evaluate_a_saved_public_model(data, tmp_path, capsys):
    out = tmp_path / "m.npz"
    argv = [str(data["csv"]), "-o", str(out), "--method", "am-ssp", "--features", "id", "-q"]
    assert _train(*argv, *EPS_DELTA, *FAST, "--rating-range", "0.5", "5") == ExitCode.OK
    saved = ["--model", str(out), "--history", str(data["history"]), "--test", str(data["test"])]
    assert _evaluate(*saved, "--features", "id") == ExitCode.OK
    captured = capsys.readouterr()
    rows = _rows(captured.out)
    assert [(r[0], r[3]) for r in rows] == [
        ("am-ssp", "rmse"),
        ("am-ssp", "recall@20"),
        ("global-mean", "rmse"),
        ("popularity", "recall@20"),
    ]
    assert all(math.isfinite(float(r[4])) for r in rows)
    assert "--features only apply to training; ignored with --model." in captured.err


def test_neighbors_of_a_public_model_with_titles(ml_model, data, capsys):
    argv = ["recommend", "neighbors", "--model", str(ml_model), "7", "12", "--n", "3"]
    assert main([*argv, "--movies", str(data["ml"])]) == ExitCode.OK
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split("\t") == ["item", "rank", "neighbor", "score", "title"]
    rows = [line.split("\t") for line in lines[1:]]
    assert [(r[0], r[1]) for r in rows] == [(i, str(k)) for i in ("7", "12") for k in (1, 2, 3)]
    assert all(r[2] != r[0] and r[4].startswith(f"Movie {r[2]} (") for r in rows)
    assert all(-1 <= float(r[3]) <= 1 for r in rows)


def test_public_progress_only_on_a_terminal(data, tmp_path, capsys, monkeypatch):
    argv = [str(data["ml"]), "-o", str(tmp_path / "m.npz"), "--method", "am-ssp", *EPS_DELTA]
    assert _train(*argv, *FAST) == ExitCode.OK
    assert "am-ssp2" not in capsys.readouterr().err
    monkeypatch.setattr(recommend_cli._options, "interactive", lambda quiet: not quiet)
    assert _train(*argv, *FAST, "--overwrite") == ExitCode.OK
    assert "am-ssp2" in capsys.readouterr().err


def test_an_ml_20m_folder_trains_with_its_tag_genome(data, tmp_path, capsys):
    # ml-20m's layout: ratings.csv and movies.csv, plus the genome's scores and tag names.
    folder = tmp_path / "ml-20m"
    folder.mkdir()
    stars = lowrank_ratings(n_users=N_USERS, n_items=N_ITEMS, n_ratings=4000, seed=2)
    ratings = "".join(
        f"{u + 1},{i + 1},{v:.1f},1\n"
        for u, i, v in zip(stars.users, stars.items, stars.values, strict=True)
    )
    (folder / "ratings.csv").write_text("userId,movieId,rating,timestamp\n" + ratings)
    movies = "".join(f"{i},Movie {i} ({1990 + i % 9}),Drama|Comedy\n" for i in range(1, 61))
    (folder / "movies.csv").write_text("movieId,title,genres\n" + movies)
    scores = "".join(f"{i},{t},{((i * t) % 10) / 10:.1f}\n" for i in range(1, 61) for t in (1, 2))
    (folder / "genome-scores.csv").write_text("movieId,tagId,relevance\n" + scores)
    (folder / "genome-tags.csv").write_text("tagId,tag\n1,dark\n2,funny\n")
    out = tmp_path / "genome.npz"
    argv = [str(folder), "-o", str(out), "--method", "am-ssp", "--features", "genome,id"]
    assert _train(*argv, *EPS_DELTA, *FAST) == ExitCode.OK
    assert "encoder on genome (2), id" in capsys.readouterr().err
    # The model holds the catalogue's items (ids 0..60; 0 is not a movie: no genome row)
    assert RecommenderModel.load(out).item_factors.shape == (N_CATALOGUE, 4)


def test_user_features_train_a_model_that_saves_the_released_prior(data, tmp_path, capsys):
    out = tmp_path / "m.npz"
    argv = [str(data["ml"]), "-o", str(out), "--method", "am-ssp", *EPS_DELTA, *FAST, "-q"]
    assert _train(*argv, "--user-features") == ExitCode.OK
    model = RecommenderModel.load(out)
    assert model.user_prior is not None and model.user_prior.shape == (7 + 2 + 21, 4)
    assert model.budget.epsilon == pytest.approx(1.0, rel=1e-3)  # the prior is charged
    assert _train(*argv, "--user-features", "--method", "adadpals") == ExitCode.USAGE
    assert "--user-features applies to the am-* methods" in capsys.readouterr().err


# -- SSP for convex losses (Appendix D) ----------------------------------------------------------
def test_train_with_the_logistic_loss_saves_the_loss_and_its_clips(data, tmp_path, capsys):
    out = tmp_path / "m.npz"
    argv = [str(data["csv"]), "-o", str(out), "--method", "am-ssp", *EPS_DELTA, *FAST, "-q"]
    argv += ["--features", "id", "--rating-range", "0", "1", "--center", "0"]
    argv += ["--loss", "logistic", "--hessian-clip", "0.2", "--negatives", "2"]
    assert _train(*argv) == ExitCode.OK
    model = RecommenderModel.load(out)
    assert model.params["loss"] == "logistic" and model.params["negatives"] == 2.0
    assert model.params["hessian_clip"] == 0.2 and model.params["gradient_clip"] == 1.0
    assert model.budget.epsilon == pytest.approx(1.0, rel=1e-3)
    assert np.all(np.isfinite(model.item_factors))


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--loss", "hinge"], "--loss must be"),
        (["--loss", "logistic", "--gradient-clip", "0"], "--gradient-clip must be"),
        (["--loss", "logistic", "--method", "am-ssp1"], "'variant' parameter"),
    ],
)
def test_bad_loss_flags_are_one_error_line_and_exit_2(args, fragment, data, tmp_path, capsys):
    argv = [str(data["csv"]), "-o", str(tmp_path / "m.npz"), *EPS_DELTA, *FAST]
    argv += ["--features", "id", "--rating-range", "0", "1", "--center", "0"]
    if "--method" not in args:
        argv += ["--method", "am-ssp"]
    assert _train(*argv, *args) == ExitCode.USAGE
    out, err = capsys.readouterr()
    assert out == ""
    assert fragment in _one_error_line(err, TRAIN)
    assert not (tmp_path / "m.npz").exists()
