"""Hostile inputs to the ``userdp`` command fail cleanly.

Every case here was reproduced before its fix: one line ``userdp CMD: error: ...`` on stderr,
exit 2, nothing written to the output, and no cell value of the data in the message.
"""

from __future__ import annotations

import gzip
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from userdp.cli import ExitCode, main
from userdp.data import read_table

N_USERS = 300
EPS_DELTA = ["--epsilon", "1", "--delta", "1e-5"]
SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("hostile")
    with open(d / "pairs.csv", "w") as f:
        f.write("user,item\n")
        f.writelines(f"u{u},{w}\n" for u in range(N_USERS) for w in ("the", "a"))
    with open(d / "values.csv", "w") as f:
        f.write("user,value\n")
        f.writelines(f"u{u},{0.3 + 0.001 * (u % 7)}\n" for u in range(N_USERS) for _ in (0, 1))
    with open(d / "regression.csv", "w") as f:
        f.write("user,label,a\n")
        f.writelines(f"u{u},{(u % 5) / 5},{u % 3}\n" for u in range(N_USERS) for _ in (0, 1))
    return {
        "dir": d,
        "pairs": d / "pairs.csv",
        "values": d / "values.csv",
        "regression": d / "regression.csv",
    }


def _one_error_line(err: str, prog: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{prog}: error: "), err
    return lines[0]


def _fails_cleanly(argv: list[str], capsys, prog: str) -> str:
    assert main(argv) == ExitCode.USAGE
    out, err = capsys.readouterr()
    assert out == ""
    return _one_error_line(err, prog)


# -- ids ----------------------------------------------------------------------------------------
def test_jsonl_ids_with_20_digits_stay_exact(tmp_path, capsys):
    """20-digit JSON ids were read as float64 (3,000 users collapsed to 2)."""
    p = tmp_path / "big.jsonl"
    base = 98765432109876543210
    with open(p, "w") as f:
        for u in range(N_USERS):
            for item in (12345678901234567890, 12345678901234567891):
                f.write(json.dumps({"user": base + u, "item": item}) + "\n")
    table = read_table(p)
    assert table.column("user").to_pylist()[:2] == [str(base), str(base)]
    assert main(["select", str(p), *EPS_DELTA, "--seed", "1", "-v"]) == 0
    out, err = capsys.readouterr()
    assert out == "12345678901234567890\n12345678901234567891\n"
    assert f"{N_USERS} users" in err


# -- epsilon ------------------------------------------------------------------------------------
@pytest.mark.parametrize("epsilon", ["1e20", "1e300"])
def test_huge_epsilon_finishes_without_nan(epsilon, files, capsys):
    """--epsilon 1e20 never finished; 1e300 said "function value is NaN"."""
    code = main(["select", str(files["pairs"]), "--epsilon", epsilon, "--delta", "1e-5"])
    _, err = capsys.readouterr()
    assert "NaN" not in err
    if code != 0:
        assert code == ExitCode.USAGE
        assert "epsilon" in _one_error_line(err.splitlines()[-1], "userdp select")


def _ratings(tmp_path: Path) -> Path:
    p = tmp_path / "ratings.csv"
    rows = (f"u{u},i{(u * 7 + k) % 40},{1 + (u + k) % 5}\n" for u in range(200) for k in range(8))
    p.write_text("user,item,rating\n" + "".join(rows))
    return p


@pytest.mark.parametrize("method", ["adadpals", "dpsgd-uniform"])
def test_recommend_train_names_the_epsilon_given_not_a_share(tmp_path, capsys, method):
    """``--epsilon 1e300`` said "got 1.0000000000000001e+298" (one release's share) after two
    warnings, one of them about the model's share of the budget."""
    argv = ["recommend", "train", str(_ratings(tmp_path)), "-o", str(tmp_path / "m.npz")]
    argv += [
        "--method",
        method,
        "--epsilon",
        "1e300",
        "--delta",
        "1e-5",
        "--rating-range",
        "1",
        "5",
    ]
    line = _fails_cleanly(argv, capsys, "userdp recommend train")
    assert "--epsilon must be at most 1e+100" in line and line.endswith("Got 1e+300 instead.")
    assert not (tmp_path / "m.npz").exists()


def test_an_unusual_budget_is_warned_about_once_as_given(tmp_path, capsys):
    """The command split ``--epsilon 1e50`` into shares and warned about each of them."""
    argv = ["recommend", "train", str(_ratings(tmp_path)), "-o", str(tmp_path / "m.npz")]
    argv += ["--method", "adadpals", "--epsilon", "1e50", "--delta", "0.01"]
    assert main([*argv, "--rating-range", "1", "5", "--seed", "0"]) == 0
    warned = [ln for ln in capsys.readouterr().err.splitlines() if ": warning: " in ln]
    prefix = "userdp recommend train: warning: "
    assert warned == [
        prefix + "--epsilon 1e+50 gives a very weak guarantee; values above ~10 are unusual.",
        prefix + "--delta 0.01 is large; delta is usually far below 1/(number of users).",
    ]


# -- output -------------------------------------------------------------------------------------
def test_output_onto_a_fifo_is_refused_even_with_overwrite(files, tmp_path, capsys):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    line = _fails_cleanly(
        ["select", str(files["pairs"]), *EPS_DELTA, "-o", str(fifo), "--overwrite"],
        capsys,
        "userdp select",
    )
    assert "not a regular file" in line
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_output_onto_a_symlink_is_refused_even_with_overwrite(files, tmp_path, capsys):
    target = tmp_path / "target.txt"
    target.write_text("keep me\n")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    line = _fails_cleanly(
        ["select", str(files["pairs"]), *EPS_DELTA, "-o", str(link), "--overwrite"],
        capsys,
        "userdp select",
    )
    assert "symbolic link" in line
    assert link.is_symlink() and target.read_text() == "keep me\n"


def test_output_onto_a_socket_is_refused(files, tmp_path, capsys):
    """Not a device node: on an unfixed build, running as root, that test replaced /dev/null."""
    import socket

    path = tmp_path / "sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
        line = _fails_cleanly(
            ["select", str(files["pairs"]), *EPS_DELTA, "-o", str(path), "--overwrite"],
            capsys,
            "userdp select",
        )
    assert "not a regular file" in line


@pytest.mark.parametrize("target", ["-", "/dev/stdout"])
def test_output_dash_and_dev_stdout_write_to_stdout(target, files, capsys):
    assert main(["select", str(files["pairs"]), *EPS_DELTA, "--seed", "1", "-o", target]) == 0
    assert capsys.readouterr().out == "a\nthe\n"
    argv = ["estimate", "mean", str(files["values"]), "--epsilon", "1", "--bounds", "0", "1"]
    assert main([*argv, "--seed", "1", "-o", target]) == 0
    assert json.loads(capsys.readouterr().out)["statistic"] == "mean"


def test_output_equal_to_the_input_is_refused(files, tmp_path, capsys):
    copy = tmp_path / "pairs.csv"
    copy.write_bytes(files["pairs"].read_bytes())
    line = _fails_cleanly(
        ["select", str(copy), *EPS_DELTA, "-o", str(copy), "--overwrite"], capsys, "userdp select"
    )
    assert "input" in line
    assert copy.read_bytes() == files["pairs"].read_bytes()


def test_failed_run_leaves_no_partial_output(files, tmp_path, capsys):
    out = tmp_path / "out.json"
    _fails_cleanly(
        [
            "estimate",
            "mean",
            str(files["values"]),
            "--epsilon",
            "1",
            "--bounds",
            "0",
            "1",
            "--value-column",
            "nope",
            "-o",
            str(out),
        ],
        capsys,
        "userdp estimate mean",
    )
    assert list(tmp_path.iterdir()) == []


# -- column roles -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "prog"),
    [
        (
            ["select", "{pairs}", *EPS_DELTA, "--user-column", "item", "--item-column", "item"],
            "userdp select",
        ),
        (
            [
                "recommend",
                "train",
                "{pairs}",
                "-o",
                "{dir}/m.npz",
                "--method",
                "als",
                "--user-column",
                "item",
                "--item-column",
                "item",
            ],
            "userdp recommend train",
        ),
        (
            [
                "estimate",
                "mean",
                "{values}",
                "--epsilon",
                "1",
                "--bounds",
                "0",
                "1",
                "--user-column",
                "value",
                "--value-column",
                "value",
            ],
            "userdp estimate mean",
        ),
        (
            [
                "estimate",
                "linreg",
                "{regression}",
                "--epsilon",
                "1",
                "--label-range",
                "0",
                "1",
                "--feature-columns",
                "a,label",
            ],
            "userdp estimate linreg",
        ),
        (
            [
                "estimate",
                "linreg",
                "{regression}",
                "--epsilon",
                "1",
                "--label-range",
                "0",
                "1",
                "--feature-columns",
                "a,a",
            ],
            "userdp estimate linreg",
        ),
    ],
)
def test_a_column_plays_one_role_only(argv, prog, files, capsys):
    argv = [a.format(**{k: str(v) for k, v in files.items()}) for a in argv]
    assert "one role" in _fails_cleanly(argv, capsys, prog)


