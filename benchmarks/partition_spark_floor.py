"""Benchmark of the Spark engine's partition selection against one plain Spark pass.

Run from the repository root (needs ``pip install "userdp[spark]"`` and Java 17+)::

    nice python benchmarks/partition_spark_floor.py                   # 10M and 50M pairs
    nice python benchmarks/partition_spark_floor.py --sizes 1e6 --repeats 1   # smoke run

On ``local[2]`` Spark's fixed costs dominate any ratio to the local engine, so the yardstick is
Spark itself: for each size, integer (user, item) pairs in random order are written to Parquet,
read once and cached (materialized before any timing), then, alternating in the same session,

- the floor: one plain pass over the cached frame that drops repeated pairs and counts users
  per item (``dropDuplicates`` + ``groupBy(item).count()``, run to the end by the ``noop``
  sink), and
- the default selection (``select_partitions(df, engine="spark")``, eps 1, delta 1e-5, fixed
  seed; it materializes its result),

each ``--repeats`` times. Reports medians, seconds per pair and the ratio (target <= 3x), the
range of each repeat's own ratio (the figure moves by 10-20% between repeats and sessions on two
cores), with the engine's own step timings (``userdp.spark`` log) of the last run.

A third timing, the *skeleton*, bounds what any k-round selection costs on Spark from below: it
does only what every round-based scheme must (group the pairs by user, drop repeated pairs and
count each user's pairs, once and cached; then, per round, one pass over the cached pairs that
sums a per-user weight per item), with no capping order, noise, biasing or removal. If the
skeleton alone is more than 3x the floor, the 3x target is out of reach for ``--rounds`` rounds.
A fourth, the *MAD skeleton*, does what a round of MAD itself must (Alg. 3): each user's pairs
ranked once in a hashed capping order (cached), then per round two passes over the capped
pairs, one summing the adaptive users' initial weights per item (the heavy items, broadcast)
and one that sums each user's excess over its items (a window by user) before the item sums,
and a threshold on a stand-in for the noise; no noise draw, biasing, removal or item
book-keeping. Its ratio bounds what an engine running unbiased MAD rounds can reach (a biased
round that truncates no item, the usual case in MAD2R's later rounds, needs only the second
pass, so it overstates those rounds).

Writes ``partition_spark_floor.json`` and a PNG to ``--out-dir`` (default ``benchmarks/results/``).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from _harness import RESULTS, finish, log, pyplot, run_mad_skeleton, zipf_pairs

EPSILON, DELTA, SEED = 1.0, 1e-5, 0


def generate(n_pairs: int, seed: int = 0) -> pa.Table:
    """``n_pairs`` int64 (user, item) rows in random order (:func:`_harness.zipf_pairs`)."""
    users, items, _ = zipf_pairs(n_pairs, seed, shuffle=True)
    return pa.table({"user": users, "item": items})


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def engine_log() -> Iterator[list[str]]:
    """The engine's own step timings (``userdp.spark`` logger, INFO) while the block runs."""
    logger = logging.getLogger("userdp.spark")
    handler, level = _Collect(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler.messages
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def one_size(spark: Any, n_pairs: int, repeats: int, work: Path, rounds: int = 4) -> dict[str, Any]:
    from userdp.partition import select_partitions

    path = work / f"pairs_{n_pairs}.parquet"
    pq.write_table(generate(n_pairs), path, row_group_size=1 << 20)
    df = spark.read.parquet(str(path)).cache()
    n_rows = df.count()  # materializes the cache: no timing below reads the file
    log(f"{n_rows:,} rows cached")

    def floor() -> None:
        (
            df.dropDuplicates(["user", "item"])
            .groupBy("item")
            .count()
            .write.format("noop")
            .mode("overwrite")
            .save()
        )

    def skeleton() -> None:
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        pairs = (
            df.repartition("user")
            .dropDuplicates(["user", "item"])
            .withColumn("w", 1.0 / F.sqrt(F.count(F.lit(1)).over(Window.partitionBy("user"))))
            .persist()
        )
        pairs.count()
        for _ in range(rounds):
            pairs.groupBy("item").agg(F.sum("w")).write.format("noop").mode("overwrite").save()
        pairs.unpersist()

    def mad_skeleton() -> None:
        run_mad_skeleton(df, "user", "item", rounds)

    runs: dict[str, list[float]] = {"floor": [], "select": [], "skeleton": [], "mad_skeleton": []}
    steps: list[str] = []
    out: dict[str, Any] = {"n_rows": n_rows}
    for rep in range(repeats):
        t = time.perf_counter()
        floor()
        runs["floor"].append(time.perf_counter() - t)
        t = time.perf_counter()
        skeleton()
        runs["skeleton"].append(time.perf_counter() - t)
        t = time.perf_counter()
        mad_skeleton()
        runs["mad_skeleton"].append(time.perf_counter() - t)
        with engine_log() as messages:
            t = time.perf_counter()
            r = select_partitions(df, epsilon=EPSILON, delta=DELTA, engine="spark", seed=SEED)
            runs["select"].append(time.perf_counter() - t)
        steps = list(messages)
        out["n_pairs_distinct"] = r.diagnostics.n_pairs
        out["items_released"] = r.diagnostics.round_sizes
        r.dataframe.unpersist()
        f, t, k = runs["floor"][-1], runs["select"][-1], runs["skeleton"][-1]
        log(f"  repeat {rep + 1}: floor {f:.1f} s, skeleton {k:.1f} s, select {t:.1f} s")
    df.unpersist()
    path.unlink()
    med = {k: float(np.median(v)) for k, v in runs.items()}
    out.update(
        seconds=runs,
        median=med,
        ratio=med["select"] / med["floor"],
        skeleton_ratio=med["skeleton"] / med["floor"],
        mad_skeleton_ratio=med["mad_skeleton"] / med["floor"],
        # each repeat's own ratios: how far the figure moves within one session
        ratio_per_repeat=[s / f for s, f in zip(runs["select"], runs["floor"], strict=True)],
        select_over_mad_skeleton=med["select"] / med["mad_skeleton"],
        rounds=rounds,
        us_per_row={k: v / n_rows * 1e6 for k, v in med.items()},
        engine_steps=steps,
    )
    return out


def plots(results: dict[str, Any], out_dir: Path) -> list[str]:
    plt = pyplot()
    if plt is None or not results["sizes"]:
        return []
    fig, ax = plt.subplots(figsize=(7, 3.2))
    labels = list(results["sizes"])
    x = np.arange(len(labels))
    bars = (
        ("floor", "tab:gray"),
        ("skeleton", "tab:olive"),
        ("mad_skeleton", "tab:orange"),
        ("select", "tab:blue"),
    )
    for k, (name, color) in enumerate(bars):
        ax.bar(
            x + 0.2 * k,
            [results["sizes"][s]["median"][name] for s in labels],
            0.2,
            label=name,
            color=color,
        )
    ax.set_xticks(x + 0.3, [f"{int(s) / 1e6:.0f}M rows" for s in labels])
    ax.set_ylabel("seconds (median)")
    ax.set_title(f"Spark selection vs one plain pass ({results['master']})")
    ax.legend()
    fig.tight_layout()
    path = out_dir / "partition_spark_floor.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [str(path)]


def summary(results: dict[str, Any]) -> None:
    print(f"\nSpark {results['master']}, medians of {results['repeats']}:")
    for n, r in results["sizes"].items():
        m, us = r["median"], r["us_per_row"]
        print(
            f"  {int(n):>11,} rows: floor {m['floor']:.1f} s ({us['floor']:.2f} us/row), "
            f"select {m['select']:.1f} s ({us['select']:.2f} us/row) = {r['ratio']:.2f}x "
            "(target <= 3x)"
        )
        per = r["ratio_per_repeat"]
        print(f"      each repeat's select / floor: {min(per):.2f}-{max(per):.2f}x")
        print(
            f"      skeleton of {r['rounds']} rounds {m['skeleton']:.1f} s = "
            f"{r['skeleton_ratio']:.1f}x the floor (no {r['rounds']}-round scheme does less)"
        )
        print(
            f"      MAD skeleton of {r['rounds']} rounds {m['mad_skeleton']:.1f} s = "
            f"{r['mad_skeleton_ratio']:.2f}x the floor (capping order once, two item passes "
            "and a user window per round; no noise draw, biasing or removal); the selection "
            f"{r['select_over_mad_skeleton']:.2f}x it"
        )
        for step in r["engine_steps"]:
            print(f"      {step}")
    print(f"  load average before / after: {results['load_before']} / {results['load_after']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10e6,50e6", help="comma-separated row counts")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=4, help="rounds of the skeleton (default's: 4)")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--driver-memory", default="6g")
    ap.add_argument("--out-dir", type=Path, default=RESULTS)
    args = ap.parse_args()
    from userdp.spark import SparkUnavailableError, spark_session

    try:
        spark = spark_session(
            args.master,
            config={
                "spark.ui.showConsoleProgress": "false",
                "spark.driver.memory": args.driver_memory,
            },
        )
    except SparkUnavailableError as err:
        sys.exit(f"partition_spark_floor: Spark cannot start: {err}")
    results: dict[str, Any] = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "master": args.master,
        "repeats": args.repeats,
        "load_before": os.getloadavg(),
        "sizes": {},
    }
    work = Path(tempfile.mkdtemp(prefix="userdp-spark-floor-"))
    try:
        # warm-up: JVM code paths and Python workers, untimed
        one_size(spark, 20_000, 1, work, args.rounds)
        for n in (int(float(s)) for s in args.sizes.split(",")):
            log(f"{n:,} rows ...")
            results["sizes"][str(n)] = one_size(spark, n, args.repeats, work, args.rounds)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results["load_after"] = os.getloadavg()
    finish(results, args.out_dir, "partition_spark_floor", plots, summary)


if __name__ == "__main__":
    main()
