"""Private centring and private biases of MatrixFactorization.

Two measurements, small enough for a shared machine (at most 1M ratings):

- ``centre``: the error of the released centre against the exact mean of the ratings, over
  ``--noise-seeds`` noise draws, for ``center="sampled-mean"`` (the earlier default) and
  ``"private-mean"`` (the smoothly bounded mean with a cap from the released counts);
- ``rmse``: held-out RMSE (a random 10% of the ratings, users projected from the other 90%)
  of ``adadpals`` with both centres, with and without ``biases``.

Datasets: ``longtail_ratings`` (7,000 users, 3,700 items, 1M ratings; seed 0 is the pilot draw
the defaults were picked on, seeds 1 and 2 are evaluation draws), and ml-100k /
ml-latest-small from the shared MovieLens copies when present.

    PYTHONPATH=src python benchmarks/recommend_centring.py centre [--data-dir /work/shared/data]
    PYTHONPATH=src python benchmarks/recommend_centring.py rmse [--data-dir /work/shared/data]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from _harness import SHARED_DATA
from userdp.data.longtail import longtail_ratings
from userdp.data.ratings import Ratings
from userdp.multitask.allocation import private_counts, row_keys
from userdp.privacy import NoiseSource, PrivacyBudget
from userdp.recommend import MatrixFactorization
from userdp.recommend.core.centring import centre_all
from userdp.recommend.core.plans import plan_noise

DATASETS = ("longtail0", "longtail1", "longtail2", "ml-100k", "ml-latest-small")
EPSILONS = (1.0, 5.0, 20.0)


DATA_DIR = SHARED_DATA


def load(name: str):
    """(users, items, ratings, rating range) or None when the data are absent."""
    import pandas as pd

    movielens = DATA_DIR / "movielens"
    if name == "ml-100k":
        path = movielens / "ml-100k" / "u.data.gz"
        if not path.exists():
            return None
        df = pd.read_csv(path, sep="\t", header=None, names=["u", "i", "r", "t"])
        return df.u.to_numpy(), df.i.to_numpy(), df.r.to_numpy(float), (1.0, 5.0)
    if name == "ml-latest-small":
        path = movielens / "ml-latest-small" / "ratings.csv.gz"
        if not path.exists():
            return None
        df = pd.read_csv(path)
        return df.userId.to_numpy(), df.movieId.to_numpy(), df.rating.to_numpy(float), (0.5, 5.0)
    d = longtail_ratings(n_users=7000, n_items=3700, n_ratings=1_000_000, seed=int(name[-1]))
    return d.users, d.items, d.values, (0.5, 5.0)


def centre_errors(name: str, seeds: int) -> None:
    loaded = load(name)
    if loaded is None:
        return
    u, i, r, (lo, hi) = loaded
    data = Ratings.from_columns(u, i, r)
    true = float(np.clip(data.values, lo, hi).mean())
    for eps in EPSILONS:
        plan = plan_noise(PrivacyBudget(eps, 1e-5), solver="ssp", steps=3)
        for center in ("sampled-mean", "private-mean"):
            errors = []
            for s in range(seeds):
                noise = NoiseSource(1000 + s)
                keys = row_keys(
                    data.users, data.items, data.user_labels, data.item_labels, noise.salt
                )
                counts = private_counts(
                    data.users,
                    data.items,
                    data.n_items,
                    count_sample=50,
                    noise_multiplier=plan.counts,
                    noise=noise,
                    keys=keys,
                ).counts
                c = centre_all(
                    data,
                    lo,
                    hi,
                    center=center,
                    count_sample=50,
                    noise_multiplier=plan.center,
                    noise=noise,
                    released_total=float(np.sum(counts)),
                )
                errors.append(c - true)
            e = np.array(errors)
            print(
                f"{name:16s} eps={eps:<4g} {center:13s} bias {e.mean():+.4f} "
                f"rmse {np.sqrt(np.mean(e**2)):.4f}",
                flush=True,
            )


def rmse(name: str) -> None:
    loaded = load(name)
    if loaded is None:
        return
    u, i, r, rating_range = loaded
    test = np.random.default_rng(12345).random(r.size) < 0.1
    train = Ratings.from_columns(u[~test], i[~test], r[~test])
    codes = {x: k for k, x in enumerate(train.user_labels.to_pylist())}
    keep = np.array([x in codes for x in u[test]])
    rows = np.array([codes[x] for x in u[test][keep]])
    items, truth = i[test][keep], r[test][keep]
    mean = np.sqrt(np.mean((r[~test].mean() - truth) ** 2))
    for eps in EPSILONS:
        for biases in (False, True):
            for center in ("sampled-mean", "private-mean"):
                started = time.perf_counter()
                model = MatrixFactorization(
                    method="adadpals",
                    items=np.unique(i),
                    dim=16,
                    steps=3,
                    rating_range=rating_range,
                    center=center,
                    biases=biases,
                    epsilon=eps,
                    delta=1e-5,
                    seed=0,
                ).fit(train)
                pred = model.predict(train, rows, items)
                row = {
                    "data": name,
                    "eps": eps,
                    "biases": biases,
                    "center": center,
                    "rmse": round(float(np.sqrt(np.mean((pred - truth) ** 2))), 4),
                    "global_mean_rmse": round(float(mean), 4),
                    "centre_error": round(model.center_ - float(r[~test].mean()), 4),
                    "seconds": round(time.perf_counter() - started, 1),
                }
                print(json.dumps(row), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["centre", "rmse"])
    parser.add_argument("--data", nargs="*", default=list(DATASETS), choices=DATASETS)
    parser.add_argument("--noise-seeds", type=int, default=20)
    parser.add_argument("--data-dir", type=Path, default=SHARED_DATA, help="the shared data")
    args = parser.parse_args()
    global DATA_DIR
    DATA_DIR = args.data_dir
    for name in args.data:
        if args.what == "centre":
            centre_errors(name, args.noise_seeds)
        else:
            rmse(name)


if __name__ == "__main__":
    main()
