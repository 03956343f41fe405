"""Benchmark of userdp's private partition selection (output size, wall time, peak memory).

Run from the repository root::

    python benchmarks/partition_selection.py            # full run (~9 minutes, ~5 GB peak)
    python benchmarks/partition_selection.py --quick    # smoke run, < 1 minute

Writes ``results.json`` (every number, machine info, versions, the exact command) and PNGs to
``--out-dir`` (default ``benchmarks/results/``, git-ignored) and prints a summary table.

Parts
-----
1. Output size (mean, sd over seeds) of every algorithm at eps=1, delta=1e-5 on: the team's
   ``synth_zipf_200k`` TSV (when present), the paper's Section 6.2 instance (Delta_0=100, and
   Delta_0=4 with d_max=4: the paper's text uses d_max=3, which the proofs -- and our validation --
   reject), a Zipf generator at several item skews, and the npm package-summary corpus (one
   summary = one user; its distinct lower-cased words and word bigrams = items), when present.
   PipelineDP's ``select_partitions`` (default truncated-geometric and Gaussian thresholding) runs
   on the same data when ``pipeline-dp`` is installed.
2. Wall time and peak memory of basic, dp-sips, mad and mad2r from integer-coded in-memory pairs
   (sizes count *distinct* pairs; the generator draws ~27% more, since popular items repeat
   within a user), one fresh subprocess per (size, algorithm). Peak memory is the process's
   ``VmHWM`` from ``/proc/self/status``, reset (``clear_refs``) after the pairs are generated;
   we report it and its increase over the memory in use at that point (``ru_maxrss`` would
   inherit the parent's peak across fork+exec). Also: mad2r end-to-end from a Parquet file
   (read with ``userdp.data.read``), and from codes in random order, at ~26M pairs.
3. Items output by item-frequency bucket (like the paper's Figure 1) and a bar chart of output
   sizes (PNG).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from _harness import (
    DEFAULT_NPM,
    RESULTS,
    SHARED_DATA,
    log,
    machine,
    npm_contributions,
    peak_mb,
    pyplot,
    reset_peak,
    versions,
    zipf_pairs,
)
from userdp.data import Contributions, read, section62_instance, zipf_contributions
from userdp.partition import select_partitions

EPS, DELTA, CAP = 1.0, 1e-5, 100
PIPELINEDP_RUNS = 3  # PipelineDP's LocalBackend is pure Python: at most 3 runs per dataset
DEFAULT_ZIPF = SHARED_DATA / "partition/synth_zipf_200k.user_item.tsv.gz"
PARALLEL = ("basic", "dp-sips", "mad", "mad2r")
BUCKETS = [(1, 1), (2, 4), (5, 9), (10, 19), (20, 49), (50, 99), (100, 199), (200, 499)]
BUCKETS.append((500, None))


# -- algorithm variants --------------------------------------------------------------------------
def variants(cap: int, d_max: int | None = None) -> list[tuple[str, str, dict[str, Any]]]:
    """(label, algorithm, options) for every configuration we compare.

    "mad2r" is today's default (the pooled final test, 4 rounds capped once); "mad2r 2r
    unpooled" the default before it (gaussian composition, 2 rounds, re-capped); "mad2r basic"
    the papers' basic composition.
    """
    c = {"max_items_per_user": cap}
    m = dict(c, d_max=d_max) if d_max is not None else c
    basic = {"composition": "basic"}
    auto = {"max_items_per_user": "auto"} if d_max is None else {}
    out = [
        ("basic", "basic", c),
        ("mad", "mad", m),
        ("dp-sips basic", "dp-sips", dict(c, **basic)),
        ("dp-sips", "dp-sips", c),
        ("dp-sips 3r", "dp-sips", dict(c, rounds=3)),
        ("dp-sips pooled 4r", "dp-sips", dict(c, rounds=4, pooled=True)),
        ("mad2r basic", "mad2r", dict(m, **basic)),
        ("mad2r 2r unpooled", "mad2r", dict(m, pooled=False)),
        ("mad2r 3r unpooled", "mad2r", dict(m, rounds=3, pooled=False)),
        ("mad2r", "mad2r", m),
        ("policy-gaussian", "policy-gaussian", c),
        ("greedy-update", "greedy-update", {}),
    ]
    if auto:
        out.insert(10, ("mad2r auto cap", "mad2r", dict(m, **auto)))
    return out


# -- datasets ------------------------------------------------------------------------------------
def item_frequencies(c: Contributions) -> np.ndarray:
    return np.bincount(c.items, minlength=c.n_items)


def codes_of(c: Contributions, result_items: pa.Array) -> np.ndarray:
    idx = pc.index_in(result_items, value_set=c.item_labels)
    return np.asarray(idx.to_numpy(zero_copy_only=False), dtype=np.int64)


def bucket_counts(freq: np.ndarray) -> list[int]:
    out = []
    for lo, hi in BUCKETS:
        mask = freq >= lo if hi is None else (freq >= lo) & (freq <= hi)
        out.append(int(np.count_nonzero(mask)))
    return out


def bucket_label(lo: int, hi: int | None) -> str:
    return f"{lo}+" if hi is None else (str(lo) if lo == hi else f"{lo}-{hi}")


# -- PipelineDP ----------------------------------------------------------------------------------
def pipelinedp_sizes(c: Contributions, seeds: int) -> dict[str, dict[str, Any]] | None:
    try:
        import pipeline_dp
    except ImportError:
        return None
    rows = list(zip(c.users.tolist(), c.items.tolist(), strict=True))
    out = {}
    strategies = {
        "pipelinedp (default)": None,
        "pipelinedp gaussian": pipeline_dp.PartitionSelectionStrategy.GAUSSIAN_THRESHOLDING,
    }
    for label, strategy in strategies.items():
        t_label = time.perf_counter()
        sizes, secs = [], []
        for _ in range(seeds):  # PipelineDP draws its own noise: no seed
            t0 = time.perf_counter()
            acc = pipeline_dp.NaiveBudgetAccountant(total_epsilon=EPS, total_delta=DELTA)
            engine = pipeline_dp.DPEngine(acc, pipeline_dp.LocalBackend())
            kw = {"max_partitions_contributed": CAP}
            if strategy is not None:
                kw["partition_selection_strategy"] = strategy
            params = pipeline_dp.SelectPartitionsParams(**kw)
            ext = pipeline_dp.DataExtractors(
                privacy_id_extractor=lambda r: r[0], partition_extractor=lambda r: r[1]
            )
            res = engine.select_partitions(rows, params, ext)
            acc.compute_budgets()
            sizes.append(len(list(res)))
            secs.append(time.perf_counter() - t0)
        out[label] = summarize(sizes, secs)
        log(
            f"    {label:24s} {out[label]['mean']:10.1f} +- {out[label]['sd']:.1f}"
            f"   ({time.perf_counter() - t_label:.1f} s for {seeds} run(s))"
        )
    return out


def summarize(sizes: list[int], secs: list[float], missing: list[float]) -> dict[str, Any]:
    a = np.asarray(sizes, dtype=float)
    return {
        "sizes": [int(s) for s in sizes],
        "mean": float(a.mean()),
        "sd": float(a.std(ddof=1)) if a.size > 1 else 0.0,
        "seconds_mean": float(np.mean(secs)),
        # share of all distinct (user, item) pairs whose item was not released (Dick, Joseph &
        # Raman, ICLR 2026): exact, for benchmarking only
        "missing_mass_mean": float(np.mean(missing)),
        "missing_mass_sd": float(np.std(missing, ddof=1)) if len(missing) > 1 else 0.0,
    }


def output_sizes(
    name: str,
    c: Contributions,
    seeds: int,
    cap: int,
    d_max: int | None,
    buckets: bool,
    only: set[str] | None = None,
) -> dict[str, Any]:
    log(f"dataset {name}: {c.n_users} users, {c.n_items} items, {c.n_pairs} pairs")
    freq = item_frequencies(c)
    entry: dict[str, Any] = {
        "n_users": c.n_users,
        "n_items_present": int(np.count_nonzero(freq)),
        "n_pairs": c.n_pairs,
        "max_items_per_user": cap,
        "d_max": d_max if d_max is not None else 50,
        "algorithms": {},
    }
    if buckets:
        entry["buckets"] = {
            "labels": [bucket_label(lo, hi) for lo, hi in BUCKETS],
            "total": bucket_counts(freq[freq > 0]),
            "output_mean": {},
        }
    for label, algo, opts in variants(cap, d_max):
        if only and label not in only:
            continue
        sizes, secs, bk, missing, caps = [], [], [], [], []
        for seed in range(seeds):
            r = select_partitions(c, epsilon=EPS, delta=DELTA, algorithm=algo, seed=seed, **opts)
            sizes.append(len(r))
            secs.append(r.diagnostics.seconds)
            codes = codes_of(c, r.to_arrow())
            missing.append(1.0 - float(freq[codes].sum()) / c.n_pairs)
            caps.append(r.parameters.get("max_items_per_user"))
            if buckets:
                bk.append(bucket_counts(freq[codes]))
        entry["algorithms"][label] = summarize(sizes, secs, missing)
        if opts.get("max_items_per_user") == "auto":
            entry["algorithms"][label]["caps_chosen"] = caps
        if buckets:
            entry["buckets"]["output_mean"][label] = np.mean(bk, axis=0).tolist()
        s = entry["algorithms"][label]
        log(
            f"    {label:24s} {s['mean']:10.1f} +- {s['sd']:6.1f}   missing mass "
            f"{s['missing_mass_mean']:.4f}   {s['seconds_mean']:7.2f} s"
        )
    return entry


# -- timing (one subprocess per measurement) -----------------------------------------------------
#: Generated pairs per distinct pair for ``generate_codes`` (measured: 0.790 distinct per raw
#: at 1M, 10M and 100M, since each user's shape does not depend on the size).
RAW_PER_DISTINCT = 1 / 0.790


def generate_codes(n_pairs: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Zipf-shaped int32 pairs sorted by user (:func:`_harness.zipf_pairs`: set sizes
    ~ s^-1.4, items ~ Zipf(1.1) over 1M ranks); ``from_codes`` drops repeated pairs."""
    users, items, n_users = zipf_pairs(n_pairs, seed, dtype=np.int32)
    return users, items, n_users, 1_000_000


