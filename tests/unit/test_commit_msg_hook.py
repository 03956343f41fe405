"""The ``commit-msg`` hook (``.githooks/commit-msg``): its exit status on good and bad messages,
and the two ways docs/development.md says to install it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
HOOK = ROOT / ".githooks" / "commit-msg"


def run_hook(tmp_path: Path, message: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "COMMIT_EDITMSG"
    path.write_text(message, encoding="utf-8")
    return subprocess.run(
        [sys.executable, str(HOOK), str(path)], capture_output=True, text=True, check=False
    )


BODY = "The body says why: the reason a reader of the diff cannot see.\n"


@pytest.mark.parametrize(
    "message",
    [
        f"Split the audit configurations by capability\n\n{BODY}",
        "x" * 72 + f"\n\n{BODY}",
        "Subject only, no body\n",
        f"\n\nLeading blank lines, as git drops them\n\n{BODY}",
        # git's template: comment lines are not part of the message, however long
        f"# {'c' * 100}\nSubject after a comment\n# a comment line\n\n{BODY}",
        # git commit -v: the diff below the scissors line is not part of the message
        (
            f"Subject\n\n{BODY}# ------------------------ >8 ------------------------\n"
            f"diff --git a/x b/x\n{'+' * 100}\n"
        ),
        "",  # git refuses an empty message itself
    ],
    ids=[
        "subject-body",
        "72-chars",
        "subject-only",
        "leading-blank",
        "comments",
        "scissors",
        "empty",
    ],
)
def test_the_hook_accepts_a_well_formed_message(tmp_path, message):
    done = run_hook(tmp_path, message)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        ("x" * 73 + f"\n\n{BODY}", "73 characters, more than 72"),
        ("x" * 120 + "\n", "120 characters"),
        (f"Subject\n{BODY}", "followed by a blank line"),
        (f"# comment\nSubject\n{BODY}", "followed by a blank line"),
    ],
    ids=["73-chars", "long-subject-only", "no-blank-line", "no-blank-line-after-comment"],
)
def test_the_hook_refuses_a_long_subject_or_a_missing_blank_line(tmp_path, message, reason):
    done = run_hook(tmp_path, message)
    assert done.returncode == 1
    assert reason in done.stderr


def test_the_hook_reports_both_problems_at_once(tmp_path):
    done = run_hook(tmp_path, "y" * 80 + f"\n{BODY}")
    assert done.returncode == 1
    assert "80 characters" in done.stderr and "blank line" in done.stderr


def test_the_hook_runs_as_git_runs_it(tmp_path):
    """Executable, with a shebang: git runs ``.githooks/commit-msg FILE`` directly."""
    assert HOOK.stat().st_mode & 0o111
    assert HOOK.read_text(encoding="utf-8").startswith("#!/usr/bin/env python3\n")
    if sys.platform == "win32":
        pytest.skip("no shebangs")
    path = tmp_path / "msg"
    path.write_text("z" * 73 + "\n", encoding="utf-8")
    assert subprocess.run([str(HOOK), str(path)], capture_output=True, check=False).returncode == 1


def test_pre_commit_installs_the_hook_at_the_commit_msg_stage():
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text(encoding="utf-8"))
    assert "commit-msg" in config["default_install_hook_types"]
    hooks = [h for repo in config["repos"] for h in repo["hooks"]]
    (hook,) = [h for h in hooks if h.get("entry") == ".githooks/commit-msg"]
    assert hook["stages"] == ["commit-msg"]


def test_the_development_guide_states_the_rule_and_how_to_install_the_hook():
    text = (ROOT / "docs" / "development.md").read_text(encoding="utf-8")
    assert "## Commit messages" in text
    assert "at most 72 characters" in text
    assert "git config core.hooksPath .githooks" in text
