"""Options shared by ``userdp recommend train`` and ``evaluate``: the methods, argument types,
and the model flags, built from the recommenders' declared parameter tables
(:func:`~userdp.cli.options.add_parameter_flags`): the library validates their values, once.

Which method reads which keyword is stated once below (:data:`SCOPES`), for the help text and
the warning when a flag does not apply to the chosen methods.
"""

from __future__ import annotations

import argparse
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from userdp._validation import check_arguments
from userdp.data.io import FORMATS
from userdp.exceptions import InvalidParameterError
from userdp.privacy.budget import PrivacyBudget
from userdp.recommend import METHODS, MatrixFactorization, PublicFeatureRecommender
from userdp.recommend.public.estimator import METHOD_NAMES

from ..options import (
    add_parameter_flags,
    delimiter,
    given_parameters,
    non_negative_int,
    on_terminal,
)

logger = logging.getLogger("userdp.cli")

PROG = "userdp recommend"
#: ``--method`` names of the public-feature recommender and the variant each trains.
PUBLIC_METHODS = {name: variant for variant, name in METHOD_NAMES.items()}
ALL_METHODS = (*METHODS, *PUBLIC_METHODS)
#: ``--features`` names: MovieLens families (from INPUT) and the identity family ``id``.
FEATURES = ("genres", "year", "decade", "tags", "genome", "id")
DEFAULT_FEATURES = ("genres", "year", "id")
#: The library defaults, shown in --help (so the help follows the library).
MF_DEFAULTS = MatrixFactorization().get_params()
PUBLIC_DEFAULTS = PublicFeatureRecommender(encoder=None).get_params()

INPUT_HELP = (
    "Ratings: a file with user, item and rating columns (CSV, TSV, Parquet or JSON Lines; the "
    "format comes from the name) or a MovieLens folder or official .zip (ml-100k, ml-1m, "
    "ml-10m, ml-20m, ml-latest, ml-latest-small), recognised by its name."
)


# -- argument types (parsing only: values are checked by the library) ---------------------------
def _float_in(low: float, what: str, *, open_low: bool = True) -> Callable[[str], float]:
    """An argparse ``type`` for the command line's own numbers (not model keywords)."""

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


def fraction(text: str) -> float:
    """``--selection-fraction``: a number in (0, 1)."""
    value = _positive_float(text)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1), got {text!r}")
    return value


def _number_or_word(text: str) -> str | float:
    """A number when the text is one, else the word itself (``--center``, ``--min-item-count``;
    the library says which words it takes)."""
    try:
        return float(text)
    except ValueError:
        return text


