"""Benchmark of partition selection against its one-pass floor: how much of a run is ingest.

Run from the repository root::

    python benchmarks/partition_ingest.py                 # 26M pairs, Parquet, 100M peak
    python benchmarks/partition_ingest.py --quick         # smoke run, < 1 minute
    nice python benchmarks/partition_ingest.py --repeats 5 --big 0   # no 100M run

The floor is what any selection has to do with the pairs: one pass that packs each (user,
item) pair of integer ids in a 64-bit key, sorts the keys (NumPy's vectorised sort), drops
repeated pairs and counts users per item (``np.bincount``). In the same process and
interleaved with it (so both see the same machine load), the script times:

1. ``select_partitions((users, items))`` (default algorithm, fixed seed) on unsorted integer
   pairs, split into ingest (``Contributions.from_columns``: encoding the ids, sorting and
   de-duplicating the pairs) and the algorithm on the built table;
2. the same from a Parquet file of the integer pairs (1M-row groups), against PyArrow's read
   of the file plus the floor on its columns;
3. the peak memory of a whole selection on ``--big`` pairs, in a fresh subprocess (VmHWM of
   ``/proc/self/status`` and ``ru_maxrss``, with the input's own size).

Medians over ``--repeats``; the machine's load average is recorded before and after. Writes
``partition_ingest.json`` and a PNG to ``--out-dir`` (default ``benchmarks/results/``).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from _harness import RESULTS, finish, log, peak_mb, pyplot, reset_peak, zipf_pairs

EPSILON, DELTA, SEED = 1.0, 1e-5, 0


def generate(n_pairs: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n_pairs`` int64 (user, item) pairs in random order (:func:`_harness.zipf_pairs`)."""
    users, items, _ = zipf_pairs(n_pairs, seed, shuffle=True)
    return users, items


def floor(users: np.ndarray, items: np.ndarray) -> np.ndarray:
    """One pass: pack, sort, drop repeated pairs, count users per item."""
    shift = max(int(items.max()).bit_length(), 1)
    key = users << shift
    key |= items
    key.sort()
    first = np.empty(key.size, dtype=bool)
    first[0] = True
    np.not_equal(key[1:], key[:-1], out=first[1:])
    key = key[first]
    key &= (1 << shift) - 1
    return np.bincount(key)


#: CPU seconds (``time.process_time``) of the last :func:`_timed` call: on a shared machine
#: less sensitive to the other processes than the wall time.
_LAST_CPU = [0.0]


def _timed(f: Any) -> tuple[float, Any]:
    gc.collect()
    c, t = time.process_time(), time.perf_counter()
    out = f()
    wall = time.perf_counter() - t
    _LAST_CPU[0] = time.process_time() - c
    return wall, out


def _record(runs: dict[str, list[float]], name: str, wall: float) -> None:
    """Record the wall time and the CPU time of the last :func:`_timed` call under ``name``."""
    runs[name].append(wall)
    runs.setdefault(f"{name}_cpu", []).append(_LAST_CPU[0])


