"""``userdp recommend train|evaluate|neighbors`` through :func:`userdp.cli.main` (and once
through a subprocess), on small synthetic ratings and a fake ml-100k."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from userdp.cli import ExitCode, main
from userdp.cli import recommend as recommend_cli
from userdp.data.ratings import Ratings
from userdp.data.synthetic import lowrank_ratings
from userdp.exceptions import DataError
from userdp.recommend import MatrixFactorization, RecommenderModel, ml10m_split

EPS_DELTA = ["--epsilon", "1", "--delta", "1e-5"]
FAST = ["--dim", "4", "--steps", "2", "--seed", "0"]
N_USERS, N_ITEMS = 200, 60
N_RATED = 59  # lowrank_ratings(seed=0) leaves item 58 without ratings; seed=1 rates all 60


CATALOGUE: list[Path] = []  # the fixture's item catalogue file
N_CATALOGUE = 61  # ids 0..60


def _table(r: Ratings) -> pa.Table:
    return r.to_arrow()


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Synthetic ratings as CSV and Parquet, a history/test split, and a fake ml-100k."""
    d = tmp_path_factory.mktemp("recommend")
    r = lowrank_ratings(n_users=N_USERS, n_items=N_ITEMS, n_ratings=4000, seed=0)
    pacsv.write_csv(_table(r), d / "ratings.csv")
    pq.write_table(_table(r), d / "ratings.parquet")
    split = ml10m_split(r)
    pacsv.write_csv(_table(split.train), d / "history.csv")
    pacsv.write_csv(_table(split.test), d / "test.csv")
    # A fake ml-100k in the official layout (tab-separated u.data, '|'-separated u.item) with
    # whole-star ratings and ids starting at 1, as a folder and as the official zip.
    stars = lowrank_ratings(
        n_users=N_USERS, n_items=N_ITEMS, n_ratings=4000, rating_range=(1, 5), step=1, seed=1
    )
    u_data = "".join(
        f"{u + 1}\t{i + 1}\t{v:.0f}\t881250949\n"
        for u, i, v in zip(stars.users, stars.items, stars.values, strict=True)
    )
    flags = "|".join(["0"] * 19)
    u_item = "".join(f"{i}|Movie {i} (1995)|01-Jan-1995||http://x|{flags}\n" for i in range(1, 61))
    # The public catalogue passed with --items: ids 0..60 cover the synthetic items (0..59) and
    # the fake ml-100k's (1..60); ids nobody rated get rows of noise only.
    (d / "items.txt").write_text("".join(f"{i}\n" for i in range(N_ITEMS + 1)))
    CATALOGUE.append(d / "items.txt")
    folder = d / "ml-100k"
    folder.mkdir()
    (folder / "u.data").write_text(u_data)
    (folder / "u.item").write_text(u_item, encoding="latin-1")
    with zipfile.ZipFile(d / "ml-100k.zip", "w") as zf:
        zf.writestr("ml-100k/u.data", u_data)
        zf.writestr("ml-100k/u.item", u_item.encode("latin-1"))
    return {
        "dir": d,
        "csv": d / "ratings.csv",
        "parquet": d / "ratings.parquet",
        "history": d / "history.csv",
        "test": d / "test.csv",
        "ml": folder,
        "zip": d / "ml-100k.zip",
    }


@pytest.fixture(scope="module")
def model_path(data: dict[str, Path]) -> Path:
    """An adadpals model trained on the Parquet file (integer item ids)."""
    path = data["dir"] / "model.npz"
    argv = [str(data["parquet"]), "-o", str(path), *EPS_DELTA, *FAST]
    assert _train(*argv, "--rating-range", "0.5", "5", "-q") == ExitCode.OK
    return path


def _train(*args: str, catalogue: bool = True) -> int:
    """``userdp recommend train ARGS``, with the fixture's public catalogue (``--items``) unless
    ``catalogue=False`` (then private methods choose their items privately)."""
    extra = ["--items", str(CATALOGUE[-1])] if catalogue and CATALOGUE else []
    return main(["recommend", "train", *args, *extra])


