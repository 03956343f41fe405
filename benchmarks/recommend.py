"""Private recommenders under long-tail skew: privacy-utility curves, sliced metrics, timings.

Run from the repository root (``pip install -e ".[bench]"``)::

    python benchmarks/recommend.py                  # everything (about 20-30 min on 2 cores)
    python benchmarks/recommend.py --quick          # small synthetic set, one seed (~3 min)

What it measures (Krichene et al. 2023, Section 5 and Appendix C):

1. ML10M protocol (random 80/10/10 split, test RMSE, test users projected from train +
   validation) for every method at epsilon 1, 5, 20 (delta 1e-5) on ml-100k and
   ml-latest-small from ``--movielens`` when present, and on a synthetic ML-10M-shaped set
   (``--synthetic longtail``, the default: ``longtail_ratings``, ML-10M's sizes and its bias
   decomposition; ``--synthetic lowrank``: ``lowrank_ratings``, the earlier shape,
   without biases).
   RMSE overall and in 5 equal-size item buckets by training frequency, beside the
   global-mean predictor and non-private ALS.
2. ML20M protocol (ratings > 3.5, users >= 5, held-out users 80/20, Recall@20, training on the
   top 10% items by *private* counts) on the MovieLens sets present, beside popularity.
3. The paper's synthetic multi-task experiment (Appendix C): 100 ridge-regression tasks, d=5,
   10,000 users, power-law task sizes; test RMSE of task-weighted SSP and noisy GD vs mu.
4. Time per alternating step at d=64 on the 10M-rating set (ALS, AdaDPALS, AdaDPSGD).

Hyper-parameters of the private methods are the library defaults (dim 16 here), fixed before
this run on a *different* synthetic draw (seed 0; this script uses seed 1): choosing them on
the evaluated data would itself leak privacy that nobody charged. Non-private ALS picks its
(dim, reg) on the validation part, which is fine because it is not private.

Writes ``benchmarks/results/recommend_results.json`` and PNGs, and prints a summary.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from _harness import RESULTS, SHARED_DATA, finish, log, machine, pyplot, versions
from userdp.data.longtail import longtail_ratings
from userdp.data.movielens import load_movielens
from userdp.data.ratings import Ratings
from userdp.data.synthetic import lowrank_ratings, multitask_regression
from userdp.multitask import (
    adaptive_weights,
    task_weighted_noisy_gd,
    task_weighted_ssp,
)
from userdp.partition import select_partitions
from userdp.privacy import PrivacyBudget
from userdp.recommend import (
    ML20M_MODEL_DEFAULTS,
    ItemSet,
    MatrixFactorization,
    baseline_scores,
    frequency_buckets,
    holdout_rmse,
    ml10m_split,
    protocol_task,
    rmse,
    score_model,
    sliced_rmse,
)

DELTA = 1e-5
EPSILONS = (1.0, 5.0, 20.0)
PRIVATE = ("dpals-uniform", "dpals-tail", "adadpals", "dpsgd-uniform", "dpsgd-tail", "adadpsgd")
# Beyond the paper: AdaDPALS that trains only the items whose private count clears the noise.
VARIANTS = {"adadpals+cutoff": ("adadpals", {"min_item_count": "auto"})}
ALL = (*PRIVATE, *VARIANTS)
DEFAULT_MOVIELENS = SHARED_DATA / "movielens"
SMALL_SETS = ("ml-100k", "ml-latest-small")
DIM = 16
GD_STEPS = 20  # noisy GD steps in the Appendix C experiment


# -- 1. ML10M protocol ------------------------------------------------------------------------
def tune_als(split, rating_range, grid) -> dict[str, Any]:
    """Non-private ALS: (dim, reg) chosen on validation RMSE."""
    best = None
    val_buckets = frequency_buckets(split.train.item_counts())
    for dim, reg in grid:
        m = MatrixFactorization(
            method="als", dim=dim, steps=15, reg=reg, rating_range=rating_range, seed=0
        )
        m.fit(split.train)
        v = holdout_rmse(m, split.train, split.validation, val_buckets)["rmse"]
        if best is None or v < best[0]:
            best = (v, dim, reg)
    return {"dim": best[1], "reg": best[2], "validation_rmse": best[0]}


def item_set(train: Ratings, budget: PrivacyBudget, mode: str, fraction: float, seed: int):
    """The model's item set and budget: the public catalogue (the split's item list, as in the
    papers' protocols) for free, or partition selection with ``fraction`` of the budget."""
    if mode == "catalogue":
        return ItemSet.public(train.item_labels), budget
    for_items, for_model = budget.split([fraction, 1.0 - fraction])
    pairs = (train.users, train.item_labels.take(train.items))
    chosen = select_partitions(pairs, epsilon=for_items.epsilon, delta=for_items.delta, seed=seed)
    return ItemSet.selected(chosen), for_model


