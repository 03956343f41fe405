"""A package that shares its function's name (``userdp.aggregate``, ``userdp.sql``) is the same
object however it is reached, in any import order, and calls as the function."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[2] / "src")

ORDERS = {
    "function first": "from userdp import {n} as f\nimport userdp.{n} as m\n",
    "package first": "import userdp.{n} as m\nfrom userdp import {n} as f\n",
}


@pytest.mark.parametrize("order", list(ORDERS))
@pytest.mark.parametrize(("name", "attribute"), [("aggregate", "METRICS"), ("sql", "sql")])
def test_package_and_function_are_one_object_in_any_import_order(name, attribute, order):
    code = ORDERS[order].format(n=name) + (
        "import inspect, types\n"
        "assert f is m, (f, m)\n"
        "assert isinstance(m, types.ModuleType) and callable(m)\n"
        f"getattr(m, {attribute!r})\n"
        "assert 'epsilon' in inspect.signature(f).parameters\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": SRC, "PATH": ""},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_package_calls_as_its_function():
    import userdp

    rows = {"user": [u for u in range(400) for _ in (0, 1)], "key": ["a", "b"] * 400}
    called = userdp.aggregate(rows, metrics="users", epsilon=1.0, delta=1e-5, seed=3)
    direct = userdp.aggregate.aggregate(rows, metrics="users", epsilon=1.0, delta=1e-5, seed=3)
    assert called.to_arrow().equals(direct.to_arrow())
