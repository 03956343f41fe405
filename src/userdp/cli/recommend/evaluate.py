"""``userdp recommend evaluate``: score a saved model, or split a data set with a benchmark
protocol, train every method at every epsilon and score them (:mod:`userdp.recommend.core.protocols`
holds the protocols, the scoring and the baselines)."""

from __future__ import annotations

import argparse
import csv
import json
import logging
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from userdp.data.movielens import load_movielens
from userdp.data.ratings import Ratings
from userdp.exceptions import DataError, InvalidParameterError
from userdp.privacy.budget import PrivacyBudget
from userdp.recommend import ItemSet, RecommenderModel
from userdp.recommend.core.protocols import (
    ML20M_MODEL_DEFAULTS,
    N_BUCKETS,
    PROTOCOL_METRIC,
    EvaluationTask,
    baseline_scores,
    compact_users,
    protocol_task,
    score_model,
)

from ..options import (
    NOT_PRIVATE,
    Progress,
    atomic_output,
    check_output_path,
    common_options,
    exact,
    non_negative_int,
    positive_int,
    run_guarded,
)
from . import _options
from ._data import (
    check_public,
    describe_encoder,
    encoder,
    fit,
    item_families,
    load,
    movielens_spec,
    rating_range,
    read_ratings_table,
)
from ._options import (
    ALL_METHODS,
    INPUT_HELP,
    PROG,
    PUBLIC_METHODS,
    add_input_options,
    add_model_options,
    epsilon_list,
    format_table,
    is_private,
    method_list,
    model_options,
    num,
    tuning_given,
    unique,
)

__all__ = ["add_parser", "run"]

logger = logging.getLogger("userdp.cli")
_RESULT_SUFFIXES = (".json", ".csv")

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


