"""Import layering, one test per rule:

- the base (``exceptions``, ``_validation``, ``_params``, ``_engines``) imports nothing else of
  userdp: it sits below the privacy core;
- the privacy core imports no capability and no CLI, and importing it loads none;
- the data layer imports no algorithm;
- the capabilities (partition, estimate, recommend) do not import each other;
- multitask does not import recommend (recommend builds on multitask, not the reverse);
- nothing outside the CLI imports the CLI;
- the modules of the data layer, those of recommend and those of audit form no import cycle,
  and each audit module imports alone in a fresh interpreter;
- inside recommend, each subpackage imports only those its rule allows (core < engines <
  families; the two families never each other), and no step module imports an engine.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "userdp"


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, name: str | None = None) -> set[str]:
    """Absolute names of every module imported anywhere in the file (relative ones resolved).

    ``name`` is the file's module name (by default from its place under ``src/userdp``).
    """
    tree = ast.parse(path.read_text(), filename=str(path))
    name = name or module_name(path)
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


#: The base layer: below the privacy core, it imports nothing else of userdp.
BASE = {"userdp.exceptions", "userdp._validation", "userdp._params", "userdp._engines"}


def base_violations(path: Path, name: str | None = None) -> set[str]:
    """The userdp modules a base file imports that are not in the base (lazy imports too)."""
    return {
        m
        for m in imported_modules(path, name)
        if m.split(".")[0] == "userdp" and m not in BASE and m.rpartition(".")[0] not in BASE
    }


@pytest.mark.parametrize("path", [p for p in MODULES if module_name(p) in BASE], ids=str)
def test_the_base_imports_nothing_else_of_userdp(path):
    bad = base_violations(path)
    assert not bad, f"{module_name(path)} imports {sorted(bad)}"


def test_the_base_modules_are_found():
    assert {module_name(p) for p in MODULES} >= BASE


def test_the_base_rule_sees_a_forbidden_import(tmp_path):
    # The budget check the base once held, imported lazily inside a function, must be caught;
    # a name imported from another base module must not.
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from userdp.exceptions import InvalidParameterError\n"
        "from ._validation import check_real\n"
        "def check(value):\n"
        "    from userdp.privacy.budget import PrivacyBudget\n"
        "    import userdp.data\n"
    )
    found = base_violations(probe, "userdp._probe")
    assert found == {"userdp.privacy.budget", "userdp.privacy.budget.PrivacyBudget", "userdp.data"}


ALGORITHMS = {"userdp.partition", "userdp.estimate", "userdp.recommend", "userdp.multitask"}
CAPABILITIES = {"userdp.partition", "userdp.estimate", "userdp.recommend"}


def forbidden_imports(path: Path, forbidden: set[str], name: str | None = None) -> set[str]:
    return {m for m in imported_modules(path, name) if userdp_subpackage(m) in forbidden}


def modules_of(subpackage: str) -> list[Path]:
    return [p for p in MODULES if userdp_subpackage(module_name(p)) == subpackage]


@pytest.mark.parametrize("path", modules_of("userdp.data"), ids=str)
def test_data_imports_no_algorithm_and_no_cli(path):
    bad = forbidden_imports(path, ALGORITHMS | {"userdp.cli"})
    assert not bad, f"{module_name(path)} imports {sorted(bad)}"


@pytest.mark.parametrize("path", [p for c in sorted(CAPABILITIES) for p in modules_of(c)], ids=str)
def test_capabilities_do_not_import_each_other(path):
    own = userdp_subpackage(module_name(path))
    bad = forbidden_imports(path, CAPABILITIES - {own})
    assert not bad, f"{module_name(path)} imports {sorted(bad)}"


@pytest.mark.parametrize("path", modules_of("userdp.multitask"), ids=str)
def test_multitask_imports_no_capability(path):
    bad = forbidden_imports(path, CAPABILITIES)
    assert not bad, f"{module_name(path)} imports {sorted(bad)}"


@pytest.mark.parametrize(
    "path", [p for p in MODULES if userdp_subpackage(module_name(p)) != "userdp.cli"], ids=str
)
def test_only_the_cli_imports_the_cli(path):
    if module_name(path) == "userdp.__main__":  # ``python -m userdp`` runs the CLI
        return
    bad = forbidden_imports(path, {"userdp.cli"})
    assert not bad, f"{module_name(path)} imports {sorted(bad)}"


@pytest.mark.parametrize(
    "path",
    [p for p in MODULES if userdp_subpackage(module_name(p)) not in ("userdp.cli", "userdp.sql")],
    ids=str,
)
def test_only_the_cli_and_the_package_root_import_the_sql_layer(path):
    if module_name(path) in ("userdp", "userdp.__main__"):  # the lazy re-export, the CLI
        return
    bad = forbidden_imports(path, {"userdp.sql"})
    assert not bad, f"{module_name(path)} imports {sorted(bad)}"


@pytest.mark.parametrize("path", modules_of("userdp.sql"), ids=str)
def test_the_sql_layer_builds_on_the_group_by_and_selection_only(path):
    bad = forbidden_imports(path, ALGORITHMS - {"userdp.partition"} | {"userdp.cli"})
    assert not bad, f"{module_name(path)} imports {sorted(bad)}"


def test_the_rules_see_a_forbidden_import(tmp_path):
    # A capability importing another, absolutely or relatively, must be caught, or the rules
    # above could pass vacuously.
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from ..partition import select_partitions\nimport userdp.recommend.als.estimator\n"
    )
    found = forbidden_imports(probe, CAPABILITIES - {"userdp.estimate"}, "userdp.estimate.probe")
    assert {"userdp.partition", "userdp.recommend.als.estimator"} <= found


def test_importing_the_privacy_core_loads_no_capability():
    code = (
        "import sys, userdp.privacy; "
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('userdp'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    loaded = {userdp_subpackage(m) for m in out}
    assert not loaded & (ALGORITHMS | {"userdp.cli", "userdp.data"}), out


# -- inside recommend: no import cycle; the families build on the shared core ----------------
RECOMMEND = {module_name(p): p for p in MODULES if module_name(p).startswith("userdp.recommend.")}
#: recommend's module groups, by idea: one subpackage each. The shared core (the estimators'
#: shared base, the specs, the one noise planner, the empirical-Bayes prior, the item set,
#: centring, the released model, metrics, protocols and the steps both families and the
#: runners share); the engines (where the statistics are computed: the Runner protocol and its
#: factory, the local and Spark runners); the ALS family (MatrixFactorization and its item
#: update); the public-feature family (PublicFeatureRecommender, its steps, its item encoders,
#: the convex losses); the federated protocol of the public-feature recommender.
RECOMMEND_SUBPACKAGES = ("core", "engines", "als", "public", "federated")


def recommend_group(name: str) -> str | None:
    """The group (subpackage) of a recommend module, or None for a module outside them."""
    parts = name.split(".")
    return parts[2] if len(parts) > 2 and parts[2] in RECOMMEND_SUBPACKAGES else None


RECOMMEND_GROUPS = {
    label: {name for name in RECOMMEND if recommend_group(name) == label}
    for label in RECOMMEND_SUBPACKAGES
}
#: What each group may import besides itself: the core builds on nothing in recommend; the
#: engines on the core only (the steps they run where the data live, the allocation weights
#: and the DPSGD item update, are core steps); each family on the core and the engines, never
#: on the other; the federated protocol also on the public-feature family, whose keyword rules
#: and encoder steps it runs between clients, aggregator and server (a real need: it is that
#: recommender, trained by another protocol).
RECOMMEND_ALLOWED = {
    "core": set(),
    "engines": RECOMMEND_GROUPS["core"],
    "als": RECOMMEND_GROUPS["core"] | RECOMMEND_GROUPS["engines"],
    "public": RECOMMEND_GROUPS["core"] | RECOMMEND_GROUPS["engines"],
    "federated": (
        RECOMMEND_GROUPS["core"] | RECOMMEND_GROUPS["engines"] | RECOMMEND_GROUPS["public"]
    ),
}
#: The step modules: what a training step computes from a runner's arrays and released values.
#: They import no engine, so a step cannot touch (or tell) where the data live.
RECOMMEND_STEPS = {
    "userdp.recommend.core.steps",
    "userdp.recommend.als.steps",
    "userdp.recommend.public.steps",
    "userdp.recommend.public.convex",
}
RECOMMEND_CORE = RECOMMEND_GROUPS["core"]
RECOMMEND_FAMILIES = (
    RECOMMEND_GROUPS["als"] | RECOMMEND_GROUPS["public"] | RECOMMEND_GROUPS["federated"]
)


def recommend_graph() -> dict[str, set[str]]:
    """Module -> the recommend modules it imports (anywhere in the file, lazy imports too)."""
    return {
        name: {m for m in imported_modules(path) if m in RECOMMEND and m != name}
        for name, path in RECOMMEND.items()
    }


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of ``graph`` (module -> modules it imports) as a path, or []."""
    state: dict[str, int] = {}
    cycle: list[str] = []

    def visit(node: str, stack: list[str]) -> bool:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycle.extend([*stack[stack.index(nxt) :], nxt] if nxt in stack else [node, nxt])
                return True
            if nxt not in state and visit(nxt, [*stack, nxt]):
                return True
        state[node] = 2
        return False

    for start in sorted(graph):
        if start not in state and visit(start, [start]):
            break
    return cycle


def test_recommend_modules_form_no_import_cycle():
    cycle = find_cycle(recommend_graph())
    assert not cycle, " -> ".join(cycle)


DATA = {module_name(p): p for p in MODULES if module_name(p).startswith("userdp.data.")}


def data_graph() -> dict[str, set[str]]:
    """Module -> the data-layer modules it imports (lazy imports too; a package's
    ``__init__`` is left out: it re-exports its modules and no module imports it back)."""
    inits = {module_name(p) for p in DATA.values() if p.name == "__init__.py"}
    return {
        name: {m for m in imported_modules(path) if m in DATA and m != name and m not in inits}
        for name, path in DATA.items()
    }


def test_data_modules_form_no_import_cycle():
    cycle = find_cycle(data_graph())
    assert not cycle, " -> ".join(cycle)


def test_the_data_cycle_check_sees_the_old_cycle():
    # contributions once imported io lazily for a check while io imported contributions.
    graph = data_graph()
    graph["userdp.data.contributions"] = graph["userdp.data.contributions"] | {"userdp.data.io"}
    assert find_cycle(graph) in (
        ["userdp.data.contributions", "userdp.data.io", "userdp.data.contributions"],
        ["userdp.data.io", "userdp.data.contributions", "userdp.data.io"],
    )


# -- inside audit: no import cycle, and every module imports on its own ----------------------
AUDIT = {module_name(p): p for p in MODULES if module_name(p).startswith("userdp.audit")}


