"""The benchmark scripts start (their imports resolve) and share code only through _harness.

Benchmarks are timed and run by hand, never in the suite; this only catches a script broken by
a change elsewhere (a moved helper, a renamed keyword) before someone needs its figures.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
SCRIPTS = sorted(p for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_"))


def test_the_benchmarks_are_found():
    assert {"partition_selection.py", "recommend.py"} <= {p.name for p in SCRIPTS}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_a_benchmark_imports_no_other_benchmark(script):
    tree = ast.parse(script.read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    siblings = {p.stem for p in SCRIPTS} - {script.stem}
    assert not imported & siblings, f"{script.name} imports {sorted(imported & siblings)}"


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_a_benchmark_starts(script):
    done = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout
