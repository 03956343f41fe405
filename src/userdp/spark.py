"""Start-up of Apache Spark for userdp: a session that works on a fresh machine.

``pip install "userdp[spark]"`` brings PySpark; Spark itself needs Java 17 or later. A local
session is sized for the machine (driver memory, shuffle partitions) and pointed at the running
Python, so no environment variable has to be set by hand.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from userdp._engines import is_spark_dataframe
from userdp.exceptions import UserDPError

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

__all__ = [
    "ARROW_BATCH_BYTES",
    "CODEGEN_CACHE_ENTRIES",
    "SparkUnavailableError",
    "is_spark_dataframe",
    "python_partitions",
    "require_pyspark",
    "spark_session",
    "stopping_new_sessions",
    "whole_partition",
]

logger = logging.getLogger("userdp.spark")

_MIN_JAVA = 17
_GIB = 1 << 30
#: Generated classes a session started by :func:`spark_session` keeps
#: (``spark.sql.codegen.cache.maxEntries``). Spark's default, 100, drops the least recently
#: used class first, and one default selection or GROUP BY compiles 110-130 in the same order
#: every run, so each later run compiled them all again; this many hold several runs.
CODEGEN_CACHE_ENTRIES = 1000
#: ``spark.sql.execution.arrow.maxBytesPerBatch`` in a session started by
#: :func:`spark_session`: Spark's own "no limit" value. Below it (the default is 64 MB, since
#: Spark 4.0) Spark measures the Arrow batch it is filling after every row it sends to a
#: Python worker, walking the batch's vectors; on 10M rows that check took more CPU than
#: writing the rows (docs/spark.md, "Rows to Python"). Batches stay bounded by
#: ``spark.sql.execution.arrow.maxRecordsPerBatch`` (10,000 rows: about 1 MB where a row is a
#: few numbers, as in every userdp pass but the recommenders' per-partition statistics, a few
#: rows that their pandas call holds whole anyway).
ARROW_BATCH_BYTES = 2**31 - 1
#: Seconds the JVM of a session that :func:`stopping_new_sessions` stopped is given to exit by
#: itself (its gateway exits at the end of its standard input, after Spark's shutdown hooks), and
#: then again after SIGTERM, before it is killed.
JVM_EXIT_SECONDS = 30


class SparkUnavailableError(UserDPError):
    """PySpark or Java is missing, so the Spark engine cannot start."""


def require_pyspark() -> None:
    """Import PySpark or raise :class:`SparkUnavailableError` saying how to install it."""
    try:
        import pyspark
        import pyspark.sql  # noqa: F401
    except ImportError as err:
        raise SparkUnavailableError(
            "The Spark engine needs PySpark: pip install 'userdp[spark]' (Java 17+ is needed too)."
        ) from err


def _java_binary() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = os.path.join(home, "bin", "java")
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("java")


def _java_major(java: str) -> int | None:
    """Major version of ``java -version`` (``None`` if it cannot be read)."""
    try:
        out = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not match:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major  # "1.8" is Java 8


def check_java() -> str:
    """Path of a Java >= 17 runtime, or raise :class:`SparkUnavailableError` with a fix."""
    java = _java_binary()
    if java is None:
        raise SparkUnavailableError(
            "The Spark engine needs Java 17 or later, and no 'java' was found on PATH or in "
            "JAVA_HOME. Install a JDK (for example: apt install openjdk-17-jre-headless, or "
            "brew install openjdk@17) and try again, or use the local engine (--engine local)."
        )
    major = _java_major(java)
    if major is not None and major < _MIN_JAVA:
        raise SparkUnavailableError(
            f"The Spark engine needs Java {_MIN_JAVA} or later; {java} is Java {major}. Point "
            "JAVA_HOME at a newer JDK or use the local engine (--engine local)."
        )
    return java


def _total_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return None


def _local_cores(master: str) -> int:
    match = re.fullmatch(r"local\[(\d+|\*)(?:,\d+)?\]", master)
    if master == "local":
        return 1
    if match and match.group(1) != "*":
        return int(match.group(1))
    return os.cpu_count() or 1


def local_settings(master: str, memory: int | None = None) -> dict[str, str]:
    """Spark settings sized for a local master on this machine.

    - ``spark.driver.memory``: a quarter of RAM, clamped to [1, 8] GiB. In local mode the
      driver runs every task, and the 1 GiB default spills joins and windows to disk (a 20M
      pair job took 3x longer).
    - ``spark.sql.shuffle.partitions``: 4 per core (at least 8) instead of 200 tiny tasks;
      adaptive execution merges them further.
    - ``spark.sql.inMemoryColumnarStorage.compressed``: false. On one machine the cores run
      short before the memory does: a selection caches its ranked pairs and a GROUP BY its
      rows and per-(user, key) statistics, and compressing them cost more than the frames'
      readers saved (the default selection on 10.2M rows: 2.5x the bytes, 374 MB against
      148 MB, and about 5% less time; the Spark GROUP BY about 10% less). What does not fit
      in memory spills to disk (every cache is MEMORY_AND_DISK).
    """
    memory = _total_memory() if memory is None else memory
    driver = 4 * _GIB if memory is None else min(max(memory // 4, _GIB), 8 * _GIB)
    cores = _local_cores(master)
    return {
        "spark.driver.memory": f"{driver // (1 << 20)}m",
        "spark.sql.shuffle.partitions": str(max(8, 4 * cores)),
        "spark.sql.inMemoryColumnarStorage.compressed": "false",
    }


def spark_session(
    master: str | None = None, config: Mapping[str, Any] | None = None, *, quiet: bool = True
) -> SparkSession:
    """The active SparkSession, or a new one configured to start on a fresh machine.

    Parameters
    ----------
    master : str or None, default=None
        Spark master URL for a new session (``"local[*]"`` when None). Ignored, with a
        warning, when a session is already active: Spark has one per process.
    config : mapping or None, default=None
        Extra settings for a new session, e.g. ``{"spark.executor.memory": "8g"}``; they
        override userdp's.
    quiet : bool, default=True
        Start the JVM with its stderr pointed at ``os.devnull`` (its start-up notes, log4j
        lines and stage progress bars otherwise fill the console or notebook), with progress
        bars off and Spark's log level at ERROR. Errors still reach Python as exceptions.
        ``quiet=False`` keeps Spark's console output, for debugging.

    Notes
    -----
    For a new session, the worker Python is this interpreter (``PYSPARK_PYTHON``), a local
    master binds to 127.0.0.1 (``SPARK_LOCAL_IP``), the UI is off and Arrow transfer is on;
    local masters also get :func:`local_settings`. Existing environment variables win.
    Spark's cache of generated code holds :data:`CODEGEN_CACHE_ENTRIES` classes, so that a
    second selection or GROUP BY in the session reuses the first one's compiled classes, and
    Arrow batches sent to Python are bounded by their rows alone
    (:data:`ARROW_BATCH_BYTES`), which spares a check of their bytes after every row.
    """
    require_pyspark()
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        if master is not None and active.sparkContext.master != master:
            logger.warning(
                "A Spark session (master %s) is already running; using it instead of %s.",
                active.sparkContext.master,
                master,
            )
        return active
    check_java()
    master = master or "local[*]"
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    settings: dict[str, str] = {
        "spark.ui.enabled": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.showConsoleProgress": "false" if quiet else "true",
        # The driver keeps every SQL plan for the UI; userdp runs many jobs with large adaptive
        # plans, so keep few (a long test or notebook session otherwise fills the heap).
        "spark.sql.ui.retainedExecutions": "20",
        "spark.ui.retainedJobs": "100",
        "spark.ui.retainedStages": "200",
        # why Spark's default of 100 is too small: CODEGEN_CACHE_ENTRIES
        "spark.sql.codegen.cache.maxEntries": str(CODEGEN_CACHE_ENTRIES),
        # why Spark's per-row byte check is off: ARROW_BATCH_BYTES
        "spark.sql.execution.arrow.maxBytesPerBatch": str(ARROW_BATCH_BYTES),
    }
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        settings["spark.driver.bindAddress"] = "127.0.0.1"
        settings["spark.driver.host"] = "127.0.0.1"
        settings.update(local_settings(master))
    settings.update({k: str(v) for k, v in (config or {}).items()})
    builder = SparkSession.builder.master(master).appName("userdp")
    for key, value in settings.items():
        builder = builder.config(key, value)
    try:
        with _jvm_stderr_silenced(quiet):
            session = builder.getOrCreate()
    except Exception as err:  # Py4J / JVM start-up failures carry no common type
        raise SparkUnavailableError(f"Spark failed to start ({master}): {err}") from err
    session.sparkContext.setLogLevel("ERROR" if quiet else "WARN")
    return session


@contextlib.contextmanager
def stopping_new_sessions() -> Iterator[None]:
    """Stop the Spark session the block starts, and end the JVM it launched, on any exit.

    For the command line: an error, Ctrl-C or SIGTERM (raised as an exception) unwinds through
    here, so no Java process outlives the command. A session or JVM that was running before
    the block (a notebook's, a test suite's) is left running. Never imports PySpark.
    """
    before = _spark_state()
    try:
        yield
    finally:
        _end_new_spark(before)


def _spark_state() -> tuple[Any, Any]:
    """PySpark's active SparkContext and py4j gateway (None, None if PySpark is not loaded)."""
    pyspark = sys.modules.get("pyspark")
    context_class = getattr(pyspark, "SparkContext", None)
    if context_class is None:
        return None, None
    return (
        getattr(context_class, "_active_spark_context", None),
        getattr(context_class, "_gateway", None),
    )


