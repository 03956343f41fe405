"""``userdp recommend``: train, evaluate and query private matrix-factorization recommenders.

Three subcommands over :class:`~userdp.recommend.MatrixFactorization`:

* ``train``: fit one method on a ratings file or a MovieLens folder/zip and save the released
  model (item embeddings, private centring value and private item counts) as ``.npz``;
* ``evaluate``: score a saved model on history/test files, or split a data set with a benchmark
  protocol (ML10M RMSE, ML20M Recall@k), train every method at every epsilon and score them,
  always beside the non-private global-mean / popularity baselines;
* ``neighbors``: the nearest items of given items in a saved model, with MovieLens titles.
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
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from userdp.data.io import FORMATS, read_table
from userdp.data.movielens import (
    MOVIELENS,
    MovieLensSpec,
    load_movielens,
    load_movies,
    movielens_version,
)
from userdp.data.ratings import Ratings
from userdp.exceptions import DataError, InvalidParameterError
from userdp.privacy.budget import PrivacyBudget
from userdp.recommend import (
    METHODS,
    MatrixFactorization,
    frequency_buckets,
    ml10m_split,
    ml20m_split,
    popularity_scores,
    ranking_metrics_at_k,
    rmse,
    sliced_rmse,
)

from .options import (
    Progress,
    atomic_output,
    check_output_path,
    common_options,
    non_negative_int,
    positive_int,
    run_guarded,
)

__all__ = ["add_parser", "run_evaluate", "run_neighbors", "run_train"]

logger = logging.getLogger("userdp.cli")

PROG = "userdp recommend"
N_BUCKETS = 5
_PROTOCOL_METRIC = {"ml10m": "rmse", "ml20m": "recall"}
_RESULT_SUFFIXES = (".json", ".csv")

DESCRIPTION = """\
Train, evaluate and query recommenders built by matrix factorization under user-level
(epsilon, delta)-differential privacy (Krichene et al. 2023): only the item embeddings, a
private centring value and private item counts are released; a user's embedding is computed
from the released items and the user's own history.
"""

EPILOG = """\
examples:
  userdp recommend train ml-100k.zip --epsilon 1 --delta 1e-5 --output model.npz
  userdp recommend evaluate ml-100k/ --protocol ml10m --method adadpals,dpals-uniform \\
      --epsilon 1 --epsilon 5 --delta 1e-5
  userdp recommend neighbors --model model.npz 50 181 --movies ml-100k/
"""

INPUT_HELP = (
    "Ratings: a file with user, item and rating columns (CSV, TSV, Parquet or JSON Lines; the "
    "format comes from the name) or a MovieLens folder or official .zip (ml-100k, ml-1m, "
    "ml-10m, ml-20m, ml-latest, ml-latest-small), recognised by its name."
)


# -- argument types -----------------------------------------------------------------------------
def _float_in(low: float, what: str, *, open_low: bool = True) -> Callable[[str], float]:
    """An argparse ``type`` accepting finite floats > ``low`` (>= with ``open_low=False``)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid number: {text!r}") from None
        ok = math.isfinite(value) and (value > low if open_low else value >= low)
        if not ok:
            raise argparse.ArgumentTypeError(f"must be a {what} number, got {text!r}")
        return value

    return parse


_positive_float = _float_in(0.0, "positive")
_non_negative_float = _float_in(0.0, "non-negative", open_low=False)


def _fraction(text: str) -> float:
    value = _positive_float(text)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1), got {text!r}")
    return value


def _min_count(text: str) -> str | float:
    if text == "auto":
        return text
    return _non_negative_float(text)


