"""Private SQL: userdp.sql against SmartNoise SQL, PipelineDP and the same query without DP.

Generated web visits (a private ``visits`` fact table, a private one-row-per-user ``profiles``
table, a public ``pages`` dimension table). Each query runs as written by ``userdp.sql`` (no
contribution bounds given; the value range of a SUM/AVG/MEDIAN is a CLAMP in the query), then,
with the bounds they need, by SmartNoise SQL and PipelineDP on the same row-level table (the
query's joins and WHERE run in DuckDB first: neither library runs this query class as is), and
by DuckDB without DP. Per query: keys released, median relative error on the keys every method
released, total absolute error over the true keys (a key not released counts its true value),
time, and the time of the plain DuckDB query.

    python benchmarks/sql.py --rows 1000000
    python benchmarks/sql.py --quick
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import userdp
from _harness import RESULTS, finish, log, pyplot, versions

EPSILON, DELTA = 1.0, 1e-5
#: What a PipelineDP or SmartNoise user has to choose by hand (userdp chooses its own bounds).
MAX_PARTITIONS, MAX_PER_PARTITION, MAX_ROWS = 4, 2, 8

QUERIES: dict[str, dict[str, Any]] = {
    "count": {
        "sql": "SELECT page, COUNT(*) AS v FROM visits GROUP BY page",
        "metric": "count",
    },
    "distinct users": {
        "sql": "SELECT page, COUNT(DISTINCT uid) AS v FROM visits GROUP BY page",
        "metric": "users",
    },
    "sum": {
        "sql": "SELECT page, SUM(CLAMP(secs, 0, 600)) AS v FROM visits GROUP BY page",
        "metric": "sum",
        "value": "LEAST(GREATEST(secs, 0), 600)",
    },
    "average": {
        "sql": "SELECT page, AVG(CLAMP(secs, 0, 600)) AS v FROM visits GROUP BY page",
        "metric": "mean",
        "value": "LEAST(GREATEST(secs, 0), 600)",
    },
    "median": {
        "sql": "SELECT page, MEDIAN(CLAMP(secs, 0, 600)) AS v FROM visits GROUP BY page",
        "metric": "median",
        "value": "LEAST(GREATEST(secs, 0), 600)",
    },
    "public join": {
        "sql": "SELECT p.section, COUNT(*) AS v FROM visits v JOIN pages p "
        "ON v.page = p.page GROUP BY p.section",
        "metric": "count",
        "key": "p.section",
        "from": "visits v JOIN pages p ON v.page = p.page",
    },
    "private join on the unit": {
        "sql": "SELECT u.country, COUNT(DISTINCT v.uid) AS v FROM visits v JOIN profiles u "
        "ON v.uid = u.uid GROUP BY u.country",
        "metric": "users",
        "key": "u.country",
        "from": "visits v JOIN profiles u ON v.uid = u.uid",
        "user": "v.uid",
    },
    "two GROUP BY columns": {
        "sql": "SELECT p.section, v.day, COUNT(*) AS v FROM visits v JOIN pages p "
        "ON v.page = p.page GROUP BY p.section, v.day",
        "metric": "count",
        "key": "p.section || '/' || CAST(v.day AS VARCHAR)",
        "from": "visits v JOIN pages p ON v.page = p.page",
        "keys": 2,
    },
    "WHERE filter": {
        "sql": "SELECT page, COUNT(DISTINCT uid) AS v FROM visits WHERE secs > 60 GROUP BY page",
        "metric": "users",
        "where": "secs > 60",
    },
}


def generate(rows: int, seed: int = 0) -> dict[str, pd.DataFrame]:
    """Zipf-sized users visiting Zipf-popular pages (long tails of both)."""
    rng = np.random.default_rng(seed)
    n_users = max(rows // 20, 100)
    n_pages = 5000
    weights = np.minimum(rng.zipf(1.6, n_users), 1000).astype(float)  # heavy, capped
    uid = rng.choice(n_users, size=rows, p=weights / weights.sum())
    page = (rng.zipf(1.2, rows) - 1) % n_pages
    visits = pd.DataFrame(
        {
            "uid": uid,
            "page": page,
            "secs": rng.exponential(90.0, rows),
            "day": rng.integers(0, 30, rows),
        }
    )
    pages = pd.DataFrame(
        {"page": np.arange(n_pages), "section": [f"s{p % 40}" for p in range(n_pages)]}
    )
    countries = np.array([f"c{c}" for c in range(60)])
    profiles = pd.DataFrame(
        {"uid": np.arange(n_users), "country": countries[(rng.zipf(1.5, n_users) - 1) % 60]}
    )
    return {"visits": visits, "pages": pages, "profiles": profiles}


def _duckdb(tables: dict[str, pd.DataFrame]) -> Any:
    import duckdb

    con = duckdb.connect()
    for name, frame in tables.items():
        con.register(name, frame)
    return con


def plain(con: Any, spec: dict[str, Any]) -> tuple[dict[Any, float], float]:
    """The exact answer (per key, keys as userdp's first column) and its DuckDB time."""
    query = spec["sql"].replace("CLAMP(secs, 0, 600)", "LEAST(GREATEST(secs, 0), 600)")
    start = time.perf_counter()
    out = con.execute(query).fetchall()
    seconds = time.perf_counter() - start
    if spec.get("keys") == 2:
        return {f"{r[0]}/{r[1]}": float(r[2]) for r in out}, seconds
    return {r[0]: float(r[1]) for r in out}, seconds


def run_userdp(
    tables: dict[str, pd.DataFrame], spec: dict[str, Any], seed: int
) -> dict[Any, float]:
    r = userdp.sql(
        spec["sql"],
        tables=tables,
        public_tables=["pages"],
        privacy_unit="uid",
        epsilon=EPSILON,
        delta=DELTA,
        seed=seed,
    )
    t = r.to_pandas()
    if spec.get("keys") == 2:
        return {f"{a}/{b}": float(v) for a, b, v in t.itertuples(index=False)}
    return {k: float(v) for k, v in t.itertuples(index=False)}


def row_table(con: Any, spec: dict[str, Any]) -> pd.DataFrame:
    """The query's (user, key, value) rows, computed by DuckDB: the baselines' input."""
    user = spec.get("user", "uid" if "from" not in spec else "v.uid")
    key = spec.get("key", "page")
    value = spec.get("value", "1.0")
    where = f" WHERE {spec['where']}" if "where" in spec else ""
    source = spec.get("from", "visits")
    return con.execute(
        f"SELECT {user} AS uid, {key} AS key, CAST({value} AS DOUBLE) AS value FROM {source}{where}"
    ).df()


def run_pipelinedp(rows: pd.DataFrame, spec: dict[str, Any]) -> dict[Any, float] | str:
    try:
        import pipeline_dp
    except ImportError:
        return "not installed (pip install pipeline-dp)"
    metric = {
        "count": pipeline_dp.Metrics.COUNT,
        "users": pipeline_dp.Metrics.PRIVACY_ID_COUNT,
        "sum": pipeline_dp.Metrics.SUM,
        "mean": pipeline_dp.Metrics.MEAN,
        "median": pipeline_dp.Metrics.PERCENTILE(50),
    }[spec["metric"]]
    accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=EPSILON, total_delta=DELTA)
    engine = pipeline_dp.DPEngine(accountant, pipeline_dp.LocalBackend())
    params = pipeline_dp.AggregateParams(
        metrics=[metric],
        max_partitions_contributed=MAX_PARTITIONS,
        max_contributions_per_partition=MAX_PER_PARTITION,
        min_value=0.0,
        max_value=600.0,
    )
    extractors = pipeline_dp.DataExtractors(
        privacy_id_extractor=lambda r: r[0],
        partition_extractor=lambda r: r[1],
        value_extractor=lambda r: r[2],
    )
    data = list(rows.itertuples(index=False, name=None))
    result = engine.aggregate(data, params, extractors)
    accountant.compute_budgets()
    name = {"users": "privacy_id_count", "median": "percentile_50"}.get(
        spec["metric"], spec["metric"]
    )
    return {k: float(getattr(v, name)) for k, v in result}