# -- estimate: extreme numbers, negative bounds, thresholds ---------------------------------------
@pytest.mark.parametrize(
    "extra",
    [
        ["--epsilon", "1e-300", "--bounds", "0", "1"],
        ["--epsilon", "1", "--bounds", "0", "1e308"],
        ["--epsilon", "1", "--bounds", "0", "1e-300"],
        ["--epsilon", "1", "--bounds", "-inf", "1e3"],
    ],
)
@pytest.mark.parametrize("statistic", ["mean", "quantile"])
def test_extreme_epsilon_and_bounds_are_clean_errors(extra, statistic, files, capsys):
    line = _fails_cleanly(
        ["estimate", statistic, str(files["values"]), *extra],
        capsys,
        f"userdp estimate {statistic}",
    )
    assert "epsilon" in line or "bounds" in line


def test_negative_bounds_in_scientific_notation_can_be_entered(files, capsys):
    argv = ["estimate", "mean", str(files["values"]), "--epsilon", "1", "--seed", "1"]
    assert main([*argv, "--bounds", "-1e3", "1e3"]) == 0
    assert main([*argv, "--bounds", "-1.5E+3", "1e3"]) == 0
    capsys.readouterr()


def test_fractional_sample_limit_threshold_is_refused(files, capsys):
    line = _fails_cleanly(
        [
            "estimate",
            "mean",
            str(files["values"]),
            "--epsilon",
            "1",
            "--bounds",
            "0",
            "1",
            "--method",
            "sample-limit",
            "--threshold",
            "2.5",
        ],
        capsys,
        "userdp estimate mean",
    )
    assert "--threshold must be an int" in line