def rating_protocol(
    name: str, ratings: Ratings, rating_range, seeds: int, methods, mode="catalogue", fraction=0.1
) -> dict:
    log(
        f"[{name}] ML10M protocol: {ratings.n_users:,} users, {ratings.n_items:,} items, "
        f"{ratings.n_ratings:,} ratings"
    )
    split = ml10m_split(ratings)
    history = split.train.union(split.validation)
    buckets = frequency_buckets(split.train.item_counts())
    out: dict[str, Any] = {
        "n_users": ratings.n_users,
        "n_items": ratings.n_items,
        "n_ratings": ratings.n_ratings,
        "runs": [],
    }
    gm = float(split.train.values.mean())
    pred = np.full(split.test.n_ratings, gm)
    out["global_mean"] = {
        "rmse": rmse(split.test.values, pred),
        "buckets": sliced_rmse(split.test.items, split.test.values, pred, buckets).tolist(),
    }
    t = time.perf_counter()
    if ratings.n_ratings < 2_000_000:
        grid = [(d, r) for d in (4, 8, 16, 32) for r in (0.05, 0.1, 0.15)]
    else:  # 10M ratings: a few points (each fit takes about a minute)
        grid = [(16, 0.05), (32, 0.05), (32, 0.1)]
    als = tune_als(split, rating_range, grid)
    m = MatrixFactorization(
        method="als", dim=als["dim"], steps=15, reg=als["reg"], rating_range=rating_range, seed=0
    ).fit(split.train)
    out["als"] = {
        **als,
        **holdout_rmse(m, history, split.test, buckets),
        "seconds": time.perf_counter() - t,
    }
    log(
        f"  global mean {out['global_mean']['rmse']:.4f}; ALS {out['als']['rmse']:.4f} "
        f"(dim {als['dim']}, reg {als['reg']})"
    )
    for method in methods:
        base, extra = VARIANTS.get(method, (method, {}))
        for eps in EPSILONS:
            runs = []
            for seed in range(seeds):
                t = time.perf_counter()
                items, budget = item_set(
                    split.train, PrivacyBudget(eps, DELTA), mode, fraction, 1000 * seed + 7
                )
                m = MatrixFactorization(
                    epsilon=budget.epsilon,
                    delta=budget.delta,
                    items=items,
                    method=base,
                    dim=DIM,
                    rating_range=rating_range,
                    seed=1000 * seed + 7,
                    **extra,
                )
                if len(items) == 0:  # the selection released nothing: predict the midpoint
                    mid = np.full(split.test.n_ratings, 0.5 * sum(rating_range))
                    r = {
                        "rmse": rmse(split.test.values, mid),
                        "buckets": sliced_rmse(
                            split.test.items, split.test.values, mid, buckets
                        ).tolist(),
                        "items": 0,
                        "trained_items": 0,
                        "seconds": time.perf_counter() - t,
                        "epsilon_spent": eps * fraction,
                    }
                    runs.append(r)
                    continue
                with warnings.catch_warnings():  # "no item reaches the cutoff": recorded below
                    warnings.simplefilter("ignore", UserWarning)
                    m.fit(split.train)
                r = holdout_rmse(m, history, split.test, buckets)
                r["items"] = len(items)
                r["trained_items"] = int(m.trained_items_.sum())
                r["seconds"] = time.perf_counter() - t
                r["epsilon_spent"] = m.budget_.epsilon
                runs.append(r)
            rec = {
                "method": method,
                "epsilon": eps,
                "rmse": float(np.mean([r["rmse"] for r in runs])),
                "rmse_sd": float(np.std([r["rmse"] for r in runs], ddof=1)) if seeds > 1 else None,
                "buckets": np.mean([r["buckets"] for r in runs], axis=0).tolist(),
                "seconds": float(np.mean([r["seconds"] for r in runs])),
                "epsilon_spent": max(r["epsilon_spent"] for r in runs),
                "trained_items": float(np.mean([r["trained_items"] for r in runs])),
                "items": float(np.mean([r["items"] for r in runs])),
                "item_set": mode,
                "selection_fraction": fraction if mode == "private" else 0.0,
                "seeds": seeds,
            }
            out["runs"].append(rec)
            log(
                f"  {method:14s} eps={eps:<4g} RMSE {rec['rmse']:.4f} buckets "
                f"{np.round(rec['buckets'], 3).tolist()} items {rec['items']:.0f} "
                f"({rec['seconds']:.1f} s)"
            )
    return out


