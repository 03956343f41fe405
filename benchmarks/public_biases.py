"""Private item biases in AM-SSP: PublicFeatureRecommender with ``biases`` on vs off.

Run from the repository root (``pip install -e ".[bench]"``)::

    python benchmarks/public_biases.py                          # all sets, ssp2 ssp1 dpsgd
    python benchmarks/public_biases.py --variants ssp2,ssp1     # without AM-DPSGD (slow)
    python benchmarks/public_biases.py --datasets synthetic --seeds 1

Private item biases. Same protocol as ``public_features.py`` (ML10M split, test RMSE, delta 1e-5,
dim 16, the recommender's defaults, genre + year + id features, the MovieLens item list as
the public catalogue): for each variant and epsilon 1 / 5 / 20, the same seeds with
``biases=False`` (the earlier model) and ``biases=True`` (released item biases from the
encoder's extra output, per-user biases solved locally). Data: ml-100k, ml-latest-small and
a small draw of ``lowrank_ratings_with_features`` (seed 1; it has no planted biases, so it
shows what biases cost where there are none). Nothing is tuned on the evaluated data.
Writes ``benchmarks/results/public_biases[_TAG].json``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from _harness import RESULTS, SHARED_DATA, finish, log
from userdp.data.features import movielens_item_features
from userdp.data.movielens import load_movielens
from userdp.data.synthetic import lowrank_ratings_with_features
from userdp.recommend import (
    FeatureFamily,
    PublicFeatureEncoder,
    PublicFeatureRecommender,
    frequency_buckets,
    holdout_rmse,
    ml10m_split,
    rmse,
)

DELTA = 1e-5
EPSILONS = (1.0, 5.0, 20.0)
DIM = 16
DATASETS = ("ml-100k", "ml-latest-small", "synthetic")


def load(name: str, movielens: Path, n_synthetic: int) -> tuple[Any, list, tuple[float, float]]:
    if name == "synthetic":
        n_users, n_items = max(500, n_synthetic // 33), max(200, n_synthetic // 100)
        ratings, fams = lowrank_ratings_with_features(n_users, n_items, n_synthetic, seed=1)
        return ratings, list(fams), (0.5, 5.0)
    path = movielens / name
    ratings = load_movielens(path)
    fams = movielens_item_features(path, ratings.item_labels, families=("genres", "year"))
    return ratings, list(fams), ((1.0, 5.0) if name == "ml-100k" else (0.5, 5.0))


def run(name, ratings, fams, rating_range, variants, seeds, compare="biases") -> dict[str, Any]:
    split = ml10m_split(ratings)
    history = split.train.union(split.validation)
    buckets = frequency_buckets(split.train.item_counts())
    n = split.train.n_items
    ids = FeatureFamily("id", sp.identity(n, format="csr"))
    gm = float(split.train.values.mean())
    out: dict[str, Any] = {
        "global_mean": rmse(split.test.values, np.full(split.test.n_ratings, gm)),
        "runs": [],
    }
    log(
        f"[{name}] {ratings.n_users:,} users, {ratings.n_items:,} items, "
        f"{ratings.n_ratings:,} ratings; global mean {out['global_mean']:.4f}"
    )
    for variant in variants:
        for eps in EPSILONS:
            for biases in (False, True):
                scores, secs = [], []
                for seed in range(seeds):
                    t = time.perf_counter()
                    model = PublicFeatureRecommender(
                        encoder=PublicFeatureEncoder([*fams, ids], DIM, seed=0),
                        variant=variant,
                        epsilon=eps,
                        delta=DELTA,
                        items=split.train.item_labels,
                        rating_range=rating_range,
                        seed=1000 * seed + 7,
                        **(
                            {"biases": biases, "bias_prior": False}
                            if compare == "biases"
                            else {"biases": True, "bias_prior": biases}
                        ),
                    ).fit(split.train)
                    scores.append(holdout_rmse(model, history, split.test, buckets)["rmse"])
                    secs.append(time.perf_counter() - t)
                rec = {
                    "variant": variant,
                    "epsilon": eps,
                    "biases": biases,
                    "rmse": float(np.mean(scores)),
                    "rmse_sd": float(np.std(scores, ddof=1)) if seeds > 1 else None,
                    "scores": scores,
                    "seconds": float(np.mean(secs)),
                }
                out["runs"].append(rec)
                log(
                    f"  {variant:6s} eps={eps:<4g} biases={biases!s:5s} RMSE "
                    f"{rec['rmse']:.4f} ({rec['seconds']:.1f} s/run)"
                )
    return out


def print_summary(results: dict) -> None:
    print(
        "\nTest RMSE (ML10M protocol), mean over seeds: off -> on (change); the pair is "
        f"{results.get('compare', 'biases')}"
    )
    print(
        f"{'dataset':16s} {'variant':7s} "
        + " ".join(f"{'eps=' + format(e, 'g'):>24s}" for e in EPSILONS)
    )
    for name, res in results["sets"].items():
        variants = dict.fromkeys(r["variant"] for r in res["runs"])
        print(f"{name:16s} {'mean':7s} {res['global_mean']:.4f}")
        for v in variants:
            cells = []
            for e in EPSILONS:
                pair = {
                    r["biases"]: r["rmse"]
                    for r in res["runs"]
                    if r["variant"] == v and r["epsilon"] == e
                }
                if len(pair) == 2:
                    change = 100.0 * (pair[True] / pair[False] - 1.0)
                    cells.append(f"{pair[False]:.4f}->{pair[True]:.4f} ({change:+.1f}%)")
            print(f"{name:16s} {v:7s} " + " ".join(f"{c:>24s}" for c in cells))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--movielens", type=Path, default=SHARED_DATA / "movielens")
    p.add_argument("--datasets", default=",".join(DATASETS))
    p.add_argument("--variants", default="ssp2,ssp1,dpsgd")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--synthetic-ratings", type=int, default=50_000)
    p.add_argument("--tag", default="", help="Suffix of the results file.")
    p.add_argument(
        "--compare",
        choices=("biases", "prior"),
        default="biases",
        help="biases: off vs on (no prior); prior: biases on, bias_prior off vs on.",
    )
    p.add_argument("--out", type=Path, default=RESULTS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    results: dict[str, Any] = {
        "dim": DIM,
        "delta": DELTA,
        "seeds": args.seeds,
        "compare": args.compare,
        "sets": {},
    }
    variants = [v for v in args.variants.split(",") if v]
    for name in [d for d in args.datasets.split(",") if d]:
        ratings, fams, rr = load(name, args.movielens, args.synthetic_ratings)
        results["sets"][name] = run(name, ratings, fams, rr, variants, args.seeds, args.compare)
    results["seconds"] = time.perf_counter() - started
    suffix = f"_{args.tag}" if args.tag else ""
    finish(results, args.out, f"public_biases{suffix}", None, print_summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
