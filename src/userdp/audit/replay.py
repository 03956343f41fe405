"""Record/replay sensitivity audit (in the spirit of dp-recorder and Google's stochastic tester).

A mechanism is run under :func:`~userdp.privacy.recording.recording` on the data, then on each
neighbouring dataset with the SAME seed, replaying the first run's released outputs (so every
later step of an adaptive mechanism is evaluated at the same released history, which is what
its per-step sensitivity is stated for). Each recorded statistic is aligned by name, occurrence
and its ``index`` labels (a label missing on one side counts as 0) and the largest change in
l1, l2 and linf is compared with the declared bound.

Replay needs the randomness consumed before a release to be the same on both runs. The noise
helpers record a fingerprint of the generator's state at each release; where the fingerprints
differ (the data changed how much randomness was drawn before, e.g. one random key per record,
or noise over a data-dependent number of items), the comparison could not be made: that is a
FAIL ("not replayable"), as is a declared statistic that no neighbour could be compared on. A
check that could not be made is not a pass.

The float check (one row per statistic, norm ``"grid"``): every recorded output must lie on
the lattice ``origin + k * grid`` its release declared (the safe-noise grid), on the data and
on every neighbour, and the declared grid must be the same on every neighbour (a grid that
moves with the data is a channel of its own), and a published release's labels (``index``)
must be the same on every neighbour (a release over the data's own items names them). A
release with no output recorded or no grid declared FAILs it; a release marked
``thresholded`` (only compared with a threshold, never published) may have the data's labels,
and is exempt when it declares no grid. Textbook float noise ``x + Z`` fails it: its outputs
are not on a grid.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from userdp.audit.neighbours import Neighbour, Table, far_tables, neighbours
from userdp.privacy.recording import Release, recording

__all__ = ["AuditRow", "Comparison", "audit_sensitivity", "compare_releases"]

RTOL = 1e-9  # relative slack for float summation order in the exact statistics
NORMS = ("l1", "l2", "linf")
GRID = "grid"  # the norm column of the float check's rows
REPLAY = "replay"  # the norm column of the released-values check's rows
#: Fields of a result's ``to_dict()`` that name or count the released labels: the label checks
#: above cover them (a novel label may pass its threshold with probability delta).
_LABEL_FIELDS = frozenset({"items", "keys"})


@dataclass(frozen=True)
class Comparison:
    """The change of one release between the data and one neighbour."""

    statistic: str
    occurrence: int
    neighbour: str
    relation: str
    change: dict[str, float]
    declared: dict[str, float]
    replayable: bool
    shape_changed: bool = False


@dataclass
class AuditRow:
    """Worst change of one (mechanism, statistic, norm) over all neighbours, or (norm
    ``"grid"``) the float check of one statistic: ``declared`` is its grid, ``worst`` the
    number of released values off it, ``compared`` the number of values checked."""

    mechanism: str
    statistic: str
    norm: str
    relation: str
    declared: float
    worst: float = 0.0
    ratio: float = 0.0
    worst_neighbour: str = ""
    compared: int = 0
    not_replayable: int = 0
    ratio_not_replayable: float = 0.0
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def add(self, change: float, bound: float, neighbour: str, replayable: bool) -> None:
        """Fold in one comparison: ``change`` against the bound declared on the data's run."""
        ratio = change / bound if bound > 0 else (0.0 if change == 0 else float("inf"))
        if not replayable:
            self.not_replayable += 1
            self.ratio_not_replayable = max(self.ratio_not_replayable, ratio)
            return
        self.compared += 1
        if ratio > self.ratio or self.compared == 1:
            self.worst, self.ratio, self.declared = change, ratio, bound
            self.worst_neighbour = neighbour

    def problem(self, text: str, where: str = "") -> None:
        """Record a failed check, once, with the first dataset it was seen on."""
        if not any(p.startswith(text) for p in self.problems):
            self.problems.append(f"{text} (first on {where})" if where else text)

    @property
    def verdict(self) -> str:
        """Pass or FAIL: above the bound, off the grid, or a check that could not be made."""
        if self.problems:
            return "FAIL"
        if self.norm == GRID:
            return "pass"
        if self.norm == REPLAY:
            return "pass" if self.compared else "FAIL"
        if self.ratio > 1.0 + RTOL or self.not_replayable or self.compared == 0:
            return "FAIL"
        return "pass"

    @property
    def reason(self) -> str:
        """Why the row failed ("" when it passed)."""
        out = list(self.problems)
        if self.norm == REPLAY:
            if not self.compared and not self.problems:
                out.append("not compared on any fully replayed neighbour")
        elif self.norm != GRID:
            if self.ratio > 1.0 + RTOL:
                out.append(f"{self.ratio:.4g}x the declared bound")
            if self.not_replayable:
                out.append(
                    f"{self.not_replayable} of {self.compared + self.not_replayable} "
                    "comparisons not replayable"
                )
            if self.compared + self.not_replayable == 0:
                out.append("not compared on any neighbour")
        return "; ".join(out)

    def as_dict(self) -> dict[str, object]:
        return {
            "mechanism": self.mechanism,
            "statistic": self.statistic,
            "norm": self.norm,
            "relation": self.relation,
            "declared_bound": self.declared,
            "worst_found": self.worst,
            "ratio": self.ratio,
            "verdict": self.verdict,
            "reason": self.reason,
            "worst_neighbour": self.worst_neighbour,
            "compared": self.compared,
            "not_replayable": self.not_replayable,
            "ratio_not_replayable": self.ratio_not_replayable,
            "notes": list(self.notes),
        }


