"""``userdp generate``: write a synthetic (user, item) file to try ``userdp select`` on."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from userdp.data import Contributions, Ratings, section62_instance, zipf_contributions
from userdp.data.synthetic import lowrank_ratings, zipf_regression
from userdp.exceptions import InvalidParameterError

from .options import (
    atomic_output,
    check_output_path,
    common_options,
    is_stdout,
    non_negative_int,
    positive_int,
    run_guarded,
)

__all__ = ["add_parser", "run"]

logger = logging.getLogger("userdp.cli")

PROG = "userdp generate"
_DEFAULT_USERS = {"zipf": 200_000, "section62": 15_000, "ratings": 20_000, "regression": 3_000}

DESCRIPTION = """\
Write a synthetic file of (user, item) rows with columns 'user' and 'item', as CSV (.csv,
.csv.gz) or Parquet (.parquet, .pq) by the name of OUTPUT. No real data is involved.

  zipf       users with power-law set sizes drawing items from a Zipf popularity; items are
             labelled i0, i1, ... by rank (i0 is the most popular).
  section62  the instance of Chen et al. 2025, Section 6.2: every user holds item 0 and two of
             1000 light items; MAD selects more of them than Basic.
  ratings    (user, item, rating) rows shaped like MovieLens: long-tailed item popularity,
             at least 20 ratings per user (about 72 on average), half stars 0.5..5 from a
             low-rank signal plus noise; for 'userdp recommend'.
  regression (user, x1..x10, label) rows: the synthetic regression of Epasto et al. 2020 (10
             standard normal features, coefficients 100 * U(0, 1), label noise sd 20), dealt
             to users with Zipf(1.5) sizes; --users sets the number of rows. Labels lie in
             [-1600, 1600]; for 'userdp estimate linreg'.
"""

EPILOG = """\
example:
  userdp generate zipf pairs.csv && userdp select pairs.csv --epsilon 1 --delta 1e-5
"""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``generate`` on the ``userdp`` subcommand parsers."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "generate",
        parents=[common_options()],
        help="Write a synthetic (user, item) file to try the selection on.",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "kind", choices=list(_DEFAULT_USERS), help="Which synthetic data set to write."
    )
    parser.add_argument(
        "output",
        metavar="OUTPUT",
        help="File to write: CSV (.csv, .csv.gz) or Parquet (.parquet, .pq); - for CSV on stdout.",
    )
    parser.add_argument(
        "--users",
        type=positive_int,
        default=None,
        metavar="N",
        help="Number of users (of rows for regression). Default: 200000 for zipf (about 2.6 "
        "million rows), 15000 for section62, 20000 for ratings (about 1.4 million rows), 3000 "
        "rows for regression.",
    )
    parser.add_argument(
        "--seed",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="Seed of the generator; the same seed gives the same file. Default: %(default)s.",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="Replace OUTPUT if it exists. Default: refuse to overwrite an existing file.",
    )
    parser.set_defaults(handler=lambda args: run_guarded(PROG, run, args), parser=parser)
    return parser


def _output_format(path: Path) -> str:
    if is_stdout(path):  # '-' or /dev/stdout: CSV text
        return "csv"
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes[-1:] in ([".parquet"], [".pq"]):
        return "parquet"
    if suffixes[-1:] == [".csv"]:
        return "csv"
    if suffixes[-2:] == [".csv", ".gz"]:
        return "csv.gz"
    raise InvalidParameterError(
        f"Cannot tell the format of {str(path)!r} from its name; end it in .csv, .csv.gz, "
        ".parquet or .pq."
    )


def _table(data: Contributions | Ratings) -> pa.Table:
    if isinstance(data, Ratings):
        return data.to_arrow()
    return pa.table(
        {
            "user": data.user_labels.take(pa.array(data.users)),
            "item": data.item_values(data.items),
        }
    )


def _write(table: pa.Table, path: Path, fmt: str) -> None:
    if fmt == "parquet":
        pq.write_table(table, path)
        return
    # The generated labels (integers, "i123") never need quoting, so the file reads as plain
    # `user,item` rows; pyarrow would otherwise quote every string.
    options = pacsv.WriteOptions(include_header=False, quoting_style="none")
    compression = "gzip" if fmt == "csv.gz" else None
    with (
        pa.CompressedOutputStream(path, "gzip")
        if compression
        else pa.OSFile(str(path), "wb") as sink
    ):
        sink.write((",".join(table.column_names) + "\n").encode())
        pacsv.write_csv(table, sink, write_options=options)


def run(args: argparse.Namespace) -> int:
    """Run ``userdp generate`` on parsed arguments; errors propagate to the guard."""
    start = time.perf_counter()
    output = check_output_path(args.output, overwrite=args.overwrite)
    fmt = _output_format(output)
    n_users = _DEFAULT_USERS[args.kind] if args.users is None else args.users
    if args.kind == "zipf":
        data = zipf_contributions(n_users, seed=args.seed, string_items=True)
    elif args.kind == "ratings":
        # MovieLens-10M's shape scaled down: 143 ratings per user there, 72 here.
        n_items = max(150, n_users // 7)  # >= 103 so 72 ratings fit in 70% of the items
        data = lowrank_ratings(n_users, n_items, 72 * n_users, seed=args.seed)
    elif args.kind == "regression":
        reg = zipf_regression(max(n_users, 2), 10, noise=20.0, seed=args.seed)
        columns = {"user": pa.array([f"u{u}" for u in reg.users.tolist()])}
        columns.update({f"x{j + 1}": pa.array(reg.X[:, j]) for j in range(reg.X.shape[1])})
        columns["label"] = pa.array(np.clip(reg.y, -1600.0, 1600.0))
        return _finish(pa.table(columns), output, fmt, args, start, f"{reg.users[-1] + 1} users")
    else:
        data = section62_instance(n_users, seed=args.seed)
    table = _table(data)
    items = np.count_nonzero(np.bincount(data.items))
    return _finish(table, output, fmt, args, start, f"{data.n_users} users, {items} distinct items")


def _finish(
    table: pa.Table, output: Path, fmt: str, args: argparse.Namespace, start: float, what: str
) -> int:
    with atomic_output(output, overwrite=args.overwrite) as tmp:
        _write(table, tmp, fmt)
    if not args.quiet:
        print(
            f"{PROG}: wrote {table.num_rows} rows ({what}) to {output} "
            f"in {time.perf_counter() - start:.2f} s.",
            file=sys.stderr,
        )
    return 0
