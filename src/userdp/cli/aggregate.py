"""``userdp aggregate``: a private GROUP BY of a (user, key[, value]) file."""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from pathlib import Path
from typing import Any, cast

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from userdp.data.io import FORMATS, read_table, to_float64
from userdp.exceptions import DataError, InvalidParameterError

from .options import (
    Phases,
    Progress,
    atomic_output,
    check_column_roles,
    check_output_path,
    common_options,
    exact,
    input_size,
    non_negative_int,
    run_guarded,
    start_spark,
)

__all__ = ["add_parser", "run"]

logger = logging.getLogger("userdp.cli")

PROG = "userdp aggregate"

DESCRIPTION = """\
Release per-key statistics of a file of (user, key[, value]) rows under user-level
(epsilon, delta)-differential privacy: distinct users, rows, sums, means and quantiles per key.
Keys are selected privately (or read from --keys, a public list that costs nothing); every user's
contribution is bounded by scaling it, with the bounds chosen privately from the data. The table
goes to --output (.csv, .parquet or .json) or to stdout as CSV; a summary goes to stderr.
"""

EPILOG = """\
examples:
  userdp aggregate visits.csv --user-column u --key-column page --epsilon 1 --delta 1e-5
  userdp aggregate ratings.csv --user-column user --key-column movie --value-column rating \\
      --bounds 1 5 --metrics users,count,mean --epsilon 1 --delta 1e-5 --output movies.csv
"""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``aggregate`` on the ``userdp`` subcommand parsers."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "aggregate",
        parents=[common_options()],
        help="Private GROUP BY: users, counts, sums, means and quantiles per key.",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("input", metavar="INPUT", help="CSV, TSV, Parquet or JSON Lines file.")
    data = parser.add_argument_group("input")
    data.add_argument(
        "--user-column",
        default="user",
        metavar="NAME",
        help="Column holding the user (the privacy unit). Default: %(default)s.",
    )
    data.add_argument(
        "--key-column",
        default="key",
        metavar="NAME",
        help="Column to group by; 'none' treats the whole file as one key. Default: %(default)s.",
    )
    data.add_argument(
        "--value-column",
        default=None,
        metavar="NAME",
        help="Column of numbers for sum, mean and quantiles.",
    )
    data.add_argument(
        "--bounds",
        nargs=2,
        type=float,
        default=None,
        metavar=("LO", "HI"),
        help="Public range of the values (they are clipped to it).",
    )
    data.add_argument(
        "--format",
        choices=FORMATS,
        default=None,
        help="Input format when the file name does not tell it.",
    )
    data.add_argument(
        "--keys",
        default=None,
        metavar="FILE",
        help="Public key list, one per line (or a .json list): costs no selection "
        "budget and includes keys absent from the data. Default: select privately.",
    )
    data.add_argument(
        "--engine",
        choices=("local", "spark"),
        default="local",
        help="local (NumPy) or spark. Default: %(default)s.",
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
        required=True,
        metavar="E",
        help="Privacy-loss bound epsilon > 0. Required.",
    )
    privacy.add_argument(
        "--delta",
        type=float,
        required=True,
        metavar="D",
        help="Failure probability delta in (0, 1). Required.",
    )
    algo = parser.add_argument_group("release")
    algo.add_argument(
        "--metrics",
        default="users,count",
        metavar="M1,M2",
        help="Any of users, count, sum, mean, quantiles. Default: %(default)s.",
    )
    algo.add_argument(
        "--quantiles",
        default="0.5",
        metavar="Q1,Q2",
        help="Quantile levels for the quantiles metric. Default: %(default)s.",
    )
    algo.add_argument(
        "--bounding",
        choices=("smooth", "limit"),
        default="smooth",
        help="smooth: scale heavy users down, bounds chosen privately; limit: keep "
        "--max-partitions-contributed keys and --max-contributions-per-partition "
        "rows per user (the usual hard limits). Default: %(default)s.",
    )
    algo.add_argument("--max-partitions-contributed", type=int, default=1, metavar="L0")
    algo.add_argument("--max-contributions-per-partition", type=int, default=1, metavar="LINF")
    algo.add_argument(
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
        help="Print the plan (the budget split and each metric's noise per cell as a function "
        "of its bound) and exit, before reading INPUT; charges nothing.",
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
        help="Print the release as one JSON object on stdout: budget, unit, metrics, the chosen "
        "bounds, the noise sd of each metric and the rows (with --output, the rows go to OUT "
        "and the object names it instead).",
    )
    parser.set_defaults(handler=lambda args: run_guarded(PROG, run, args), parser=parser)
    return parser


