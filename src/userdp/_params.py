"""One convention for estimators: keyword-only constructors that only store, a declared
``_parameter_constraints`` table checked at the top of ``fit``, and scikit-learn's
``get_params``/``set_params`` so ``sklearn.base.clone`` and grid search work (like
``BaseEstimator`` in scikit-learn: sklearn/base.py), without depending on scikit-learn.

A constraints table maps each constructor keyword to a rule understood by
:func:`userdp._validation.check_constraints`; a rule may also carry ``"help"`` (one sentence,
used by the CLI to build its flag and help text) and ``"cli": False`` for a keyword the command
line does not offer (an object such as an encoder or an item set).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, ClassVar

from userdp._validation import check_constraints
from userdp.exceptions import InvalidParameterError

__all__ = ["ParamsMixin", "public_parameters"]


class ParamsMixin:
    """``get_params``/``set_params``/``_validate_params`` from the constructor's keywords."""

    _parameter_constraints: ClassVar[dict[str, dict[str, Any]]] = {}

    @classmethod
    def _get_param_names(cls) -> list[str]:
        """The constructor's keyword names, sorted (scikit-learn's rule)."""
        sig = inspect.signature(cls.__init__)
        return sorted(
            p.name
            for p in sig.parameters.values()
            if p.name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
        )

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor keywords and their current values (``deep`` is accepted for
        scikit-learn compatibility; userdp estimators hold no nested estimators)."""
        return {name: getattr(self, name) for name in self._get_param_names()}

    def set_params(self, **params: Any) -> ParamsMixin:
        """Set constructor keywords (checked at the next ``fit``, as in scikit-learn)."""
        valid = set(self._get_param_names())
        for name, value in params.items():
            if name not in valid:
                raise InvalidParameterError(
                    f"Invalid parameter {name!r} for estimator {type(self).__name__}. "
                    f"Valid parameters are: {sorted(valid)!r}."
                )
            setattr(self, name, value)
        return self

    def _validate_params(self) -> None:
        """Check every keyword against the class's declared table, before any data is read."""
        check_constraints(self, self._parameter_constraints, type(self).__name__)

    def __repr__(self) -> str:
        defaults = {
            p.name: p.default
            for p in inspect.signature(type(self).__init__).parameters.values()
            if p.default is not inspect.Parameter.empty
        }
        shown = []
        for name in self._get_param_names():
            value = getattr(self, name)
            default = defaults.get(name, inspect.Parameter.empty)
            try:
                same = default is not inspect.Parameter.empty and bool(value == default)
            except (TypeError, ValueError):
                same = False
            if not same:
                shown.append(f"{name}={value!r}")
        return f"{type(self).__name__}({', '.join(shown)})"


def public_parameters(constraints: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The keywords of a table that the command line offers (rules without ``"cli": False``)."""
    return [name for name, rule in constraints.items() if rule.get("cli", True)]
