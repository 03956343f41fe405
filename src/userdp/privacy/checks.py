"""Parameter rules for the privacy core's own types: ``accountant=`` and ``budget=``.

They live here, not in the base layer (``userdp._validation``, ``userdp._params``), because
they name :class:`PrivacyAccountant` and :class:`PrivacyBudget`: the base sits below the core
and imports nothing else of userdp. Messages follow the one format of
:mod:`userdp._validation`.
"""

from __future__ import annotations

from typing import Any

from userdp.exceptions import InvalidParameterError
from userdp.privacy.accountant import PrivacyAccountant
from userdp.privacy.budget import PrivacyBudget

__all__ = ["ACCOUNTANT", "check_accountant", "check_budget"]


def check_accountant(value: object, name: str, caller: str) -> None:
    """Rule for ``accountant=`` in every entry point: a shared :class:`PrivacyAccountant`, or
    None for a release accounted on its own."""
    if value is not None and not isinstance(value, PrivacyAccountant):
        raise InvalidParameterError(
            f"The {name!r} parameter of {caller} must be a PrivacyAccountant or None. "
            f"Got {value!r} instead."
        )


#: The constraints-table rule for ``accountant=`` (an object: the command line does not offer it).
ACCOUNTANT: dict[str, Any] = {"check": check_accountant, "none": True, "cli": False}


def check_budget(value: object, caller: str, *, none: bool = True) -> PrivacyBudget | None:
    """Check that ``value`` is a :class:`PrivacyBudget` (or None if allowed).

    A tuple such as ``(5.0, 1e-5)`` is refused with the fix, instead of an AttributeError
    deep inside training.
    """
    if (value is None and none) or isinstance(value, PrivacyBudget):
        return value
    raise InvalidParameterError(
        f"The 'budget' parameter of {caller} must be a PrivacyBudget"
        f"{' or None' if none else ''}. Got {value!r} instead. Build one with "
        "PrivacyBudget(epsilon=..., delta=...)."
    )
