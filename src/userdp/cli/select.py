"""``userdp select``: privately select the items of a (user, item) file that may be published."""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import shutil
import sys
import time
import uuid
from pathlib import Path
from typing import Any, cast

import pyarrow as pa
import pyarrow.parquet as pq

from userdp._validation import MAX_SELECTION_ROUNDS
from userdp.data import Contributions
from userdp.data.io import FORMATS, infer_format, read_table
from userdp.exceptions import InvalidParameterError
from userdp.partition import SelectionResult, SparkSelectionResult
from userdp.partition.api import ALGORITHMS, select_partitions
from userdp.partition.rounds import COMPOSITIONS

from .options import (
    Phases,
    Progress,
    atomic_output,
    bounded_int,
    check_column_roles,
    check_output_path,
    common_options,
    delimiter,
    exact,
    input_size,
    non_negative_int,
    positive_int,
    run_guarded,
    start_spark,
)

__all__ = ["add_parser", "run"]

logger = logging.getLogger("userdp.cli")

PROG = "userdp select"

DESCRIPTION = """\
Privately select the items (partition keys) of a file of (user, item) rows that may be
published under user-level (epsilon, delta)-differential privacy. Each user may contribute
any number of rows; repeated (user, item) rows count once. The selected items go to stdout,
one per line, or to --output; logs and a summary go to stderr.
"""