def timing_worker(kind: str, n_pairs: int, algo: str) -> dict[str, Any]:
    """Runs in a fresh process; prints one JSON line."""
    import userdp.partition.select as sel

    t0 = time.perf_counter()
    # About 21% of generated pairs repeat within a user (popular items); draw more so the
    # *distinct* pair count, what the targets are stated in, reaches n_pairs.
    users, items, n_users, n_items = generate_codes(int(n_pairs * RAW_PER_DISTINCT))
    if kind == "codes-shuffled":  # pairs in random order instead of grouped by user
        perm = np.random.default_rng(1).permutation(users.size)
        users, items = users[perm], items[perm]
        del perm
    gen_s = time.perf_counter() - t0
    gc.collect()
    out: dict[str, Any] = {
        "kind": kind,
        "n_pairs_target": n_pairs,
        "n_pairs_raw": int(users.size),
        "algorithm": algo,
    }
    out["generate_seconds"] = gen_s
    # Wrap the internal kernels to split the algorithm's time.
    split: dict[str, float] = {}

    def wrap(name: str) -> None:
        f = getattr(sel, name)

        def timed(*a: Any, **k: Any) -> Any:
            t = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                split[name] = split.get(name, 0.0) + time.perf_counter() - t

        setattr(sel, name, timed)

    for name in ("cap_degrees", "filter_pairs", "basic_weights", "mad_weights"):
        wrap(name)
    if kind == "parquet":
        import pyarrow.parquet as pq

        tmp = tempfile.mkdtemp(prefix="userdp-bench-")
        path = os.path.join(tmp, "pairs.parquet")
        labels = pa.array([f"i{k}" for k in range(n_items)])
        table = pa.table(
            {
                "user": pa.array(users.astype(np.int64)),
                "item": pa.DictionaryArray.from_arrays(pa.array(items), labels),
            }
        )
        pq.write_table(table, path)
        out["parquet_bytes"] = os.path.getsize(path)
        del table, users, items, labels
        gc.collect()
        out["peak_reset"] = reset_peak()
        base = peak_mb()
        t = time.perf_counter()
        c = read(path)
        out["read_seconds"] = time.perf_counter() - t
        os.remove(path)
        os.rmdir(tmp)
    else:
        out["peak_reset"] = reset_peak()
        base = peak_mb()
        t = time.perf_counter()
        c = Contributions.from_codes(users, items, n_users=n_users, n_items=n_items)
        out["from_codes_seconds"] = time.perf_counter() - t
        del users, items
    out["n_pairs_distinct"] = c.n_pairs
    out["n_users"] = c.n_users
    import userdp

    out["userdp_file"] = userdp.__file__
    t = time.perf_counter()
    r = select_partitions(c, epsilon=EPS, delta=DELTA, algorithm=algo, seed=0)
    out["algorithm_seconds"] = time.perf_counter() - t
    out["total_seconds"] = out["algorithm_seconds"] + out.get(
        "read_seconds", out.get("from_codes_seconds", 0.0)
    )
    out["output_size"] = len(r)
    out["kernel_seconds"] = split
    out["baseline_peak_mb"] = base
    out["process_peak_mb"] = peak_mb()
    out["peak_increase_mb"] = out["process_peak_mb"] - base
    return out