def _by_occurrence(releases: Sequence[Release]) -> dict[tuple[str, int], Release]:
    out: dict[tuple[str, int], Release] = {}
    counts: dict[str, int] = {}
    for rel in releases:
        k = counts.get(rel.statistic, 0)
        counts[rel.statistic] = k + 1
        out[(rel.statistic, k)] = rel
    return out


def _aligned_difference(a: Release, b: Release) -> np.ndarray | None:
    """``a.value - b.value`` aligned on the index labels (missing = 0); None if not alignable."""
    if a.index is None or b.index is None:
        if a.value.shape != b.value.shape:
            return None
        return (a.value - b.value).ravel()
    if a.value.shape[1:] != b.value.shape[1:]:
        return None
    labels = np.union1d(a.index, b.index)
    full_a = np.zeros((labels.size, *a.value.shape[1:]))
    full_b = np.zeros_like(full_a)
    full_a[np.searchsorted(labels, a.index)] = a.value
    full_b[np.searchsorted(labels, b.index)] = b.value
    return (full_a - full_b).ravel()


def _norms(diff: np.ndarray) -> dict[str, float]:
    if diff.size == 0:
        return dict.fromkeys(NORMS, 0.0)
    a = np.abs(diff)
    return {"l1": float(a.sum()), "l2": float(np.sqrt((a * a).sum())), "linf": float(a.max())}


def compare_releases(
    base: Sequence[Release], other: Sequence[Release], neighbour: Neighbour
) -> list[Comparison]:
    """Compare every release of ``base`` declared for ``neighbour.relation`` with ``other``'s."""
    theirs = _by_occurrence(other)
    out = []
    for (name, k), a in _by_occurrence(base).items():
        if a.neighbours != neighbour.relation:
            continue
        declared = {n: v for n in NORMS if (v := getattr(a, n)) is not None}
        b = theirs.get((name, k))
        if b is None:
            continue  # reported by the caller as a missing release
        replayable = a.rng_state is None or b.rng_state is None or a.rng_state == b.rng_state
        diff = _aligned_difference(a, b)
        if diff is None:
            out.append(
                Comparison(
                    name,
                    k,
                    neighbour.label,
                    neighbour.relation,
                    {},
                    declared,
                    replayable,
                    shape_changed=True,
                )
            )
            continue
        out.append(
            Comparison(
                name, k, neighbour.label, neighbour.relation, _norms(diff), declared, replayable
            )
        )
    return out


