"""``userdp recommend``: train, evaluate and query private matrix-factorization recommenders.

Three subcommands over :class:`~userdp.recommend.MatrixFactorization` and, for the ``am-*``
methods, :class:`~userdp.recommend.PublicFeatureRecommender` (an item encoder on public item
features, trained by AM-SSP or DP-SGD):

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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from scipy import sparse

from userdp.data.features import movielens_item_features, movielens_user_features
from userdp.data.io import FORMATS, read_table, to_float64
from userdp.data.movielens import (
    MOVIELENS,
    MovieLensSpec,
    load_movielens,
    load_movies,
    movielens_version,
)
from userdp.data.ratings import Ratings
from userdp.exceptions import DataError, InvalidParameterError
from userdp.partition import ALGORITHMS as SELECTION_ALGORITHMS
from userdp.partition import select_partitions
from userdp.privacy.budget import PrivacyBudget
from userdp.recommend import (
    METHODS,
    FeatureFamily,
    IdEncoder,
    ItemSet,
    MatrixFactorization,
    PublicFeatureEncoder,
    PublicFeatureRecommender,
    RecommenderModel,
    frequency_buckets,
    ml10m_split,
    ml20m_split,
    popularity_scores,
    ranking_metrics_at_k,
    rmse,
    sliced_rmse,
)
from userdp.recommend import public as _public

from .options import (
    Progress,
    atomic_output,
    check_output_path,
    common_options,
    delimiter,
    non_negative_int,
    positive_int,
    report_duplicates,
    run_guarded,
)

__all__ = ["add_parser", "run_evaluate", "run_neighbors", "run_train"]

logger = logging.getLogger("userdp.cli")

PROG = "userdp recommend"
N_BUCKETS = 5
_PROTOCOL_METRIC = {"ml10m": "rmse", "ml20m": "recall"}
_RESULT_SUFFIXES = (".json", ".csv")

#: ``--method`` names of the public-feature recommender and the variant each trains.
PUBLIC_METHODS = {
    "am-ssp": "ssp2",
    "am-ssp1": "ssp1",
    "am-ssp-minibatch": "minibatch",
    "am-dpsgd": "dpsgd",
}
ALL_METHODS = (*METHODS, *PUBLIC_METHODS)
#: ``--features`` names: MovieLens families (from INPUT) and the identity family ``id``.
FEATURES = ("genres", "year", "decade", "tags", "genome", "id")
_DEFAULT_FEATURES = ("genres", "year", "id")

DESCRIPTION = """\
Train, evaluate and query recommenders built by matrix factorization under user-level
(epsilon, delta)-differential privacy (Krichene et al. 2023): only the item embeddings, a
private centring value and private item counts are released; a user's embedding is computed
from the released items and the user's own history. The am-* methods embed each item with an
encoder of its public features (genres, year, ...; Krichene et al. 2023b), trained privately.
"""

EPILOG = """\
examples:
  userdp recommend train ml-100k.zip --epsilon 1 --delta 1e-5 --output model.npz
  userdp recommend train ml-100k.zip --method am-ssp --features genres,year,id \\
      --epsilon 1 --delta 1e-5 --output am-ssp.npz
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
        if name not in ALL_METHODS:
            raise argparse.ArgumentTypeError(
                f"invalid choice: {name!r} (choose from {', '.join(ALL_METHODS)})"
            )
    if not names:
        raise argparse.ArgumentTypeError("expected one or more method names")
    return names


def _feature_list(text: str) -> tuple[str, ...]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    for name in names:
        if name not in FEATURES:
            raise argparse.ArgumentTypeError(
                f"invalid feature: {name!r} (choose from {', '.join(FEATURES)})"
            )
    if not names:
        raise argparse.ArgumentTypeError("expected one or more feature names")
    return tuple(_unique(names))


def _epsilon_list(text: str) -> list[float]:
    values = [_positive_float(t.strip()) for t in text.split(",") if t.strip()]
    if not values:
        raise argparse.ArgumentTypeError("expected one or more numbers > 0")
    return values


def _unique(values: Sequence[Any]) -> list[Any]:
    return list(dict.fromkeys(values))


# -- options shared by train and evaluate -------------------------------------------------------
def _keyword_defaults(cls: type) -> dict[str, Any]:
    return {
        name: p.default
        for name, p in inspect.signature(cls).parameters.items()
        if p.default is not inspect.Parameter.empty
    }


#: MatrixFactorization's keyword defaults, shown in --help (so the help follows the library).
_DEFAULTS = _keyword_defaults(MatrixFactorization)
#: PublicFeatureRecommender's keyword defaults (the am-* methods).
_PUBLIC_DEFAULTS = _keyword_defaults(PublicFeatureRecommender)
#: Its keywords the CLI sets itself (not tuning flags).
_PUBLIC_OWN = (
    "encoder", "items", "variant", "steps", "rating_range", "center", "seed", "progress",
)  # fmt: skip
_ALL_VARIANTS = lambda v: True  # noqa: E731
_AM = "the am-* methods"
_MF = "the matrix-factorization methods, not am-*"


