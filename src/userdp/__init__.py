"""userdp: user-level differential privacy by adaptive weighting.

The privacy core (:mod:`userdp.privacy`), the contributions table (:mod:`userdp.data`) and
private partition selection (:mod:`userdp.partition`).

The re-exported names below are imported on first use (PEP 562), so ``import userdp`` and
``userdp --version`` do not pay for NumPy, PyArrow, SciPy and dp-accounting until needed.
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

if TYPE_CHECKING:
    from userdp.data import Contributions, read
    from userdp.partition import SelectionResult, select_partitions
    from userdp.privacy import NoiseSource, PrivacyAccountant, PrivacyBudget

__version__ = "0.1.0"

__all__ = [
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
    "read",
    "select_partitions",
]

#: Where each lazily re-exported name lives (a fixed table, not a generated API).
_LAZY = {
    "Contributions": "userdp.data",
    "read": "userdp.data",
    "SelectionResult": "userdp.partition",
    "select_partitions": "userdp.partition",
    "NoiseSource": "userdp.privacy",
    "PrivacyAccountant": "userdp.privacy",
    "PrivacyBudget": "userdp.privacy",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'userdp' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
