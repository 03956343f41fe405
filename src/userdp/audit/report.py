"""Run the whole audit and format it: a table (or JSON) of every mechanism's statistics.

A check that cannot fail is not a check: a mechanism that compared no statistic on any
neighbour (it recorded nothing, or only releases with no declared bound) FAILs, a mechanism the
data cannot feed is listed as not run (never as a pass), and an audit of nothing is refused.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from userdp._validation import MAX_AUDIT_RUNS, MAX_AUDIT_USERS, MAX_NOVEL_ITEMS, check_int
from userdp.audit.epsilon import EpsilonBound
from userdp.audit.hard import EXPERIMENTS, run_experiment, runs_per_side
from userdp.audit.mechanisms import MECHANISMS, audit_table, describe_unrunnable, unrunnable
from userdp.audit.neighbours import Table
from userdp.audit.replay import GRID, REPLAY, AuditRow, audit_sensitivity
from userdp.audit.threshold import ThresholdRow, threshold_rows
from userdp.exceptions import InvalidParameterError

__all__ = ["AuditReport", "MechanismSummary", "run_audit", "summarize"]


@dataclass(frozen=True)
class MechanismSummary:
    """One audited mechanism: its declared statistics, how many were compared on some
    neighbour, and its verdict (FAIL when a row failed or no statistic was compared)."""

    mechanism: str
    statistics: int
    statistics_compared: int
    comparisons: int
    verdict: str
    reason: str

    def as_dict(self) -> dict[str, object]:
        return {
            "mechanism": self.mechanism,
            "statistics": self.statistics,
            "statistics_compared": self.statistics_compared,
            "comparisons": self.comparisons,
            "verdict": self.verdict,
            "reason": self.reason,
        }


def summarize(mechanism: str, rows: Sequence[AuditRow]) -> MechanismSummary:
    """The verdict of ``mechanism`` from its rows: a pass needs every row to pass and at least
    one declared statistic compared on a neighbour (the float check and the replay check alone
    compare no sensitivity)."""
    mine = [r for r in rows if r.mechanism == mechanism]
    bounded = [r for r in mine if r.norm not in (GRID, REPLAY)]
    compared = {r.statistic for r in bounded if r.compared > 0}
    reasons = []
    if not compared:
        why = "recorded no release" if not mine else "declared no bound to compare"
        reasons.append(f"no statistic compared on any neighbour ({why})")
    failing = sorted({r.statistic for r in mine if r.verdict == "FAIL"})
    if failing:
        reasons.append(f"failing: {', '.join(failing)}")
    return MechanismSummary(
        mechanism,
        statistics=len({r.statistic for r in mine}),
        statistics_compared=len(compared),
        comparisons=sum(r.compared for r in bounded),
        verdict="FAIL" if reasons else "pass",
        reason="; ".join(reasons),
    )


@dataclass
class AuditReport:
    """Sensitivity rows, epsilon lower bounds and notes of one audit run; ``audited``: the
    mechanisms run, ``not_run``: those the data could not feed, each with the reason."""

    rows: list[AuditRow] = field(default_factory=list)
    bounds: list[EpsilonBound] = field(default_factory=list)
    thresholds: list[ThresholdRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    audited: list[str] = field(default_factory=list)
    not_run: dict[str, str] = field(default_factory=dict)

    @property
    def mechanisms(self) -> list[MechanismSummary]:
        """One summary per audited mechanism, in the order run."""
        return [summarize(name, self.rows) for name in self.audited]

    @property
    def failed(self) -> bool:
        """True if a row failed (sensitivity, float check, threshold), an audited mechanism
        compared no statistic, an epsilon lower bound exceeds epsilon, or nothing was audited."""
        return (
            not self.audited
            or any(r.verdict == "FAIL" for r in self.rows)
            or any(m.verdict == "FAIL" for m in self.mechanisms)
            or any(b.verdict == "VIOLATION" for b in self.bounds)
            or any(t.verdict == "FAIL" for t in self.thresholds)
        )

    def summary(self) -> str:
        """The closing line: verdict, worst ratio, mechanisms audited and not run, seconds."""
        verdict = "FAIL" if self.failed else "pass"
        return (
            f"{verdict}; worst ratio {self.worst_ratio:.4f}; {len(self.audited)} audited, "
            f"{len(self.not_run)} not run; {self.seconds:.1f} s"
        )

    @property
    def worst_ratio(self) -> float:
        """Largest worst-found / declared ratio over replayable comparisons."""
        return max((r.ratio for r in self.rows if r.norm != GRID), default=0.0)

    def as_dict(self) -> dict[str, object]:
        return {
            "failed": self.failed,
            "worst_ratio": self.worst_ratio,
            "mechanisms": [m.as_dict() for m in self.mechanisms],
            "not_run": [{"mechanism": n, "reason": why} for n, why in self.not_run.items()],
            "sensitivity": [r.as_dict() for r in self.rows],
            "epsilon_lower_bounds": [b.as_dict() for b in self.bounds],
            "thresholds": [t.as_dict() for t in self.thresholds],
            "notes": list(self.notes),
            "seconds": self.seconds,
        }

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2)

    def table(self) -> str:
        """Plain-text tables: sensitivity audit, then epsilon lower bounds, then notes."""
        head = (
            "mechanism",
            "statistic",
            "norm",
            "neighbours",
            "declared",
            "worst",
            "ratio",
            "verdict",
        )
        body = [
            (
                r.mechanism,
                r.statistic,
                r.norm,
                r.relation,
                f"{r.declared:.6g}",
                f"{r.worst:.6g}",
                f"{r.ratio:.4f}",
                _verdict(r),
            )
            for r in self.rows
        ]
        lines = _format(head, body)
        if self.bounds:
            lines.append("")
            head2 = (
                "mechanism",
                "event",
                "epsilon",
                "runs",
                "p0",
                "p1",
                "eps lower bound",
                "verdict",
            )
            body2 = [
                (
                    b.mechanism,
                    b.event,
                    f"{b.epsilon:g}",
                    str(b.runs),
                    f"{b.p0:.4f}",
                    f"{b.p1:.4f}",
                    f"{b.lower_bound:.3f}",
                    b.verdict,
                )
                for b in self.bounds
            ]
            lines += _format(head2, body2)
        if self.thresholds:
            lines.append("")
            head3 = (
                "selection",
                "round",
                "rho",
                "grid",
                "threshold delta",
                "worst t",
                "p(t) / allowed",
                "verdict",
            )
            body3 = [
                (
                    t.mechanism,
                    str(t.round),
                    f"{t.rho:.6f}",
                    f"{t.grid:.3g}",
                    f"{t.threshold_delta:.3g}",
                    str(t.worst_t),
                    f"{t.ratio:.12f}",
                    t.verdict,
                )
                for t in self.thresholds
            ]
            lines += _format(head3, body3)
        lines += [f"note: {n}" for n in self.notes]
        lines += [
            f"FAIL: {m.mechanism}: {m.reason}" for m in self.mechanisms if m.verdict == "FAIL"
        ]
        lines += [f"not run: {name} ({why})" for name, why in self.not_run.items()]
        lines.append(f"audit: {self.summary()}")
        return "\n".join(lines)


def _verdict(r: AuditRow) -> str:
    reason = r.reason
    return f"{r.verdict} ({reason})" if reason else r.verdict


def _format(head: Sequence[str], body: Sequence[Sequence[str]]) -> list[str]:
    widths = [
        max(len(h), *(len(row[i]) for row in body)) if body else len(h) for i, h in enumerate(head)
    ]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*head), fmt.format(*("-" * w for w in widths))] + [
        fmt.format(*row) for row in body
    ]


def _chosen(
    mechanisms: Sequence[str] | None, capability: str | None, table: Table | None
) -> tuple[list[str], dict[str, str]]:
    """(names to audit, those not run with the reason): see :func:`run_audit`."""
    names = list(MECHANISMS) if mechanisms is None else list(mechanisms)
    unknown = [n for n in names if n not in MECHANISMS]
    if unknown:
        raise InvalidParameterError(
            f"Unknown mechanism(s) {', '.join(map(repr, unknown))}; choose from "
            f"{', '.join(MECHANISMS)}."
        )
    if capability is not None:
        names = [n for n in names if MECHANISMS[n].capability == capability]
    cannot = {} if table is None else unrunnable(names, table)
    if mechanisms is not None and cannot:
        raise InvalidParameterError(
            "The 'mechanisms' parameter of run_audit names mechanisms the table cannot feed: "
            f"{describe_unrunnable(cannot)}. Give the table those columns or leave them out."
        )
    names = [n for n in names if n not in cannot]
    if not names:
        raise InvalidParameterError(
            "The 'mechanisms' parameter of run_audit leaves nothing to audit"
            + (f" on the table: {describe_unrunnable(cannot)}." if cannot else ".")
            + " An audit of no mechanism cannot fail, so it is not run."
        )
    return names, cannot


def _silent(what: str, done: int, total: int) -> None:
    return None


def run_audit(
    mechanisms: Sequence[str] | None = None,
    *,
    table: Table | None = None,
    capability: str | None = None,
    users: int = 40,
    max_removals: int = 20,
    seed: int = 0,
    epsilon_runs: int = 0,
    epsilon_scale: int = 1,
    progress: Callable[[str, int, int], None] | None = None,
) -> AuditReport:
    """Audit the named mechanisms (default: all of :data:`~userdp.audit.MECHANISMS`): the
    sensitivity and float checks on neighbours, the threshold check of the planned selections
    (when a selection is audited), and the epsilon experiments (``epsilon_runs > 0``).

    Parameters
    ----------
    mechanisms : sequence of str or None
        Names from :data:`~userdp.audit.MECHANISMS`, each of which must be able to run on
        ``table`` (:meth:`~userdp.audit.Mechanism.missing`); None audits all those that can
        and lists the others in the report's ``not_run``, with the reason.
    table : Table or None
        The data; default a synthetic :func:`~userdp.audit.mechanisms.audit_table` of ``users``
        (which feeds every mechanism). Its ``value_range`` is the declared, public range the
        value mechanisms clip to: never set it from the data's own values.
    capability : str or None
        Audit only this capability's mechanisms.
    max_removals : int, default=20
        Users removed one at a time per mechanism (the heaviest first).
    seed : int, default=0
        Seed of every replayed run, and of the synthetic data.
    epsilon_runs : int, default=0
        Runs per side for the empirical epsilon lower bounds (0 skips them). Experiments are
        those of :data:`~userdp.audit.hard.EXPERIMENTS` whose mechanism is audited.
    epsilon_scale : int, default=1
        Size factor of the hard neighbours (novel items held by the added user: 200 x scale).
    progress : callable or None
        Called as ``progress(what, done, total)`` after each audited mechanism (``what`` is
        ``"mechanisms"``) and after each epsilon run (``"runs"``, counting both sides of every
        experiment), for a progress bar. It draws no randomness: the report is the same.

    Raises
    ------
    InvalidParameterError
        An unknown name, a named mechanism ``table`` cannot feed, nothing left to audit, or a
        size above its bound (at most 10**6 runs per side and 10**6 users), before anything
        is run.
    """
    started = time.perf_counter()
    check_int(users, "users", "run_audit", low=1, high=MAX_AUDIT_USERS)
    check_int(max_removals, "max_removals", "run_audit", low=0)
    check_int(epsilon_runs, "epsilon_runs", "run_audit", low=0, high=MAX_AUDIT_RUNS)
    check_int(epsilon_scale, "epsilon_scale", "run_audit", low=1, high=MAX_NOVEL_ITEMS // 200)
    names, cannot = _chosen(mechanisms, capability, table)
    data = table if table is not None else audit_table(users, seed=seed)
    report = AuditReport(audited=names, not_run=cannot)
    tell = progress if progress is not None else _silent
    tell("mechanisms", 0, len(names))
    for done, name in enumerate(names, 1):
        mech = MECHANISMS[name]
        rows, notes = audit_sensitivity(
            name, mech.runner(data), data, seed=seed, max_removals=max_removals
        )
        report.rows += rows
        report.notes += notes
        if mech.notes:
            report.notes.append(f"{name}: {mech.notes}")
        tell("mechanisms", done, len(names))
    if any(MECHANISMS[n].capability == "partition" for n in names):
        report.thresholds = threshold_rows()
    if epsilon_runs > 0:
        experiments = [exp for exp in EXPERIMENTS if exp.mechanism in names]
        total = sum(2 * runs_per_side(exp, epsilon_runs) for exp in experiments)
        made = [0]
        tell("runs", 0, total)

        def tick() -> None:
            made[0] += 1
            tell("runs", made[0], total)

        for exp in experiments:
            report.bounds.append(
                run_experiment(
                    exp, runs=epsilon_runs, scale=epsilon_scale, seed=seed, progress=tick
                )
            )
    report.seconds = time.perf_counter() - started
    return report
