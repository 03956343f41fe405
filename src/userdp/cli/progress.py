"""Progress on stderr for the ``userdp`` commands: tqdm bars over counts, stages and phases.

Drawn only on an interactive stderr without ``--quiet``; a bar only counts (it draws no
randomness), so a seeded release is the same with it or without.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

logger = logging.getLogger("userdp")

#: Inputs at least this large (in bytes) get a progress bar on an interactive stderr.
PROGRESS_MIN_BYTES = 50 * 1024 * 1024


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
