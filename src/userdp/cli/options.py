"""Pieces shared by the ``userdp`` subcommands.

The parser with one-line argument errors, argument types, the ``-v``/``-q``/``--debug`` options
and the flags made from a constraints table. The progress bars, output paths, error guard and
Spark start live in their own modules and are re-exported here, where the commands import them.
"""

from __future__ import annotations

import argparse
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

from .errors import ExitCode, one_line, run_guarded
from .errors import configured_logging as configured_logging
from .output import atomic_output, check_not_an_input, check_output_path, is_stdout
from .progress import (
    PROGRESS_MIN_BYTES,
    Counting,
    Phases,
    Progress,
    counting,
    input_size,
    on_terminal,
)
from .spark_session import start_spark

__all__ = [
    "NOT_PRIVATE",
    "PROGRESS_MIN_BYTES",
    "ArgumentParser",
    "Counting",
    "ExitCode",
    "Phases",
    "Progress",
    "atomic_output",
    "bounded_int",
    "check_column_roles",
    "check_not_an_input",
    "check_output_path",
    "common_options",
    "counting",
    "delimiter",
    "exact",
    "input_size",
    "is_stdout",
    "non_negative_int",
    "on_terminal",
    "one_line",
    "positive_int",
    "report_duplicates",
    "run_guarded",
    "start_spark",
]

logger = logging.getLogger("userdp")

#: The label of every exact, data-dependent figure (input counts, timings) printed to stderr.
#: Such figures are printed only with ``-v``: pipelines keep stderr in their logs.
NOT_PRIVATE = "not private, for the operator only (exact, not part of the release)"


def exact(value: float) -> str:
    """``value`` as the shortest text that reads back as the same float: ``1``, ``0.9999999``,
    ``1e+20``, ``1e-05``, for echoing a budget as it was given (``:g`` keeps 6 digits, so
    ``--delta 0.9999999`` read back as ``delta=1``)."""
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


#: Arguments that are numbers, not options: ``-1``, ``-1.5``, ``-1e3``, ``-1.5E+3``, ``-inf``.
#: argparse's own pattern knows only ``-1`` and ``-1.5``, so ``--bounds -1e3 1e3`` failed.
_NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$|^-(inf|infinity|nan)$", re.I)


class ArgumentParser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line, ``PROG: error: MESSAGE``, with exit 2.

    Negative numbers in scientific notation (``-1e3``) and ``-inf`` are values, not options.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = _NEGATIVE_NUMBER
        self._library_flags: dict[str, str] = {}

    def library_name(self, name: str, flag: str) -> None:
        """Say that the library calls ``flag``'s value ``name`` (``--threshold`` is ``h``), so
        that its messages about ``name`` name the flag."""
        self._library_flags[name] = flag

    def error(self, message: str) -> NoReturn:
        self.exit(
            ExitCode.USAGE,
            f"{self.prog}: error: {one_line(message)} (see '{self.prog} --help')\n",
        )

    def flags(self) -> dict[str, str]:
        """Each option's destination (and each :meth:`library_name`) -> its flag, so that a
        library message naming a parameter can name the flag instead."""
        flags = {a.dest: max(a.option_strings, key=len) for a in self._actions if a.option_strings}
        return {**self._library_flags, **flags}


def _int_at_least(low: int | None, what: str, high: int | None = None) -> Callable[[str], int]:
    """An argparse ``type`` accepting integers >= ``low`` (None: any) and <= ``high``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid integer: {text!r}") from None
        if low is not None and value < low:
            raise argparse.ArgumentTypeError(f"must be a {what} integer, got {text!r}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(
                f"must be at most {high:,} (a larger value cannot finish in useful time), "
                f"got {text!r}"
            )
        return value

    return parse


def bounded_int(low: int | None, high: int) -> Callable[[str], int]:
    """argparse type: an integer in ``[low, high]``; ``high`` is one of the documented upper
    bounds of :mod:`userdp._validation` (a size that cannot finish is refused before any work).
    ``low=None`` leaves the lower bound to the library's own check and wording."""
    what = "positive" if low == 1 else "non-negative" if low == 0 else f">= {low}"
    return _int_at_least(low, what, high)