def test_gwa_with_a_threshold_is_refused(files, capsys):
    line = _fails_cleanly(
        [
            "estimate",
            "linreg",
            str(files["regression"]),
            "--epsilon",
            "1",
            "--label-range",
            "0",
            "1",
            "--threshold",
            "3",
        ],
        capsys,
        "userdp estimate linreg",
    )
    assert "--threshold is only used with --method sample-limit" in line


def test_estimate_output_suffix_decides_the_format(files, tmp_path, capsys):
    argv = ["estimate", "mean", str(files["values"]), "--epsilon", "1", "--bounds", "0", "1"]
    assert main([*argv, "--seed", "1", "-o", str(tmp_path / "m.csv")]) == 0
    lines = (tmp_path / "m.csv").read_text().splitlines()
    assert lines[0] == "name,estimate" and lines[1].startswith("mean,")
    assert main([*argv, "--seed", "1", "-o", str(tmp_path / "m.json")]) == 0
    assert json.loads((tmp_path / "m.json").read_text())["statistic"] == "mean"
    capsys.readouterr()
    parquet = str(tmp_path / "m.parquet")
    line = _fails_cleanly([*argv, "-o", parquet], capsys, "userdp estimate mean")
    assert ".json" in line and ".csv" in line


def test_select_json_output_reads_back(files, tmp_path, capsys):
    out = tmp_path / "x.json"
    assert main(["select", str(files["pairs"]), *EPS_DELTA, "--seed", "1", "-o", str(out)]) == 0
    capsys.readouterr()
    assert read_table(out).column("item").to_pylist() == ["a", "the"]


def test_delimiter_option(files, tmp_path, capsys):
    p = tmp_path / "values.csv"
    p.write_text(files["values"].read_text().replace(",", ";"))
    argv = ["estimate", "mean", str(p), "--epsilon", "1", "--bounds", "0", "1", "--seed", "1"]
    assert main([*argv, "--delimiter", ";"]) == 0
    capsys.readouterr()
    pairs = tmp_path / "pairs.csv"
    pairs.write_text(files["pairs"].read_text().replace(",", "\t"))
    assert main(["select", str(pairs), *EPS_DELTA, "--seed", "1", "--delimiter", "tab"]) == 0
    assert capsys.readouterr().out == "a\nthe\n"


def test_empty_string_ids_are_refused_with_row_and_column(tmp_path, capsys):
    p = tmp_path / "pairs.csv"
    p.write_text("user,item\nu1,a\n,b\n")
    line = _fails_cleanly(["select", str(p), *EPS_DELTA], capsys, "userdp select")
    assert "'user'" in line and "row 1" in line and "empty" in line


# -- messages without data values ------------------------------------------------------
SECRET = "carol-secret-diagnosis"


def test_malformed_row_names_row_not_value(tmp_path, capsys):
    p = tmp_path / "pairs.csv"
    p.write_text(f"user,item\nu1,a\nu2,b,{SECRET}\n")
    line = _fails_cleanly(["select", str(p), *EPS_DELTA], capsys, "userdp select")
    assert SECRET not in line
    assert "line 3" in line


