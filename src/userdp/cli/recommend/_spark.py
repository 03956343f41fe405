"""``userdp recommend train --engine spark``: ratings read, items chosen and the model trained
through Spark (:class:`userdp.recommend.engines.spark.SparkRunner`), as ``userdp select --engine
spark`` reads and selects. Only the item set (m ids) and the item statistics come to the driver; the
am-* methods' public item features (``--item-features FILE``, or ``--features id``) are read on the
driver for the item set's m items."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa

from userdp.data.io import infer_format
from userdp.data.ratings import vocabulary_array
from userdp.exceptions import DataError, InvalidParameterError
from userdp.partition import ALGORITHMS as SELECTION_ALGORITHMS
from userdp.partition.api import select_partitions
from userdp.privacy.budget import PrivacyBudget
from userdp.recommend.als.estimator import SPARK_METHODS
from userdp.recommend.core.items import ItemSet

from ..options import NOT_PRIVATE, atomic_output, exact, start_spark
from ._data import _read_catalogue, encoder, fit, item_families, movielens_spec, rating_range
from ._options import PROG, PUBLIC_METHODS, format_table, release_json

__all__ = ["SPARK_PUBLIC_METHODS", "check_spark_flags", "run_spark"]

#: The am-* methods the Spark engine trains (AM-SSP's variants; am-dpsgd runs locally).
SPARK_PUBLIC_METHODS = tuple(m for m, v in PUBLIC_METHODS.items() if v != "dpsgd")

logger = logging.getLogger("userdp.cli")

_ARROW_TYPES = {"LongType": pa.int64(), "IntegerType": pa.int32(), "StringType": pa.string()}


def check_spark_flags(args: argparse.Namespace) -> None:
    """What ``--engine spark`` cannot do, refused before Spark starts."""
    if args.engine != "spark":
        if args.spark_master is not None:
            logger.warning("--spark-master only applies to --engine spark; ignored.")
        return
    if args.method not in SPARK_METHODS and args.method not in SPARK_PUBLIC_METHODS:
        methods = ", ".join((*SPARK_METHODS, *SPARK_PUBLIC_METHODS))
        raise InvalidParameterError(
            f"--method {args.method} has no Spark engine; use one of {methods} with --engine "
            "spark, or the local engine."
        )
    if args.user_features:
        raise InvalidParameterError("--user-features applies to --engine local only.")
    if movielens_spec(Path(args.input)) is not None:
        raise InvalidParameterError(
            "--engine spark reads a ratings table (Parquet, CSV, TSV, JSON Lines, or a directory "
            "of part files), not a MovieLens download; convert it or use --engine local."
        )
    if args.delimiter is not None:
        raise InvalidParameterError("--delimiter applies to --engine local only.")


def run_spark(
    args: argparse.Namespace,
    budget: PrivacyBudget | None,
    options: dict[str, Any],
    output: Path,
    start: float,
) -> int:
    """Read INPUT with Spark, fix the item set, train and save the released model."""
    from pyspark.sql import functions as F

    from userdp.partition.spark import read

    session = start_spark(args.spark_master, verbose=args.verbose)
    fmt = args.format or infer_format(args.input)
    frame = read(args.input, format=fmt, spark=session)
    cols = (args.user_column, args.item_column, args.rating_column)
    for col in cols:
        if col not in frame.columns:
            raise DataError(
                f"{args.input}: column {col!r} not found; the input has columns "
                f"{frame.columns!r}. Name the columns with --user-column, --item-column and "
                "--rating-column."
            )
    frame = frame.select(
        F.col(f"`{cols[0]}`").alias("user"),
        F.col(f"`{cols[1]}`").alias("item"),
        F.col(f"`{cols[2]}`").cast("double").alias("rating"),
    )
    declared = rating_range(args, None, [args.method])
    items, model_budget = _item_set(args, frame, budget)
    coder = None
    if args.method in PUBLIC_METHODS:  # public item features of the item set (driver side)
        assert items is not None  # these methods are private: a budget, hence an item set
        on_items = SimpleNamespace(item_labels=items.labels, n_items=len(items.labels))
        coder = encoder(args, item_families(args, None, on_items), len(items.labels))
    fitted = fit(
        args.method, frame, model_budget, declared, args, options, items=items, encoder=coder
    )
    model = fitted.model_
    with atomic_output(output, overwrite=args.overwrite) as tmp:
        model.save(tmp)
    logger.info("Wrote the model to %s.", output)
    if getattr(args, "json", False):
        print(release_json(model, output))
    if not args.quiet:
        b = budget if budget is not None else model.budget  # as given, echoed exactly
        row = [
            model.method,
            "non-private" if b is None else exact(b.epsilon),
            "-" if b is None else exact(b.delta),
            f"{model.n_items} ({model.item_source})",
            str(int(model.trained_items.sum())),
            str(model.dim),
            str(model.params["steps"]),
        ]
        header = ["method", "epsilon", "delta", "items", "trained", "dim", "steps"]
        lo, hi = model.rating_range
        seconds = time.perf_counter() - start
        print(
            f"{PROG} train: wrote {output} with the Spark engine (rating range {lo:g}..{hi:g}, "
            f"center {model.center:.4g}).\n{format_table(header, [row], indent='  ')}",
            file=sys.stderr,
        )
        if args.verbose:  # exact figures only on request: logs keep stderr
            print(
                f"{PROG} train: {NOT_PRIVATE}: "
                f"{fitted.diagnostics_['ratings_outside_item_set']} ratings outside the item "
                f"set; {seconds:.2f} s ({fitted.diagnostics_['fit_seconds']:.2f} s training).",
                file=sys.stderr,
            )
    return 0


def _item_set(
    args: argparse.Namespace, frame: Any, budget: PrivacyBudget | None
) -> tuple[ItemSet | None, PrivacyBudget | None]:
    """``--items FILE`` (public, free), or a private selection on Spark with
    ``--selection-fraction`` of the budget (as the local engine's ``item_set``)."""
    if args.items is not None:
        kind = type(frame.schema["item"].dataType).__name__
        labels = _read_catalogue(args.items, _ARROW_TYPES.get(kind, pa.string()))
        return ItemSet.public(labels), budget
    if budget is None:
        return None, None
    f = args.selection_fraction
    selection_budget, model_budget = budget.split([f, 1.0 - f])
    tight = "composition" in SELECTION_ALGORITHMS[args.selection_algorithm].options
    basic: dict[str, Any] = {"composition": "basic"} if tight else {}
    result: Any = select_partitions(  # a SparkSelectionResult (engine="spark")
        frame.select("user", "item"),
        epsilon=selection_budget.epsilon,
        delta=selection_budget.delta,
        algorithm=args.selection_algorithm,
        engine="spark",
        seed=args.seed,
        **basic,
    )
    labels = result.to_arrow()  # the released items: m ids, the driver holds them
    result.dataframe.unpersist()
    logger.info(
        "Selected %d items privately (%s, epsilon %.4g, delta %.3g).",
        len(labels),
        args.selection_algorithm,
        selection_budget.epsilon,
        selection_budget.delta,
    )
    if len(labels) == 0:
        raise DataError(
            "Private item selection released no item at this budget: raise --epsilon or "
            "--selection-fraction, or pass a public catalogue with --items FILE."
        )
    items = ItemSet(vocabulary_array(labels), "private", result.dp_event, result.budget)
    return items, model_budget
