"""The README's and the user guide's examples run as written (Python blocks and CLI blocks)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from userdp.cli import main

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
#: The front page and the user guide in docs/: every example in them runs as written.
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]


def _blocks(language: str) -> list[str]:
    return [
        block
        for page in PAGES
        for block in re.findall(rf"```{language}\n(.*?)```", page.read_text(), flags=re.S)
    ]


@pytest.mark.parametrize(
    "index",
    [
        # a block that uses Spark starts the shared session: slow, like every Spark test
        pytest.param(k, marks=[pytest.mark.slow, pytest.mark.spark] if "spark" in block else [])
        for k, block in enumerate(_blocks("python"))
    ],
)
def test_readme_python_example_runs(index, tmp_path, monkeypatch, capsys, request):
    monkeypatch.chdir(tmp_path)
    if "spark" in _blocks("python")[index]:
        request.getfixturevalue("spark")  # the suite's shared session (skips without PySpark)
    exec(compile(_blocks("python")[index], f"README.md python block {index}", "exec"), {})
    out = capsys.readouterr().out
    if "print(sorted(result.items))" in _blocks("python")[index]:
        assert "['a', 'the']" in out  # the output the README promises


def _run_cli_block(block: str, capsys) -> None:
    commands = re.sub(r"\\\n\s*", " ", block).splitlines()
    for line in commands:
        line = line.split("#")[0].strip()
        if not line.startswith("userdp "):
            continue
        argv = shlex.split(line)[1:]
        if ">" in argv:  # shell redirection: main() writes to stdout, which capsys holds
            argv = argv[: argv.index(">")]
        code = main(argv)
        assert code == 0, (line, capsys.readouterr().err)


def test_readme_cli_block_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _run_cli_block(
        next(b for b in _blocks("bash") if "userdp generate zipf pairs.csv --users" in b), capsys
    )
    assert (tmp_path / "items.parquet").exists()


def test_readme_spark_cli_block_runs(spark_defaults, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _run_cli_block(next(b for b in _blocks("bash") if "--engine spark" in b), capsys)
    assert (tmp_path / "released.parquet" / "_SUCCESS").exists()


def test_readme_spark_recommend_cli_block_runs(spark, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    block = next(b for b in _blocks("bash") if "recommend train" in b and "--engine spark" in b)
    _run_cli_block(block, capsys)
    assert (tmp_path / "model.npz").exists()


def test_readme_recommend_cli_block_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _run_cli_block(next(b for b in _blocks("bash") if "userdp recommend train" in b), capsys)
    assert (tmp_path / "model.npz").exists()
    out = capsys.readouterr().out
    assert "global-mean" in out and "adadpals" in out  # the evaluate table


def test_readme_estimate_cli_block_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _run_cli_block(next(b for b in _blocks("bash") if "userdp estimate mean" in b), capsys)
    assert (tmp_path / "model.json").exists()


def test_readme_aggregate_cli_block_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _run_cli_block(next(b for b in _blocks("bash") if "userdp aggregate" in b), capsys)
    assert (tmp_path / "per_item.csv").exists()