def _names(text: str, allowed: Sequence[str], what: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    for name in names:
        if name not in allowed:
            raise argparse.ArgumentTypeError(
                f"invalid {what}: {name!r} (choose from {', '.join(allowed)})"
            )
    if not names:
        raise argparse.ArgumentTypeError(f"expected one or more {what} names")
    return names


def method_list(text: str) -> list[str]:
    return _names(text, ALL_METHODS, "choice")


def feature_list(text: str) -> tuple[str, ...]:
    return tuple(unique(_names(text, FEATURES, "feature")))


def epsilon_list(text: str) -> list[float]:
    values = [_positive_float(t.strip()) for t in text.split(",") if t.strip()]
    if not values:
        raise argparse.ArgumentTypeError("expected one or more numbers > 0")
    return values


def unique(values: Sequence[Any]) -> list[Any]:
    return list(dict.fromkeys(values))


# -- which methods read which keyword -----------------------------------------------------------
def _private(m: str) -> bool:
    return m != "als"


def _ssp(m: str) -> bool:
    return m in ("dpals-uniform", "dpals-tail", "adadpals")


def _gd(m: str) -> bool:
    return "sgd" in m


def _sampled(m: str) -> bool:
    return m.endswith(("-uniform", "-tail"))


def _every(m: str) -> bool:
    return True


_AM = "the am-* methods"
_MF = "the matrix-factorization methods, not am-*"


@dataclass(frozen=True)
class Scope:
    """The MatrixFactorization methods and the am-* variants that read a keyword."""

    methods: Callable[[str], bool] | None
    text: str
    variants: tuple[str, ...] = ()
    variants_text: str = ""

    def applies(self, method: str) -> bool:
        if method in PUBLIC_METHODS:
            return PUBLIC_METHODS[method] in self.variants
        return self.methods is not None and self.methods(method)

    def describe(self, methods: Sequence[str] | None = None) -> str:
        """Who reads it; for matrix-factorization methods alone, only their part."""
        if methods is not None and not any(m in PUBLIC_METHODS for m in methods) and self.text:
            return self.text
        return ", and ".join(p for p in (self.text, self.variants_text) if p)


_ALL = ("ssp2", "ssp1", "minibatch", "dpsgd")
_SSP = ("ssp2", "ssp1", "minibatch")
#: The variants a loss other than squared trains (Appendix D), and those with its Gamma_H, Gamma_g.
_CONVEX_VARIANTS = ("ssp2", "minibatch", "dpsgd")
_QUADRATIC = ("ssp2", "minibatch")
_CONVEX = "am-ssp and am-ssp-minibatch with --loss other than squared"
#: The tuning flags, in --help order, and who reads each.
SCOPES: dict[str, Scope] = {
    "mu": Scope(lambda m: m.startswith("ada"), "adadpals and adadpsgd", _ALL, _AM),
    "sample_size": Scope(_sampled, "the uniform and tail methods"),
    "count_sample": Scope(_private, "private methods", _ALL),
    "count_fraction": Scope(_private, "private methods", _ALL),
    "center_fraction": Scope(_private, "private methods", _ALL),
    "moment_share": Scope(_ssp, "the dpals methods", _SSP, "the am-ssp methods"),
    "reg": Scope(_every, "every method", _ALL),
    "noise_reg": Scope(_private, "private methods", _SSP, "the am-ssp methods"),
    "max_norm": Scope(_private, "private methods", _ALL),
    "learning_rate": Scope(_gd, "the dpsgd methods", _ALL, _AM),
    "step_offset": Scope(_gd, "the dpsgd methods"),
    "sgd_steps": Scope(_gd, "the dpsgd methods"),
    "clip_norm": Scope(_gd, "the dpsgd methods", ("dpsgd",), "am-dpsgd"),
    "inner_steps": Scope(None, "", _ALL, _AM),
    "batch_items": Scope(None, "", ("minibatch",), "am-ssp-minibatch"),
    "user_feature_fraction": Scope(None, "", _ALL, f"{_AM} with --user-features"),
    "unobserved_weight": Scope(_every, _MF),
    "top_items": Scope(_every, _MF),
    "min_item_count": Scope(_every, f"{_MF} ('auto': dpals)"),
    "biases": Scope(_every, "every method", _ALL),
    "bias_prior": Scope(_ssp, "the dpals methods", _SSP, "the am-ssp methods"),
    "target_clip": Scope(_ssp, "the dpals methods"),
    "implicit": Scope(None, "", _ALL, _AM),
    "loss": Scope(None, "", _ALL, _AM),
    "hessian_clip": Scope(None, "", _QUADRATIC, _CONVEX),
    "gradient_clip": Scope(None, "", _QUADRATIC, _CONVEX),
    "negatives": Scope(None, "", _CONVEX_VARIANTS, f"{_AM} with --loss other than squared"),
}
TUNING = tuple(SCOPES)
#: Both recommenders' declared tables in one (the shared rules are the same objects).
_TABLE = {
    **PublicFeatureRecommender._parameter_constraints,
    **MatrixFactorization._parameter_constraints,
}


def _default_text(name: str) -> str:
    def show(value: Any) -> str:
        if isinstance(value, bool):
            return "on" if value else "off"
        if isinstance(value, str):
            return value
        return "none" if value is None else f"{value:g}"

    scope = SCOPES[name]
    mf, pub = MF_DEFAULTS.get(name, ...), PUBLIC_DEFAULTS.get(name, ...)
    if mf is ...:
        return show(pub)
    if not scope.variants or pub is ... or pub == mf:
        return show(mf)
    return f"{show(mf)} ({show(pub)} for {scope.variants_text or 'the am-* methods'})"


def add_input_options(parser: argparse.ArgumentParser) -> None:
    data = parser.add_argument_group("input (ratings files; ignored for MovieLens)")
    for name in ("user", "item", "rating"):
        data.add_argument(
            f"--{name}-column",
            default=name,
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
        "--delimiter",
        type=delimiter,
        default=None,
        metavar="CHAR",
        help="Field separator of CSV/TSV ratings files, one character or 'tab'. Default: ',' "
        "for CSV, tab for TSV.",
    )


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """The model group (--dim, --steps from the table, the rating range and centre), the
    public-feature group, the tuning flags from the tables and --seed."""
    model = parser.add_argument_group("model")
    table = {
        "dim": {
            **_TABLE["dim"],
            "help": "Embedding dimension (for the am-* methods: the item encoder's output).",
        },
        "steps": _TABLE["steps"],
    }
    add_parameter_flags(model, table, MF_DEFAULTS)
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
        type=_number_or_word,
        default=None,
        metavar="private-mean|sampled-mean|midpoint|FLOAT",
        help="Value subtracted before factorizing: private-mean and sampled-mean spend "
        "--center-fraction of the budget on a mean rating (sampled-mean keeps --count-sample "
        "ratings per user and leans toward light users' ratings; private-mean weighs heavy "
        "users up to a cap read from the released counts); midpoint (of the rating range) and "
        "a number are free. Default: private-mean.",
    )
    public = parser.add_argument_group(
        "public item features (the am-* methods)",
        "The am-* methods embed every item with an encoder of its public features, trained\n"
        "privately on the ratings: only the ratings are protected, so the features must be\n"
        "public (never derived from the private ratings).",
    )
    public.add_argument(
        "--features",
        type=feature_list,
        default=None,
        metavar="F[,F...]",
        help="Feature families of the item encoder, from " + ", ".join(FEATURES) + ". "
        "genres, year, decade (release year by decade), tags (user-written, treated as "
        "public because GroupLens publishes them) and genome (the Tag Genome of ml-20m and "
        "ml-latest, relevance >= 0.5, derived from user data and likewise published) are read "
        "from MovieLens INPUT; for other "
        "input they stand for the family of --item-features. id adds one value per item "
        "(a free item embedding); --features id alone is the id-only model. Default: "
        + ",".join(DEFAULT_FEATURES)
        + ".",
    )
    public.add_argument(
        "--item-features",
        default=None,
        metavar="FILE",
        help="A public feature table (CSV, TSV, Parquet or JSON Lines) with columns item and "
        "feature, one row per (item, feature value), and an optional weight column (default "
        "1); it becomes one family named after the file. Needed for a ratings-file INPUT "
        "unless --features id. Default: none.",
    )
    public.add_argument(
        "--family-dim",
        type=int,
        default=None,
        metavar="N",
        help="Embedding dimension of each feature family inside the encoder. Default: --dim.",
    )
    public.add_argument(
        "--encoder-seed",
        type=non_negative_int,
        default=None,
        metavar="N",
        help="Seed of the encoder's initialisation; it depends on no data, so any fixed value "
        "is safe. Default: 0.",
    )
    tuning = parser.add_argument_group("tuning (each applies to some methods only)")
    scoped = {
        name: {**_TABLE[name], "help": f"{_TABLE[name]['help']} For {SCOPES[name].describe()}."}
        for name in TUNING
    }
    add_parameter_flags(tuning, scoped, {name: _default_text(name) for name in TUNING})
    parser.add_argument(
        "--seed",
        type=non_negative_int,
        default=None,
        metavar="N",
        help="Seed the noise, for tests and reproducible runs only: a model trained with a "
        "known seed offers no privacy. Default: fresh OS entropy.",
    )