def _check(args: argparse.Namespace) -> dict[str, Any]:
    if not (math.isfinite(args.epsilon) and args.epsilon > 0):
        raise InvalidParameterError(
            f"--epsilon must be a finite number > 0; got {exact(args.epsilon)}."
        )
    if not (math.isfinite(args.delta) and 0 < args.delta < 1):
        raise InvalidParameterError(f"--delta must be in (0, 1); got {exact(args.delta)}.")
    key = None if args.key_column.lower() == "none" else args.key_column
    roles = {
        "--user-column": args.user_column,
        "--key-column": key or "",
        "--value-column": args.value_column or "",
    }
    check_column_roles({k: v for k, v in roles.items() if v})
    try:
        levels = tuple(float(q) for q in args.quantiles.split(","))
    except ValueError:
        raise InvalidParameterError(
            f"--quantiles must be numbers such as 0.5,0.9; got {args.quantiles!r}."
        ) from None
    twice = sorted({q for q in levels if levels.count(q) > 1})
    if twice:  # one column per level: a repeat would spend budget on a release it overwrites
        raise InvalidParameterError(
            f"--quantiles lists {', '.join(exact(q) for q in twice)} more than once; give each "
            "level once."
        )
    if args.output is not None and args.output != "-":
        suffix = Path(args.output).suffix.lower()
        if suffix not in (".csv", ".parquet", ".json"):
            raise InvalidParameterError(
                f"--output must end in .csv, .parquet or .json; got {args.output!r}."
            )
    return {"key": key, "quantiles": levels}


def _read_keys(path: str) -> list[Any]:
    p = Path(path)
    if not p.is_file():
        raise DataError(f"Cannot read the key list {path!r}: no such file.")
    text = p.read_text(encoding="utf-8")
    if p.suffix.lower() == ".json":
        try:
            keys = json.loads(text)
        except json.JSONDecodeError as err:
            raise DataError(f"The key list {path!r} is not a JSON list.") from err
        if not isinstance(keys, list):
            raise DataError(f"The key list {path!r} is not a JSON list.")
    else:
        keys = [line for line in text.splitlines() if line != ""]
    if not keys:  # would release nothing and still spend the budget
        raise DataError(
            f"The key list {path!r} holds no key; list at least one, or leave out --keys to "
            "select the keys privately."
        )
    return keys


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


def _explain(args: argparse.Namespace, o: dict[str, Any]) -> int:
    """``--explain``: the plan on stdout (as JSON with ``--json``); INPUT is not read."""
    from userdp.aggregate import aggregate_plan

    plan = aggregate_plan(
        metrics=args.metrics,
        keys=_read_keys(args.keys) if args.keys else "select",
        bounds=tuple(args.bounds) if args.bounds else None,
        epsilon=args.epsilon,
        delta=args.delta,
        one_key=o["key"] is None,
        bounding=args.bounding,
        quantiles=o["quantiles"],
        max_partitions_contributed=args.max_partitions_contributed,
        max_contributions_per_partition=args.max_contributions_per_partition,
    )
    sys.stdout.write((json.dumps(plan.to_dict()) if args.json else plan.table()) + "\n")
    return 0


