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
The one exception is the auditor's *replay* (``recording(replay=...)``): the noise helpers then
return the outputs released in an earlier recorded run, so that a run on a neighbouring dataset
is evaluated at the same released history (adaptive composition: each step's sensitivity is
stated for a fixed history). Replay exists only for auditing; it is never active otherwise.

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
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import ArrayLike

from userdp.exceptions import InvalidParameterError

__all__ = ["NEIGHBOURS", "Release", "record", "recording"]

#: Neighbouring relations a release can declare its sensitivity under.
#: ``"add-remove"``: add or remove one user with all their records (the default);
#: ``"replace-values"``: one user's values/labels change, their records' count (and public
#: features) stay, as in models that treat user sizes as public.
NEIGHBOURS = ("add-remove", "replace-values")


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
    neighbours : str
        The neighbouring relation the sensitivity is stated for (see :data:`NEIGHBOURS`).
    rng_state : int or None
        Fingerprint of the noise generator's state when the noise was drawn (set by the
        :class:`~userdp.privacy.NoiseSource` helpers): equal on two runs iff the randomness
        before this release was consumed identically, which the auditor needs for replay.
    output : ndarray or None
        The released (noised) value, set by the noise helpers after noising.
    grid : float or None
        The spacing of the public lattice ``origin + k * grid`` every entry of ``output`` lies
        on (the safe-noise grid, a power of two), declared before the draw; it must be a
        function of public parameters only. None: no grid declared.
    origin : float
        The lattice's origin (0 for the noise helpers).
    thresholded : bool
        The output is never published, only compared with a threshold (a released set): its
        labels (``index``) may be the data's own; the auditor checks its grid only if one is
        declared. Otherwise the labels of a release must be public (the same on every
        neighbour).
    """

    statistic: str
    value: np.ndarray
    l1: float | None = None
    l2: float | None = None
    linf: float | None = None
    index: np.ndarray | None = None
    neighbours: str = "add-remove"
    rng_state: int | None = None
    output: np.ndarray | None = None
    grid: float | None = None
    origin: float = 0.0
    thresholded: bool = False


class _Recorder:
    """The active recorder: the releases so far and, when auditing, outputs to replay."""

    def __init__(self, replay: list[Release] | None) -> None:
        self.releases: list[Release] = []
        self.seen: dict[str, int] = {}
        self.replay: dict[tuple[str, int], Release] = {}
        if replay is not None:
            counts: dict[str, int] = {}
            for rel in replay:
                k = counts.get(rel.statistic, 0)
                counts[rel.statistic] = k + 1
                self.replay[(rel.statistic, k)] = rel


_ACTIVE: contextvars.ContextVar[_Recorder | None] = contextvars.ContextVar(
    "userdp_release_recorder", default=None
)


def record(
    statistic: str,
    value: ArrayLike,
    *,
    l1: float | None = None,
    l2: float | None = None,
    linf: float | None = None,
    index: ArrayLike | None = None,
    neighbours: str = "add-remove",
    rng_state: int | None = None,
    grid: float | None = None,
    origin: float = 0.0,
    thresholded: bool = False,
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
    neighbours : {"add-remove", "replace-values"}, default="add-remove"
        The neighbouring relation the sensitivity is stated for.
    rng_state : int or None, default=None
        Fingerprint of the generator state (the noise helpers pass it).
    grid, origin : float or None, float
        The public lattice ``origin + k * grid`` the output will lie on (see :class:`Release`).
    thresholded : bool, default=False
        The output is only compared with a threshold, never published.
    """
    sink = _ACTIVE.get()
    if sink is None:
        return
    arr = np.array(value, dtype=np.float64, copy=True)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    labels = None if index is None else np.array(index, copy=True)
    if neighbours not in NEIGHBOURS:
        raise InvalidParameterError(
            f"The 'neighbours' parameter of record must be one of {NEIGHBOURS}. "
            f"Got {neighbours!r} instead."
        )
    name = str(statistic)
    sink.seen[name] = sink.seen.get(name, 0) + 1
    sink.releases.append(
        Release(
            statistic=name,
            value=arr,
            l1=None if l1 is None else float(l1),
            l2=None if l2 is None else float(l2),
            linf=None if linf is None else float(linf),
            index=labels,
            neighbours=neighbours,
            rng_state=rng_state,
            grid=None if grid is None else float(grid),
            origin=float(origin),
            thresholded=bool(thresholded),
        )
    )


def is_recording() -> bool:
    """Whether a recorder is active (lets a mechanism skip building labels it would not need)."""
    return _ACTIVE.get() is not None


def released(statistic: str, output: np.ndarray) -> np.ndarray:
    """Called by the noise helpers after noising the last recorded ``statistic``.

    Stores ``output`` on that release and returns what the mechanism must use: ``output``
    itself, or, when replaying, the output of the same (statistic, occurrence) in the replayed
    run. When both runs labelled the first axis (``index``), the replayed output is aligned by
    label: each label present in both runs gets the replayed run's output row, labels new in
    this run keep their fresh output (positions shift between neighbours, e.g. item codes when
    a user is removed; labels do not). Without labels it is replayed when its shape matches.
    Identity when no recorder is active.
    """
    sink = _ACTIVE.get()
    if sink is None:
        return output
    occurrence = sink.seen.get(statistic, 0) - 1
    current = None
    for pos in range(len(sink.releases) - 1, -1, -1):
        if sink.releases[pos].statistic == statistic:
            current = sink.releases[pos]
            sink.releases[pos] = replace(current, output=np.array(output, copy=True))
            break
    old = sink.replay.get((statistic, occurrence))
    if old is None or old.output is None:
        return output
    if old.index is not None and current is not None and current.index is not None:
        if np.ndim(output) and len(current.index) == np.shape(output)[0]:
            return _aligned_replay(old, current.index, output)
    # unlabelled, or labels of the recorded value rather than of the output (an exponential
    # mechanism's utility over grid points, released as one draw): replayed by shape
    if old.output.shape == np.shape(output):
        return np.array(old.output, copy=True)
    return output


def _aligned_replay(old: Release, index: np.ndarray, output: np.ndarray) -> np.ndarray:
    """``output`` with the rows whose label is in ``old.index`` replaced by ``old``'s output."""
    # the caller replays only a release with an output and labels
    assert old.output is not None and old.index is not None
    out = np.array(output, copy=True)
    if out.ndim == 0 or out.shape[1:] != old.output.shape[1:] or len(index) != out.shape[0]:
        return output
    _, mine, theirs = np.intersect1d(index, old.index, assume_unique=True, return_indices=True)
    out[mine] = old.output[theirs]
    return out


@contextmanager
def recording(replay: list[Release] | None = None) -> Iterator[list[Release]]:
    """Record every release made inside the ``with`` block; yields the list of :class:`Release`.

    Nested recorders each see only their own block's releases (the inner one shadows the outer).

    Parameters
    ----------
    replay : list of Release or None, default=None
        For auditors only: the releases of an earlier run; the noise helpers then return that
        run's outputs (matched by statistic and occurrence) instead of fresh noisy values.
    """
    sink = _Recorder(replay)
    token = _ACTIVE.set(sink)
    try:
        yield sink.releases
    finally:
        _ACTIVE.reset(token)