# -- 2. ML20M protocol ------------------------------------------------------------------------
def recall_protocol(name: str, ratings: Ratings, seeds: int, methods) -> dict:
    # The protocol's split, scoring and model settings are the library's (also the CLI's).
    train, task = protocol_task(ratings, "ml20m", k=20)
    log(
        f"[{name}] ML20M protocol: {train.n_ratings:,} training ratings, "
        f"{np.unique(task.targets.users).size} test users"
    )
    out: dict[str, Any] = {"runs": []}
    ((_, _, pop, pop_buckets),) = baseline_scores(task)
    out["popularity"] = {"recall": pop, "buckets": pop_buckets}
    opts = dict(ML20M_MODEL_DEFAULTS)

    def evaluate(m):
        ((_, recall, buckets),) = score_model(m.model_, task)
        return recall, buckets

    m = MatrixFactorization(method="als", dim=32, steps=10, reg=0.1, **opts, seed=0).fit(train)
    rec, b = evaluate(m)
    out["als"] = {"recall": rec, "buckets": b}
    log(f"  popularity {pop:.4f}; ALS {rec:.4f}")
    for method in methods:
        if method in VARIANTS:
            continue  # the ML20M protocol already trains on the top 10% items only
        for eps in EPSILONS:
            vals = []
            for seed in range(seeds):
                # The ML20M protocol's public catalogue: the training part's item list.
                m = MatrixFactorization(
                    epsilon=eps,
                    delta=DELTA,
                    items=train.item_labels,
                    method=method,
                    dim=DIM,
                    **opts,
                    seed=1000 * seed + 7,
                )
                vals.append(evaluate(m.fit(train)))
            rec = {
                "method": method,
                "epsilon": eps,
                "recall": float(np.mean([v[0] for v in vals])),
                "recall_sd": float(np.std([v[0] for v in vals], ddof=1)) if seeds > 1 else None,
                "buckets": np.nanmean([v[1] for v in vals], axis=0).tolist(),
            }
            out["runs"].append(rec)
            log(f"  {method:14s} eps={eps:<4g} Recall@20 {rec['recall']:.4f}")
    return out


