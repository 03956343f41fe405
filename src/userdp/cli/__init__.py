"""The ``userdp`` command line: ``select``, ``recommend``, ``estimate``, ``aggregate``,
``generate``, ``audit``.

:func:`main` does the work and returns an exit code (what tests and Python callers use);
:func:`console_main` is the installed script's entry point and exits the process.

Exit codes (:class:`ExitCode`): 0 success, 1 unexpected error, 2 bad arguments or input (one
line ``userdp CMD: error: ...`` on stderr), 130 interrupted (Ctrl-C, SIGINT), 143 terminated
(SIGTERM). Both signals unwind the command like an error, so its outputs are rolled back and a
Spark session it started is stopped, its JVM ended, before the process exits.

This module imports no subcommand (and so no NumPy, PyArrow, SciPy, dp-accounting or PySpark)
until :func:`main` runs: ``userdp --version`` stays fast, and Ctrl-C while those load is
handled like any other interrupt.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys

from userdp import __version__

from .options import ArgumentParser, ExitCode

__all__ = ["ExitCode", "Terminated", "build_parser", "console_main", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The ``userdp`` argument parser with its subcommands."""
    parser = ArgumentParser(
        prog="userdp",
        description="User-level differential privacy by adaptive weighting.",
        epilog="Run 'userdp COMMAND --help' for the options of a command.",
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"userdp {__version__}",
        help="Print the version of userdp and exit.",
    )
    commands = parser.add_subparsers(title="commands", dest="command", metavar="COMMAND")
    commands.required = True
    from . import (
        aggregate,
        audit,
        estimate,
        generate,
        recommend,
        select,
        sql,
    )  # heavy: NumPy, PyArrow, SciPy, ...

    select.add_parser(commands)
    generate.add_parser(commands)
    recommend.add_parser(commands)
    estimate.add_parser(commands)
    aggregate.add_parser(commands)
    audit.add_parser(commands)
    sql.add_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the ``userdp`` command on ``argv`` (default ``sys.argv[1:]``); return the exit code.

    Errors are reported on stderr, never raised, except with ``--debug``. ``KeyboardInterrupt``
    and ``BrokenPipeError`` propagate to the caller (:func:`console_main` handles them).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv == ["--version"]:  # the fast path: no subcommand is imported
        print(f"userdp {__version__}")
        return ExitCode.OK
    parser = build_parser()
    try:
        args, extras = parser.parse_known_args(argv)
        if extras:  # blame the subcommand, whose options the user was most likely writing
            getattr(args, "parser", parser).error(f"unrecognized arguments: {' '.join(extras)}")
    except SystemExit as exit_:  # --help, --version and argument errors
        code = exit_.code
        return code if isinstance(code, int) else (ExitCode.OK if code is None else ExitCode.USAGE)
    from userdp.spark import stopping_new_sessions

    with stopping_new_sessions():  # on any exit: no JVM of the command's outlives it
        return int(args.handler(args))


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread like Ctrl-C's ``KeyboardInterrupt``, so that the
    same cleanup runs (outputs rolled back, a Spark session stopped) before exit 143."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated


def console_main() -> None:
    """Entry point of the ``userdp`` script: run :func:`main` and exit with its code.

    SIGTERM raises :class:`Terminated` in the main thread, so it unwinds like Ctrl-C.
    """
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        code = main()
        sys.stdout.flush()
    except KeyboardInterrupt as err:
        # One line, then leave at once: worker threads, Spark's py4j threads and interpreter
        # shutdown would otherwise print more tracebacks. Outputs were already rolled back
        # (atomic_output's cleanup ran while the interrupt unwound the stack), and a Spark
        # session the command started was stopped and its JVM ended (main's cleanup).
        terminated = isinstance(err, Terminated)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        print(
            f"userdp: {'terminated' if terminated else 'interrupted'}", file=sys.stderr, flush=True
        )
        os._exit(ExitCode.TERMINATED if terminated else ExitCode.INTERRUPTED)
    except BrokenPipeError:
        # The reader went away (e.g. `userdp select ... | head`): stop quietly. Point stdout
        # at devnull so the interpreter's final flush does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        code = ExitCode.FAILURE
    sys.exit(int(code))