def _center(text: str) -> str | float:
    if text in ("private-mean", "midpoint"):
        return text
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be private-mean, midpoint or a number, got {text!r}"
        ) from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def _method_list(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    for name in names:
        if name not in METHODS:
            raise argparse.ArgumentTypeError(
                f"invalid choice: {name!r} (choose from {', '.join(METHODS)})"
            )
    if not names:
        raise argparse.ArgumentTypeError("expected one or more method names")
    return names


def _epsilon_list(text: str) -> list[float]:
    values = [_positive_float(t.strip()) for t in text.split(",") if t.strip()]
    if not values:
        raise argparse.ArgumentTypeError("expected one or more numbers > 0")
    return values


def _unique(values: Sequence[Any]) -> list[Any]:
    return list(dict.fromkeys(values))


# -- options shared by train and evaluate -------------------------------------------------------
#: MatrixFactorization's keyword defaults, shown in --help (so the help follows the library).
_DEFAULTS = {
    name: p.default
    for name, p in inspect.signature(MatrixFactorization).parameters.items()
    if p.default is not inspect.Parameter.empty
}


@dataclass(frozen=True)
class _Tuning:
    """A MatrixFactorization keyword exposed as ``--flag``; None (unset) keeps its default."""

    dest: str
    type: Callable[[str], Any]
    applies: Callable[[str], bool]
    scope: str
    help: str
    metavar: str = "X"


def _private(m: str) -> bool:
    return m != "als"


def _ssp(m: str) -> bool:
    return m in ("dpals-uniform", "dpals-tail", "adadpals")


def _gd(m: str) -> bool:
    return "sgd" in m


_TUNING = tuple(
    t
    for t in (
        _Tuning("mu", _non_negative_float, lambda m: m.startswith("ada"), "adadpals and adadpsgd",
                "Exponent of the adaptive weights n_hat^-mu (1/4 to 1/2 work best)."),
        _Tuning("sample_size", positive_int, lambda m: m.endswith(("-uniform", "-tail")),
                "the uniform and tail methods", "Items sampled per user (k).", "K"),
        _Tuning("count_sample", positive_int, _private, "private methods",
                "At most this many items per user enter the private item counts and mean.", "K"),
        _Tuning("count_fraction", _fraction, _private, "private methods",
                "Share of the budget spent on the private item counts."),
        _Tuning("center_fraction", _fraction, _private, "private methods",
                "Share of the budget spent on the private mean (with --center private-mean)."),
        _Tuning("moment_share", _fraction, _ssp, "the dpals methods",
                "Share of each step's budget spent on the moments b (the rest on the Grams A)."),
        _Tuning("reg", _positive_float, lambda m: True, "every method",
                "Frequency-scaled ridge regularisation."),
        _Tuning("noise_reg", _non_negative_float, _ssp, "the dpals methods",
                "Extra item ridge in units of the Gram noise, for stable tail solves."),
        _Tuning("max_norm", _positive_float, _private, "private methods",
                "User embeddings are clipped to this norm before the item update."),
        _Tuning("learning_rate", _positive_float, _gd, "the dpsgd methods",
                "Step size of the noisy gradient descent."),
        _Tuning("step_offset", _positive_float, _gd, "the dpsgd methods",
                "Item i's step is learning-rate / (step-offset + n_hat_i)."),
        _Tuning("sgd_steps", positive_int, _gd, "the dpsgd methods",
                "Gradient steps per alternating step.", "N"),
        _Tuning("clip_norm", _positive_float, _gd, "the dpsgd methods",
                "User-level clipping norm of each user's whole gradient."),
        _Tuning("unobserved_weight", _non_negative_float, lambda m: True, "every method",
                "Weight of the implicit-feedback term on unrated items (ml20m default: 1)."),
        _Tuning("top_items", _fraction, lambda m: True, "every method",
                "Train only on this fraction of items with the largest private counts "
                "(ml20m default: 0.1)."),
        _Tuning("min_item_count", _min_count, lambda m: True, "every method ('auto': dpals)",
                "Train only on items whose private count reaches this; 'auto' puts the cutoff "
                "where an item's noise starts to drown its signal (better at small epsilon).",
                "N|auto"),
    )
    if t.dest in _DEFAULTS  # only keywords this MatrixFactorization has
)  # fmt: skip


def _add_input_options(parser: argparse.ArgumentParser) -> None:
    data = parser.add_argument_group("input (ratings files; ignored for MovieLens)")
    for name, default in (("user", "user"), ("item", "item"), ("rating", "rating")):
        data.add_argument(
            f"--{name}-column",
            default=default,
            metavar="NAME",
            help=f"Column holding the {name}. Default: %(default)s.",
        )
    data.add_argument(
        "--format",
        choices=FORMATS,
        default=None,
        help="Format of ratings files, when the file name does not tell it. Default: from the "
        "file name.",
    )


def _add_model_options(parser: argparse.ArgumentParser) -> None:
    model = parser.add_argument_group("model")
    model.add_argument(
        "--dim", type=positive_int, default=_DEFAULTS["dim"], metavar="N",
        help="Embedding dimension. Default: %(default)s.",
    )  # fmt: skip
    model.add_argument(
        "--steps", type=positive_int, default=_DEFAULTS["steps"], metavar="N",
        help="Alternating steps; each private step is charged. Default: %(default)s.",
    )  # fmt: skip
    model.add_argument(
        "--rating-range",
        nargs=2,
        type=float,
        default=None,
        metavar=("LOW", "HIGH"),
        help="Declared rating scale; ratings are clipped to it. Private methods need it (it "
        "bounds each user's influence and must not be read from the data). Default: the "
        "version's scale for MovieLens (0.5 5 or 1 5); required for other private input.",
    )
    model.add_argument(
        "--center",
        type=_center,
        default=None,
        metavar="private-mean|midpoint|FLOAT",
        help="Value subtracted before factorizing: private-mean spends --center-fraction of "
        "the budget on a mean that leans toward light users' ratings; midpoint (of the rating "
        "range) and a number are free. Default: private-mean.",
    )
    tuning = parser.add_argument_group("tuning (each applies to some methods only)")
    for t in _TUNING:
        tuning.add_argument(
            "--" + t.dest.replace("_", "-"),
            type=t.type,
            default=None,
            metavar=t.metavar,
            help=f"{t.help} For {t.scope}. Default: "
            + ("none" if _DEFAULTS[t.dest] is None else f"{_DEFAULTS[t.dest]:g}")
            + ".",
        )
    parser.add_argument(
        "--seed",
        type=non_negative_int,
        default=None,
        metavar="N",
        help="Seed the noise, for tests and reproducible runs only: a model trained with a "
        "known seed offers no privacy. Default: fresh OS entropy.",
    )


def _tuning_given(args: argparse.Namespace) -> list[str]:
    return ["--" + t.dest.replace("_", "-") for t in _TUNING if getattr(args, t.dest) is not None]


def _model_options(args: argparse.Namespace, methods: Sequence[str]) -> dict[str, Any]:
    """MatrixFactorization keywords set on the command line; warn about the inapplicable."""
    options: dict[str, Any] = {}
    for t in _TUNING:
        value = getattr(args, t.dest)
        if value is None:
            continue
        if any(t.applies(m) for m in methods):
            options[t.dest] = value  # methods it does not apply to never read it
        else:
            flag = "--" + t.dest.replace("_", "-")
            logger.warning("%s only applies to %s; ignored.", flag, t.scope)
    if args.center is not None:
        options["center"] = args.center
    return options


def _check_budget(
    epsilons: Sequence[float] | None, delta: float | None, methods: Sequence[str]
) -> None:
    """Validate --epsilon/--delta against the methods (private ones need both; als neither)."""
    private = [m for m in methods if _private(m)]
    given = [f for f, v in (("--epsilon", epsilons), ("--delta", delta)) if v is not None]
    if not private and given:
        raise InvalidParameterError(
            f"--method als is not private; drop {' and '.join(given)} (or choose a private "
            "method such as adadpals)."
        )
    if private:
        missing = [f for f, v in (("--epsilon", epsilons), ("--delta", delta)) if v is None]
        if missing:
            raise InvalidParameterError(
                f"--method {private[0]} is private: pass {' and '.join(missing)} (for example "
                "--epsilon 1 --delta 1e-5)."
            )
        for eps in epsilons or ():
            if not (math.isfinite(eps) and eps > 0):
                raise InvalidParameterError(f"--epsilon must be a finite number > 0; got {eps:g}.")
        if not (math.isfinite(delta) and 0 < delta < 1):
            raise InvalidParameterError(f"--delta must be in (0, 1); got {delta:g}.")


def _check_rating_range(args: argparse.Namespace) -> tuple[float, float] | None:
    if args.rating_range is None:
        return None
    lo, hi = args.rating_range
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise InvalidParameterError(
            f"--rating-range must be two finite numbers LOW < HIGH; got {lo:g} {hi:g}."
        )
    return float(lo), float(hi)


def _interactive(quiet: bool) -> bool:
    isatty = getattr(sys.stderr, "isatty", None)
    return (not quiet) and callable(isatty) and bool(isatty())


# -- reading ratings ----------------------------------------------------------------------------
def _movielens_spec(path: Path) -> MovieLensSpec | None:
    """The MovieLens version of a folder or zip; None for anything else (a file, Parquet parts).

    A zip that is no MovieLens zip is an error: the CLI reads ratings files, not archives.
    """
    spec = movielens_version(path)
    if spec is None and path.is_file() and zipfile.is_zipfile(path):
        raise InvalidParameterError(
            f"{str(path)!r} is a zip file but not a MovieLens zip (ml-100k.zip, ml-1m.zip, "
            "ml-10m.zip, ml-20m.zip, ml-latest.zip, ml-latest-small.zip or one holding such "
            "a folder); extract ratings files from it first."
        )
    return spec


def _read_ratings_table(path: str, args: argparse.Namespace) -> pa.Table:
    """A ratings file as a table with columns user, item and rating (float64)."""
    cols = (args.user_column, args.item_column, args.rating_column)
    table = read_table(path, columns=cols, format=args.format)  # type: ignore[arg-type]
    for col in cols:
        if col not in table.column_names:
            raise DataError(
                f"{path}: column {col!r} not found; the input has columns "
                f"{table.column_names!r}. Name the columns with --user-column, --item-column "
                "and --rating-column."
            )
    rating = table.column(args.rating_column)
    if rating.type != pa.float64():
        try:
            rating = rating.cast(pa.float64())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
            raise DataError(
                f"{path}: column {args.rating_column!r} must hold numbers: "
                f"{str(err).splitlines()[0]}"
            ) from err
    for col, values in zip(
        cols, (table.column(cols[0]), table.column(cols[1]), rating), strict=True
    ):
        if values.null_count:
            raise DataError(f"{path}: column {col!r} has {values.null_count} empty value(s).")
    return pa.table(
        {"user": table.column(cols[0]), "item": table.column(cols[1]), "rating": rating}
    )


def _load(path: str, args: argparse.Namespace) -> tuple[Ratings, MovieLensSpec | None]:
    """Ratings of INPUT, and its MovieLens version if it is one."""
    spec = _movielens_spec(Path(path))
    if spec is not None:
        logger.info("Reading MovieLens %s from %s.", spec.name, path)
        return load_movielens(path, name=spec.name), spec
    table = _read_ratings_table(path, args)
    return Ratings.from_table(table), None


def _rating_range(
    args: argparse.Namespace, spec: MovieLensSpec | None, methods: Sequence[str]
) -> tuple[float, float] | None:
    declared = _check_rating_range(args)
    if declared is not None:
        return declared
    if spec is not None:
        return (spec.rating_min, spec.rating_max)
    private = [m for m in methods if _private(m)]
    if private:
        raise InvalidParameterError(
            f"--method {private[0]} is private and needs the declared rating scale: pass "
            "--rating-range LOW HIGH (for example --rating-range 0.5 5). It bounds each user's "
            "influence, so it is never read from the data; only MovieLens input has a default."
        )
    return None


def _compact_users(r: Ratings) -> Ratings:
    """The same ratings without user codes that have none (item codes unchanged).

    Protocol splits keep the parent's code books, so a training part holds the held-out users'
    codes with no ratings; the trainer need not see them.
    """
    if r.n_ratings and np.all(r.user_counts() > 0):
        return r
    return Ratings.from_codes(
        r.users, r.items, r.values,
        n_users=r.n_users, n_items=r.n_items,
        user_labels=r.user_labels, item_labels=r.item_labels,
    )  # fmt: skip


def _union(a: Ratings, b: Ratings) -> Ratings:
    """Rows of two parts with the same code books, as one part (codes unchanged)."""
    return Ratings.from_codes(
        np.concatenate([a.users, b.users]),
        np.concatenate([a.items, b.items]),
        np.concatenate([a.values, b.values]),
        n_users=a.n_users, n_items=a.n_items,
        user_labels=a.user_labels, item_labels=a.item_labels, keep_empty_users=True,
    )  # fmt: skip


def _implicit(r: Ratings) -> Ratings:
    return Ratings(r.users, r.items, np.ones_like(r.values), r.user_labels, r.item_labels)


# -- output -------------------------------------------------------------------------------------
def _format_table(header: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "") -> str:
    widths = [max(len(h), *(len(r[j]) for r in rows)) for j, h in enumerate(header)]
    lines = [
        indent + "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()
        for cells in [header, *rows]
    ]
    return "\n".join(lines)


def _num(value: float | None, fmt: str = ".4f") -> str:
    return "-" if value is None or not math.isfinite(value) else format(value, fmt)


# -- train --------------------------------------------------------------------------------------
TRAIN_DESCRIPTION = """\
Train a matrix-factorization recommender on ratings and save the released model (.npz): the
item embeddings, the centring value, the private item counts and the budget spent. Private
methods need --epsilon, --delta and the declared rating scale (--rating-range, which defaults
to the version's scale for MovieLens input); als is the non-private reference.

methods: als (exact, no DP); dpals-uniform, dpals-tail, adadpals (private sufficient
statistics with uniform / tail sampling / adaptive weights); dpsgd-uniform, dpsgd-tail,
adadpsgd (noisy gradient descent, same allocations).
"""


def _add_train(commands: Any) -> argparse.ArgumentParser:
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
        "-o", "--output", required=True, metavar="MODEL",
        help="Where to write the model (.npz, loadable with MatrixFactorization.load). Required.",
    )  # fmt: skip
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="Replace MODEL if it exists. Default: refuse to overwrite an existing file.",
    )
    privacy = parser.add_argument_group("privacy")
    privacy.add_argument(
        "--method", choices=METHODS, default="adadpals", metavar="METHOD",
        help=f"Training method, one of {', '.join(METHODS)} (see above). Default: %(default)s.",
    )  # fmt: skip
    privacy.add_argument(
        "--epsilon", type=float, default=None, metavar="E",
        help="Privacy-loss bound epsilon > 0 (for example 1). Required by private methods; "
        "refused by als.",
    )  # fmt: skip
    privacy.add_argument(
        "--delta", type=float, default=None, metavar="D",
        help="Failure probability delta in (0, 1), far below 1 / (number of users) (for "
        "example 1e-5). Required by private methods; refused by als.",
    )  # fmt: skip
    _add_model_options(parser)
    _add_input_options(parser)
    parser.set_defaults(
        handler=lambda args: run_guarded(f"{PROG} train", run_train, args), parser=parser
    )
    return parser