#: The --flags of the public-feature group, for warnings when no am-* method reads them.
PUBLIC_FLAGS = ("features", "item_features", "family_dim", "encoder_seed")


def flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def tuning_given(args: argparse.Namespace) -> list[str]:
    return [flag(d) for d in (*TUNING, *PUBLIC_FLAGS) if getattr(args, d) is not None]


def model_options(args: argparse.Namespace, methods: Sequence[str]) -> dict[str, Any]:
    """Model keywords set on the command line; warn about the inapplicable."""
    options: dict[str, Any] = {}
    for name, value in given_parameters(args, TUNING).items():
        scope = SCOPES[name]
        if any(scope.applies(m) for m in methods):
            if name == "min_item_count":
                value = _number_or_word(value)
            elif name == "biases":
                value = {"on": True, "off": False}.get(value, value)
            elif name == "target_clip":
                value = None if value == "none" else _number_or_word(value)
            options[name] = value  # methods it does not apply to never read it
        else:
            logger.warning("%s only applies to %s; ignored.", flag(name), scope.describe(methods))
    if not any(m in PUBLIC_METHODS for m in methods):
        given = [flag(d) for d in PUBLIC_FLAGS if getattr(args, d) is not None]
        if given:
            logger.warning("%s only apply to %s; ignored.", ", ".join(given), _AM)
    if args.center is not None:
        options["center"] = args.center
    _check_early(given_parameters(args, ("dim", "steps")) | options, methods)
    return options