def run_worker(
    kind: str, n_pairs: int, algo: str, timeout: float = 1800, src: Path | None = None
) -> dict[str, Any]:
    """One measurement in a fresh process; ``src`` puts another userdp source tree first."""
    cmd = [sys.executable, __file__, "--_worker", kind, str(n_pairs), algo]
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(src), env.get("PYTHONPATH", "")])
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"kind": kind, "n_pairs_target": n_pairs, "algorithm": algo, "error": "timeout"}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        err = (p.stderr or "").strip().splitlines()[-3:]
        code = p.returncode
        why = "killed (out of memory?)" if code in (-9, 137) else f"exit {code}"
        return {
            "kind": kind,
            "n_pairs_target": n_pairs,
            "algorithm": algo,
            "error": why,
            "tail": err,
        }
    return json.loads(lines[-1])


def timings(sizes: list[int], quick: bool) -> list[dict[str, Any]]:
    rows = []
    for n in sizes:
        for algo in PARALLEL:
            log(f"timing {algo} on {n:,} pairs (fresh subprocess) ...")
            r = run_worker("codes", n, algo)
            rows.append(r)
            log("    " + _fmt_timing(r))
    extra = 1_000_000 if quick else 26_000_000
    # The generator emits pairs grouped by user (nearly sorted keys: np.sort is fastest then);
    # "codes-shuffled" times the same pairs in random order.
    for kind, n in (("codes-shuffled", max(sizes)), ("codes", extra), ("codes-shuffled", extra)):
        log(f"timing mad2r on {n:,} pairs from {kind} ...")
        r = run_worker(kind, n, "mad2r")
        rows.append(r)
        log("    " + _fmt_timing(r))
    for kind in ("parquet",):
        log(f"timing mad2r on {extra:,} pairs from {kind} ...")
        r = run_worker(kind, extra, "mad2r")
        r["label"] = f"mad2r-{kind}-26M" if not quick else f"mad2r-{kind}-quick"
        rows.append(r)
        log("    " + _fmt_timing(r))
    return rows


