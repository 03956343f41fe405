"""SSP for convex losses (Appendix D, Algorithm 7): the logistic model against the squared loss.

Run from the repository root (``pip install -e ".[bench]"``)::

    python benchmarks/public_convex.py           # about 5 minutes on 2 cores
    python benchmarks/public_convex.py --quick   # one seed, the synthetic set only
    python benchmarks/public_convex.py --datasets realistic   # one set only

What it measures (Krichene et al. 2023b, arXiv:2310.15454; Appendix D leaves the evaluation of
Algorithm 7 to future work): Recall@20 on the ML20M protocol (Liang et al. 2018, as
:func:`userdp.recommend.protocol_task` builds it: ratings above 3.5 as implicit feedback,
held-out users scored from 80% of their items), epsilon 1 / 5 / 20 (delta 1e-5), 3 seeds, of
AM-SSP (SSP2) with

* ``squared``: today's squared loss on the observed items only (``loss="squared"``), without
  biases like the convex path; ``squared+biases`` with the default released item biases;
* ``squared+neg``: the squared loss through Algorithm 7 with one sampled negative per
  observed item (``loss=ConvexLoss squared``, ``gradient_clip=1``): the same data as logistic;
* ``logistic``: the logistic loss with one sampled negative per observed item, Gamma_H and
  Gamma_g the loss's bounds (1/4 and 1 times ``max_norm``);

beside the non-private popularity ranking and the non-private (exact-statistics) models, on
ml-100k (genre + year features and an id embedding) and on a synthetic set with public features
(``lowrank_ratings_with_features``, 3,000 users x 1,000 items, 100k ratings, seed 1), and on
the realistic synthetic set (``longtail_ratings``: ML-10M's shape with item and user biases,
scaled to ``REALISTIC`` = 7,000 users x 4,000 items, 1M ratings, seed 1), which has no item
features: its encoder is the id embedding alone (:class:`userdp.recommend.IdEncoder`). All
hyper-parameters are the recommender's defaults (dim 16, 3 steps of 3 inner Adam steps); none
is tuned on the evaluated data. Users are folded in by the released model's least-squares
UserUpdate on their history (the protocol's scoring, the same for every model). Writes
``benchmarks/results/public_convex_results.json`` and a PNG; skips ml-100k when absent.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from _harness import RESULTS, SHARED_DATA, finish, log, pyplot
from userdp.data.features import movielens_item_features
from userdp.data.longtail import longtail_ratings
from userdp.data.movielens import load_movielens
from userdp.data.synthetic import lowrank_ratings_with_features
from userdp.recommend import (
    FeatureFamily,
    IdEncoder,
    PublicFeatureEncoder,
    PublicFeatureRecommender,
    baseline_scores,
    protocol_task,
    score_model,
)
from userdp.recommend.public.convex import SQUARED

DELTA = 1e-5
EPSILONS = (1.0, 5.0, 20.0)
DIM = 16
#: The realistic set's (users, items, ratings): ML-10M's ~143 ratings per user, 1/10 of its size.
REALISTIC = (7_000, 4_000, 1_000_000)
DATASETS = ("ml-100k", "synthetic", "realistic")
DEFAULT_MOVIELENS = SHARED_DATA / "movielens"
#: The compared models: the recommender's keywords beyond the protocol's.
#: Algorithm 7 has no bias coordinate, so ``squared`` trains without biases too (like for like;
#: ``squared+biases`` is the default ``biases="auto"``, on for the squared loss).
MODELS: dict[str, dict[str, Any]] = {
    "squared": {"biases": False},
    "squared+biases": {},
    "squared+neg": {"loss": SQUARED, "negatives": 1.0, "gradient_clip": 1.0},
    "logistic": {"loss": "logistic", "negatives": 1.0},
}


def encoder(families: list | None, n_items: int) -> PublicFeatureEncoder | IdEncoder:
    """The public features plus an id embedding; the id embedding alone without features."""
    if families is None:
        return IdEncoder(n_items, DIM, seed=0)
    ids = FeatureFamily("id", sp.identity(n_items, format="csr"))
    return PublicFeatureEncoder([*families, ids], DIM, seed=0)


def recall(name: str, ratings, families, seeds: int) -> dict[str, Any]:
    """Recall@20 of every model at every epsilon (mean and sd over seeds) on one data set."""
    train, task = protocol_task(ratings, "ml20m", k=20)
    ((_, _, pop, pop_buckets),) = baseline_scores(task)
    out: dict[str, Any] = {
        "training_ratings": train.n_ratings,
        "test_users": int(np.unique(task.targets.users).size),
        "popularity": {"recall": pop, "buckets": pop_buckets},
        "non_private": {},
        "runs": [],
    }
    log(
        f"[{name}] {train.n_ratings:,} training ratings, {out['test_users']} test users; "
        f"popularity {pop:.4f}"
    )
    common = dict(items=train.item_labels, rating_range=(0.0, 1.0), center=0.0)

    def fit(kw: dict[str, Any], **budget: Any) -> tuple[float, list[float], float]:
        started = time.perf_counter()
        m = PublicFeatureRecommender(
            encoder=encoder(families, train.n_items), **common, **kw, **budget
        ).fit(train)
        ((_, value, buckets),) = score_model(m.model_, task)
        return value, buckets, time.perf_counter() - started

    for model, kw in MODELS.items():
        value, buckets, seconds = fit(kw, seed=0)
        out["non_private"][model] = {"recall": value, "buckets": buckets, "seconds": seconds}
        log(f"  {model:14s} non-private Recall@20 {value:.4f} ({seconds:.1f} s)")
        for eps in EPSILONS:
            vals = [fit(kw, epsilon=eps, delta=DELTA, seed=1000 * s + 7) for s in range(seeds)]
            rec = {
                "model": model,
                "epsilon": eps,
                "recall": float(np.mean([v[0] for v in vals])),
                "recall_sd": float(np.std([v[0] for v in vals], ddof=1)) if seeds > 1 else None,
                "buckets": np.nanmean([v[1] for v in vals], axis=0).tolist(),
                "seconds": float(np.mean([v[2] for v in vals])),
            }
            out["runs"].append(rec)
            sd = "" if rec["recall_sd"] is None else f" +- {rec['recall_sd']:.4f}"
            log(f"  {model:14s} eps={eps:<4g} Recall@20 {rec['recall']:.4f}{sd}")
    return out


def plots(results: dict, out_dir: Path) -> list[str]:
    plt = pyplot()
    sets = results["datasets"]
    if plt is None or not sets:
        return []
    fig, axes = plt.subplots(1, len(sets), figsize=(5 * len(sets), 4), squeeze=False)
    for ax, (name, res) in zip(axes[0], sets.items(), strict=True):
        for model in MODELS:
            rs = [r for r in res["runs"] if r["model"] == model]
            ax.errorbar(
                [r["epsilon"] for r in rs],
                [r["recall"] for r in rs],
                yerr=[r["recall_sd"] or 0.0 for r in rs],
                marker="o",
                capsize=3,
                label=model,
            )
        pop = res["popularity"]["recall"]
        ax.axhline(pop, color="grey", lw=1, label="popularity (non-private)")
        ax.set_ylim(0.0, max(ax.get_ylim()[1], 1.05 * pop))
        ax.set_xscale("log")
        ax.set_title(f"{name} (ML20M protocol)")
        ax.set_xlabel("epsilon (delta = 1e-5)")
        ax.set_ylabel("Recall@20")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    path = out_dir / "public_convex_recall.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return [str(path)]


def print_summary(results: dict) -> None:
    print(f"\nRecall@20 (ML20M protocol), mean +- sd over {results['seeds']} seeds")
    print(
        f"{'dataset':12s} {'model':14s} {'non-private':>12s} "
        + " ".join(f"{'eps=' + format(e, 'g'):>16s}" for e in EPSILONS)
    )
    for name, res in results["datasets"].items():
        pop = res["popularity"]["recall"]
        print(f"{name:12s} {'popularity':14s} {pop:>12.4f}")
        for model in MODELS:
            cells = []
            for r in (r for r in res["runs"] if r["model"] == model):
                sd = "" if r["recall_sd"] is None else f" +- {r['recall_sd']:.3f}"
                cells.append(f"{r['recall']:.4f}{sd}".rjust(16))
            exact = res["non_private"][model]["recall"]
            print(f"{name:12s} {model:14s} {exact:>12.4f} " + " ".join(cells))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--movielens", type=Path, default=DEFAULT_MOVIELENS)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="One seed, the synthetic set only.")
    p.add_argument(
        "--datasets",
        default=",".join(DATASETS),
        help=f"Comma-separated subset of {', '.join(DATASETS)}.",
    )
    p.add_argument("--out", type=Path, default=RESULTS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    seeds = 1 if args.quick else args.seeds
    results: dict[str, Any] = {"dim": DIM, "delta": DELTA, "seeds": seeds, "datasets": {}}
    started = time.perf_counter()
    sets = ["synthetic"] if args.quick else args.datasets.split(",")
    unknown = sorted(set(sets) - set(DATASETS))
    if unknown:
        raise SystemExit(f"unknown --datasets {unknown}; choose from {DATASETS}")
    path = args.movielens / "ml-100k"
    if "ml-100k" not in sets:
        pass
    elif not path.exists():
        log(f"[ml-100k] not found at {path}: skipped")
    else:
        ratings = load_movielens(path)
        fams = movielens_item_features(path, ratings.item_labels, families=("genres", "year"))
        results["datasets"]["ml-100k"] = recall("ml-100k", ratings, fams, seeds)
    if "synthetic" in sets:
        syn, fams = lowrank_ratings_with_features(3000, 1000, 100_000, seed=1)
        results["datasets"]["synthetic"] = recall("synthetic", syn, fams, seeds)
    if "realistic" in sets:
        real = longtail_ratings(*REALISTIC, seed=1)
        results["datasets"]["realistic"] = recall("realistic", real, None, seeds)
    results["seconds"] = time.perf_counter() - started
    finish(results, args.out, "public_convex_results", plots, print_summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