def run_train(args: argparse.Namespace) -> int:
    """Run ``userdp recommend train`` on parsed arguments; errors propagate to the guard."""
    start = time.perf_counter()
    _check_budget(None if args.epsilon is None else [args.epsilon], args.delta, [args.method])
    _check_rating_range(args)
    options = _model_options(args, [args.method])
    output = check_output_path(args.output, overwrite=args.overwrite)
    ratings, spec = _load(args.input, args)
    logger.info("Read %s.", ratings)
    rating_range = _rating_range(args, spec, [args.method])
    budget = None if args.epsilon is None else PrivacyBudget(args.epsilon, args.delta)
    model = MatrixFactorization(
        method=args.method,
        dim=args.dim,
        steps=args.steps,
        rating_range=rating_range,
        seed=args.seed,
        progress=_interactive(args.quiet),
        **options,
    )
    model.fit(_compact_users(ratings), budget=budget)
    with atomic_output(output, overwrite=args.overwrite) as tmp:
        model.save(tmp)
    logger.info("Wrote the model to %s.", output)
    if not args.quiet:
        print(_train_summary(model, ratings, output, time.perf_counter() - start), file=sys.stderr)
    return 0


def _train_summary(model: MatrixFactorization, r: Ratings, output: Path, seconds: float) -> str:
    prog = f"{PROG} train"
    b = model.budget_
    row = [
        model.method,
        "non-private" if b is None else f"{b.epsilon:g}",
        "-" if b is None else f"{b.delta:g}",
        str(r.n_users),
        str(r.n_items),
        str(r.n_ratings),
        str(model.dim),
        str(model.steps),
        f"{model.fit_seconds_:.2f}",
    ]
    header = ["method", "epsilon", "delta", "users", "items", "ratings", "dim", "steps", "seconds"]
    lo, hi = model.rating_range_
    return "\n".join(
        [
            (
                f"{prog}: wrote {output} in {seconds:.2f} s (training "
                f"{model.fit_seconds_:.2f} s; rating range {lo:g}..{hi:g}, center "
                f"{model.center_:.4g})."
            ),
            _format_table(header, [row], indent="  "),
            (
                f"{prog}: note: the user, item and rating counts are exact, for the operator "
                "only; they are not differentially private and are not part of the release."
            ),
        ]
    )


