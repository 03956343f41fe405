"""Pieces shared by the ``userdp`` subcommands.

One-line argument errors, the ``-v``/``-q``/``--debug`` options and the logging they configure,
the stage progress bar, output-path checks with an atomic writer, and the error guard that turns
exceptions into exit codes.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import shutil
import stat
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from enum import IntEnum
from pathlib import Path
from typing import Any, NoReturn

from userdp.exceptions import InvalidParameterError, UserDPError

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

#: Inputs at least this large (in bytes) get a progress bar on an interactive stderr.
PROGRESS_MIN_BYTES = 50 * 1024 * 1024


class ExitCode(IntEnum):
    """Exit statuses of the ``userdp`` command."""

    OK = 0
    FAILURE = 1  # an unexpected error: a bug, or an environment problem
    USAGE = 2  # bad arguments or bad input, with a one-line explanation
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)
    TERMINATED = 143  # SIGTERM (128 + SIGTERM), e.g. `kill`, a job scheduler, a container stop


def exact(value: float) -> str:
    """``value`` as the shortest text that reads back as the same float: ``1``, ``0.9999999``,
    ``1e+20``, ``1e-05``, for echoing a budget as it was given (``:g`` keeps 6 digits, so
    ``--delta 0.9999999`` read back as ``delta=1``)."""
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def one_line(message: object) -> str:
    """``message`` as a single line (newlines and runs of blanks collapsed)."""
    text = " ".join(str(message).split())
    return text or "no details"


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

    def error(self, message: str) -> NoReturn:
        self.exit(
            ExitCode.USAGE,
            f"{self.prog}: error: {one_line(message)} (see '{self.prog} --help')\n",
        )


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


class _Formatter(logging.Formatter):
    def __init__(self, prog: str) -> None:
        super().__init__()
        self.prog = prog

    def format(self, record: logging.LogRecord) -> str:
        return f"{self.prog}: {record.levelname.lower()}: {one_line(record.getMessage())}"


@contextlib.contextmanager
def configured_logging(prog: str, verbose: int, quiet: bool) -> Iterator[None]:
    """Send the ``userdp`` logger and Python warnings to stderr for the duration of a command.

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
        text = str(message)
        if text not in seen:  # the library may warn about one budget from several places
            seen.add(text)
            logger.warning("%s", text)

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            warnings.showwarning = show
            yield
    finally:
        logger.handlers[:], level_, logger.propagate = saved
        logger.setLevel(level_)


def on_terminal(quiet: bool = False) -> bool:
    """Whether a progress bar may be drawn: stderr is a terminal and ``--quiet`` is off.

    Piped or redirected stderr (scripts, pipelines, tests) never gets a bar.
    """
    isatty = getattr(sys.stderr, "isatty", None)
    try:
        return (not quiet) and callable(isatty) and bool(isatty())
    except ValueError:  # a closed stream
        return False


def counting(total: int | None, *, desc: str, unit: str, quiet: bool = False) -> Any:
    """A tqdm bar counting ``total`` units of work (rows, rounds, runs, steps) on stderr.

    Drawn only when :func:`on_terminal`; otherwise the bar is disabled and its ``update`` and
    ``close`` do nothing. A bar only counts: it draws no randomness, so a seeded release is the
    same with it or without. It is erased when closed (``leave=False``).
    """
    from tqdm import tqdm

    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        file=sys.stderr,
        leave=False,
        mininterval=0.5,
        dynamic_ncols=True,
        disable=not on_terminal(quiet),
    )