def audit_graph() -> dict[str, set[str]]:
    """Module -> the audit modules it names in an import (lazy imports too, packages'
    ``__init__`` included). A module's parent package, which Python initialises first, is not
    an edge unless the module names it: the parent re-exports its modules, never the reverse."""
    return {
        name: {m for m in imported_modules(path) if m in AUDIT and m != name}
        for name, path in AUDIT.items()
    }


def test_the_audit_modules_are_found():
    assert {"userdp.audit", "userdp.audit.replay", "userdp.audit.report"} <= set(AUDIT)


def test_audit_modules_form_no_import_cycle():
    cycle = find_cycle(audit_graph())
    assert not cycle, " -> ".join(cycle)


def test_the_audit_cycle_check_sees_a_module_importing_its_importer():
    graph = audit_graph()
    importer = next(name for name, deps in sorted(graph.items()) if deps)
    imported = sorted(graph[importer])[0]
    graph[imported] = graph[imported] | {importer}
    assert find_cycle(graph)


@pytest.mark.parametrize("name", sorted(AUDIT))
def test_each_audit_module_imports_alone(name):
    """In a fresh interpreter, so that no module loaded before it hides a circle."""
    done = subprocess.run(
        [sys.executable, "-c", f"import {name}"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


def test_the_recommend_core_imports_no_family():
    graph = recommend_graph()
    bad = {name: graph[name] & RECOMMEND_FAMILIES for name in RECOMMEND_CORE if name in graph}
    assert not {k: v for k, v in bad.items() if v}


def test_every_recommend_module_is_in_one_group():
    """A new module must be placed in a group's subpackage (and so under its rules): nothing
    sits flat in ``userdp.recommend`` but its ``__init__``."""
    placed = [m for group in RECOMMEND_GROUPS.values() for m in group]
    assert len(placed) == len(set(placed))
    assert set(RECOMMEND) == set(placed), set(RECOMMEND) ^ set(placed)
    assert all(RECOMMEND_GROUPS.values()), RECOMMEND_GROUPS
    assert RECOMMEND_STEPS <= set(RECOMMEND)


def test_recommend_steps_import_no_engine():
    graph = recommend_graph()
    bad = {name: sorted(graph[name] & RECOMMEND_GROUPS["engines"]) for name in RECOMMEND_STEPS}
    assert not {k: v for k, v in bad.items() if v}, bad


def test_recommend_groups_import_only_what_their_rules_allow():
    graph = recommend_graph()
    bad = {
        name: sorted(graph[name] - group - RECOMMEND_ALLOWED[label])
        for label, group in RECOMMEND_GROUPS.items()
        for name in group
        if graph.get(name, set()) - group - RECOMMEND_ALLOWED[label]
    }
    assert not bad, bad


def test_the_group_check_sees_one_family_importing_the_other(monkeypatch):
    fake = {name: set() for name in RECOMMEND}
    fake["userdp.recommend.public.estimator"] = {"userdp.recommend.als.steps"}
    monkeypatch.setattr(sys.modules[__name__], "recommend_graph", lambda: fake)
    with pytest.raises(AssertionError, match=r"userdp\.recommend\.als\.steps"):
        test_recommend_groups_import_only_what_their_rules_allow()


def test_the_step_check_sees_a_step_importing_an_engine(monkeypatch):
    fake = {name: set() for name in RECOMMEND}
    fake["userdp.recommend.als.steps"] = {"userdp.recommend.engines.local"}
    monkeypatch.setattr(sys.modules[__name__], "recommend_graph", lambda: fake)
    with pytest.raises(AssertionError, match=r"userdp\.recommend\.engines\.local"):
        test_recommend_steps_import_no_engine()


def test_the_cycle_check_sees_a_cycle(monkeypatch):
    fake = {"a": {"b"}, "b": {"a"}}
    monkeypatch.setattr(sys.modules[__name__], "recommend_graph", lambda: fake)
    monkeypatch.setattr(sys.modules[__name__], "RECOMMEND", fake)
    with pytest.raises(AssertionError, match="a -> b -> a"):
        test_recommend_modules_form_no_import_cycle()


def test_recommend_public_functions_have_type_hints():
    missing = []
    for name, path in RECOMMEND.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
                args = [
                    a for a in node.args.args + node.args.kwonlyargs if a.arg not in ("self", "cls")
                ]
                if node.returns is None or any(a.annotation is None for a in args):
                    missing.append(f"{name}.{node.name}:{node.lineno}")
    assert not missing, missing


# -- one engine resolver: the engine list and the Spark-frame check live in userdp._engines ---
def engine_copies(path: Path) -> list[str]:
    """Lines of ``path`` that define an engine list or test for a Spark frame by type name."""
    return [
        f"{path.name}:{k}: {line.strip()}"
        for k, line in enumerate(path.read_text().splitlines(), 1)
        if line.startswith("ENGINES =") or 'startswith("pyspark' in line
    ]


@pytest.mark.parametrize(
    "path", [p for p in MODULES if module_name(p) != "userdp._engines"], ids=str
)
def test_engine_dispatch_is_written_once(path):
    assert not engine_copies(path)


def test_the_engine_rule_sees_a_copy(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        'ENGINES = ("auto", "local", "spark")\n'
        "def is_spark(d):\n"
        '    return type(d).__module__.startswith("pyspark.sql")\n'
    )
    assert len(engine_copies(probe)) == 2
    assert len(engine_copies(SRC / "_engines.py")) == 2


def test_every_capability_resolves_engines_with_the_one_resolver():
    import importlib

    from userdp import _engines
    from userdp.recommend import engines

    # ``userdp.partition.api`` is shadowed by a function of the same name in its package's
    # namespace: fetch the modules themselves.
    partition_api = importlib.import_module("userdp.partition.api")
    aggregate_api = importlib.import_module("userdp.aggregate.api")
    assert engines.resolve_engine is _engines.resolve_engine
    assert partition_api.ENGINES is aggregate_api.ENGINES is engines.ENGINES is _engines.ENGINES


# -- files cut by idea: none grows past what a reader takes in at once -----------------------
#: The most lines a module of src/userdp may have (docs/development.md, "Code layout").
MAX_LINES = 600


def test_no_module_is_longer_than_the_limit():
    long = {
        str(p.relative_to(SRC)): n
        for p in MODULES
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"over {MAX_LINES} lines (split by idea): {long}"


def private_names_from_other_packages(path: Path, name: str | None = None) -> list[str]:
    """``from userdp.x... import _y`` where ``userdp.x`` is not the file's own subpackage: a
    private name used across packages, which its owner may change without notice."""
    name = name or module_name(path)
    own = userdp_subpackage(name)
    tree = ast.parse(path.read_text(), filename=str(path))
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            if userdp_subpackage(node.module) in (None, own):
                continue
            bad += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    return bad


@pytest.mark.parametrize("path", MODULES, ids=str)
def test_no_module_imports_a_private_name_of_another_package(path):
    bad = private_names_from_other_packages(path)
    assert not bad, f"{module_name(path)} imports {bad}"


def test_the_private_name_rule_sees_one(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("from userdp.partition.select import _budget, LocalRunner\n")
    assert private_names_from_other_packages(f, "userdp.audit.m") == [
        "userdp.partition.select._budget"
    ]
    assert private_names_from_other_packages(f, "userdp.partition.m") == []