def run(args: argparse.Namespace) -> int:
    """Run ``userdp aggregate`` on parsed arguments; errors propagate to the guard."""
    from userdp.aggregate import aggregate

    start = time.perf_counter()
    o = _check(args)
    if args.explain:
        return _explain(args, o)
    output = None
    if args.output is not None and args.output != "-":
        output = check_output_path(args.output, overwrite=args.overwrite)
    keys = _read_keys(args.keys) if args.keys else "select"
    data: Any  # a Spark DataFrame or an Arrow table
    stages = ["read", "aggregate", "write"]
    if args.engine == "spark":
        stages.insert(0, "start Spark")
    wanted = Progress.wanted(args.quiet, input_size(args.input))
    # local: the rows counted as they are read, then each phase timed; Spark: its stages
    progress: Progress | Phases = (
        Progress(stages, enabled=wanted) if args.engine == "spark" else Phases(enabled=wanted)
    )
    try:
        if args.engine == "spark":
            with progress.stage("start Spark"):
                session = start_spark(args.spark_master, verbose=args.verbose)
            with progress.stage("read"):
                from userdp.partition import spark as spark_io

                fmt = args.format or Path(args.input).suffix.lstrip(".").lower()
                data = spark_io.read(args.input, format=fmt, header=True, spark=session)
        else:
            with progress.stage("read"):
                cols = tuple(c for c in (args.user_column, o["key"], args.value_column) if c)
                assert isinstance(progress, Phases)  # the local engine's
                progress.start("read", unit="rows")
                data = read_table(
                    args.input, columns=cols, format=args.format, progress=progress.adding()
                )
                if args.value_column and args.value_column in data.column_names:
                    i = data.column_names.index(args.value_column)
                    data = data.set_column(
                        i,
                        args.value_column,
                        to_float64(data.column(i), args.value_column, str(args.input)),
                    )
        if keys != "select" and o["key"] is not None and args.engine == "local":
            keys = _typed_keys(cast(list[Any], keys), data.schema.field(o["key"]).type)
        with progress.stage("aggregate"):
            result = aggregate(
                data,
                user_column=args.user_column,
                key_column=o["key"],
                value_column=args.value_column,
                metrics=args.metrics,
                bounds=tuple(args.bounds) if args.bounds else None,
                keys=keys,
                epsilon=args.epsilon,
                delta=args.delta,
                engine=args.engine,
                seed=args.seed,
                bounding=args.bounding,
                quantiles=o["quantiles"],
                max_partitions_contributed=args.max_partitions_contributed,
                max_contributions_per_partition=args.max_contributions_per_partition,
            )
        table = result.to_arrow()
        with progress.stage("write"):
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
                logger.info("Wrote %d keys to %s.", table.num_rows, output)
    finally:
        progress.close()
    if args.json:
        release = result.to_dict(rows=output is None)
        if output is not None:
            release["output"] = str(output)
        print(json.dumps(release, ensure_ascii=False, default=str))
    if not args.quiet:
        # the budget as given, exactly (the summary's is the one spent, to 6 digits)
        released = result.summary().rsplit(" at epsilon=", 1)[0].removeprefix("aggregate: ")
        print(
            f"{PROG}: {released} at epsilon={exact(args.epsilon)}, delta={exact(args.delta)}.",
            file=sys.stderr,
        )
        if args.verbose:  # exact figures and timings only on request: logs keep stderr
            print(
                f"{PROG}: diagnostics (NOT differentially private: exact counts for the "
                f"operator only, not part of the release): {result.diagnostics.describe()}; "
                f"{time.perf_counter() - start:.2f} s.",
                file=sys.stderr,
            )
    return 0


def _typed_keys(keys: list[Any], arrow_type: pa.DataType) -> list[Any]:
    """Key list lines cast to the key column's type (a CSV of ints lists ints)."""
    if pa.types.is_integer(arrow_type):
        try:
            return [int(k) for k in keys]
        except (TypeError, ValueError):
            raise DataError(
                "The key list holds a key that is not an integer, like the key column."
            ) from None
    return [str(k) if not isinstance(k, str) else k for k in keys]
