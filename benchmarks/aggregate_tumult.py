"""Tumult Analytics on the private GROUP BY of benchmarks/aggregate.py: users per movie.

Tumult Analytics 0.21 pins numpy < 2, pandas < 2 and PySpark 3.5, so it cannot share userdp's
environment; run this script with a separate one::

    python3 -m venv /tmp/venv-tmlt && /tmp/venv-tmlt/bin/pip install tmlt.analytics
    PYSPARK_PYTHON=/tmp/venv-tmlt/bin/python /tmp/venv-tmlt/bin/python \\
        benchmarks/aggregate_tumult.py

Query, per epsilon (delta 1e-5): the key set by ``QueryBuilder.get_groups`` (half the budget,
with the delta) on rows truncated by ``MaxRowsPerID(L0)``, then ``groupby(KeySet).count()``
(the other half; MovieLens has one row per (user, movie), so the count is the distinct users),
Tumult's default mechanisms. Scored as aggregate.py scores: keys released, median relative
error over released keys, total absolute error over all true keys (a missing key counts its
true value).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from _harness import RESULTS, SHARED_DATA, finish, log, machine, versions

DELTA = 1e-5


def run(path: Path, epsilons: list[float], l0s: list[int], seeds: int) -> list[dict[str, Any]]:
    import pandas as pd
    from pyspark.sql import SparkSession
    from tmlt.analytics import (
        AddRowsWithID,
        ApproxDPBudget,
        KeySet,
        MaxRowsPerID,
        QueryBuilder,
        Session,
    )

    spark = (
        SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    df = pd.read_csv(path, sep="\t", names=["user", "movie", "rating", "ts"])
    true = df.groupby("movie")["user"].nunique().astype(float)
    sdf = spark.createDataFrame(df[["user", "movie"]].astype("int64")).cache()
    out = []
    for eps in epsilons:
        for l0 in l0s:
            for seed in range(seeds):
                t0 = time.perf_counter()
                sess = Session.from_dataframe(
                    privacy_budget=ApproxDPBudget(eps, DELTA),
                    source_id="r",
                    dataframe=sdf,
                    protected_change=AddRowsWithID("user"),
                )
                groups = sess.evaluate(
                    QueryBuilder("r").enforce(MaxRowsPerID(l0)).get_groups(["movie"]),
                    ApproxDPBudget(eps / 2, DELTA),
                )
                query = QueryBuilder("r").enforce(MaxRowsPerID(l0))
                query = query.groupby(KeySet.from_dataframe(groups)).count()
                res = sess.evaluate(query, ApproxDPBudget(eps / 2, 0)).toPandas()
                secs = time.perf_counter() - t0
                keys = res["movie"].to_numpy()
                est = res["count"].to_numpy(dtype=float)
                tv = true.reindex(keys).to_numpy()
                total = true.sum() - tv.sum() + np.abs(est - tv).sum()
                rel = np.abs(est - tv) / tv
                row = {
                    "epsilon": eps,
                    "l0": l0,
                    "seed": seed,
                    "keys": int(keys.size),
                    "users_median_rel_error": float(np.median(rel)) if keys.size else None,
                    "users_total_abs_error": float(total),
                    "seconds": secs,
                }
                log(str(row))
                out.append(row)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ratings", type=Path, default=SHARED_DATA / "movielens/ml-100k/u.data.gz")
    p.add_argument("--epsilons", default="0.5,1,4")
    p.add_argument("--l0", default="8,100", help="MaxRowsPerID values (aggregate.py's grid)")
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--out-dir", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    results: dict[str, Any] = {
        "command": " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]),
        "machine": machine(),
        "versions": versions(extra=("tmlt.analytics", "pandas")),
        "notes": [],
    }
    if not args.ratings.exists():
        results["notes"].append(f"{args.ratings} not found: nothing run")
        log(results["notes"][-1])
        results["rows"] = []
    else:
        try:
            import tmlt.analytics  # noqa: F401
        except ImportError:
            results["notes"].append("tmlt.analytics not importable: nothing run")
            log(results["notes"][-1])
            results["rows"] = []
        else:
            eps = [float(e) for e in args.epsilons.split(",")]
            l0s = [int(v) for v in args.l0.split(",")]
            results["rows"] = run(args.ratings, eps, l0s, args.seeds)

    def summary(r: dict[str, Any]) -> None:
        for row in r["rows"]:
            print(row)

    finish(results, args.out_dir, "aggregate_tumult", summary=summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
