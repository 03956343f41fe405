"""Benchmark of the Spark engine's partition selection against the local engine.

Run from the repository root (needs ``pip install "userdp[spark]"`` and Java 17+)::

    python benchmarks/partition_selection_spark.py            # full run (30-40 min on 2 cores)
    python benchmarks/partition_selection_spark.py --quick    # smoke run, a few minutes

Writes ``spark_results.json`` (every number, settings, machine and Spark info, the exact command),
``spark_scaling.png`` and ``spark_output_sizes.png`` to ``--out-dir`` (default
``benchmarks/results/``, git-ignored) and prints a summary table.

Parts
-----
1. Scaling: for each size in ``--sizes`` (distinct pairs), a synthetic Zipf set
   (:func:`userdp.data.zipf_contributions`, users and items scaled together, int64 ids, rows
   grouped by user) is written once as Parquet; then MAD2R (eps=1, delta=1e-5, Delta_0=100, a
   fixed seed) runs end to end on both engines from that file: the local engine
   (``userdp.data.read`` + ``mad2r``, the selection also timed alone) and the Spark engine
   (``spark.read.parquet`` + ``select_partitions(engine="spark")``; Spark is lazy, so the read
   happens inside). The Spark runs come after one small warm-up run (JVM, Python workers, code
   generation). Reports seconds, the ratio Spark/local and the log-log slope of seconds vs
   pairs (1 = linear).
2. Output sizes on the team's shared ``synth_zipf_200k`` TSV (when present): mean and sd over
   seeds of the number of selected items per engine and algorithm, the difference of the means in
   standard errors, and a check that both engines cap the same pairs (the capping key is the same
   keyed hash, so ``pairs_dropped_by_capping[0]`` must agree for every seed). The engines draw
   their noise differently, so the selected sets differ per seed; only their distribution agrees.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import hashlib
import importlib.util
import json
import logging
import math
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from _harness import HERE, SHARED_DATA, log, machine, pyplot, versions
from userdp.data import read, read_table, zipf_contributions
from userdp.partition import basic, dp_sips, mad, mad2r, select_partitions

EPS, DELTA, CAP = 1.0, 1e-5, 100
DEFAULT_ZIPF = SHARED_DATA / "partition/synth_zipf_200k.user_item.tsv.gz"
SEED = 0  # the scaling runs' seed
ALGORITHMS = ("mad2r", "basic", "mad", "dp-sips")
LOCAL = {"basic": basic, "dp-sips": dp_sips, "mad": mad, "mad2r": mad2r}
MULTI_ROUND = ("mad2r", "dp-sips")  # the algorithms --rounds applies to
QUICK_ZIPF_USERS = 20_000  # --quick: the shared Zipf set's first 20,000 users only
WARMUP_USERS = 5_000  # the Spark warm-up run: ~60k pairs
#: Items per user in the generated sets (the 200k-user default has 1M items: 5 per user).
ITEMS_PER_USER = 5
NOTES = (
    (
        "Scaling data: zipf_contributions(n_users, n_items=5*n_users, seed=12345), int64 user and "
        "item codes, rows grouped by user, one Parquet file with 1M-row groups."
    ),
    (
        "Local end to end = userdp.data.read(parquet) + mad2r; Spark end to end = "
        "spark.read.parquet + spark.mad2r (lazy: the scan runs inside). Spark runs are timed "
        "after one warm-up MAD2R run (JVM and Python worker start-up, code generation) and "
        "include the engine's materialization of the result (count)."
    ),
    (
        "The engines draw noise differently (the local engine one stream over all item codes, "
        "Spark one stream per hash bucket of items), so per-seed outputs differ; capping uses "
        "the same keyed hash, so the capped pairs agree per seed."
    ),
)


# -- data ----------------------------------------------------------------------------------------
def _pairs_per_user_guess(n_pairs: int) -> float:
    """Distinct pairs per user of ``zipf_contributions`` with 5 items per user (measured: 12.6
    at 200k pairs, 13.0 at 1M, 13.4 at 10M; it grows slowly, as more items repeat less)."""
    return 13.0 + 0.4 * math.log10(max(n_pairs, 1e4) / 1e6)


def generate(n_pairs: int, seed: int = 12345) -> tuple[pa.Table, int, float]:
    """A Zipf set with about ``n_pairs`` distinct pairs as an int64 (user, item) table.

    Returns the table, the number of users and the generation seconds. One correction step
    regenerates with a rescaled user count if the first guess is more than 2% off.
    """
    t = time.perf_counter()
    n_users = max(10, round(n_pairs / _pairs_per_user_guess(n_pairs)))
    c = zipf_contributions(n_users, n_items=ITEMS_PER_USER * n_users, seed=seed)
    if abs(c.n_pairs - n_pairs) > 0.02 * n_pairs:
        n_users = max(10, round(n_users * n_pairs / c.n_pairs))
        del c
        gc.collect()
        c = zipf_contributions(n_users, n_items=ITEMS_PER_USER * n_users, seed=seed)
    table = pa.table(
        {
            "user": pa.array(c.users.astype(np.int64)),
            "item": pa.array(c.items.astype(np.int64)),
        }
    )
    n = c.n_users
    del c
    gc.collect()
    return table, n, time.perf_counter() - t


def write_parquet(table: pa.Table, path: Path) -> int:
    """One Parquet file with 1M-row groups (Spark splits its scan by row group)."""
    pq.write_table(table, path, row_group_size=1 << 20)
    return path.stat().st_size


def quick_subset(src: Path, dst: Path, n_users: int) -> int:
    """The rows of the first ``n_users`` users of a header-less TSV, as an uncompressed TSV."""
    table = read_table(src, format="tsv", header=False)
    users = table.column("user")
    first = pc.unique(users).slice(0, n_users)
    table = table.filter(pc.is_in(users, value_set=first))
    opts = pacsv.WriteOptions(include_header=False, delimiter="\t", quoting_style="none")
    pacsv.write_csv(table.select(["user", "item"]), dst, write_options=opts)
    return table.num_rows


# -- machine load --------------------------------------------------------------------------------
def _cpu_busy() -> tuple[float, float] | None:
    """(busy, total) jiffies of all CPUs from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            parts = [float(x) for x in f.readline().split()[1:]]
    except OSError:
        return None
    idle = parts[3] + (parts[4] if len(parts) > 4 else 0.0)
    return sum(parts) - idle, sum(parts)


