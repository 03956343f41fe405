"""The benchmark scripts start (their imports resolve) and share code only through _harness.

Benchmarks are timed and run by hand, never in the suite; this only catches a script broken by
a change elsewhere (a moved helper, a renamed keyword) before someone needs its figures.
"""

from __future__ import annotations

import ast
import json
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


def test_the_recommender_protocol_tunes_on_one_draw_and_scores_another(tmp_path):
    # A tiny end-to-end run of both stages: the tuned parameters come from the tuning draw
    # (generator seed 0) and are the ones the evaluated draw (seed 1) is fitted with.
    script = BENCHMARKS / "recommend_protocol.py"
    common = ["--ratings", "20000", "--quick", "--epsilons", "3.1,20", "--out", str(tmp_path)]
    common += ["--methods", "dpals-tail,adadpals-mu0.25"]
    early = subprocess.run(
        [sys.executable, str(script), "--stage", "evaluate", *common],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert early.returncode != 0 and "--stage tune" in early.stderr
    done = subprocess.run(
        [sys.executable, str(script), "--stage", "all", *common],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert {p.name for p in tmp_path.glob("data_seed*.npz")} == {
        "data_seed0_20000.npz",
        "data_seed1_20000.npz",
    }
    tuned = json.loads((tmp_path / "tuned.json").read_text())
    result = json.loads((tmp_path / "recommend_protocol.json").read_text())
    assert tuned["generator_seed"] == result["draws"]["tune"] != result["draws"]["evaluate"]
    for name in ("dpals-tail", "adadpals-mu0.25"):
        for eps in ("3.1", "20"):
            row, choice = result["rows"][name][eps], tuned["choices"][name][eps]
            assert (row["reg"], row["noise_reg"]) == (choice["reg"], choice["noise_reg"])
            assert row["seeds"] == 2 and row["epsilon_spent"] <= float(eps) + 1e-9
    assert set(result["baselines"]) == {"global-mean", "item-bias", "user+item-bias"}
    # the two targets whose rows ran are judged; the prior's needs "adadpals-eb", not run here
    assert [t["status"] for t in result["targets"]][2] == "NOT RUN"
    assert [t["status"] in ("PASS", "FAIL") for t in result["targets"]][:2] == [True, True]
    assert "user+item-bias" in done.stdout and "Targets" in done.stdout


def test_the_readme_names_every_script_without_quick():
    """benchmarks/README.md said every script takes --quick; five do not, and it names them."""
    head = (BENCHMARKS / "README.md").read_text().split("\n\n")[1]
    without = {p.name for p in SCRIPTS if '"--quick"' not in p.read_text()}
    assert without, "every script takes --quick now: simplify the README's sentence"
    named = {name for name in without if f"`{name}`" in head}
    assert named == without


def test_federated_compares_like_with_like():
    """--quick exited 1: the centralised model had item biases, Algorithm 8 has none."""
    text = (BENCHMARKS / "federated.py").read_text()
    assert '{"biases": False}' in text


def test_the_aggregate_benchmark_quick_mode_runs_without_its_data(tmp_path):
    # No data folder and no PipelineDP: --quick falls back to a small generated Zipf set and
    # still writes userdp's row, its scores and the targets it can judge.
    script = BENCHMARKS / "aggregate.py"
    args = ["--quick", "--skip-pipelinedp", "--movielens-root", str(tmp_path / "absent")]
    done = subprocess.run(
        [sys.executable, str(script), *args, "--out-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((tmp_path / "aggregate.json").read_text())
    assert any("not found, skipped" in n for n in result["notes"])
    (name, data), *_ = result["datasets"].items()
    assert name.startswith("Zipf") and data["true_keys"] > 0
    row = data["by_epsilon"]["1.0"]["userdp"]
    assert 0 < row["keys"]["mean"] <= data["true_keys"]
    for metric in ("users", "mean"):
        assert row[metric]["total_abs_error"]["mean"] > 0
    assert "Targets" in done.stdout
