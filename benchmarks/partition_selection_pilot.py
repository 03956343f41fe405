"""Pilot for the defaults of tight composition, on a pilot draw only.

Every default (precision split, threshold-delta split, share of delta paid for thresholds,
b_max, number of rounds) is chosen here on ONE draw of the Zipf generator (seed 0, 200,000 users,
item exponent 1.1), never on the datasets the benchmark reports. Run from the repository root::

    nice -n 10 python benchmarks/partition_selection_pilot.py [--seeds 3] [--out FILE]

Passes, in order: ``--part all`` (first grid), ``--part wide`` (larger round-1 shares, after
the first grid peaked at its edge), ``--part final`` (after the removal fix; the chosen split's
b_max check), ``--part pooled --seeds 2`` (the pooled final test: rounds, precision schedule and
threshold-delta split of today's default). Prints mean +- sd output sizes of MAD2R (and
DP-SIPS) per setting, and writes them as JSON.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from userdp.data import zipf_contributions
from userdp.partition import select_partitions

EPS, DELTA = 1.0, 1e-5
HERE = Path(__file__).resolve().parent


def sizes(c: Any, seeds: int, **options: Any) -> dict[str, Any]:
    out = [
        len(select_partitions(c, epsilon=EPS, delta=DELTA, seed=s, **options)) for s in range(seeds)
    ]
    a = np.asarray(out, float)
    return {"options": options, "sizes": out, "mean": a.mean(), "sd": a.std(ddof=1)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--users", type=int, default=200_000)
    p.add_argument("--out", type=Path, default=HERE / "results" / "partition_pilot.json")
    p.add_argument(
        "--part",
        choices=("all", "wide", "final", "pooled"),
        default="all",
        help="wide: the second pass, larger round-1 precision shares (after 'all' found the "
        "best at the top of its grid)",
    )
    args = p.parse_args()
    c = zipf_contributions(args.users, item_exponent=1.1, seed=0)  # the pilot draw
    print(f"pilot draw: {c}", flush=True)
    rows: list[dict[str, Any]] = []

    def show(tag: str, r: dict[str, Any]) -> None:
        r["tag"] = tag
        rows.append(r)
        print(f"{tag:60s} {r['mean']:8.1f} +- {r['sd']:5.1f}", flush=True)

    t0 = time.perf_counter()
    if args.part == "pooled":  # the pooled final test: rounds and precision schedule (2 seeds)
        show("mad2r 2 rounds unpooled (former default)", sizes(c, args.seeds, pooled=False))
        for k in (3, 4, 5, 6, 8):  # p_r proportional to r, dt 5% over rounds < k, 95% pooled
            show(f"mad2r pooled {k} rounds, linear schedule", sizes(c, args.seeds, rounds=k))
        q = 0.05 / 3
        for fr in ((0.2, 0.2, 0.2, 0.4), (0.05, 0.15, 0.3, 0.5), (0.15, 0.2, 0.25, 0.4)):
            show(
                f"mad2r pooled 4 rounds p={fr}",
                sizes(c, args.seeds, rounds=4, fractions=fr, delta_fractions=(q, q, q, 0.95)),
            )
        for share in (0.02, 0.1):
            d = (share / 3,) * 3 + (1 - share,)
            show(f"mad2r pooled 4 rounds dt={d}", sizes(c, args.seeds, delta_fractions=d))
        show(
            "mad2r 4 rounds unpooled, capped once",
            sizes(
                c,
                args.seeds,
                rounds=4,
                pooled=False,
                recap=False,
                fractions=(0.1, 0.2, 0.3, 0.4),
                delta_fractions=(q, q, q, 0.95),
            ),
        )
        for k in (3, 4):
            show(
                f"dp-sips pooled {k} rounds",
                sizes(c, args.seeds, algorithm="dp-sips", rounds=k, pooled=True),
            )
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"draw": str(c), "rows": rows}, indent=2, default=float))
        return 0
    if args.part == "final":  # third pass, after the round-r removal used min_{s>=r} rho_s
        for p1 in (0.3, 0.4, 0.5, 0.6, 0.7):
            show(
                f"mad2r gaussian p=({p1}, {1 - p1:g}) dt=(0.1, 0.9)",
                sizes(c, args.seeds, fractions=(p1, 1 - p1), delta_fractions=(0.1, 0.9)),
            )
        for fr in (
            (0.1, 0.1, 0.8),
            (0.1, 0.2, 0.7),
            (0.2, 0.2, 0.6),
            (0.3, 0.2, 0.5),
            (0.2, 0.3, 0.5),
        ):
            show(
                f"mad2r gaussian 3 rounds p={fr} dt=(0.1, 0.2, 0.7)",
                sizes(c, args.seeds, rounds=3, fractions=fr, delta_fractions=(0.1, 0.2, 0.7)),
            )
        for b_max in (1.25, 2.0):  # 10 paired seeds at the chosen split
            show(
                f"mad2r gaussian p=(0.4, 0.6) b_max={b_max} (10 seeds)",
                sizes(c, 10, fractions=(0.4, 0.6), delta_fractions=(0.1, 0.9), b_max=b_max),
            )
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"draw": str(c), "rows": rows}, indent=2, default=float))
        return 0
    if args.part == "wide":
        for p1 in (0.1, 0.15, 0.2, 0.3, 0.4):
            show(
                f"mad2r gaussian p=({p1}, {1 - p1:g}) dt=(0.1, 0.9) share=0.5",
                sizes(c, args.seeds, fractions=(p1, 1 - p1), delta_fractions=(0.1, 0.9)),
            )
        for fr in ((0.05, 0.1, 0.85), (0.1, 0.1, 0.8), (0.1, 0.2, 0.7), (0.05, 0.2, 0.75)):
            for alg in ("mad2r", "dp-sips"):
                show(
                    f"{alg} gaussian 3 rounds p={fr} dt=(0.1, 0.2, 0.7)",
                    sizes(
                        c,
                        args.seeds,
                        algorithm=alg,
                        rounds=3,
                        fractions=fr,
                        delta_fractions=(0.1, 0.2, 0.7),
                    ),
                )
        for fr in ((0.05, 0.95), (0.1, 0.9), (0.2, 0.8), (0.3, 0.7)):
            show(
                f"dp-sips gaussian p={fr} dt=(0.1, 0.9)",
                sizes(c, args.seeds, algorithm="dp-sips", fractions=fr, delta_fractions=(0.1, 0.9)),
            )
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"draw": str(c), "rows": rows}, indent=2, default=float))
        return 0
    show("mad2r basic (old default)", sizes(c, args.seeds, composition="basic"))
    # 2 rounds: precision split x threshold split x threshold share
    for p1, q1, share in itertools.product(
        (0.01, 0.02, 0.03, 0.05, 0.1), (0.05, 0.1, 0.25), (0.25, 0.5, 0.75)
    ):
        show(
            f"mad2r gaussian p=({p1}, {1 - p1:g}) dt=({q1}, {1 - q1:g}) share={share}",
            sizes(
                c,
                args.seeds,
                fractions=(p1, 1 - p1),
                delta_fractions=(q1, 1 - q1),
                threshold_share=share,
            ),
        )
    # 3 rounds
    for p1, p2 in ((0.01, 0.04), (0.01, 0.02), (0.005, 0.025), (0.02, 0.05)):
        for alg in ("mad2r", "dp-sips"):
            show(
                f"{alg} gaussian 3 rounds p=({p1}, {p2}, {1 - p1 - p2:g}) dt=(0.1, 0.2, 0.7)",
                sizes(
                    c,
                    args.seeds,
                    algorithm=alg,
                    rounds=3,
                    fractions=(p1, p2, 1 - p1 - p2),
                    delta_fractions=(0.1, 0.2, 0.7),
                ),
            )
    show("dp-sips gaussian 2 rounds (default)", sizes(c, args.seeds, algorithm="dp-sips"))
    # b_max: 10 seeds each, at the default composition
    for b_max in (1.25, 2.0):
        show(f"mad2r gaussian b_max={b_max} (10 seeds)", sizes(c, 10, b_max=b_max))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"draw": str(c), "rows": rows}, indent=2, default=float))
    print(f"{time.perf_counter() - t0:.0f} s; wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