# -- evaluate -----------------------------------------------------------------------------------
EVALUATE_DESCRIPTION = f"""\
Score recommenders, in one of two ways:

  userdp recommend evaluate --model MODEL --history HIST --test TEST
      Score a saved model. Each test user's embedding is computed from the user's ratings in
      HIST (the billboard model); RMSE is over TEST's ratings, Recall@k ranks every item the
      user has not rated in HIST against the user's TEST items. Buckets are cut by the items'
      number of ratings in HIST. Default --metric: both.

  userdp recommend evaluate INPUT --protocol ml10m|ml20m --method M ... --epsilon E ...
      Split INPUT with a benchmark protocol, train every --method at every --epsilon (als
      once) and score each model on the protocol's test part.
      ml10m: random 80/10/10 split of the ratings (seed 1234); models train on the 80%, test
        users are projected from train + validation; RMSE on the test ratings.
      ml20m: ratings above 3.5 of users with at least 5 of them; 10% of those users (or 10,000
        on large data) are held out for testing, each with 80% of their ratings as history and
        20% as targets; Recall@k on the targets (seed 98765). Ratings become implicit feedback
        (1 = liked, rating range 0..1, center 0 unless --center is given). Models train on the
        10% most rated items (--top-items 0.1), chosen with the private counts the model
        releases anyway (the reference used exact counts, uncharged), with the implicit term
        on unrated items (--unobserved-weight 1).
      Default --metric: rmse for ml10m, recall for ml20m.

Every table also has the non-private baselines: the global mean of the training ratings
(RMSE) and the items ranked by their exact training counts (popularity, Recall). Sliced metrics
cut the items into {N_BUCKETS} equal-size buckets by number of training ratings: bucket0 holds
the least-rated items (the tail), bucket{N_BUCKETS - 1} the most-rated; each bucket's recall ranks
only that bucket's items.

The table goes to stdout (or --output), one row per model and metric: method, epsilon, delta,
metric, value, bucket0..bucket{N_BUCKETS - 1} and seconds (training and scoring). The metrics read
the test data in the clear: they are for evaluation, not for release.
"""


