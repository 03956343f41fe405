"""Parameter checks in one format, at the public boundary (like scikit-learn's
``validate_parameter_constraints``).

Messages read: "The 'epsilon' parameter of select_partitions must be a float in the range
(0, inf). Got -1.0 instead."
"""

from __future__ import annotations

import math
import numbers
import os
import sys
import warnings
from collections.abc import Mapping, Sequence
from types import FrameType
from typing import Any

import numpy as np

from userdp.exceptions import InvalidParameterError

#: Smallest epsilon the estimators accept. Below it the Laplace scale (sensitivity / epsilon)
#: is over a billion times the data's range, the release carries no information, and
#: intermediate products under- or overflow (epsilon=1e-300 raised ZeroDivisionError).
MIN_EPSILON = 1e-9
#: Largest |bound| and smallest width of declared value bounds: squares of widths and sums
#: over many users stay finite and normal in float64 inside this range.
MAX_ABS_BOUND = 1e100
MIN_BOUND_WIDTH = 1e-100

# Upper bounds on sizes that set how long a job runs. A value above one cannot finish in any
# useful time, so it is refused before any data is read or any budget is spent.
#: Most iterations of an iterative trainer (alternating steps, inner or gradient steps, ERM
#: steps): each takes a millisecond or more, so 10**6 of them already run for over 15 minutes.
MAX_ITERATIONS = 10**6
#: Most rounds of a multi-round selection: each round passes over the data with its own share
#: of the budget, and past 1,000 rounds a share is too small for any item to pass.
MAX_SELECTION_ROUNDS = 1000
#: Most runs per side of an empirical epsilon experiment: each run is a whole release (a few
#: milliseconds), so 10**6 runs per side already take hours.
MAX_AUDIT_RUNS = 10**6
#: Most users of the audit's synthetic data: every mechanism reruns on it once per neighbour.
MAX_AUDIT_USERS = 10**6
#: Most novel items held by the added user of the audit's selection experiments: each of up
#: to 100 runs per side builds that many pairs (200,000 already reproduces the bug it tests).
MAX_NOVEL_ITEMS = 10**7


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def warn(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` attributed to the first caller outside userdp (like pandas'
    ``find_stack_level``), so a warning names the user's line, wherever userdp raised it."""
    level = 2  # 1 would be this function
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and _inside_userdp(frame):
        frame = frame.f_back
        level += 1
    warnings.warn(message, category, stacklevel=level)


def _inside_userdp(frame: Any) -> bool:
    filename = frame.f_code.co_filename
    if filename == "<string>":  # a generated method, e.g. a userdp dataclass's __init__
        owner = frame.f_locals.get("self")
        return owner is not None and type(owner).__module__.startswith("userdp.")
    return os.path.abspath(filename).startswith(_PACKAGE_DIR + os.sep)


def check_epsilon(value: object, caller: str, name: str = "epsilon") -> float:
    """Return ``value`` as a float in ``[MIN_EPSILON, inf)`` (a finite epsilon for a release)."""
    return check_real(value, name, caller, low=MIN_EPSILON, high=math.inf, high_open=True)


def check_real(
    value: object,
    name: str,
    caller: str,
    *,
    low: float = -math.inf,
    high: float = math.inf,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """Return ``value`` as a float after checking it is a finite-or-inf real in the range."""
    lo_b = "(" if low_open else "["
    hi_b = ")" if high_open else "]"
    rng = f"{lo_b}{low:g}, {high:g}{hi_b}".replace("inf", "inf")
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value):
        raise InvalidParameterError(
            f"The {name!r} parameter of {caller} must be a float in the range {rng}. "
            f"Got {value!r} instead."
        )
    v = float(value)
    ok_low = v > low if low_open else v >= low
    ok_high = v < high if high_open else v <= high
    if not (ok_low and ok_high):
        raise InvalidParameterError(
            f"The {name!r} parameter of {caller} must be a float in the range {rng}. "
            f"Got {value!r} instead."
        )
    return v


def first_non_float(values: object) -> str:
    """Where the first element that is not a float sits, as text for a message (no value).

    For errors on arrays given to the API: "'values' must be an array of floats (first bad
    element at index 3)" instead of NumPy's "could not convert string to float: 'alice'".
    """
    try:
        flat = np.asarray(values, dtype=object).ravel()
    except (TypeError, ValueError):
        return "ragged or not an array"
    for k, v in enumerate(flat):
        try:
            float(v)
        except (TypeError, ValueError):
            return f"first bad element at flat index {k}"
    return "not convertible"


def check_int(
    value: object, name: str, caller: str, *, low: int | None = None, high: int | None = None
) -> int:
    """Return ``value`` as an int after checking it is an integer in [low, high]."""
    lo = "-inf" if low is None else str(low)
    hi = "inf" if high is None else str(high)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidParameterError(
            f"The {name!r} parameter of {caller} must be an int in the range [{lo}, {hi}]. "
            f"Got {value!r} instead."
        )
    v = int(value)
    if (low is not None and v < low) or (high is not None and v > high):
        raise InvalidParameterError(
            f"The {name!r} parameter of {caller} must be an int in the range [{lo}, {hi}]. "
            f"Got {value!r} instead."
        )
    return v


def check_fractions(value: object, name: str, caller: str) -> tuple[float, ...]:
    """Check a budget split: a non-empty sequence of positive reals summing to 1."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) == 0:
        raise InvalidParameterError(
            f"The {name!r} parameter of {caller} must be a non-empty sequence of positive "
            f"floats summing to 1. Got {value!r} instead."
        )
    parts = tuple(check_real(v, name, caller, low=0.0, low_open=True) for v in value)
    if not math.isclose(sum(parts), 1.0, rel_tol=0, abs_tol=1e-9):
        raise InvalidParameterError(
            f"The {name!r} parameter of {caller} must be a non-empty sequence of positive "
            f"floats summing to 1. Got {value!r} (sum {sum(parts)!r}) instead."
        )
    return parts


def check_choice(value: object, name: str, caller: str, choices: Sequence[str]) -> str:
    """Check that ``value`` is one of the allowed strings."""
    if not isinstance(value, str) or value not in choices:
        allowed = ", ".join(repr(c) for c in choices)
        raise InvalidParameterError(
            f"The {name!r} parameter of {caller} must be one of {allowed}. Got {value!r} instead."
        )
    return value


def check_constraints(
    owner: object, constraints: Mapping[str, Mapping[str, Any]], caller: str
) -> None:
    """Check each attribute of ``owner`` named in ``constraints`` against its rule.

    A rule is ``{"choices": [...]}``, ``{"bool": True}``, ``{"int": True, "low": ...}``,
    ``{"check": f}`` (``f(value, name, caller)`` raises :class:`InvalidParameterError`; for
    rules a table cannot say, such as a (low, high) pair) or the keywords of :func:`check_real`;
    ``"none": True`` also allows None. ``"help"`` and ``"cli"`` are for the command line and
    ignored here. Like scikit-learn's ``_parameter_constraints`` table, checked at the top of
    ``fit`` before any data is read.
    """
    for name, rule in constraints.items():
        value = getattr(owner, name)
        if value is None and rule.get("none"):
            continue
        rule = {k: v for k, v in rule.items() if k not in _NOT_RULES}
        if "check" in rule:
            rule["check"](value, name, caller)
        elif "choices" in rule:
            check_choice(value, name, caller, rule["choices"])
        elif rule.get("bool"):
            if not isinstance(value, bool | np.bool_):
                raise InvalidParameterError(
                    f"The {name!r} parameter of {caller} must be a bool. Got {value!r} instead."
                )
        elif rule.get("int"):
            check_int(value, name, caller, low=rule.get("low"), high=rule.get("high"))
        else:
            check_real(value, name, caller, **{k: v for k, v in rule.items() if k != "none"})


#: Keys of a constraints rule that describe the command line, not the check.
_NOT_RULES = ("help", "cli", "metavar")


def check_arguments(
    values: Mapping[str, Any], constraints: Mapping[str, Mapping[str, Any]], caller: str
) -> None:
    """:func:`check_constraints` for a function's keyword arguments (a mapping by name)."""
    check_constraints(_Arguments(values), constraints, caller)


class _Arguments:
    """Attribute access over a mapping, for :func:`check_arguments`."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self.__dict__.update(values)
