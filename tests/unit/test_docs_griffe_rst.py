"""docs/griffe_rst.py (docstring reST as Markdown) and .ci/docs_no_raw_roles.py, without griffe."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and typing look the module up by name
    spec.loader.exec_module(module)
    return module


rst = _load("_docs_griffe_rst", ROOT / "docs" / "griffe_rst.py")
check = _load("_docs_no_raw_roles", ROOT / ".ci" / "docs_no_raw_roles.py")

PAGES = {
    "select_partitions": "userdp.partition.select_partitions",
    "userdp.privacy.PrivacyAccountant": "userdp.privacy.PrivacyAccountant",
    "SelectionResult.summary": "userdp.partition.SelectionResult.summary",
}


def resolve(target):
    return PAGES.get(target)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (":func:`select_partitions`", "[`select_partitions`][userdp.partition.select_partitions]"),
        (
            ":class:`~userdp.privacy.PrivacyAccountant`",
            "[`PrivacyAccountant`][userdp.privacy.PrivacyAccountant]",
        ),
        (
            ":meth:`the summary <SelectionResult.summary>`",
            "[`the summary`][userdp.partition.SelectionResult.summary]",
        ),
        (
            ":py:func:`select_partitions`",
            "[`select_partitions`][userdp.partition.select_partitions]",
        ),
        (":func:`_private_helper`", "`_private_helper`"),  # no page renders it: code, no link
        (":data:`None`", "`None`"),
        (":func:`!select_partitions`", "`select_partitions`"),  # Sphinx's "no link"
        (":mod:`~userdp.partition.api`", "`api`"),
        (
            "Uses :func:`select_partitions` and\n:class:`numpy.random.Generator`.",
            (
                "Uses [`select_partitions`][userdp.partition.select_partitions] and\n"
                "`numpy.random.Generator`."
            ),
        ),
    ],
)
def test_roles_become_cross_references_or_code(text, expected):
    assert rst.rewrite(text, resolve) == expected


def test_a_role_split_over_two_lines_is_one_reference():
    text = ":meth:`the\n    summary <SelectionResult.summary>`"
    assert rst.rewrite(text, resolve) == "[`the summary`][userdp.partition.SelectionResult.summary]"


def test_a_directive_with_a_title_becomes_a_titled_admonition():
    text = "Intro.\n\n.. note:: Erratum\n   Alg. 4 line 4 prints delta.\n   Fixed here.\n\nAfter."
    assert rst.rewrite(text, resolve) == (
        'Intro.\n\n!!! note "Erratum"\n    Alg. 4 line 4 prints delta.\n    Fixed here.\n\nAfter.'
    )


def test_a_directive_whose_text_runs_on_keeps_it_in_the_body():
    text = (
        "    .. warning:: Not private. Counts of the input, never printed by\n"
        "       :meth:`SelectionResult.summary`.\n"
    )
    assert rst.rewrite(text, resolve) == (
        "    !!! warning\n"
        "        Not private. Counts of the input, never printed by\n"
        "        [`SelectionResult.summary`][userdp.partition.SelectionResult.summary].\n"
    )


def test_a_directive_body_may_hold_blank_lines_and_ends_at_the_dedent():
    text = ".. note::\n\n   First.\n\n   Second.\nOutside."
    assert rst.rewrite(text, resolve) == "!!! note\n\n    First.\n\n    Second.\nOutside."


def test_fenced_code_is_left_as_it_is():
    text = "Write\n\n```rst\n:func:`x`\n.. note:: y\n```\n\n:func:`select_partitions`"
    assert rst.rewrite(text, resolve) == (
        "Write\n\n```rst\n:func:`x`\n.. note:: y\n```\n\n"
        "[`select_partitions`][userdp.partition.select_partitions]"
    )


def test_documented_roots_are_the_identifier_lines_of_the_pages(tmp_path):
    (tmp_path / "api").mkdir()
    (tmp_path / "api" / "a.md").write_text("# A\n\n::: userdp.partition\n", encoding="utf-8")
    (tmp_path / "b.md").write_text("Text with ::: inside.\n::: userdp.privacy\n", encoding="utf-8")
    assert rst.documented_roots(tmp_path) == ["userdp.partition", "userdp.privacy"]


def test_the_check_counts_raw_roles_and_directives_but_not_code():
    html = (
        "<p>See :func:<code>select_partitions</code> and <code>:func:`x`</code>.</p>"
        "<p>.. note:: Erratum the paper</p>"
        "<pre><code>:class:`Shown` on purpose\n.. warning:: too</code></pre>"
        "<p>A <a href='#x'><code>select_partitions</code></a> link.</p>"
    )
    assert check.raw_markup(html) == [":func:`", ".. note::"]


def test_the_check_names_each_page_and_fails(tmp_path, capsys):
    (tmp_path / "ok.html").write_text("<p><code>fine</code></p>", encoding="utf-8")
    (tmp_path / "api").mkdir()
    (tmp_path / "api" / "bad.html").write_text(
        "<p>:meth:<code>a</code> :mod:<code>b</code></p>", encoding="utf-8"
    )
    assert check.main([str(tmp_path)]) == 1
    assert "bad.html: 2 raw reST roles/directives" in capsys.readouterr().out
    (tmp_path / "api" / "bad.html").unlink()
    assert check.main([str(tmp_path)]) == 0
    assert check.main([str(tmp_path / "missing")]) == 2
