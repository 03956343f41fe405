"""How a command's failures reach the user: exit codes, one-line messages, the logging sent to
stderr, and the guard that maps exceptions to exit codes."""

from __future__ import annotations

import argparse
import contextlib
import logging
import re
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping
from enum import IntEnum
from typing import Any

from userdp.exceptions import UnusualBudgetWarning, UserDPError

from .output import check_not_an_input

logger = logging.getLogger("userdp")

#: "The 'dim' parameter of MatrixFactorization must be ..." (the library's one message style).
_PARAMETER_OF = re.compile(r"The '(\w+)' parameter of [\w.]+(?:\(\))? ")
#: A quoted parameter name, not a quoted column name ("the value column 'v'").
_QUOTED = re.compile(r"(?<![Cc]olumn )'(\w+)'")
#: A keyword and its value as Python writes them ("h=3", "method='gwa'", "h=None").
_KEYWORD = re.compile(r"\b(\w+)=('?)([^\s,;')]+)\2")


class ExitCode(IntEnum):
    """Exit statuses of the ``userdp`` command."""

    OK = 0
    FAILURE = 1  # an unexpected error: a bug, or an environment problem
    USAGE = 2  # bad arguments or bad input, with a one-line explanation
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)
    TERMINATED = 143  # SIGTERM (128 + SIGTERM), e.g. `kill`, a job scheduler, a container stop


def one_line(message: object) -> str:
    """``message`` as a single line (newlines and runs of blanks collapsed)."""
    text = " ".join(str(message).split())
    return text or "no details"


class _Formatter(logging.Formatter):
    def __init__(self, prog: str) -> None:
        super().__init__()
        self.prog = prog

    def format(self, record: logging.LogRecord) -> str:
        return f"{self.prog}: {record.levelname.lower()}: {one_line(record.getMessage())}"


@contextlib.contextmanager
def configured_logging(
    prog: str, verbose: int, quiet: bool, flags: Mapping[str, str] | None = None
) -> Iterator[None]:
    """Send the ``userdp`` logger and Python warnings to stderr for the duration of a command
    (a warning as the command line says it: :func:`for_the_command_line` with ``flags``).

    The logger's previous handlers, level and propagation are restored afterwards, so calling
    :func:`userdp.cli.main` from Python (tests, notebooks) leaves no trace.
    """
    if quiet:
        level = logging.ERROR
    elif verbose >= 2:
        level = logging.DEBUG
    elif verbose == 1:
        level = logging.INFO
    else:
        level = logging.WARNING
    handler = logging.StreamHandler(sys.stderr)  # sys.stderr now, not at import time
    handler.setFormatter(_Formatter(prog))
    saved = (logger.handlers[:], logger.level, logger.propagate)
    logger.handlers[:] = [handler]
    logger.setLevel(level)
    logger.propagate = False

    seen: set[str] = set()

    def show(message: Any, category: Any, *_: Any, **__: Any) -> None:
        text = for_the_command_line(str(message), prog, flags or {})
        # The library may warn about one budget from several places, and about the shares a
        # command splits it into: the first (the budget the user gave) is the one to show.
        unusual = isinstance(category, type) and issubclass(category, UnusualBudgetWarning)
        key = "unusual " + text.split(" ", 1)[0] if unusual else text
        if key not in seen:
            seen.add(key)
            logger.warning("%s", text)

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            warnings.showwarning = show
            yield
    finally:
        logger.handlers[:], level_, logger.propagate = saved
        logger.setLevel(level_)


#: Exceptions raised by Spark (through py4j) on bad input: exit 2 with their first line.
_SPARK_ERRORS = ("py4j.protocol", "pyspark.errors", "pyspark.sql.utils")
#: Longest error message printed without --debug (Java stack traces can be 15,000 characters).
_MAX_MESSAGE = 300


def _is_spark_error(err: BaseException) -> bool:
    return any(type(err).__module__.startswith(m) for m in _SPARK_ERRORS)


def run_guarded(prog: str, command: Callable[[argparse.Namespace], int], args: Any) -> int:
    """Run ``command(args)`` and map exceptions to exit codes with one line on stderr.

    :class:`~userdp.exceptions.UserDPError`, ``OSError`` and Spark's errors on bad input give
    ``userdp CMD: error: ...`` and exit 2; anything else ``userdp CMD: unexpected error: ...``
    and exit 1. The line is short (a Java stack is cut to its first line) and, for userdp's
    own errors, never holds a cell value of the data. With ``--debug`` the exception propagates
    with its traceback (and the values). An output that is one of the inputs is refused before
    the command runs. A broken stdout pipe and Ctrl-C propagate to
    :func:`userdp.cli.console_main`.
    """
    try:
        with configured_logging(prog, args.verbose, args.quiet, _flags(args)):
            inputs = [v for k, v in vars(args).items() if k != "output"]
            flat = [x for v in inputs for x in (v if isinstance(v, list) else [v])]
            check_not_an_input(getattr(args, "output", None), flat)
            return command(args)
    except BrokenPipeError:
        raise
    except (MemoryError, OverflowError) as err:
        if args.debug:
            raise
        print(f"{prog}: error: {_too_large(err)}", file=sys.stderr)
        return ExitCode.USAGE
    except (UserDPError, OSError) as err:
        if args.debug:
            raise
        text = _describe(err)
        if isinstance(err, UserDPError):
            text = for_the_command_line(text, prog, _flags(args))
        print(f"{prog}: error: {text}", file=sys.stderr)
        return ExitCode.USAGE
    except Exception as err:
        if args.debug:
            raise
        if _is_spark_error(err):
            print(f"{prog}: error: Spark: {_describe(err)}", file=sys.stderr)
            return ExitCode.USAGE
        hint = _install_hint(err)
        if hint is not None:  # an optional package the command needs: how to install it
            print(f"{prog}: error: {hint}", file=sys.stderr)
            return ExitCode.USAGE
        print(
            f"{prog}: unexpected error: {type(err).__name__}: {_describe(err)} "
            "(rerun with --debug for the traceback)",
            file=sys.stderr,
        )
        return ExitCode.FAILURE


