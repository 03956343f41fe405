"""``userdp audit``: check userdp's declared sensitivities and epsilon on neighbouring data."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

import numpy as np

from userdp._validation import MAX_AUDIT_RUNS, MAX_AUDIT_USERS, MAX_NOVEL_ITEMS
from userdp.exceptions import DataError, InvalidParameterError

from .options import (
    Counting,
    ExitCode,
    bounded_int,
    common_options,
    non_negative_int,
    run_guarded,
)

__all__ = ["add_parser", "run"]

logger = logging.getLogger("userdp.cli")

PROG = "userdp audit"

DESCRIPTION = """\
Audit the releases of userdp. Four checks:

  sensitivity  every mechanism declares each noised statistic and its sensitivity; the auditor
               reruns it with the same seed on neighbours of the data (each user removed in
               turn up to --max-removals, the heaviest first; adversarial users added from the
               data's own items: all-new items, the most popular items, extreme values; values
               replaced for public-size models), replaying the released outputs, and reports
               the largest change of each statistic against its bound. FAIL above the bound,
               and FAIL where a comparison could not be made (the data changed how much
               randomness was drawn before a release, or no neighbour could be compared).
  float        every released value lies on the grid its release declared, and the grid and a
               published release's labels are the same on every neighbour (textbook float
               noise, or a release over the data's own items, fails).
  threshold    every planned selection round keeps a novel item's chance of crossing its
               threshold within budget, computed exactly on the grid.
  epsilon      empirical epsilon lower bounds (Clopper-Pearson, 95%) of the selection, mean and
               quantile releases on constructed hard neighbours (--epsilon-runs per side), and
               the delta check at a declared delta of 0.05 (at least 1,000 runs per side).

Default configuration of every capability (epsilon 1, delta 1e-5), and one configuration per
option that changes a sensitivity, on synthetic data of --users users, or on --input (columns
user, item or key, and optionally value, clipped to the declared --value-range). On --input,
every mechanism its columns can feed is audited and the others are listed as not run (features
are not read from a file, so regression, ERM and multi-task learning are not run); a
--mechanism the file cannot feed is refused. A mechanism that compared no statistic on any
neighbour FAILs: a check that cannot fail is not a pass. Exit status 0 when nothing failed, 1
when a check failed (like a failing test suite), 2 on bad input.
"""

EPILOG = """\
examples:
  userdp audit                         # every configuration (a few minutes on 2 cores)
  userdp audit --mechanism weighted_mean --mechanism 'select[mad2r]' --json
  userdp audit --input ratings.csv --value-range 1 5 --capability aggregate --max-removals 5
  userdp audit --list
