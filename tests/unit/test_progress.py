"""Progress bars of the command line: drawn on a terminal only, counting the work, and never
changing a seeded release."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

from userdp.cli import main
from userdp.cli import options as cli_options

AUDIT = ["audit", "--mechanism", "weighted_mean", "--users", "40", "--max-removals", "2"]
AUDIT_RUNS = [*AUDIT, "--epsilon-runs", "30", "--json"]


class _Terminal(io.StringIO):
    """A stderr that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_the_helper_is_disabled_when_stderr_is_not_a_terminal(monkeypatch):
    piped = io.StringIO()
    monkeypatch.setattr(sys, "stderr", piped)
    assert not cli_options.on_terminal()
    bar = cli_options.counting(10, desc="runs", unit="run")
    assert bar.disable
    bar.update(3)
    bar.close()
    assert piped.getvalue() == ""


def test_the_helper_counts_with_a_total_on_a_terminal(monkeypatch):
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert cli_options.on_terminal()
    bar = cli_options.counting(10, desc="runs", unit="run")
    assert not bar.disable
    assert bar.total == 10
    bar.update(4)
    assert bar.n == 4
    bar.close()
    assert "runs" in terminal.getvalue()
    assert "/10" in terminal.getvalue()


def test_quiet_turns_the_bar_off_even_on_a_terminal(monkeypatch):
    monkeypatch.setattr(sys, "stderr", _Terminal())
    assert not cli_options.on_terminal(quiet=True)
    assert cli_options.counting(10, desc="runs", unit="run", quiet=True).disable


def test_a_closed_or_odd_stderr_gets_no_bar(monkeypatch):
    closed = io.StringIO()
    closed.close()
    monkeypatch.setattr(sys, "stderr", closed)
    assert not cli_options.on_terminal()
    monkeypatch.setattr(sys, "stderr", object())
    assert not cli_options.on_terminal()


def test_counting_callbacks_make_one_bar_per_kind_of_work(monkeypatch):
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    progress = cli_options.Counting()
    progress("mechanisms", 0, 2)
    assert progress.bar.total == 2
    progress("mechanisms", 2, 2)
    assert progress.bar.n == 2
    progress("runs", 0, 60)
    assert (progress.what, progress.bar.total) == ("runs", 60)
    progress("runs", 60, 60)
    progress.close()
    assert progress.bar is None
    assert "runs" in terminal.getvalue()


def test_the_stage_bar_follows_the_same_rule(monkeypatch):
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert not cli_options.Progress.wanted(False, 10**12)
    monkeypatch.setattr(sys, "stderr", _Terminal())
    assert cli_options.Progress.wanted(False, 10**12)
    assert not cli_options.Progress.wanted(True, 10**12)
    progress = cli_options.Progress(["read", "select"], enabled=True)
    with progress.stage("read"):
        pass
    assert progress.bar.n == 1
    progress.close()


def _bounds(out: str) -> dict[str, object]:
    """The report without its timing: the sensitivity rows and the epsilon bounds."""
    report = json.loads(out)
    del report["seconds"]
    assert report["epsilon_lower_bounds"]
    return report


def test_the_audit_counts_its_runs_on_a_terminal_and_the_report_is_unchanged(monkeypatch, capsys):
    assert main(AUDIT_RUNS) == 0
    out, err = capsys.readouterr()
    assert "run/s" not in err and "\r" not in err  # not a terminal: no bar
    plain = _bounds(out)

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    assert main(AUDIT_RUNS) == 0
    out, err = capsys.readouterr()
    assert "runs" in err and "/60" in err  # 30 runs per side of the mean's experiment
    assert _bounds(out) == plain  # the bar draws no randomness


def test_a_cli_run_with_piped_stderr_prints_no_bar(tmp_path: Path):
    src = Path(__file__).resolve().parents[2] / "src"
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run(
        [sys.executable, "-m", "userdp", *AUDIT_RUNS],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "\r" not in done.stderr
    assert "run/s" not in done.stderr and "it/s" not in done.stderr
    assert "mechanisms" not in done.stderr