def _one_error_line(err: str, prog: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{prog}: error: "), err
    assert "Traceback" not in err
    return lines[0]


def _rows(out: str) -> list[list[str]]:
    """The rows of the evaluate table (header checked and dropped)."""
    lines = out.splitlines()
    assert lines[0].split()[:5] == ["method", "epsilon", "delta", "metric", "value"]
    return [line.split() for line in lines[1:]]


# -- train --------------------------------------------------------------------------------------
def test_train_writes_a_model_with_the_declared_budget(data, tmp_path, capsys):
    out = tmp_path / "m.npz"
    argv = [str(data["csv"]), "-o", str(out), *EPS_DELTA, *FAST, "--rating-range", "0.5", "5"]
    assert _train(*argv) == ExitCode.OK
    stdout, err = capsys.readouterr()
    assert stdout == ""
    model = RecommenderModel.load(out)
    assert model.method == "adadpals"
    assert model.budget.epsilon == pytest.approx(1.0, rel=1e-3)
    assert model.budget.epsilon <= 1.0 + 1e-9
    assert model.budget.delta == pytest.approx(1e-5)
    assert model.item_factors.shape == (N_CATALOGUE, 4)  # the public catalogue's items
    assert model.rating_range == (0.5, 5.0)
    assert model.item_source == "public"
    header, row = err.splitlines()[1:3]
    assert header.split() == ["method", "epsilon", "delta", "items", "trained", "dim", "steps"]
    assert row.split() == ["adadpals", "1", "1e-05", str(N_CATALOGUE), "(public)", "61", "4", "2"]
    # By default only the release: no exact input counts or timings (logs keep stderr).
    assert "not private" not in err and "61 users" not in err and " s (" not in err
    assert not list(tmp_path.glob(".*tmp*"))  # the temporary file was renamed


def test_train_echoes_the_budget_given_exactly(data, tmp_path, capsys):
    """The table showed the model's budget to 6 digits (0.123456789 as 0.123457)."""
    argv = [str(data["csv"]), "-o", str(tmp_path / "m.npz"), *FAST, "--rating-range", "0.5", "5"]
    assert _train(*argv, "--epsilon", "0.123456789", "--delta", "1e-5") == ExitCode.OK
    row = capsys.readouterr().err.splitlines()[2]
    assert row.split()[:3] == ["adadpals", "0.123456789", "1e-05"]


def test_train_prints_exact_counts_and_timings_only_with_verbose(data, tmp_path, capsys):
    argv = [str(data["csv"]), "-o", str(tmp_path / "m.npz"), *EPS_DELTA, *FAST]
    assert _train(*argv, "--rating-range", "0.5", "5", "-v") == ExitCode.OK
    err = capsys.readouterr().err
    (line,) = [ln for ln in err.splitlines() if "users," in ln]
    assert "not private, for the operator only" in line
    assert re.search(r"\d+ users, \d+ ratings, \d+ outside the item set; \d+\.\d\d s", line)


def test_train_json_prints_the_release_only(data, tmp_path, capsys):
    out = tmp_path / "m.npz"
    argv = [str(data["csv"]), "-o", str(out), *EPS_DELTA, *FAST, "--rating-range", "0.5", "5"]
    assert _train(*argv, "--json", "-q") == ExitCode.OK
    stdout, err = capsys.readouterr()
    release = json.loads(stdout)
    model = RecommenderModel.load(out)
    assert release["output"] == str(out) and release["method"] == "adadpals"
    assert release["epsilon"] == pytest.approx(model.budget.epsilon) and release["unit"] == "user"
    assert release["items"] == N_CATALOGUE and release["item_source"] == "public"
    assert release["center"] == pytest.approx(model.center)
    # released and declared values only: nothing counted on the input
    assert not {"users", "ratings", "seconds"} & set(release) and err == ""


def test_train_options_reach_the_model(data, tmp_path, capsys):
    out = tmp_path / "m.npz"
    argv = [str(data["csv"]), "-o", str(out), *EPS_DELTA, *FAST, "--rating-range", "1", "5"]
    argv += ["--method", "dpsgd-tail", "--center", "midpoint", "--sample-size", "7"]
    argv += ["--clip-norm", "0.5", "--count-fraction", "0.2", "--mu", "0.5"]
    assert _train(*argv) == ExitCode.OK
    err = capsys.readouterr().err
    assert "--mu only applies to adadpals and adadpsgd; ignored." in err
    model = RecommenderModel.load(out)
    p = model.params
    assert (model.method, p["center"], p["sample_size"]) == ("dpsgd-tail", "midpoint", 7)
    assert (p["clip_norm"], p["count_fraction"]) == (0.5, 0.2)
    assert p["mu"] == MatrixFactorization().mu  # the inapplicable --mu was not passed on
    assert model.center == 3.0


@pytest.mark.parametrize(("flag", "saved"), [([], True), (["--biases", "off"], False)])
def test_biases_flag_reaches_the_model(flag, saved, data, tmp_path, capsys):
    """Item biases are on by default for explicit ratings; --biases off trains without them."""
    out = tmp_path / "m.npz"
    argv = [str(data["csv"]), "-o", str(out), *EPS_DELTA, *FAST, "--rating-range", "1", "5"]
    assert _train(*argv, *flag) == ExitCode.OK
    model = RecommenderModel.load(out)
    assert (model.item_biases is not None) is saved
    assert model.params["biases"] == ("auto" if saved else False)


@pytest.mark.parametrize(
    ("flags", "prior", "clip"),
    [
        ([], True, "auto"),
        (["--no-bias-prior", "--target-clip", "none"], False, None),
        (["--bias-prior", "--target-clip", "1.2"], True, 1.2),
    ],
)
def test_prior_and_target_clip_flags_reach_the_model(flags, prior, clip, data, tmp_path, capsys):
    """--bias-prior/--no-bias-prior and --target-clip X|auto|none set the SSP methods' keywords
    (the library's defaults when absent)."""
    out = tmp_path / "m.npz"
    argv = [str(data["csv"]), "-o", str(out), *EPS_DELTA, *FAST, "--rating-range", "1", "5"]
    assert _train(*argv, *flags) == ExitCode.OK
    assert "only applies" not in capsys.readouterr().err
    p = RecommenderModel.load(out).params
    assert (p["bias_prior"], p["target_clip"]) == (prior, clip)


def test_prior_flags_are_ignored_with_a_warning_by_the_dpsgd_methods(data, tmp_path, capsys):
    out = tmp_path / "m.npz"
    argv = [str(data["csv"]), "-o", str(out), *EPS_DELTA, *FAST, "--rating-range", "1", "5"]
    argv += ["--method", "adadpsgd", "--no-bias-prior", "--target-clip", "1", "--implicit"]
    assert _train(*argv) == ExitCode.OK
    err = capsys.readouterr().err
    assert "--bias-prior only applies to the dpals methods; ignored." in err
    assert "--target-clip only applies to the dpals methods; ignored." in err
    assert "--implicit only applies to the am-* methods; ignored." in err
    p = RecommenderModel.load(out).params
    assert (p["bias_prior"], p["target_clip"]) == (True, "auto")


@pytest.mark.parametrize("layout", ["ml", "zip"])
def test_train_on_movielens_uses_the_version_scale(layout, data, tmp_path, capsys):
    out = tmp_path / "m.npz"
    assert _train(str(data[layout]), "-o", str(out), *EPS_DELTA, *FAST, "-q") == ExitCode.OK
    assert capsys.readouterr() == ("", "")
    model = RecommenderModel.load(out)
    assert model.rating_range == (1.0, 5.0)  # ml-100k: 1..5 stars, without --rating-range
    assert model.item_labels.type == pa.int64()  # the catalogue's ids read as the data's type
    assert sorted(model.item_labels.to_pylist()) == list(range(N_CATALOGUE))


def test_als_is_not_private(data, tmp_path, capsys):
    out = tmp_path / "als.npz"
    assert _train(str(data["csv"]), "-o", str(out), "--method", "als", *FAST) == ExitCode.OK
    assert "non-private" in capsys.readouterr().err
    assert RecommenderModel.load(out).budget is None


def test_refuses_to_overwrite_without_flag(data, tmp_path, capsys):
    out = tmp_path / "m.npz"
    out.write_bytes(b"keep me")
    argv = [str(data["csv"]), "-o", str(out), "--method", "als", *FAST]
    assert _train(*argv) == ExitCode.USAGE
    assert "--overwrite" in _one_error_line(capsys.readouterr().err, "userdp recommend train")
    assert out.read_bytes() == b"keep me"
    assert _train(*argv, "--overwrite") == ExitCode.OK
    assert MatrixFactorization.load(out).method == "als"


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["{csv}", "--method", "als", "--epsilon", "1"], "als is not private; drop --epsilon"),
        (["{csv}", "--method", "als", *EPS_DELTA], "drop --epsilon and --delta"),
        (["{csv}", *EPS_DELTA], "--rating-range LOW HIGH"),
        (["{csv}", "--epsilon", "1", "--rating-range", "1", "5"], "pass --delta"),
        # Values are checked once, by the library; the command line names its flag.
        (["{csv}", "--epsilon", "0", "--delta", "1e-5", "--rating-range", "1", "5"], "--epsilon "),
        (["{csv}", "--epsilon", "1", "--delta", "1", "--rating-range", "1", "5"], "--delta must"),
        (["{csv}", *EPS_DELTA, "--rating-range", "5", "1"], "low < high"),
        (["{csv}", *EPS_DELTA, "--center", "median"], "--center must be"),
        (["{csv}", *EPS_DELTA, "--method", "nope"], "invalid choice"),
        (["{csv}", *EPS_DELTA, "--dim", "0"], "--dim must be"),
        (["{csv}", *EPS_DELTA, "--biases", "maybe"], "--biases must be"),
        (["{csv}", *EPS_DELTA, "--target-clip", "0"], "--target-clip must be"),
        (["{csv}", *EPS_DELTA, "--target-clip", "wide"], "--target-clip must be"),
        (["{csv}", "--method", "als", "--rating-column", "stars"], "'stars' not found"),
        (["{dir}/missing.csv", "--method", "als"], "missing.csv"),
        (["{dir}/other.zip", "--method", "als"], "not a MovieLens zip"),
    ],
)
def test_bad_train_input_is_one_error_line_and_exit_2(args, fragment, data, tmp_path, capsys):
    with zipfile.ZipFile(tmp_path / "other.zip", "w") as zf:
        zf.writestr("stuff/ratings.csv", "user,item,rating\n")
    argv = [a.format(csv=data["csv"], dir=tmp_path) for a in args]
    assert _train(*argv, "-o", str(tmp_path / "m.npz")) == ExitCode.USAGE
    out, err = capsys.readouterr()
    assert out == ""
    assert fragment in _one_error_line(err, "userdp recommend train")
    assert not (tmp_path / "m.npz").exists()


