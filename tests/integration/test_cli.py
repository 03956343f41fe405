"""The ``userdp`` command line, through :func:`userdp.cli.main` and one real subprocess."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import userdp
from userdp.cli import ExitCode, main
from userdp.cli import select as select_cli
from userdp.exceptions import DataError

N_USERS = 3000
EPS_DELTA = ["--epsilon", "1", "--delta", "1e-5"]


def _rows() -> list[tuple[str, str]]:
    """Every user holds "the", "a" and a rare item of its own: only "the" and "a" pass."""
    return [(f"u{u}", w) for u in range(N_USERS) for w in ("the", "a", f"rare{u}")]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("data")
    rows = _rows()
    with open(d / "pairs.csv", "w") as f:
        f.write("user,item\n")
        f.writelines(f"{u},{i}\n" for u, i in rows)
    with open(d / "pairs.tsv", "w") as f:
        f.write("uid\tword\n")
        f.writelines(f"{u}\t{i}\n" for u, i in rows)
    with open(d / "noheader.csv", "w") as f:
        f.writelines(f"{u},{i}\n" for u, i in rows)
    with open(d / "pairs.jsonl", "w") as f:
        f.writelines(json.dumps({"user": u, "item": i}) + "\n" for u, i in rows)
    # Integer items: 7 and 8 are common, 1000 + u is rare.
    users = [u for u in range(N_USERS) for _ in range(3)]
    items = [w for u in range(N_USERS) for w in (7, 8, 1000 + u)]
    pq.write_table(pa.table({"user": users, "item": items}), d / "ints.parquet")
    return d


@pytest.fixture
def csv_path(data_dir: Path) -> str:
    return str(data_dir / "pairs.csv")


def _select(*args: str) -> int:
    return main(["select", *args])


def _one_error_line(err: str, prog: str = "userdp select") -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{prog}: error: "), err
    assert "Traceback" not in err
    return lines[0]


# -- selection ----------------------------------------------------------------------------------
def test_select_to_stdout_with_summary_on_stderr(csv_path, capsys):
    assert _select(csv_path, *EPS_DELTA, "--seed", "1") == ExitCode.OK
    out, err = capsys.readouterr()
    assert out == "a\nthe\n"
    assert "selected 2 items with mad2r" in err
    assert "epsilon=1, delta=1e-05" in err
    # Only what was released by default: no exact input counts, no timing (logs keep stderr).
    assert f"{N_USERS}" not in err and "users" not in err and "pairs" not in err
    assert not re.search(r"\d s\b", err) and "took" not in err


def test_exact_counts_only_with_verbose_and_labelled_non_private(csv_path, capsys):
    assert _select(csv_path, *EPS_DELTA, "--seed", "1", "-v") == ExitCode.OK
    out, err = capsys.readouterr()
    assert out == "a\nthe\n"
    summary = next(ln for ln in err.splitlines() if "selected 2 items" in ln)
    assert "users" not in summary and f"{N_USERS}" not in summary
    diag = next(ln for ln in err.splitlines() if "diagnostics" in ln)
    assert "NOT differentially private" in diag
    assert f"{N_USERS} users" in diag
    assert f"{3 * N_USERS} distinct (user, item) pairs" in diag
    assert re.search(r"Wall time \d+\.\d\d s\.$", diag)


@pytest.mark.parametrize("algorithm", list(userdp.partition.api.ALGORITHMS))
def test_every_algorithm_selects_the_common_items(algorithm, csv_path, capsys):
    code = _select(csv_path, *EPS_DELTA, "--algorithm", algorithm, "--seed", "2")
    out, err = capsys.readouterr()
    assert code == ExitCode.OK, err
    assert out.splitlines() == ["a", "the"]
    assert f"with {algorithm} at" in err


def test_options_reach_the_algorithm(csv_path, capsys, monkeypatch):
    calls: list[dict] = []
    real = select_cli.select_partitions

    def spy(data, **kwargs):
        calls.append(kwargs)
        return real(data, **kwargs)

    monkeypatch.setattr(select_cli, "select_partitions", spy)
    common = [csv_path, *EPS_DELTA, "--max-items-per-user", "10", "--no-recap"]
    assert _select(*common, "--algorithm", "mad2r") == 0
    assert _select(*common, "--algorithm", "dp-sips") == 0
    assert _select(*common, "--algorithm", "basic") == 0
    assert _select(*common, "--algorithm", "greedy-update") == 0
    mad2r, dp_sips, basic, greedy = calls
    assert mad2r["recap"] is False and mad2r["max_items_per_user"] == 10
    assert "d_max" not in mad2r  # the library defaults d_max to min(50, cap)
    assert dp_sips["recap"] is False
    assert "recap" not in basic and basic["max_items_per_user"] == 10
    assert greedy["max_items_per_user"] == 10 and "recap" not in greedy
    err = capsys.readouterr().err
    assert "--no-recap does not apply to basic; ignored" in err


def test_no_pooled_reaches_mad2r_as_the_former_two_round_default(csv_path, capsys, monkeypatch):
    calls: list[tuple[dict, object]] = []
    real = select_cli.select_partitions

    def spy(data, **kwargs):
        result = real(data, **kwargs)
        calls.append((kwargs, result))
        return result

    monkeypatch.setattr(select_cli, "select_partitions", spy)
    assert _select(csv_path, *EPS_DELTA, "--seed", "1") == 0
    assert _select(csv_path, *EPS_DELTA, "--seed", "1", "--no-pooled") == 0
    (pooled_kw, pooled), (plain_kw, plain) = calls
    assert "pooled" not in pooled_kw and plain_kw["pooled"] is False
    assert pooled.parameters["pooled"] and len(pooled.parameters["rounds"]) == 4
    assert plain.parameters["pooled"] is False and len(plain.parameters["rounds"]) == 2
    assert plain.parameters["recap"] is True


def test_composition_rounds_and_split_reach_the_algorithm(csv_path, capsys, monkeypatch):
    calls: list[dict] = []
    real = select_cli.select_partitions

    def spy(data, **kwargs):
        calls.append(kwargs)
        return real(data, **kwargs)

    monkeypatch.setattr(select_cli, "select_partitions", spy)
    common = [csv_path, *EPS_DELTA, "--seed", "1"]
    assert _select(*common, "--composition", "basic", "--rounds", "3") == 0
    assert _select(*common, "--algorithm", "dp-sips", "--split", "0.2,0.8") == 0
    assert _select(*common, "--algorithm", "mad", "--rounds", "3") == 0
    mad2r, dp_sips, mad = calls
    assert mad2r["composition"] == "basic" and mad2r["rounds"] == 3
    assert dp_sips["fractions"] == [0.2, 0.8] and "composition" not in dp_sips
    assert "rounds" not in mad
    assert "--rounds does not apply to mad" in capsys.readouterr().err


def test_max_items_per_user_auto(csv_path, capsys):
    assert _select(csv_path, *EPS_DELTA, "--seed", "1", "--max-items-per-user", "auto") == 0
    out = capsys.readouterr().out
    assert out == "a\nthe\n"
    assert _select(csv_path, *EPS_DELTA, "--max-items-per-user", "many") == ExitCode.USAGE


def test_same_seed_same_output_on_generated_data(tmp_path, capsys):
    pairs = str(tmp_path / "pairs.csv")
    assert main(["generate", "zipf", pairs, "--users", "5000", "--seed", "3"]) == 0
    capsys.readouterr()
    outs = []
    for _ in range(2):
        assert _select(pairs, *EPS_DELTA, "--seed", "11") == 0
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1]
    items = outs[0].splitlines()
    assert len(items) >= 5
    assert items == sorted(items)  # sorted, so the order reveals nothing about the input
    assert "i0" in items  # the most popular zipf item


@pytest.mark.parametrize(
    ("name", "extra"),
    [
        ("pairs.tsv", ["--user-column", "uid", "--item-column", "word"]),
        ("pairs.jsonl", []),
        ("noheader.csv", ["--no-header"]),
    ],
)
def test_input_formats_and_columns(data_dir, name, extra, capsys):
    assert _select(str(data_dir / name), *EPS_DELTA, "--seed", "4", *extra) == 0
    assert capsys.readouterr().out == "a\nthe\n"


def test_format_option_overrides_the_file_name(data_dir, tmp_path, capsys):
    odd = tmp_path / "pairs.data"
    odd.write_bytes((data_dir / "pairs.csv").read_bytes())
    assert _select(str(odd), *EPS_DELTA, "--format", "csv", "--seed", "4") == 0
    assert capsys.readouterr().out == "a\nthe\n"


# -- output files -------------------------------------------------------------------------------
def test_output_txt(csv_path, tmp_path, capsys):
    out = tmp_path / "items.txt"
    assert _select(csv_path, *EPS_DELTA, "--output", str(out)) == 0
    stdout, err = capsys.readouterr()
    assert stdout == ""
    assert out.read_text() == "a\nthe\n"
    assert "selected 2 items" in err
    assert sorted(os.listdir(tmp_path)) == ["items.txt"]  # no temporary file left


def test_output_json(csv_path, tmp_path, capsys):
    out = tmp_path / "items.json"
    assert _select(csv_path, *EPS_DELTA, "-o", str(out)) == 0
    assert json.loads(out.read_text()) == ["a", "the"]
    assert capsys.readouterr().out == ""


def test_output_parquet_keeps_the_item_type(data_dir, tmp_path, capsys):
    out = tmp_path / "items.parquet"
    assert _select(str(data_dir / "ints.parquet"), *EPS_DELTA, "-o", str(out)) == 0
    table = pq.read_table(out)
    assert table.column_names == ["item"]
    assert pa.types.is_integer(table.schema.field("item").type)
    assert table.column("item").to_pylist() == [7, 8]
    assert capsys.readouterr().out == ""


def test_output_parquet_of_strings(csv_path, tmp_path, capsys):
    out = tmp_path / "items.parquet"
    assert _select(csv_path, *EPS_DELTA, "-o", str(out)) == 0
    table = pq.read_table(out)
    assert table.schema.field("item").type == pa.string()
    assert table.column("item").to_pylist() == ["a", "the"]


def test_refuses_to_overwrite_without_flag(csv_path, tmp_path, capsys):
    out = tmp_path / "items.txt"
    out.write_text("keep me\n")
    assert _select(csv_path, *EPS_DELTA, "-o", str(out)) == ExitCode.USAGE
    stdout, err = capsys.readouterr()
    assert stdout == ""
    assert "--overwrite" in _one_error_line(err)
    assert out.read_text() == "keep me\n"
    assert _select(csv_path, *EPS_DELTA, "-o", str(out), "--overwrite") == 0
    assert out.read_text() == "a\nthe\n"
    assert sorted(os.listdir(tmp_path)) == ["items.txt"]


def test_quiet_prints_nothing_on_stderr(csv_path, capsys):
    assert _select(csv_path, *EPS_DELTA, "-q") == 0
    out, err = capsys.readouterr()
    assert out == "a\nthe\n"
    assert err == ""


def test_verbose_logs_stages_and_restores_logging(csv_path, capsys):
    logger = logging.getLogger("userdp")
    before = (list(logger.handlers), logger.level, logger.propagate)
    assert _select(csv_path, *EPS_DELTA, "-v") == 0
    err = capsys.readouterr().err
    assert "userdp select: info: read" in err
    assert "userdp select: info: select" in err
    assert (list(logger.handlers), logger.level, logger.propagate) == before


def test_library_warnings_become_one_log_line(csv_path, capsys):
    assert _select(csv_path, "--epsilon", "1", "--delta", "0.01") == 0
    err = capsys.readouterr().err
    warning_lines = [ln for ln in err.splitlines() if ln.startswith("userdp select: warning:")]
    # Python warnings become log lines (the library warns once per budget it builds, so the
    # requested and the spent budget may both warn).
    assert warning_lines
    assert "--delta 0.01 is large" in warning_lines[0]
    assert "Warning" not in err  # no "UserWarning:" / source line from warnings.showwarning


def test_progress_bar_only_on_a_terminal_for_large_inputs(csv_path, capsys, monkeypatch):
    assert _select(csv_path, *EPS_DELTA) == 0
    assert "stages" not in capsys.readouterr().err  # stderr is not a TTY: no bar
    monkeypatch.setattr(select_cli.Progress, "wanted", staticmethod(lambda quiet, size: True))
    assert _select(csv_path, *EPS_DELTA) == 0
    out, err = capsys.readouterr()
    assert out == "a\nthe\n"
    assert "read: 0 rows [" in err  # each bar as it starts: the rows read, mad2r's 4 rounds
    assert "0/4 [" in err and "round/s" in err


# -- errors -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["{dir}/missing.csv", *EPS_DELTA], "missing.csv"),
        (["{csv}", *EPS_DELTA, "--user-column", "uid"], "'uid' not found"),
        (["{csv}", *EPS_DELTA, "--item-column", "word"], "'word' not found"),
        (["{csv}", "--epsilon", "0", "--delta", "1e-5"], "--epsilon"),
        (["{csv}", "--epsilon", "-1", "--delta", "1e-5"], "--epsilon"),
        (["{csv}", "--epsilon", "nan", "--delta", "1e-5"], "--epsilon"),
        (["{csv}", "--epsilon", "abc", "--delta", "1e-5"], "--epsilon"),
        (["{csv}", "--epsilon", "1", "--delta", "0"], "--delta"),
        (["{csv}", "--epsilon", "1", "--delta", "1"], "--delta"),
        (["{csv}", "--epsilon", "1", "--delta", "-0.1"], "--delta"),
        (["{csv}", "--epsilon", "1"], "--delta"),
        (["{csv}", *EPS_DELTA, "--algorithm", "nope"], "invalid choice"),
        (["{csv}", *EPS_DELTA, "--max-items-per-user", "0"], "--max-items-per-user"),
        (["{csv}", *EPS_DELTA, "--max-items-per-user", "3"], "max_items_per_user >= 4"),
        (["{csv}", *EPS_DELTA, "--seed", "-1"], "--seed"),
        (["{csv}", *EPS_DELTA, "-o", "{dir}/no/such/dir/out.txt"], "does not exist"),
        (["{csv}", *EPS_DELTA, "-o", "{dir}"], "is a directory"),
        (["{dir}/pairs.xyz", *EPS_DELTA], "format"),
        (["{dir}", *EPS_DELTA, "--format", "csv"], "Cannot read"),
        (["{dir}/garbage.parquet", *EPS_DELTA], "Cannot read"),
        (["{csv}", *EPS_DELTA, "--frobnicate"], "unrecognized arguments"),
    ],
)
def test_bad_input_is_one_error_line_and_exit_2(args, fragment, csv_path, tmp_path, capsys):
    (tmp_path / "garbage.parquet").write_text("not parquet")
    (tmp_path / "pairs.xyz").write_text("user,item\n1,a\n")
    argv = [a.format(csv=csv_path, dir=tmp_path) for a in args]
    assert _select(*argv) == ExitCode.USAGE
    out, err = capsys.readouterr()
    assert out == ""
    assert fragment in _one_error_line(err)


def test_an_empty_input_is_selected_from_like_one_user_s(tmp_path, capsys):
    """A refusal that only the empty input gets would tell it apart from one user's input: a
    header-only file releases no item, exit 0, as a file of one user's pairs does."""
    empty, one = tmp_path / "empty.csv", tmp_path / "one.csv"
    empty.write_text("user,item\n")
    one.write_text("user,item\nu,a\nu,b\n")
    outputs = []
    for path in (empty, one):
        assert _select(str(path), *EPS_DELTA, "--seed", "1", "--json") == ExitCode.OK
        outputs.append(capsys.readouterr())
    assert outputs[0] == outputs[1]
    assert json.loads(outputs[0].out)["items"] == []