def before_after(sizes: list[int], before: Path, repeats: int = 2) -> list[dict[str, Any]]:
    """MAD2R (each tree's default) at each size with the old and the new code, alternating in
    the same run so both see the same machine load; ``repeats`` fresh processes each."""
    rows = []
    here = Path(__file__).resolve().parent.parent / "src"
    for n in sizes:
        for rep in range(repeats):
            for label, src in (("before", before), ("after", here)):
                log(f"timing mad2r on {n:,} pairs, {label} ({src}), repeat {rep + 1} ...")
                r = run_worker("codes", n, "mad2r", src=src)
                r["label"], r["src"] = label, str(src)
                rows.append(r)
                log("    " + _fmt_timing(r))
    return rows


def _fmt_timing(r: dict[str, Any]) -> str:
    if "error" in r:
        return f"ERROR {r['error']} {r.get('tail', '')}"
    prep = r.get("read_seconds", r.get("from_codes_seconds", 0.0))
    return (
        f"{r['n_pairs_distinct']:,} distinct pairs: prep {prep:.2f} s + algorithm "
        f"{r['algorithm_seconds']:.2f} s = {r['total_seconds']:.2f} s; peak "
        f"{r['process_peak_mb']:.0f} MB (+{r['peak_increase_mb']:.0f} MB); kernels "
        + ", ".join(f"{k} {v:.2f}" for k, v in r["kernel_seconds"].items())
    )


