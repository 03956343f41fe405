"""Smooth bounding of user contributions (Epasto et al., NeurIPS 2020) against sample limiting.

Run from the repository root (``pip install -e ".[bench]"``)::

    python benchmarks/contribution_bounding.py           # about 10 minutes on 2 cores
    python benchmarks/contribution_bounding.py --quick   # fewer repetitions and settings

What it measures:

1. Mean (Section 3): MSE against the true mean over ``--reps`` repetitions (default 500) at
   epsilon 1/2/3 on Zipf(alpha) synthetic sets, alpha 1.25..3 (2,000 users, values in [0, 10],
   i.i.d. scaled Beta(2, 5), fresh values each repetition). Weighted averaging against the
   best sample limiting, both in the paper's setting (user sizes and the variance public, the
   h of Claims 1 and 2) and in userdp's default (sizes and variance private: 10% of epsilon
   chooses h), and, at alpha 1.5, PipelineDP's MEAN with its per-user bound tuned knowing the
   true mean (when pipeline-dp is installed). The exact variances of Claims 1 and 2 are
   reported beside the measured MSEs.
2. Median (Appendix B): the weighted exponential mechanism against sample limiting, same sets.
3. Label-private linear regression (Section 5): the paper's synthetic setup (make_regression,
   d = 10, noise 20, n 600..3000, Zipf user sizes) and the drugs data (``--drugs``, skipped when
   absent): GWA vs sample limiting at its best h and at h_max, epsilon 1/2/3, 10 repetitions;
   average squared prediction error on the data (the paper's metric) and parameter error. The
   noise variance is public and computed by OLS, as in the paper; GWA is also run with the
   variance estimated privately (``noise_variance="estimate"``).
4. Weighted ERM (Section 4): logistic regression on Zipf-sized users, smooth weights vs
   sample limiting.

Writes ``benchmarks/results/contribution_bounding.json`` and PNGs, and prints a summary.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from _harness import RESULTS, SHARED_DATA, finish, log, machine, pyplot, versions
from userdp.data.synthetic import zipf_regression, zipf_user_values
from userdp.estimate.erm import WeightedERM
from userdp.estimate.mean import sample_limited_mean, weighted_mean
from userdp.estimate.quantile import sample_limited_quantile, weighted_quantile
from userdp.estimate.regression import LabelPrivateLinearRegression
from userdp.estimate.weighting import (
    best_limit_h,
    best_smooth_h,
    factorize_users,
    limit_variance,
    smooth_variance,
)

EPSILONS = (1.0, 2.0, 3.0)
ALPHAS = (1.25, 1.5, 2.0, 2.5, 3.0)
BOUNDS = (0.0, 10.0)
DEFAULT_DRUGS = SHARED_DATA / "contrib/drugs_xyu_derived.csv.gz"


def _mse(errors: list[float]) -> dict[str, float]:
    sq = np.square(np.asarray(errors, dtype=np.float64))
    return {"mse": float(sq.mean()), "se": float(sq.std(ddof=1) / np.sqrt(sq.size))}


# -- 1. mean ------------------------------------------------------------------------------------
def mean_setting(alpha: float, eps: float, reps: int, seed: int) -> dict[str, Any]:
    """MSE of every mean estimator on one Zipf(alpha) user set at one epsilon."""
    data = zipf_user_values(2_000, alpha=alpha, bounds=BOUNDS, seed=seed)
    _, sizes = factorize_users(data.users)
    width = BOUNDS[1] - BOUNDS[0]
    unit = width / eps  # Lemma 1: Laplace scale width * h / (eps * n_h)
    h_w = best_smooth_h(sizes, data.variance, unit)
    h_l = best_limit_h(sizes, data.variance, unit)
    out: dict[str, Any] = {
        "alpha": alpha,
        "epsilon": eps,
        "records": int(data.values.size),
        "users": int(sizes.size),
        "max_size": int(sizes.max()),
        "h_weighted": float(h_w),
        "h_limit": int(h_l),
        "claim1_variance": float(smooth_variance(sizes, h_w, data.variance, unit)),
        "claim2_variance": float(limit_variance(sizes, h_l, data.variance, unit)),
    }
    rng = np.random.default_rng([seed, 99])
    errors: dict[str, list[float]] = {k: [] for k in ESTIMATORS}
    for r in range(reps):
        values = BOUNDS[0] + width * rng.beta(2.0, 5.0, data.values.size)
        for name, run in ESTIMATORS.items():
            est = run(values, data.users, eps, data.variance, h_w, h_l, 7919 * r + 13)
            errors[name].append(est - data.mean)
    out["methods"] = {k: _mse(v) for k, v in errors.items()}
    # Paired: both estimators see the same values in each repetition, so the difference of
    # their squared errors has a much smaller standard error than either MSE.
    for label, (a, b) in PAIRS.items():
        d = np.square(errors[a]) - np.square(errors[b])
        out.setdefault("paired", {})[label] = {
            "mse_difference": float(d.mean()),
            "se": float(d.std(ddof=1) / np.sqrt(d.size)),
        }
    return out


PAIRS = {
    "public": ("weighted (public sizes)", "sample-limit best h (public sizes)"),
    "private": ("weighted (private)", "sample-limit (private)"),
}

ESTIMATORS = {
    "weighted (public sizes)": lambda v, u, e, var, hw, hl, s: (
        weighted_mean(
            v, u, epsilon=e, bounds=BOUNDS, public_user_sizes=True, noise_variance=var, seed=s
        ).estimate
    ),
    "sample-limit best h (public sizes)": lambda v, u, e, var, hw, hl, s: (
        sample_limited_mean(
            v, u, epsilon=e, bounds=BOUNDS, public_user_sizes=True, h=hl, seed=s
        ).estimate
    ),
    "weighted (private)": lambda v, u, e, var, hw, hl, s: (
        weighted_mean(v, u, epsilon=e, bounds=BOUNDS, seed=s).estimate
    ),
    "sample-limit (private)": lambda v, u, e, var, hw, hl, s: (
        sample_limited_mean(v, u, epsilon=e, bounds=BOUNDS, seed=s).estimate
    ),
}


def pipelinedp_mean(eps: float, reps: int, seed: int) -> dict[str, Any] | None:
    """PipelineDP MEAN (Laplace) on the alpha = 1.5 set, its bound tuned knowing the truth.

    The bound is the best of a grid by MSE over ``reps / 4`` pilot runs; the MSE reported is
    over ``reps`` fresh runs at that bound (the pilot's minimum is biased low).
    """
    try:
        import pipeline_dp
    except ImportError:
        return None
    data = zipf_user_values(2_000, alpha=1.5, bounds=BOUNDS, seed=seed)
    rng = np.random.default_rng([seed, 7])

    def run(values: np.ndarray, bound: int) -> float:
        rows = list(zip(data.users.tolist(), values.tolist(), strict=True))
        acc = pipeline_dp.NaiveBudgetAccountant(total_epsilon=eps, total_delta=0.0)
        engine = pipeline_dp.DPEngine(acc, pipeline_dp.LocalBackend())
        params = pipeline_dp.AggregateParams(
            metrics=[pipeline_dp.Metrics.MEAN],
            noise_kind=pipeline_dp.NoiseKind.LAPLACE,
            max_partitions_contributed=1,
            max_contributions_per_partition=bound,
            min_value=BOUNDS[0],
            max_value=BOUNDS[1],
        )
        ext = pipeline_dp.DataExtractors(
            privacy_id_extractor=lambda r: r[0],
            partition_extractor=lambda r: 0,
            value_extractor=lambda r: r[1],
        )
        res = engine.aggregate(rows, params, ext, public_partitions=[0])
        acc.compute_budgets()
        return float(next(iter(res))[1].mean)

    def draw() -> np.ndarray:
        return BOUNDS[0] + (BOUNDS[1] - BOUNDS[0]) * rng.beta(2.0, 5.0, data.values.size)

    grid = (1, 2, 3, 5, 8, 12, 20, 30, 50)
    tune = {
        b: _mse([run(draw(), b) - data.mean for _ in range(max(20, reps // 4))])["mse"]
        for b in grid
    }
    best = min(tune, key=tune.get)
    t0 = time.perf_counter()
    errs = [run(draw(), best) - data.mean for _ in range(reps)]
    return {
        "epsilon": eps,
        "bound": best,
        "tuning_mse": tune,
        **_mse(errs),
        "seconds_per_run": (time.perf_counter() - t0) / reps,
    }


# -- 2. median -----------------------------------------------------------------------------------
def median_setting(alpha: float, eps: float, reps: int, seed: int) -> dict[str, Any]:
    data = zipf_user_values(2_000, alpha=alpha, bounds=BOUNDS, seed=seed)
    rng = np.random.default_rng([seed, 98])
    width = BOUNDS[1] - BOUNDS[0]
    # The true median of the scaled Beta(2, 5) law, from a large sample.
    truth = float(np.median(BOUNDS[0] + width * np.random.default_rng(0).beta(2, 5, 2_000_000)))
    errors: dict[str, list[float]] = {"weighted": [], "sample-limit": []}
    for r in range(reps):
        values = BOUNDS[0] + width * rng.beta(2.0, 5.0, data.values.size)
        pairs = (("weighted", weighted_quantile), ("sample-limit", sample_limited_quantile))
        for name, fn in pairs:
            res = fn(
                values,
                data.users,
                q=0.5,
                epsilon=eps,
                bounds=BOUNDS,
                public_user_sizes=True,
                seed=7919 * r + 17,
            )
            errors[name].append(float(np.atleast_1d(res.estimate)[0]) - truth)
    return {"alpha": alpha, "epsilon": eps, "methods": {k: _mse(v) for k, v in errors.items()}}


# -- 3. regression ------------------------------------------------------------------------------
def ols_noise_variance(X: np.ndarray, y: np.ndarray) -> float:
    """The paper's public sigma^2: the OLS residual variance (with an intercept column)."""
    Z = np.column_stack([X, np.ones(len(y))])
    beta, *_ = np.linalg.lstsq(Z, y, rcond=None)
    resid = y - Z @ beta
    return float(resid @ resid / max(1, len(y) - Z.shape[1]))


REG_METHODS = {
    "gwa": {"method": "gwa"},
    "gwa (variance estimated)": {"method": "gwa", "noise_variance": "estimate"},
    "sample-limit best h": {"method": "sample-limit", "h": "best"},
    "sample-limit h_max": {"method": "sample-limit", "h": "max"},
}


def regression_run(X, y, users, label_range, eps, seed, coef=None) -> dict[str, dict[str, float]]:
    sigma2 = ols_noise_variance(X, y)
    Z = np.column_stack([X, np.ones(len(y))])
    ols, *_ = np.linalg.lstsq(Z, np.clip(y, *label_range), rcond=None)
    out = {
        "ols (non-private)": {"prediction_mse": float(np.mean((y - Z @ ols) ** 2)), "seconds": 0.0}
    }
    if coef is not None:
        out["ols (non-private)"]["parameter_error"] = float(np.sum((ols[:-1] - coef) ** 2))
    for name, kw in REG_METHODS.items():
        kw = {"noise_variance": sigma2, **kw}
        t0 = time.perf_counter()
        model = LabelPrivateLinearRegression(
            epsilon=eps, label_range=label_range, seed=seed, **kw
        ).fit(X, y, users)
        pred = model.predict(X)
        rec = {
            "prediction_mse": float(np.mean((y - pred) ** 2)),
            "seconds": time.perf_counter() - t0,
        }
        if coef is not None:
            rec["parameter_error"] = float(np.sum((model.coef_ - coef) ** 2))
        out[name] = rec
    return out


def _average(runs: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    return {m: {k: float(np.mean([r[m][k] for r in runs])) for k in runs[0][m]} for m in runs[0]}


_CACHE: dict[tuple, dict[str, Any]] = {}


def regression_synthetic(n: int, alpha: float, eps: float, reps: int) -> dict[str, Any]:
    key = (n, alpha, eps, reps)
    if key in _CACHE:
        return _CACHE[key]
    runs = []
    for r in range(reps):
        d = zipf_regression(n, 10, noise=20.0, alpha=alpha, seed=1000 * r + n)
        runs.append(regression_run(d.X, d.y, d.users, d.label_range, eps, r, d.coef))
    _CACHE[key] = {"n": n, "alpha": alpha, "epsilon": eps, "methods": _average(runs)}
    log(
        f"  [synthetic] n={n} alpha={alpha:g} eps={eps:g}: "
        + ", ".join(f"{m} {v['prediction_mse']:.0f}" for m, v in _CACHE[key]["methods"].items())
    )
    return _CACHE[key]


def load_drugs(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The derived drugs table: user (drug name), y (rating 1..10) and 8 one-hot features."""
    with gzip.open(path, "rt", newline="") as f:
        rows = list(csv.reader(f))
    header, body = rows[0], rows[1:]
    users = np.array([r[header.index("user")] for r in body])
    y = np.array([float(r[header.index("y")]) for r in body])
    feats = [i for i, h in enumerate(header) if h not in ("user", "y")]
    X = np.array([[float(r[i]) for i in feats] for r in body])
    return X, y, users


def regression_drugs(path: Path, reps: int) -> list[dict[str, Any]]:
    X, y, users = load_drugs(path)
    out = []
    for eps in EPSILONS:
        runs = [regression_run(X, y, users, (1.0, 10.0), eps, r) for r in range(reps)]
        out.append({"epsilon": eps, "methods": _average(runs)})
        log(
            f"  [drugs] eps={eps:g} "
            + ", ".join(f"{m} {v['prediction_mse']:.2f}" for m, v in out[-1]["methods"].items())
        )
    return out


# -- 4. weighted ERM -----------------------------------------------------------------------------
def erm_setting(eps: float, reps: int) -> dict[str, Any]:
    out: dict[str, list[float]] = {"smooth": [], "limit": []}
    excess: dict[str, list[float]] = {"smooth": [], "limit": []}
    bayes = []
    for r in range(reps):
        d = zipf_regression(50_000, 10, noise=0.0, alpha=1.5, max_size=2_000, seed=77 + r)
        beta = d.coef / np.linalg.norm(d.coef) * 2.0
        logits = d.X @ beta
        rng = np.random.default_rng(r)
        labels = (rng.random(logits.size) < 1 / (1 + np.exp(-logits))).astype(float)
        test_X = rng.standard_normal((20_000, 10))
        test_y = (rng.random(20_000) < 1 / (1 + np.exp(-(test_X @ beta)))).astype(float)
        for weighting in out:
            m = WeightedERM(
                loss="logistic", epsilon=eps, delta=1e-6, weighting=weighting, seed=r
            ).fit(d.X, labels, d.users)
            out[weighting].append(float(np.mean(m.predict(test_X) == test_y)))
            excess[weighting].append(
                _log_loss(m.decision_function(test_X), test_y) - _log_loss(test_X @ beta, test_y)
            )
        bayes.append(float(np.mean((test_X @ beta > 0) == test_y)))
    return {
        "epsilon": eps,
        "accuracy": {k: float(np.mean(v)) for k, v in out.items()},
        "excess_log_loss": {k: float(np.mean(v)) for k, v in excess.items()},
        "bayes_accuracy": float(np.mean(bayes)),
    }


def _log_loss(scores: np.ndarray, labels: np.ndarray) -> float:
    """Mean logistic loss of real-valued scores against 0/1 labels."""
    return float(np.mean(np.logaddexp(0.0, -np.where(labels == 1.0, 1.0, -1.0) * scores)))


# -- output -------------------------------------------------------------------------------------
def plots(results: dict[str, Any], out_dir: Path) -> list[str]:
    plt = pyplot()
    if plt is None:
        return []
    files = []
    fig, axes = plt.subplots(1, len(EPSILONS), figsize=(5 * len(EPSILONS), 4), squeeze=False)
    for ax, eps in zip(axes[0], EPSILONS, strict=True):
        rows = [r for r in results["mean"] if r["epsilon"] == eps]
        for name in ESTIMATORS:
            ax.plot(
                [r["alpha"] for r in rows],
                [r["methods"][name]["mse"] for r in rows],
                marker="o",
                label=name,
            )
        ax.set_yscale("log")
        ax.set_xlabel("Zipf alpha of user sizes")
        ax.set_ylabel("MSE of the mean")
        ax.set_title(f"mean, epsilon = {eps:g}")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    files.append(out_dir / "contribution_bounding_mean.png")
    fig.savefig(files[-1], dpi=120)
    plt.close(fig)
    if results.get("regression_n"):
        fig, ax = plt.subplots(figsize=(6, 4))
        rows = results["regression_n"]
        for name in (*REG_METHODS, "ols (non-private)"):
            ax.plot(
                [r["n"] for r in rows],
                [r["methods"][name]["prediction_mse"] for r in rows],
                marker="o",
                label=name,
            )
        ax.set_yscale("log")
        ax.set_xlabel("records n (d = 10, Zipf 1.5 user sizes)")
        ax.set_ylabel("average squared prediction error")
        ax.set_title("label-private linear regression, epsilon = 1")
        ax.legend(fontsize=7)
        fig.tight_layout()
        files.append(out_dir / "contribution_bounding_regression.png")
        fig.savefig(files[-1], dpi=120)
        plt.close(fig)
    return [str(f) for f in files]


def _ratios(m: dict[str, dict[str, float]]) -> str:
    """Best sample limiting over GWA: prediction MSE, and its excess over non-private OLS."""
    best, gwa = m["sample-limit best h"]["prediction_mse"], m["gwa"]["prediction_mse"]
    floor = m["ols (non-private)"]["prediction_mse"]
    return (
        f"  [best SL / GWA: {best / gwa:.1f}x; excess over OLS "
        f"{(best - floor) / max(gwa - floor, 1e-12):.1f}x]"
    )


def print_summary(results: dict[str, Any]) -> None:
    print("\nMean: MSE x 1e4 (standard error), 2,000 users, values in [0, 10]")
    names = list(ESTIMATORS)
    print(
        f"{'alpha':>5} {'eps':>3}  "
        + "  ".join(f"{n[:24]:>24}" for n in names)
        + "   claim1/claim2"
    )
    for r in results["mean"]:
        cells = [
            f"{r['methods'][n]['mse'] * 1e4:9.3f} ({r['methods'][n]['se'] * 1e4:.3f})"
            for n in names
        ]
        ratio = r["claim1_variance"] / r["claim2_variance"]
        print(
            f"{r['alpha']:5g} {r['epsilon']:3g}  "
            + "  ".join(f"{c:>24}" for c in cells)
            + f"   {ratio:.3f}"
        )
    print("Paired MSE difference x 1e4, weighted - sample-limit (negative: weighted better)")
    for r in results["mean"]:
        print(
            f"  alpha {r['alpha']:g} eps {r['epsilon']:g}: "
            + ", ".join(
                f"{k} {v['mse_difference'] * 1e4:+.3f} ({v['se'] * 1e4:.3f})"
                for k, v in r["paired"].items()
            )
        )
    for p in results.get("pipelinedp_mean") or []:
        print(
            f"PipelineDP MEAN, alpha 1.5, eps {p['epsilon']:g}: MSE x 1e4 {p['mse'] * 1e4:.3f} "
            f"({p['se'] * 1e4:.3f}) at its best bound {p['bound']}"
        )
    if results.get("median"):
        print("\nMedian (public sizes): MSE x 1e4, weighted vs sample-limit")
        for r in results["median"]:
            m = r["methods"]
            print(
                f"  alpha {r['alpha']:g} eps {r['epsilon']:g}: {m['weighted']['mse'] * 1e4:.3f} "
                f"vs {m['sample-limit']['mse'] * 1e4:.3f}"
            )
    for key, title in (
        ("regression_n", "n"),
        ("regression_eps", "epsilon"),
        ("regression_alpha", "alpha"),
    ):
        rows = results.get(key)
        if not rows:
            continue
        print(f"\nRegression (synthetic, d=10, noise 20), prediction MSE by {title}")
        for r in rows:
            m = r["methods"]
            print(
                f"  n={r['n']} alpha={r['alpha']:g} eps={r['epsilon']:g}: "
                + ", ".join(f"{k} {v['prediction_mse']:.1f}" for k, v in m.items())
                + _ratios(m)
            )
    if results.get("drugs"):
        print(
            "\nDrugs (n=3107, m=502, d=8 + intercept), prediction MSE; paper Table 1: "
            "3.1/2.5/2.3 vs 24.8/7.7/4.5 vs 95.4/25.2/12.4"
        )
        for r in results["drugs"]:
            m = r["methods"]
            print(
                f"  eps={r['epsilon']:g}: "
                + ", ".join(f"{k} {v['prediction_mse']:.2f}" for k, v in m.items())
                + _ratios(m)
            )
    if results.get("erm"):
        print(
            "\nWeighted ERM (logistic, 50k records, Zipf 1.5, L = 1, h chosen privately): "
            "test accuracy"
        )
        for r in results["erm"]:
            a = r["accuracy"]
            x = r["excess_log_loss"]
            print(
                f"  eps={r['epsilon']:g}: smooth {a['smooth']:.4f}, limit {a['limit']:.4f} "
                f"(true coefficients: {r['bayes_accuracy']:.4f}); excess log loss smooth "
                f"{x['smooth']:.4f}, limit {x['limit']:.4f}"
            )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=500, help="Repetitions per mean setting.")
    p.add_argument("--drugs", type=Path, default=DEFAULT_DRUGS)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", type=Path, default=RESULTS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    reps = 50 if args.quick else args.reps
    reg_reps = 3 if args.quick else 10
    alphas = (1.5, 3.0) if args.quick else ALPHAS
    started = time.perf_counter()
    results: dict[str, Any] = {
        "machine": machine(),
        "versions": versions(),
        "reps": reps,
        "mean": [],
        "median": [],
    }
    log("[mean]")
    for i, alpha in enumerate(alphas):
        for eps in EPSILONS:
            t0 = time.perf_counter()
            r = mean_setting(alpha, eps, reps, seed=i)
            results["mean"].append(r)
            w, s = (
                r["methods"]["weighted (public sizes)"],
                r["methods"]["sample-limit best h (public sizes)"],
            )
            log(
                f"  alpha={alpha:g} eps={eps:g}: weighted {w['mse']:.3e} vs best SL "
                f"{s['mse']:.3e} ({time.perf_counter() - t0:.1f} s)"
            )
    log("[pipelinedp mean]")
    pdp = [pipelinedp_mean(eps, reps, seed=1) for eps in EPSILONS]
    results["pipelinedp_mean"] = None if pdp[0] is None else pdp
    log("[median]")
    for i, alpha in enumerate(alphas):
        results["median"].append(median_setting(alpha, 1.0, max(50, reps // 5), seed=i))
    log("[regression]")
    ns = (600, 3000) if args.quick else (600, 1200, 1800, 2400, 3000)
    results["regression_n"] = [regression_synthetic(n, 1.5, 1.0, reg_reps) for n in ns]
    results["regression_eps"] = [regression_synthetic(3000, 1.5, e, reg_reps) for e in EPSILONS]
    results["regression_alpha"] = [regression_synthetic(3000, a, 1.0, reg_reps) for a in alphas]
    if args.drugs.exists():
        results["drugs"] = regression_drugs(args.drugs, reg_reps)
    else:
        log(f"[drugs] not found at {args.drugs}: skipped")
    log("[erm]")
    results["erm"] = [erm_setting(eps, 2 if args.quick else 5) for eps in EPSILONS]
    results["seconds"] = time.perf_counter() - started
    finish(results, args.out, "contribution_bounding", plots, print_summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
