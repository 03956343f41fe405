"""``.ci/doc_blocks.py``, CI's run of the documentation's python blocks after a plain install:
it runs each block on its own, names the one that fails, and skips the Spark ones."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("doc_blocks", ROOT / ".ci" / "doc_blocks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _page(tmp_path: Path, *blocks: str) -> Path:
    page = tmp_path / "page.md"
    text = "# A page\n\nSome words.\n\n"
    text += "\n".join(f"```python\n{b}```\n\nMore words.\n" for b in blocks)
    text += "\n```bash\nexit 1\n```\n"  # not python: never run
    page.write_text(text)
    return page


def test_blocks_are_those_the_readme_test_runs():
    from .test_readme import PAGES, _blocks  # the suite's own extraction

    found = [source for page in PAGES for _, source in _script().blocks(page)]
    assert found == _blocks("python")


def test_every_block_runs_on_its_own_in_an_empty_directory(tmp_path, capsys):
    page = _page(
        tmp_path,
        "import os\nassert os.listdir('.') == ['block.py']\nx = 1\n",
        "assert 'x' not in globals()\nopen('out.txt', 'w').write('written')\n",
    )
    assert _script().main([str(page)]) == 0
    out = capsys.readouterr().out
    assert out.count("ok      ") == 2
    assert not (tmp_path / "out.txt").exists()


def test_a_failing_block_fails_the_run_and_is_named_with_its_line(tmp_path, capsys):
    page = _page(tmp_path, "print('fine')\n", "import no_such_module_anywhere\n")
    assert _script().main([str(page)]) == 1
    captured = capsys.readouterr()
    assert f"FAILED  {page}:11" in captured.out  # the second block's opening fence
    assert "No module named 'no_such_module_anywhere'" in captured.out
    assert f"failed: {page}:11" in captured.err


def test_spark_blocks_are_skipped(tmp_path, capsys):
    page = _page(tmp_path, "from userdp.spark import spark_session\nraise SystemExit(3)\n", "1\n")
    assert _script().main([str(page)]) == 0
    assert "skipped" in capsys.readouterr().out


def test_a_page_without_python_blocks_is_an_error(tmp_path):
    assert _script().main([str(_page(tmp_path))]) == 2