@dataclass(frozen=True)
class _Tuning:
    """A model keyword exposed as ``--flag``; None (unset) keeps its default.

    ``applies``/``scope`` say which MatrixFactorization methods read it, ``public``/
    ``public_scope`` which PublicFeatureRecommender variants (am-* methods) do.
    """

    dest: str
    type: Callable[[str], Any]
    applies: Callable[[str], bool]
    scope: str
    help: str
    metavar: str = "X"
    public: Callable[[str], bool] | None = None
    public_scope: str = ""


def _private(m: str) -> bool:
    return m != "als"


def _ssp(m: str) -> bool:
    return m in ("dpals-uniform", "dpals-tail", "adadpals")


def _gd(m: str) -> bool:
    return "sgd" in m


def _never(m: str) -> bool:
    return False


def _ssp_variant(v: str) -> bool:
    return v in ("ssp2", "ssp1", "minibatch")


def _new_variant(v: str) -> bool:
    return v == "dpsgd"


_KNOWN_TUNING = (
    _Tuning("mu", _non_negative_float, lambda m: m.startswith("ada"), "adadpals and adadpsgd",
            "Exponent of the adaptive weights n_hat^-mu (1/4 to 1/2 work best).",
            public=_ALL_VARIANTS, public_scope=_AM),
    _Tuning("sample_size", positive_int, lambda m: m.endswith(("-uniform", "-tail")),
            "the uniform and tail methods", "Items sampled per user (k).", "K"),
    _Tuning("count_sample", positive_int, _private, "private methods",
            "At most this many items per user enter the private item counts and mean.", "K",
            public=_ALL_VARIANTS),
    _Tuning("count_fraction", _fraction, _private, "private methods",
            "Share of the budget spent on the private item counts.", public=_ALL_VARIANTS),
    _Tuning("center_fraction", _fraction, _private, "private methods",
            "Share of the budget spent on the private mean (with --center private-mean).",
            public=_ALL_VARIANTS),
    _Tuning("moment_share", _fraction, _ssp, "the dpals methods",
            "Share of each step's budget spent on the moments b (the rest on the Grams A).",
            public=_ssp_variant, public_scope="the am-ssp methods"),
    _Tuning("reg", _positive_float, lambda m: True, "every method",
            "Frequency-scaled ridge regularisation.", public=_ALL_VARIANTS),
    _Tuning("noise_reg", _non_negative_float, _ssp, "the dpals methods",
            "Extra item ridge in units of the Gram noise, for stable tail solves."),
    _Tuning("max_norm", _positive_float, _private, "private methods",
            "User embeddings are clipped to this norm before the item update.",
            public=_ALL_VARIANTS),
    _Tuning("learning_rate", _positive_float, _gd, "the dpsgd methods",
            "Step size of the noisy gradient descent (am-* methods: of the encoder's Adam "
            "steps).", public=_ALL_VARIANTS, public_scope=_AM),
    _Tuning("step_offset", _positive_float, _gd, "the dpsgd methods",
            "Item i's step is learning-rate / (step-offset + n_hat_i)."),
    _Tuning("sgd_steps", positive_int, _gd, "the dpsgd methods",
            "Gradient steps per alternating step.", "N"),
    _Tuning("clip_norm", _positive_float, _gd, "the dpsgd methods",
            "User-level clipping norm of each user's whole gradient."),
    _Tuning("inner_steps", positive_int, _never, "",
            "Gradient steps on the item encoder per alternating step.", "N",
            public=_ALL_VARIANTS, public_scope=_AM),
    _Tuning("batch_items", positive_int, _never, "",
            "Items per inner step of mini-batch SSP.", "N",
            public=lambda v: v == "minibatch", public_scope="am-ssp-minibatch"),
    _Tuning("unobserved_weight", _non_negative_float, lambda m: True, _MF,
            "Weight of the implicit-feedback term on unrated items (ml20m default: 1)."),
    _Tuning("top_items", _fraction, lambda m: True, _MF,
            "Train only on this fraction of items with the largest private counts "
            "(ml20m default: 0.1)."),
    _Tuning("min_item_count", _min_count, lambda m: True, f"{_MF} ('auto': dpals)",
            "Train only on items whose private count reaches this; 'auto' puts the cutoff "
            "where an item's noise starts to drown its signal (better at small epsilon).",
            "N|auto"),
)  # fmt: skip