# -- 3. Appendix C ----------------------------------------------------------------------------
def appendix_c(seeds: int) -> dict:
    """Test RMSE of task-weighted SSP / noisy GD vs mu (exact counts, as the paper does)."""
    out: dict[str, Any] = {"mus": [0.0, 0.25, 0.5, 0.75, 1.0], "runs": []}
    for power in (1.0, 2.0):
        data = multitask_regression(power=power, seed=3)
        rng = np.random.default_rng(4)
        test = rng.random(data.tasks.size) < 0.2
        tr = ~test
        users, tasks = data.users[tr], data.tasks[tr]
        x, y = data.user_features[users], data.labels[tr]
        x_test = data.user_features[data.users[test]]
        counts = np.bincount(tasks, minlength=100).astype(float)  # exact, as in Appendix C
        for eps in EPSILONS:
            for solver in ("ssp", "gd"):
                for mu in out["mus"]:
                    errs = []
                    for seed in range(seeds):
                        w = adaptive_weights(users, tasks, counts, mu=mu)
                        budget = {"epsilon": eps, "delta": DELTA, "seed": seed}
                        if solver == "ssp":
                            res = task_weighted_ssp(
                                users,
                                tasks,
                                x,
                                y,
                                w,
                                n_tasks=100,
                                feature_bound=1.0,
                                label_bound=1.0,
                                ridge=1.0,
                                **budget,
                            )
                        else:
                            res = task_weighted_noisy_gd(
                                users,
                                tasks,
                                x,
                                y,
                                w,
                                n_tasks=100,
                                clip_norm=1.0,
                                steps=GD_STEPS,
                                learning_rate=1.0 / (1.0 + counts * 0.1),
                                ridge=1.0,
                                radius=1.0,
                                **budget,
                            )
                        pred = np.einsum("nd,nd->n", res.parameters[data.tasks[test]], x_test)
                        errs.append(rmse(data.labels[test], pred))
                    out["runs"].append(
                        {
                            "power": power,
                            "epsilon": eps,
                            "solver": solver,
                            "mu": mu,
                            "rmse": float(np.mean(errs)),
                        }
                    )
            best = {
                s: min(
                    (
                        r
                        for r in out["runs"]
                        if r["power"] == power and r["epsilon"] == eps and r["solver"] == s
                    ),
                    key=lambda r: r["rmse"],
                )
                for s in ("ssp", "gd")
            }
            log(
                f"[appendix C] a={power:g} eps={eps:g}: "
                + ", ".join(
                    f"{s} mu=0 {_get(out, power, eps, s, 0.0):.4f} -> best mu={b['mu']:g} "
                    f"{b['rmse']:.4f}"
                    for s, b in best.items()
                )
            )
    return out


def _get(out, power, eps, solver, mu) -> float:
    for r in out["runs"]:
        if (r["power"], r["epsilon"], r["solver"], r["mu"]) == (power, eps, solver, mu):
            return r["rmse"]
    return math.nan


# -- 4. timings -------------------------------------------------------------------------------
def step_times(ratings: Ratings) -> list[dict]:
    """Seconds per alternating step at d=64: fit with 1 and 3 steps, difference / 2."""
    out = []
    for method in ("als", "adadpals", "adadpsgd"):
        secs = {}
        for steps in (1, 3):
            budget = {} if method == "als" else {"epsilon": 1.0, "delta": DELTA}
            m = MatrixFactorization(
                items=ratings.item_labels,
                method=method,
                dim=64,
                steps=steps,
                rating_range=(0.5, 5.0),
                seed=0,
                **budget,
            )
            t = time.perf_counter()
            m.fit(ratings)
            secs[steps] = time.perf_counter() - t
        per = (secs[3] - secs[1]) / 2
        out.append(
            {
                "method": method,
                "dim": 64,
                "seconds_per_step": per,
                "setup_seconds": secs[1] - per,
                "fit_1_step": secs[1],
                "fit_3_steps": secs[3],
            }
        )
        log(f"[timing] {method}: {per:.2f} s per step at d=64 (setup {secs[1] - per:.2f} s)")
    base = out[0]["seconds_per_step"]
    for r in out:
        r["ratio_to_als"] = r["seconds_per_step"] / base
    return out