def _same_labels(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and bool(np.all(np.sort(a) == np.sort(b)))


def _check_grid(
    row: AuditRow,
    rel: Release,
    where: str,
    expected: float | None,
    labels: np.ndarray | None = None,
) -> None:
    """Fold one release's output into the float check ``row`` (see the module docstring);
    ``expected``: the grid the same (statistic, occurrence) declared on the data, ``labels``
    its index there (a published release's labels must not move)."""
    if rel.thresholded and rel.grid is None:
        if "thresholded: only compared with a threshold" not in row.notes:
            row.notes.append("thresholded: only compared with a threshold")
        return
    if labels is not None and not rel.thresholded and not _same_labels(rel.index, labels):
        row.problem("released labels depend on the data", where)
    if rel.output is None:
        row.problem("no output recorded (the release bypasses the noise helpers)")
        return
    if rel.grid is None or not rel.grid > 0:
        row.problem("no grid declared")
        return
    if expected is not None and rel.grid != expected:
        row.problem("grid depends on the data", f"{where}: {rel.grid:.6g} against {expected:.6g}")
    out = np.asarray(rel.output, dtype=np.float64).ravel()
    k = (out - rel.origin) / rel.grid
    off = int(np.count_nonzero(~np.isfinite(k) | (k != np.rint(k))))
    row.compared += out.size
    if off:
        row.worst += off
        row.worst_neighbour = row.worst_neighbour or where
        row.problem(f"released values off the declared grid {rel.grid:.6g}", where)


def released_view(result: object) -> dict[str, Any] | None:
    """What a result publishes, as flat ``path -> value`` (None: the result has no
    ``to_dict()``). A table's rows (``rows``, each with a ``key``) are keyed by that label."""
    to_dict = getattr(result, "to_dict", None)
    if not callable(to_dict):
        return None
    out: dict[str, Any] = {}

    def walk(path: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{path}.{k}" if path else str(k), v)
        elif (
            isinstance(value, list)
            and value
            and all(isinstance(r, dict) and "key" in r for r in value)
        ):
            for r in value:
                walk(f"{path}[key={r['key']!r}]", {k: v for k, v in r.items() if k != "key"})
        elif isinstance(value, list | tuple):
            for j, v in enumerate(value):
                walk(f"{path}[{j}]", v)
        else:
            out[path] = value

    walk("", {k: v for k, v in to_dict().items() if k not in _LABEL_FIELDS})
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=RTOL, abs_tol=0.0) or a == b
    return bool(a == b)


def compare_views(base: dict[str, Any], other: dict[str, Any]) -> list[str]:
    """The paths whose released value differs between two runs (rows of a table: the labels
    both runs released; another path present on one side only is a difference too)."""
    out = []
    for path in sorted(set(base) | set(other)):
        if "[key=" in path and (path not in base or path not in other):
            continue  # a label released on one side only: the label checks' business
        if path not in base or path not in other:
            out.append(f"{path} released on one side only")
        elif not _same(base[path], other[path]):
            out.append(f"{path}: {base[path]!r} against {other[path]!r}")
    return out


def _fully_replayed(base: Sequence[Release], other: Sequence[Release]) -> bool:
    """``other`` made the same releases as ``base`` in the same order from the same generator
    states, so each took the replayed output (labels new on one side excepted: fresh noise)."""
    if len(base) != len(other):
        return False
    for a, b in zip(base, other, strict=True):
        if a.statistic != b.statistic:
            return False
        if a.rng_state is not None and b.rng_state is not None and a.rng_state != b.rng_state:
            return False
    return True


def _declared_differences(base: Sequence[Release], other: Sequence[Release]) -> list[str]:
    """Releases whose declared sensitivity or grid differs between two replayed runs: both
    must be functions of public inputs and earlier releases only."""
    out = []
    for a, b in zip(base, other, strict=True):
        for what in (*NORMS, "grid"):
            x, y = getattr(a, what), getattr(b, what)
            if (x is None) != (y is None) or (x is not None and not _same(x, y)):
                out.append(f"the declared {what} of {a.statistic}: {x!r} against {y!r}")
    return out


def _replay_check(
    row: AuditRow,
    base: Sequence[Release],
    other: Sequence[Release],
    view: dict[str, Any] | None,
    theirs: dict[str, Any] | None,
    where: str,
) -> None:
    """Every released value and parameter (bounds, h, C, grids, noise sd, a ratio's terms) is a
    function of the noisy outputs and public inputs: under replayed noise, equal."""
    row.compared += 1
    diff = _declared_differences(base, other)
    if view is not None and theirs is not None:
        diff += compare_views(view, theirs)
    if diff:
        row.worst += len(diff)
        row.worst_neighbour = row.worst_neighbour or where
        row.problem(f"a released value depends on the data under replayed noise: {diff[0]}", where)


def audit_sensitivity(
    name: str,
    run: Callable[[Table, int], object],
    table: Table,
    *,
    seed: int = 0,
    max_removals: int = 20,
    neighbour_seed: int = 0,
) -> tuple[list[AuditRow], list[str]]:
    """Audit the declared sensitivities of mechanism ``run`` on ``table`` and its neighbours.

    Parameters
    ----------
    name : str
        The mechanism's name in the report.
    run : callable (Table, seed) -> object
        Runs the whole release with the given seed (its result is ignored).
    table : Table
        The data.
    seed : int, default=0
        The seed of every run (the same on the data and on each neighbour).
    max_removals : int, default=20
        How many users are removed, one at a time (the heaviest first).

    Returns
    -------
    (rows, notes)
        One :class:`AuditRow` per (statistic, declared norm), one float-check row (norm
        ``"grid"``) per statistic, and notes (statistics missing on a
        neighbour, shapes that changed, mechanisms that recorded nothing).
    """
    with recording() as base:
        view = released_view(run(table, seed))
    notes: list[str] = []
    if not base:
        return [], [f"{name}: recorded no release (its noise does not go through the hook)"]
    relations = tuple(sorted({r.neighbours for r in base}))
    rows: dict[tuple[str, str, str], AuditRow] = {}
    grids: dict[str, AuditRow] = {}
    for rel in base:
        for norm in NORMS:
            bound = getattr(rel, norm)
            key = (rel.statistic, norm, rel.neighbours)
            if bound is not None and key not in rows:
                rows[key] = AuditRow(name, rel.statistic, norm, rel.neighbours, bound)
        if rel.statistic not in grids:
            grids[rel.statistic] = AuditRow(
                name, rel.statistic, GRID, rel.neighbours, rel.grid if rel.grid is not None else 0.0
            )
        _check_grid(grids[rel.statistic], rel, "the data", None)
    declared = _by_occurrence(base)
    replay_row = AuditRow(name, "released values", REPLAY, relations[0], 0.0)
    for nb in neighbours(
        table, relations=relations, max_removals=max_removals, seed=neighbour_seed
    ):
        with recording(replay=base) as other:
            theirs = released_view(run(nb.table, seed))
        if _fully_replayed(base, other):
            _replay_check(replay_row, base, other, view, theirs, nb.label)
        if len(other) != len(base):
            notes.append(f"{name}: {nb.label}: {len(other)} releases vs {len(base)} on the data")
        for occurrence, rel in _by_occurrence(other).items():
            if rel.statistic in grids:
                mine = declared.get(occurrence)
                _check_grid(
                    grids[rel.statistic],
                    rel,
                    nb.label,
                    None if mine is None else mine.grid,
                    None if mine is None else mine.index,
                )
        for c in compare_releases(base, other, nb):
            for norm, bound in c.declared.items():
                row = rows[(c.statistic, norm, c.relation)]
                if c.shape_changed:
                    row.notes.append(f"{nb.label}: shape changed at occurrence {c.occurrence}")
                    continue
                row.add(c.change[norm], bound, nb.label, c.replayable)
    if relations == ("add-remove",):  # with public sizes, far data change public inputs
        for far in far_tables(table):
            with recording(replay=base) as other:
                theirs = released_view(run(far.table, seed))
            if _fully_replayed(base, other):
                _replay_check(replay_row, base, other, view, theirs, far.label)
    if view is None:
        notes.append(f"{name}: its result has no to_dict(): only declared bounds replayed")
    return [*rows.values(), *grids.values(), replay_row], notes