def _own_jiffies() -> float:
    """CPU jiffies (user + system, reaped children included) of this process and every live
    descendant: the Spark JVM and its Python workers."""
    stats: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                raw = f.read()
        except OSError:
            continue
        fields = raw[raw.rindex(")") + 2 :].split()
        # after the name: state ppid ... utime(12) stime(13) cutime(14) cstime(15)
        stats[int(entry)] = (int(fields[1]), sum(float(x) for x in fields[11:15]))
    own, frontier, total = {os.getpid()}, [os.getpid()], 0.0
    while frontier:
        pid = frontier.pop()
        total += stats.get(pid, (0, 0.0))[1]
        for child, (ppid, _) in stats.items():
            if ppid == pid and child not in own:
                own.add(child)
                frontier.append(child)
    return total


def _load_note(info: dict[str, Any]) -> str:
    if "other_cpu_share" not in info:
        return ""
    return (
        f"; CPU: ours {info['own_cpu_share']:.0%}, others {info['other_cpu_share']:.0%} of "
        f"{os.cpu_count()} cores"
    )


class Load:
    """Machine CPU use over a measurement, split into ours and other processes' (to spot
    disturbances: ``other_cpu_share`` is the share of all cores' time used by other processes)."""

    def __enter__(self) -> Load:
        self.start = _cpu_busy()
        self.own = _own_jiffies()
        self.info: dict[str, Any] = {"loadavg_before": os.getloadavg()[0]}
        return self

    def __exit__(self, *exc: object) -> None:
        self.info["loadavg_after"] = os.getloadavg()[0]
        end = _cpu_busy()
        if self.start and end and end[1] > self.start[1]:
            total = end[1] - self.start[1]
            busy = end[0] - self.start[0]
            own = _own_jiffies() - self.own
            self.info["machine_cpu_busy"] = busy / total
            self.info["own_cpu_share"] = own / total
            self.info["other_cpu_share"] = max(busy - own, 0.0) / total


# -- Spark ---------------------------------------------------------------------------------------
def start_spark(master: str) -> Any:
    from userdp.spark import SparkUnavailableError, spark_session

    try:
        return spark_session(master, config={"spark.ui.showConsoleProgress": "false"})
    except SparkUnavailableError as err:
        sys.exit(f"partition_selection_spark: Spark cannot start: {err}")