# -- plots and summary ------------------------------------------------------------------------
def plots(results: dict, out_dir: Path) -> list[str]:
    plt = pyplot()
    if plt is None:
        return []
    files = []
    sets = results["rating"]
    if sets:
        fig, axes = plt.subplots(1, len(sets), figsize=(5 * len(sets), 4), squeeze=False)
        for ax, (name, res) in zip(axes[0], sets.items(), strict=True):
            for method in ALL:
                rs = [r for r in res["runs"] if r["method"] == method]
                if rs:
                    ax.plot(
                        [r["epsilon"] for r in rs],
                        [r["rmse"] for r in rs],
                        marker="o",
                        label=method,
                        linestyle="-" if "als" in method else "--",
                    )
            ax.axhline(res["global_mean"]["rmse"], color="grey", lw=1, label="global mean")
            ax.axhline(res["als"]["rmse"], color="black", lw=1, label="ALS (non-private)")
            ax.set_xscale("log")
            ax.set_title(name)
            ax.set_xlabel("epsilon (delta = 1e-5)")
            ax.set_ylabel("test RMSE")
        axes[0][0].legend(fontsize=7)
        fig.tight_layout()
        files.append(str(out_dir / "recommend_rmse.png"))
        fig.savefig(files[-1], dpi=120)
        plt.close(fig)
        fig, axes = plt.subplots(1, len(sets), figsize=(5 * len(sets), 4), squeeze=False)
        for ax, (name, res) in zip(axes[0], sets.items(), strict=True):
            width = 0.8 / (len(ALL) + 1)
            for k, method in enumerate(ALL):
                rs = [r for r in res["runs"] if r["method"] == method and r["epsilon"] == 1.0]
                if rs:
                    ax.bar(np.arange(5) + k * width, rs[0]["buckets"], width, label=method)
            ax.bar(
                np.arange(5) + len(ALL) * width,
                res["global_mean"]["buckets"],
                width,
                label="global mean",
                color="grey",
            )
            ax.set_xticks(np.arange(5) + 0.4, [f"b{i}" for i in range(5)])
            ax.set_ylim(bottom=0.5)
            ax.set_title(f"{name}, epsilon = 1 (b0 = tail)")
            ax.set_ylabel("test RMSE")
        axes[0][0].legend(fontsize=7)
        fig.tight_layout()
        files.append(str(out_dir / "recommend_sliced.png"))
        fig.savefig(files[-1], dpi=120)
        plt.close(fig)
    app = results.get("appendix_c")
    if app:
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        for ax, solver in zip(axes, ("ssp", "gd"), strict=True):
            for power in (1.0, 2.0):
                for eps in EPSILONS:
                    ys = [_get(app, power, eps, solver, mu) for mu in app["mus"]]
                    ax.plot(app["mus"], ys, marker="o", label=f"a={power:g}, eps={eps:g}")
            ax.set_yscale("log")
            ax.set_xlabel("mu")
            ax.set_ylabel("test RMSE")
            ax.set_title(f"Appendix C, {solver}")
            ax.legend(fontsize=7)
        fig.tight_layout()
        files.append(str(out_dir / "recommend_appendix_c.png"))
        fig.savefig(files[-1], dpi=120)
        plt.close(fig)
    return files


