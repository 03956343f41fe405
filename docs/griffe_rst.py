"""Griffe extension for the docs site: the docstrings' Sphinx markup, rewritten as Markdown.

The docstrings are written for ``help()`` and Sphinx-style readers, with reST roles
(``:func:`select_partitions```, ``:class:`~userdp.privacy.PrivacyAccountant```) and directives
(``.. note::``, ``.. warning::``). mkdocstrings renders docstrings as Markdown, where that
markup shows as text. This extension (mkdocs.yml, the python handler's ``extensions``) rewrites
every docstring of the package after griffe loads it, before mkdocstrings renders it:

- a role whose target resolves (in the docstring's scope, as Sphinx resolves it) to an object
  that an API page renders becomes an autorefs cross-reference, ``[`text`][identifier]``;
  any other role (a private helper, a submodule the pages do not show, ``None``, a NumPy name)
  becomes inline code, ``` `text` ```, so that no link can break the strict build;
- a directive becomes a Markdown admonition (``!!! note``), its body indented under it.

The docstrings stay as they are in the source. The rewriting itself (:func:`rewrite`) needs
no griffe, so tests/unit/test_docs_griffe_rst.py tests it without the docs extra.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

try:
    from griffe import Extension
except ImportError:  # the unit tests of :func:`rewrite` run without the docs extra
    Extension = object  # type: ignore[assignment,misc]

#: A role: ``:func:`target```, ``:py:meth:`~a.b```, ``:class:`title <target>```.
ROLE = re.compile(r":(?:py:)?(?P<role>[a-z]+):`(?P<body>[^`]+)`")
#: A directive's first line: ``.. note::`` with an optional argument.
DIRECTIVE = re.compile(r"^(?P<indent>[ \t]*)\.\. (?P<kind>[a-z][a-z-]*)::[ \t]*(?P<arg>.*)$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_TITLED = re.compile(r"^(?P<title>.*?)\s*<(?P<target>[^<>]+)>$", flags=re.S)

Resolver = Callable[[str], "str | None"]


def _role(match: re.Match[str], resolve: Resolver) -> str:
    """One role as Markdown: a cross-reference if ``resolve`` finds its target, else code."""
    body = " ".join(match.group("body").split())
    titled = _TITLED.match(body)
    if titled and titled.group("title"):
        text, target = titled.group("title"), titled.group("target").strip()
    else:
        target = body
        text = body.lstrip("~!")
        if body.startswith("~"):
            text = text.rsplit(".", 1)[-1]
    if target.startswith("!"):  # Sphinx: no link
        return f"`{text}`"
    identifier = resolve(target.lstrip("~"))
    return f"[`{text}`][{identifier}]" if identifier else f"`{text}`"


def _admonition(kind: str, arg: str, body: list[str], indent: str) -> list[str]:
    """A directive as a Markdown admonition at ``indent``.

    reST puts the text after ``::`` in the body's first paragraph; here it is the admonition's
    title when it stands alone (the body starts a new sentence with a capital letter, as in
    ``.. note:: Erratum``), else the body's first line.
    """
    lines = [line[len(indent) :].strip() if line.strip() else "" for line in body]
    while lines and not lines[-1]:
        lines.pop()
    first = next((line for line in lines if line), "")
    if arg and (not first or first[0].isupper()) and lines and lines[0]:
        head = f'{indent}!!! {kind} "{arg}"'
    else:
        head = f"{indent}!!! {kind}"
        lines = [arg, *lines] if arg else lines
    return [head, *(f"{indent}    {line}" if line else "" for line in lines)]


def _directives(lines: list[str]) -> list[str]:
    """``lines`` with each directive (and its indented body) as an admonition."""
    out: list[str] = []
    i, fenced = 0, False
    while i < len(lines):
        line = lines[i]
        if _FENCE.match(line):
            fenced = not fenced
        directive = None if fenced else DIRECTIVE.match(line)
        if not directive:
            out.append(line)
            i += 1
            continue
        indent = directive.group("indent")
        body: list[str] = []
        i += 1
        while i < len(lines):
            nxt = lines[i]
            deeper = len(nxt) - len(nxt.lstrip()) > len(indent)
            if nxt.strip() and not deeper:
                break
            if not nxt.strip():  # a blank line ends the body unless an indented line follows
                rest = next((x for x in lines[i:] if x.strip()), "")
                if len(rest) - len(rest.lstrip()) <= len(indent):
                    break
            body.append(nxt)
            i += 1
        out.extend(
            _admonition(directive.group("kind"), directive.group("arg").strip(), body, indent)
        )
    return out


def rewrite(text: str, resolve: Resolver) -> str:
    """``text`` (a docstring) with its reST roles and directives as Markdown.

    ``resolve`` maps a role's target as written (``select_partitions``, ``.summary``,
    ``userdp.privacy.PrivacyAccountant``) to the identifier of the object an API page renders,
    or None when no page renders it. Code blocks (fenced) are left as they are.
    """
    joined = "\n".join(_directives(text.split("\n")))
    # Roles, outside fenced blocks: split on the fences and rewrite the parts between them.
    parts = re.split(r"(^\s*(?:```|~~~).*?^\s*(?:```|~~~)[^\n]*$)", joined, flags=re.S | re.M)
    return "".join(
        part if index % 2 else ROLE.sub(lambda m: _role(m, resolve), part)
        for index, part in enumerate(parts)
    )


def documented_roots(docs_dir: Path) -> list[str]:
    """The objects that the pages under ``docs_dir`` render (their ``::: identifier`` lines)."""
    roots: list[str] = []
    for page in sorted(docs_dir.rglob("*.md")):
        for match in re.finditer(r"^::: *(\S+)", page.read_text(encoding="utf-8"), flags=re.M):
            roots.append(match.group(1))
    return roots


def _rendered(obj: Any, identifier: str) -> Iterator[tuple[Any, str]]:
    """``obj`` and the members mkdocstrings renders under it, with their page identifiers.

    As configured in mkdocs.yml: public names (``!^_``), a docstring (own or a member's), no
    inherited members, no submodules, imported objects only if exported (``__all__``).
    """
    yield obj, identifier
    for name, member in obj.members.items():
        try:
            if name.startswith("_") or member.is_module or member.inherited:
                continue
            if not member.has_docstrings or (member.is_imported and not member.is_public):
                continue
            target = member.final_target if member.is_alias else member
        except Exception:  # an alias griffe cannot resolve: not rendered
            continue
        if target.is_class or target.is_function or target.is_attribute:
            yield from _rendered(target, f"{identifier}.{name}")


def _docstring_owners(obj: Any) -> Iterator[Any]:
    """``obj`` and every object defined (not imported) under it."""
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _docstring_owners(member)


class RstToMarkdown(Extension):  # type: ignore[misc,valid-type]
    """Rewrite the package's docstrings (see the module docstring) once griffe loads it."""

    def __init__(self, docs_dir: str = "docs") -> None:
        """``docs_dir``: where the pages with ``::: identifier`` lines are (mkdocs.yml's)."""
        super().__init__()
        self.docs_dir = Path(docs_dir)

    def on_package(self, *, pkg: Any, loader: Any, **kwargs: Any) -> None:
        """Rewrite every docstring of ``pkg``."""
        docs_dir = self.docs_dir
        if not docs_dir.is_absolute():
            docs_dir = Path(__file__).resolve().parent.parent / docs_dir
        pages: dict[str, str] = {}  # canonical path -> identifier on the API pages
        for root in documented_roots(docs_dir):
            if root.split(".")[0] != pkg.name:
                continue
            try:
                obj = loader.modules_collection[root]
            except KeyError:
                continue
            for rendered, identifier in _rendered(obj, root):
                pages.setdefault(rendered.path, identifier)
                pages.setdefault(identifier, identifier)
        for owner in _docstring_owners(pkg):
            if owner.docstring is not None:
                resolver = _resolver(owner, loader, pages)
                owner.docstring.value = rewrite(owner.docstring.value, resolver)


def _canonical(path: str, loader: Any) -> str | None:
    """The canonical path of the object at ``path`` (aliases followed), or None."""
    try:
        obj = loader.modules_collection[path]
        return str((obj.final_target if obj.is_alias else obj).path)
    except Exception:  # no such object, or an alias to outside the package
        return None


def _resolver(owner: Any, loader: Any, pages: dict[str, str]) -> Resolver:
    """Resolve role targets in the scope of ``owner`` (Sphinx's order) to page identifiers."""

    def resolve(target: str) -> str | None:
        if target in pages:
            return pages[target]
        if target.startswith("."):  # Sphinx: any object whose path ends so
            ends = sorted(ident for path, ident in pages.items() if path.endswith(target))
            return ends[0] if len(set(ends)) == 1 else None
        head, _, rest = target.partition(".")
        candidates = [target]
        try:  # a name of the docstring's scope or one of its parents' (members, imports)
            resolved = owner.resolve(head)
            candidates.insert(0, f"{resolved}.{rest}" if rest else resolved)
        except Exception:  # not a name of these scopes
            pass
        for candidate in candidates:
            canonical = _canonical(candidate, loader)
            if canonical in pages:
                return pages[canonical]
            if candidate in pages:
                return pages[candidate]
        return None

    return resolve
