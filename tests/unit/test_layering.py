"""Import layering: the privacy core and the data layer do not depend on capabilities above them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "userdp"


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> set[str]:
    """Absolute names of every module imported anywhere in the file (relative ones resolved)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            found.add(mod)
            found.update(f"{mod}.{alias.name}" for alias in node.names)
    return found


MODULES = sorted(SRC.rglob("*.py"))


def userdp_subpackage(name: str) -> str | None:
    parts = name.split(".")
    if parts[0] != "userdp" or len(parts) < 2:
        return None
    return f"userdp.{parts[1]}"


def test_the_source_tree_is_found():
    names = {module_name(p) for p in MODULES}
    assert {"userdp.privacy.calibrate", "userdp.data.contributions"} <= names


def test_import_walker_resolves_relative_and_absolute_imports():
    # The walker itself must see both forms, or the layering tests could pass vacuously.
    found = imported_modules(SRC / "partition" / "select.py")
    assert "userdp.privacy" in found and "userdp.data" in found


@pytest.mark.parametrize(
    "path", [p for p in MODULES if module_name(p).startswith("userdp.privacy")], ids=str
)
def test_privacy_imports_no_other_userdp_subpackage(path):
    allowed = {"userdp.privacy", "userdp._validation", "userdp.exceptions"}
    bad = {
        m
        for m in imported_modules(path)
        if (sub := userdp_subpackage(m)) is not None and sub not in allowed
    }
    assert not bad, f"{module_name(path)} imports {sorted(bad)}"


@pytest.mark.parametrize(
    "path", [p for p in MODULES if module_name(p).startswith("userdp.data")], ids=str
)
def test_data_does_not_import_partition_or_cli(path):
    bad = {
        m
        for m in imported_modules(path)
        if userdp_subpackage(m) in {"userdp.partition", "userdp.cli"}
    }
    assert not bad, f"{module_name(path)} imports {sorted(bad)}"


@pytest.mark.parametrize(
    "path",
    [p for p in MODULES if module_name(p).startswith(("userdp.recommend", "userdp.multitask"))],
    ids=str,
)
def test_recommend_and_multitask_do_not_import_partition_or_the_cli(path):
    # The recommenders take a privately selected item set as a released value (ItemSet); the
    # selection runs in the caller (the CLI or the user's script), never inside recommend/.
    forbidden = {"userdp.partition", "userdp.cli"}
    if module_name(path).startswith("userdp.multitask"):
        forbidden.add("userdp.recommend")
    bad = {m for m in imported_modules(path) if userdp_subpackage(m) in forbidden}
    assert not bad, f"{module_name(path)} imports {sorted(bad)}"