def print_summary(results: dict) -> None:
    print("\nML10M protocol: test RMSE (mean over seeds)")
    print(f"{'dataset':18s} {'method':15s} " + " ".join(f"eps={e:<5g}" for e in EPSILONS))
    for name, res in results["rating"].items():
        print(f"{name:18s} {'global mean':15s} " + f"{res['global_mean']['rmse']:<10.4f}" * 3)
        print(f"{name:18s} {'ALS':15s} " + f"{res['als']['rmse']:<10.4f}" * 3)
        for method in ALL:
            rs = [r for r in res["runs"] if r["method"] == method]
            if rs:
                sd = [f"±{r['rmse_sd']:.3f}" if r.get("rmse_sd") else "" for r in rs]
                print(
                    f"{name:18s} {method:15s} "
                    + " ".join(f"{r['rmse']:.4f}{s:<7s}" for r, s in zip(rs, sd, strict=True))
                )
        for ours in ("adadpals", "adadpals+cutoff"):
            for eps in EPSILONS:
                a = [r for r in res["runs"] if r["method"] == ours and r["epsilon"] == eps]
                t = [r for r in res["runs"] if r["method"] == "dpals-tail" and r["epsilon"] == eps]
                if a and t:
                    gain = [
                        1 - x / y for x, y in zip(a[0]["buckets"], t[0]["buckets"], strict=True)
                    ]
                    print(
                        f"{'':18s} eps={eps:<4g} {ours} vs dpals-tail: RMSE lower by "
                        f"{100 * (1 - a[0]['rmse'] / t[0]['rmse']):+.1f}%, by bucket (tail "
                        "first) " + " ".join(f"{100 * g:+.1f}%" for g in gain)
                    )
    if results.get("recall"):
        print("\nML20M protocol: Recall@20")
        for name, res in results["recall"].items():
            print(
                f"{name:18s} popularity {res['popularity']['recall']:.4f}   ALS "
                f"{res['als']['recall']:.4f}"
            )
            for method in PRIVATE:
                rs = [r for r in res["runs"] if r["method"] == method]
                if rs:
                    print(
                        f"{name:18s} {method:14s} " + " ".join(f"{r['recall']:<9.4f}" for r in rs)
                    )
    if results.get("timing"):
        print("\nSeconds per alternating step at d=64 on the 10M-rating synthetic set")
        for r in results["timing"]:
            print(
                f"  {r['method']:10s} {r['seconds_per_step']:6.2f} s  "
                f"({r['ratio_to_als']:.2f}x ALS; setup {r['setup_seconds']:.1f} s)"
            )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--movielens",
        type=Path,
        default=DEFAULT_MOVIELENS,
        help="Folder holding ml-100k/ and ml-latest-small/ (skipped when absent).",
    )
    p.add_argument(
        "--synthetic-ratings",
        type=int,
        default=10_000_054,
        help="Size of the ML-10M-shaped synthetic set (users and items scale along).",
    )
    p.add_argument(
        "--synthetic",
        choices=("longtail", "lowrank"),
        default="longtail",
        help="Shape of the synthetic set: longtail (item biases correlated with popularity, user "
        "biases, low-rank interactions and noise, with ML-10M's decomposition) or lowrank (no "
        "biases: the shape before the realistic set, which cannot show a tail effect). "
        "Default: longtail.",
    )
    p.add_argument("--seeds", type=int, default=3, help="Noise seeds per run on the small sets.")
    p.add_argument("--methods", default=",".join(ALL), help="Comma-separated methods.")
    p.add_argument(
        "--quick",
        action="store_true",
        help="1M synthetic ratings, one seed, no timing: a smoke run.",
    )
    p.add_argument(
        "--item-set",
        choices=("catalogue", "private"),
        default="catalogue",
        help="The ML10M-protocol models' item set: the split's item list as a public catalogue "
        "(the papers' protocol), or chosen by partition selection (mad2r) with "
        "--selection-fraction of each budget. Default: catalogue.",
    )
    p.add_argument("--selection-fraction", type=float, default=0.1)
    p.add_argument(
        "--only-synthetic",
        action="store_true",
        help="Skip the MovieLens sets, Appendix C and timings: the synthetic ML10M run alone.",
    )
    p.add_argument("--out", type=Path, default=RESULTS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    methods = [m for m in args.methods.split(",") if m]
    n_syn = 1_000_000 if args.quick else args.synthetic_ratings
    seeds = 1 if args.quick else args.seeds
    started = time.perf_counter()
    results: dict[str, Any] = {
        "machine": machine(),
        "versions": versions(),
        "delta": DELTA,
        "epsilons": EPSILONS,
        "dim": DIM,
        "rating": {},
        "recall": {},
    }
    for name in () if args.only_synthetic else SMALL_SETS:
        path = args.movielens / name
        if not path.exists():
            log(f"[{name}] not found at {path}: skipped")
            continue
        ratings = load_movielens(path)
        rr = (1.0, 5.0) if name == "ml-100k" else (0.5, 5.0)
        results["rating"][name] = rating_protocol(name, ratings, rr, seeds, methods)
        results["recall"][name] = recall_protocol(name, ratings, seeds, methods)
    scale = n_syn / 10_000_054
    t = time.perf_counter()
    generate = longtail_ratings if args.synthetic == "longtail" else lowrank_ratings
    syn = generate(
        max(1000, int(69_878 * scale)), max(200, int(10_677 * scale**0.5)), n_syn, seed=1
    )
    log(f"[synthetic] generated in {time.perf_counter() - t:.1f} s")
    results["rating"]["synthetic-10M" if not args.quick else "synthetic-1M"] = rating_protocol(
        "synthetic", syn, (0.5, 5.0), 1, methods, args.item_set, args.selection_fraction
    )
    if not args.only_synthetic:
        results["appendix_c"] = appendix_c(1 if args.quick else 2)
    if not args.quick and not args.only_synthetic:
        results["timing"] = step_times(syn)
    results["seconds"] = time.perf_counter() - started
    suffix = "" if args.item_set == "catalogue" else "_private_items"
    finish(results, args.out, f"recommend_results{suffix}", plots, print_summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
