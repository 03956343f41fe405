"""Run the whole audit and format it: a table (or JSON) of every mechanism's statistics."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from userdp.audit.epsilon import EpsilonBound
from userdp.audit.hard import EXPERIMENTS, run_experiment
from userdp.audit.mechanisms import MECHANISMS, audit_table
from userdp.audit.neighbours import Table
from userdp.audit.replay import GRID, AuditRow, audit_sensitivity
from userdp.audit.threshold import ThresholdRow, threshold_rows

__all__ = ["AuditReport", "run_audit"]


@dataclass
class AuditReport:
    """Sensitivity rows, epsilon lower bounds and notes of one audit run."""

    rows: list[AuditRow] = field(default_factory=list)
    bounds: list[EpsilonBound] = field(default_factory=list)
    thresholds: list[ThresholdRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        """True if a row failed (sensitivity, float check, threshold) or an epsilon lower bound
        exceeds epsilon."""
        return (
            any(r.verdict == "FAIL" for r in self.rows)
            or any(b.verdict == "VIOLATION" for b in self.bounds)
            or any(t.verdict == "FAIL" for t in self.thresholds)
        )

    @property
    def worst_ratio(self) -> float:
        """Largest worst-found / declared ratio over replayable comparisons."""
        return max((r.ratio for r in self.rows if r.norm != GRID), default=0.0)

    def as_dict(self) -> dict[str, object]:
        return {
            "failed": self.failed,
            "worst_ratio": self.worst_ratio,
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
        verdict = "FAIL" if self.failed else "pass"
        lines.append(f"audit: {verdict}; worst ratio {self.worst_ratio:.4f}; {self.seconds:.1f} s")
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


def run_audit(
    mechanisms: Sequence[str] | None = None,
    *,
    table: Table | None = None,
    users: int = 40,
    max_removals: int = 20,
    seed: int = 0,
    epsilon_runs: int = 0,
    epsilon_scale: int = 1,
) -> AuditReport:
    """Audit the named mechanisms (default: all of :data:`~userdp.audit.MECHANISMS`): the
    sensitivity and float checks on neighbours, the threshold check of the planned selections
    (when a selection is audited), and the epsilon experiments (``epsilon_runs > 0``).

    Parameters
    ----------
    mechanisms : sequence of str or None
        Names from :data:`~userdp.audit.MECHANISMS`; None audits all.
    table : Table or None
        The data; default a synthetic :func:`~userdp.audit.mechanisms.audit_table` of ``users``.
    max_removals : int, default=20
        Users removed one at a time per mechanism (the heaviest first).
    seed : int, default=0
        Seed of every replayed run, and of the synthetic data.
    epsilon_runs : int, default=0
        Runs per side for the empirical epsilon lower bounds (0 skips them). Experiments are
        those of :data:`~userdp.audit.hard.EXPERIMENTS` whose mechanism is audited.
    epsilon_scale : int, default=1
        Size factor of the hard neighbours (novel items held by the added user: 200 x scale).
    """
    started = time.perf_counter()
    names = list(MECHANISMS) if mechanisms is None else list(mechanisms)
    unknown = [n for n in names if n not in MECHANISMS]
    if unknown:
        from userdp.exceptions import InvalidParameterError

        raise InvalidParameterError(
            f"Unknown mechanism(s) {', '.join(map(repr, unknown))}; choose from "
            f"{', '.join(MECHANISMS)}."
        )
    data = table if table is not None else audit_table(users, seed=seed)
    report = AuditReport()
    for name in names:
        mech = MECHANISMS[name]
        rows, notes = audit_sensitivity(
            name, mech.runner(data), data, seed=seed, max_removals=max_removals
        )
        report.rows += rows
        report.notes += notes
        if mech.notes:
            report.notes.append(f"{name}: {mech.notes}")
    if any(MECHANISMS[n].capability == "partition" for n in names):
        report.thresholds = threshold_rows()
    if epsilon_runs > 0:
        for exp in EXPERIMENTS:
            if exp.mechanism in names:
                report.bounds.append(
                    run_experiment(exp, runs=epsilon_runs, scale=epsilon_scale, seed=seed)
                )
    report.seconds = time.perf_counter() - started
    return report
