"""Benchmark of the Spark runner of MatrixFactorization against the local runner.

Run from the repository root (needs ``pip install "userdp[spark]"`` and Java 17+; skips cleanly
without them)::

    python benchmarks/recommend_spark.py                   # 1M and 10M ratings
    python benchmarks/recommend_spark.py --sizes 1000000   # 1M only

For each size, ``longtail_ratings`` (ML-10M's shape scaled: users x size/10M, items x
sqrt(size/10M), seed 1) is written once as Parquet. AdaDPALS (epsilon 1, delta 1e-5, dim 32,
biases on: the defaults) is trained with 3 steps on both engines from the same data: the local
engine from the in-memory Ratings, the Spark engine (``--master``, default local[2]) from
``spark.read.parquet``. A step is timed from one user solve to the next (the runners' methods
are wrapped, nothing else changes); the setup is everything before the first step (the Spark
engine's scan, the preamble's passes and the checkpoint). The Spark run follows one small
warm-up fit (JVM, Python workers). Peak memory: the Python driver's VmHWM (reset before each
fit) and the Spark JVM's (the local-mode JVM holds the driver and the executors). The two
engines' models are compared (max |difference| of the item factors): the noise is drawn on the
driver from the same seeded stream, so they agree to round-off.

Writes ``recommend_spark.json`` and ``recommend_spark.png`` to ``--out-dir`` (default
``benchmarks/results/``) and prints a summary.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from _harness import RESULTS, finish, log, machine, peak_mb, pyplot, reset_peak
from userdp.data.longtail import longtail_ratings
from userdp.recommend import MatrixFactorization
from userdp.recommend.engines.local import LocalRunner

STEPS, DIM, EPS, DELTA = 3, 32, 1.0, 1e-5


def generate(n: int) -> Any:
    scale = n / 10_000_054
    return longtail_ratings(
        max(1000, int(69_878 * scale)), max(200, int(10_677 * scale**0.5)), n, seed=1
    )


def _model() -> MatrixFactorization:
    return MatrixFactorization(
        method="adadpals",
        epsilon=EPS,
        delta=DELTA,
        dim=DIM,
        steps=STEPS,
        rating_range=(0.5, 5.0),
        seed=0,
        items=None,
    )


class StepClock:
    """Times of every ``solve_users`` call of a runner class (one per step)."""

    def __init__(self, cls: type) -> None:
        self.cls, self.marks = cls, []
        self.original = cls.solve_users

    def __enter__(self) -> StepClock:
        original, marks = self.original, self.marks

        def timed(runner, *args, **kwargs):
            marks.append(time.perf_counter())
            return original(runner, *args, **kwargs)

        self.cls.solve_users = timed
        return self

    def __exit__(self, *exc: object) -> None:
        self.cls.solve_users = self.original


def _jvm_peak_mb(spark: Any) -> float | None:
    try:
        pid = spark.sparkContext._gateway.proc.pid
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except (AttributeError, OSError):
        return None
    return None


def timed_fit(data: Any, items: Any, cls: type, engine: str) -> dict[str, Any]:
    model = _model()
    model.items = items
    reset_peak()
    with StepClock(cls) as clock:
        start = time.perf_counter()
        model.fit(data, engine=engine)
        end = time.perf_counter()
    marks = [*clock.marks, end]
    steps = np.diff(marks)
    return {
        "engine": engine,
        "total_seconds": end - start,
        "setup_seconds": marks[0] - start,
        "step_seconds": steps.tolist(),
        "seconds_per_step": float(np.mean(steps)),
        "python_peak_mb": peak_mb(),
        "item_factors": model.item_factors_,
    }


def run_size(n: int, spark: Any, tmp: Path) -> dict[str, Any]:
    from userdp.recommend.engines.spark import SparkRunner

    t = time.perf_counter()
    ratings = generate(n)
    log(f"[{n:,}] generated {ratings} in {time.perf_counter() - t:.1f} s")
    path = tmp / f"ratings_{n}.parquet"
    table = pa.table(
        {
            "user": ratings.users.astype(np.int64),
            "item": ratings.items.astype(np.int64),
            "rating": ratings.values,
        }
    )
    pq.write_table(table, path, row_group_size=1 << 20)
    items = list(range(ratings.n_items))  # the codes as a public catalogue
    coded = type(ratings)(
        ratings.users,
        ratings.items,
        ratings.values,
        pa.array(np.arange(ratings.n_users)),
        pa.array(np.arange(ratings.n_items)),
    )
    del table
    local = timed_fit(coded, items, LocalRunner, "local")
    log(
        f"[{n:,}] local: {local['seconds_per_step']:.2f} s/step, setup "
        f"{local['setup_seconds']:.2f} s, peak {local['python_peak_mb']:.0f} MiB"
    )
    frame = spark.read.parquet(str(path))
    remote = timed_fit(frame, items, SparkRunner, "spark")
    remote["jvm_peak_mb"] = _jvm_peak_mb(spark)
    log(
        f"[{n:,}] spark: {remote['seconds_per_step']:.2f} s/step, setup "
        f"{remote['setup_seconds']:.2f} s, python peak {remote['python_peak_mb']:.0f} MiB, "
        f"JVM peak {remote['jvm_peak_mb']} MiB"
    )
    diff = float(np.max(np.abs(local.pop("item_factors") - remote.pop("item_factors"))))
    return {
        "n_ratings": ratings.n_ratings,
        "n_users": ratings.n_users,
        "n_items": ratings.n_items,
        "local": local,
        "spark": remote,
        "max_abs_factor_difference": diff,
        "ratio_step": remote["seconds_per_step"] / local["seconds_per_step"],
        "loadavg_after": os.getloadavg(),
    }


def plots(results: dict, out_dir: Path) -> list[str]:
    plt = pyplot()
    if plt is None or not results["sizes"]:
        return []
    fig, ax = plt.subplots(figsize=(6, 4))
    n = [r["n_ratings"] for r in results["sizes"]]
    for engine in ("local", "spark"):
        ax.loglog(n, [r[engine]["seconds_per_step"] for r in results["sizes"]], "o-", label=engine)
    ax.set_xlabel("ratings")
    ax.set_ylabel("seconds per AdaDPALS step (d=32)")
    ax.set_title(f"Spark {results['master']} vs local")
    ax.legend()
    path = out_dir / "recommend_spark.png"
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return [str(path)]


def summary(results: dict) -> None:
    print(
        f"\nAdaDPALS d={DIM}, {STEPS} steps; Spark {results['master']}; load before "
        f"{results['loadavg_before']}"
    )
    print(
        f"{'ratings':>11} {'local s/step':>12} {'spark s/step':>12} {'ratio':>6} "
        f"{'local setup':>11} {'spark setup':>11} {'py peak MiB':>11} {'JVM peak':>9} "
        f"{'max|dU|':>8}"
    )
    for r in results["sizes"]:
        lo, sp = r["local"], r["spark"]
        print(
            f"{r['n_ratings']:>11,} {lo['seconds_per_step']:>12.2f} "
            f"{sp['seconds_per_step']:>12.2f} {r['ratio_step']:>6.1f} "
            f"{lo['setup_seconds']:>11.1f} {sp['setup_seconds']:>11.1f} "
            f"{lo['python_peak_mb']:>5.0f}/{sp['python_peak_mb']:<5.0f} "
            f"{sp['jvm_peak_mb'] or math.nan:>9.0f} "
            f"{r['max_abs_factor_difference']:>8.1e}"
        )
    for key, value in results.get("scaling", {}).items():
        print(f"log-log slope of seconds per step vs ratings ({key}): {value:.2f} (1 = linear)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--out-dir", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if importlib.util.find_spec("pyspark") is None:
        log("pyspark not installed: skipped (pip install 'userdp[spark]')")
        return 0
    from userdp.spark import SparkUnavailableError, spark_session

    try:
        spark = spark_session(args.master, {"spark.ui.showConsoleProgress": "false"})
    except SparkUnavailableError as err:
        log(f"Spark unavailable: {err}; skipped")
        return 0
    results: dict[str, Any] = {
        "command": " ".join([sys.executable, *sys.argv]),
        "master": args.master,
        "loadavg_before": os.getloadavg(),
        "machine": machine(),
        "sizes": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        warm = generate(50_000)  # JVM, Python workers, code generation
        path = Path(tmp) / "warm.parquet"
        pq.write_table(warm.to_arrow(), path)
        model = _model()
        model.items = warm.item_labels
        model.fit(spark.read.parquet(str(path)))
        for n in args.sizes:
            results["sizes"].append(run_size(n, spark, Path(tmp)))
    if len(results["sizes"]) > 1:
        first, last = results["sizes"][0], results["sizes"][-1]
        span = math.log(last["n_ratings"] / first["n_ratings"])
        results["scaling"] = {
            e: math.log(last[e]["seconds_per_step"] / first[e]["seconds_per_step"]) / span
            for e in ("local", "spark")
        }
    finish(results, args.out_dir, "recommend_spark", plots, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
