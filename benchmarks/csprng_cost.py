"""Cost of cryptographic noise (AES-128-CTR, the unseeded default) against seeded PCG64DXSM.

Run from the repository root::

    nice -n 10 python benchmarks/csprng_cost.py           # full run (a few minutes, ~1.5 GB)
    nice -n 10 python benchmarks/csprng_cost.py --quick   # smoke run, seconds

A :class:`userdp.privacy.NoiseSource` without a seed draws from ``randomgen.AESCounter`` keyed
from OS entropy; with a seed it draws from PCG64DXSM (tests, reproducible benchmarks). Only the
noise step differs, so the script times (best of ``--repeats``, the two alternating):

1. Raw draws: ``--draws`` standard normals from each generator.
2. The recommender's Gram stack, the largest single release: ``--gram-items x --gram-dim^2``
   values (default 10,000 x 64^2 = 41M, the size of a 10M-rating MovieLens-like set's item
   Grams at dim 64) through :meth:`NoiseSource.add_gaussian` (safe noise).
3. MAD2R's noise at ~26M pairs: two rounds of safe Gaussian noise on one weight per item
   (``--mad2r-items``, 1M item ranks) on the runners' public grid, through the sub-streams.
4. End to end, as proxies on the shared 2-core machine: MAD2R ``select_partitions`` on
   ``zipf_contributions(--mad2r-users)`` and ``MatrixFactorization`` (adadpals) on
   ``lowrank_ratings`` with ``--ratings`` ratings, seeded vs unseeded. The noise cost scales
   with the number of noised values (items, Gram entries), not with pairs or ratings, so rows
   2-3 give it at full size and these rows say what share of a whole run it is.

Writes ``csprng_cost.json`` and ``csprng_cost.png`` to ``--out-dir`` (default
``benchmarks/results/``) and prints a summary.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from _harness import finish, log, pyplot
from userdp.privacy import NoiseSource, gaussian_on_grid, gaussian_sigma
from userdp.privacy.noise import spawn_generator

HERE = Path(__file__).resolve().parent


def alternate(seeded: Callable[[], object], secret: Callable[[], object], repeats: int) -> tuple:
    """Best time of each of two callables, run alternately ``repeats`` times."""
    a, b = [], []
    for _ in range(repeats):
        for fn, out in ((seeded, a), (secret, b)):
            t = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t)
    return min(a), min(b)


def row(release: str, values: int, seeded: float, secret: float, **extra: Any) -> dict:
    return {
        "release": release,
        "values": values,
        "pcg64dxsm_s": seeded,
        "aes_ctr_s": secret,
        "ratio": secret / seeded,
        "extra_s": secret - seeded,
        **extra,
    }


def raw_draws(n: int, repeats: int) -> dict[str, Any]:
    seeded, secret = NoiseSource(seed=1), NoiseSource()
    a, b = alternate(lambda: seeded.gaussian(1.0, n), lambda: secret.gaussian(1.0, n), repeats)
    return row(f"raw normal draws, {n:,}", n, a, b)


def gram_stack(m: int, d: int, repeats: int) -> dict[str, Any]:
    x = np.random.default_rng(0).normal(0.0, 3.0, (m, d * d))  # stands for the exact Grams
    sigma = gaussian_sigma(1.0, 1e-5)
    seeded, secret = NoiseSource(seed=1), NoiseSource()

    def release(source: NoiseSource) -> Callable[[], object]:
        return lambda: source.add_gaussian(x, sigma, statistic="gram", l2=1.0)

    a, b = alternate(release(seeded), release(secret), repeats)
    return row(f"Gram stack {m:,} x {d}^2 (safe Gaussian)", int(x.size), a, b)


def mad2r_noise(n_items: int, repeats: int) -> dict[str, Any]:
    from userdp.partition.rounds import WEIGHT_GRID_ITEMS

    weights = np.random.default_rng(0).exponential(1.0, n_items)
    sigma = 4.3039  # MAD2R round 2 at (1, 1e-5)
    seeded, secret = NoiseSource(seed=1).entropy, NoiseSource().entropy

    def rounds(entropy: int) -> Callable[[], object]:
        def draw() -> object:
            return [
                gaussian_on_grid(
                    spawn_generator(entropy, (r, 0)), weights, sigma, l2=1.0, size=WEIGHT_GRID_ITEMS
                )
                for r in range(2)
            ]

        return draw

    a, b = alternate(rounds(seeded), rounds(secret), repeats)
    return row(f"MAD2R weights, 2 rounds x {n_items:,} items", 2 * n_items, a, b)


def mad2r_end_to_end(n_users: int, repeats: int) -> dict[str, Any]:
    from userdp.data import zipf_contributions
    from userdp.partition import select_partitions

    data = zipf_contributions(n_users, seed=12345)
    pairs = int(data.n_pairs)

    def run(seed: int | None) -> Callable[[], object]:
        return lambda: select_partitions(
            data, epsilon=1.0, delta=1e-5, algorithm="mad2r", seed=seed
        )

    a, b = alternate(run(1), run(None), repeats)
    return row(f"MAD2R end to end, {pairs:,} pairs", pairs, a, b, pairs=pairs)


def recommender_end_to_end(n_ratings: int, repeats: int) -> dict[str, Any]:
    from userdp.data.synthetic import lowrank_ratings
    from userdp.recommend import MatrixFactorization

    scale = n_ratings / 10_000_054
    n_users, n_items = max(int(69_878 * scale), 100), max(int(10_677 * scale**0.5), 50)
    ratings = lowrank_ratings(n_users, n_items, n_ratings, seed=0)
    items = list(range(n_items))

    def run(seed: int | None) -> Callable[[], object]:
        def fit() -> object:
            model = MatrixFactorization(
                epsilon=1.0,
                delta=1e-5,
                items=items,
                dim=32,
                steps=3,
                rating_range=(0.5, 5.0),
                seed=seed,
            )
            return model.fit(ratings)

        return fit

    a, b = alternate(run(1), run(None), repeats)
    return row(
        f"adadpals end to end, {n_ratings:,} ratings, {n_items:,} items",
        n_ratings,
        a,
        b,
        items=n_items,
    )


def plot(results: dict[str, Any], out_dir: Path) -> list[Path]:
    plt = pyplot()
    if plt is None:
        return []
    rows = results["rows"]
    fig, ax = plt.subplots(figsize=(8, 3.5))
    y = np.arange(len(rows))
    ax.barh(y - 0.2, [r["pcg64dxsm_s"] for r in rows], 0.4, label="seeded (PCG64DXSM)")
    ax.barh(y + 0.2, [r["aes_ctr_s"] for r in rows], 0.4, label="default (AES-128-CTR)")
    ax.set_yticks(y, [r["release"] for r in rows], fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("seconds (best of repeats, log scale)")
    ax.legend(loc="lower right", fontsize=7)
    fig.tight_layout()
    path = out_dir / "csprng_cost.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return [path]


def summary(results: dict[str, Any]) -> None:
    print(f"{'release':58s} {'values':>12s} {'PCG s':>9s} {'AES s':>9s} {'ratio':>6s}")
    for r in results["rows"]:
        print(
            f"{r['release']:58s} {r['values']:>12,} {r['pcg64dxsm_s']:>9.4g} "
            f"{r['aes_ctr_s']:>9.4g} {r['ratio']:>6.2f}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="Small sizes, seconds.")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--draws", type=int, default=10_000_000)
    parser.add_argument("--gram-items", type=int, default=10_000)
    parser.add_argument("--gram-dim", type=int, default=64)
    parser.add_argument("--mad2r-items", type=int, default=1_000_000)
    parser.add_argument("--mad2r-users", type=int, default=200_000)
    parser.add_argument("--ratings", type=int, default=1_000_000)
    parser.add_argument("--skip-end-to-end", action="store_true")
    parser.add_argument("--out-dir", type=Path, default=HERE / "results")
    args = parser.parse_args()
    if args.quick:
        args.draws, args.gram_items, args.gram_dim = 100_000, 200, 16
        args.mad2r_items, args.mad2r_users, args.ratings = 10_000, 5_000, 20_000
    started = time.perf_counter()
    rows = [
        raw_draws(args.draws, args.repeats),
        gram_stack(args.gram_items, args.gram_dim, args.repeats),
        mad2r_noise(args.mad2r_items, args.repeats),
    ]
    log("noise steps timed")
    if not args.skip_end_to_end:
        rows.append(mad2r_end_to_end(args.mad2r_users, args.repeats))
        log("MAD2R end to end timed")
        rows.append(recommender_end_to_end(args.ratings, args.repeats))
    results = {
        "command": shlex.join([sys.executable, *sys.argv]),
        "rows": rows,
        "seconds": time.perf_counter() - started,
    }
    finish(results, args.out_dir, "csprng_cost", plot, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