def test_debug_shows_the_exception(data, tmp_path):
    with pytest.raises(DataError, match="'stars' not found"):
        _train(
            str(data["csv"]),
            "-o",
            str(tmp_path / "m.npz"),
            "--method",
            "als",
            "--rating-column",
            "stars",
            "--debug",
        )


def test_progress_only_on_a_terminal(data, tmp_path, capsys, monkeypatch):
    argv = [str(data["csv"]), "-o", str(tmp_path / "a.npz"), "--method", "als", *FAST]
    assert _train(*argv) == ExitCode.OK
    assert "als d=4" not in capsys.readouterr().err  # stderr is not a TTY: no bar
    monkeypatch.setattr(recommend_cli._options, "interactive", lambda quiet: not quiet)
    assert _train(*argv, "--overwrite") == ExitCode.OK
    assert "als d=4" in capsys.readouterr().err
    assert _train(*argv, "--overwrite", "--quiet") == ExitCode.OK
    assert capsys.readouterr().err == ""


# -- evaluate -----------------------------------------------------------------------------------
def _evaluate(*args: str) -> int:
    return main(["recommend", "evaluate", *args])


def test_evaluate_a_saved_model_prints_rmse(data, model_path, capsys):
    saved = ["--model", str(model_path), "--history", str(data["history"])]
    assert _evaluate(*saved, "--test", str(data["test"]), "--metric", "rmse") == ExitCode.OK
    out, err = capsys.readouterr()
    rows = _rows(out)
    assert [r[:4] for r in rows] == [
        ["adadpals", "1", "1e-05", "rmse"],
        ["global-mean", "non-private", "-", "rmse"],
    ]
    assert all(0 < float(r[4]) < 5 for r in rows)
    assert all(len(r) == 11 for r in rows)  # 5 buckets and seconds
    assert f"scored {model_path}" in err
    assert "test ratings" not in err and " s." not in err  # exact counts, timing: -v only