def _add_evaluate(commands: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(
        "evaluate",
        parents=[common_options()],
        help="Score a saved model, or train and score methods with a benchmark protocol.",
        description=EVALUATE_DESCRIPTION,
        epilog="examples:\n"
        "  userdp recommend evaluate --model model.npz --history train.csv --test test.csv\n"
        "  userdp recommend evaluate ml-100k.zip --protocol ml10m --method als,adadpals \\\n"
        "      --epsilon 1,5 --delta 1e-5 --output results.json\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "input", nargs="?", default=None, metavar="INPUT",
        help=INPUT_HELP + " Split with --protocol; not used with --model.",
    )  # fmt: skip
    saved = parser.add_argument_group("a saved model")
    saved.add_argument("--model", metavar="MODEL", help="A model written by 'train' (.npz).")
    saved.add_argument(
        "--history", metavar="HIST",
        help="Ratings the test users' embeddings are computed from, and that are excluded "
        "from their recommendations (a ratings file or MovieLens input, like INPUT).",
    )  # fmt: skip
    saved.add_argument(
        "--test", metavar="TEST", help="Held-out ratings to score (same kinds of input)."
    )
    proto = parser.add_argument_group("a protocol (train and evaluate in one go)")
    proto.add_argument(
        "--protocol", choices=tuple(_PROTOCOL_METRIC), default=None,
        help="How to split INPUT (see above). Required with INPUT.",
    )  # fmt: skip
    proto.add_argument(
        "--split-seed", type=non_negative_int, default=None, metavar="N",
        help="Seed of the protocol's split. Default: the protocol's (1234 for ml10m, 98765 "
        "for ml20m).",
    )  # fmt: skip
    proto.add_argument(
        "--method", type=_method_list, action="append", default=None, metavar="M[,M...]",
        help="Method to train; repeat the flag or give a comma-separated list. Default: "
        "adadpals.",
    )  # fmt: skip
    proto.add_argument(
        "--epsilon", type=_epsilon_list, action="append", default=None, metavar="E[,E...]",
        help="Epsilon to train each private method at; repeat the flag or give a list. "
        "Required by private methods.",
    )  # fmt: skip
    proto.add_argument(
        "--delta", type=float, default=None, metavar="D",
        help="Delta in (0, 1) of every private run, far below 1 / (number of users). "
        "Required by private methods.",
    )  # fmt: skip
    metrics = parser.add_argument_group("metrics and output")
    metrics.add_argument(
        "--metric", choices=("rmse", "recall", "both"), default=None,
        help="What to report. Default: the protocol's metric (rmse for ml10m, recall for "
        "ml20m), both with --model.",
    )  # fmt: skip
    metrics.add_argument(
        "--k", type=positive_int, default=20, metavar="K",
        help="Cut-off of Recall@k, overall and in every bucket. Default: %(default)s.",
    )  # fmt: skip
    metrics.add_argument(
        "-o", "--output", default=None, metavar="OUT",
        help="Write the results to OUT instead of stdout: .json gives a list of records, .csv "
        "a table with a header. Default: a table on stdout.",
    )  # fmt: skip
    metrics.add_argument(
        "--overwrite", action="store_true",
        help="Replace OUT if it exists. Default: refuse to overwrite an existing file.",
    )  # fmt: skip
    _add_model_options(parser)
    _add_input_options(parser)
    parser.set_defaults(
        handler=lambda args: run_guarded(f"{PROG} evaluate", run_evaluate, args), parser=parser
    )
    return parser


@dataclass
class _Row:
    method: str
    epsilon: float | None
    delta: float | None
    metric: str
    value: float
    buckets: list[float]
    seconds: float

    def cells(self) -> list[str]:
        private = self.epsilon is not None
        return [
            self.method,
            f"{self.epsilon:g}" if private else "non-private",
            f"{self.delta:g}" if private else "-",
            self.metric,
            _num(self.value),
            *(_num(v) for v in self.buckets),
            f"{self.seconds:.2f}",
        ]

    def record(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "method": self.method,
            "private": self.epsilon is not None,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "metric": self.metric,
            "value": _finite(self.value),
        }
        out.update({f"bucket{j}": _finite(v) for j, v in enumerate(self.buckets)})
        out["seconds"] = round(self.seconds, 4)
        return out


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


_HEADER = ["method", "epsilon", "delta", "metric", "value"]
_HEADER += [f"bucket{j}" for j in range(N_BUCKETS)] + ["seconds"]


@dataclass(frozen=True)
class _Task:
    """What every model is scored on; the three parts share their code books.

    ``history``: the test users' known ratings (their embeddings come from them; excluded from
    ranking); ``targets``: their held-out ratings; ``train``: what buckets and baselines use.
    """

    history: Ratings
    targets: Ratings
    train: Ratings
    metrics: tuple[str, ...]
    k: int


def _score_model(model: MatrixFactorization, task: _Task) -> list[tuple[str, float, list[float]]]:
    out = []
    buckets = frequency_buckets(task.train.item_counts(), N_BUCKETS)
    h, t = task.history, task.targets
    if "rmse" in task.metrics:
        pred = model.predict(h, t.users, h.item_values(t.items))
        sliced = sliced_rmse(t.items, t.values, pred, buckets, N_BUCKETS)
        out.append(("rmse", rmse(t.values, pred), list(sliced)))
    if "recall" in task.metrics:
        V = model.user_factors(h)
        codes = model.item_codes(h.item_labels)
        known = codes >= 0  # items the model has no embedding for are never recommended
        U = np.zeros((h.n_items, V.shape[1]))
        U[known] = model.item_factors_[codes[known]]

        def score(users: np.ndarray) -> np.ndarray:
            s = V[users] @ U.T
            s[:, ~known] = -np.inf
            return s

        out.append(_recall(score, task, buckets))
    return out


def _recall(score: Callable, task: _Task, buckets: np.ndarray) -> tuple[str, float, list[float]]:
    res = ranking_metrics_at_k(
        score, task.history, task.targets, task.k, buckets=buckets, n_buckets=N_BUCKETS
    )
    return f"recall@{task.k}", res["recall"], list(res["recall_by_bucket"])


def _baselines(task: _Task) -> list[_Row]:
    """The non-private references: global mean (RMSE) and popularity (Recall)."""
    rows = []
    buckets = frequency_buckets(task.train.item_counts(), N_BUCKETS)
    t = task.targets
    if "rmse" in task.metrics:
        started = time.perf_counter()
        pred = np.full(t.n_ratings, float(task.train.values.mean()))
        sliced = list(sliced_rmse(t.items, t.values, pred, buckets, N_BUCKETS))
        value = rmse(t.values, pred)
        seconds = time.perf_counter() - started
        rows.append(_Row("global-mean", None, None, "rmse", value, sliced, seconds))
    if "recall" in task.metrics:
        started = time.perf_counter()
        metric, value, sliced = _recall(popularity_scores(task.train), task, buckets)
        seconds = time.perf_counter() - started
        rows.append(_Row("popularity", None, None, metric, value, sliced, seconds))
    return rows


def run_evaluate(args: argparse.Namespace) -> int:
    """Run ``userdp recommend evaluate`` on parsed arguments; errors propagate to the guard."""
    start = time.perf_counter()
    output = _check_evaluate_output(args)
    if args.model is not None:
        rows, summary = _evaluate_saved(args)
    else:
        rows, summary = _evaluate_protocol(args)
    text = _format_table(_HEADER, [r.cells() for r in rows]) + "\n"
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        with atomic_output(output, overwrite=args.overwrite) as tmp:
            _write_results(rows, tmp, output.suffix.lower())
        logger.info("Wrote %d rows to %s.", len(rows), output)
    if not args.quiet:
        seconds = time.perf_counter() - start
        print(f"{PROG} evaluate: {summary} in {seconds:.2f} s.", file=sys.stderr)
        print(
            f"{PROG} evaluate: note: global-mean and popularity use exact training statistics: "
            "non-private references, not releases.",
            file=sys.stderr,
        )
    return 0


def _check_evaluate_output(args: argparse.Namespace) -> Path | None:
    if args.output is None or args.output == "-":
        return None
    output = check_output_path(args.output, overwrite=args.overwrite)
    if output.suffix.lower() not in _RESULT_SUFFIXES:
        raise InvalidParameterError(
            f"Cannot tell the format of {str(output)!r} from its name; end it in .json or .csv."
        )
    return output


def _write_results(rows: Sequence[_Row], path: Path, suffix: str) -> None:
    records = [r.record() for r in rows]
    with open(path, "w", encoding="utf-8", newline="") as f:
        if suffix == ".json":
            json.dump(records, f, indent=1)
            f.write("\n")
        else:
            writer = csv.DictWriter(f, fieldnames=list(records[0]))
            writer.writeheader()
            writer.writerows(records)


def _evaluate_saved(args: argparse.Namespace) -> tuple[list[_Row], str]:
    """``--model --history --test``: score one saved model."""
    wrong = [
        flag
        for flag, value in (
            ("INPUT", args.input),
            ("--protocol", args.protocol),
            ("--method", args.method),
            ("--epsilon", args.epsilon),
            ("--delta", args.delta),
            ("--split-seed", args.split_seed),
        )
        if value is not None
    ]
    if wrong:
        raise InvalidParameterError(
            f"{', '.join(wrong)} train new models and do not apply to --model; give either "
            "--model with --history and --test, or INPUT with --protocol."
        )
    missing = [f for f, v in (("--history", args.history), ("--test", args.test)) if v is None]
    if missing:
        raise InvalidParameterError(f"--model needs {' and '.join(missing)}.")
    ignored = _tuning_given(args) + [
        flag
        for flag, v in (("--rating-range", args.rating_range), ("--center", args.center),
                        ("--seed", args.seed))
        if v is not None
    ]  # fmt: skip
    if ignored:
        logger.warning("%s only apply to training; ignored with --model.", ", ".join(ignored))
    model = MatrixFactorization.load(args.model)
    history, targets = _aligned(_read_any(args.history, args), _read_any(args.test, args))
    metric = args.metric or "both"
    task = _Task(
        history=history,
        targets=targets,
        train=history,
        metrics=("rmse", "recall") if metric == "both" else (metric,),
        k=args.k,
    )
    started = time.perf_counter()
    scored = _score_model(model, task)
    seconds = time.perf_counter() - started
    b = model.budget_
    rows = [
        _Row(model.method, b and b.epsilon, b and b.delta, name, value, sliced, seconds)
        for name, value, sliced in scored
    ]
    rows += _baselines(task)
    summary = (
        f"scored {args.model} ({model.method}) on {targets.n_ratings} test ratings of "
        f"{len(np.unique(targets.users))} users"
    )
    return rows, summary


def _read_any(path: str, args: argparse.Namespace) -> pa.Table:
    spec = _movielens_spec(Path(path))
    if spec is not None:
        return load_movielens(path, name=spec.name).to_arrow()
    return _read_ratings_table(path, args)


def _aligned(history: pa.Table, test: pa.Table) -> tuple[Ratings, Ratings]:
    """Two rating tables as Ratings with shared code books (users and items of either)."""
    codes: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    labels: dict[str, pa.Array] = {}
    for name in ("user", "item"):
        h, t = history.column(name), test.column(name)
        if t.type != h.type:
            try:
                t = t.cast(h.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
                raise DataError(
                    f"The {name} ids of --test ({t.type}) cannot be matched to those of "
                    f"--history ({h.type})."
                ) from err
        both = pa.chunked_array(h.chunks + t.chunks, type=h.type)
        labels[name] = pc.unique(both)
        codes[name] = tuple(
            pc.index_in(c, value_set=labels[name]).to_numpy().astype(np.int64) for c in (h, t)
        )
    parts = []
    for j, table in enumerate((history, test)):
        if table.num_rows == 0:
            raise DataError(f"The {('--history', '--test')[j]} input has no ratings.")
        parts.append(
            Ratings.from_codes(
                codes["user"][j],
                codes["item"][j],
                table.column("rating").to_numpy(),
                n_users=len(labels["user"]),
                n_items=len(labels["item"]),
                user_labels=labels["user"],
                item_labels=labels["item"],
                keep_empty_users=True,
            )
        )
    return parts[0], parts[1]


def _evaluate_protocol(args: argparse.Namespace) -> tuple[list[_Row], str]:
    """INPUT ``--protocol``: split, train every (method, epsilon), score on the test part."""
    if args.input is None or args.protocol is None:
        raise InvalidParameterError(
            "Give either INPUT with --protocol ml10m|ml20m (train and evaluate), or --model "
            "with --history and --test (evaluate a saved model)."
        )
    stray = [f for f, v in (("--history", args.history), ("--test", args.test)) if v is not None]
    if stray:
        raise InvalidParameterError(f"{' and '.join(stray)} only apply with --model.")
    methods = _unique([m for group in (args.method or [["adadpals"]]) for m in group])
    epsilons = None if args.epsilon is None else _unique([e for g in args.epsilon for e in g])
    _check_budget(epsilons, args.delta, methods)
    _check_rating_range(args)
    options = _model_options(args, methods)
    ratings, spec = _load(args.input, args)
    logger.info("Read %s.", ratings)
    metric = args.metric or _PROTOCOL_METRIC[args.protocol]
    metrics = ("rmse", "recall") if metric == "both" else (metric,)
    if args.protocol == "ml20m" and "rmse" in metrics:
        raise InvalidParameterError(
            "--protocol ml20m is implicit feedback (liked or not) and has no RMSE; use "
            "--metric recall, or --protocol ml10m for RMSE."
        )
    train, task, rating_range = _protocol_task(args, ratings, spec, methods, metrics, options)
    runs = [(m, e) for m in methods for e in ((None,) if not _private(m) else epsilons)]
    progress = Progress(
        [f"{m} eps={e:g}" if e is not None else m for m, e in runs],
        enabled=_interactive(args.quiet),
    )
    rows: list[_Row] = []
    try:
        for (method, eps), stage in zip(runs, progress.stages, strict=True):
            with progress.stage(stage):
                started = time.perf_counter()
                budget = None if eps is None else PrivacyBudget(eps, args.delta)
                model = MatrixFactorization(
                    method=method,
                    dim=args.dim,
                    steps=args.steps,
                    rating_range=rating_range,
                    seed=args.seed,
                    **options,
                ).fit(train, budget=budget)
                scored = _score_model(model, task)
                seconds = time.perf_counter() - started
                delta = None if eps is None else args.delta
                rows += [_Row(method, eps, delta, n, v, s, seconds) for n, v, s in scored]
    finally:
        progress.close()
    rows += _baselines(task)
    summary = (
        f"{len(runs)} run{'s' if len(runs) != 1 else ''} on the {args.protocol} split of "
        f"{args.input} ({train.n_ratings} training ratings, {task.targets.n_ratings} test "
        f"ratings of {len(np.unique(task.targets.users))} users)"
    )
    return rows, summary


def _protocol_task(
    args: argparse.Namespace,
    ratings: Ratings,
    spec: MovieLensSpec | None,
    methods: Sequence[str],
    metrics: tuple[str, ...],
    options: dict[str, Any],
) -> tuple[Ratings, _Task, tuple[float, float] | None]:
    """The training part, the scoring task and the rating range of a protocol split."""
    if args.protocol == "ml10m":
        kw = {} if args.split_seed is None else {"seed": args.split_seed}
        split = ml10m_split(ratings, **kw)
        train = split.train
        history, targets = _union(split.train, split.validation), split.test
        rating_range = _rating_range(args, spec, methods)
    else:
        kw = {} if args.split_seed is None else {"seed": args.split_seed}
        held = ml20m_split(ratings, **kw)
        train = _implicit(held.train)
        history, targets = _implicit(held.test_history), _implicit(held.test_targets)
        if args.rating_range is not None:
            logger.warning("--rating-range does not apply to ml20m (implicit 0..1); ignored.")
        rating_range = (0.0, 1.0)
        options.setdefault("center", 0.0)
        options.setdefault("top_items", 0.1)
        options.setdefault("unobserved_weight", 1.0)
    if train.n_ratings == 0 or targets.n_ratings == 0:
        raise DataError(
            f"The {args.protocol} split of {args.input} leaves no training or test data."
        )
    task = _Task(
        history=history,
        targets=targets,
        train=train,
        metrics=metrics,
        k=args.k,
    )
    return _compact_users(train), task, rating_range


# -- neighbors ----------------------------------------------------------------------------------
NEIGHBORS_DESCRIPTION = """\
Print the nearest items of each ITEM in a saved model's item embeddings, best first, as
tab-separated lines under a header: item, rank, neighbor, score (and title with --movies).
The embeddings are released values: this reads no private data.
"""


def _add_neighbors(commands: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(
        "neighbors",
        parents=[common_options()],
        help="Print the nearest items of items in a saved model.",
        description=NEIGHBORS_DESCRIPTION,
        epilog="example:\n  userdp recommend neighbors --model model.npz 50 181 --n 5 "
        "--movies ml-100k.zip\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "items", nargs="+", metavar="ITEM",
        help="Item ids as in the training data (converted to the model's id type).",
    )  # fmt: skip
    parser.add_argument(
        "--model", required=True, metavar="MODEL", help="A model written by 'train'. Required."
    )
    parser.add_argument(
        "--n", type=positive_int, default=10, metavar="N",
        help="Neighbours per item. Default: %(default)s.",
    )  # fmt: skip
    parser.add_argument(
        "--metric", choices=("cosine", "dot"), default="cosine",
        help="Similarity: cosine of the embeddings, or their inner product (which favours "
        "items with large embeddings). Default: %(default)s.",
    )  # fmt: skip
    parser.add_argument(
        "--movies", default=None, metavar="SOURCE",
        help="Add titles from a MovieLens catalogue: a MovieLens folder or .zip, or its "
        "movies file (u.item, movies.dat or movies.csv, optionally .gz). Default: no titles.",
    )  # fmt: skip
    parser.set_defaults(
        handler=lambda args: run_guarded(f"{PROG} neighbors", run_neighbors, args), parser=parser
    )
    return parser


def _parse_ids(texts: Sequence[str], type_: pa.DataType) -> list[Any]:
    if pa.types.is_integer(type_):
        convert: Callable[[str], Any] = int
    elif pa.types.is_floating(type_):
        convert = float
    else:
        return list(texts)
    out = []
    for text in texts:
        try:
            out.append(convert(text))
        except ValueError:
            raise InvalidParameterError(
                f"Unknown item id {text!r}: the model's item ids are {type_} numbers."
            ) from None
    return out


def _titles(source: str) -> dict[str, str]:
    """Movie id (as text) -> title, from a MovieLens folder, zip or movies file."""
    path = Path(source)
    if not path.exists():
        raise DataError(f"--movies: {source!r} does not exist.")
    if path.is_dir() or zipfile.is_zipfile(path):
        table = load_movies(source)
    else:
        base = path.name.lower().removesuffix(".gz")
        names = [s.name for s in MOVIELENS.values() if s.movies_file == base]
        if not names:
            raise InvalidParameterError(
                f"--movies: {source!r} is not a MovieLens folder, zip or movies file (u.item, "
                "movies.dat, movies.csv)."
            )
        table, errors = None, []
        for name in [None, *names]:  # the folder's own version first, then the file's kinds
            try:
                table = load_movies(path.parent, name=name)
                break
            except (DataError, InvalidParameterError) as err:
                errors.append(err)
        if table is None:
            raise errors[-1]
    ids = [str(v) for v in table.column("item").to_pylist()]
    return dict(zip(ids, table.column("title").to_pylist(), strict=True))


def run_neighbors(args: argparse.Namespace) -> int:
    """Run ``userdp recommend neighbors`` on parsed arguments; errors propagate to the guard."""
    model = MatrixFactorization.load(args.model)
    titles = _titles(args.movies) if args.movies is not None else None
    ids = _parse_ids(args.items, model.item_labels_.type)
    codes = model.item_codes(pa.array(ids, type=model.item_labels_.type))
    unknown = [text for text, c in zip(args.items, codes, strict=True) if c < 0]
    if unknown:
        shown = ", ".join(repr(u) for u in unknown[:5])
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        raise InvalidParameterError(
            f"Unknown item id(s) {shown}{more}: the model has no embedding for them."
        )
    neighbours, scores = model.similar_items(ids, N=args.n, metric=args.metric)
    header = ["item", "rank", "neighbor", "score"] + (["title"] if titles is not None else [])
    lines = ["\t".join(header)]
    for text, found, row in zip(args.items, neighbours, scores, strict=True):
        for rank, (other, score) in enumerate(zip(found.to_pylist(), row, strict=True), 1):
            cells = [text, str(rank), str(other), f"{score:.4f}"]
            if titles is not None:
                cells.append(titles.get(str(other), ""))
            lines.append("\t".join(cells))
    sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()
    return 0


# -- registration -------------------------------------------------------------------------------
def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``recommend`` and its subcommands on the ``userdp`` subcommand parsers."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "recommend",
        help="Train, evaluate and query private matrix-factorization recommenders.",
        description=DESCRIPTION,
        epilog=EPILOG + "\nRun 'userdp recommend COMMAND --help' for the options of a command.\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(title="commands", dest="recommend_command", metavar="COMMAND")
    commands.required = True
    _add_train(commands)
    _add_evaluate(commands)
    _add_neighbors(commands)
    parser.set_defaults(parser=parser)
    return parser