EPILOG = """\
examples:
  userdp select pairs.csv --epsilon 1 --delta 1e-5
  userdp select logs/ --engine spark --spark-master 'local[*]' --epsilon 1 --delta 1e-6 \\
      --output released.parquet
  userdp select logs.parquet --user-column uid --item-column query --epsilon 1 \\
      --delta 1e-6 --output released.parquet
"""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``select`` on the ``userdp`` subcommand parsers."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "select",
        parents=[common_options()],
        help="Privately select the items of a (user, item) file that may be published.",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "input",
        metavar="INPUT",
        help="File of (user, item) rows: CSV, TSV, Parquet (file or directory) or JSON Lines, "
        "optionally compressed (.gz, .bz2, .zst); the format comes from the file name.",
    )
    data = parser.add_argument_group("input")
    data.add_argument(
        "--user-column",
        default="user",
        metavar="NAME",
        help="Column holding the user (the privacy unit). Default: %(default)s.",
    )
    data.add_argument(
        "--item-column",
        default="item",
        metavar="NAME",
        help="Column holding the item to select. Default: %(default)s.",
    )
    data.add_argument(
        "--format",
        choices=FORMATS,
        default=None,
        help="Input format, when the file name does not tell it. Default: from the file name.",
    )
    data.add_argument(
        "--delimiter",
        type=delimiter,
        default=None,
        metavar="CHAR",
        help="Field separator of a CSV/TSV INPUT, one character or 'tab' (local engine). "
        "Default: ',' for CSV, tab for TSV.",
    )
    data.add_argument(
        "--engine",
        choices=("local", "spark"),
        default="local",
        help="local: NumPy on this machine (reads the whole input into memory). spark: Apache "
        "Spark DataFrames (pip install 'userdp[spark]', Java 17+); INPUT may then be a "
        "directory of part files or any path Spark reads, and a .parquet OUT is written as a "
        "directory of part files. Default: %(default)s.",
    )
    data.add_argument(
        "--spark-master",
        default=None,
        metavar="URL",
        help="Spark master for --engine spark, e.g. local[*], local[2], yarn, spark://host:7077. "
        "Default: local[*], sized for this machine.",
    )
    data.add_argument(
        "--no-header",
        dest="header",
        action="store_false",
        help="The CSV/TSV input has no header row: its first two columns are the user and the "
        "item. Default: the first row is a header.",
    )
    privacy = parser.add_argument_group("privacy")
    privacy.add_argument(
        "--epsilon",
        type=float,
        required=True,
        metavar="E",
        help="Privacy-loss bound epsilon, a number > 0 (for example 1). Required.",
    )
    privacy.add_argument(
        "--delta",
        type=float,
        required=True,
        metavar="D",
        help="Failure probability delta in (0, 1), far below 1 / (number of users) (for "
        "example 1e-5). Required.",
    )
    algo = parser.add_argument_group("algorithm")
    algo.add_argument(
        "--algorithm",
        choices=list(ALGORITHMS),
        default="mad2r",
        help="Selection algorithm; mad2r releases the most items. Default: %(default)s.",
    )
    algo.add_argument(
        "--max-items-per-user",
        type=_cap,
        default=None,
        metavar="K",
        help="Keep at most K random items of each user (every algorithm caps). "
        "Default: 100, and 10 for greedy-update. 'auto' chooses K from a noisy histogram of "
        "user degrees that costs 2%% of the budget (parallel algorithms).",
    )
    algo.add_argument(
        "--composition",
        choices=COMPOSITIONS,
        default=None,
        help="How rounds compose: gaussian (the rounds' noise as one Gaussian plus the summed "
        "threshold deltas; more items) or basic (the papers' sum of per-round budgets). "
        "Parallel algorithms only. Default: gaussian.",
    )
    algo.add_argument(
        "--rounds",
        type=bounded_int(1, MAX_SELECTION_ROUNDS),
        default=None,
        metavar="K",
        help="Number of rounds of mad2r (>= 2) or dp-sips, at most "
        f"{MAX_SELECTION_ROUNDS:,}. Default: 4 for mad2r's pooled test, else 2.",
    )
    algo.add_argument(
        "--split",
        type=_fractions,
        default=None,
        metavar="F1,F2,...",
        help="Per-round shares, summing to 1: of the Gaussian precision with --composition "
        "gaussian, of epsilon and delta with basic (mad2r, dp-sips). Default: tuned per "
        "composition and number of rounds.",
    )
    algo.add_argument(
        "--no-recap",
        dest="recap",
        action="store_false",
        help="Do not re-apply the per-user cap to the items left for later rounds "
        "(mad2r and dp-sips only). Default: re-apply it, except in mad2r's pooled test, which "
        "caps once.",
    )
    algo.add_argument(
        "--no-pooled",
        dest="pooled",
        action="store_const",
        const=False,
        default=None,
        help="mad2r: decide the last round on its own noisy weights, re-capping between rounds "
        "(the former two-round default), instead of the pooled final test on every round's "
        "noisy weights. Default: pooled under --composition gaussian.",
    )
    algo.add_argument(
        "--seed",
        type=non_negative_int,
        default=None,
        metavar="N",
        help="Seed the noise, for tests and reproducible runs only: anyone who knows the seed "
        "can undo the noise, so a seeded release is not private. Default: fresh OS entropy.",
    )
    out = parser.add_argument_group("output")
    out.add_argument(
        "-o",
        "--output",
        default=None,
        metavar="OUT",
        help="Write the items to OUT instead of stdout: .parquet gives a one-column Parquet "
        "file (column 'item', with the input's type), .json a JSON list, any other name one "
        "item per line. Default: stdout, one item per line.",
    )
    out.add_argument(
        "--overwrite",
        action="store_true",
        help="Replace OUT if it exists. Default: refuse to overwrite an existing file.",
    )
    out.add_argument(
        "--json",
        action="store_true",
        help="Print the release as one JSON object on stdout: algorithm, epsilon, delta, unit "
        "and items (with --output, the items go to OUT and the object names it instead).",
    )
    parser.set_defaults(handler=lambda args: run_guarded(PROG, run, args), parser=parser)
    return parser


def _cap(text: str) -> int | str:
    return "auto" if text == "auto" else positive_int(text)