def test_an_unparsable_number_is_a_missing_value_never_an_error(tmp_path, capsys):
    """A cell that is not a number is a missing value (the non-finite policy): no refusal
    happens only because one user wrote such a cell, and the cell is never printed."""
    p = tmp_path / "values.csv"
    p.write_text("user,value\nu1,0.5\nu2,alice@example.com\nu3,0.25\n")
    argv = ["estimate", "mean", str(p), "--epsilon", "1", "--bounds", "0", "1", "--seed", "1"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "alice" not in captured.out + captured.err


def test_debug_shows_the_value(tmp_path):
    p = tmp_path / "pairs.csv"
    p.write_text(f"user,item\nu1,a\nu2,b,{SECRET}\n")
    with pytest.raises(Exception) as info:
        main(["select", str(p), *EPS_DELTA, "--debug"])
    chain = [info.value, info.value.__cause__]
    assert any(SECRET in str(e) for e in chain if e is not None)


# -- truncated Parquet, model files ---------------------------------------------------------------
def test_truncated_parquet_is_one_line(files, tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = tmp_path / "pairs.parquet"
    pq.write_table(pa.table({"user": ["u"] * 1000, "item": ["i"] * 1000}), p)
    p.write_bytes(p.read_bytes()[:-40])
    line = _fails_cleanly(["select", str(p), *EPS_DELTA], capsys, "userdp select")
    assert len(line) < 400


def test_empty_directory_is_a_data_error(tmp_path, capsys):
    (tmp_path / "parts").mkdir()
    line = _fails_cleanly(["select", str(tmp_path / "parts"), *EPS_DELTA], capsys, "userdp select")
    assert "FieldRef" not in line and "no data files" in line


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04trunc", b"user,item\nu1,a\n"])
def test_neighbors_on_a_bad_model_file_is_one_line(content, tmp_path, capsys):
    model = tmp_path / "model.npz"
    model.write_bytes(content)
    line = _fails_cleanly(
        ["recommend", "neighbors", "--model", str(model), "1"], capsys, "userdp recommend neighbors"
    )
    assert "allow_pickle" not in line and "model" in line


# -- the real process: version, Ctrl-C ------------------------------------------------------------
def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}


def test_version_imports_no_heavy_modules():
    code = (
        "import sys; from userdp.cli import main; main(['--version']); "
        "print(sorted(m for m in ('dp_accounting', 'pyspark', 'scipy', 'pyarrow') "
        "if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"


def test_interrupt_during_imports_prints_one_line_and_exits_130():
    """Ctrl-C while the heavy modules load (a finder raising it on ``import pyarrow``)."""
    code = (
        "import sys\n"
        "class Interrupt:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'pyarrow':\n"
        "            raise KeyboardInterrupt\n"
        "sys.meta_path.insert(0, Interrupt())\n"
        "sys.argv = ['userdp', 'select', 'x.csv', '--epsilon', '1', '--delta', '1e-5']\n"
        "from userdp.cli import console_main\n"
        "console_main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=60
    )
    assert done.returncode == ExitCode.INTERRUPTED
    assert done.stderr == "userdp: interrupted\n"


def test_recommend_reports_duplicate_ratings(tmp_path, capsys):
    """A repeated (user, item) rating silently kept the last one."""
    p = tmp_path / "ratings.csv"
    rows = [f"u{u},i{i},{1 + (u + i) % 5}\n" for u in range(40) for i in range(5)]
    p.write_text("user,item,rating\n" + "".join(rows) + "u0,i0,5\nu1,i1,5\n")
    argv = [
        "recommend",
        "train",
        str(p),
        "-o",
        str(tmp_path / "m.npz"),
        "--method",
        "als",
        "--dim",
        "2",
        "--steps",
        "1",
        "--seed",
        "0",
    ]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "2 input rows repeated earlier (user, item) ratings" in err


def test_pairs_dropped_by_the_cap_are_counted_per_round(tmp_path, capsys):
    """The summary added the rounds' drops ("1991267 pairs dropped" of 1M pairs)."""
    p = tmp_path / "pairs.csv"
    p.write_text("user,item\n" + "".join(f"u{u},i{i}\n" for u in range(200) for i in range(10)))
    argv = ["select", str(p), *EPS_DELTA, "--seed", "1", "--max-items-per-user", "4", "-v"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    line = next(ln for ln in err.splitlines() if "dropped by the per-user cap" in ln)
    counts = [int(w) for w in line.replace(",", " ").split() if w.isdigit()]
    assert "1200 in round 1" in line
    assert all(n <= 2000 for n in counts)


def test_recommend_unparsable_rating_names_row_not_value(tmp_path, capsys):
    p = tmp_path / "ratings.csv"
    p.write_text("user,item,rating\nu1,a,4\nu2,b,carol-secret-diagnosis\n")
    argv = ["recommend", "train", str(p), "-o", str(tmp_path / "m.npz"), "--method", "als"]
    line = _fails_cleanly(argv, capsys, "userdp recommend train")
    assert SECRET not in line and "'rating'" in line


def test_generate_dash_writes_csv_to_stdout(capsys):
    assert main(["generate", "zipf", "-", "--users", "10", "--seed", "1", "-q"]) == 0
    assert capsys.readouterr().out.startswith("user,item\n")


# -- sizes typed by the user, files that are not what they say ------------------------------------
def test_a_huge_cap_costs_no_memory(files, capsys):
    """The threshold's maximum over t = 1..cap is found without an array of cap values."""
    argv = ["select", str(files["pairs"]), *EPS_DELTA, "--seed", "1", "-q"]
    assert main([*argv, "--max-items-per-user", str(10**12)]) == 0
    assert capsys.readouterr().out == "a\nthe\n"


@pytest.mark.parametrize(
    ("argv", "prog", "words"),
    [
        (
            ["select", "{pairs}", *EPS_DELTA, "--rounds", "100"],
            "userdp select",
            "at most 64 rounds",
        ),
        (
            ["generate", "zipf", "{dir}/g.csv", "--users", str(10**12)],
            "userdp generate",
            "not enough memory",
        ),
    ],
)
def test_too_large_sizes_are_usage_errors(argv, prog, words, files, capsys):
    argv = [a.format(**{k: str(v) for k, v in files.items()}) for a in argv]
    line = _fails_cleanly(argv, capsys, prog)
    assert words in line
    assert not (files["dir"] / "g.csv").exists()


def test_duplicated_header_is_one_line(tmp_path, capsys):
    p = tmp_path / "dup.csv"
    p.write_text("user,item,item\nu1,a,b\n")
    line = _fails_cleanly(["select", str(p), *EPS_DELTA], capsys, "userdp select")
    assert "'item' appears 2 times" in line


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"\x7fELF\x02\x01\x01\x00\x00\x00\xff\xfe,\x80\n" * 20, "not UTF-8"),
        (gzip.compress(b"user,item\nu1,a\n", mtime=0), "like a .gz file"),
        (b"user,item\n" + b"u,a\x00b\n" * 3, "NUL bytes"),
    ],
)
def test_binary_or_misnamed_compressed_csv_is_one_line(content, words, tmp_path, capfd):
    p = tmp_path / "pairs.csv"
    p.write_bytes(content)
    assert main(["select", str(p), *EPS_DELTA]) == ExitCode.USAGE
    out, err = capfd.readouterr()  # capfd: Arrow's ignored-exception report went to fd 2
    assert out == ""
    assert words in _one_error_line(err, "userdp select")


