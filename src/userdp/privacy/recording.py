"""The release-recording hook: every mechanism declares each noised statistic here.

:func:`record` is called with the EXACT pre-noise value of a statistic and its declared
sensitivity under add/remove one user, immediately before noise is added (the noise helpers
:meth:`~userdp.privacy.NoiseSource.add_gaussian` and
:meth:`~userdp.privacy.NoiseSource.add_laplace` call it for you). It is a no-op unless a
recorder is active; :func:`recording` activates one for the current thread/context and yields
the list of :class:`Release` records, which the auditor (:mod:`userdp.audit`) compares between a
dataset and its neighbours run with the same seed.

Recording is observation only: it never changes the noise, the released values or the accounting.
Recorded values are exact, unnoised statistics of private data: never log or release them.

Examples
--------
>>> import numpy as np
>>> with recording() as releases:
...     record("count", np.array([3.0, 1.0]), l1=1.0, index=np.array(["a", "b"]))
>>> releases[0].statistic, releases[0].value.tolist(), releases[0].l1
('count', [3.0, 1.0], 1.0)
>>> record("ignored", 1.0)  # no recorder active: nothing happens
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["Release", "record", "recording"]

_ACTIVE: contextvars.ContextVar[list[Release] | None] = contextvars.ContextVar(
    "userdp_release_recorder", default=None
)


@dataclass(frozen=True)
class Release:
    """One noised statistic as declared by its mechanism.

    Attributes
    ----------
    statistic : str
        Name of the statistic, stable across runs (e.g. ``"mean.sum"``); with the occurrence
        number (the n-th release of that name in a run) it identifies the release.
    value : ndarray
        The exact pre-noise value (a copy, float64, at least 1-D).
    l1, l2, linf : float or None
        Declared sensitivity under add/remove one user in each norm, where the proof states one.
    index : ndarray or None
        Labels of ``value``'s first axis (user-independent keys such as item labels) so that
        runs on neighbouring datasets can be aligned; None when the axis is fixed.
    """

    statistic: str
    value: np.ndarray
    l1: float | None = None
    l2: float | None = None
    linf: float | None = None
    index: np.ndarray | None = None


def record(
    statistic: str,
    value: ArrayLike,
    *,
    l1: float | None = None,
    l2: float | None = None,
    linf: float | None = None,
    index: ArrayLike | None = None,
) -> None:
    """Declare the exact pre-noise ``value`` of ``statistic`` and its sensitivity.

    No-op (and no copy) unless a recorder is active (see :func:`recording`).

    Parameters
    ----------
    statistic : str
        Stable name of the statistic (``"module.quantity"``).
    value : array_like
        The exact value about to be noised; copied.
    l1, l2, linf : float or None, default=None
        Declared sensitivity under add/remove one user; give what the proof states.
    index : array_like or None, default=None
        Labels of the first axis of ``value`` (length ``value.shape[0]``), or None.
    """
    sink = _ACTIVE.get()
    if sink is None:
        return
    arr = np.array(value, dtype=np.float64, copy=True)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    labels = None if index is None else np.array(index, copy=True)
    sink.append(
        Release(
            statistic=str(statistic),
            value=arr,
            l1=None if l1 is None else float(l1),
            l2=None if l2 is None else float(l2),
            linf=None if linf is None else float(linf),
            index=labels,
        )
    )


def is_recording() -> bool:
    """Whether a recorder is active (lets a mechanism skip building labels it would not need)."""
    return _ACTIVE.get() is not None


@contextmanager
def recording() -> Iterator[list[Release]]:
    """Record every release made inside the ``with`` block; yields the list of :class:`Release`.

    Nested recorders each see only their own block's releases (the inner one shadows the outer).
    """
    releases: list[Release] = []
    token = _ACTIVE.set(releases)
    try:
        yield releases
    finally:
        _ACTIVE.reset(token)
