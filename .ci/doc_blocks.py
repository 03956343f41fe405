"""Run every ```python block of README.md and docs/*.md with this interpreter, as a user would.

CI runs it with the Python of a fresh virtual environment made by README's install command
(``pip install .``, no extras), so a block that needs a package the install does not bring
fails here. Blocks that use Spark (the word ``spark`` in the block) need the ``spark`` extra and
Java, and are skipped; the test suite runs them (tests/integration/test_readme.py).

Each block runs as its own script in its own empty temporary directory (files it writes go
there). Exit status 0 if every block ran, 1 if one failed (each failure is named, with its
output); 2 if no block was found.

Usage: python .ci/doc_blocks.py [PAGE.md ...]   (default: README.md and docs/*.md)
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_BLOCK = re.compile(r"^```python\n(.*?)^```", flags=re.S | re.M)


def blocks(page: Path) -> list[tuple[int, str]]:
    """The python blocks of ``page`` with the line number of their opening fence."""
    text = page.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in _BLOCK.finditer(text)]


def run_block(source: str) -> subprocess.CompletedProcess[str]:
    """Run ``source`` as a script in a new temporary directory with this interpreter."""
    with tempfile.TemporaryDirectory(prefix="userdp-doc-block-") as tmp:
        script = Path(tmp) / "block.py"
        script.write_text(source, encoding="utf-8")
        return subprocess.run(
            [sys.executable, script.name],
            cwd=tmp,
            capture_output=True,
            text=True,
            check=False,
        )


def main(argv: list[str]) -> int:
    """Run the blocks of the pages in ``argv`` (default README.md and docs/*.md)."""
    pages = [Path(p) for p in argv] or [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    failed, ran, skipped = [], 0, 0
    for page in pages:
        name = page.resolve().relative_to(ROOT) if page.resolve().is_relative_to(ROOT) else page
        for line, source in blocks(page):
            where = f"{name}:{line}"
            if "spark" in source:
                print(f"skipped {where} (uses Spark: pip install 'userdp[spark]' and Java)")
                skipped += 1
                continue
            done = run_block(source)
            if done.returncode == 0:
                print(f"ok      {where}")
                ran += 1
            else:
                print(f"FAILED  {where} (exit status {done.returncode}):")
                print(done.stdout + done.stderr, end="")
                failed.append(where)
    if not (ran or failed):
        print("no python block found", file=sys.stderr)
        return 2
    print(f"{ran} python blocks ran, {len(failed)} failed, {skipped} skipped (Spark)")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