def test_undecodable_bad_row_prints_no_ignored_exception(tmp_path, capfd):
    p = tmp_path / "pairs.csv"
    p.write_bytes(b"user,item\n" + b"u,a\n" * 2000 + b"x,\xff\xfe,z\n")
    assert main(["select", str(p), *EPS_DELTA]) == ExitCode.USAGE
    _, err = capfd.readouterr()
    assert "Exception ignored" not in err
    _one_error_line(err, "userdp select")


def test_unterminated_quote_does_not_swallow_rows(tmp_path, capsys):
    p = tmp_path / "pairs.csv"
    p.write_text('user,item\nu1,"abc\nu2,x\nu3,y\n')
    line = _fails_cleanly(["select", str(p), *EPS_DELTA], capsys, "userdp select")
    assert "line 2" in line and "unterminated quote" in line and "x" not in line.split(":")[-1]


def test_audit_input_errors_hold_no_cell_value(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text(f"user,item\n7,{SECRET},extra\n")
    line = _fails_cleanly(["audit", "--input", str(bad)], capsys, "userdp audit")
    assert SECRET not in line and "line 2" in line
    values = tmp_path / "values.csv"
    values.write_text(f"user,item,value\n7,a,{SECRET}\n")
    main(["audit", "--input", str(values), "--mechanism", "select[mad2r]"])
    captured = capsys.readouterr()
    assert SECRET not in captured.out + captured.err  # a missing value, never printed


def test_select_refuses_an_output_format_it_does_not_write(files, tmp_path, capsys):
    out = tmp_path / "out.xlsx"
    argv = ["select", str(files["pairs"]), *EPS_DELTA, "-o", str(out)]
    assert ".xlsx" in _fails_cleanly(argv, capsys, "userdp select")
    assert not out.exists()


def test_huge_epsilon_prints_no_numpy_warning(files, capsys):
    assert main(["select", str(files["pairs"]), "--epsilon", "1e20", "--delta", "1e-5"]) == 0
    err = capsys.readouterr().err
    assert "divide by zero" not in err and "RuntimeWarning" not in err


def test_delta_near_one_is_not_reported_as_one(files, capsys):
    assert main(["select", str(files["pairs"]), "--epsilon", "1", "--delta", "0.9999999"]) == 0
    err = capsys.readouterr().err
    assert "delta=0.9999999" in err and "delta=1 " not in err


def test_items_catalogue_from_stdin_or_csv(tmp_path, capsys):
    ratings = tmp_path / "r.csv"
    ratings.write_text(
        "user,item,rating\n"
        + "".join(f"u{u},i{i},{1 + (u + i) % 5}\n" for u in range(40) for i in range(6))
    )
    base = [
        "recommend",
        "train",
        str(ratings),
        *EPS_DELTA,
        "--rating-range",
        "1",
        "5",
        "--dim",
        "2",
        "--steps",
        "1",
        "--seed",
        "0",
        "-q",
    ]
    catalogue = tmp_path / "items.csv"
    catalogue.write_text("item\ni0\ni1\ni2\n")
    assert main([*base, "--items", str(catalogue), "-o", str(tmp_path / "a.npz")]) == 0
    stdin = tmp_path / "stdin"  # a name without a table suffix reads one id per line
    stdin.write_text("i0\ni1\ni2\n")
    assert main([*base, "--items", str(stdin), "-o", str(tmp_path / "b.npz")]) == 0
    capsys.readouterr()
    huge = [*base[:-7], "--dim", "100000", "--items", str(stdin), "-o", str(tmp_path / "c.npz")]
    line = _fails_cleanly(huge, capsys, "userdp recommend train")
    assert "not enough memory" in line and not (tmp_path / "c.npz").exists()


# -- what the output says ----------------------------------------------------------------------
def test_evaluate_says_when_a_model_does_not_beat_the_references():
    from userdp.cli.recommend.evaluate import _no_better_than_baselines, _Row

    rows = [
        _Row("adadpals", 1.0, 1e-5, "rmse", 0.98, [], 1.0),
        _Row("als", None, None, "rmse", 0.90, [], 1.0),
        _Row("adadpals", 1.0, 1e-5, "recall", 0.10, [], 1.0),
        _Row("global-mean", None, None, "rmse", 0.96, [], 0.0),
        _Row("popularity", None, None, "recall", 0.05, [], 0.0),
    ]
    notes = _no_better_than_baselines(rows)
    assert len(notes) == 1
    assert notes[0].startswith("adadpals at epsilon=1 does no better than the global-mean")


def test_sigterm_rolls_back_the_output_and_exits_143_with_one_line(tmp_path):
    """SIGTERM killed the command at once, leaving its temporary output file behind."""
    (tmp_path / "rows.csv").write_text(
        "user,key\n" + "".join(f"u{u},k{u % 3}\n" for u in range(300))
    )
    code = (
        "import os, signal, sys\n"
        "import pyarrow.csv as pacsv\n"
        "write = pacsv.write_csv\n"
        "def write_then_sigterm(*args, **kwargs):\n"
        "    write(*args, **kwargs)  # the temporary file is written, not yet renamed\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "pacsv.write_csv = write_then_sigterm\n"
        "sys.argv = ['userdp', 'aggregate', 'rows.csv', '--keys', 'keys.txt', '--epsilon', '1',\n"
        "            '--delta', '1e-5', '-o', 'out.csv']\n"
        "from userdp.cli import console_main\n"
        "console_main()\n"
    )
    (tmp_path / "keys.txt").write_text("k0\nk1\nk2\n")
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == ExitCode.TERMINATED, done.stderr
    assert done.stderr == "userdp: terminated\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keys.txt", "rows.csv"]


