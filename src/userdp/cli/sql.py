"""``userdp sql``: a private GROUP BY written as SQL over files (DuckDB or Spark SQL)."""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from userdp.exceptions import InvalidParameterError

from .options import atomic_output, check_output_path, common_options, non_negative_int, run_guarded
from .progress import Phases, Progress, input_size

__all__ = ["add_parser", "run"]

logger = logging.getLogger("userdp.cli")

PROG = "userdp sql"

DESCRIPTION = """\
Run a private SELECT ... GROUP BY over files under user-level (epsilon, delta)-differential
privacy, with no contribution bounds to guess. The row-level part (scan, WHERE, joins, the
expressions inside the aggregates) runs in DuckDB (or Spark SQL with --engine spark); keys are
selected privately and every user's contribution is bounded with privately chosen bounds.
Tables are private unless listed with --public. BigQuery's SELECT WITH DIFFERENTIAL_PRIVACY
OPTIONS(...) form runs as is. The table goes to --output (.csv, .parquet or .json) or to
stdout as CSV; a summary goes to stderr. --explain prints the plan and reads nothing.
"""

EPILOG = """\
examples:
  userdp sql "SELECT page, COUNT(DISTINCT uid) AS users FROM visits GROUP BY page" \\
      --table visits=visits.parquet --privacy-unit uid --epsilon 1 --delta 1e-5
  userdp sql "SELECT p.section, AVG(CLAMP(v.secs, 0, 600)) AS secs FROM visits v \\
      JOIN pages p USING (page) GROUP BY p.section" --table visits=visits.parquet \\
      --table pages=pages.csv --public pages --privacy-unit uid --epsilon 1 --delta 1e-5 \\
      --output sections.csv
"""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``sql`` on the ``userdp`` subcommand parsers."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "sql",
        parents=[common_options()],
        help="Private GROUP BY written as SQL (DuckDB or Spark SQL).",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("query", metavar="QUERY", help="One SELECT ... GROUP BY, quoted.")
    data = parser.add_argument_group("input")
    data.add_argument(
        "--table",
        action="append",
        default=[],
        metavar="NAME=FILE",
        help="A table the query names, read from FILE (CSV, TSV, Parquet or JSON Lines); "
        "repeat for each table.",
    )
    data.add_argument(
        "--public",
        action="append",
        default=[],
        metavar="NAME",
        help="A table whose contents are public (repeat); every other table is private.",
    )
    data.add_argument(
        "--privacy-unit",
        action="append",
        default=[],
        metavar="COLUMN|NAME=COLUMN",
        help="The user column of every private table, or of one table as NAME=COLUMN "
        "(repeat). Or OPTIONS(privacy_unit_column=...) in the query.",
    )
    data.add_argument(
        "--engine",
        choices=("local", "spark"),
        default="local",
        help="local (DuckDB in process) or spark (Spark SQL). Default: %(default)s.",
    )
    data.add_argument(
        "--spark-master",
        default=None,
        metavar="URL",
        help="Spark master for --engine spark. Default: local[*].",
    )
    privacy = parser.add_argument_group("privacy")
    privacy.add_argument(
        "--epsilon",
        type=float,
        default=None,
        metavar="E",
        help="Privacy-loss bound epsilon > 0 (or OPTIONS(epsilon=...) in the query).",
    )
    privacy.add_argument(
        "--delta",
        type=float,
        default=None,
        metavar="D",
        help="Failure probability delta in (0, 1) (or OPTIONS(delta=...) in the query).",
    )
    privacy.add_argument(
        "--seed",
        type=non_negative_int,
        default=None,
        metavar="N",
        help="Seed the noise (tests only: a seeded release is not private).",
    )
    out = parser.add_argument_group("output")
    out.add_argument(
        "--explain",
        action="store_true",
        help="Print the plan (tables, unit, budget split, noise per cell) and stop: no data "
        "is read, nothing is charged or written.",
    )
    out.add_argument(
        "-o",
        "--output",
        default=None,
        metavar="OUT",
        help="Write the table to OUT (.csv, .parquet or .json). Default: CSV on stdout.",
    )
    out.add_argument("--overwrite", action="store_true", help="Replace OUT if it exists.")
    out.add_argument(
        "--json",
        action="store_true",
        help="Print the release as one JSON object on stdout: budget, unit, the calls' bounds "
        "and noise sd and the rows (with --output, the rows go to OUT and the object names it).",
    )
    parser.set_defaults(handler=lambda args: run_guarded(PROG, run, args), parser=parser)
    return parser


