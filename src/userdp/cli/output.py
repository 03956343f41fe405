"""Output paths of the ``userdp`` commands: checks made before any work, and an atomic writer
(a failed or interrupted run leaves any existing file untouched)."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from userdp.exceptions import InvalidParameterError

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
