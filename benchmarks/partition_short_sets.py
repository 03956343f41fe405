"""The gap between MAD2R and GreedyUpdate on data with short user sets, and the private cap.

GreedyUpdate (sequential, l1 weights, Laplace noise, cap 10) releases a little more than the
pooled MAD2R default where every user holds a few items. This script measures one remedy that
needs no new privacy argument: ``max_items_per_user="auto"``, which spends a small share of the
budget on a noisy histogram of user degrees (l2 sensitivity 1, one more Gaussian in the run's
composition; see :func:`userdp.partition.rounds.plan_rounds`) and picks the cap from it. Run from
the repository root::

    nice -n 10 python benchmarks/partition_short_sets.py [--seeds 5] [--out FILE]

Data: the npm package summaries' words (one summary = one user; skipped when the listing is
absent), the Section 6.2 instance of Chen et al. 2025 (15,000 users, one heavy and two of 1,000
light items each) and the pilot draw of the Zipf generator (seed 0, 200,000 users, exponent 1.1),
the draw every default was chosen on. Prints mean +- sd output sizes per variant and the caps the
automatic rule chose, and writes them as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from _harness import DEFAULT_NPM, RESULTS, log, npm_contributions, pyplot, versions
from userdp.data import section62_instance, zipf_contributions
from userdp.partition import select_partitions

EPS, DELTA = 1.0, 1e-5
VARIANTS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("mad2r (default, cap 100)", "mad2r", {"max_items_per_user": 100}),
    ("mad2r auto cap", "mad2r", {"max_items_per_user": "auto"}),
    ("mad2r cap 4 (fixed)", "mad2r", {"max_items_per_user": 4}),
    ("greedy-update", "greedy-update", {}),
)


def run(c: Any, seeds: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for label, algo, opts in VARIANTS:
        sizes, caps, secs = [], [], []
        for s in range(seeds):
            r = select_partitions(c, epsilon=EPS, delta=DELTA, algorithm=algo, seed=s, **opts)
            sizes.append(len(r))
            caps.append(r.parameters.get("max_items_per_user"))
            secs.append(r.diagnostics.seconds)
        a = np.asarray(sizes, float)
        out[label] = {
            "sizes": sizes,
            "mean": float(a.mean()),
            "sd": float(a.std(ddof=1)),
            "caps": caps,
            "seconds_mean": float(np.mean(secs)),
        }
        log(f"    {label:26s} {a.mean():8.1f} +- {a.std(ddof=1):5.1f}  caps {caps}")
    return out


def plot(results: dict[str, Any], path: Path) -> Path | None:
    """Items released per variant (mean +- sd), one panel per dataset."""
    plt = pyplot()
    if plt is None:
        return None
    names = list(results["datasets"])
    fig, axes = plt.subplots(1, len(names), figsize=(4 * len(names), 4), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        rows = results["datasets"][name]
        labels = list(rows)
        ax.bar(
            range(len(labels)),
            [rows[k]["mean"] for k in labels],
            yerr=[rows[k]["sd"] for k in labels],
        )
        ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize=7)
        ax.set_title(name, fontsize=9)
        ax.set_ylabel("items released")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--npm-path", type=Path, default=DEFAULT_NPM)
    p.add_argument("--out", type=Path, default=RESULTS / "partition_short_sets.json")
    args = p.parse_args()
    t0 = time.perf_counter()
    data: dict[str, Any] = {}
    data["section62 (Delta_0=100)"] = section62_instance()
    if args.npm_path.exists():
        data["npm words"] = npm_contributions(args.npm_path, bigrams=False)
    else:
        log(f"{args.npm_path} not found: skipping npm words")
    data["pilot draw (zipf seed 0)"] = zipf_contributions(200_000, item_exponent=1.1, seed=0)
    results: dict[str, Any] = {
        "epsilon": EPS,
        "delta": DELTA,
        "seeds": list(range(args.seeds)),
        "load_average_start": os.getloadavg(),
        "versions": versions(),
        "datasets": {},
    }
    for name, c in data.items():
        log(f"{name}: {c}")
        results["datasets"][name] = run(c, args.seeds)
    results["load_average_end"] = os.getloadavg()
    results["seconds"] = time.perf_counter() - t0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    png = plot(results, args.out.with_suffix(".png"))
    if png is not None:
        results["pngs"] = [str(png)]
    args.out.write_text(json.dumps(results, indent=2))
    log(f"load average {results['load_average_start']} -> {results['load_average_end']}")
    log(f"{results['seconds']:.0f} s; wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