"""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``audit`` on the ``userdp`` subcommand parsers."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "audit",
        parents=[common_options()],
        help="Audit declared sensitivities and epsilon on neighbouring data.",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--mechanism",
        action="append",
        metavar="NAME",
        default=None,
        help="Audit only this mechanism (repeatable); see --list. Default: all.",
    )
    parser.add_argument(
        "--capability",
        choices=["estimate", "partition", "recommend", "multitask", "aggregate"],
        default=None,
        help="Audit only this capability's mechanisms.",
    )
    parser.add_argument("--list", action="store_true", help="List the mechanisms and exit.")
    parser.add_argument(
        "--input",
        metavar="FILE",
        default=None,
        help="CSV or Parquet file with columns 'user', 'item' (or 'key') and optionally "
        "'value' to audit on. Default: synthetic data.",
    )
    parser.add_argument(
        "--value-range",
        nargs=2,
        type=float,
        metavar=("LO", "HI"),
        default=(1.0, 5.0),
        help="Declared, public range of --input's values: they are clipped to it, and it is "
        "never read from the data. Default: 1 5, the audited configurations' rating range.",
    )
    parser.add_argument(
        "--users",
        type=bounded_int(1, MAX_AUDIT_USERS),
        default=200,
        metavar="N",
        help=f"Users in the synthetic data, at most {MAX_AUDIT_USERS:,}. Default: %(default)s.",
    )
    parser.add_argument(
        "--max-removals",
        type=non_negative_int,
        default=20,
        metavar="N",
        help="Users removed one at a time per mechanism. Default: %(default)s.",
    )
    parser.add_argument(
        "--epsilon-runs",
        type=bounded_int(0, MAX_AUDIT_RUNS),
        default=1000,
        metavar="N",
        help="Runs per side of each epsilon experiment (the delta check makes at least 1000); "
        f"0 skips them; at most {MAX_AUDIT_RUNS:,}. Default: %(default)s.",
    )
    parser.add_argument(
        "--seed",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="Seed of the replayed runs and of the synthetic data. Default: %(default)s.",
    )
    parser.add_argument(
        "--novel-items",
        type=bounded_int(1, MAX_NOVEL_ITEMS),
        default=20_000,
        metavar="N",
        help="Items (a multiple of 200) held by the added user of the selection's novel-user "
        "experiment, at most 100 runs per side (200,000 reproduces the pre-fix GreedyUpdate's "
        "bound above 1; the delta check catches it at any size); at most "
        f"{MAX_NOVEL_ITEMS:,}. Default: %(default)s.",
    )
    parser.add_argument(
        "--json", action="store_true", help="Print the report as JSON instead of tables."
    )
    parser.set_defaults(handler=lambda args: run_guarded(PROG, run, args), parser=parser)
    return parser


def _read_input(path: str, value_range: tuple[float, float]) -> Any:
    """The audit table of ``path``: integer codes of its users and items (``key`` is read as
    ``item``), its values clipped to the declared ``value_range``; no features."""
    from userdp.audit import Table
    from userdp.data.io import read_table, to_float64

    lo, hi = value_range
    if not lo < hi:
        raise InvalidParameterError(f"--value-range must have LO < HI; got {lo!r} {hi!r}.")
    table = read_table(Path(path))  # its errors name lines and columns, never a cell value
    item_column = (
        "key" if "item" not in table.column_names and "key" in table.column_names else "item"
    )
    missing = [c for c in ("user", item_column) if c not in table.column_names]
    if missing:
        raise DataError(
            f"{path}: missing column(s) {', '.join(map(repr, missing))}; found "
            f"{', '.join(map(repr, table.column_names))}."
        )
    if table.num_rows == 0:
        raise DataError(f"{path}: no rows.")
    _, user = np.unique(table.column("user").to_numpy(zero_copy_only=False), return_inverse=True)
    items = table.column(item_column).to_numpy(zero_copy_only=False)
    _, item = np.unique(items, return_inverse=True)
    value = None
    if "value" in table.column_names:
        numbers = to_float64(table.column("value"), "value", str(path))
        value = np.clip(numbers.to_numpy(zero_copy_only=False), lo, hi)
    return Table(
        user=user.astype(np.int64),
        item=item.astype(np.int64),
        value=value,
        value_range=(float(lo), float(hi)),
    )


def _check_names(args: argparse.Namespace, table: Any) -> None:
    """Refuse, before anything runs, an unknown --mechanism, one --input cannot feed, or a
    selection that leaves nothing to audit (an audit of nothing cannot fail)."""
    from userdp.audit import MECHANISMS
    from userdp.audit.mechanisms import describe_unrunnable, unrunnable

    names = list(args.mechanism) if args.mechanism else list(MECHANISMS)
    unknown = [n for n in names if n not in MECHANISMS]
    if unknown:
        raise InvalidParameterError(
            f"Unknown mechanism(s) {', '.join(map(repr, unknown))}; run 'userdp audit --list'."
        )
    if args.capability:
        names = [n for n in names if MECHANISMS[n].capability == args.capability]
    cannot = {} if table is None else unrunnable(names, table)
    listed = describe_unrunnable(cannot)
    if args.mechanism and cannot:
        raise DataError(
            f"{args.input}: cannot audit {listed}; leave them out of --mechanism, or audit "
            "them on the synthetic data (without --input), which has values and features."
        )
    if len(cannot) == len(names):
        if cannot:
            raise DataError(f"{args.input}: nothing to audit: {listed}.")
        raise InvalidParameterError(
            f"Nothing to audit: no --mechanism named is of --capability {args.capability}."
        )


def run(args: argparse.Namespace) -> int:
    """Run the audit and print the report; exit 1 when it found a violation."""
    from userdp.audit import MECHANISMS, run_audit

    if args.list:
        for name, mech in MECHANISMS.items():
            print(f"{name}\t{mech.capability}")
        return ExitCode.OK
    table = _read_input(args.input, tuple(args.value_range)) if args.input else None
    _check_names(args, table)
    progress = Counting(quiet=args.quiet)  # drawn on a terminal only
    try:
        report = run_audit(
            args.mechanism,
            table=table,
            capability=args.capability,
            users=args.users,
            max_removals=args.max_removals,
            seed=args.seed,
            epsilon_runs=args.epsilon_runs,
            epsilon_scale=max(1, args.novel_items // 200),
            progress=progress,
        )
    finally:
        progress.close()
    for name, why in report.not_run.items():
        logger.warning("not run: %s (%s)", name, why)
    print(report.to_json() if args.json else report.table())
    if args.json and not args.quiet:
        print(f"{PROG}: {report.summary()}", file=sys.stderr)
    return ExitCode.FAILURE if report.failed else ExitCode.OK