def _without_pyspark(monkeypatch) -> None:
    """Make every ``import pyspark...`` fail as on a machine without the spark extra."""
    for name in [m for m in sys.modules if m == "pyspark" or m.startswith(("pyspark.", "py4j"))]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "pyspark", None)


@pytest.mark.parametrize(
    ("argv", "prog"),
    [
        (["recommend", "train", "{p}", "-o", "{d}/m.npz", "--method", "als"], "recommend train"),
        (["select", "{p}", *EPS_DELTA], "select"),
        (["aggregate", "{p}", "--key-column", "item", *EPS_DELTA], "aggregate"),
    ],
    ids=["recommend-train", "select", "aggregate"],
)
def test_engine_spark_without_pyspark_exits_2_with_the_install_command(
    tmp_path, capsys, monkeypatch, argv, prog
):
    """recommend train said "unexpected error: ModuleNotFoundError" and exited 1."""
    p = tmp_path / "ratings.csv"
    p.write_text("user,item,rating\n" + "".join(f"u{u},i{u % 7},3\n" for u in range(60)))
    _without_pyspark(monkeypatch)
    argv = [a.format(p=p, d=tmp_path) for a in argv] + ["--engine", "spark"]
    assert main(argv) == ExitCode.USAGE
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"userdp {prog}: error: ")
    assert "pip install 'userdp[spark]'" in err