def run_smartnoise(rows: pd.DataFrame, spec: dict[str, Any]) -> dict[Any, float] | str:
    try:
        import snsql
        from snsql import Privacy
    except ImportError:
        return "not installed (pip install smartnoise-sql)"
    aggregate = {
        "count": "COUNT(*)",
        "users": "COUNT(DISTINCT uid)",
        "sum": "SUM(value)",
        "mean": "AVG(value)",
        "median": "PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY value)",
    }[spec["metric"]]
    meta = {
        "": {
            "": {
                "rows": {
                    "max_ids": MAX_ROWS,
                    "row_privacy": False,
                    "uid": {"type": "int", "private_id": True},
                    "key": {"type": "string"},
                    "value": {"type": "float", "lower": 0.0, "upper": 600.0},
                }
            }
        }
    }
    frame = rows.assign(key=rows["key"].astype(str))
    try:
        reader = snsql.from_df(frame, privacy=Privacy(epsilon=EPSILON, delta=DELTA), metadata=meta)
        out = reader.execute(f"SELECT key, {aggregate} AS v FROM rows GROUP BY key")
    except Exception as err:  # a query SmartNoise does not support: reported, not fatal
        return f"failed: {type(err).__name__}: {str(err).splitlines()[0][:120]}"
    typed = {str(k): k for k in rows["key"].unique()}
    return {typed.get(str(k), k): float(v) for k, v in out[1:] if v is not None}


