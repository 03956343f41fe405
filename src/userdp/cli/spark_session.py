"""Starting the Spark session for a command: no JVM console noise, and Ctrl-C as one line."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any


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
