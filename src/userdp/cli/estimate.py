"""``userdp estimate``: a private mean, quantiles or label-private linear regression of a file.

Each user may contribute any number of rows. Rows are weighted so that no user moves the
result by more than the noise covers (Epasto et al., NeurIPS 2020); ``--method sample-limit``
runs the usual baseline that keeps at most h rows per user instead.
"""

from __future__ import annotations

import argparse
import csv
import inspect
import json
import logging
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from userdp._validation import check_arguments
from userdp.data.io import FORMATS, read_table, to_float64
from userdp.estimate.mean import (
    SAMPLE_LIMITED_MEAN_PARAMETERS,
    WEIGHTED_MEAN_PARAMETERS,
    sample_limited_mean,
    weighted_mean,
)
from userdp.estimate.quantile import (
    SAMPLE_LIMITED_QUANTILE_PARAMETERS,
    WEIGHTED_QUANTILE_PARAMETERS,
    sample_limited_quantile,
    weighted_quantile,
)
from userdp.estimate.regression import LabelPrivateLinearRegression
from userdp.exceptions import DataError, InvalidParameterError

from .options import (
    NOT_PRIVATE,
    ArgumentParser,
    Phases,
    Progress,
    add_parameter_flags,
    atomic_output,
    check_column_roles,
    check_output_path,
    common_options,
    delimiter,
    exact,
    given_parameters,
    input_size,
    is_stdout,
    run_guarded,
)

__all__ = ["add_parser"]

logger = logging.getLogger("userdp.cli")

PROG = "userdp estimate"

DESCRIPTION = """\
Estimate a statistic of a table under user-level epsilon-differential privacy, where each user
may own many rows. Rows are weighted so that each user's total weight is bounded smoothly
(Epasto et al., NeurIPS 2020) instead of dropping rows beyond a per-user limit.

  mean      the mean of --value-column, clipped to --bounds.
  quantile  one or more quantiles of --value-column within --bounds (exponential mechanism).
  linreg    linear regression of --label-column on the feature columns with label privacy:
            the features and which rows belong to which user are public, the labels private.

The estimate goes to stdout (or --output: .json gives JSON, .csv a name,estimate table, '-'
JSON on stdout); logs and a summary go to stderr.
"""

EPILOG = """\
examples:
  userdp estimate mean spend.csv --user-column customer --value-column amount \\
      --bounds 0 100 --epsilon 1
  userdp estimate quantile spend.csv --value-column amount --bounds 0 100 \\
      --quantiles 0.5,0.9 --epsilon 1
  userdp estimate linreg reviews.csv --user-column drug --label-column rating \\
      --label-range 1 10 --epsilon 1
"""

_METHODS = ("weighted", "sample-limit")

#: Library keywords offered as flags (``--kebab-name``), built from the declared tables: their
#: type, choices, help and default come from the library, which validates the values once.
_VALUE_FLAGS = ("epsilon", "public_user_sizes", "selection_share", "seed")
_QUANTILE_FLAGS = (*_VALUE_FLAGS, "resolution")
_LINREG = LabelPrivateLinearRegression
_LINREG_FLAGS = ("epsilon", "method", "selection_share", "fit_intercept", "seed")
_REQUIRED = " Required. The release is pure epsilon-DP (delta = 0)."
_TABLES: dict[Callable[..., Any], Mapping[str, Mapping[str, Any]]] = {
    weighted_mean: WEIGHTED_MEAN_PARAMETERS,
    sample_limited_mean: SAMPLE_LIMITED_MEAN_PARAMETERS,
    weighted_quantile: WEIGHTED_QUANTILE_PARAMETERS,
    sample_limited_quantile: SAMPLE_LIMITED_QUANTILE_PARAMETERS,
}


def _defaults(target: Callable[..., Any]) -> dict[str, Any]:
    """The library defaults of ``target``'s keywords (shown in the flags' help)."""
    return {
        p.name: p.default
        for p in inspect.signature(target).parameters.values()
        if p.default is not inspect.Parameter.empty
    }