def _end_new_spark(before: tuple[Any, Any]) -> None:
    """Stop the context and shut down the gateway that are not those of ``before``."""
    context, gateway = _spark_state()
    with warnings.catch_warnings():  # PySpark warns when the JVM is already gone
        warnings.simplefilter("ignore")
        if context is not None and context is not before[0]:
            try:
                from pyspark.sql import SparkSession

                session = SparkSession.getActiveSession()
                (session if session is not None else context).stop()
            except Exception as err:  # py4j after an interrupted call, a JVM gone: end it below
                logger.debug("Stopping the Spark session failed: %s", err)
                with contextlib.suppress(Exception):
                    context.stop()
        if gateway is not None and gateway is not before[1]:
            with contextlib.suppress(Exception):
                gateway.shutdown()  # py4j's sockets and callback server, Python side and Java's
            context_class = sys.modules["pyspark"].SparkContext
            context_class._gateway = None  # a later session launches a JVM of its own
            context_class._jvm = None
            _end_process(getattr(gateway, "proc", None))
        elif gateway is None and before[1] is None:  # interrupted while PySpark launched a JVM
            for pid in _launched_gateways():
                _end_child(pid)


def _end_process(proc: subprocess.Popen[bytes] | None) -> None:
    """End the JVM that PySpark launched: the end of its stdin, then SIGTERM, then SIGKILL.

    PySpark's gateway reads its standard input and exits (running Spark's shutdown hooks) when
    it ends; each step gets :data:`JVM_EXIT_SECONDS`.
    """
    if proc is None:  # PySpark attached to a JVM it did not launch (PYSPARK_GATEWAY_PORT)
        return
    if proc.stdin is not None:
        with contextlib.suppress(OSError):
            proc.stdin.close()
    for step in (None, proc.terminate, proc.kill):
        if step is not None:
            with contextlib.suppress(OSError):
                step()
        try:
            proc.wait(timeout=JVM_EXIT_SECONDS)
            return
        except subprocess.TimeoutExpired:
            logger.debug("The Spark JVM (pid %d) has not exited yet.", proc.pid)


