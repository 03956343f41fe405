"""Cost of safe (grid-snapped) noise against textbook float noise, measured in the same run.

Run from the repository root::

    nice -n 10 python benchmarks/safe_noise.py           # full run (~2 minutes, ~3 GB peak)
    nice -n 10 python benchmarks/safe_noise.py --quick   # smoke run, seconds

Releases timed (best of ``--repeats``, same generator type, same sizes):

1. The recommender's per-item Gram stack: ``m x d^2`` values (default 10,000 items x 64^2 =
   41M values), Gaussian noise: ``x + rng.normal(0, sigma, x.shape)`` vs
   :func:`userdp.privacy.gaussian_on_grid`.
2. MAD2R at ~26M (user, item) pairs from :func:`userdp.data.zipf_contributions` (2M users, 1M
   item ranks): one end-to-end ``select_partitions(..., algorithm="mad2r")`` for scale, and the
   Gaussian noise on its weight vector (one entry per distinct item, two rounds) naive vs safe.
3. A mean: one scalar Laplace release, ``rng.laplace`` vs :meth:`NoiseSource.add_laplace`
   (per call, 10,000 calls).
4. When ``opendp`` is importable (not a userdp dependency): OpenDP's vetted samplers
   (``make_gaussian`` / ``make_laplace`` on a float vector) on ``--opendp-values`` values,
   extrapolated linearly to 10^7, against NumPy's naive noise on the same vector.

Writes ``safe_noise.json`` and ``safe_noise.png`` to ``--out-dir`` (default
``benchmarks/results/``) and prints a summary.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from userdp.privacy import NoiseSource, gaussian_on_grid, gaussian_sigma, laplace_on_grid

HERE = Path(__file__).resolve().parent


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def gram_stack(m: int, d: int, repeats: int) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    x = rng.normal(0.0, 3.0, (m, d * d))  # stands for the exact per-item Grams
    sigma = gaussian_sigma(1.0, 1e-5)
    naive = best_of(lambda: x + rng.normal(0.0, sigma, x.shape), repeats)
    safe = best_of(lambda: gaussian_on_grid(rng, x, sigma, l2=1.0), repeats)
    return {
        "release": f"Gram stack {m} x {d}^2",
        "values": int(x.size),
        "naive_s": naive,
        "safe_s": safe,
        "ratio": safe / naive,
    }


def mad2r(n_users: int, repeats: int) -> dict[str, Any]:
    from userdp.data import zipf_contributions
    from userdp.partition import select_partitions
    from userdp.partition.rounds import WEIGHT_GRID_ITEMS

    t = time.perf_counter()
    data = zipf_contributions(n_users, seed=12345)
    gen = time.perf_counter() - t
    pairs = int(data.n_pairs)
    t = time.perf_counter()
    res = select_partitions(data, epsilon=1.0, delta=1e-5, algorithm="mad2r", seed=1)
    end_to_end = time.perf_counter() - t
    n_items = int(data.n_items)  # the noised weight vector has one entry per item code
    del data
    rng = np.random.default_rng(0)
    weights = rng.exponential(1.0, n_items)
    sigma = 4.3039  # MAD2R round 2 at (1, 1e-5), docs/papers.md
    naive = 2 * best_of(lambda: weights + rng.normal(0.0, sigma, n_items), repeats)
    # as the runners call it: one grid for every item (WEIGHT_GRID_ITEMS), not the vector's size
    safe = 2 * best_of(
        lambda: gaussian_on_grid(rng, weights, sigma, l2=1.0, size=WEIGHT_GRID_ITEMS), repeats
    )
    return {
        "release": f"MAD2R weight vector, {pairs:,} pairs",
        "pairs": pairs,
        "values": n_items,
        "rounds": 2,
        "naive_s": naive,
        "safe_s": safe,
        "ratio": safe / naive,
        "mad2r_end_to_end_s": end_to_end,
        "overhead_of_end_to_end": (safe - naive) / end_to_end,
        "generate_s": gen,
        "released_items": len(res.items),
    }


def scalar_mean(calls: int, repeats: int) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    source = NoiseSource(seed=0)

    def naive() -> None:
        for _ in range(calls):
            float(0.3 + rng.laplace(0.0, 0.01))

    def safe() -> None:
        for _ in range(calls):
            float(source.add_laplace(0.3, 0.01, statistic="mean", l1=0.01))

    def safe_pure() -> None:
        for _ in range(calls):
            float(laplace_on_grid(rng, 0.3, 0.01, l1=0.01))

    n, s, p = (best_of(f, repeats) / calls for f in (naive, safe, safe_pure))
    return {
        "release": "mean (scalar Laplace), per call",
        "values": 1,
        "naive_s": n,
        "safe_s": s,
        "safe_pure_function_s": p,
        "ratio": s / n,
    }


def opendp_rows(n: int) -> list[dict[str, Any]]:
    try:
        import opendp.prelude as dp
    except ImportError:
        return []
    dp.enable_features("contrib")
    x = np.random.default_rng(0).normal(0.0, 3.0, n)
    rng = np.random.default_rng(1)
    naive = best_of(lambda: x + rng.normal(0.0, 3.7, n), 3)
    rows = []
    for name, make, metric in (
        ("gaussian", dp.m.make_gaussian, dp.l2_distance),
        ("laplace", dp.m.make_laplace, dp.l1_distance),
    ):
        space = dp.vector_domain(dp.atom_domain(T=float, nan=False), size=n), metric(T=float)
        mech = make(*space, scale=3.7)
        values = x.tolist()
        t = time.perf_counter()
        mech(values)
        took = time.perf_counter() - t
        rows.append(
            {
                "release": f"OpenDP {name}, {n:,} values",
                "values": n,
                "naive_s": naive,
                "safe_s": took,
                "ratio": took / naive,
                "per_1e7_s": took * 1e7 / n,
            }
        )
    return rows


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.5))
    labels = [r["release"] for r in rows]
    y = np.arange(len(rows))
    ax.barh(y - 0.2, [r["naive_s"] for r in rows], 0.4, label="textbook float noise")
    ax.barh(y + 0.2, [r["safe_s"] for r in rows], 0.4, label="safe (grid-snapped) noise")
    ax.set_yticks(y, labels)
    ax.set_xscale("log")
    ax.set_xlabel("seconds (log scale)")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="Small sizes, seconds.")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out-dir", type=Path, default=HERE / "results")
    parser.add_argument("--opendp-values", type=int, default=100_000)
    args = parser.parse_args()
    m, d, users = (500, 16, 20_000) if args.quick else (10_000, 64, 2_000_000)
    started = time.perf_counter()
    rows = [
        gram_stack(m, d, args.repeats),
        mad2r(users, args.repeats),
        scalar_mean(1000 if args.quick else 10_000, args.repeats),
        *opendp_rows(1000 if args.quick else args.opendp_values),
    ]
    out = {
        "command": shlex.join([sys.executable, *sys.argv]),
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "numpy": np.__version__,
            "processor": platform.processor(),
        },
        "rows": rows,
        "seconds": time.perf_counter() - started,
    }
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "safe_noise.json").write_text(json.dumps(out, indent=2))
    plot(rows, args.out_dir / "safe_noise.png")
    print(f"{'release':45s} {'values':>12s} {'naive s':>10s} {'safe s':>10s} {'ratio':>6s}")
    for r in rows:
        print(
            f"{r['release']:45s} {r['values']:>12,} {r['naive_s']:>10.4g} {r['safe_s']:>10.4g} "
            f"{r['ratio']:>6.2f}"
        )
    mr = rows[1]
    print(
        f"MAD2R end to end {mr['mad2r_end_to_end_s']:.2f} s on {mr['pairs']:,} pairs; safe "
        f"noise adds {100 * mr['overhead_of_end_to_end']:.2f}% of it"
    )
    print(f"wrote {args.out_dir / 'safe_noise.json'} and safe_noise.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