def in_memory(n_pairs: int, repeats: int) -> dict[str, Any]:
    """Floor, ingest and select_partitions on the same unsorted integer pairs, interleaved."""
    from userdp.data import Contributions
    from userdp.partition import select_partitions

    log(f"generating {n_pairs:,} unsorted integer pairs ...")
    users, items = generate(n_pairs)
    runs: dict[str, list[float]] = {"floor": [], "ingest": [], "algorithm": [], "select": []}
    released = set()
    for rep in range(repeats):
        _record(runs, "floor", _timed(lambda: floor(users, items))[0])
        t, table = _timed(lambda: Contributions.from_columns(users, items))
        _record(runs, "ingest", t)
        t, _ = _timed(
            lambda table=table: select_partitions(table, epsilon=EPSILON, delta=DELTA, seed=SEED)
        )
        _record(runs, "algorithm", t)
        del table
        t, r = _timed(
            lambda: select_partitions((users, items), epsilon=EPSILON, delta=DELTA, seed=SEED)
        )
        _record(runs, "select", t)
        released.add(len(r.items))
        log(f"  repeat {rep + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in runs.items()))
    return {
        "n_pairs_raw": int(users.size),
        "n_pairs_distinct": r.diagnostics.n_pairs,
        "items_released": sorted(released),
        "seconds": runs,
        "median": {k: float(np.median(v)) for k, v in runs.items()},
    }


def from_parquet(n_pairs: int, repeats: int) -> dict[str, Any]:
    """select_partitions(read(path)) against PyArrow's read plus the floor on its columns."""
    import userdp.data
    from userdp.partition import select_partitions

    users, items = generate(n_pairs, seed=1)
    tmp = tempfile.mkdtemp(prefix="userdp-ingest-")
    path = os.path.join(tmp, "pairs.parquet")
    pq.write_table(pa.table({"user": users, "item": items}), path, row_group_size=1 << 20)
    del users, items
    log(f"Parquet file of {n_pairs:,} pairs: {os.path.getsize(path) / 2**20:.0f} MiB")

    def read_and_floor() -> None:
        t = pq.read_table(path)
        floor(t.column("user").to_numpy(), t.column("item").to_numpy())

    runs: dict[str, list[float]] = {"read": [], "read_floor": [], "select": []}
    try:
        for rep in range(repeats):
            _record(runs, "read", _timed(lambda: pq.read_table(path))[0])
            _record(runs, "read_floor", _timed(read_and_floor)[0])
            t, r = _timed(
                lambda: select_partitions(
                    userdp.data.read(path), epsilon=EPSILON, delta=DELTA, seed=SEED
                )
            )
            _record(runs, "select", t)
            log(f"  repeat {rep + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in runs.items()))
    finally:
        os.remove(path)
        os.rmdir(tmp)
    return {
        "n_pairs_raw": n_pairs,
        "items_released": len(r.items),
        "seconds": runs,
        "median": {k: float(np.median(v)) for k, v in runs.items()},
    }


def peak_worker(n_pairs: int) -> None:
    """Fresh process: generate, reset the peak, select; print one JSON line."""
    from userdp.partition import select_partitions

    users, items = generate(n_pairs)
    gc.collect()
    base = peak_mb() if reset_peak() else float("nan")
    t, r = _timed(lambda: select_partitions((users, items), epsilon=EPSILON, delta=DELTA, seed=0))
    out = {
        "n_pairs_raw": n_pairs,
        "n_pairs_distinct": r.diagnostics.n_pairs,
        "items_released": len(r.items),
        "seconds": t,
        "input_mb": (users.nbytes + items.nbytes) / 2**20,
        "rss_before_mb": base,
        "peak_mb": peak_mb(),
        "ru_maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
    }
    print(json.dumps(out))


def peak(n_pairs: int) -> dict[str, Any]:
    log(f"peak memory of one selection on {n_pairs:,} pairs (fresh subprocess) ...")
    p = subprocess.run(
        [sys.executable, __file__, "--_peak", str(n_pairs)], capture_output=True, text=True
    )
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        return {"n_pairs_raw": n_pairs, "error": f"exit {p.returncode}: {p.stderr[-500:]}"}
    return json.loads(lines[-1])


def plots(results: dict[str, Any], out_dir: Path) -> list[str]:
    plt = pyplot()
    if plt is None:
        return []
    fig, ax = plt.subplots(figsize=(8, 3.2))
    bars = []
    m = results["in_memory"]["median"]
    bars += [("floor", m["floor"]), ("ingest", m["ingest"]), ("algorithm", m["algorithm"])]
    bars += [("select", m["select"])]
    if results.get("parquet"):
        q = results["parquet"]["median"]
        bars += [("parquet read+floor", q["read_floor"]), ("parquet select", q["select"])]
    ax.barh([b[0] for b in bars][::-1], [b[1] for b in bars][::-1], color="tab:blue")
    ax.set_xlabel("seconds (median)")
    n = results["in_memory"]["n_pairs_raw"]
    ax.set_title(f"select_partitions vs one-pass floor, {n / 1e6:.0f}M unsorted pairs")
    fig.tight_layout()
    path = out_dir / "partition_ingest.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [str(path)]


def summary(results: dict[str, Any]) -> None:
    m = results["in_memory"]["median"]
    n = results["in_memory"]["n_pairs_raw"]
    print(f"\n{n / 1e6:.1f}M unsorted integer pairs, medians of {results['repeats']}:")
    print(f"  floor (sort 64-bit keys, dedupe, bincount) {m['floor']:.2f} s")
    print(
        f"  ingest (Contributions.from_columns)        {m['ingest']:.2f} s "
        f"= {m['ingest'] / m['floor']:.2f}x floor"
    )
    print(
        f"  algorithm on the table (default mad2r)     {m['algorithm']:.2f} s "
        f"= {m['algorithm'] / m['floor']:.2f}x floor"
    )
    print(
        f"  select_partitions((users, items))          {m['select']:.2f} s "
        f"= {m['select'] / m['floor']:.2f}x floor (target <= 2x)"
    )
    print(
        f"  CPU seconds: floor {m['floor_cpu']:.2f}, ingest {m['ingest_cpu']:.2f} "
        f"({m['ingest_cpu'] / m['floor_cpu']:.2f}x), algorithm {m['algorithm_cpu']:.2f} "
        f"({m['algorithm_cpu'] / m['floor_cpu']:.2f}x), select {m['select_cpu']:.2f} "
        f"({m['select_cpu'] / m['floor_cpu']:.2f}x)"
    )
    if results.get("parquet"):
        q = results["parquet"]["median"]
        print(
            f"  Parquet: read {q['read']:.2f} s, read + floor {q['read_floor']:.2f} s, "
            f"select {q['select']:.2f} s = {q['select'] / q['read_floor']:.2f}x "
            f"(target <= 2x); CPU {q['select_cpu']:.2f} / {q['read_floor_cpu']:.2f} s = "
            f"{q['select_cpu'] / q['read_floor_cpu']:.2f}x"
        )
    big = results.get("peak")
    if big:
        if "error" in big:
            print(f"  peak on {big['n_pairs_raw']:,} pairs: {big['error']}")
        else:
            print(
                f"  {big['n_pairs_raw'] / 1e6:.0f}M pairs: {big['seconds']:.1f} s, peak "
                f"{big['peak_mb'] / 1024:.2f} GiB (input {big['input_mb'] / 1024:.2f} GiB, "
                f"ru_maxrss {big['ru_maxrss_mb'] / 1024:.2f} GiB; target <= 8 GB)"
            )
    print(f"  load average before / after: {results['load_before']} / {results['load_after']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=float, default=26e6, help="unsorted pairs in memory")
    ap.add_argument("--parquet-pairs", type=float, default=26e6, help="0 skips the Parquet part")
    ap.add_argument("--big", type=float, default=100e6, help="pairs for the peak; 0 skips it")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="1M pairs, no 100M run")
    ap.add_argument("--out-dir", type=Path, default=RESULTS)
    ap.add_argument("--_peak", type=float, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._peak:
        peak_worker(int(args._peak))
        return
    if args.quick:
        args.pairs, args.parquet_pairs, args.big = 1e6, 1e6, 0
    results: dict[str, Any] = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "repeats": args.repeats,
        "load_before": os.getloadavg(),
    }
    results["in_memory"] = in_memory(int(args.pairs), args.repeats)
    if args.parquet_pairs:
        results["parquet"] = from_parquet(int(args.parquet_pairs), args.repeats)
    if args.big:
        results["peak"] = peak(int(args.big))
    results["load_after"] = os.getloadavg()
    finish(results, args.out_dir, "partition_ingest", plots, summary)


if __name__ == "__main__":
    main()
