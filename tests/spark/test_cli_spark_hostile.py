"""``userdp select --engine spark`` fails in one line (a 15,000-character Java stack for a
truncated Parquet file), and ``spark_session()`` prints nothing. That a quiet CLI run prints
nothing on stderr is checked with the run of tests/spark/test_cli_spark_cleanup.py that starts
its own JVM."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from userdp.cli import ExitCode, main

pytestmark = pytest.mark.spark

SRC = str(Path(__file__).resolve().parents[2] / "src")
FLAGS = ["--engine", "spark", "--epsilon", "1", "--delta", "1e-5", "--seed", "3"]


def test_truncated_parquet_is_one_short_line(spark, tmp_path, capsys):
    d = tmp_path / "parts"
    d.mkdir()
    table = pa.table({"user": [f"u{u}" for u in range(2000)], "item": ["i"] * 2000})
    pq.write_table(table, d / "part-00000.parquet")
    data = (d / "part-00000.parquet").read_bytes()
    (d / "part-00000.parquet").write_bytes(data[: len(data) // 2])
    assert main(["select", str(d), *FLAGS]) == ExitCode.USAGE
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("userdp select: error: ")
    assert len(lines[0]) < 700  # was 15,000 characters of Java stack


def test_spark_refuses_a_row_with_extra_fields_like_the_local_engine(spark, tmp_path, capsys):
    p = tmp_path / "pairs.csv"
    p.write_text("user,item\n" + "".join(f"u{u},a\n" for u in range(50)) + "u1,b,secret-x\n")
    for engine in ("local", "spark"):
        assert main(["select", str(p), *FLAGS, "--engine", engine]) == ExitCode.USAGE
        out, err = capsys.readouterr()
        assert out == "" and len(err.splitlines()) == 1, err
        assert "secret-x" not in err


def test_spark_session_from_python_prints_nothing(tmp_path):
    """spark_session() printed up to 10 KB of JVM notes, log4j lines and progress bars."""
    pytest.importorskip("pyspark")
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    code = (
        "from userdp.spark import spark_session; s = spark_session('local[1]'); "
        "print(s.range(100000).selectExpr('sum(id)').collect()[0][0]); s.stop()"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == str(sum(range(100000)))
    assert done.stderr == ""