#: argparse type: an integer >= 1.
positive_int = _int_at_least(1, "positive")
#: argparse type: an integer >= 0.
non_negative_int = _int_at_least(0, "non-negative")


def common_options() -> argparse.ArgumentParser:
    """A parent parser with the verbosity and debugging options every subcommand takes."""
    parent = argparse.ArgumentParser(add_help=False)
    verbosity = parent.add_mutually_exclusive_group()
    verbosity.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="Log more to stderr: -v for each stage, -vv for debugging details.",
    )
    verbosity.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="Log only errors: no warnings, progress bar or closing summary.",
    )
    parent.add_argument(
        "--debug",
        action="store_true",
        help="Show the full traceback of an error instead of a one-line message.",
    )
    return parent


def check_column_roles(roles: dict[str, Any]) -> None:
    """Refuse a column named for two roles (``--user-column x --item-column x``).

    ``roles`` maps an option (``"--user-column"``) to a column name or a list of names
    (``--feature-columns``). Shared by every command that reads columns.
    """
    from userdp.data.encoding import check_column_roles as check

    check(roles)


def report_duplicates(n_duplicates: int, what: str = "(user, item) pairs") -> None:
    """Warn that ``n_duplicates`` input rows repeated an earlier pair (and which one was kept).

    Duplicates are never dropped silently: select and recommend report them the same way.
    """
    if n_duplicates:
        kept = "the last rating of each is kept" if "rating" in what else "each counts once"
        logger.warning(
            "%d input row%s repeated earlier %s; %s (an exact count, for the operator only; "
            "not differentially private).",
            n_duplicates,
            "" if n_duplicates == 1 else "s",
            what,
            kept,
        )


def delimiter(text: str) -> str:
    """argparse type of ``--delimiter``: one character, or ``tab`` / ``\\t``."""
    if text in ("tab", "\\t", "\t"):
        return "\t"
    if len(text) != 1 or text in ('"', "\n", "\r"):
        raise argparse.ArgumentTypeError(
            f"must be one character (or 'tab'), not a quote or line break; got {text!r}"
        )
    return text


def add_parameter_flags(
    parser: argparse.ArgumentParser | Any,
    constraints: Mapping[str, Mapping[str, Any]],
    defaults: Mapping[str, Any],
    names: Sequence[str] | None = None,
) -> None:
    """Add one ``--kebab-name`` flag per keyword of a declared constraints table.

    The flag's type, choices and help come from the table (its ``"help"`` sentence, the range
    and the library default), so the command line and the API cannot drift apart. Flags
    default to None: only what the user gives is passed on, and the library validates it once.
    ``names`` limits and orders the flags (default: every rule without ``"cli": False``).
    """
    for name in names if names is not None else list(constraints):
        rule = constraints[name]
        if not rule.get("cli", True):
            continue
        flag = "--" + name.replace("_", "-")
        text = rule.get("help", "")
        default = defaults.get(name)
        if default is not None and not rule.get("bool"):
            text = f"{text} Default: {default}.".strip()
        kwargs: dict[str, Any] = {"dest": name, "default": None, "help": text or None}
        if "choices" in rule:
            kwargs.update(choices=list(rule["choices"]), metavar=rule.get("metavar"))
        elif rule.get("bool"):
            kwargs["action"] = argparse.BooleanOptionalAction
        elif rule.get("int"):
            high = rule.get("high")
            kind = int if high is None else bounded_int(None, high)  # refused while parsing
            kwargs.update(type=kind, metavar=rule.get("metavar", "N"))
        elif "check" not in rule:
            kwargs.update(type=_float_arg, metavar=rule.get("metavar", "X"))
        else:
            kwargs.update(metavar=rule.get("metavar"))
        parser.add_argument(flag, **kwargs)


def given_parameters(args: argparse.Namespace, names: Sequence[str]) -> dict[str, Any]:
    """The keywords among ``names`` that were given on the command line (not None)."""
    return {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}


def _float_arg(text: str) -> float:
    """argparse type: a float, in any notation Python reads (``-1e3``, ``inf``)."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid float: {text!r}") from None