def test_evaluate_prints_exact_counts_only_with_verbose(data, model_path, capsys):
    saved = ["--model", str(model_path), "--history", str(data["history"])]
    assert _evaluate(*saved, "--test", str(data["test"]), "--metric", "rmse", "-v") == 0
    (line,) = [ln for ln in capsys.readouterr().err.splitlines() if "test ratings" in ln]
    assert "not private" in line and "400 test ratings" in line


def test_evaluate_a_saved_model_with_both_metrics(data, model_path, capsys):
    saved = ["--model", str(model_path), "--history", str(data["history"])]
    assert _evaluate(*saved, "--test", str(data["test"]), "--k", "5") == ExitCode.OK
    rows = _rows(capsys.readouterr().out)
    assert [(r[0], r[3]) for r in rows] == [
        ("adadpals", "rmse"),
        ("adadpals", "recall@5"),
        ("global-mean", "rmse"),
        ("popularity", "recall@5"),
    ]
    assert all(0 <= float(r[4]) <= 1 for r in rows if r[3] == "recall@5")


def test_evaluate_protocol_ml10m_has_one_row_per_method_and_epsilon(data, tmp_path, capsys):
    argv = [str(data["ml"]), "--protocol", "ml10m", "--method", "adadpals,dpals-uniform"]
    argv += ["--method", "als", "--epsilon", "1", "--epsilon", "4", "--delta", "1e-5", *FAST]
    assert _evaluate(*argv) == ExitCode.OK
    out, err = capsys.readouterr()
    rows = _rows(out)
    assert [r[:4] for r in rows] == [
        ["adadpals", "1", "1e-05", "rmse"],
        ["adadpals", "4", "1e-05", "rmse"],
        ["dpals-uniform", "1", "1e-05", "rmse"],
        ["dpals-uniform", "4", "1e-05", "rmse"],
        ["als", "non-private", "-", "rmse"],
        ["global-mean", "non-private", "-", "rmse"],
    ]
    assert "5 runs on the ml10m split" in err
    # The same runs to a JSON file; nothing on stdout.
    results = tmp_path / "results.json"
    assert _evaluate(*argv, "--output", str(results)) == ExitCode.OK
    assert capsys.readouterr().out == ""
    records = json.loads(results.read_text())
    assert [(r["method"], r["epsilon"]) for r in records] == [
        (r[0], None if r[1] == "non-private" else float(r[1])) for r in rows
    ]
    assert records[-1]["private"] is False and records[0]["private"] is True
    assert all(math.isfinite(r["value"]) for r in records)
    assert set(records[0]) >= {f"bucket{j}" for j in range(5)}