# -- plots ---------------------------------------------------------------------------------------
def plots(results: dict[str, Any], out_dir: Path) -> list[str]:
    plt = pyplot()
    if plt is None:
        return []
    written = []
    ds = results["output_sizes"]
    if ds:
        n = len(ds)
        fig, axes = plt.subplots(n, 1, figsize=(10, 2.6 * n + 0.5), squeeze=False)
        for ax, (name, e) in zip(axes[:, 0], ds.items(), strict=True):
            labels = list(e["algorithms"])
            means = [e["algorithms"][k]["mean"] for k in labels]
            sds = [e["algorithms"][k]["sd"] for k in labels]
            ax.barh(labels, means, xerr=sds, color="tab:blue", alpha=0.8, capsize=3)
            ax.invert_yaxis()
            ax.set_title(name, fontsize=10)
            ax.tick_params(labelsize=7)
        axes[-1, 0].set_xlabel("items output (mean +- sd over seeds)")
        fig.tight_layout()
        p = out_dir / "output_sizes.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        written.append(str(p))
    bname = results.get("bucket_dataset")
    if bname and "buckets" in ds.get(bname, {}):
        b = ds[bname]["buckets"]
        x = np.arange(len(b["labels"]))
        shown = [k for k in ("mad2r", "mad", "basic", "dp-sips") if k in b["output_mean"]]
        width = 0.8 / (len(shown) + 1)
        fig, ax = plt.subplots(figsize=(10, 5))
        ax.bar(x, b["total"], width, label="total items", color="lightgray")
        for k, lab in enumerate(shown):
            ax.bar(x + (k + 1) * width, b["output_mean"][lab], width, label=lab)
        ax.set_yscale("log")
        ax.set_xticks(x + width * len(shown) / 2, b["labels"])
        ax.set_xlabel("item frequency (users holding the item)")
        ax.set_ylabel("items")
        ax.set_title(f"Items output per frequency bucket ({bname}, eps=1, delta=1e-5)")
        ax.legend()
        fig.tight_layout()
        p = out_dir / "frequency_buckets.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        written.append(str(p))
    return written


# -- summary -------------------------------------------------------------------------------------
def _ratio(e: dict[str, Any], a: str, b: str) -> str:
    x, y = e["algorithms"].get(a), e["algorithms"].get(b)
    if not x or not y or y["mean"] == 0:
        return "  n/a"
    return f"{x['mean'] / y['mean']:.3f}"


def print_summary(results: dict[str, Any]) -> None:
    print("\n=== Output size (eps=1, delta=1e-5): mean +- sd over seeds, mean seconds ===")
    for name, e in results["output_sizes"].items():
        print(
            f"\n{name}  ({e['n_users']:,} users, {e['n_pairs']:,} pairs, "
            f"Delta_0={e['max_items_per_user']}, d_max={e['d_max']})"
        )
        for lab, s in e["algorithms"].items():
            mm = s.get("missing_mass_mean", float("nan"))
            print(
                f"  {lab:24s} {s['mean']:10.1f} +- {s['sd']:7.1f}   missing mass {mm:.4f}   "
                f"{s['seconds_mean']:8.2f} s"
            )
        print(
            f"  ratios: MAD/Basic {_ratio(e, 'mad', 'basic')}  "
            f"MAD2R/DP-SIPS {_ratio(e, 'mad2r', 'dp-sips')}  "
            f"MAD2R/PolicyGaussian {_ratio(e, 'mad2r', 'policy-gaussian')}  "
            f"MAD2R/MAD2R basic {_ratio(e, 'mad2r', 'mad2r basic')}  "
            f"MAD2R auto cap/MAD2R {_ratio(e, 'mad2r auto cap', 'mad2r')}"
        )
        pg, gu, m2 = (e["algorithms"].get(k) for k in ("policy-gaussian", "greedy-update", "mad2r"))
        if pg and gu and m2:
            t2 = m2["seconds_mean"]
            print(
                f"  time ratio vs mad2r: policy-gaussian {pg['seconds_mean'] / t2:.1f}x"
                f", greedy-update {gu['seconds_mean'] / t2:.1f}x"
            )
    rows = results.get("timings") or []
    if rows:
        print("\n=== Wall time and peak memory (fresh process each; peak RSS = VmHWM) ===")
        print(
            f"  {'generated':>12s} {'distinct':>12s} {'algorithm':24s} {'prep s':>8s} "
            f"{'algo s':>8s} {'total s':>8s} {'vs basic':>8s} {'peak MB':>8s} {'+MB':>8s}"
        )
        basic_t = {
            (r["kind"], r["n_pairs_target"]): r["algorithm_seconds"]
            for r in rows
            if r.get("algorithm") == "basic" and "error" not in r
        }
        for r in rows:
            head = f"  {r.get('n_pairs_raw', 0):>12,} "
            if "error" in r:
                print(head + f"{'':12s} {r['algorithm']:24s} ERROR: {r['error']}")
                continue
            prep = r.get("read_seconds", r.get("from_codes_seconds", 0.0))
            b = basic_t.get((r["kind"], r["n_pairs_target"]))
            vs = f"{r['algorithm_seconds'] / b:.2f}" if b else "-"
            name = r["algorithm"] + ("" if r["kind"] == "codes" else f" [{r['kind']}]")
            print(
                head + f"{r['n_pairs_distinct']:>12,} {name:24s} {prep:8.2f} "
                f"{r['algorithm_seconds']:8.2f} {r['total_seconds']:8.2f} {vs:>8s} "
                f"{r['process_peak_mb']:8.0f} {r['peak_increase_mb']:8.0f}"
            )
        print("  targets: mad2r on 26M pairs <= 6 s; on 100M pairs <= 30 s with <= 12 GB peak")
    print()