def _launched_gateways() -> list[int]:
    """Children of this process that are PySpark's gateway JVM, or the ``spark-submit`` script
    about to become it (Linux ``/proc``; none found elsewhere).

    An interrupt while PySpark waits for a new JVM to report its port loses PySpark's handle on
    it, and that JVM then runs on forever (it cannot report and never reads its input).
    """
    found = []
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    parent = int(f.read().rsplit(b")", 1)[1].split()[1])
                if parent != os.getpid():
                    continue
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except (OSError, ValueError, IndexError):  # gone meanwhile, or not readable
                continue
            launcher = any(a.endswith((b"spark-submit", b".deploy.SparkSubmit")) for a in argv)
            if launcher and b"pyspark-shell" in argv:
                found.append(int(entry))
    return found


def _end_child(pid: int) -> None:
    """End child process ``pid``: SIGTERM, then SIGKILL, each given :data:`JVM_EXIT_SECONDS`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(OSError):
            os.kill(pid, sig)
        deadline = time.monotonic() + JVM_EXIT_SECONDS
        while time.monotonic() < deadline:
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    return
            except ChildProcessError:  # already reaped (by its Popen object)
                return
            time.sleep(0.05)


def python_partitions(spark: Any, rows: int, rows_per_call: int) -> int:
    """Partitions for a pandas pass over ``rows`` rows: one per core, in as many waves as keep
    each call under ``rows_per_call`` rows (the call holds its partition in memory).

    A Python task costs more than its rows: each one starts an Arrow stream both ways and a
    pandas call with its own set-up, so a pass over a frame in 8 partitions on 2 cores does
    markedly more work than the same pass in 2 (docs/spark.md has the measurement). Merging
    partitions (``coalesce``) keeps whole groups whole.
    """
    cores = max(1, int(spark.sparkContext.defaultParallelism))
    return cores * max(1, math.ceil(rows / (rows_per_call * cores)))


def whole_partition(fn: Any) -> Any:
    """A ``mapInPandas`` body that runs ``fn`` once on all the rows of its partition.

    For frames whose partitions hold whole groups (every row of a user, or of a hash bucket
    of items), so that a per-group computation needs neither a shuffle nor one Python call per
    group: ``fn`` gets the partition as one pandas DataFrame and returns one; an empty partition
    yields nothing. The caller guarantees the partitioning (a shuffle or a window by the group's
    key just before, and nothing in between that moves rows).
    """

    def run(batches: Any) -> Any:
        import pandas as pd

        frames = [b for b in batches if len(b)]
        if frames:
            yield fn(pd.concat(frames, ignore_index=True))

    return run


@contextlib.contextmanager
def _jvm_stderr_silenced(quiet: bool) -> Iterator[None]:
    """Point file descriptor 2 at ``os.devnull`` while the JVM launches (it inherits it).

    Python's own ``sys.stderr`` is restored as soon as the JVM is up; only the JVM's console
    (start-up notes, log4j, progress bars) stays silenced for the session's life.
    """
    if not quiet:
        yield
        return
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no real stderr (some notebooks): nothing to silence
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
