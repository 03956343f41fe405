"""Time per run of the default MAD2R (pooled, 4 rounds) against the former default (2 rounds).

Run from the repository root::

    nice python benchmarks/partition_time_per_run.py                  # this checkout's src
    nice python benchmarks/partition_time_per_run.py --before-src /tmp/before/src --repeats 2

On the shared Zipf set, the npm summaries as words and as words + bigrams (built as
``benchmarks/partition_selection.py`` builds them; each skipped when its file is absent;
``--quick``: a generated Zipf set of 20,000 users and 2 seeds instead, < 1 minute), every
seed runs ``select_partitions(data, epsilon=1, delta=1e-5, seed=s)`` then the same with
``pooled=False``, alternated in one process after one warm-up run of each (a ``--before-src``
from before the ``pooled`` option runs its own default alone). Each run is timed
in CPU seconds (``time.process_time``, less sensitive to the other processes on a shared
machine) and in wall seconds. With ``--before-src`` the script alternates fresh processes of
the two versions (``--repeats`` each), so both see the same load. Prints the medians, the
ratio default / ``pooled=False`` of the medians, with ``--before-src`` the ratio of the two
versions' defaults, and the load average; writes
``partition_time_per_run.json`` to ``--out-dir`` (default ``benchmarks/results/``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from _harness import DEFAULT_NPM, RESULTS, SHARED_DATA, finish, log, npm_contributions

HERE = Path(__file__).resolve().parent
SETTINGS = (("default", {}), ("pooled=False", {"pooled": False}))
DEFAULT_ZIPF = SHARED_DATA / "partition/synth_zipf_200k.user_item.tsv.gz"


def datasets(zipf_path: Path, npm_path: Path, quick: bool) -> dict[str, Any]:
    from userdp.data import read, zipf_contributions

    if quick:
        return {"generated Zipf, 20k users": zipf_contributions(20_000, seed=1)}
    out: dict[str, Any] = {}
    if zipf_path.exists():
        out["shared Zipf"] = read(
            zipf_path, user_column="user", item_column="item", format="tsv", header=False
        )
    if npm_path.exists():
        out["npm words"] = npm_contributions(npm_path, bigrams=False)
        out["npm words+bigrams"] = npm_contributions(npm_path, bigrams=True)
    return out


def worker(args: argparse.Namespace) -> None:
    """One process: every dataset, seed and setting; prints one JSON line."""
    import userdp
    from userdp.partition import select_partitions

    out: dict[str, Any] = {"src": str(Path(userdp.__file__).parent.parent), "runs": {}}
    for name, data in datasets(args.zipf_path, args.npm_path, args.quick).items():
        settings = []
        for setting, options in SETTINGS:  # warm-up: first-call imports and caches
            try:
                select_partitions(data, epsilon=1.0, delta=1e-5, seed=10_000, **options)
            except ValueError:  # a src from before the option: time its default alone
                continue
            settings.append((setting, options))
        runs: dict[str, dict[str, list[float]]] = {s: {"cpu": [], "wall": []} for s, _ in settings}
        for seed in range(args.seeds):
            for setting, options in settings:
                c, w = time.process_time(), time.perf_counter()
                select_partitions(data, epsilon=1.0, delta=1e-5, seed=seed, **options)
                runs[setting]["cpu"].append(time.process_time() - c)
                runs[setting]["wall"].append(time.perf_counter() - w)
        out["runs"][name] = runs
    print(json.dumps(out))


def run_worker(src: str, args: argparse.Namespace) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(Path(src).resolve())}
    cmd = [sys.executable, __file__, "--_worker", "--seeds", str(args.seeds)]
    cmd += ["--zipf-path", str(args.zipf_path), "--npm-path", str(args.npm_path)]
    cmd += ["--quick"] if args.quick else []
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=HERE.parent)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        raise RuntimeError(f"worker failed ({p.returncode}): {p.stderr[-2000:]}")
    return json.loads(lines[-1])


def summary(results: dict[str, Any]) -> None:
    print(f"\nmedians over {results['seeds']} seeds x {results['repeats']} process(es) each:")
    for side, per_data in results["medians"].items():
        print(f"  {side}:")
        for name, m in per_data.items():
            if "pooled=False" not in m:
                print(f"    {name:18s} CPU {m['default']['cpu']:.3f} s (its default only)")
                continue
            print(
                f"    {name:18s} CPU {m['default']['cpu']:.3f} / {m['pooled=False']['cpu']:.3f} s"
                f" = {m['ratio_cpu']:.2f}x   wall {m['default']['wall']:.3f} / "
                f"{m['pooled=False']['wall']:.3f} s = {m['ratio_wall']:.2f}x"
            )
    for name, r in results.get("after_over_before", {}).items():
        print(
            f"  default after / default before, {name}: CPU {r['cpu']:.2f}x, wall {r['wall']:.2f}x"
        )
    print(f"  load average before / after: {results['load_before']} / {results['load_after']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--zipf-path", type=Path, default=DEFAULT_ZIPF)
    ap.add_argument("--npm-path", type=Path, default=DEFAULT_NPM)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=1, help="fresh processes per version")
    ap.add_argument("--before-src", help="also time this src, alternating processes")
    ap.add_argument("--quick", action="store_true", help="generated data, 2 seeds: smoke run")
    ap.add_argument("--out-dir", type=Path, default=RESULTS)
    ap.add_argument("--_worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.quick:
        args.seeds = min(args.seeds, 2)
    if args._worker:
        worker(args)
        return
    sides = {} if args.before_src is None else {"before": args.before_src}
    sides["after"] = str(HERE.parent / "src")  # this checkout's
    results: dict[str, Any] = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "seeds": args.seeds,
        "repeats": args.repeats,
        "load_before": os.getloadavg(),
    }
    raw: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    for rep in range(args.repeats):
        for side, src in sides.items():
            log(f"repeat {rep + 1}: {side} ({src}) ...")
            raw[side].append(run_worker(src, args))
    results["load_after"] = os.getloadavg()
    results["raw"] = raw
    medians: dict[str, Any] = {}
    for side, outs in raw.items():
        medians[side] = {}
        for name in outs[0]["runs"]:
            m: dict[str, Any] = {}
            for setting in outs[0]["runs"][name]:
                m[setting] = {
                    k: float(np.median([t for o in outs for t in o["runs"][name][setting][k]]))
                    for k in ("cpu", "wall")
                }
            if "pooled=False" in m:
                for k in ("cpu", "wall"):
                    m[f"ratio_{k}"] = m["default"][k] / m["pooled=False"][k]
            medians[side][name] = m
    results["medians"] = medians
    if "before" in medians:  # each version's own default (the question for a user upgrading)
        results["after_over_before"] = {
            name: {
                k: m["default"][k] / medians["before"][name]["default"][k] for k in ("cpu", "wall")
            }
            for name, m in medians["after"].items()
        }
    finish(results, args.out_dir, "partition_time_per_run", None, summary)


if __name__ == "__main__":
    main()