# -- main ----------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--zipf-path", type=Path, default=DEFAULT_ZIPF)
    p.add_argument("--npm-path", type=Path, default=DEFAULT_NPM)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--sizes", default="1e6,1e7,1e8", help="comma-separated pair counts")
    p.add_argument("--out-dir", type=Path, default=RESULTS)
    p.add_argument("--quick", action="store_true", help="2 seeds, sizes 1e5,1e6, no npm")
    p.add_argument("--skip-timing", action="store_true")
    p.add_argument("--skip-sizes", action="store_true", help="no output sizes (timing only)")
    p.add_argument("--skip-pipelinedp", action="store_true")
    p.add_argument(
        "--only", default=None, help="comma-separated variant labels to run (default: all)"
    )
    p.add_argument(
        "--before-src",
        type=Path,
        default=None,
        help="a src/ directory of an older userdp (e.g. `git archive 17bb0fb src`): time mad2r "
        "at 26M and 100M pairs with it and with this checkout, alternating, same run",
    )
    p.add_argument("--before-after-sizes", default="26e6,100e6")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.quick:
        args.seeds, args.sizes = 2, "1e5,1e6"
        args.npm_path = Path("--quick: no npm")
    sizes = [int(float(s)) for s in args.sizes.split(",") if s.strip()]
    args.out_dir.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    results: dict[str, Any] = {
        "command": shlex.join([sys.executable, *sys.argv]),
        "cwd": os.getcwd(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine(),
        "versions": versions(extra=("pipeline-dp",)),
        "settings": {
            "epsilon": EPS,
            "delta": DELTA,
            "max_items_per_user": CAP,
            "seeds": args.seeds,
            "sizes": sizes,
            "quick": args.quick,
        },
        "output_sizes": {},
        "notes": [],
    }
    pdp = not args.skip_pipelinedp
    if pdp and results["versions"]["pipeline-dp"] == "not installed":
        log("pipeline-dp not installed: the PipelineDP comparison is skipped")
        results["notes"].append("pipeline-dp not installed: PipelineDP comparison skipped")
        pdp = False
    seeds = args.seeds
    pdp_data: dict[str, Contributions] = {}
    only = set(args.only.split(",")) if args.only else None
    if args.skip_sizes:
        args.zipf_path = args.npm_path = Path("--skip-sizes")

    # 1. Output sizes.
    bucket_ds = None
    if args.zipf_path.exists():
        log(f"reading {args.zipf_path} ...")
        t = time.perf_counter()
        c = read(args.zipf_path, user_column="user", item_column="item", format="tsv", header=False)
        log(f"    read in {time.perf_counter() - t:.1f} s")
        bucket_ds = "synth_zipf_200k"
        if args.quick:  # the first 20,000 users only, to stay under a minute
            keep = c.users < 20_000
            c = Contributions.from_codes(
                c.users[keep], c.items[keep], n_items=c.n_items, item_labels=c.item_labels
            )
            bucket_ds = "synth_zipf_200k (first 20,000 users, --quick)"
        pdp_data[bucket_ds] = c
        results["output_sizes"][bucket_ds] = output_sizes(
            bucket_ds, c, seeds, CAP, None, True, only
        )
    else:
        msg = f"{args.zipf_path} not found: skipping the shared Zipf set"
        log(msg)
        results["notes"].append(msg)

    c = section62_instance()
    if not args.skip_sizes:
        pdp_data["section62 (Delta_0=100)"] = c
        results["output_sizes"]["section62 (Delta_0=100)"] = output_sizes(
            "section62 (Delta_0=100)", c, seeds, CAP, None, False, only
        )
        results["output_sizes"]["section62 (Delta_0=4, d_max=4)"] = output_sizes(
            "section62 (Delta_0=4, d_max=4)", c, seeds, 4, 4, False, only
        )
    results["notes"].append(
        "Section 6.2: the paper's text uses d_max=3; userdp requires d_max >= 4 (the proofs "
        "need it), so the small-cap setting uses Delta_0=4, d_max=4 (every user has degree 3)."
    )

    n_gen = 20_000 if args.quick else 200_000
    for a in () if args.skip_sizes else (0.9, 1.1, 1.3):
        # seed 12345: never the pilot draw (seed 0) the defaults were chosen on
        name = f"zipf generator (item_exponent={a}, {n_gen:,} users)"
        c = zipf_contributions(n_gen, item_exponent=a, seed=12345)
        pdp_data[name] = c
        first = bucket_ds is None and a == 1.1
        results["output_sizes"][name] = output_sizes(name, c, seeds, CAP, None, first, only)
        if first:
            bucket_ds = name
    results["bucket_dataset"] = bucket_ds

    if args.quick:
        log("--quick: skipping the npm corpus")
    elif args.npm_path.exists():
        for bigrams, name in ((False, "npm summaries (words)"), (True, "npm summaries")):
            log(f"building the {name} corpus from {args.npm_path} ...")
            t = time.perf_counter()
            c = npm_contributions(args.npm_path, bigrams=bigrams)
            log(f"    built in {time.perf_counter() - t:.1f} s")
            pdp_data[name] = c
            results["output_sizes"][name] = output_sizes(name, c, seeds, CAP, None, False, only)
    else:
        msg = f"{args.npm_path} not found: skipping the npm corpus"
        log(msg)
        results["notes"].append(msg)
    del c
    gc.collect()
    _write(results, args.out_dir)  # partial results, in case a later part dies

    # 2. Timing (before PipelineDP; the datasets kept for PipelineDP are small).
    if args.before_src is not None:
        sizes_ba = [int(float(x)) for x in args.before_after_sizes.split(",")]
        results["before_after"] = before_after(sizes_ba, args.before_src)
        _write(results, args.out_dir)
    if args.skip_timing:
        log("--skip-timing: no timing")
    else:
        results["timings"] = timings(sizes, args.quick)
        results["notes"].append(
            "Peak memory: a fresh process per measurement; process peak = VmHWM of "
            "/proc/self/status (peak RSS; ru_maxrss is not used because Linux carries the "
            "parent's peak over fork+exec). After generating the integer pairs the peak is reset "
            "(write 5 to /proc/self/clear_refs), so 'peak increase' = final VmHWM minus the RSS "
            "right after generation (input arrays included in the baseline)."
        )

    _write(results, args.out_dir)

    # 3. PipelineDP last: its pure-Python LocalBackend is by far the slowest part.
    if pdp:
        runs = 1 if args.quick else min(seeds, PIPELINEDP_RUNS)
        results["notes"].append(
            f"PipelineDP: {runs} run(s) per strategy and dataset (no seed; LocalBackend is slow)"
        )
        for name, c in pdp_data.items():
            log(f"PipelineDP (LocalBackend) on {name} ...")
            res = pipelinedp_sizes(c, runs)
            if res is not None:
                results["output_sizes"][name]["algorithms"].update(res)
            _write(results, args.out_dir)
    pdp_data.clear()

    # 4. Plots, JSON, summary.
    results["pngs"] = plots(results, args.out_dir)
    results["total_seconds"] = time.perf_counter() - t_start
    path = _write(results, args.out_dir)
    print_summary(results)
    log(f"wrote {path} and {', '.join(results['pngs']) or 'no PNGs'}")
    return 0


def _write(results: dict[str, Any], out_dir: Path) -> Path:
    path = out_dir / "results.json"
    path.write_text(json.dumps(results, indent=2))
    return path


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--_worker":
        res = timing_worker(sys.argv[2], int(sys.argv[3]), sys.argv[4])
        print(json.dumps(res), flush=True)
        sys.exit(0)
    sys.exit(main())