def test_debug_shows_the_exception(tmp_path):
    with pytest.raises(DataError, match=r"missing\.csv"):
        _select(str(tmp_path / "missing.csv"), *EPS_DELTA, "--debug")


def test_unexpected_error_is_exit_1(csv_path, capsys, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("kaboom\nsecond line")

    monkeypatch.setattr(select_cli, "select_partitions", boom)
    assert _select(csv_path, *EPS_DELTA) == ExitCode.FAILURE
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("userdp select: unexpected error: RuntimeError: kaboom second line")


def test_no_command_is_a_usage_error(capsys):
    assert main([]) == ExitCode.USAGE
    out, err = capsys.readouterr()
    assert out == ""
    _one_error_line(err, prog="userdp")


# -- version, help, generate --------------------------------------------------------------------
def test_version(capsys):
    assert main(["--version"]) == ExitCode.OK
    assert capsys.readouterr().out.strip() == f"userdp {userdp.__version__}"


def test_help_states_defaults(capsys):
    assert main(["select", "--help"]) == ExitCode.OK
    out = capsys.readouterr().out
    assert "Default: mad2r." in out
    assert "Default: 100, and 10 for greedy-" in out
    assert "--no-recap" in out


def test_generate_csv_then_select(tmp_path, capsys):
    pairs = tmp_path / "pairs.csv"
    assert main(["generate", "zipf", str(pairs), "--users", "2000"]) == 0
    err = capsys.readouterr().err
    assert "wrote" in err and "2000 users" in err
    lines = pairs.read_text().splitlines()
    assert lines[0] == "user,item"
    assert all(re.fullmatch(r"\d+,i\d+", ln) for ln in lines[1:])
    assert _select(str(pairs), *EPS_DELTA, "--seed", "0") == 0
    items = capsys.readouterr().out.splitlines()
    assert items and all(re.fullmatch(r"i\d+", i) for i in items)


def test_generate_is_reproducible_and_refuses_overwrite(tmp_path, capsys):
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    assert main(["generate", "section62", str(a), "--users", "500", "--seed", "1"]) == 0
    assert main(["generate", "section62", str(b), "--users", "500", "--seed", "1"]) == 0
    ta, tb = pq.read_table(a), pq.read_table(b)
    assert ta.equals(tb)
    assert ta.column_names == ["user", "item"] and ta.num_rows == 1500
    capsys.readouterr()
    assert main(["generate", "section62", str(a), "--users", "10"]) == ExitCode.USAGE
    _one_error_line(capsys.readouterr().err, prog="userdp generate")
    assert pq.read_table(a).num_rows == 1500
    assert main(["generate", "zipf", str(tmp_path / "x.txt"), "--users", "10"]) == 2
    assert ".csv" in _one_error_line(capsys.readouterr().err, prog="userdp generate")


def test_generate_ratings_writes_a_long_tailed_ratings_file(tmp_path, capsys):
    path = tmp_path / "r.parquet"
    assert main(["generate", "ratings", str(path), "--users", "3000", "--seed", "2"]) == 0
    assert "3000 users" in capsys.readouterr().err
    t = pq.read_table(path)
    assert t.column_names == ["user", "item", "rating"] and t.num_rows == 72 * 3000
    r = t.column("rating").to_numpy()
    assert r.min() >= 0.5 and r.max() <= 5.0 and np.all(r * 2 == np.round(r * 2))
    counts = np.sort(np.bincount(t.column("item").to_numpy()))[::-1]
    assert counts[: counts.size // 10].sum() > 3 * counts[counts.size // 2 :].sum()  # long tail
    csv = tmp_path / "r.csv"
    assert main(["generate", "ratings", str(csv), "--users", "100"]) == 0
    assert csv.read_text().splitlines()[0] == "user,item,rating"


# -- the real command ---------------------------------------------------------------------------
def test_python_dash_m_userdp(csv_path, tmp_path):
    cmd = [sys.executable, "-m", "userdp", "select", csv_path, *EPS_DELTA, "--seed", "1"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "a\nthe\n"
    assert "selected 2 items" in done.stderr

    bad = [sys.executable, "-m", "userdp", "select", str(tmp_path / "missing.csv"), *EPS_DELTA]
    done = subprocess.run(bad, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == ExitCode.USAGE
    assert done.stdout == ""
    assert done.stderr.startswith("userdp select: error: ")
    assert len(done.stderr.splitlines()) == 1
