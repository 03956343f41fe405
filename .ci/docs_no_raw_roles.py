"""Fail if the built documentation site shows raw reStructuredText roles or directives as text.

The docstrings use Sphinx markup (``:func:`select_partitions```, ``.. note::``); the site's
build rewrites it (docs/griffe_rst.py). A role or directive that reaches a page unrewritten
shows as text, e.g. ":func:" followed by code, or a paragraph starting ".. note::". This scans
the text of every HTML page of a built site, with each inline code element put back between
backticks and code blocks (``<pre>``, meant to show markup as is) left out, and names each page
with raw markup and how many times it occurs.

Exit status 0 if no page has any, 1 if one does, 2 if the folder holds no HTML page.

Usage: python .ci/docs_no_raw_roles.py SITE_DIR
"""

from __future__ import annotations

import re
import sys
from html.parser import HTMLParser
from pathlib import Path

ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|attr|data|obj|exc|ref|const|term|doc|math):`")
DIRECTIVE = re.compile(r"^[ \t]*\.\. [a-z][a-z-]*::", flags=re.M)
_BLOCK_TAGS = frozenset(
    "p li div dd dt td th tr h1 h2 h3 h4 h5 h6 br hr table ul ol dl section details summary "
    "blockquote".split()
)


class _PageText(HTMLParser):
    """The text of a page, a line per block element, inline code between backticks, no <pre>."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._pre = 0
        self._code = 0
        self._skip = 0  # <script>, <style>

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "pre":
            self._pre += 1
        elif tag in ("script", "style"):
            self._skip += 1
        elif tag == "code" and not self._pre:
            self._code += 1
            self.parts.append("`")
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "pre":
            self._pre = max(0, self._pre - 1)
            self.parts.append("\n")
        elif tag in ("script", "style"):
            self._skip = max(0, self._skip - 1)
        elif tag == "code" and not self._pre and self._code:
            self._code -= 1
            self.parts.append("`")
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._pre or self._skip:
            return
        # Backticks inside inline code are the code's own: drop them, so that markup shown
        # on purpose in code (``:func:`x```) does not read as a role here.
        self.parts.append(data.replace("`", "") if self._code else data)


def page_text(html: str) -> str:
    """The text of ``html`` as the check reads it (see :class:`_PageText`)."""
    parser = _PageText()
    parser.feed(html)
    parser.close()
    return "".join(parser.parts)


def raw_markup(html: str) -> list[str]:
    """Each raw role or directive in the text of ``html``, in page order."""
    text = page_text(html)
    return [m.group(0).strip() for m in (*ROLE.finditer(text), *DIRECTIVE.finditer(text))]


def main(argv: list[str]) -> int:
    """Check the site folder ``argv[0]``; print each page with raw markup and its count."""
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    site = Path(argv[0])
    pages = sorted(site.rglob("*.html"))
    if not pages:
        print(f"no HTML page under {site}", file=sys.stderr)
        return 2
    total = 0
    for page in pages:
        found = raw_markup(page.read_text(encoding="utf-8"))
        if found:
            kinds = ", ".join(sorted(set(found)))
            print(f"{page.relative_to(site)}: {len(found)} raw reST roles/directives ({kinds})")
            total += len(found)
    if total:
        print(f"{total} raw reST roles/directives on the built pages", file=sys.stderr)
        return 1
    print(f"no raw reST role or directive on {len(pages)} pages")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