def test_evaluate_protocol_ml20m_reports_recall(data, capsys):
    argv = [str(data["zip"]), "--protocol", "ml20m", "--method", "als,adadpals", "--k", "10"]
    assert _evaluate(*argv, "--epsilon", "2", "--delta", "1e-5", *FAST) == ExitCode.OK
    rows = _rows(capsys.readouterr().out)
    assert [r[:4] for r in rows] == [
        ["als", "non-private", "-", "recall@10"],
        ["adadpals", "2", "1e-05", "recall@10"],
        ["popularity", "non-private", "-", "recall@10"],
    ]
    assert all(0 <= float(r[4]) <= 1 for r in rows)


def test_evaluate_progress_bar_over_runs_only_on_a_terminal(data, capsys, monkeypatch):
    argv = [str(data["ml"]), "--protocol", "ml10m", "--method", "als,dpals-tail", *FAST]
    argv += ["--epsilon", "1,2", "--delta", "1e-5", "-v"]
    assert _evaluate(*argv) == ExitCode.OK
    err = capsys.readouterr().err
    assert "stages" not in err
    assert "userdp recommend evaluate: info: dpals-tail eps=2 ..." in err.splitlines()
    monkeypatch.setattr(recommend_cli._options, "interactive", lambda quiet: not quiet)
    assert _evaluate(*argv) == ExitCode.OK
    out, err = capsys.readouterr()
    assert "3 stages" in err and "stages" not in out
    assert len(_rows(out)) == 4


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ([], "Give either INPUT with --protocol"),
        (["{ml}"], "Give either INPUT with --protocol"),
        (["--model", "{model}", "--history", "{history}"], "--model needs --test"),
        (["--model", "{model}", "--protocol", "ml10m"], "--protocol train new models"),
        (["{ml}", "--protocol", "ml10m", "--history", "{history}"], "only apply with --model"),
        (["{ml}", "--protocol", "ml20m", "--method", "als", "--metric", "rmse"], "no RMSE"),
        (["{ml}", "--protocol", "ml10m", "--method", "adadpals,nope"], "invalid choice: 'nope'"),
        (["{ml}", "--protocol", "ml10m", "--epsilon", "1,-2"], "--epsilon"),
        (["{ml}", "--protocol", "ml10m", "--epsilon", "1"], "pass --delta"),
        (["{ml}", "--protocol", "ml10m", "--method", "als", "-o", "{dir}/r.txt"], ".json or .csv"),
        (
            ["--model", "{dir}/none.npz", "--history", "{history}", "--test", "{history}"],
            "none.npz",
        ),
    ],
)
def test_bad_evaluate_input_is_one_error_line(args, fragment, data, model_path, capsys):
    argv = [
        a.format(ml=data["ml"], model=model_path, history=data["history"], dir=data["dir"])
        for a in args
    ]
    assert _evaluate(*argv) == ExitCode.USAGE
    out, err = capsys.readouterr()
    assert out == ""
    assert fragment in _one_error_line(err, "userdp recommend evaluate")


