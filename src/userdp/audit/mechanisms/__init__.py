"""The releases the auditor knows how to run: every capability's default configuration, and
one configuration per option that changes a sensitivity.

Each :class:`Mechanism` runs one public entry point of userdp on a :class:`Table` with a seed.
Default parameters are the library's defaults (epsilon = 1, delta = 1e-5 where one is needed);
only sizes that the audit data cannot support are reduced, and that is said in ``notes``.
Options that change a declared sensitivity or what is released get their own entry: the
implicit term (``unobserved_weight``), item biases on and off, each centre, convex losses,
federated training, every matrix-factorization method, more selection rounds, the automatic
cap, a privately selected item set, multi-task SSP and noisy gradient descent.

This module is the registry: :data:`MECHANISMS` is assembled here, in :data:`CAPABILITIES`'
order, from one module per capability. Each builds on :mod:`.base` alone (the
:class:`Mechanism` record, the budgets, :func:`audit_table`) and none imports this one, so the
imports form no circle.

Adding a capability
-------------------
A new release (for example a private GROUP BY) gets a module here whose ``mechanisms()``
returns one ``Mechanism(name, capability, run)`` per configuration whose sensitivity differs,
and one entry in :data:`CAPABILITIES`. ``run(table, seed)`` calls the public entry point on the
audit table (``bind`` instead when a public input, such as an item catalogue, must be fixed
from the audited data before any neighbour is built), with ``needs`` naming the table's columns
it reads when they differ from its capability's (:data:`NEEDS`, where the capability is
added). Its noise must go through :class:`~userdp.privacy.NoiseSource`'s helpers (or declare
``grid`` and call ``released``), so that the float check and the replay see it. The mutation
catalogue (``tests/unit/test_audit_mutants.py``) should gain a halved-bound mutant for it.
"""

from __future__ import annotations

from collections.abc import Callable

from userdp.audit.mechanisms import aggregate, estimate, multitask, partition, recommend
from userdp.audit.mechanisms.base import (
    DELTA,
    EPSILON,
    NEEDS,
    RATING_RANGE,
    Mechanism,
    audit_table,
)
from userdp.audit.neighbours import Table

__all__ = [
    "CAPABILITIES",
    "DELTA",
    "EPSILON",
    "MECHANISMS",
    "NEEDS",
    "RATING_RANGE",
    "Mechanism",
    "audit_table",
    "describe_unrunnable",
    "unrunnable",
]

#: Each capability's configurations, in the order the audit runs and lists them.
CAPABILITIES: dict[str, Callable[[], list[Mechanism]]] = {
    "estimate": estimate.mechanisms,
    "partition": partition.mechanisms,
    "multitask": multitask.mechanisms,
    "recommend": recommend.mechanisms,
    "aggregate": aggregate.mechanisms,
}


def _registered() -> dict[str, Mechanism]:
    """Every capability's configurations, by name; a name registered twice is refused."""
    out: dict[str, Mechanism] = {}
    for capability, build in CAPABILITIES.items():
        for m in build():
            if m.name in out:
                raise ValueError(f"Mechanism {m.name!r} is registered twice.")
            if m.capability != capability:
                raise ValueError(f"Mechanism {m.name!r} is not a {capability} configuration.")
            out[m.name] = m
    return out


#: Every audited release, by name.
MECHANISMS: dict[str, Mechanism] = _registered()


def unrunnable(names: list[str], table: Table) -> dict[str, str]:
    """The mechanisms among ``names`` that cannot run on ``table``, each with the reason."""
    return {n: why for n in names if (why := MECHANISMS[n].missing(table))}


def describe_unrunnable(cannot: dict[str, str]) -> str:
    """``cannot`` (from :func:`unrunnable`) in a line, grouped by reason:
    "'a', 'b' (needs a value column); 'c' (needs a value column and features)"."""
    by_reason: dict[str, list[str]] = {}
    for name, why in cannot.items():
        by_reason.setdefault(why, []).append(repr(name))
    return "; ".join(f"{', '.join(names)} ({why})" for why, names in by_reason.items())