def _generic_tuning() -> list[_Tuning]:
    """Flags for PublicFeatureRecommender keywords the CLI does not describe yet.

    Every keyword the recommender had when this module was written is in ``_KNOWN_TUNING``;
    later ones came with the dpsgd variant, so they are offered for am-dpsgd.
    """
    known = {t.dest for t in _KNOWN_TUNING} | set(_PUBLIC_OWN)
    out = []
    for name, default in _PUBLIC_DEFAULTS.items():
        if name in known or isinstance(default, bool):
            continue
        if isinstance(default, int):
            type_: Callable[[str], Any] = non_negative_int
        elif isinstance(default, float):
            type_ = _non_negative_float
        else:
            continue
        metavar = "N" if type_ is non_negative_int else "X"
        help_ = f"PublicFeatureRecommender's {name!r}."
        out.append(_Tuning(name, type_, _never, "", help_, metavar, _new_variant, "am-dpsgd"))
    return out


def _complete(t: _Tuning) -> _Tuning | None:
    """``t`` restricted to the keywords the two models really have (None: neither has it)."""
    mf = t.dest in _DEFAULTS
    pub = t.dest in _PUBLIC_DEFAULTS and t.dest not in _PUBLIC_OWN
    if pub and t.public is None:  # a MatrixFactorization keyword the dpsgd variant also took
        t = replace(t, public=_new_variant, public_scope="am-dpsgd")
    if not pub and t.public is not None:
        t = replace(t, public=None, public_scope="")
    if not mf:
        t = replace(t, applies=_never, scope="")
    return t if (mf or pub) else None


_TUNING = tuple(
    c for c in (_complete(t) for t in (*_KNOWN_TUNING, *_generic_tuning())) if c is not None
)


def _applies(t: _Tuning, method: str) -> bool:
    if method in PUBLIC_METHODS:
        return t.public is not None and t.public(PUBLIC_METHODS[method])
    return t.applies(method)


def _scope(t: _Tuning, methods: Sequence[str] | None = None) -> str:
    """Who reads ``t``; with ``methods`` all MatrixFactorization ones, only its scope."""
    if methods is not None and not any(m in PUBLIC_METHODS for m in methods) and t.scope:
        return t.scope
    parts = [p for p in (t.scope, t.public_scope) if p]
    return ", and ".join(parts)


def _default_text(t: _Tuning) -> str:
    def show(value: Any) -> str:
        return "none" if value is None else f"{value:g}"

    mf, pub = _DEFAULTS.get(t.dest, inspect.Parameter.empty), _PUBLIC_DEFAULTS.get(t.dest)
    if mf is inspect.Parameter.empty:
        return show(pub)
    if t.public is None or pub == mf:
        return show(mf)
    return f"{show(mf)} ({show(pub)} for {t.public_scope})"


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
    data.add_argument(
        "--delimiter", type=delimiter, default=None, metavar="CHAR",
        help="Field separator of CSV/TSV ratings files, one character or 'tab'. Default: ',' "
        "for CSV, tab for TSV.",
    )  # fmt: skip


