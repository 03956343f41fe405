"""Audit of every configuration of every capability: worst sensitivity ratio found, the float
and threshold checks, and empirical epsilon lower bounds.

Run from the repository root::

    nice -n 10 python benchmarks/audit_report.py           # full run (several minutes)
    nice -n 10 python benchmarks/audit_report.py --quick   # smoke run, < 1 minute

Part 1 runs :func:`userdp.audit.run_audit` over every configuration of
:data:`userdp.audit.MECHANISMS` on the synthetic audit table (``--users`` users, ``--removals``
users removed one at a time plus the adversarial added users): sensitivity and float checks,
and the threshold check of every planned selection. Part 2 runs every hard-neighbour experiment
of :data:`userdp.audit.EXPERIMENTS` with ``--selection-runs`` (selection) or ``--value-runs``
(mean, quantile) runs per side; the selection's novel-user experiment gives the added user
200,000 novel items and makes at most 100 runs per side; the delta check (declared delta 0.05,
200 novel items) makes at least 1,000. Writes
``audit_report.json`` and ``audit_report.png`` to ``--out-dir`` (default ``benchmarks/results/``)
and prints the tables.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from userdp.audit import EXPERIMENTS, run_audit, run_experiment

HERE = Path(__file__).resolve().parent


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in report["sensitivity"] if r["norm"] != "grid"]  # float check: in the table
    bounds = report["epsilon_lower_bounds"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, max(4, 0.22 * len(rows))))
    labels = [f"{r['mechanism']}: {r['statistic']} ({r['norm']})" for r in rows]
    colours = [
        "tab:red"
        if r["verdict"] == "FAIL"
        else "tab:orange"
        if r["verdict"] != "pass"
        else "tab:green"
        for r in rows
    ]
    y = np.arange(len(rows))
    # Not replayable: the spurious change seen where the randomness diverged, in orange.
    a.barh(
        y, [r["ratio"] if r["compared"] else r["ratio_not_replayable"] for r in rows], color=colours
    )
    a.axvline(1.0, color="k", lw=1)
    a.set_yticks(y, labels, fontsize=6)
    a.set_xlabel("worst change / declared bound (green pass, red FAIL)")
    yb = np.arange(len(bounds))
    b.barh(yb, [x["epsilon_lower_bound"] for x in bounds], color="tab:blue")
    b.axvline(1.0, color="k", lw=1)
    b.set_yticks(yb, [f"{x['mechanism']}: {x['event']}" for x in bounds], fontsize=6)
    b.set_xlabel("epsilon lower bound (95%), declared 1")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--users", type=int, default=300)
    parser.add_argument("--removals", type=int, default=40)
    parser.add_argument("--selection-runs", type=int, default=1000)
    parser.add_argument("--value-runs", type=int, default=5000)
    parser.add_argument(
        "--novel-items",
        type=int,
        default=200_000,
        help="items of the novel-user experiment's added user (x200)",
    )
    parser.add_argument("--out-dir", type=Path, default=HERE / "results")
    args = parser.parse_args()
    if args.quick:
        args.users, args.removals, args.selection_runs, args.value_runs = 40, 5, 40, 200
    started = time.perf_counter()
    report = run_audit(users=args.users, max_removals=args.removals, epsilon_runs=0)
    sens_seconds = time.perf_counter() - started
    for exp in EXPERIMENTS:
        runs = args.selection_runs if exp.mechanism.startswith("select") else args.value_runs
        t = time.perf_counter()
        scale = 1 if args.quick else max(1, args.novel_items // 200)
        report.bounds.append(run_experiment(exp, runs=runs, scale=scale))
        took = time.perf_counter() - t
        print(f"  {exp.mechanism}: {exp.event_label or 'threshold'}: {took:.1f} s", file=sys.stderr)
    report.seconds = time.perf_counter() - started
    out = report.as_dict()
    out["sensitivity_seconds"] = sens_seconds
    out["command"] = shlex.join([sys.executable, *sys.argv])
    out["parameters"] = vars(args) | {"out_dir": str(args.out_dir)}
    out["machine"] = {"platform": platform.platform(), "python": platform.python_version()}
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "audit_report.json").write_text(json.dumps(out, indent=2))
    plot(out, args.out_dir / "audit_report.png")
    print(report.table())
    replayable = [r for r in report.rows if r.compared]
    worst = max(replayable, key=lambda r: r.ratio, default=None)
    if worst is not None:
        print(
            f"worst ratio {worst.ratio:.6f}: {worst.mechanism} {worst.statistic} ({worst.norm}) "
            f"on '{worst.worst_neighbour}'"
        )
    best = max(report.bounds, key=lambda b: b.lower_bound, default=None)
    if best is not None:
        print(
            f"largest epsilon lower bound {best.lower_bound:.3f} (declared 1): {best.mechanism}, "
            f"{best.event}"
        )
    for b in report.bounds:
        if b.delta >= 0.01:
            print(
                f"delta check {b.mechanism}: novel-item release rate {b.p1:.4f} over {b.runs} "
                f"runs (declared delta {b.delta:g}), bound {b.lower_bound:.3f}"
            )
    thr = max(report.thresholds, key=lambda t: t.ratio, default=None)
    if thr is not None:
        print(
            f"threshold check: worst p(t)/allowed {thr.ratio:.12f} ({thr.mechanism} round "
            f"{thr.round}); {len(report.thresholds)} rounds"
        )
    floats = [r for r in report.rows if r.norm == "grid"]
    failed = [f"{r.mechanism}: {r.statistic}" for r in floats if r.verdict == "FAIL"]
    print(
        f"float check: {len(floats) - len(failed)} of {len(floats)} releases on their grid"
        + (f"; FAIL: {', '.join(failed)}" if failed else "")
    )
    print(f"{len(report.rows)} rows, {len({r.mechanism for r in report.rows})} configurations")
    print(f"wrote {args.out_dir / 'audit_report.json'} and audit_report.png")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