#: Optional packages a command may import, by top-level module: what to install. A missing
#: one is the environment's setup, not a bug: exit 2 with the command that fixes it.
_OPTIONAL_PACKAGES = {
    "pyspark": "PySpark: pip install 'userdp[spark]' (Java 17+ is needed too)",
    "py4j": "PySpark: pip install 'userdp[spark]' (Java 17+ is needed too)",
    "pandas": "pandas: pip install pandas",
    "polars": "Polars: pip install polars",
    "sklearn": "scikit-learn: pip install scikit-learn",
    "matplotlib": "matplotlib: pip install matplotlib",
}


def _install_hint(err: BaseException) -> str | None:
    """One line for an optional package that is not installed (None for any other error)."""
    if not isinstance(err, ModuleNotFoundError) or not err.name:
        return None
    needed = _OPTIONAL_PACKAGES.get(err.name.split(".")[0])
    if needed is None:
        return None
    return f"This needs {needed}; the module {err.name!r} is not installed."


def _too_large(err: BaseException) -> str:
    """One line for a parameter that asks for more memory or range than there is.

    Sizes the user types (a dimension, a number of rounds or users) are checked against the
    data where they can be; this is the net for the rest: exit 2 like any other bad input.
    """
    if isinstance(err, MemoryError):
        detail = str(err).split(" for an array", 1)[0]  # NumPy: "Unable to allocate 7.28 TiB"
        detail = f" ({one_line(detail)})" if detail else ""
        return (
            f"not enough memory{detail}: a size given on the command line (e.g. --users, "
            "--dim, --rounds) is too large for this machine; use a smaller value."
        )
    return (
        "a number given on the command line (e.g. --rounds, --users) is too large to compute "
        "with in floating point; use a smaller value."
    )


def _flags(args: Any) -> dict[str, str]:
    """The flags of the command's parser (``args.parser``, set by every command), by the
    names the library gives their values: ``userdp.cli.options.ArgumentParser.flags``."""
    flags = getattr(getattr(args, "parser", None), "flags", None)
    return flags() if callable(flags) else {}


def for_the_command_line(text: str, prog: str, flags: Mapping[str, str]) -> str:
    """A library message as the command line says it: without the entry point's own prefix
    (``aggregate: ...`` under ``userdp aggregate``), and with the flag (``--dim``) where it
    names a parameter (``The 'dim' parameter of MatrixFactorization``, ``'value_column'``,
    ``h=3``) that the command has as an option. Other text, column names included, is kept."""
    command = prog.split()[-1]
    text = text.removeprefix(f"{command}: ")

    def parameter(m: re.Match[str]) -> str:
        return f"{flags[m.group(1)]} " if m.group(1) in flags else m.group(0)

    def quoted(m: re.Match[str]) -> str:
        return flags.get(m.group(1), m.group(0))

    def keyword(m: re.Match[str]) -> str:
        flag, value = flags.get(m.group(1)), m.group(3).rstrip(".")
        if flag is None:
            return m.group(0)
        tail = m.group(3)[len(value) :]
        return f"{flag} unset{tail}" if value == "None" else f"{flag} {value}{tail}"

    text = _QUOTED.sub(quoted, _PARAMETER_OF.sub(parameter, text))
    return _KEYWORD.sub(keyword, text)


def _describe(err: BaseException) -> str:
    if isinstance(err, OSError) and err.strerror:
        where = f"{err.filename!s}: " if err.filename else ""
        return one_line(f"{where}{err.strerror}")
    if isinstance(err, UserDPError):
        text = str(err)
        cause = err.__cause__
        if cause is not None and _is_spark_error(cause) and str(cause) in text:
            text = text.replace(str(cause), _describe(cause))  # "...: <Java stack>" -> one line
        text = one_line(text) if text else type(err).__name__
        return text if len(text) <= 2 * _MAX_MESSAGE else text[: 2 * _MAX_MESSAGE - 3] + "..."
    if _is_spark_error(err):  # a Java stack trace: its first line that says something
        lines = [ln.strip().lstrip(": ").strip() for ln in str(err).splitlines()]
        useful = [ln for ln in lines if ln and not ln.startswith("An error occurred while")]
        text = useful[0] if useful else ""
    elif type(err).__module__.startswith("pyarrow"):
        from userdp.data.io import safe_message

        text = safe_message(err)  # an Arrow error may quote a row or value of the data
    else:
        text = str(err)
    text = one_line(text) if text.strip() else type(err).__name__
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."
