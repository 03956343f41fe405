"""``userdp select --engine spark`` is quiet on a non-terminal stderr and fails in one line
(JVM/log4j lines and progress bars even with -q; a 15,000-character Java
stack for a truncated Parquet file)."""

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


def test_quiet_spark_run_prints_nothing_on_stderr(tmp_path):
    pytest.importorskip("pyspark")
    p = tmp_path / "pairs.csv"
    p.write_text("user,item\n" + "".join(f"u{u},a\nu{u},b\n" for u in range(300)))
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [
        sys.executable,
        "-m",
        "userdp",
        "select",
        str(p),
        *FLAGS,
        "--spark-master",
        "local[1]",
        "--algorithm",  # one round: what prints or not is the session's and the CLI's doing,
        "basic",  # the same for every algorithm (their steps are the parity tests' business)
        "-q",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "a\nb\n"
    assert done.stderr == ""


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


def test_ctrl_c_during_a_spark_job_is_one_line(tmp_path):
    """PySpark's SIGINT handler re-entered py4j and printed ~49 lines of tracebacks."""
    import signal

    pytest.importorskip("pyspark")
    p = tmp_path / "pairs.csv"
    p.write_text("user,item\n" + "".join(f"u{u},i{u % 97}\n" for u in range(20000)))
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [
        sys.executable,
        "-m",
        "userdp",
        "select",
        str(p),
        *FLAGS,
        "--spark-master",
        "local[1]",
        "-v",
    ]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        for line in proc.stderr:  # wait until the job runs, then press Ctrl-C (the group)
            if "info: select" in line:
                break
        os.killpg(proc.pid, signal.SIGINT)
        rest = proc.stderr.read()
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert code == ExitCode.INTERRUPTED, rest
    assert "Traceback" not in rest and "py4j" not in rest, rest
    assert rest.rstrip().endswith("userdp: interrupted")


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