def _add_model_options(parser: argparse.ArgumentParser) -> None:
    model = parser.add_argument_group("model")
    model.add_argument(
        "--dim", type=positive_int, default=_DEFAULTS["dim"], metavar="N",
        help="Embedding dimension (for the am-* methods: the item encoder's output). "
        "Default: %(default)s.",
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
    public = parser.add_argument_group(
        "public item features (the am-* methods)",
        "The am-* methods embed every item with an encoder of its public features, trained\n"
        "privately on the ratings: only the ratings are protected, so the features must be\n"
        "public (never derived from the private ratings).",
    )
    public.add_argument(
        "--features", type=_feature_list, default=None, metavar="F[,F...]",
        help="Feature families of the item encoder, from " + ", ".join(FEATURES) + ". "
        "genres, year, decade (release year by decade), tags (user-written, treated as "
        "public because GroupLens publishes them) and genome (the Tag Genome of ml-20m and "
        "ml-latest, relevance >= 0.5, derived from user data and likewise published) are read "
        "from MovieLens INPUT; for other "
        "input they stand for the family of --item-features. id adds one value per item "
        "(a free item embedding); --features id alone is the id-only model. Default: "
        + ",".join(_DEFAULT_FEATURES) + ".",
    )  # fmt: skip
    public.add_argument(
        "--item-features", default=None, metavar="FILE",
        help="A public feature table (CSV, TSV, Parquet or JSON Lines) with columns item and "
        "feature, one row per (item, feature value), and an optional weight column (default "
        "1); it becomes one family named after the file. Needed for a ratings-file INPUT "
        "unless --features id. Default: none.",
    )  # fmt: skip
    public.add_argument(
        "--family-dim", type=positive_int, default=None, metavar="N",
        help="Embedding dimension of each feature family inside the encoder. Default: --dim.",
    )  # fmt: skip
    public.add_argument(
        "--encoder-seed", type=non_negative_int, default=None, metavar="N",
        help="Seed of the encoder's initialisation; it depends on no data, so any fixed value "
        "is safe. Default: 0.",
    )  # fmt: skip
    tuning = parser.add_argument_group("tuning (each applies to some methods only)")
    for t in _TUNING:
        tuning.add_argument(
            "--" + t.dest.replace("_", "-"),
            type=t.type,
            default=None,
            metavar=t.metavar,
            help=f"{t.help} For {_scope(t)}. Default: {_default_text(t)}.",
        )
    parser.add_argument(
        "--seed",
        type=non_negative_int,
        default=None,
        metavar="N",
        help="Seed the noise, for tests and reproducible runs only: a model trained with a "
        "known seed offers no privacy. Default: fresh OS entropy.",
    )


#: The --flags of the public-feature group, for warnings when no am-* method reads them.
_PUBLIC_FLAGS = ("features", "item_features", "family_dim", "encoder_seed")


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _tuning_given(args: argparse.Namespace) -> list[str]:
    dests = [t.dest for t in _TUNING] + list(_PUBLIC_FLAGS)
    return [_flag(d) for d in dests if getattr(args, d) is not None]


def _model_options(args: argparse.Namespace, methods: Sequence[str]) -> dict[str, Any]:
    """Model keywords set on the command line; warn about the inapplicable."""
    options: dict[str, Any] = {}
    for t in _TUNING:
        value = getattr(args, t.dest)
        if value is None:
            continue
        if any(_applies(t, m) for m in methods):
            options[t.dest] = value  # methods it does not apply to never read it
        else:
            logger.warning("%s only applies to %s; ignored.", _flag(t.dest), _scope(t, methods))
    if not any(m in PUBLIC_METHODS for m in methods):
        given = [_flag(d) for d in _PUBLIC_FLAGS if getattr(args, d) is not None]
        if given:
            logger.warning("%s only apply to %s; ignored.", ", ".join(given), _AM)
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
    table = read_table(path, columns=cols, format=args.format, delimiter=args.delimiter)
    for col in cols:
        if col not in table.column_names:
            raise DataError(
                f"{path}: column {col!r} not found; the input has columns "
                f"{table.column_names!r}. Name the columns with --user-column, --item-column "
                "and --rating-column."
            )
    rating = table.column(args.rating_column)
    if rating.type != pa.float64():  # names the row, not the value (issue 17)
        rating = to_float64(rating, args.rating_column, path)
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
    ratings = Ratings.from_table(_read_ratings_table(path, args))
    report_duplicates(ratings.duplicates_dropped, "(user, item) ratings")
    return ratings, None


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


# -- public item features (the am-* methods) ----------------------------------------------------
def _public_variants() -> set[str]:
    """The PublicFeatureRecommender variants this userdp has."""
    return set(getattr(_public, "SSP_VARIANTS", ())) | set(getattr(_public, "VARIANTS", ()))


def _check_public(
    args: argparse.Namespace, methods: Sequence[str], spec: MovieLensSpec | None
) -> None:
    """Before reading data: the am-* methods' variants and a source for their features."""
    public = [m for m in methods if m in PUBLIC_METHODS]
    if not public:
        return
    have = _public_variants()
    for m in public:
        if PUBLIC_METHODS[m] not in have:
            raise InvalidParameterError(
                f"--method {m} needs the PublicFeatureRecommender variant "
                f"{PUBLIC_METHODS[m]!r}, which this userdp does not have (it has "
                f"{', '.join(sorted(have))})."
            )
    features = args.features or _DEFAULT_FEATURES
    named = [f for f in features if f != "id"]
    if named and spec is None and args.item_features is None and Path(args.input).exists():
        default = "" if args.features is not None else " (the default)"
        raise InvalidParameterError(
            f"--features {','.join(features)}{default} needs MovieLens INPUT or a feature "
            f"table: {args.input!r} is a ratings file, so name its public item features with "
            "--item-features FILE (columns item, feature and an optional weight), or pass "
            "--features id for the id-only model."
        )
    if "tags" in named and spec is not None and spec.tags_file is None:
        with_tags = ", ".join(s.name for s in MOVIELENS.values() if s.tags_file)
        raise InvalidParameterError(
            f"--features tags: MovieLens {spec.name} has no tags (only {with_tags} have); "
            "drop tags from --features."
        )
    if "tags" in named and spec is not None:
        logger.warning(
            "--features tags: MovieLens tags are written by users; they are treated as public "
            "item features (GroupLens publishes them), so the privacy guarantee covers the "
            "ratings, not who tagged what."
        )
    if "genome" in named and spec is not None and spec.name not in ("ml-20m", "ml-latest"):
        raise InvalidParameterError(
            f"--features genome: MovieLens {spec.name} has no Tag Genome (only ml-20m and "
            "ml-latest have one); drop genome from --features."
        )
    if args.family_dim is not None and list(features) == ["id"] and args.item_features is None:
        logger.warning("--family-dim does not apply to --features id (no feature families).")


def _file_family(path: str, labels: Any, n_items: int) -> tuple[str, sparse.csr_matrix]:
    """``--item-features FILE`` as one family: a column per distinct feature string.

    Item ids are compared as text (a CSV reads them as strings); rows of items absent from the
    ratings are dropped, and items without a row get an empty one.
    """
    where = f"--item-features {path}"
    table = read_table(path, columns=("item", "feature"))
    for col in ("item", "feature"):
        if col not in table.column_names:
            raise DataError(
                f"{where}: column {col!r} not found; the file has columns "
                f"{table.column_names!r} (needed: item, feature and an optional weight)."
            )
    cols = ("item", "feature", "weight") if "weight" in table.column_names else ("item", "feature")
    for col in cols:
        if table.column(col).null_count:
            raise DataError(f"{where}: column {col!r} has empty values.")
    if isinstance(labels, pa.ChunkedArray):
        labels = labels.combine_chunks()
    try:
        items = table.column("item").cast(pa.string())
        codes = pc.index_in(items, value_set=labels.cast(pa.string()))
        feature = table.column("feature").cast(pa.string())
        weight = (
            table.column("weight").cast(pa.float64()).to_numpy()
            if "weight" in cols
            else np.ones(table.num_rows)
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
        raise DataError(f"{where}: {str(err).splitlines()[0]}") from err
    codes = pc.fill_null(codes, -1).to_numpy().astype(np.int64)
    keep = codes >= 0
    if not keep.any():
        raise DataError(
            f"{where}: no row names an item of the ratings (item ids are compared as text)."
        )
    feature = feature.filter(pa.array(keep))
    vocab = pc.unique(feature)
    vocab = vocab.take(pc.array_sort_indices(vocab))
    col = pc.index_in(feature, value_set=vocab).to_numpy().astype(np.int64)
    matrix = sparse.coo_matrix(
        (weight[keep], (codes[keep], col)), shape=(n_items, len(vocab))
    ).tocsr()
    return Path(path).name.split(".")[0] or "file", matrix


def _item_families(
    args: argparse.Namespace, spec: MovieLensSpec | None, ratings: Ratings
) -> list[FeatureFamily]:
    """The encoder's feature families, rows aligned to ``ratings.item_labels``."""
    features = args.features or _DEFAULT_FEATURES
    labels, n = ratings.item_labels, ratings.n_items
    named = [f for f in features if f != "id"]
    built: dict[str, Any] = {}
    if named and spec is not None:
        base = [f for f in named if f in ("genres", "year")]
        if base or "tags" in named or "genome" in named:
            # tags=True / genome=True acknowledge that user-derived data are treated as public.
            got = movielens_item_features(
                args.input, labels, name=spec.name, families=base or ["genres"],
                tags="tags" in named, genome="genome" in named,
            )  # fmt: skip
            built.update({f.name: f.matrix for f in got})
        if "decade" in named:
            (decade,) = movielens_item_features(
                args.input, labels, name=spec.name, families=["year"], year_buckets="decade"
            )
            built["decade"] = decade.matrix
    parts = [(f, built[f]) for f in named if f in built]
    if args.item_features is not None:
        name, matrix = _file_family(args.item_features, labels, n)
        taken = {p[0] for p in parts} | {"id"}
        parts.append((name if name not in taken else f"{name}-file", matrix))
    if "id" in features:
        parts.append(("id", sparse.identity(n, format="csr")))
    families = []
    for name, matrix in parts:
        if matrix.shape[1] == 0 or matrix.nnz == 0:
            logger.warning("The feature family %r has no value for any item; left out.", name)
        else:
            families.append(FeatureFamily(name, matrix))
    if not families:
        raise DataError(
            f"--features {','.join(features)}: every family is empty for the items of "
            f"{args.input!r}; add id or another family."
        )
    for f in families:
        logger.info("Feature family %r: %d values, %d entries.", f.name, f.n_values, f.matrix.nnz)
    return families


def _encoder(args: argparse.Namespace, families: Sequence[FeatureFamily], n_items: int) -> Any:
    """IdEncoder for the id family alone, else the PublicFeatureEncoder of the families."""
    seed = 0 if args.encoder_seed is None else args.encoder_seed
    if [f.name for f in families] == ["id"] and args.item_features is None:
        return IdEncoder(n_items, args.dim, seed=seed)
    return PublicFeatureEncoder(families, args.dim, family_dim=args.family_dim, seed=seed)


def _describe_encoder(encoder: Any) -> str:
    if isinstance(encoder, IdEncoder):
        return f"id-only encoder ({encoder.n_items} item embeddings)"
    parts = ", ".join(f"{f.name} ({f.n_values})" for f in encoder.families)
    return f"encoder on {parts} with family dimension {encoder.family_dim}"


def _budget_keywords(budget: PrivacyBudget | None) -> dict[str, float]:
    """The recommenders' ``epsilon``/``delta`` keywords of a budget (none: not private)."""
    return {} if budget is None else {"epsilon": budget.epsilon, "delta": budget.delta}


def _fit_public(
    method: str,
    encoder: Any,
    train: Ratings,
    budget: PrivacyBudget | None,
    rating_range: tuple[float, float] | None,
    args: argparse.Namespace,
    options: dict[str, Any],
    *,
    items: Any = None,
    user_features: Any = None,
    progress: bool = False,
) -> PublicFeatureRecommender:
    """Train an am-* method; its release is ``model_`` (a RecommenderModel, with the released
    user-feature prior when ``user_features`` are given)."""
    model = PublicFeatureRecommender(
        encoder=encoder,
        items=items,
        variant=PUBLIC_METHODS[method],
        steps=args.steps,
        rating_range=rating_range,
        seed=args.seed,
        progress=progress,
        **_budget_keywords(budget),
        **{k: v for k, v in options.items() if k in _PUBLIC_DEFAULTS},
    ).fit(train, user_features=user_features)
    if not np.all(np.isfinite(model.item_factors_)):
        raise DataError(f"{method} diverged (non-finite item embeddings); lower --learning-rate.")
    return model


def _check_user_features(args: argparse.Namespace, spec: MovieLensSpec | None) -> None:
    """Before reading data: --user-features needs an am-* method and ml-100k or ml-1m."""
    if not args.user_features:
        return
    if args.method not in PUBLIC_METHODS:
        raise InvalidParameterError(
            f"--user-features applies to the am-* methods ({', '.join(PUBLIC_METHODS)}); got "
            f"--method {args.method}."
        )
    if spec is None or spec.name not in ("ml-100k", "ml-1m"):
        raise InvalidParameterError(
            "--user-features reads MovieLens' user file: INPUT must be ml-100k or ml-1m (the "
            "versions with age, gender and occupation)."
        )


# -- the item set -------------------------------------------------------------------------------
def _read_catalogue(path: str, item_type: pa.DataType) -> pa.Array:
    """``--items FILE``: one item id per line (.txt, as ``userdp select`` writes), or a table
    with an ``item`` column. Ids are matched to the ratings' id type when they convert."""
    where = f"--items {path}"
    if Path(path).suffix.lower() == ".txt":
        try:
            with open(path, encoding="utf-8") as f:
                ids = pa.array([line.rstrip("\r\n") for line in f if line.strip()])
        except (OSError, UnicodeDecodeError) as err:
            raise DataError(f"{where}: cannot read the file ({type(err).__name__}).") from err
    else:
        table = read_table(path, columns=("item", "item"))
        if "item" not in table.column_names:
            raise DataError(
                f"{where}: column 'item' not found; the file has columns "
                f"{table.column_names!r} (or give a .txt file with one item id per line)."
            )
        ids = table.column("item").combine_chunks()
    if len(ids) == 0:
        raise DataError(f"{where}: the catalogue is empty.")
    if ids.type != item_type:
        try:
            ids = ids.cast(item_type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass  # compared as given; unmatched ratings are dropped
    return pc.unique(ids)


def _item_set(
    args: argparse.Namespace, ratings: Ratings, budget: PrivacyBudget | None
) -> tuple[ItemSet | None, PrivacyBudget | None]:
    """The item set of ``train`` and the budget left for the model.

    ``--items FILE``: a public catalogue, free. Otherwise, for private methods: partition
    selection on the (user, item) pairs with ``--selection-fraction`` of epsilon and delta
    (the CLI may use two capabilities; the recommender itself never imports partition). The
    non-private als trains on the data's items.
    """
    if args.items is not None:
        catalogue = ItemSet.public(_read_catalogue(args.items, ratings.item_labels.type))
        if ratings.restrict_items(catalogue.labels)[0].n_ratings == 0:
            raise DataError(
                f"--items {args.items}: no rating names an item of the catalogue (item ids are "
                f"compared as {catalogue.labels.type}); check the ids and --item-column."
            )
        return catalogue, budget
    if budget is None:
        return None, None
    f = args.selection_fraction
    selection_budget, model_budget = budget.split([f, 1.0 - f])
    pairs = (ratings.users, ratings.item_labels.take(pa.array(ratings.items)))
    # Basic composition keeps the selection's (epsilon, delta) a fixed share of the budget, as
    # the model's calibration assumes (the tight default would spend less than asked overall).
    tight = "composition" in SELECTION_ALGORITHMS[args.selection_algorithm].options
    result = select_partitions(
        pairs,
        epsilon=selection_budget.epsilon,
        delta=selection_budget.delta,
        algorithm=args.selection_algorithm,
        seed=args.seed,
        **({"composition": "basic"} if tight else {}),
    )
    logger.info(
        "Selected %d items privately (%s, epsilon %.4g, delta %.3g).",
        len(result), args.selection_algorithm, selection_budget.epsilon, selection_budget.delta,
    )  # fmt: skip
    if len(result) == 0:
        raise DataError(
            "Private item selection released no item at this budget: raise --epsilon or "
            "--selection-fraction, or pass a public catalogue with --items FILE."
        )
    return ItemSet.selected(result), model_budget


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

public-feature methods (Krichene et al. 2023b): an item's embedding is an encoder of its public
features (--features: MovieLens genres, year, decade, tags, a table given by --item-features,
and id), trained privately with adaptive weights: am-ssp (one release of the item statistics
per step, SSP2), am-ssp1 (a fresh release per encoder step, SSP1), am-ssp-minibatch (SSP2 with
random item batches), am-dpsgd (DP-SGD with user-level clipping). The saved model holds the
released item embeddings and the encoder's parameters.

item set: the model's items are fixed before training and never depend on one user. By default
private methods choose them privately by partition selection on the (user, item) pairs
(--selection-algorithm, spending --selection-fraction of --epsilon and --delta; the saved
budget is the total). With --items FILE the items are a public catalogue (free). Ratings of
other items are dropped.
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
        "--method", choices=ALL_METHODS, default="adadpals", metavar="METHOD",
        help=f"Training method, one of {', '.join(ALL_METHODS)} (see above). Default: "
        "%(default)s.",
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
    parser.add_argument(
        "--user-features", action="store_true",
        help="am-* methods on ml-100k or ml-1m: pull each user's embedding toward a private "
        "prior of the users sharing their age, gender and occupation (private features: the "
        "prior is released with noise, --user-feature-fraction of the budget, and saved in the "
        "model). Default: off.",
    )  # fmt: skip
    chosen = parser.add_argument_group("item set")
    chosen.add_argument(
        "--items", metavar="FILE", default=None,
        help="A public catalogue of item ids: one per line (.txt, as 'userdp select' writes) "
        "or a table with an 'item' column. The model has exactly these items and spends "
        "nothing on choosing them. Default: choose the items privately.",
    )  # fmt: skip
    chosen.add_argument(
        "--selection-fraction", type=_fraction, default=0.1, metavar="F",
        help="Share of --epsilon and --delta spent choosing the item set privately (without "
        "--items), in (0, 1). Default: %(default)s.",
    )  # fmt: skip
    chosen.add_argument(
        "--selection-algorithm", choices=list(SELECTION_ALGORITHMS), default="mad2r",
        metavar="NAME",
        help="Partition-selection algorithm that chooses the item set, one of "
        f"{', '.join(SELECTION_ALGORITHMS)}. Default: %(default)s.",
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
    _check_public(args, [args.method], _movielens_spec(Path(args.input)))
    _check_user_features(args, _movielens_spec(Path(args.input)))
    output = check_output_path(args.output, overwrite=args.overwrite)
    ratings, spec = _load(args.input, args)
    logger.info("Read %s (exact counts, not private).", ratings)
    rating_range = _rating_range(args, spec, [args.method])
    budget = None if args.epsilon is None else PrivacyBudget(args.epsilon, args.delta)
    item_set, model_budget = _item_set(args, ratings, budget)
    train = _compact_users(ratings)
    user_features = None
    if args.user_features:
        user_features = movielens_user_features(args.input, train.user_labels, name=spec.name)
    encoder = None
    if args.method in PUBLIC_METHODS:
        # The encoder's rows are the item set's items (features looked up per id).
        on_items = ratings if item_set is None else ratings.restrict_items(item_set.labels)[0]
        encoder = _encoder(args, _item_families(args, spec, on_items), on_items.n_items)
        fitted = _fit_public(
            args.method, encoder, train, model_budget, rating_range, args, options,
            items=item_set, user_features=user_features, progress=_interactive(args.quiet),
        )  # fmt: skip
    else:
        fitted = MatrixFactorization(
            items=item_set,
            method=args.method,
            dim=args.dim,
            steps=args.steps,
            rating_range=rating_range,
            seed=args.seed,
            progress=_interactive(args.quiet),
            **_budget_keywords(model_budget),
            **{k: v for k, v in options.items() if k in _DEFAULTS},
        ).fit(train)
    model = fitted.model_
    with atomic_output(output, overwrite=args.overwrite) as tmp:
        model.save(tmp)
    logger.info("Wrote the model to %s.", output)
    if not args.quiet:
        seconds = time.perf_counter() - start
        print(_train_summary(model, fitted, ratings, output, seconds, encoder), file=sys.stderr)
    return 0


def _train_summary(
    model: RecommenderModel,
    fitted: Any,
    r: Ratings,
    output: Path,
    seconds: float,
    encoder: Any = None,
) -> str:
    """The release (released values and declared parameters), then the operator's exact,
    non-private figures on their own labelled line."""
    prog = f"{PROG} train"
    b = model.budget
    row = [
        model.method,
        "non-private" if b is None else f"{b.epsilon:g}",
        "-" if b is None else f"{b.delta:g}",
        f"{model.n_items} ({model.item_source})",
        str(int(model.trained_items.sum())),
        str(model.dim),
        str(model.params.get("steps", "-")),
    ]
    header = ["method", "epsilon", "delta", "items", "trained", "dim", "steps"]
    lo, hi = model.rating_range
    lines = [
        f"{prog}: wrote {output} (rating range {lo:g}..{hi:g}, center {model.center:.4g}).",
        _format_table(header, [row], indent="  "),
    ]
    if encoder is not None:
        lines.append(
            f"{prog}: {model.method}: {_describe_encoder(encoder)}; the model holds the "
            "released item embeddings and the encoder's parameters."
        )
    diag = fitted.diagnostics_
    lines.append(
        f"{prog}: non-private, for the operator only (not part of the release, never saved): "
        f"{r.n_users} users, {r.n_ratings} ratings, {diag['ratings_outside_item_set']} "
        f"outside the item set; {seconds:.2f} s ({diag['fit_seconds']:.2f} s training)."
    )
    return "\n".join(lines)


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
        on unrated items (--unobserved-weight 1). The am-* methods have neither option: they
        train on all items, without the implicit term.
      Default --metric: rmse for ml10m, recall for ml20m.
      Methods: those of 'train', the public-feature am-* methods included (their features
      as for 'train': --features, --item-features).

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
        help="Method to train (one of " + ", ".join(ALL_METHODS) + "); repeat the flag or "
        "give a comma-separated list. Default: adadpals.",
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


def _score_model(model: RecommenderModel, task: _Task) -> list[tuple[str, float, list[float]]]:
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
        U[known] = model.item_factors[codes[known]]

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
    model = RecommenderModel.load(args.model)
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
    b = model.budget
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
    _check_public(args, methods, _movielens_spec(Path(args.input)))
    ratings, spec = _load(args.input, args)
    logger.info("Read %s (exact counts, not private).", ratings)
    metric = args.metric or _PROTOCOL_METRIC[args.protocol]
    metrics = ("rmse", "recall") if metric == "both" else (metric,)
    if args.protocol == "ml20m" and "rmse" in metrics:
        raise InvalidParameterError(
            "--protocol ml20m is implicit feedback (liked or not) and has no RMSE; use "
            "--metric recall, or --protocol ml10m for RMSE."
        )
    train, task, rating_range = _protocol_task(args, ratings, spec, methods, metrics, options)
    encoder = None
    if any(m in PUBLIC_METHODS for m in methods):  # public: built on the whole code book
        encoder = _encoder(args, _item_families(args, spec, ratings), ratings.n_items)
        logger.info("am-* methods: %s.", _describe_encoder(encoder))
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
                # The protocols treat the input's item list (MovieLens' movie list) as the
                # public catalogue, as the papers do; 'train' chooses it privately instead.
                catalogue = None if budget is None else ItemSet.public(train.item_labels)
                if method in PUBLIC_METHODS:
                    model = _fit_public(
                        method, encoder, train, budget, rating_range, args, options,
                        items=catalogue,
                    ).model_  # fmt: skip
                else:
                    model = (
                        MatrixFactorization(
                            items=catalogue,
                            method=method,
                            dim=args.dim,
                            steps=args.steps,
                            rating_range=rating_range,
                            seed=args.seed,
                            **_budget_keywords(budget),
                            **{k: v for k, v in options.items() if k in _DEFAULTS},
                        )
                        .fit(train)
                        .model_
                    )
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
        history, targets = split.train.union(split.validation), split.test
        rating_range = _rating_range(args, spec, methods)
    else:
        kw = {} if args.split_seed is None else {"seed": args.split_seed}
        held = ml20m_split(ratings, **kw)
        train = held.train.implicit()
        history, targets = held.test_history.implicit(), held.test_targets.implicit()
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
    model = RecommenderModel.load(args.model)
    titles = _titles(args.movies) if args.movies is not None else None
    ids = _parse_ids(args.items, model.item_labels.type)
    codes = model.item_codes(pa.array(ids, type=model.item_labels.type))
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