def score(released: dict[Any, float], truth: dict[Any, float], common: set[Any]) -> dict[str, Any]:
    rel = [abs(released[k] - truth[k]) / max(abs(truth[k]), 1e-9) for k in common]
    total = sum(abs(released.get(k, 0.0) - v) for k, v in truth.items())
    return {
        "keys": len(set(released) & set(truth)),
        "median_relative_error": float(np.median(rel)) if rel else None,
        "total_error": total,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000, help="Visits. Default: %(default)s.")
    parser.add_argument("--quick", action="store_true", help="A smoke run: 50,000 rows.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-baselines", action="store_true", help="userdp and DuckDB only.")
    parser.add_argument("--out-dir", type=Path, default=RESULTS)
    args = parser.parse_args()
    rows = 50_000 if args.quick else args.rows
    log(f"generating {rows:,} visits")
    tables = generate(rows, args.seed)
    con = _duckdb(tables)
    results: dict[str, Any] = {}
    for name, spec in QUERIES.items():
        truth, plain_s = plain(con, spec)
        plain(con, spec)  # warm
        truth, plain_s = plain(con, spec)
        start = time.perf_counter()
        released = {"userdp": run_userdp(tables, spec, args.seed)}
        userdp_s = time.perf_counter() - start
        times = {"userdp": userdp_s}
        notes: dict[str, str] = {}
        if not args.skip_baselines:
            base = row_table(con, spec)
            for method, fn in (("pipelinedp", run_pipelinedp), ("smartnoise", run_smartnoise)):
                start = time.perf_counter()
                out = fn(base, spec)
                if isinstance(out, str):
                    notes[method] = out
                    log(f"{name}: {method} {out}")
                    continue
                times[method] = time.perf_counter() - start
                released[method] = out
        common = set(truth)
        for out in released.values():
            common &= set(out)
        row = {
            "true_keys": len(truth),
            "plain_duckdb_seconds": plain_s,
            "methods": {
                m: {**score(out, truth, common), "seconds": times[m]} for m, out in released.items()
            },
            "notes": notes,
        }
        row["time_ratio_userdp_vs_duckdb"] = userdp_s / max(plain_s, 1e-9)
        results[name] = row
        summary = ", ".join(
            f"{m} {v['keys']} keys, err {v['total_error']:.3g}, {v['seconds']:.2f}s"
            for m, v in row["methods"].items()
        )
        log(f"{name}: {len(truth)} true keys; {summary}; plain DuckDB {plain_s:.3f}s")
    out = {"rows": rows, "epsilon": EPSILON, "delta": DELTA, "queries": results}
    out["versions"] = versions(("duckdb", "sqlglot", "pipeline-dp", "smartnoise-sql"))
    finish(out, args.out_dir, "sql", plots=_plots, summary=_summary)


def _summary(out: dict[str, Any]) -> None:
    print(
        f"{'query':<26} {'method':<11} {'keys':>6} {'med rel err':>11} {'total err':>11} "
        f"{'seconds':>8} {'duckdb s':>8}"
    )
    for name, row in out["queries"].items():
        for m, v in row["methods"].items():
            med = v["median_relative_error"]
            print(
                f"{name:<26} {m:<11} {v['keys']:>6} {'-' if med is None else f'{med:.4f}':>11} "
                f"{v['total_error']:>11.4g} {v['seconds']:>8.2f} "
                f"{row['plain_duckdb_seconds']:>8.3f}"
            )


def _plots(out: dict[str, Any], out_dir: Path) -> list[Path]:
    plt = pyplot()
    if plt is None:
        return []
    names = list(out["queries"])
    methods = ["userdp", "pipelinedp", "smartnoise"]
    fig, ax = plt.subplots(figsize=(10, 4))
    for j, m in enumerate(methods):
        keys = [out["queries"][q]["methods"].get(m, {}).get("keys", 0) for q in names]
        ax.bar(np.arange(len(names)) + 0.27 * (j - 1), keys, width=0.27, label=m)
    ax.set_xticks(np.arange(len(names)), names, rotation=30, ha="right")
    ax.set_yscale("log")
    ax.set_ylabel("keys released")
    ax.legend()
    fig.tight_layout()
    path = out_dir / "sql_keys.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return [path]


if __name__ == "__main__":
    main()