# -- neighbors ----------------------------------------------------------------------------------
def _neighbors(*args: str) -> int:
    return main(["recommend", "neighbors", *args])


def test_neighbors_prints_n_lines_per_item(model_path, capsys):
    assert _neighbors("--model", str(model_path), "3", "17", "--n", "4") == ExitCode.OK
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split("\t") == ["item", "rank", "neighbor", "score"]
    rows = [line.split("\t") for line in lines[1:]]
    assert [(r[0], r[1]) for r in rows] == [(i, str(k)) for i in ("3", "17") for k in range(1, 5)]
    assert all(r[2] != r[0] for r in rows)  # an item is not its own neighbour
    scores = [float(r[3]) for r in rows[:4]]
    assert scores == sorted(scores, reverse=True) and all(-1 <= s <= 1 for s in scores)


@pytest.mark.parametrize("movies", ["ml", "zip", "u.item"])
def test_neighbors_with_movielens_titles(movies, data, tmp_path, capsys):
    out = tmp_path / "m.npz"
    assert _train(str(data["ml"]), "-o", str(out), "--method", "als", *FAST, "-q") == 0
    source = data["ml"] / "u.item" if movies == "u.item" else data[movies]
    argv = ["--model", str(out), "7", "--n", "3", "--metric", "dot", "--movies", str(source)]
    assert _neighbors(*argv) == ExitCode.OK
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split("\t")[-1] == "title"
    assert len(lines) == 4
    for line in lines[1:]:
        item, _, neighbour, _, title = line.split("\t")
        assert item == "7" and title == f"Movie {neighbour} (1995)"


@pytest.mark.parametrize(
    ("ids", "fragment"), [(["3", "999"], "'999'"), (["3", "x"], "'x'"), (["3.5"], "'3.5'")]
)
def test_neighbors_of_an_unknown_item_is_an_error(ids, fragment, model_path, capsys):
    assert _neighbors("--model", str(model_path), *ids) == ExitCode.USAGE
    out, err = capsys.readouterr()
    assert out == ""
    line = _one_error_line(err, "userdp recommend neighbors")
    assert "Unknown item id" in line and fragment in line


def test_neighbors_of_string_ids(data, tmp_path, capsys):
    out = tmp_path / "m.npz"  # CSV ids are read as strings
    assert _train(str(data["csv"]), "-o", str(out), "--method", "als", *FAST, "-q") == 0
    assert _neighbors("--model", str(out), "5", "--n", "2") == ExitCode.OK
    assert len(capsys.readouterr().out.splitlines()) == 3


