"""Federated SSP2 (public-features paper, Appendix F, Algorithm 8): traffic per client against
federated DP-SGD, and federated RMSE against centralised SSP2.

Run from the repository root (``pip install -e ".[bench]"``)::

    python benchmarks/federated.py           # ml-100k + a 1M-rating synthetic set, about 3 minutes
    python benchmarks/federated.py --quick   # a 100k-rating synthetic set

What it measures, on ml-100k (genre + year + id features, when ``../shared/data/movielens`` is
present; skipped otherwise) and on ``lowrank_ratings_with_features`` (synthetic genres, years,
ids):

1. Traffic per client, in bytes (float64 values, int32 item codes), for ``steps`` alternating
   steps of ``inner_steps`` encoder steps each: federated SSP2 as Algorithm 8 sends it (the
   client's factor and its (item, weight, rating) triples once per alternating step, counted
   by the messages themselves), the same under secure aggregation (a dense masked vector of
   every item's A_j upper triangle and b_j, so the items stay hidden), and federated DP-SGD
   (one dense encoder gradient, ``n_params`` floats, per inner step; dense under secure
   aggregation too). Both share the count and mean rounds before training. Downlink: SSP2
   broadcasts the item embeddings and counts once per alternating step, DP-SGD the encoder's
   parameters once per inner step.
2. Test RMSE (ML10M protocol) of federated and centralised SSP2 with the same seed, epsilon
   1 / 5 / 20: equal by construction (the same releases); the script checks it.

Writes ``benchmarks/results/federated.json`` and prints the tables.
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
)
from userdp.recommend.federated import (
    FederatedPublicFeatureRecommender,
    secure_aggregation_nbytes,
)

DELTA = 1e-5
EPSILONS = (1.0, 5.0, 20.0)
DIM = 16
STEPS = 3
INNER = (3, 10, 50)  # the recommender's default, and the longer runs of public_features.py
SEED = 7


def encoder(families: list, n_items: int) -> PublicFeatureEncoder:
    ids = FeatureFamily("id", sp.identity(n_items, format="csr"))
    return PublicFeatureEncoder([*families, ids], DIM, seed=0)


def traffic(name: str, ratings, families, rating_range) -> list[dict[str, Any]]:
    """Bytes per client of federated SSP2 (measured) and of federated DP-SGD (its sizes)."""
    m = ratings.n_items
    enc = encoder(families, m)
    rows = []
    for inner in INNER:
        model = FederatedPublicFeatureRecommender(
            encoder=enc,
            epsilon=5.0,
            delta=DELTA,
            items=ratings.item_labels,
            rating_range=rating_range,
            steps=STEPS,
            inner_steps=inner,
            seed=SEED,
        ).fit(ratings)
        diag = model.diagnostics_
        degrees = np.bincount(ratings.users, minlength=ratings.n_users)
        preamble = 4 * np.minimum(degrees, model.count_sample) + 16  # counts + mean rounds
        grad = 8 * enc.n_params
        row = {
            "dataset": name,
            "users": ratings.n_users,
            "items": m,
            "ratings": ratings.n_ratings,
            "dim": DIM,
            "n_params": int(enc.n_params),
            "steps": STEPS,
            "inner_steps": inner,
            "ssp2_rounds": diag["rounds"],
            "dpsgd_rounds": 2 + STEPS * inner,
            "ssp2_up_mean": diag["uplink_bytes_mean"],
            "ssp2_up_max": diag["uplink_bytes_max"],
            "ssp2_secagg_up": 8 * (m + 1) + 16 + STEPS * secure_aggregation_nbytes(m, DIM),
            "dpsgd_up_mean": float(preamble.mean()) + STEPS * inner * grad,
            "ssp2_down": diag["downlink_bytes"],
            "dpsgd_down": STEPS * inner * grad,
            "seconds": diag["fit_seconds"],
        }
        row["dpsgd_over_ssp2"] = row["dpsgd_up_mean"] / row["ssp2_up_mean"]
        rows.append(row)
        log(
            f"[{name}] inner={inner}: SSP2 {row['ssp2_up_mean'] / 1e3:.1f} kB/client up "
            f"({row['ssp2_rounds']} rounds), DP-SGD {row['dpsgd_up_mean'] / 1e6:.2f} MB "
            f"({row['dpsgd_rounds']} rounds)"
        )
    return rows


def parity(name: str, ratings, families, rating_range) -> list[dict[str, Any]]:
    """Test RMSE of federated and centralised SSP2 trained with the same seed."""
    split = ml10m_split(ratings)
    history = split.train.union(split.validation)
    buckets = frequency_buckets(split.train.item_counts())
    out = []
    for eps in EPSILONS:
        kw = dict(
            epsilon=eps,
            delta=DELTA,
            items=split.train.item_labels,
            rating_range=rating_range,
            steps=STEPS,
            seed=SEED,
        )
        scores, seconds = {}, {}
        # Algorithm 8 trains no bias: the centralised model is compared without its item biases
        # (its default has them, so the two would differ by design).
        models = (
            ("central", PublicFeatureRecommender, {"biases": False}),
            ("federated", FederatedPublicFeatureRecommender, {}),
        )
        for label, cls, extra in models:
            t = time.perf_counter()
            model = cls(encoder=encoder(families, split.train.n_items), **kw, **extra)
            model = model.fit(split.train)
            seconds[label] = time.perf_counter() - t
            scores[label] = holdout_rmse(model, history, split.test, buckets)["rmse"]
        rec = {
            "dataset": name,
            "epsilon": eps,
            "central_rmse": scores["central"],
            "federated_rmse": scores["federated"],
            "abs_difference": abs(scores["central"] - scores["federated"]),
            "central_seconds": seconds["central"],
            "federated_seconds": seconds["federated"],
        }
        out.append(rec)
        log(
            f"[{name}] eps={eps:g}: RMSE central {rec['central_rmse']:.6f}, federated "
            f"{rec['federated_rmse']:.6f} (|diff| {rec['abs_difference']:.1e})"
        )
    return out


def print_summary(results: dict) -> None:
    print(
        f"\nUplink bytes per client, {STEPS} alternating steps, dim {DIM} "
        "(SSP2: measured mean / max; DP-SGD: dense gradients)"
    )
    head = (
        f"{'dataset':16s} {'inner':>5s} {'n_params':>9s} {'SSP2 rounds':>11s} "
        f"{'SSP2 mean':>10s} {'SSP2 max':>10s} {'SSP2 SecAgg':>12s} {'DP-SGD rounds':>13s} "
        f"{'DP-SGD':>12s} {'ratio':>7s}"
    )
    print(head)
    for r in results["traffic"]:
        print(
            f"{r['dataset']:16s} {r['inner_steps']:5d} {r['n_params']:9,d} "
            f"{r['ssp2_rounds']:11d} {r['ssp2_up_mean']:10,.0f} {r['ssp2_up_max']:10,.0f} "
            f"{r['ssp2_secagg_up']:12,d} {r['dpsgd_rounds']:13d} {r['dpsgd_up_mean']:12,.0f} "
            f"{r['dpsgd_over_ssp2']:6.0f}x"
        )
    print(
        "\nDownlink bytes per client: "
        + "; ".join(
            f"{r['dataset']} inner {r['inner_steps']}: SSP2 {r['ssp2_down']:,}, DP-SGD "
            f"{r['dpsgd_down']:,}"
            for r in results["traffic"]
        )
    )
    print("\nTest RMSE (ML10M protocol), same seed: centralised vs federated SSP2")
    for r in results["parity"]:
        print(
            f"  {r['dataset']:16s} eps={r['epsilon']:<4g} {r['central_rmse']:.6f} "
            f"{r['federated_rmse']:.6f} |diff| {r['abs_difference']:.1e} "
            f"({r['central_seconds']:.2f} s vs {r['federated_seconds']:.2f} s)"
        )
    print(f"federated == centralised: {results['federated_equals_central']}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--movielens", type=Path, default=SHARED_DATA / "movielens")
    p.add_argument("--synthetic-ratings", type=int, default=1_000_209)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", type=Path, default=RESULTS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    results: dict[str, Any] = {
        "dim": DIM,
        "steps": STEPS,
        "delta": DELTA,
        "traffic": [],
        "parity": [],
    }
    sets = []
    path = args.movielens / "ml-100k"
    if path.exists():
        ratings = load_movielens(path)
        fams = movielens_item_features(path, ratings.item_labels, families=("genres", "year"))
        sets.append(("ml-100k", ratings, fams, (1.0, 5.0)))
    else:
        log(f"[ml-100k] not found at {path}: skipped")
    n = 100_000 if args.quick else args.synthetic_ratings
    scale = n / 1_000_209  # the ML-1M shape: 6,040 users x 3,706 items
    syn, fams = lowrank_ratings_with_features(
        max(500, int(6_040 * scale)), max(200, int(3_706 * scale**0.5)), n, seed=1
    )
    sets.append((f"synthetic-{n // 1000}k", syn, fams, (0.5, 5.0)))
    for name, ratings, fams, rr in sets:
        results["traffic"] += traffic(name, ratings, fams, rr)
        results["parity"] += parity(name, ratings, fams, rr)
    results["federated_equals_central"] = all(
        r["abs_difference"] <= 1e-9 for r in results["parity"]
    )
    results["seconds"] = time.perf_counter() - started
    finish(results, args.out, "federated", None, print_summary)
    return 0 if results["federated_equals_central"] else 1


if __name__ == "__main__":
    sys.exit(main())
