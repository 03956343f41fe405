"""userdp: user-level differential privacy by adaptive weighting.

The privacy core (:mod:`userdp.privacy`), the contributions table (:mod:`userdp.data`) and
private partition selection (:mod:`userdp.partition`); the other capabilities live in
:mod:`userdp.estimate`, :mod:`userdp.multitask`, :mod:`userdp.recommend` and
:mod:`userdp.aggregate` (private GROUP BY).

The names below are re-exported lazily (PEP 562): ``import userdp.privacy`` or ``userdp --version``
loads no capability, and ``from userdp import select_partitions`` imports partition selection
only then. The table is static, so every public name is listed here and in ``__all__``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from userdp.exceptions import (
    BudgetExceededError,
    DataError,
    InvalidParameterError,
    NotFittedError,
    UnsupportedEventError,
    UserDPError,
)

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from userdp.aggregate import AggregatePlan, AggregateResult, aggregate, aggregate_plan
    from userdp.data import Contributions, read
    from userdp.partition import SelectionResult, select_partitions
    from userdp.privacy import NoiseSource, PrivacyAccountant, PrivacyBudget
    from userdp.sql import sql

__version__ = "0.1.0"

#: public name -> module that defines it
_LAZY = {
    "AggregatePlan": "userdp.aggregate",
    "AggregateResult": "userdp.aggregate",
    "aggregate": "userdp.aggregate",
    "aggregate_plan": "userdp.aggregate",
    "Contributions": "userdp.data",
    "read": "userdp.data",
    "SelectionResult": "userdp.partition",
    "select_partitions": "userdp.partition",
    "NoiseSource": "userdp.privacy",
    "PrivacyAccountant": "userdp.privacy",
    "PrivacyBudget": "userdp.privacy",
    "sql": "userdp.sql",
}

__all__ = [
    "AggregatePlan",
    "AggregateResult",
    "BudgetExceededError",
    "Contributions",
    "DataError",
    "InvalidParameterError",
    "NoiseSource",
    "NotFittedError",
    "PrivacyAccountant",
    "PrivacyBudget",
    "SelectionResult",
    "UnsupportedEventError",
    "UserDPError",
    "__version__",
    "aggregate",
    "aggregate_plan",
    "read",
    "select_partitions",
    "sql",
]


def __getattr__(name: str) -> Any:
    try:
        module = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'userdp' has no attribute {name!r}") from None
    imported = importlib.import_module(module)
    # a package that shares its function's name (``aggregate``, ``sql``) is itself callable as
    # that function: the name stays bound to the package, whatever was imported first, so
    # ``import userdp.aggregate as m`` always gives the package
    value = imported if module == f"{__name__}.{name}" else getattr(imported, name)
    globals()[name] = value  # cache: later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