def test_a_missing_optional_package_exits_2_and_a_missing_userdp_module_stays_a_bug(
    tmp_path, capsys, monkeypatch
):
    from userdp.cli import select as select_cli

    p = tmp_path / "pairs.csv"
    p.write_text("user,item\n" + "".join(f"u{u},a\n" for u in range(50)))
    for name, code, words in [
        ("polars", ExitCode.USAGE, "error: This needs Polars: pip install polars;"),
        ("userdp.no_such_part", ExitCode.FAILURE, "unexpected error: ModuleNotFoundError"),
    ]:

        def missing(*_args, name=name, **_kwargs):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

        monkeypatch.setattr(select_cli, "select_partitions", missing)
        assert main(["select", str(p), *EPS_DELTA]) == code
        assert words in capsys.readouterr().err


def _summary_line(err: str) -> str:
    return next(ln for ln in err.splitlines() if " at epsilon=" in ln)


@pytest.mark.parametrize(
    ("budget", "echo"),
    [
        (["--epsilon", "1", "--delta", "0.9999999"], "epsilon=1, delta=0.9999999"),
        (["--epsilon", "1e20", "--delta", "1e-5"], "epsilon=1e+20, delta=1e-05"),
        (["--epsilon", "0.123456789", "--delta", "1e-5"], "epsilon=0.123456789, delta=1e-05"),
    ],
    ids=["delta-near-1", "huge-epsilon", "many-digits"],
)
@pytest.mark.parametrize("command", ["select", "aggregate"])
def test_the_summary_echoes_the_budget_exactly(tmp_path, capsys, command, budget, echo):
    """``--delta 0.9999999`` was echoed as ``delta=1``, ``--epsilon 1e20`` as 9.98144e+19."""
    p = tmp_path / "rows.csv"
    p.write_text("user,key\n" + "".join(f"u{u},k{u % 3}\n" for u in range(300)))
    extra = ["--item-column", "key"] if command == "select" else []
    assert main([command, str(p), *extra, *budget, "--seed", "1"]) == 0
    line = _summary_line(capsys.readouterr().err)
    assert line.endswith(f" at {echo}."), line
    numbers = dict(part.split("=") for part in line.rstrip(".").split(" at ")[-1].split(", "))
    assert float(numbers["epsilon"]) == float(budget[1])  # reads back as the float given
    assert float(numbers["delta"]) == float(budget[3])


def test_aggregate_quantiles_echo_the_budget_given_not_the_six_digit_spent_one(tmp_path, capsys):
    """``--metrics quantiles`` printed ``epsilon=0.764937`` for ``--epsilon 1``."""
    p = tmp_path / "rows.csv"
    p.write_text("user,key,v\n" + "".join(f"u{u},k{u % 3},{u % 5}\n" for u in range(300)))
    argv = ["aggregate", str(p), "--value-column", "v", "--bounds", "0", "5"]
    argv += ["--metrics", "quantiles", "--quantiles", "0.5,0.9", *EPS_DELTA, "--seed", "1"]
    assert main(argv) == 0
    assert _summary_line(capsys.readouterr().err).endswith(" at epsilon=1, delta=1e-05.")


def test_estimate_summary_echoes_epsilon_exactly(tmp_path, capsys):
    p = tmp_path / "values.csv"
    p.write_text("user,v\n" + "".join(f"u{u},{u % 5}\n" for u in range(300)))
    argv = ["estimate", "mean", str(p), "--value-column", "v", "--bounds", "0", "5"]
    assert main([*argv, "--epsilon", "0.9999999", "--seed", "1"]) == 0
    assert " at epsilon=0.9999999 (pure DP)." in capsys.readouterr().err


def test_a_bad_delta_is_echoed_exactly(tmp_path, capsys):
    p = tmp_path / "pairs.csv"
    p.write_text("user,item\nu1,a\n")
    assert main(["select", str(p), "--epsilon", "1", "--delta", "1.0000001"]) == ExitCode.USAGE
    assert "got 1.0000001." in capsys.readouterr().err