def _table_flags(
    parser: argparse.ArgumentParser,
    table: Mapping[str, Mapping[str, Any]],
    target: Callable[..., Any],
    names: Sequence[str],
) -> None:
    """``--epsilon`` and the tuning flags from the library's table (epsilon's help says it is
    required: the command checks that, the library checks the value)."""
    table = {**table, "epsilon": {**table["epsilon"], "help": table["epsilon"]["help"] + _REQUIRED}}
    add_parameter_flags(parser, table, _defaults(target), names)


def _number(text: str) -> float | int:
    """A number as typed (an integral one as an int); the library checks its range."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number; got {text!r}") from None
    return int(value) if value.is_integer() and abs(value) < 2**53 else value


def _numbers(text: str) -> list[float | int]:
    return [_number(part) for part in text.split(",") if part.strip()] or [_number(text)]


def _threshold(text: str) -> float | int | str:
    return text if text in ("best", "max") else _number(text)


def _noise_variance(text: str) -> float | int | str:
    return text if text == "estimate" else _number(text)


def _columns(text: str) -> list[str]:
    names = [c.strip() for c in text.split(",") if c.strip()]
    if not names:
        raise argparse.ArgumentTypeError("give at least one column name")
    return names


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``estimate`` and its statistics on the ``userdp`` subcommand parsers."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "estimate",
        help="Private mean, quantiles or label-private linear regression with weighted rows.",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    stats = parser.add_subparsers(title="statistics", dest="statistic", metavar="STATISTIC")
    stats.required = True
    for name, help_ in (
        ("mean", "The mean of a column, clipped to declared bounds."),
        ("quantile", "Quantiles of a column within declared bounds."),
        ("linreg", "Linear regression with private labels and public features."),
    ):
        sub = cast(  # the subparsers' class is the parent's: options.ArgumentParser
            ArgumentParser,
            stats.add_parser(
                name,
                parents=[common_options()],
                help=help_,
                description=f"{help_} See 'userdp estimate --help'.",
                epilog=EPILOG,
                formatter_class=argparse.RawDescriptionHelpFormatter,
            ),
        )
        _add_common(sub)
        if name == "linreg":
            _table_flags(sub, _LINREG._parameter_constraints, _LINREG, _LINREG_FLAGS)
            _add_linreg(sub)
        else:
            quantile = name == "quantile"
            table = WEIGHTED_QUANTILE_PARAMETERS if quantile else WEIGHTED_MEAN_PARAMETERS
            flags = _QUANTILE_FLAGS if quantile else _VALUE_FLAGS
            _table_flags(sub, table, weighted_quantile if quantile else weighted_mean, flags)
            _add_values(sub, quantile=quantile)
        sub.set_defaults(
            handler=lambda args: run_guarded(f"{PROG} {args.statistic}", run, args), parser=sub
        )
    parser.set_defaults(parser=parser)
    return parser


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "input",
        metavar="INPUT",
        help="Table to read: CSV (.csv, .csv.gz), TSV (.tsv), Parquet (.parquet) or JSON "
        "lines (.jsonl), with a header row.",
    )
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default=None,
        help="Format of INPUT. Default: from its name.",
    )
    parser.add_argument(
        "--delimiter",
        type=delimiter,
        default=None,
        metavar="CHAR",
        help="Field separator of a CSV/TSV INPUT, one character or 'tab'. Default: ',' for "
        "CSV, tab for TSV.",
    )
    parser.add_argument(
        "--user-column",
        default="user",
        metavar="NAME",
        help="Column that names the user who owns each row. Default: %(default)s.",
    )
    parser.add_argument(
        "-o",
        "--output",
        default=None,
        metavar="OUT",
        help="Write the estimate and its privacy parameters to OUT: .json gives JSON, .csv a "
        "two-column table (name,estimate), '-' JSON on stdout. Default: a table on stdout.",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="Print JSON on stdout instead of a table.",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="Replace OUT if it exists. Default: refuse to overwrite an existing file.",
    )


def _add_values(parser: ArgumentParser, *, quantile: bool) -> None:
    parser.library_name("h", "--threshold")
    if quantile:
        parser.library_name("q", "--quantiles")
    parser.add_argument(
        "--value-column",
        default="value",
        metavar="NAME",
        help="Column of numbers to summarise. Default: %(default)s.",
    )
    parser.add_argument(
        "--bounds",
        type=float,
        nargs=2,
        required=True,
        metavar=("LOWER", "UPPER"),
        help="Public range of the values; values outside it are clipped to it. Required: it is "
        "never read from the data.",
    )
    if quantile:
        parser.add_argument(
            "--quantiles",
            type=_numbers,
            default=[0.5],
            metavar="Q[,Q...]",
            help="Quantiles in (0, 1), comma separated; epsilon is split evenly between them. "
            "Default: 0.5 (the median).",
        )
    parser.add_argument(
        "--method",
        choices=_METHODS,
        default="weighted",
        help="weighted: smooth per-row weights (the paper's Alg. 1); sample-limit: keep at most "
        "h random rows per user (the baseline). Default: %(default)s.",
    )
    parser.add_argument(
        "--threshold",
        type=_number,
        default=None,
        metavar="H",
        help="Fix the per-user threshold h (the library's 'h') instead of choosing it (then no "
        "budget is spent on choosing): a number > 0 for weighted, a whole number of rows for "
        "sample-limit. Default: chosen to minimise the expected error.",
    )
    if not quantile:
        parser.add_argument(
            "--noise-variance",
            type=_noise_variance,
            default="estimate",
            metavar="V",
            help="Variance of the values, taken as public knowledge when a number is given; "
            "'estimate' spends part of the selection budget on it. Default: %(default)s.",
        )


def _add_linreg(parser: ArgumentParser) -> None:
    parser.library_name("h", "--threshold")
    parser.add_argument(
        "--label-column",
        default="label",
        metavar="NAME",
        help="Column of the (private) labels. Default: %(default)s.",
    )
    parser.add_argument(
        "--feature-columns",
        type=_columns,
        default=None,
        metavar="A,B,...",
        help="Columns of the (public) features, comma separated. Default: every column "
        "except the user and label columns.",
    )
    parser.add_argument(
        "--label-range",
        type=float,
        nargs=2,
        required=True,
        metavar=("LOWER", "UPPER"),
        help="Public range of the labels; labels outside it are clipped. Required.",
    )
    parser.add_argument(
        "--threshold",
        type=_threshold,
        default=None,
        metavar="H",
        help="Per-user row limit h (the library's 'h'), for --method sample-limit only (gwa "
        "chooses its own weights): a whole number, 'best' (minimises the expected error) or "
        "'max' (every row). Default: best.",
    )
    parser.add_argument(
        "--noise-variance",
        type=_noise_variance,
        default="estimate",
        metavar="V",
        help="Variance of the label noise around the linear fit, taken as public knowledge "
        "when a number is given; 'estimate' spends part of the budget on it. "
        "Default: %(default)s.",
    )
    parser.add_argument(
        "--no-intercept",
        dest="fit_intercept",
        action="store_const",
        const=False,
        help="Fit without an intercept (the same as --no-fit-intercept).",
    )


def _read(
    args: argparse.Namespace,
    numeric: Sequence[str],
    rows: Callable[[int], object] | None = None,
) -> tuple[np.ndarray, pa.Table]:
    """The user column as strings and the named numeric columns as float64 (``rows``: the
    reader's progress callback)."""
    wanted = (args.user_column, *numeric)
    table = read_table(
        args.input,
        columns=wanted,
        format=args.format,
        delimiter=args.delimiter,
        progress=rows,
    )
    for col in wanted:
        if col not in table.column_names:
            raise DataError(
                f"{args.input}: column {col!r} not found; the input has columns "
                f"{table.column_names!r}."
            )
    if table.num_rows == 0:
        raise DataError(f"{args.input}: the input has no rows.")
    users = table.column(args.user_column)
    if users.null_count:
        raise DataError(f"{args.input}: column {args.user_column!r} has empty values.")
    users = users.cast(pa.string())
    empty = pc.equal(pc.binary_length(users), 0)
    if pc.any(empty).as_py():
        raise DataError(
            f"{args.input}: column {args.user_column!r} has an empty value (first at row "
            f"{pc.index(empty, True).as_py()}); an empty id names no user."
        )
    cast = {}
    for col in numeric:
        # a cell that is no number is a missing value (NaN): the library's non-finite policy
        # decides, never a refusal that one user's cell could trigger
        cast[col] = to_float64(table.column(col), col, args.input).fill_null(float("nan"))
    users_np = users.to_numpy(zero_copy_only=False)
    return users_np, pa.table(cast)


def _feature_columns(
    args: argparse.Namespace, rows: Callable[[int], object] | None = None
) -> list[str]:
    if args.feature_columns is not None:
        return list(args.feature_columns)
    names = read_table(
        args.input,
        columns=(args.user_column, args.label_column),
        format=args.format,
        delimiter=args.delimiter,
        progress=rows,
    ).column_names
    rest = [n for n in names if n not in (args.user_column, args.label_column)]
    if not rest:
        raise DataError(f"{args.input}: no feature columns besides the user and label columns.")
    return rest


#: Suffixes of --output and the format each writes.
_OUTPUT_FORMATS = {".json": "json", ".csv": "csv"}


def _check(args: argparse.Namespace) -> None:
    """Check what only the command line knows, before reading anything: a required epsilon,
    the roles of the columns and the output's suffix. Parameter values are the library's to
    check (once, in the one message format)."""
    if args.epsilon is None:
        raise InvalidParameterError("the following argument is required: --epsilon")
    if args.statistic == "linreg":
        roles: dict[str, Any] = {
            "--user-column": args.user_column,
            "--label-column": args.label_column,
        }
        if args.feature_columns is not None:
            roles["--feature-columns"] = args.feature_columns
        check_column_roles(roles)
    else:
        check_column_roles({"--user-column": args.user_column, "--value-column": args.value_column})
    if args.output is not None and not is_stdout(args.output):
        if Path(args.output).suffix.lower() not in _OUTPUT_FORMATS:
            raise InvalidParameterError(
                f"--output {args.output!r}: the name must end in .json (JSON) or .csv (a "
                "name,estimate table), or be '-' for JSON on stdout."
            )


def _run_values(
    args: argparse.Namespace, progress: Phases
) -> tuple[dict[str, Any], dict[str, float]]:
    weighted = args.method == "weighted"
    fn: Callable[..., Any]
    if args.statistic == "mean":
        fn = weighted_mean if weighted else sample_limited_mean
        extra: dict[str, Any] = {}
        if args.noise_variance != "estimate":
            extra["noise_variance"] = args.noise_variance
    else:
        fn = weighted_quantile if weighted else sample_limited_quantile
        extra = {"q": args.quantiles, **given_parameters(args, ("resolution",))}
    kwargs = {
        **given_parameters(args, _VALUE_FLAGS),
        "bounds": tuple(args.bounds),
        "h": args.threshold,
        **extra,
    }
    # The library's own check of its table, run before the file is read (fn runs it again).
    check_arguments({**_defaults(fn), **kwargs}, _TABLES[fn], fn.__name__)
    progress.start("read", unit="rows")
    users, table = _read(args, [args.value_column], progress.adding())
    values = table.column(args.value_column).to_numpy()
    logger.info("Read %d rows from %s (exact, not private).", values.size, args.input)
    progress.start("estimate")
    result: Any = fn(values, users, **kwargs)  # a MeanResult or a QuantileResult
    progress.stop()
    if args.statistic == "mean":
        estimates = {"mean": float(result.estimate)}
    else:
        found = np.atleast_1d(np.asarray(result.estimate, dtype=np.float64))
        estimates = {f"q{q:g}": float(v) for q, v in zip(result.q, found, strict=True)}
    h = np.atleast_1d(np.asarray(result.h, dtype=np.float64)).tolist()
    info = {"method": args.method, "h": h[0] if len(h) == 1 else h}
    info |= {"epsilon": float(result.budget.epsilon), "delta": float(result.budget.delta)}
    noise = result.noise()
    if noise is not None:  # the mean's noise (quantiles are drawn, not noised)
        info |= {
            "noise_sd": noise["noise_sd"],
            "interval95": list(noise["interval95"]),
            "noise": noise["noise"],
        }
    return info, estimates


def _run_linreg(
    args: argparse.Namespace, progress: Phases
) -> tuple[dict[str, Any], dict[str, float]]:
    model = LabelPrivateLinearRegression(
        label_range=tuple(args.label_range),
        h=args.threshold,
        noise_variance=args.noise_variance,
        **given_parameters(args, _LINREG_FLAGS),
    )
    model._validate_params()  # the library's check, run before the file is read (fit reruns it)
    if args.feature_columns is None:
        progress.start("scan", unit="rows")  # a first read, for the columns' names
    features = _feature_columns(args, progress.adding())
    progress.start("read", unit="rows")
    users, table = _read(args, [args.label_column, *features], progress.adding())
    y = table.column(args.label_column).to_numpy()
    X = np.column_stack([table.column(c).to_numpy() for c in features])
    logger.info(
        "Read %d rows with %d features from %s (exact, not private).",
        y.size,
        len(features),
        args.input,
    )
    progress.start("estimate")
    model.fit(X, y, users)
    progress.stop()
    estimates = dict(zip(features, map(float, model.coef_), strict=True))
    if model.fit_intercept:
        estimates = {"intercept": float(model.intercept_), **estimates}
    info = {
        "method": model.method,
        "epsilon": float(model.budget_.epsilon),
        "delta": float(model.budget_.delta),
    }
    # Laplace(b) on every coefficient: sd sqrt(2) b, 95% of the noise within b ln 20
    b = float(model.noise_scale_)
    info |= {
        "noise_sd": math.sqrt(2.0) * b,
        "interval95_half_width": b * math.log(20.0),
        "noise": "laplace",
    }
    return info, estimates


def run(args: argparse.Namespace) -> int:
    """Run ``userdp estimate STATISTIC`` on parsed arguments; return the exit code."""
    _check(args)
    output = None if args.output is None else Path(args.output)
    if output is not None:
        check_output_path(output, overwrite=args.overwrite)
    start = time.perf_counter()
    # on a terminal: the rows read, then the time the estimate takes
    progress = Phases(enabled=Progress.wanted(args.quiet, input_size(args.input)))
    try:
        if args.statistic == "linreg":
            info, estimates = _run_linreg(args, progress)
        else:
            info, estimates = _run_values(args, progress)
    finally:
        progress.close()
    seconds = time.perf_counter() - start
    record = {"statistic": args.statistic, **info, "estimates": estimates}
    if output is not None:
        with atomic_output(output, overwrite=args.overwrite) as tmp:
            if _OUTPUT_FORMATS.get(output.suffix.lower()) == "csv":
                with open(tmp, "w", encoding="utf-8", newline="") as f:
                    writer = csv.writer(f, lineterminator="\n")
                    writer.writerow(["name", "estimate"])
                    writer.writerows([name, repr(value)] for name, value in estimates.items())
            else:
                tmp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        logger.info("Wrote the estimate to %s.", output)
    elif args.json:
        print(json.dumps(record, indent=2))
    else:
        width = max(len(k) for k in estimates)
        for name, value in estimates.items():
            print(f"{name:<{width}}  {value:.6g}")
    if not args.quiet:
        h = info.get("h")
        extra = "" if h is None else ", h=" + ",".join(f"{v:.3g}" for v in np.atleast_1d(h))
        print(
            f"{PROG} {args.statistic}: {info['method']}{extra} at epsilon={exact(args.epsilon)} "
            "(pure DP).",
            file=sys.stderr,
        )
        if args.verbose:
            print(f"{PROG} {args.statistic}: {NOT_PRIVATE}: {seconds:.2f} s.", file=sys.stderr)
    return 0