# -- help and the real command ------------------------------------------------------------------
@pytest.mark.parametrize("command", [[], ["train"], ["evaluate"], ["neighbors"]])
def test_help_exits_0_and_states_defaults(command, capsys):
    assert main(["recommend", *command, "--help"]) == ExitCode.OK
    out = capsys.readouterr().out
    assert out.startswith(f"usage: userdp recommend {' '.join(command)}".rstrip())
    if command == ["train"]:
        assert "Default: adadpals." in out and "Default: 0.25." in out


def test_recommend_without_a_command_is_a_usage_error(capsys):
    assert main(["recommend"]) == ExitCode.USAGE
    assert "COMMAND" in _one_error_line(capsys.readouterr().err, "userdp recommend")


def test_python_dash_m_userdp_recommend_help():
    cmd = [sys.executable, "-m", "userdp", "recommend", "--help"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    for name in ("train", "evaluate", "neighbors"):
        assert name in done.stdout
    assert done.stderr == ""


# -- the item set --------------------------------------------------------------------
def test_train_chooses_the_item_set_privately_by_default(tmp_path, capsys):
    # D' = synthetic ratings + one user holding a title nobody else rated.
    r = lowrank_ratings(n_users=2000, n_items=20, n_ratings=16_000, seed=4)
    schema = pa.schema([("user", pa.string()), ("item", pa.string()), ("rating", pa.float64())])
    rare = pa.table({"user": ["carol-secret-user"], "item": ["rare-title-42"], "rating": [5.0]})
    table = pa.concat_tables([r.to_arrow().cast(schema), rare.cast(schema)])
    pacsv.write_csv(table, tmp_path / "r.csv")
    out = tmp_path / "m.npz"
    argv = [str(tmp_path / "r.csv"), "-o", str(out), "--epsilon", "4", "--delta", "1e-5"]
    argv += ["--rating-range", "0.5", "5", "--dim", "2", "--steps", "1", "--seed", "0"]
    assert _train(*argv, "--selection-fraction", "0.2", catalogue=False) == ExitCode.OK
    err = capsys.readouterr().err
    model = RecommenderModel.load(out)
    assert model.item_source == "private"
    assert 0 < model.n_items <= 20
    assert "rare-title-42" not in model.item_labels.to_pylist()
    assert model.budget.epsilon == pytest.approx(4.0, rel=1e-3)  # selection + training
    assert model.budget.epsilon <= 4.0 * (1 + 1e-9)
    raw = out.read_bytes()
    for secret in ("rare-title-42", "carol-secret-user"):
        assert secret.encode() not in raw and secret not in err
    assert f"{model.n_items} (private)" in err


def test_train_with_a_public_catalogue_drops_other_items(data, tmp_path, capsys):
    (tmp_path / "few.txt").write_text("3\n17\n")
    out = tmp_path / "m.npz"
    argv = [str(data["parquet"]), "-o", str(out), *EPS_DELTA, *FAST, "--rating-range", "0.5", "5"]
    few = ["--items", str(tmp_path / "few.txt")]
    assert _train(*argv, *few, "-v", catalogue=False) == ExitCode.OK
    model = RecommenderModel.load(out)
    assert model.item_labels.to_pylist() == [3, 17]  # read as the data's integer ids
    assert model.item_source == "public" and model.budget.epsilon == pytest.approx(1.0, rel=1e-3)
    assert "outside the item set" in capsys.readouterr().err  # an exact count: -v only


def test_a_catalogue_that_names_no_rated_item_is_one_error_line(data, tmp_path, capsys):
    (tmp_path / "other.txt").write_text("x1\nx2\n")
    argv = [str(data["csv"]), "-o", str(tmp_path / "m.npz"), *EPS_DELTA, *FAST]
    argv += ["--rating-range", "0.5", "5", "--items", str(tmp_path / "other.txt")]
    assert _train(*argv, catalogue=False) == ExitCode.USAGE
    line = _one_error_line(capsys.readouterr().err, "userdp recommend train")
    assert "no rating names an item of the catalogue" in line
    assert not (tmp_path / "m.npz").exists()