def spark_info(spark: Any) -> dict[str, Any]:
    conf = spark.sparkContext.getConf()
    keys = (
        "spark.master",
        "spark.driver.memory",
        "spark.sql.shuffle.partitions",
        "spark.sql.adaptive.enabled",
        "spark.default.parallelism",
    )
    info = {k: conf.get(k, None) for k in keys}
    info["spark.sql.shuffle.partitions"] = spark.conf.get("spark.sql.shuffle.partitions")
    info["version"] = spark.version
    info["default_parallelism"] = spark.sparkContext.defaultParallelism
    return info


#: Methods of the engine's run object that trigger Spark jobs (the engine is lazy, so the time of
#: a step lands in the method whose action runs it): input checks, capping, each round's
#: release, and the materialization of the result.
PHASES = ("_prepare", "capped", "release", "finish")


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def engine_log() -> Iterator[list[str]]:
    """The INFO messages of the ``userdp.spark`` logger (the engine's own step timings, where it
    logs them) while the block runs."""
    logger = logging.getLogger("userdp.spark")
    handler, level = _Collect(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler.messages
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@contextlib.contextmanager
def phase_timer(engine: Any) -> Iterator[list[list[Any]]]:
    """Time the engine's job-triggering steps (in call order) while the block runs."""
    run_cls = getattr(engine, "_SparkRun", None)
    phases: list[list[Any]] = []
    saved = {name: getattr(run_cls, name) for name in PHASES if hasattr(run_cls, name)}

    def wrap(name: str, fn: Any) -> Any:
        @functools.wraps(fn)
        def timed(*a: Any, **k: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                phases.append([name.lstrip("_"), time.perf_counter() - t])

        return timed

    for name, fn in saved.items():
        setattr(run_cls, name, wrap(name, fn))
    try:
        yield phases
    finally:
        for name, fn in saved.items():
            setattr(run_cls, name, fn)


def spark_run(engine: Any, algo: str, df: Any, seed: int, **options: Any) -> tuple[Any, float]:
    """One Spark selection; the caller unpersists ``result.dataframe``."""
    t = time.perf_counter()
    r = select_partitions(
        df,
        epsilon=EPS,
        delta=DELTA,
        algorithm=algo,
        engine="spark",
        max_items_per_user=CAP,
        seed=seed,
        **options,
    )
    return r, time.perf_counter() - t


def _diag(r: Any) -> dict[str, Any]:
    d = r.diagnostics
    return {
        "n_users": d.n_users,
        "n_pairs": d.n_pairs,
        "pairs_dropped_by_capping": list(d.pairs_dropped_by_capping),
        "round_sizes": list(d.round_sizes),
        "engine_seconds": d.seconds,
    }


def warm_up(spark: Any, engine: Any, work: Path) -> dict[str, Any]:
    """One small MAD2R run from Parquet: starts the JVM's code paths and the Python workers."""
    table, _, _ = generate(WARMUP_USERS * 12)
    path = work / "warmup.parquet"
    write_parquet(table, path)
    t = time.perf_counter()
    r, _ = spark_run(engine, "mad2r", spark.read.parquet(str(path)), SEED)
    out = {"n_pairs": r.diagnostics.n_pairs, "seconds": time.perf_counter() - t}
    r.dataframe.unpersist()
    path.unlink()
    return out


# -- part 1: scaling -----------------------------------------------------------------------------
def scaling_one(spark: Any, engine: Any, n_target: int, work: Path, repeats: int) -> dict[str, Any]:
    log(f"size {n_target:,}: generating ...")
    table, n_users, gen_s = generate(n_target)
    path = work / f"zipf_{n_target}.parquet"
    nbytes = write_parquet(table, path)
    row: dict[str, Any] = {
        "n_pairs_target": n_target,
        "n_pairs": table.num_rows,
        "n_users": n_users,
        "n_items_codes": ITEMS_PER_USER * n_users,
        "generate_seconds": gen_s,
        "parquet_bytes": nbytes,
        "local": [],
        "spark": [],
    }
    del table
    gc.collect()
    log(f"    {row['n_pairs']:,} pairs, {n_users:,} users, Parquet {nbytes / 2**20:.0f} MiB")
    try:
        for rep in range(repeats):
            with Load() as load:
                t = time.perf_counter()
                c = read(path)
                t_read = time.perf_counter() - t
                r = mad2r(c, epsilon=EPS, delta=DELTA, max_items_per_user=CAP, seed=SEED)
                total = time.perf_counter() - t
            local = {
                "seconds": total,
                "read_seconds": t_read,
                "select_seconds": total - t_read,
                "output_size": len(r),
                **_diag(r),
                **load.info,
            }
            row["local"].append(local)
            del c, r
            gc.collect()
            log(
                f"    local  #{rep + 1}: {total:7.2f} s (read {t_read:.2f} s + select "
                f"{local['select_seconds']:.2f} s), {local['output_size']:,} items"
                + _load_note(load.info)
            )
            with Load() as load:
                t = time.perf_counter()
                df = spark.read.parquet(str(path))
                with phase_timer(engine) as phases, engine_log() as messages:
                    r, _ = spark_run(engine, "mad2r", df, SEED)
                total = time.perf_counter() - t
            sp = {"seconds": total, "output_size": len(r), **_diag(r), **load.info}
            phases.append(["other", total - sum(x for _, x in phases)])
            sp["phases"] = phases
            sp["engine_log"] = messages
            r.dataframe.unpersist()
            spark.catalog.clearCache()
            del r, df
            gc.collect()
            row["spark"].append(sp)
            log(
                f"    spark  #{rep + 1}: {total:7.2f} s, {sp['output_size']:,} items "
                f"(capped pairs dropped: local {local['pairs_dropped_by_capping'][0]:,}, "
                f"spark {sp['pairs_dropped_by_capping'][0]:,})" + _load_note(load.info)
            )
            log("        Spark steps: " + ", ".join(f"{n} {x:.1f} s" for n, x in phases))
            for m in messages:
                log(f"        engine: {m}")
    except Exception as err:  # e.g. Spark out of memory: keep what was measured
        row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        log(f"    ERROR {row['error']}")
        spark.catalog.clearCache()
    finally:
        path.unlink(missing_ok=True)
    for eng in ("local", "spark"):
        runs = row[eng]
        if runs:
            row[f"{eng}_seconds"] = float(np.median([x["seconds"] for x in runs]))
    if row["local"]:
        row["local_select_seconds"] = float(np.median([x["select_seconds"] for x in row["local"]]))
    if "local_seconds" in row and "spark_seconds" in row:
        row["ratio_spark_local"] = row["spark_seconds"] / row["local_seconds"]
        row["ratio_spark_local_select"] = row["spark_seconds"] / row["local_select_seconds"]
        row["capping_equal"] = all(
            a["pairs_dropped_by_capping"][0] == b["pairs_dropped_by_capping"][0]
            for a, b in zip(row["local"], row["spark"], strict=False)
        )
    return row


def slopes(rows: list[dict[str, Any]], key: str) -> dict[str, Any] | None:
    """Least-squares slope of log(seconds) vs log(pairs), and the slope between neighbours."""
    pts = [(r["n_pairs"], r[key]) for r in rows if key in r]
    if len(pts) < 2:
        return None
    x = np.log([p for p, _ in pts])
    y = np.log([s for _, s in pts])
    fit = float(np.polyfit(x, y, 1)[0])
    pairwise = [float((y[k + 1] - y[k]) / (x[k + 1] - x[k])) for k in range(len(pts) - 1)]
    # seconds = fixed + per_pair * pairs (least squares): a slope below 1 with a good affine fit
    # means linear growth on top of a fixed cost.
    n = np.array([p for p, _ in pts], dtype=float)
    secs = np.array([t for _, t in pts], dtype=float)
    per_pair, fixed = np.polyfit(n, secs, 1)
    resid = (fixed + per_pair * n - secs) / secs
    affine = {
        "fixed_seconds": float(fixed),
        "us_per_pair": float(per_pair * 1e6),
        "max_rel_residual": float(np.abs(resid).max()),
    }
    return {"fit": fit, "pairwise": pairwise, "affine": affine}


def scaling(spark: Any, engine: Any, sizes: list[int], work: Path, repeats: int) -> dict[str, Any]:
    rows = [scaling_one(spark, engine, n, work, repeats) for n in sizes]
    return {
        "rows": rows,
        "slopes": {
            "local": slopes(rows, "local_seconds"),
            "local_select": slopes(rows, "local_select_seconds"),
            "spark": slopes(rows, "spark_seconds"),
        },
    }


# -- part 2: output sizes on the shared Zipf set -------------------------------------------------
def _stats(sizes: list[int]) -> dict[str, Any]:
    a = np.asarray(sizes, dtype=float)
    return {
        "sizes": [int(s) for s in sizes],
        "mean": float(a.mean()),
        "sd": float(a.std(ddof=1)) if a.size > 1 else 0.0,
    }


def zipf_sizes(
    spark: Any,
    engine: Any,
    path: Path,
    algos: tuple[str, ...],
    seeds: int,
    rounds: int | None = None,
) -> dict[str, Any]:
    log(f"local engine: reading {path} ...")
    t = time.perf_counter()
    c = read(path, format="tsv", header=False)
    read_local = time.perf_counter() - t
    log(f"    {c.n_users:,} users, {c.n_pairs:,} pairs in {read_local:.1f} s")
    log("Spark engine: reading (cached) ...")
    t = time.perf_counter()
    raw = engine.read(str(path), format="tsv", header=False, spark=spark)
    df = raw.select(*raw.columns[:2]).toDF("user", "item").cache()
    n_rows = df.count()
    read_spark = time.perf_counter() - t
    log(f"    {n_rows:,} rows in {read_spark:.1f} s")
    out: dict[str, Any] = {
        "path": str(path),
        "n_users": c.n_users,
        "n_pairs": c.n_pairs,
        "n_rows_spark": n_rows,
        "read_seconds": {"local": read_local, "spark": read_spark},
        "seeds": list(range(seeds)),
        "algorithms": {},
    }
    try:
        for algo in algos:
            per: dict[str, Any] = {"local": [], "spark": []}
            opts = {"rounds": rounds} if rounds and algo in MULTI_ROUND else {}
            for seed in range(seeds):
                t = time.perf_counter()
                r = LOCAL[algo](
                    c, epsilon=EPS, delta=DELTA, max_items_per_user=CAP, seed=seed, **opts
                )
                loc = {"seed": seed, "size": len(r), "seconds": time.perf_counter() - t}
                per["local"].append({**loc, **_diag(r)})
                rs, secs = spark_run(engine, algo, df, seed, **opts)
                per["spark"].append({"seed": seed, "size": len(rs), "seconds": secs, **_diag(rs)})
                rs.dataframe.unpersist()
                a, b = per["local"][-1], per["spark"][-1]
                same = a["pairs_dropped_by_capping"][0] == b["pairs_dropped_by_capping"][0]
                log(
                    f"    {algo:8s} seed {seed}: local {a['size']:6,} ({a['seconds']:5.2f} s)  "
                    f"spark {b['size']:6,} ({b['seconds']:6.2f} s)  capped-dropped "
                    f"{a['pairs_dropped_by_capping'][0]:,} vs {b['pairs_dropped_by_capping'][0]:,}"
                    + ("" if same else "  MISMATCH")
                )
            entry: dict[str, Any] = {}
            for eng in ("local", "spark"):
                entry[eng] = _stats([x["size"] for x in per[eng]])
                entry[eng]["seconds_mean"] = float(np.mean([x["seconds"] for x in per[eng]]))
                entry[eng]["runs"] = per[eng]
            lo, sp = entry["local"], entry["spark"]
            se = math.sqrt((lo["sd"] ** 2 + sp["sd"] ** 2) / seeds)
            diff = sp["mean"] - lo["mean"]
            entry["diff_of_means"] = diff
            entry["diff_in_se"] = diff / se if se > 0 else (0.0 if diff == 0 else None)
            entry["capping_equal"] = all(
                a["pairs_dropped_by_capping"][0] == b["pairs_dropped_by_capping"][0]
                and a["n_pairs"] == b["n_pairs"]
                and a["n_users"] == b["n_users"]
                for a, b in zip(per["local"], per["spark"], strict=True)
            )
            out["algorithms"][algo] = entry
    finally:
        df.unpersist()
        spark.catalog.clearCache()
    return out


# -- plots ---------------------------------------------------------------------------------------
def plots(results: dict[str, Any], out_dir: Path) -> list[str]:
    plt = pyplot()
    if plt is None:
        return []
    written = []
    sc = results.get("scaling")
    rows = [r for r in (sc or {}).get("rows", []) if "local_seconds" in r or "spark_seconds" in r]
    if rows:
        fig, ax = plt.subplots(figsize=(8, 5.5))
        series = (
            ("spark_seconds", "Spark engine (end to end)", "tab:orange", "-o"),
            ("local_seconds", "local engine (end to end)", "tab:blue", "-s"),
            ("local_select_seconds", "local engine (selection only)", "tab:blue", "--^"),
        )
        for key, label, color, style in series:
            pts = [(r["n_pairs"], r[key]) for r in rows if key in r]
            if not pts:
                continue
            sl = sc["slopes"].get(key.replace("_seconds", ""))
            lab = label
            if sl:
                af = sl["affine"]
                lab += (
                    f": slope {sl['fit']:.2f}; {af['fixed_seconds']:.1f} s + "
                    f"{af['us_per_pair']:.2f} us/pair"
                )
            ax.plot(*zip(*pts, strict=True), style, color=color, label=lab)
        for r in rows:
            if "ratio_spark_local" in r:
                ax.annotate(
                    f"{r['ratio_spark_local']:.1f}x",
                    (r["n_pairs"], r["spark_seconds"]),
                    textcoords="offset points",
                    xytext=(8, -12),
                    fontsize=9,
                    color="tab:orange",
                )
        # reference line of slope 1 through the first Spark point
        first = next((r for r in rows if "spark_seconds" in r), None)
        if first is not None:
            xs = np.array([rows[0]["n_pairs"], rows[-1]["n_pairs"]], dtype=float)
            ax.plot(
                xs,
                first["spark_seconds"] * xs / first["n_pairs"],
                ":",
                color="gray",
                label="linear (slope 1)",
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("distinct (user, item) pairs")
        ax.set_ylabel("wall seconds")
        m = results["spark"]["spark.master"]
        ax.set_title(f"MAD2R wall time: Spark {m} vs local engine (annotated: Spark/local)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        p = out_dir / "spark_scaling.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        written.append(str(p))
    zs = results.get("zipf")
    if zs and zs.get("algorithms"):
        labels = list(zs["algorithms"])
        x = np.arange(len(labels))
        fig, ax = plt.subplots(figsize=(8, 5))
        for k, (eng, color) in enumerate((("local", "tab:blue"), ("spark", "tab:orange"))):
            means = [zs["algorithms"][a][eng]["mean"] for a in labels]
            sds = [zs["algorithms"][a][eng]["sd"] for a in labels]
            ax.bar(x + (k - 0.5) * 0.38, means, 0.38, yerr=sds, capsize=4, label=eng, color=color)
        ax.set_xticks(x, labels)
        ax.set_ylabel(f"items output (mean +- sd over {len(zs['seeds'])} seeds)")
        ax.set_title(f"{results['zipf_name']}: local vs Spark engine (eps=1, delta=1e-5)")
        ax.legend()
        fig.tight_layout()
        p = out_dir / "spark_output_sizes.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        written.append(str(p))
    return written


# -- summary -------------------------------------------------------------------------------------
def _others(row: dict[str, Any]) -> str:
    """Largest share of CPU time used by other processes during this size's timed runs."""
    shares = [
        x["other_cpu_share"] for e in ("local", "spark") for x in row[e] if "other_cpu_share" in x
    ]
    return f"{max(shares):.0%}" if shares else "-"


def _num(v: Any, fmt: str) -> str:
    return format(v, fmt) if v is not None else "-"


def print_summary(results: dict[str, Any]) -> None:
    sc = results.get("scaling")
    s = results["spark"]
    print(
        f"\n=== MAD2R wall time, Spark {s['spark.master']} (driver {s['spark.driver.memory']}, "
        f"{s['spark.sql.shuffle.partitions']} shuffle partitions) vs local engine ==="
    )
    if "warmup" in s:
        print(f"  (every Spark run comes after a warm-up run of {s['warmup']['seconds']:.1f} s)")
    if sc:
        print(
            f"  {'pairs':>12s} {'users':>10s} {'local s':>9s} {'(read':>8s} {'select)':>8s} "
            f"{'spark s':>9s} {'spark/local':>11s} {'/select':>8s} {'out local':>9s} "
            f"{'out spark':>9s} {'cap ok':>6s} {'others':>6s}"
        )
        for r in sc["rows"]:
            lo = r["local"][0] if r["local"] else {}
            sp = r["spark"][0] if r["spark"] else {}
            f = _num
            print(
                f"  {r['n_pairs']:>12,} {r['n_users']:>10,} "
                f"{f(r.get('local_seconds'), '9.2f'):>9s} "
                f"{f(lo.get('read_seconds'), '8.2f'):>8s} "
                f"{f(r.get('local_select_seconds'), '8.2f'):>8s} "
                f"{f(r.get('spark_seconds'), '9.2f'):>9s} "
                f"{f(r.get('ratio_spark_local'), '11.1f'):>11s} "
                f"{f(r.get('ratio_spark_local_select'), '8.1f'):>8s} "
                f"{f(lo.get('output_size'), '9,'):>9s} {f(sp.get('output_size'), '9,'):>9s} "
                f"{r.get('capping_equal', '-')!s:>6s} {_others(r):>6s}"
            )
            if "error" in r:
                print(f"  {'':12s} ERROR: {r['error']}")
        for key, label in (
            ("local", "local end to end"),
            ("local_select", "local selection"),
            ("spark", "Spark end to end"),
        ):
            sl = sc["slopes"].get(key)
            if sl:
                pw = ", ".join(f"{v:.2f}" for v in sl["pairwise"])
                af = sl["affine"]
                print(
                    f"  log-log slope, {label:17s}: {sl['fit']:.2f} (between sizes: {pw}); "
                    f"affine fit {af['fixed_seconds']:.2f} s + {af['us_per_pair']:.3f} us/pair "
                    f"(max residual {af['max_rel_residual']:.0%})"
                )
    zs = results.get("zipf")
    if zs:
        print(
            f"\n=== Output size on {results['zipf_name']} ({zs['n_users']:,} users, "
            f"{zs['n_pairs']:,} pairs), mean +- sd over {len(zs['seeds'])} seeds ==="
        )
        print(
            f"  {'algorithm':10s} {'local':>18s} {'spark':>18s} {'diff/SE':>8s} "
            f"{'local s':>8s} {'spark s':>8s}  capping equal"
        )
        for algo, e in zs["algorithms"].items():
            lo, sp = e["local"], e["spark"]
            drops = sorted({x["pairs_dropped_by_capping"][0] for x in lo["runs"]})
            print(
                f"  {algo:10s} {lo['mean']:10.1f} +- {lo['sd']:5.1f} "
                f"{sp['mean']:10.1f} +- {sp['sd']:5.1f} {_num(e['diff_in_se'], '8.2f'):>8s} "
                f"{lo['seconds_mean']:8.2f} {sp['seconds_mean']:8.2f}  {e['capping_equal']} "
                f"(dropped {', '.join(f'{d:,}' for d in drops)})"
            )
    if sc:
        print(
            "  others = largest share of all cores' CPU time used by other processes during the "
            "size's timed runs (high = disturbed timings)"
        )
    for note in results["notes"]:
        print(f"  note: {note}")
    print()


# -- main ----------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="1e6,1e7,5e7", help="comma-separated distinct-pair counts")
    p.add_argument("--seeds", type=int, default=3, help="seeds for the output sizes")
    p.add_argument("--repeats", type=int, default=1, help="timed runs per size and engine")
    p.add_argument("--zipf-path", type=Path, default=DEFAULT_ZIPF)
    p.add_argument("--master", default="local[2]", help="Spark master URL")
    p.add_argument("--out-dir", type=Path, default=HERE / "results")
    p.add_argument("--work-dir", type=Path, default=None, help="for the Parquet files (temp)")
    p.add_argument("--mad2r-only", action="store_true", help="output sizes of MAD2R only")
    p.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="rounds of MAD2R and DP-SIPS in the output sizes (default: each algorithm's)",
    )
    p.add_argument("--skip-scaling", action="store_true")
    p.add_argument("--skip-zipf", action="store_true")
    p.add_argument(
        "--quick",
        action="store_true",
        help="sizes 2e5,1e6, 2 seeds, the Zipf set's first 20,000 users",
    )
    return p.parse_args(argv)


def spark_versions() -> dict[str, str]:
    out = versions()
    for pkg in ("pyspark", "pandas"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def git_info() -> dict[str, Any]:
    """Commit of the checkout and whether the engine's sources differ from it."""
    root = HERE.parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "src"], cwd=root, capture_output=True, text=True
        ).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        return {}
    # the Spark runner and the modules it is cut into, in a fixed order
    files = sorted((root / "src/userdp/partition").glob("*spark*.py"))
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.name.encode() + b"\0" + f.read_bytes())
    return {
        "commit": head,
        "src_changes": [x.strip() for x in dirty if x.strip()],
        "engine_files": [f.name for f in files],
        "engine_sha256": digest.hexdigest() if files else None,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if importlib.util.find_spec("pyspark") is None:
        sys.exit(
            "partition_selection_spark: pyspark is not installed (pip install 'userdp[spark]'); "
            "nothing to benchmark."
        )
    if args.quick:
        args.sizes, args.seeds = "2e5,1e6", 2
    sizes = [int(float(s)) for s in args.sizes.split(",") if s.strip()]
    algos = ("mad2r",) if args.mad2r_only else ALGORITHMS
    args.out_dir.mkdir(parents=True, exist_ok=True)
    own_work = args.work_dir is None
    work = Path(tempfile.mkdtemp(prefix="userdp-spark-bench-")) if own_work else args.work_dir
    work.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    log(f"starting Spark ({args.master}) ...")
    t = time.perf_counter()
    spark = start_spark(args.master)
    from userdp.partition import spark as engine

    results: dict[str, Any] = {
        "command": shlex.join([sys.executable, *sys.argv]),
        "cwd": os.getcwd(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine(),
        "versions": spark_versions(),
        "git": git_info(),
        "spark": {**spark_info(spark), "startup_seconds": time.perf_counter() - t},
        "settings": {
            "epsilon": EPS,
            "delta": DELTA,
            "max_items_per_user": CAP,
            "algorithm_scaling": "mad2r",
            "scaling_seed": SEED,
            "sizes": sizes,
            "repeats": args.repeats,
            "seeds": args.seeds,
            "algorithms_zipf": list(algos),
            "rounds_zipf": args.rounds,
            "quick": args.quick,
            "items_per_user_generated": ITEMS_PER_USER,
        },
        "notes": list(NOTES),
    }
    spark_warnings_ok = True
    try:
        if not (args.skip_scaling and args.skip_zipf):
            log("Spark warm-up run ...")
            results["spark"]["warmup"] = warm_up(spark, engine, work)
            w = results["spark"]["warmup"]
            log(f"    {w['n_pairs']:,} pairs in {w['seconds']:.1f} s")
        if args.skip_scaling:
            log("--skip-scaling: no scaling runs")
        else:
            results["scaling"] = scaling(spark, engine, sizes, work, args.repeats)
            _write(results, args.out_dir)
            for r in results["scaling"]["rows"]:
                if r.get("capping_equal") is False:
                    spark_warnings_ok = False
        if args.skip_zipf:
            log("--skip-zipf: no output sizes on the shared Zipf set")
        elif not args.zipf_path.exists():
            msg = f"{args.zipf_path} not found: skipping the output sizes on the shared Zipf set"
            log(msg)
            results["notes"].append(msg)
        else:
            path, name = args.zipf_path, "synth_zipf_200k"
            if args.quick:
                path = work / "zipf_quick.tsv"
                n = quick_subset(args.zipf_path, path, QUICK_ZIPF_USERS)
                name = f"synth_zipf_200k (first {QUICK_ZIPF_USERS:,} users, --quick)"
                log(f"--quick: {n:,} rows of the first {QUICK_ZIPF_USERS:,} users -> {path}")
            results["zipf_name"] = name
            results["zipf"] = zipf_sizes(spark, engine, path, algos, args.seeds, args.rounds)
            if not all(e["capping_equal"] for e in results["zipf"]["algorithms"].values()):
                spark_warnings_ok = False
    finally:
        if own_work:
            shutil.rmtree(work, ignore_errors=True)
    results["pngs"] = plots(results, args.out_dir)
    results["total_seconds"] = time.perf_counter() - t_start
    path = _write(results, args.out_dir)
    print_summary(results)
    log(f"wrote {path} and {', '.join(results['pngs']) or 'no PNGs'}")
    spark.stop()
    if not spark_warnings_ok:
        log("ERROR: the engines capped different numbers of pairs for the same seed")
        return 2
    return 0


def _write(results: dict[str, Any], out_dir: Path) -> Path:
    path = out_dir / "spark_results.json"
    path.write_text(json.dumps(results, indent=2))
    return path


if __name__ == "__main__":
    sys.exit(main())
