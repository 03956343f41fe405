"""``userdp select --engine spark``: Parquet directories in, files or part-file directories out."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from userdp.cli import main

pytestmark = pytest.mark.spark

N_USERS = 3000
FLAGS = ["--engine", "spark", "--epsilon", "1", "--delta", "1e-5", "--seed", "3"]


@pytest.fixture(scope="module")
def parquet_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory of three Parquet part files: 7 and 8 are common items, 1000 + u is rare."""
    d = tmp_path_factory.mktemp("data") / "pairs"
    d.mkdir()
    users = [u for u in range(N_USERS) for _ in range(3)]
    items = [w for u in range(N_USERS) for w in (7, 8, 1000 + u)]
    table = pa.table({"uid": users, "item": items})
    for part in range(3):
        pq.write_table(table.slice(part * 3000, 3000), d / f"part-{part:05d}.parquet")
    return d


def test_select_a_parquet_directory_to_stdout(spark, parquet_dir, capsys):
    code = main(["select", str(parquet_dir), "--user-column", "uid", *FLAGS])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert captured.out == "7\n8\n"
    assert "selected 2 items with mad2r" in captured.err
    assert "users" not in captured.err  # exact counts only with -v
    # -v's exact counts are the run's, not the algorithm's: one round is enough here
    args = ["select", str(parquet_dir), "--user-column", "uid", *FLAGS, "--algorithm", "basic"]
    code = main([*args, "-v"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert f"{N_USERS} users" in err and "NOT differentially private" in err


def test_parquet_output_is_a_directory_with_the_item_type(spark, parquet_dir, tmp_path, capsys):
    out = tmp_path / "released.parquet"
    args = ["select", str(parquet_dir), "--user-column", "uid", *FLAGS, "-o", str(out), "-q"]
    assert main([*args, "--algorithm", "basic"]) == 0
    table = pq.read_table(out)
    assert table.column_names == ["item"]
    assert pa.types.is_integer(table.schema.field("item").type)
    assert sorted(table.column("item").to_pylist()) == [7, 8]
    # refuses to replace it without --overwrite, replaces it with
    assert main([*args, "--algorithm", "mad"]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main([*args, "--algorithm", "mad", "--overwrite"]) == 0
    assert sorted(pq.read_table(out).column("item").to_pylist()) == [7, 8]


def test_csv_in_json_out(spark, tmp_path, capsys):
    src = tmp_path / "pairs.csv"
    rows = [(f"u{u}", w) for u in range(N_USERS) for w in ("the", "", f"rare{u}")]
    src.write_text("user,item\n" + "".join(f"{u},{i}\n" for u, i in rows))
    out = tmp_path / "items.json"
    assert main(["select", str(src), *FLAGS, "--algorithm", "dp-sips", "-o", str(out)]) == 0
    # the empty string is an item like any other, as on the local engine
    assert json.loads(out.read_text()) == ["", "the"]


def test_sequential_algorithms_are_refused(spark, parquet_dir, capsys):
    args = ["select", str(parquet_dir), *FLAGS, "--algorithm", "greedy-update"]
    assert main(args) == 2
    assert "no Spark engine" in capsys.readouterr().err


def test_missing_column_is_one_error_line(spark, parquet_dir, capsys):
    assert main(["select", str(parquet_dir), *FLAGS]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Column 'user' not found" in err[0]


def test_headerless_tsv_takes_the_first_two_columns(spark, tmp_path, capsys):
    src = tmp_path / "pairs.tsv"
    src.write_text("".join(f"u{u}\tcommon\textra\n" for u in range(N_USERS)))
    assert main(["select", str(src), *FLAGS, "--no-header", "--algorithm", "basic"]) == 0
    assert capsys.readouterr().out == "common\n"