@pytest.mark.skipif(not os.path.isdir("/sys"), reason="needs a read-only /sys (Linux)")
@pytest.mark.parametrize("command", ["select", "aggregate"])
def test_an_unwritable_output_is_named_as_given_not_as_the_temporary_file(
    tmp_path, capsys, command
):
    """As root, ``-o /sys/out.txt`` failed naming '/sys/.out.txt.<random>.tmp'."""
    p = tmp_path / "rows.csv"
    p.write_text("user,key\n" + "".join(f"u{u},k{u % 3}\n" for u in range(300)))
    out = "/sys/out.txt" if command == "select" else "/sys/out.csv"
    extra = ["--item-column", "key"] if command == "select" else []
    assert main([command, str(p), *extra, *EPS_DELTA, "-o", out]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert err.startswith(f"userdp {command}: error: ") and len(err.splitlines()) == 1, err
    assert f"{out}: " in err and ".tmp" not in err


def test_a_failed_write_names_the_output_and_leaves_nothing(tmp_path, capsys, monkeypatch):
    """A full disk while writing named the temporary file."""
    import errno

    import pyarrow.csv as pacsv

    def disk_full(table, path, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    p = tmp_path / "rows.csv"
    p.write_text("user,key\n" + "".join(f"u{u},k{u % 3}\n" for u in range(300)))
    (tmp_path / "keys.txt").write_text("k0\nk1\n")
    monkeypatch.setattr(pacsv, "write_csv", disk_full)
    out = tmp_path / "out.csv"
    argv = ["aggregate", str(p), "--keys", str(tmp_path / "keys.txt"), *EPS_DELTA, "-o", str(out)]
    assert main(argv) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert err == f"userdp aggregate: error: {out}: {os.strerror(errno.ENOSPC)}\n"
    assert sorted(f.name for f in tmp_path.iterdir()) == ["keys.txt", "rows.csv"]


# -- messages name the command line's flags, never the library's names ---------------------
def test_a_library_message_names_the_flag_and_not_the_entry_point_twice(files, capsys):
    values = str(files["values"])
    line = _fails_cleanly(
        ["aggregate", values, "--metrics", "mean", "--epsilon", "1", "--delta", "1e-5"],
        capsys,
        "userdp aggregate",
    )
    assert line == (
        "userdp aggregate: error: metrics sum, mean and quantiles need --value-column and --bounds."
    )
    pairs = ["aggregate", str(files["pairs"]), "--key-column", "item"]
    assert main([*pairs, "--epsilon", "1", "--delta", "1e-5"]) == 0
    err = capsys.readouterr().err
    assert "userdp aggregate: aggregate:" not in err
    assert err.splitlines()[-1].startswith("userdp aggregate: ")


def test_an_estimator_s_parameter_error_names_the_flag(tmp_path, capsys):
    ratings = tmp_path / "r.csv"
    ratings.write_text("user,item,rating\n" + "".join(f"{u},{u % 7},3\n" for u in range(50)))
    argv = ["recommend", "train", str(ratings), "--epsilon", "1", "--delta", "1e-5"]
    argv += ["--rating-range", "1", "5", "--dim", "0", "-o", str(tmp_path / "m.npz")]
    line = _fails_cleanly(argv, capsys, "userdp recommend train")
    assert line.startswith("userdp recommend train: error: --dim must be an int"), line
    assert "MatrixFactorization" not in line


def test_the_translation_keeps_column_names_and_unknown_parameters():
    from userdp.cli.errors import for_the_command_line

    flags = {"epsilon": "--epsilon", "value_column": "--value-column"}
    text = for_the_command_line(
        "aggregate: the value column 'epsilon' holds text; 'value_column' and 'rank' are "
        "arguments. The 'epsilon' parameter of PrivacyBudget must be > 0.",
        "userdp aggregate",
        flags,
    )
    assert text == (
        "the value column 'epsilon' holds text; --value-column and 'rank' are arguments. "
        "--epsilon must be > 0."
    )
    assert for_the_command_line("Column 'epsilon' holds lists.", "userdp x", flags) == (
        "Column 'epsilon' holds lists."
    )


def test_a_flag_the_library_knows_by_another_name_is_named_as_the_flag(files, capsys):
    """--threshold is the library's h: its message names --threshold."""
    argv = ["estimate", "mean", str(files["values"]), "--bounds", "0", "1", "--epsilon", "1"]
    line = _fails_cleanly([*argv, "--threshold", "-3"], capsys, "userdp estimate mean")
    assert line.startswith("userdp estimate mean: error: --threshold must be"), line