class Counting:
    """``progress(what, done, total)`` callbacks of the library as :func:`counting` bars: one
    bar per kind of work (``"mechanisms"``, ``"runs"``), the previous one closed when the next
    kind starts. Call :meth:`close` at the end (also on errors)."""

    def __init__(self, *, quiet: bool = False) -> None:
        self.quiet = quiet
        self.what: str | None = None
        self.bar: Any = None

    def __call__(self, what: str, done: int, total: int) -> None:
        if what != self.what:
            self.close()
            self.what = what
            self.bar = counting(total, desc=what, unit=what.removesuffix("s"), quiet=self.quiet)
        if self.bar is not None and done > self.bar.n:
            self.bar.update(done - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        self.bar = None
        self.what = None


class Progress:
    """A tqdm bar over named stages on stderr, or nothing at all.

    Enabled only when stderr is a terminal, ``--quiet`` is off and the job is large enough to
    take seconds; otherwise every method is a no-op, so scripts and logs stay clean. While a
    stage runs, its elapsed time is redrawn every second, so a long stage (reading a large
    file) does not look stuck.
    """

    #: Seconds between redraws of the elapsed time.
    REFRESH_S = 1.0

    def __init__(self, stages: Sequence[str], *, enabled: bool) -> None:
        self.stages = list(stages)
        self.bar: Any = None
        self._stop = threading.Event()
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(
                total=len(self.stages),
                file=sys.stderr,
                unit="stage",
                leave=False,
                bar_format="{desc:<10} {bar} {n_fmt}/{total_fmt} stages [{elapsed}]",
            )
            threading.Thread(target=self._redraw, args=(self.bar,), daemon=True).start()

    def _redraw(self, bar: Any) -> None:
        while not self._stop.wait(self.REFRESH_S):
            bar.refresh()  # tqdm's own lock keeps this apart from the main thread's updates

    @property
    def enabled(self) -> bool:
        """Whether a bar is shown (so long steps inside a stage may show their own)."""
        return self.bar is not None

    @staticmethod
    def wanted(quiet: bool, size: int) -> bool:
        """Whether a bar is worth showing for an input of ``size`` bytes."""
        return on_terminal(quiet) and size >= PROGRESS_MIN_BYTES

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Show ``name`` while the block runs and advance the bar when it ends."""
        logger.info("%s ...", name)
        if self.bar is not None:
            self.bar.set_description_str(name)
        yield
        if self.bar is not None:
            self.bar.update(1)

    def close(self) -> None:
        self._stop.set()
        if self.bar is not None:
            self.bar.close()
            self.bar = None


class Phases:
    """One line on stderr for a command whose work comes in phases, shown one at a time: a phase
    that counts (rows read, rounds run) shows its count and rate, and with a known total a time
    estimate; a phase that does not count shows its elapsed time. The line is redrawn every
    second, so a long step that counts nothing (encoding what was read) does not look stuck.

    Drawn only when ``enabled`` (:meth:`Progress.wanted`: stderr is a terminal, no ``--quiet``);
    otherwise every method is a no-op, :meth:`adding` and :meth:`counter` give None (the library
    then runs exactly as without a bar) and nothing is written. A phase only counts: it draws no
    randomness and writes nothing to the output, so a seeded release is the same with it or
    without. Each bar is erased when its phase ends. Call :meth:`close` at the end (also on
    errors).
    """

    #: Seconds between redraws of the elapsed time.
    REFRESH_S = 1.0

    def __init__(self, *, enabled: bool) -> None:
        self.enabled = enabled
        self.name: str | None = None
        self.unit: str | None = None
        self.bar: Any = None
        self._lock = threading.Lock()  # keeps a redraw apart from a bar's end
        self._stop = threading.Event()
        if enabled:
            threading.Thread(target=self._redraw, daemon=True).start()

    def _redraw(self) -> None:
        while not self._stop.wait(self.REFRESH_S):
            with self._lock:
                if self.bar is not None:
                    self.bar.refresh()

    def start(self, name: str, *, unit: str | None = None, total: int | None = None) -> None:
        """End the current phase and show ``name``: counting ``unit`` (plural, e.g. "rows"), up
        to ``total`` when it is known, or without a unit its elapsed time only. A new name
        is logged (``-v``), as :meth:`Progress.stage` logs its stages."""
        if name != self.name:
            logger.info("%s ...", name)
        self.stop()
        if not self.enabled:
            self.name, self.unit = name, unit
            return
        from tqdm import tqdm

        kw: dict[str, Any]
        if unit is None:
            kw = {"bar_format": "{desc} [{elapsed}]"}
        elif total is None:  # a count without a total: 12,600,000 rows [00:03, 4.12M rows/s]
            kw = {
                "unit": f" {unit}",
                "unit_scale": True,  # the rate; the count is shown in full
                "bar_format": "{desc}: {n:,} " + unit + " [{elapsed}, {rate_fmt}]",
            }
        else:  # 1/4 [00:02<00:06, 2.00s/round]
            kw = {"unit": unit.removesuffix("s")}
        bar = tqdm(
            total=total,
            desc=name,
            file=sys.stderr,
            leave=False,
            mininterval=0.5,
            dynamic_ncols=True,
            **kw,
        )
        with self._lock:
            self.name, self.unit, self.bar = name, unit, bar

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Show ``name`` (its elapsed time, until a phase inside starts counting) while the
        block runs; the phase shown then ends with the block."""
        self.start(name)
        yield
        self.stop()

    def add(self, n: int) -> None:
        """Count ``n`` more units in the current phase."""
        if self.bar is not None:
            self.bar.update(n)

    def adding(self) -> Callable[[int], None] | None:
        """:meth:`add` as a reader's ``progress(rows)`` callback; None when no bar is drawn."""
        return self.add if self.enabled else None

    def counter(self, name: str, unit: str) -> Callable[[int, int], None] | None:
        """A library's ``progress(done, total)`` callback shown as phase ``name`` counting
        ``unit``; None when no bar is drawn."""
        if not self.enabled:
            return None

        def progress(done: int, total: int) -> None:
            if (self.name, self.unit) != (name, unit):
                self.start(name, unit=unit, total=total)
            if self.bar is not None and done > self.bar.n:
                self.bar.update(done - self.bar.n)

        return progress

    def stop(self) -> None:
        """End the current phase: its bar is erased and none is shown until the next start."""
        with self._lock:
            bar, self.bar, self.name, self.unit = self.bar, None, None, None
        if bar is not None:
            bar.close()

    def close(self) -> None:
        self._stop.set()
        self.stop()


def input_size(path: str | os.PathLike[str]) -> int:
    """Size in bytes of a file, or of all files under a directory (0 if unreadable)."""
    try:
        p = Path(path)
        if p.is_dir():
            return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
        return p.stat().st_size
    except OSError:
        return 0


#: Output names that mean "standard output" (``-o -``, ``-o /dev/stdout``).
_STDOUT_NAMES = ("-", "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1")


def is_stdout(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names standard output: ``-`` or ``/dev/stdout`` and its aliases."""
    return os.fspath(path) in _STDOUT_NAMES


def _refuse_special(p: Path, *, directory: bool) -> None:
    """Refuse an existing ``p`` that is a symbolic link or not a regular file (even with
    ``--overwrite``): replacing a FIFO, a device node or a link's target is never intended."""
    try:
        mode = os.lstat(p).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISLNK(mode):
        raise InvalidParameterError(
            f"The output path {str(p)!r} is a symbolic link; name the file itself (or remove "
            "the link)."
        )
    if stat.S_ISDIR(mode):
        if directory:
            return
        raise InvalidParameterError(f"The output path {str(p)!r} is a directory.")
    if not stat.S_ISREG(mode):
        raise InvalidParameterError(
            f"The output path {str(p)!r} is not a regular file (a FIFO, socket or device); "
            "userdp only replaces regular files. Use '-o -' for standard output."
        )


def check_output_path(
    path: str | os.PathLike[str], *, overwrite: bool, directory: bool = False
) -> Path:
    """Check before any work that ``path`` can be written; raise InvalidParameterError if not.

    ``-`` and ``/dev/stdout`` mean standard output (:func:`atomic_output` writes there). An
    existing symbolic link, FIFO or device is refused even with ``overwrite``. ``directory=True``:
    the output is a directory of part files (Spark's Parquet output), which ``--overwrite`` may
    replace.
    """
    if is_stdout(path):
        return Path(os.fspath(path))
    p = Path(path)
    if str(path) == "" or p.name == "":
        raise InvalidParameterError(f"The output path {str(path)!r} is not a file name.")
    _refuse_special(p, directory=directory)
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise InvalidParameterError(
            f"Cannot write {str(p)!r}: the directory {str(parent)!r} does not exist."
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InvalidParameterError(
            f"Cannot write {str(p)!r}: no permission to create files in {str(parent)!r}."
        )
    if p.exists() and not overwrite:
        raise InvalidParameterError(
            f"The output file {str(p)!r} already exists; pass --overwrite to replace it."
        )
    return p


def check_not_an_input(output: str | os.PathLike[str] | None, inputs: Sequence[Any]) -> None:
    """Refuse an ``output`` that is one of the ``inputs`` (same file, even under another name).

    Writing the result over the data it is computed from would destroy the input, with
    ``--overwrite`` or not. ``inputs`` may hold non-path values; only existing paths count.
    """
    if output is None or is_stdout(output) or not os.path.exists(output):
        return
    for value in inputs:
        if isinstance(value, (str, os.PathLike)) and os.fspath(value) and os.path.exists(value):
            try:
                same = os.path.samefile(value, output)
            except OSError:
                continue
            if same:
                raise InvalidParameterError(
                    f"The output {os.fspath(output)!r} is the input {os.fspath(value)!r}; "
                    "write the result to another file."
                )


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


def _new_file_mode(existing: Path) -> int:
    try:
        return existing.stat().st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


@contextlib.contextmanager
def atomic_output(path: Path, *, overwrite: bool) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it onto ``path`` if the block succeeds.

    Readers never see a half-written file, and a failed or interrupted write leaves any existing
    file untouched. Without ``overwrite``, an existing ``path`` is refused (checked again just
    before the rename, in case it appeared while the job ran), and so is a link or a non-regular
    file with it. For standard output (``-``, ``/dev/stdout``) the temporary file is copied to
    stdout when the block succeeds, so a failed run prints nothing.
    """
    to_stdout = is_stdout(path)
    try:
        fd, tmp_name = tempfile.mkstemp(
            prefix=f".{'stdout' if to_stdout else path.name}.",
            suffix=".tmp",
            dir=None if to_stdout else path.parent,
        )
    except OSError as err:  # e.g. a read-only directory that os.access let through (root)
        raise _about(err, path) from err
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        try:
            yield tmp
        except OSError as err:
            if err.filename is None or os.fspath(err.filename) != tmp_name:
                raise
            raise _about(err, path) from err  # a write to the temporary file failed
        if to_stdout:
            sys.stdout.flush()
            with open(tmp, "rb") as f:
                shutil.copyfileobj(f, sys.stdout.buffer)
            sys.stdout.buffer.flush()
            return
        _refuse_special(path, directory=False)
        if not overwrite and path.exists():
            raise InvalidParameterError(
                f"The output file {str(path)!r} already exists; pass --overwrite to replace it."
            )
        try:
            os.chmod(tmp, _new_file_mode(path))
            os.replace(tmp, path)
        except OSError as err:
            raise _about(err, path) from err
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _about(err: OSError, path: Path) -> OSError:
    """``err`` told about ``path``, the file the user named, not the temporary file next to
    it (a name the user never gave; error lines say ``PATH: reason``)."""
    return OSError(err.errno, err.strerror, "standard output" if is_stdout(path) else str(path))


def start_spark(master: str | None, *, verbose: int = 0) -> Any:
    """Start (or reuse) the Spark session for a CLI command, without console noise.

    The JVM inherits the process's stderr when it is launched, and prints its start-up notes,
    log4j lines and stage progress bars there (even with ``-q`` and without a terminal). So
    the launch happens with file descriptor 2 pointed at ``os.devnull`` (restored at once for
    Python), progress bars are off, and Spark's own log level is ERROR. Errors still reach
    the command as exceptions (one line each, see :func:`run_guarded`). ``-vv`` keeps Spark's
    console output, for debugging.
    """
    from userdp.spark import spark_session

    config = {"spark.ui.showConsoleProgress": "false"}
    if verbose >= 2:
        return spark_session(master, config=config, quiet=False)
    _plain_interrupts()
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        session = spark_session(master, config=config)
        session.sparkContext.setLogLevel("ERROR")
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
    _plain_interrupts()
    return session


def _plain_interrupts() -> None:
    """Ctrl-C during a Spark job: one line, not 49 lines of py4j tracebacks.

    PySpark installs a SIGINT handler that calls ``cancelAllJobs`` through py4j while the main
    thread is itself inside a py4j call; the re-entrant call fails and py4j logs each failure
    with ``logging.exception`` on the root logger (which, without handlers, configures itself
    to print on stderr). Python's default handler raises ``KeyboardInterrupt`` at once instead
    (the JVM ignores SIGINT; :func:`userdp.cli.main`'s cleanup stops the session and ends the
    JVM, see :func:`userdp.spark.stopping_new_sessions`); :func:`userdp.cli.console_main`
    prints the one line. py4j's root-logger records are dropped when the root logger has no
    handler of its own.
    """
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(logging.NullHandler())


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
        with configured_logging(prog, args.verbose, args.quiet):
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
        print(f"{prog}: error: {_describe(err)}", file=sys.stderr)
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