def _fractions(text: str) -> list[float]:
    try:
        return [float(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers such as 0.1,0.9; got {text!r}"
        ) from None


#: CLI flags and the algorithm option each sets; an algorithm gets a flag's value only if its
#: options (declared once, in userdp.partition.ALGORITHMS) include it.
_FLAGS = {
    "max_items_per_user": "--max-items-per-user",
    "recap": "--no-recap",
    "composition": "--composition",
    "rounds": "--rounds",
    "fractions": "--split",
    "pooled": "--no-pooled",
}


def _check_parameters(args: argparse.Namespace) -> dict[str, Any]:
    """Validate the numbers before reading anything; return the algorithm's options."""
    if not (math.isfinite(args.epsilon) and args.epsilon > 0):
        raise InvalidParameterError(
            f"--epsilon must be a finite number > 0; got {exact(args.epsilon)}."
        )
    if not (math.isfinite(args.delta) and 0 < args.delta < 1):
        raise InvalidParameterError(f"--delta must be in (0, 1); got {exact(args.delta)}.")
    check_column_roles({"--user-column": args.user_column, "--item-column": args.item_column})
    spec = ALGORITHMS[args.algorithm]
    options: dict[str, Any] = {
        "seed": args.seed,
        "user_column": args.user_column,
        "item_column": args.item_column,
    }
    given = {
        "max_items_per_user": args.max_items_per_user,
        "recap": None if args.recap else False,
        "composition": args.composition,
        "rounds": args.rounds,
        "fractions": args.split,
        "pooled": args.pooled,
    }
    for option, value in given.items():
        if value is None:
            continue  # flag not given: the algorithm's default
        if option in spec.options:
            options[option] = value
        else:
            logger.warning("%s does not apply to %s; ignored.", _FLAGS[option], args.algorithm)
    if args.engine not in spec.engines:
        raise InvalidParameterError(
            f"--algorithm {args.algorithm} is sequential and has no Spark engine; use "
            f"{', '.join(n for n, s in ALGORITHMS.items() if args.engine in s.engines)} with "
            "--engine spark."
        )
    if args.engine == "spark" and args.delimiter is not None:
        raise InvalidParameterError("--delimiter applies to --engine local only.")
    if args.engine != "spark" and args.spark_master is not None:
        logger.warning("--spark-master only applies to --engine spark; ignored.")
    return options


def _text_lines(items: pa.Array) -> str:
    values = items.to_pylist()
    lines = [v if isinstance(v, str) else str(v) for v in values]
    if any(("\n" in v or "\r" in v) for v in lines):
        logger.warning(
            "Some items contain line breaks, so one-per-line output is ambiguous; "
            "use --output with .json or .parquet."
        )
    return "".join(f"{line}\n" for line in lines)


#: Suffixes of formats that --output does not write (it would write text under their name).
_FOREIGN_SUFFIXES = frozenset(
    ".xlsx .xls .xlsm .ods .feather .arrow .ipc .avro .orc .pq .npy .npz .pkl .pickle .h5 "
    ".hdf5 .db .sqlite .zip .gz .bz2 .zst .xz .lz4 .jsonl .ndjson".split()
)


def _check_output_suffix(name: str) -> None:
    """Refuse an --output name promising a format that is not written (text as ``.xlsx``)."""
    suffix = Path(name).suffix.lower()
    if suffix in _FOREIGN_SUFFIXES:
        raise InvalidParameterError(
            f"--output {name!r}: userdp select does not write {suffix} files; use .parquet, "
            ".json, or a text name (.txt, .csv: one item per line)."
        )


def _write(items: pa.Array, path: Path, suffix: str) -> None:
    """Write ``items`` to ``path`` in the format of the final name's ``suffix``."""
    suffix = suffix.lower()
    if suffix == ".parquet":
        pq.write_table(pa.table({"item": items}), path)
    elif suffix == ".json":
        with open(path, "w", encoding="utf-8") as f:
            json.dump(items.to_pylist(), f, ensure_ascii=False, default=str)
            f.write("\n")
    else:
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(_text_lines(items))


def run(args: argparse.Namespace) -> int:
    """Run ``userdp select`` on parsed arguments; errors propagate to the guard."""
    start = time.perf_counter()
    options = _check_parameters(args)
    output = None
    if args.output is not None and args.output != "-":
        _check_output_suffix(args.output)
        directory = args.engine == "spark" and Path(args.output).suffix.lower() == ".parquet"
        output = check_output_path(args.output, overwrite=args.overwrite, directory=directory)
    if not args.header and args.format in ("parquet", "jsonl"):
        logger.warning("--no-header only applies to CSV/TSV input; ignored.")
    if args.engine == "spark":
        return _run_spark(args, options, output, start)

    # on a terminal: the rows read, the time encoding them takes, the rounds, the writing
    progress = Phases(enabled=Progress.wanted(args.quiet, input_size(args.input)))
    if progress.enabled and "show_progress" in ALGORITHMS[args.algorithm].options:
        options["show_progress"] = True  # sequential baselines loop over users
    try:
        with progress.stage("read"):
            data = _read_pairs(args, progress)
            logger.info("Read %s (exact counts, not private).", data)
        with progress.stage("select"):
            if options.get("show_progress"):
                progress.stop()  # the baseline draws its own bar over the users
            result = select_partitions(
                data,
                epsilon=args.epsilon,
                delta=args.delta,
                algorithm=args.algorithm,
                progress=progress.counter("select", "rounds"),
                **options,
            )
            logger.debug("Parameters: %s", dict(result.parameters))
        items = result.to_arrow()
        with progress.stage("write"):
            if output is None and not args.json:
                sys.stdout.write(_text_lines(items))
                sys.stdout.flush()
            elif output is None:
                pass  # the JSON object below holds the items
            else:
                with atomic_output(output, overwrite=args.overwrite) as tmp:
                    _write(items, tmp, output.suffix)
                logger.info("Wrote %d items to %s.", len(items), output)
    finally:
        progress.close()

    _print_json(args, result, output)
    _report(args, result, time.perf_counter() - start)
    return 0


def _read_pairs(args: argparse.Namespace, progress: Phases) -> Contributions:
    """The input's (user, item) pairs, as :func:`userdp.data.read` reads them: the rows counted
    as they are read, then the encoding timed, on ``progress``."""
    progress.start("read", unit="rows")
    table = read_table(
        args.input,
        columns=(args.user_column, args.item_column),
        format=args.format,
        header=args.header,
        delimiter=args.delimiter,
        progress=progress.adding(),
    )
    progress.start("encode")
    return Contributions.from_table(table, args.user_column, args.item_column)


def _print_json(
    args: argparse.Namespace, result: SelectionResult | SparkSelectionResult, output: Path | None
) -> None:
    """``--json``: the release (:meth:`SelectionResult.to_dict`) as one object on stdout."""
    if not args.json:
        return
    record = result.to_dict()
    if output is not None:
        del record["items"]
        record |= {"n_items": len(result), "output": str(output)}
    print(json.dumps(record, ensure_ascii=False, default=str))


def _run_spark(
    args: argparse.Namespace, options: dict[str, Any], output: Path | None, start: float
) -> int:
    """``--engine spark``: read, select and write through Spark; items never all on the driver."""
    from userdp.partition import spark as engine

    progress = Progress(
        ["start Spark", "read", "select", "write"],
        enabled=Progress.wanted(args.quiet, input_size(args.input)),
    )
    try:
        with progress.stage("start Spark"):
            session = start_spark(args.spark_master, verbose=args.verbose)
        with progress.stage("read"):
            fmt = args.format or infer_format(args.input)
            frame = engine.read(args.input, format=fmt, header=args.header, spark=session)
            if not args.header and fmt in ("csv", "tsv"):  # first two columns, as locally
                frame = frame.select(frame.columns[0], frame.columns[1]).toDF(
                    args.user_column, args.item_column
                )
        with progress.stage("select"):
            result = cast(
                SparkSelectionResult,
                select_partitions(
                    frame,
                    epsilon=args.epsilon,
                    delta=args.delta,
                    algorithm=args.algorithm,
                    engine="spark",
                    **options,
                ),
            )
        with progress.stage("write"):
            if output is not None or not args.json:
                _write_spark(result, output, overwrite=args.overwrite)
            _print_json(args, result, output)
        result.dataframe.unpersist()
    finally:
        progress.close()
    _report(args, result, time.perf_counter() - start)
    return 0


def _stream_lines(result: SparkSelectionResult, f: Any, as_json: bool) -> int:
    """Write the items sorted, one partition at a time (toLocalIterator), to text file ``f``."""
    column = result.dataframe.columns[0]
    n = 0
    if as_json:
        f.write("[")
    for row in result.dataframe.orderBy(column).toLocalIterator():
        value = row[0]
        if as_json:
            f.write(("" if n == 0 else ", ") + json.dumps(value, ensure_ascii=False, default=str))
        else:
            f.write(f"{value if isinstance(value, str) else str(value)}\n")
        n += 1
    if as_json:
        f.write("]\n")
    return n


def _write_spark(result: SparkSelectionResult, output: Path | None, *, overwrite: bool) -> None:
    if output is None:
        _stream_lines(result, sys.stdout, as_json=False)
        sys.stdout.flush()
        return
    suffix = output.suffix.lower()
    if suffix == ".parquet":  # a directory of part files, written by the executors
        tmp = output.absolute().with_name(f".{output.name}.{uuid.uuid4().hex}.tmp")
        try:
            result.dataframe.write.parquet(str(tmp))
            if output.exists() or output.is_symlink():
                if not overwrite:
                    raise InvalidParameterError(
                        f"The output {str(output)!r} already exists; pass --overwrite to "
                        "replace it."
                    )
                if output.is_dir() and not output.is_symlink():
                    shutil.rmtree(output)
                else:
                    output.unlink()
            os.replace(tmp, output)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    else:
        with atomic_output(output, overwrite=overwrite) as tmp_file:
            with open(tmp_file, "w", encoding="utf-8", newline="") as f:
                _stream_lines(result, f, as_json=suffix == ".json")
    logger.info("Wrote %d items to %s.", len(result), output)


def _report(
    args: argparse.Namespace, result: SelectionResult | SparkSelectionResult, seconds: float
) -> None:
    """The closing summary (released facts only) and, with -v, the non-private diagnostics."""
    if args.quiet:
        return
    print(_summary(result, args), file=sys.stderr)
    if args.verbose:
        print(_diagnostics(result) + f" Wall time {seconds:.2f} s.", file=sys.stderr)


def _summary(result: SelectionResult | SparkSelectionResult, args: argparse.Namespace) -> str:
    """Only what was released: the number of items, the algorithm and the budget it is
    guaranteed at, as given (the accountant spent at most that; no timing: it depends on the
    data; ``-v`` adds it to the diagnostics)."""
    n = len(result)
    return (
        f"{PROG}: selected {n} item{'' if n == 1 else 's'} with {result.algorithm} at "
        f"epsilon={exact(args.epsilon)}, delta={exact(args.delta)}."
    )


def _diagnostics(result: SelectionResult | SparkSelectionResult) -> str:
    """Exact input counts (-v only): labelled as not private, never part of the summary."""
    d = result.diagnostics
    counts = [f"{d.n_users} users", f"{d.n_pairs} distinct (user, item) pairs"]
    if d.duplicates_dropped:
        counts.append(f"{d.duplicates_dropped} duplicate rows dropped")
    if any(d.pairs_dropped_by_capping):  # per round: a pair may be dropped in several rounds
        rounds = enumerate(d.pairs_dropped_by_capping, start=1)
        per_round = ", ".join(f"{n} in round {r}" for r, n in rounds)
        counts.append(f"pairs dropped by the per-user cap: {per_round}")
    return (
        f"{PROG}: diagnostics (NOT differentially private: exact counts for the operator "
        f"only, not part of the release): {', '.join(counts)}; selection took {d.seconds:.2f} s."
    )
