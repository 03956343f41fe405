"""``userdp recommend train``: fit one method on ratings and save the released model."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path
from typing import Any

from userdp.data.features import movielens_user_features
from userdp.data.ratings import Ratings
from userdp.partition import ALGORITHMS as SELECTION_ALGORITHMS
from userdp.privacy.budget import PrivacyBudget
from userdp.recommend import RecommenderModel
from userdp.recommend.core.protocols import compact_users

from ..options import (
    NOT_PRIVATE,
    atomic_output,
    check_output_path,
    common_options,
    exact,
    run_guarded,
)
from . import _options
from ._data import (
    check_public,
    check_user_features,
    describe_encoder,
    encoder,
    fit,
    item_families,
    item_set,
    load,
    movielens_spec,
    rating_range,
)
from ._options import (
    ALL_METHODS,
    INPUT_HELP,
    PROG,
    PUBLIC_METHODS,
    add_input_options,
    add_model_options,
    format_table,
    fraction,
    model_options,
)
from ._spark import check_spark_flags, run_spark

__all__ = ["add_parser", "run"]

logger = logging.getLogger("userdp.cli")

TRAIN_DESCRIPTION = """\
Train a matrix-factorization recommender on ratings and save the released model (.npz): the
item embeddings, the centring value, the private item counts and the budget spent. Private
methods need --epsilon, --delta and the declared rating scale (--rating-range, which defaults
to the version's scale for MovieLens input); als is the non-private reference.

methods: als (exact, no DP); dpals-uniform, dpals-tail, adadpals (private sufficient
statistics with uniform / tail sampling / adaptive weights); dpsgd-uniform, dpsgd-tail,
adadpsgd (noisy gradient descent, same allocations).

public-feature methods (Krichene et al. 2023b): an item's embedding is an encoder of its public
features (--features: MovieLens genres, year, decade, tags, a table given by --item-features,
and id), trained privately with adaptive weights: am-ssp (one release of the item statistics
per step, SSP2), am-ssp1 (a fresh release per encoder step, SSP1), am-ssp-minibatch (SSP2 with
random item batches), am-dpsgd (DP-SGD with user-level clipping). The saved model holds the
released item embeddings, item biases (--biases, on by default) and the encoder's parameters.

item set: the model's items are fixed before training and never depend on one user. By default
private methods choose them privately by partition selection on the (user, item) pairs
(--selection-algorithm, spending --selection-fraction of --epsilon and --delta; the saved
budget is the total). With --items FILE the items are a public catalogue (free). Ratings of
other items are dropped.
"""


def add_parser(commands: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(
        "train",
        parents=[common_options()],
        help="Train a model on ratings and save it.",
        description=TRAIN_DESCRIPTION,
        epilog="example:\n  userdp recommend train ratings.parquet --rating-range 0.5 5 "
        "--epsilon 1 --delta 1e-5 --output model.npz\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("input", metavar="INPUT", help=INPUT_HELP)
    parser.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="MODEL",
        help="Where to write the model (.npz, loadable with MatrixFactorization.load). Required.",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="Replace MODEL if it exists. Default: refuse to overwrite an existing file.",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="Print the release as one JSON object on stdout (method, budget, unit, items, dim, "
        "rating range, centre and where the model went).",
    )
    privacy = parser.add_argument_group("privacy")
    privacy.add_argument(
        "--method",
        choices=ALL_METHODS,
        default="adadpals",
        metavar="METHOD",
        help=f"Training method, one of {', '.join(ALL_METHODS)} (see above). Default: %(default)s.",
    )
    privacy.add_argument(
        "--epsilon",
        type=float,
        default=None,
        metavar="E",
        help="Privacy-loss bound epsilon > 0 (for example 1). Required by private methods; "
        "refused by als.",
    )
    privacy.add_argument(
        "--delta",
        type=float,
        default=None,
        metavar="D",
        help="Failure probability delta in (0, 1), far below 1 / (number of users) (for "
        "example 1e-5). Required by private methods; refused by als.",
    )
    parser.add_argument(
        "--user-features",
        action="store_true",
        help="am-* methods on ml-100k or ml-1m: pull each user's embedding toward a private "
        "prior of the users sharing their age, gender and occupation (private features: the "
        "prior is released with noise, --user-feature-fraction of the budget, and saved in the "
        "model). Default: off.",
    )
    chosen = parser.add_argument_group("item set")
    chosen.add_argument(
        "--items",
        metavar="FILE",
        default=None,
        help="A public catalogue of item ids: one per line (.txt, as 'userdp select' writes) "
        "or a table with an 'item' column. The model has exactly these items and spends "
        "nothing on choosing them. Default: choose the items privately.",
    )
    chosen.add_argument(
        "--selection-fraction",
        type=fraction,
        default=0.1,
        metavar="F",
        help="Share of --epsilon and --delta spent choosing the item set privately (without "
        "--items), in (0, 1). Default: %(default)s.",
    )
    chosen.add_argument(
        "--selection-algorithm",
        choices=list(SELECTION_ALGORITHMS),
        default="mad2r",
        metavar="NAME",
        help="Partition-selection algorithm that chooses the item set, one of "
        f"{', '.join(SELECTION_ALGORITHMS)}. Default: %(default)s.",
    )
    add_model_options(parser)
    add_input_options(parser)
    engine = parser.add_argument_group("engine")
    engine.add_argument(
        "--engine",
        choices=("local", "spark"),
        default="local",
        help="local: NumPy on this machine (reads the whole input into memory). spark: Apache "
        "Spark DataFrames (pip install 'userdp[spark]', Java 17+) for the matrix-"
        "factorization methods and am-ssp, am-ssp1, am-ssp-minibatch (with --items FILE or a "
        "private run; features from --item-features FILE or id; not --user-features); INPUT may "
        "then be a directory of part files or any path "
        "Spark reads, and only the item set and item statistics reach this machine. Default: "
        "%(default)s.",
    )
    engine.add_argument(
        "--spark-master",
        default=None,
        metavar="URL",
        help="Spark master for --engine spark, e.g. local[*], local[2], yarn. Default: "
        "local[*], sized for this machine.",
    )
    parser.set_defaults(handler=lambda args: run_guarded(f"{PROG} train", run, args), parser=parser)
    return parser


def run(args: argparse.Namespace) -> int:
    """Run ``userdp recommend train`` on parsed arguments; errors propagate to the guard."""
    start = time.perf_counter()
    _options.check_budget_flags(
        None if args.epsilon is None else [args.epsilon], args.delta, [args.method]
    )
    budget = None if args.epsilon is None else PrivacyBudget(args.epsilon, args.delta)
    options = model_options(args, [args.method])
    spec = movielens_spec(Path(args.input))
    check_public(args, [args.method], spec)
    check_user_features(args, spec)
    check_spark_flags(args)
    output = check_output_path(args.output, overwrite=args.overwrite)
    if args.engine == "spark":
        return run_spark(args, budget, options, output, start)
    ratings, spec = load(args.input, args)
    logger.info("Read %s (exact counts, not private).", ratings)
    declared = rating_range(args, spec, [args.method])
    items, model_budget = item_set(args, ratings, budget)
    train = compact_users(ratings)
    user_features = None
    if args.user_features:
        assert spec is not None  # check_user_features: user features need a MovieLens input
        user_features = movielens_user_features(args.input, train.user_labels, name=spec.name)
    coder = None
    if args.method in PUBLIC_METHODS:
        # The encoder's rows are the item set's items (features looked up per id).
        on_items = ratings if items is None else ratings.restrict_items(items.labels)[0]
        coder = encoder(args, item_families(args, spec, on_items), on_items.n_items)
    fitted = fit(
        args.method,
        train,
        model_budget,
        declared,
        args,
        options,
        items=items,
        encoder=coder,
        user_features=user_features,
        progress=_options.interactive(args.quiet),
    )
    model = fitted.model_
    with atomic_output(output, overwrite=args.overwrite) as tmp:
        model.save(tmp)
    logger.info("Wrote the model to %s.", output)
    if args.json:
        print(_options.release_json(model, output))
    if not args.quiet:
        seconds = time.perf_counter() - start
        print(
            _summary(
                model,
                fitted,
                ratings,
                output,
                seconds,
                coder,
                given=budget,
                verbose=args.verbose > 0,
            ),
            file=sys.stderr,
        )
    return 0


def _summary(
    model: RecommenderModel,
    fitted: Any,
    r: Ratings,
    output: Path,
    seconds: float,
    encoder: Any = None,
    *,
    given: PrivacyBudget | None = None,
    verbose: bool = False,
) -> str:
    """The release (released values, declared parameters and where it went); with ``-v`` the
    operator's exact figures (input counts, timings: not private) on their own labelled line.
    Logs keep stderr, so nothing data-dependent is printed by default. The budget is echoed
    as ``given`` (--epsilon, --delta) exactly; the model spent at most that."""
    prog = f"{PROG} train"
    b = given if given is not None else model.budget
    row = [
        model.method,
        "non-private" if b is None else exact(b.epsilon),
        "-" if b is None else exact(b.delta),
        f"{model.n_items} ({model.item_source})",
        str(int(model.trained_items.sum())),
        str(model.dim),
        str(model.params.get("steps", "-")),
    ]
    header = ["method", "epsilon", "delta", "items", "trained", "dim", "steps"]
    lo, hi = model.rating_range
    lines = [
        f"{prog}: wrote {output} (rating range {lo:g}..{hi:g}, center {model.center:.4g}).",
        format_table(header, [row], indent="  "),
    ]
    if encoder is not None:
        lines.append(
            f"{prog}: {model.method}: {describe_encoder(encoder)}; the model holds the "
            "released item embeddings"
            + (", item biases" if model.item_biases is not None else "")
            + " and the encoder's parameters."
        )
    if verbose:
        diag = fitted.diagnostics_
        lines.append(
            f"{prog}: {NOT_PRIVATE}: {r.n_users} users, {r.n_ratings} ratings, "
            f"{diag['ratings_outside_item_set']} outside the item set; {seconds:.2f} s "
            f"({diag['fit_seconds']:.2f} s training)."
        )
    return "\n".join(lines)