def add_parser(commands: Any) -> argparse.ArgumentParser:
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
        "input",
        nargs="?",
        default=None,
        metavar="INPUT",
        help=INPUT_HELP + " Split with --protocol; not used with --model.",
    )
    saved = parser.add_argument_group("a saved model")
    saved.add_argument("--model", metavar="MODEL", help="A model written by 'train' (.npz).")
    saved.add_argument(
        "--history",
        metavar="HIST",
        help="Ratings the test users' embeddings are computed from, and that are excluded "
        "from their recommendations (a ratings file or MovieLens input, like INPUT).",
    )
    saved.add_argument(
        "--test", metavar="TEST", help="Held-out ratings to score (same kinds of input)."
    )
    proto = parser.add_argument_group("a protocol (train and evaluate in one go)")
    proto.add_argument(
        "--protocol",
        choices=tuple(PROTOCOL_METRIC),
        default=None,
        help="How to split INPUT (see above). Required with INPUT.",
    )
    proto.add_argument(
        "--split-seed",
        type=non_negative_int,
        default=None,
        metavar="N",
        help="Seed of the protocol's split. Default: the protocol's (1234 for ml10m, 98765 "
        "for ml20m).",
    )
    proto.add_argument(
        "--method",
        type=method_list,
        action="append",
        default=None,
        metavar="M[,M...]",
        help="Method to train (one of " + ", ".join(ALL_METHODS) + "); repeat the flag or "
        "give a comma-separated list. Default: adadpals.",
    )
    proto.add_argument(
        "--epsilon",
        type=epsilon_list,
        action="append",
        default=None,
        metavar="E[,E...]",
        help="Epsilon to train each private method at; repeat the flag or give a list. "
        "Required by private methods.",
    )
    proto.add_argument(
        "--delta",
        type=float,
        default=None,
        metavar="D",
        help="Delta in (0, 1) of every private run, far below 1 / (number of users). "
        "Required by private methods.",
    )
    metrics = parser.add_argument_group("metrics and output")
    metrics.add_argument(
        "--metric",
        choices=("rmse", "recall", "both"),
        default=None,
        help="What to report. Default: the protocol's metric (rmse for ml10m, recall for "
        "ml20m), both with --model.",
    )
    metrics.add_argument(
        "--k",
        type=positive_int,
        default=20,
        metavar="K",
        help="Cut-off of Recall@k, overall and in every bucket. Default: %(default)s.",
    )
    metrics.add_argument(
        "-o",
        "--output",
        default=None,
        metavar="OUT",
        help="Write the results to OUT instead of stdout: .json gives a list of records, .csv "
        "a table with a header. Default: a table on stdout.",
    )
    metrics.add_argument(
        "--overwrite",
        action="store_true",
        help="Replace OUT if it exists. Default: refuse to overwrite an existing file.",
    )
    add_model_options(parser)
    add_input_options(parser)
    parser.set_defaults(
        handler=lambda args: run_guarded(f"{PROG} evaluate", run, args), parser=parser
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
    #: the budget is a saved model's (spent, ``:g``), not one given on the command line (exact)
    stored: bool = False

    def budget_text(self, value: float) -> str:
        """A budget of this row: as given (exactly), or a saved model's spent one (6 digits)."""
        return f"{value:g}" if self.stored else exact(value)

    def cells(self) -> list[str]:
        return [
            self.method,
            "non-private" if self.epsilon is None else self.budget_text(self.epsilon),
            "-" if self.epsilon is None or self.delta is None else self.budget_text(self.delta),
            self.metric,
            num(self.value),
            *(num(v) for v in self.buckets),
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


def run(args: argparse.Namespace) -> int:
    """Run ``userdp recommend evaluate`` on parsed arguments; errors propagate to the guard."""
    start = time.perf_counter()
    output = _check_evaluate_output(args)
    if args.model is not None:
        rows, summary = _evaluate_saved(args)
    else:
        rows, summary = _evaluate_protocol(args)
    text = format_table(_HEADER, [r.cells() for r in rows]) + "\n"
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        with atomic_output(output, overwrite=args.overwrite) as tmp:
            _write_results(rows, tmp, output.suffix.lower())
        logger.info("Wrote %d rows to %s.", len(rows), output)
    if not args.quiet:
        seconds = time.perf_counter() - start
        what, counts = summary
        print(f"{PROG} evaluate: {what}.", file=sys.stderr)
        if args.verbose:  # exact counts and timings only on request: logs keep stderr
            print(f"{PROG} evaluate: {NOT_PRIVATE}: {counts}; {seconds:.2f} s.", file=sys.stderr)
        print(
            f"{PROG} evaluate: note: global-mean and popularity use exact training statistics: "
            "non-private references, not releases.",
            file=sys.stderr,
        )
        for line in _no_better_than_baselines(rows):
            print(f"{PROG} evaluate: note: {line}", file=sys.stderr)
    return 0


#: The reference each metric's model must beat, and whether larger values are better.
_REFERENCES = {"rmse": ("global-mean", False), "recall": ("popularity", True)}


def _no_better_than_baselines(rows: Sequence[_Row]) -> list[str]:
    """One sentence per model row that does not beat its metric's non-private reference."""
    refs = {
        r.metric: r.value
        for r in rows
        if (r.method, r.metric) in {(name, m) for m, (name, _) in _REFERENCES.items()}
    }
    out = []
    for r in rows:
        ref = refs.get(r.metric)
        if r.method in {n for n, _ in _REFERENCES.values()} or ref is None:
            continue
        if not (math.isfinite(r.value) and math.isfinite(ref)):
            continue
        larger_better = _REFERENCES[r.metric][1]
        if (r.value <= ref) if larger_better else (r.value >= ref):
            budget = "" if r.epsilon is None else f" at epsilon={r.budget_text(r.epsilon)}"
            out.append(
                f"{r.method}{budget} does no better than the {_REFERENCES[r.metric][0]} "
                f"reference on {r.metric} ({num(r.value)} vs {num(ref)}): at this budget the "
                "noise outweighs what the model learns; raise --epsilon or use more users."
            )
    return out


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


def _evaluate_saved(args: argparse.Namespace) -> tuple[list[_Row], tuple[str, str]]:
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
    ignored = tuning_given(args) + [
        flag
        for flag, v in (
            ("--rating-range", args.rating_range),
            ("--center", args.center),
            ("--seed", args.seed),
        )
        if v is not None
    ]
    if ignored:
        logger.warning("%s only apply to training; ignored with --model.", ", ".join(ignored))
    model = RecommenderModel.load(args.model)
    history, targets = _aligned(_read_any(args.history, args), _read_any(args.test, args))
    metric = args.metric or "both"
    task = EvaluationTask(
        history=history,
        targets=targets,
        train=history,
        metrics=("rmse", "recall") if metric == "both" else (metric,),
        k=args.k,
    )
    started = time.perf_counter()
    scored = score_model(model, task)
    seconds = time.perf_counter() - started
    b = model.budget
    rows = [
        _Row(
            model.method,
            None if b is None else b.epsilon,
            None if b is None else b.delta,
            name,
            value,
            sliced,
            seconds,
            stored=True,
        )
        for name, value, sliced in scored
    ]
    rows += _baselines(task)
    summary = (
        f"scored {args.model} ({model.method})",
        f"{targets.n_ratings} test ratings of {len(np.unique(targets.users))} users",
    )
    return rows, summary


def _read_any(path: str, args: argparse.Namespace) -> pa.Table:
    spec = movielens_spec(Path(path))
    if spec is not None:
        return load_movielens(path, name=spec.name).to_arrow()
    return read_ratings_table(path, args)


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


def _evaluate_protocol(args: argparse.Namespace) -> tuple[list[_Row], tuple[str, str]]:
    """INPUT ``--protocol``: split, train every (method, epsilon), score on the test part."""
    if args.input is None or args.protocol is None:
        raise InvalidParameterError(
            "Give either INPUT with --protocol ml10m|ml20m (train and evaluate), or --model "
            "with --history and --test (evaluate a saved model)."
        )
    stray = [f for f, v in (("--history", args.history), ("--test", args.test)) if v is not None]
    if stray:
        raise InvalidParameterError(f"{' and '.join(stray)} only apply with --model.")
    methods = unique([m for group in (args.method or [["adadpals"]]) for m in group])
    epsilons = None if args.epsilon is None else unique([e for g in args.epsilon for e in g])
    _options.check_budget_flags(epsilons, args.delta, methods)
    options = model_options(args, methods)
    check_public(args, methods, movielens_spec(Path(args.input)))
    ratings, spec = load(args.input, args)
    logger.info("Read %s (exact counts, not private).", ratings)
    metric = args.metric or PROTOCOL_METRIC[args.protocol]
    metrics = ("rmse", "recall") if metric == "both" else (metric,)
    train, task = protocol_task(
        ratings, args.protocol, metrics=metrics, k=args.k, seed=args.split_seed
    )
    if args.protocol == "ml10m":
        declared = rating_range(args, spec, methods)
    else:
        if args.rating_range is not None:
            logger.warning("--rating-range does not apply to ml20m (implicit 0..1); ignored.")
        defaults = dict(ML20M_MODEL_DEFAULTS)
        declared = defaults.pop("rating_range")
        for name, value in defaults.items():
            options.setdefault(name, value)
    train = compact_users(train)
    coder = None
    if any(m in PUBLIC_METHODS for m in methods):  # public: built on the whole code book
        coder = encoder(args, item_families(args, spec, ratings), ratings.n_items)
        logger.info("am-* methods: %s.", describe_encoder(coder))
    # check_budget_flags: epsilons are given whenever a method is private
    runs = [
        (m, e)
        for m in methods
        for e in ((None,) if not is_private(m) else cast(list[float], epsilons))
    ]
    progress = Progress(
        [f"{m} eps={e:g}" if e is not None else m for m, e in runs],
        enabled=_options.interactive(args.quiet),
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
                model = fit(
                    method,
                    train,
                    budget,
                    declared,
                    args,
                    options,
                    items=catalogue,
                    encoder=coder,
                ).model_
                scored = score_model(model, task)
                seconds = time.perf_counter() - started
                delta = None if eps is None else args.delta
                rows += [_Row(method, eps, delta, n, v, s, seconds) for n, v, s in scored]
    finally:
        progress.close()
    rows += _baselines(task)
    what = f"{len(runs)} run{'s' if len(runs) != 1 else ''} on the {args.protocol} split of "
    counts = f"{train.n_ratings} training ratings, {task.targets.n_ratings} test ratings of "
    summary = (what + str(args.input), counts + f"{len(np.unique(task.targets.users))} users")
    return rows, summary


def _baselines(task: EvaluationTask) -> list[_Row]:
    """The non-private references (global mean, popularity), each timed."""
    rows = []
    for metric in task.metrics:
        started = time.perf_counter()
        found = baseline_scores(replace(task, metrics=(metric,)))
        seconds = time.perf_counter() - started
        rows += [_Row(name, None, None, m, v, sliced, seconds) for name, m, v, sliced in found]
    return rows