def _pairs(values: list[str], flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for value in values:
        name, sep, rest = value.partition("=")
        if not sep or not name or not rest:
            raise InvalidParameterError(f"{flag} takes NAME=VALUE; got {value!r}.")
        if name in out:
            raise InvalidParameterError(f"{flag} names the table {name!r} twice.")
        out[name] = rest
    return out


def _unit(values: list[str]) -> str | dict[str, str] | None:
    if not values:
        return None
    if len(values) == 1 and "=" not in values[0]:
        return values[0]
    return _pairs(values, "--privacy-unit")


def _check(args: argparse.Namespace) -> None:
    if args.epsilon is not None and not (math.isfinite(args.epsilon) and args.epsilon > 0):
        raise InvalidParameterError(f"--epsilon must be a finite number > 0; got {args.epsilon:g}.")
    if args.delta is not None and not (math.isfinite(args.delta) and 0 < args.delta < 1):
        raise InvalidParameterError(f"--delta must be in (0, 1); got {args.delta:g}.")
    if args.output is not None and args.output != "-":
        suffix = Path(args.output).suffix.lower()
        if suffix not in (".csv", ".parquet", ".json"):
            raise InvalidParameterError(
                f"--output must end in .csv, .parquet or .json; got {args.output!r}."
            )


def _write(table: pa.Table, path: Path, suffix: str) -> None:
    suffix = suffix.lower()
    if suffix == ".parquet":
        pq.write_table(table, path)
    elif suffix == ".json":
        with open(path, "w", encoding="utf-8") as f:
            json.dump(table.to_pylist(), f, ensure_ascii=False, default=str)
            f.write("\n")
    else:
        pacsv.write_csv(table, path)


def _spark_tables(tables: dict[str, str], master: str | None, verbose: int) -> dict[str, Any]:
    from userdp.partition import spark as spark_io

    from .options import start_spark

    session = start_spark(master, verbose=verbose)
    out = {}
    for name, path in tables.items():
        fmt = Path(path).suffix.lstrip(".").lower() or "parquet"
        out[name] = spark_io.read(path, format=fmt, header=True, spark=session)
    return out


def _row_query(phases: Phases) -> Any:
    """The row query's percent (DuckDB's), then the releases' elapsed time; None: no bar."""
    count = phases.counter("row query (DuckDB)", "%")
    if count is None:
        return None
    phases.start("row query (DuckDB)", unit="%", total=100)  # DuckDB may report nothing

    def progress(done: int, total: int) -> None:
        count(done, total)
        if done >= total:  # the query has ended: the GROUP BY's releases follow
            phases.start("release")

    return progress


def run(args: argparse.Namespace) -> int:
    """Run ``userdp sql`` on parsed arguments; errors propagate to the guard."""
    from userdp.sql import QueryPlan, sql

    start = time.perf_counter()
    _check(args)
    tables: dict[str, Any] = dict(_pairs(args.table, "--table"))
    output = None
    if not args.explain and args.output is not None and args.output != "-":
        output = check_output_path(args.output, overwrite=args.overwrite)
    options = dict(
        tables=tables,
        privacy_unit=_unit(args.privacy_unit),
        epsilon=args.epsilon,
        delta=args.delta,
        seed=args.seed,
        public_tables=args.public,
    )
    if args.explain:  # the plan from the query and the table names only: nothing is read
        plan = sql(args.query, explain=True, engine=args.engine, **options)
        print(plan.text if isinstance(plan, QueryPlan) else plan)
        return 0
    if args.engine == "spark":
        tables = _spark_tables(tables, args.spark_master, args.verbose)
        options["tables"] = tables
    size = sum(input_size(p) for p in tables.values() if isinstance(p, str | Path))
    phases = Phases(enabled=args.engine != "spark" and Progress.wanted(args.quiet, size))
    try:
        result = sql(args.query, engine=args.engine, progress=_row_query(phases), **options)
    finally:
        phases.close()
    assert not isinstance(result, QueryPlan)  # explain=False runs the query
    table = result.to_arrow()
    if output is None and args.json:
        pass  # the JSON object below holds the rows
    elif output is None:
        sink = pa.BufferOutputStream()
        pacsv.write_csv(table, sink)
        sys.stdout.write(sink.getvalue().to_pybytes().decode("utf-8"))
        sys.stdout.flush()
    else:
        with atomic_output(output, overwrite=args.overwrite) as tmp:
            _write(table, tmp.parent / tmp.name, output.suffix)
        logger.info("Wrote %d rows to %s.", table.num_rows, output)
    if args.json:
        release = result.to_dict(rows=output is None)
        if output is not None:
            release["output"] = str(output)
        print(json.dumps(release, ensure_ascii=False, default=str))
    if not args.quiet:
        print(f"{PROG}: {result.summary().removeprefix('sql: ')}.", file=sys.stderr)
        if args.verbose:  # exact figures only on request: logs keep stderr
            print(
                f"{PROG}: NOT differentially private, for the operator only: "
                f"{time.perf_counter() - start:.2f} s.",
                file=sys.stderr,
            )
    return 0