def _check_early(keywords: dict[str, Any], methods: Sequence[str]) -> None:
    """The given keywords against the estimators' own declared tables (the library's rules and
    wording, checked once), before any data is read."""
    for cls in {
        PublicFeatureRecommender if m in PUBLIC_METHODS else MatrixFactorization for m in methods
    }:
        table = cls._parameter_constraints
        given = {k: v for k, v in keywords.items() if k in table}
        check_arguments(given, {k: table[k] for k in given}, cls.__name__)


def keywords_for(method: str, options: dict[str, Any]) -> dict[str, Any]:
    """The options ``method``'s estimator reads (the others were warned about)."""
    return {k: v for k, v in options.items() if k == "center" or SCOPES[k].applies(method)}


def check_budget_flags(
    epsilons: Sequence[float] | None, delta: float | None, methods: Sequence[str]
) -> None:
    """Private methods need --epsilon and --delta, als neither (their values: the library)."""
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


def is_private(method: str) -> bool:
    return _private(method)


def budget_keywords(budget: PrivacyBudget | None) -> dict[str, float]:
    """The recommenders' ``epsilon``/``delta`` keywords of a budget (none: not private)."""
    return {} if budget is None else {"epsilon": budget.epsilon, "delta": budget.delta}


def interactive(quiet: bool) -> bool:
    """Progress bars only on a terminal, and not with --quiet."""
    return on_terminal(quiet)


# -- output -------------------------------------------------------------------------------------
def format_table(header: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "") -> str:
    widths = [max(len(h), *(len(r[j]) for r in rows)) for j, h in enumerate(header)]
    lines = [
        indent + "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()
        for cells in [header, *rows]
    ]
    return "\n".join(lines)


def num(value: float | None, fmt: str = ".4f") -> str:
    return "-" if value is None or not math.isfinite(value) else format(value, fmt)


def release_json(model: Any, output: Any) -> str:
    """``recommend train --json``: the release as one JSON object (released and declared values
    only: method, budget, unit, the item set's size and source, dimension, rating range, the
    released centre, and where the model went)."""
    import json

    b = model.budget
    lo, hi = model.rating_range
    return json.dumps(
        {
            "output": str(output),
            "method": model.method,
            "epsilon": None if b is None else b.epsilon,
            "delta": None if b is None else b.delta,
            "unit": "user",
            "items": int(model.n_items),
            "item_source": model.item_source,
            "trained_items": int(model.trained_items.sum()),
            "dim": int(model.dim),
            "rating_range": [float(lo), float(hi)],
            "center": float(model.center),
        }
    )
