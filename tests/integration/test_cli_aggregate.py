"""``userdp aggregate``: the table it writes, its errors (one line, exit 2) and its logs."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from userdp.cli import main


@pytest.fixture
def ratings(tmp_path):
    rng = np.random.default_rng(0)
    lines = ["u,movie,rating"]
    for u in range(2000):
        for m in set((rng.zipf(1.5, 4) % 30).tolist()):
            lines.append(f"{u},m{m},{rng.integers(1, 6)}")
    path = tmp_path / "ratings.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


BASE = ["--user-column", "u", "--key-column", "movie", "--epsilon", "1", "--delta", "1e-5"]


def test_writes_the_table_in_each_format(ratings, tmp_path, capsys):
    for suffix in ("csv", "parquet", "json"):
        out = tmp_path / f"out.{suffix}"
        argv = [
            str(ratings),
            *BASE,
            "--value-column",
            "rating",
            "--bounds",
            "1",
            "5",
            "--metrics",
            "users,count,sum,mean",
            "--seed",
            "0",
            "-o",
            str(out),
        ]
        assert main(["aggregate", *argv]) == 0, capsys.readouterr().err
        if suffix == "csv":
            names = pacsv.read_csv(out).column_names
        elif suffix == "parquet":
            names = pq.read_table(out).column_names
        else:
            names = list(json.loads(out.read_text())[0])
        assert names == ["key"] + [
            c for m in ("users", "count", "sum", "mean") for c in (m, f"{m}_low", f"{m}_high")
        ]
    assert "m1" in pacsv.read_csv(out.with_suffix(".csv")).column("key").to_pylist()


def test_public_keys_from_a_file(ratings, tmp_path, capsys):
    keys = tmp_path / "keys.txt"
    keys.write_text("m1\nm2\nnever-seen\n")
    out = tmp_path / "out.json"
    assert main(["aggregate", str(ratings), *BASE, "--keys", str(keys), "-o", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [r["key"] for r in rows] == ["m1", "m2", "never-seen"]


def test_verbose_labels_the_exact_counts_not_private(ratings, capsys):
    assert main(["aggregate", str(ratings), *BASE, "-v"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith('"key","users","users_low","users_high","count"')
    assert "NOT differentially private" in captured.err
    assert main(["aggregate", str(ratings), *BASE]) == 0
    err = capsys.readouterr().err
    assert "NOT" not in err and " s." not in err  # no exact counts or timings by default


def test_json_prints_the_release(ratings, tmp_path, capsys):
    keys = tmp_path / "keys.txt"
    keys.write_text("m1\nm2\n")
    assert main(["aggregate", str(ratings), *BASE, "--keys", str(keys), "--json", "-q"]) == 0
    captured = capsys.readouterr()
    release = json.loads(captured.out)
    assert [r["key"] for r in release["rows"]] == ["m1", "m2"]
    assert release["unit"] == "user" and release["epsilon"] <= 1.0 + 1e-9
    assert set(release["noise_sd"]) == set(release["contribution_bounds"]) == {"users", "count"}
    assert "diagnostics" not in release and captured.err == ""
    out = tmp_path / "t.csv"
    argv = [*BASE, "--keys", str(keys), "--json", "-q", "-o", str(out)]
    assert main(["aggregate", str(ratings), *argv]) == 0
    release = json.loads(capsys.readouterr().out)
    assert release["output"] == str(out) and "rows" not in release and out.exists()


@pytest.mark.parametrize(
    "extra",
    [
        ["--metrics", "mean"],  # no value column or bounds
        ["--metrics", "median"],
        ["--key-column", "absent"],
        ["--epsilon", "-1"],
        ["-o", "out.txt"],
        ["--keys", "no-such-file"],
    ],
)
def test_errors_are_one_line_and_exit_2(ratings, tmp_path, monkeypatch, capsys, extra):
    monkeypatch.chdir(tmp_path)
    code = main(["aggregate", str(ratings), *BASE, *extra])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and err.startswith("userdp aggregate: error:")


def test_an_existing_output_is_kept_without_overwrite(ratings, tmp_path, capsys):
    out = tmp_path / "out.csv"
    out.write_text("keep me\n")
    assert main(["aggregate", str(ratings), *BASE, "-o", str(out)]) == 2
    assert out.read_text() == "keep me\n"
    assert main(["aggregate", str(ratings), *BASE, "-o", str(out), "--overwrite"]) == 0
    assert out.read_text() != "keep me\n"


@pytest.mark.parametrize("content", ["", "\n\n", "[]"], ids=["empty", "blank-lines", "json"])
def test_an_empty_key_list_is_refused_before_anything_is_released(
    ratings, tmp_path, capsys, content
):
    """An empty --keys file was accepted: an empty table, the budget spent all the same."""
    keys = tmp_path / ("keys.json" if content == "[]" else "keys.txt")
    keys.write_text(content)
    out = tmp_path / "out.csv"
    assert main(["aggregate", str(ratings), *BASE, "--keys", str(keys), "-o", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and not out.exists()
    assert captured.err == (
        f"userdp aggregate: error: The key list {str(keys)!r} holds no key; list at least one, "
        "or leave out --keys to select the keys privately.\n"
    )


def test_a_quantile_level_given_twice_is_refused(ratings, capsys):
    """--quantiles 0.5,0.5 released q0.5 twice into one column, spending budget on both."""
    argv = ["aggregate", str(ratings), *BASE, "--value-column", "rating", "--bounds", "1", "5"]
    argv += ["--metrics", "quantiles", "--quantiles", "0.5,0.9,0.5"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == (
        "userdp aggregate: error: --quantiles lists 0.5 more than once; give each level once.\n"
    )
