"""Benchmark of userdp's private GROUP BY (``userdp.aggregate``) against PipelineDP.

Run from the repository root::

    python benchmarks/aggregate.py            # full run (see benchmarks/README.md)
    python benchmarks/aggregate.py --quick    # smoke run, well under a minute
    python benchmarks/aggregate.py --spark    # adds Spark vs local at 1M, 3M, 10M rows

Per dataset and epsilon (0.5, 1, 4; delta 1e-5) it reports keys released, the median relative
error over released keys, the total absolute error over ALL true keys (a key not released
counts its true value) and the wall time, for the metrics:

- ``users`` (distinct users per key) on every dataset;
- ``mean`` (mean value per key) on the shared Zipf set (values generated, see
  :func:`zipf_values`) and on MovieLens (mean rating per movie).

Datasets (each skipped when its file is absent): the shared Zipf set
(``partition/synth_zipf_200k.user_item.tsv.gz``), npm words (one package summary = one user,
its distinct lower-cased words = keys), MovieLens ml-100k and ml-latest-small (per movie),
and a generated Zipf set of 10M+ rows (``userdp.data.zipf_contributions``) for time.

PipelineDP 0.3 (``pip install pipeline-dp``; rows skipped when it is not importable) runs
``DPEngine.aggregate`` with PRIVACY_ID_COUNT (and MEAN), its Gaussian partition selection and
its default aggregation settings (Laplace noise, its naive budget split), with two choices of
``max_partitions_contributed`` (``max_contributions_per_partition`` is 1: every dataset has one
row per (user, key)):

- "default": 100, the cap userdp's ``select_partitions`` and the partition benchmark use
  (PipelineDP has no default for it);
- "oracle": the best of a grid chosen NON-PRIVATELY on the true answer (an oracle no real
  user has). The grid is scored with a NumPy replica of PipelineDP's users count (uniform
  sampling of L0 keys per user, PyDP's Gaussian thresholding with PipelineDP's own budget
  split, Laplace noise of scale L0 / epsilon), two draws per grid value, since PipelineDP's
  pure-Python LocalBackend takes over a minute per run on the large sets; the chosen value is
  then run with PipelineDP itself.

Tumult Analytics runs from its own environment: benchmarks/aggregate_tumult.py.

``--spark`` times the Spark engine (``local[2]``) against the local one on generated Zipf
sets (users and means, epsilon 1, the file's read included), with the Spark key selection
alone and a bare-Spark skeleton of the GROUP BY's passes beside them, all four in turn in each
of ``--spark-repeats`` rounds after one untimed round on a small file; it reports medians and
each round's own ratio, as ``partition_spark_floor.py`` does for the selection. Both engines
are timed in their steady state: Spark after the untimed round, the local engine on the second
of two runs in a row.
"""

from __future__ import annotations

import argparse
import functools
import re
import shlex
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from _harness import (
    DEFAULT_NPM,
    RESULTS,
    SHARED_DATA,
    finish,
    log,
    machine,
    pyplot,
    run_mad_skeleton,
    versions,
)

EPSILONS = (0.5, 1.0, 4.0)
DELTA = 1e-5
PDP_DEFAULT_L0 = 100
L0_GRID = (1, 2, 4, 8, 16, 32, 64, 128, 300)
LARGE_GRID = (1, 4, 16, 64, 300)  # the large sets: one replica draw per value
QUICK_GRID = (1, 8, 64)
DEFAULT_ZIPF = SHARED_DATA / "partition/synth_zipf_200k.user_item.tsv.gz"
DEFAULT_MOVIELENS = SHARED_DATA / "movielens"
ZIPF_VALUE_SEED = 20251126


# -- datasets ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Dataset:
    """Rows (user code, key code[, value]); one row per (user, key) in every set used here."""

    name: str
    users: np.ndarray
    keys: np.ndarray
    values: np.ndarray | None
    bounds: tuple[float, float] | None
    n_keys: int
    pipelinedp_seeds: int

    @property
    def rows(self) -> int:
        return int(self.users.size)

    @property
    def metrics(self) -> tuple[str, ...]:
        return ("users",) if self.values is None else ("users", "mean")

    def table(self) -> pa.Table:
        cols = {"user": pa.array(self.users), "key": pa.array(self.keys)}
        if self.values is not None:
            cols["value"] = pa.array(self.values)
        return pa.table(cols)


def _codes(labels: np.ndarray) -> tuple[np.ndarray, int]:
    uniq, codes = np.unique(labels, return_inverse=True)
    return codes.astype(np.int64), int(uniq.size)


def zipf_values(keys: np.ndarray) -> np.ndarray:
    """Deterministic values in [0, 10]: key k's mean is 1 + 8 * frac(k * golden ratio); each row
    adds 2 * N(0, 1) drawn in file order from ``default_rng(ZIPF_VALUE_SEED)``, clipped."""
    centre = 1.0 + 8.0 * np.modf(keys * 0.6180339887498949)[0]
    noise = np.random.default_rng(ZIPF_VALUE_SEED).standard_normal(keys.size)
    return np.clip(centre + 2.0 * noise, 0.0, 10.0)


def load_zipf(path: Path, pdp_seeds: int) -> Dataset:
    import pyarrow.csv as pcsv

    tab = pcsv.read_csv(
        path,
        read_options=pcsv.ReadOptions(column_names=["user", "key"]),
        parse_options=pcsv.ParseOptions(delimiter="\t"),
    )
    users, _ = _codes(tab["user"].to_numpy(zero_copy_only=False))
    # item names are i{rank}: the rank is the key code (a smaller rank is a more popular key)
    ranks = np.asarray([int(s[1:]) for s in tab["key"].to_pylist()], dtype=np.int64)
    _, n_keys = _codes(ranks)
    return Dataset("shared Zipf", users, ranks, zipf_values(ranks), (0.0, 10.0), n_keys, pdp_seeds)


def load_npm(path: Path, pdp_seeds: int) -> Dataset:
    """One package summary = one user; its distinct lower-cased words = keys."""
    token = re.compile(r"[a-z0-9]+")
    tested = re.compile(r"^\[tested here:[^\]]*\]\s*")  # the listing's notes, not the author's
    users: list[int] = []
    words: list[str] = []
    with open(path, encoding="utf-8", errors="replace") as f:
        header = f.readline().rstrip("\n").split("\t")
        col = next(i for i, h in enumerate(header) if h.startswith("summary"))
        for row, line in enumerate(f):
            parts = line.rstrip("\n").split("\t")
            if len(parts) <= col:
                continue
            toks = set(token.findall(tested.sub("", parts[col]).lower()))
            users.extend([row] * len(toks))
            words.extend(toks)
    keys, n_keys = _codes(np.asarray(words, dtype=object).astype(str))
    u, _ = _codes(np.asarray(users, dtype=np.int64))
    return Dataset("npm words", u, keys, None, None, n_keys, pdp_seeds)


def load_movielens(root: Path, name: str, pdp_seeds: int) -> Dataset:
    from userdp.data.movielens import load_ratings_table

    tab = load_ratings_table(root / name, name=name)
    users, _ = _codes(tab["user"].to_numpy())
    keys, n_keys = _codes(tab["item"].to_numpy())
    rating = tab["rating"].to_numpy().astype(np.float64)
    bounds = (0.5, 5.0) if name == "ml-latest-small" else (1.0, 5.0)
    return Dataset(name, users, keys, rating, bounds, n_keys, pdp_seeds)


def make_zipf_rows(n_rows: int, seed: int = 0) -> Dataset:
    """A generated Zipf set of about ``n_rows`` distinct (user, key) rows with values."""
    from userdp.data import zipf_contributions

    c = zipf_contributions(n_users=max(1, round(n_rows / 13.0)), seed=seed)
    users = np.asarray(c.users, dtype=np.int64)
    keys = np.asarray(c.items, dtype=np.int64)
    return Dataset(
        f"Zipf {users.size / 1e6:.1f}M rows",
        users,
        keys,
        zipf_values(keys),
        (0.0, 10.0),
        int(keys.max()) + 1,
        1,
    )


# -- truth and scores ----------------------------------------------------------------------------
def truth(ds: Dataset) -> dict[str, np.ndarray]:
    """Exact per-key answers, indexed by key code (keys absent from the data hold NaN)."""
    n = int(ds.keys.max()) + 1
    users = np.bincount(ds.keys, minlength=n).astype(np.float64)  # one row per (user, key)
    out = {"users": np.where(users > 0, users, np.nan)}
    if ds.values is not None:
        sums = np.bincount(ds.keys, weights=ds.values, minlength=n)
        with np.errstate(invalid="ignore", divide="ignore"):
            out["mean"] = sums / users
    return out


def score(true: np.ndarray, keys: np.ndarray, est: np.ndarray) -> dict[str, float]:
    """Median relative error over released keys; total absolute error over all true keys."""
    present = ~np.isnan(true)
    keys = np.asarray(keys, dtype=np.int64)
    est = np.asarray(est, dtype=np.float64)
    ok = (keys >= 0) & (keys < true.size)
    ok[ok] &= present[keys[ok]]
    rel = np.abs(est[ok] - true[keys[ok]]) / np.abs(true[keys[ok]])
    err = np.abs(np.where(present, true, 0.0))  # a missing key counts its true value
    err[keys[ok]] = np.abs(est[ok] - true[keys[ok]])
    return {
        "median_rel_error": float(np.median(rel)) if rel.size else float("nan"),
        "total_abs_error": float(err[present].sum()),
        "false_keys": int((~ok).sum()),
    }


def _mean_sd(xs: list[float]) -> dict[str, float]:
    """Mean and sd over runs; NaN (a run that released no key has no median) is left out."""
    a = np.asarray(xs, dtype=float)
    a = a[~np.isnan(a)]
    if a.size == 0:
        return {"mean": float("nan"), "sd": float("nan")}
    return {"mean": float(a.mean()), "sd": float(a.std(ddof=1)) if a.size > 1 else 0.0}


def summarise_runs(runs: list[dict[str, Any]], metrics: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {"runs": runs, "n": len(runs)}
    out["keys"] = _mean_sd([r["keys"] for r in runs])
    out["seconds"] = _mean_sd([r["seconds"] for r in runs])
    for m in metrics:
        out[m] = {
            k: _mean_sd([r[m][k] for r in runs]) for k in ("median_rel_error", "total_abs_error")
        }
    return out


# -- userdp --------------------------------------------------------------------------------------
def run_userdp(
    ds: Dataset, table: Any, true: dict[str, np.ndarray], eps: float, seed: int, engine: str
) -> dict[str, Any]:
    import userdp

    kw: dict[str, Any] = {"user_column": "user", "key_column": "key", "metrics": ds.metrics}
    if ds.values is not None:
        kw.update(value_column="value", bounds=ds.bounds)
    t0 = time.perf_counter()
    res = userdp.aggregate(table, epsilon=eps, delta=DELTA, seed=seed, engine=engine, **kw)
    released = res.to_pandas()  # on Spark this is what materialises the release
    secs = time.perf_counter() - t0
    keys = released["key"].to_numpy(dtype=np.int64)
    out: dict[str, Any] = {"seed": seed, "seconds": secs, "keys": int(keys.size)}
    for m in ds.metrics:
        out[m] = score(true[m], keys, released[m].to_numpy(dtype=np.float64))
    return out


# -- PipelineDP ----------------------------------------------------------------------------------
def pipelinedp_available() -> bool:
    try:
        import pipeline_dp  # noqa: F401
    except ImportError:
        return False
    return True


def _pdp_params(ds: Dataset, l0: int) -> Any:
    import pipeline_dp

    metrics = [pipeline_dp.Metrics.PRIVACY_ID_COUNT]
    kw: dict[str, Any] = {}
    if ds.values is not None:
        metrics.append(pipeline_dp.Metrics.MEAN)
        kw = {"min_value": ds.bounds[0], "max_value": ds.bounds[1]}
    return pipeline_dp.AggregateParams(
        metrics=metrics,
        max_partitions_contributed=l0,
        max_contributions_per_partition=1,
        partition_selection_strategy=pipeline_dp.PartitionSelectionStrategy.GAUSSIAN_THRESHOLDING,
        **kw,
    )


def _pdp_aggregate(ds: Dataset, rows: list, eps: float, l0: int) -> tuple[list, Any]:
    import pipeline_dp

    acc = pipeline_dp.NaiveBudgetAccountant(total_epsilon=eps, total_delta=DELTA)
    engine = pipeline_dp.DPEngine(acc, pipeline_dp.LocalBackend())
    ext = pipeline_dp.DataExtractors(
        privacy_id_extractor=lambda r: r[0],
        partition_extractor=lambda r: r[1],
        value_extractor=(lambda r: r[2]) if ds.values is not None else (lambda r: 0),
    )
    res = engine.aggregate(rows, _pdp_params(ds, l0), ext)
    acc.compute_budgets()
    return list(res), acc


def pdp_rows(ds: Dataset) -> list:
    cols = [ds.users.tolist(), ds.keys.tolist()]
    if ds.values is not None:
        cols.append(ds.values.tolist())
    return list(zip(*cols, strict=True))


def run_pipelinedp(
    ds: Dataset, rows: list, true: dict[str, np.ndarray], eps: float, l0: int
) -> dict[str, Any]:
    t0 = time.perf_counter()
    out_rows, _ = _pdp_aggregate(ds, rows, eps, l0)
    secs = time.perf_counter() - t0
    keys = np.asarray([k for k, _ in out_rows], dtype=np.int64)
    out: dict[str, Any] = {"l0": l0, "seconds": secs, "keys": int(keys.size)}
    out["users"] = score(true["users"], keys, [m.privacy_id_count for _, m in out_rows])
    if ds.values is not None:
        out["mean"] = score(true["mean"], keys, [m.mean for _, m in out_rows])
    return out


@functools.cache
def pdp_budget_split(bounds: tuple[float, float] | None, eps: float) -> tuple[float, float]:
    """(epsilon of the users count, epsilon of the selection) as PipelineDP's accountant splits
    the budget for this query (with MEAN when ``bounds`` is given), read from a tiny run."""
    tiny = Dataset(
        "tiny",
        np.arange(50, dtype=np.int64),
        np.zeros(50, dtype=np.int64),
        None if bounds is None else np.full(50, bounds[0]),
        bounds,
        1,
        1,
    )
    _, acc = _pdp_aggregate(tiny, pdp_rows(tiny), eps, 1)
    specs = [m.mechanism_spec for m in acc._mechanisms]
    sel = [s.eps for s in specs if s.mechanism_type.name.endswith("THRESHOLDING")]
    lap = [s.eps for s in specs if s.mechanism_type.name == "LAPLACE"]
    return float(lap[0]), float(sel[0])


def pdp_replica_users_error(
    ds: Dataset, true_users: np.ndarray, eps: float, l0: int, rng: np.random.Generator
) -> float:
    """Total absolute users error of PipelineDP's PRIVACY_ID_COUNT at ``l0``, simulated: the
    grid search of the oracle only (the reported rows run PipelineDP itself)."""
    import pipeline_dp
    from pipeline_dp.partition_selection import create_partition_selection_strategy

    eps_count, eps_sel = pdp_budget_split(ds.bounds, eps)
    # uniform sampling of at most l0 keys per user: random order, keep the first l0 per user
    order = np.lexsort((rng.random(ds.rows), ds.users))
    u_sorted = ds.users[order]
    start = np.r_[0, np.flatnonzero(np.diff(u_sorted)) + 1]
    rank = np.arange(ds.rows) - np.repeat(start, np.diff(np.r_[start, ds.rows]))
    kept = ds.keys[order][rank < l0]
    n = np.bincount(kept, minlength=true_users.size)
    strategy = create_partition_selection_strategy(
        pipeline_dp.PartitionSelectionStrategy.GAUSSIAN_THRESHOLDING, eps_sel, DELTA, l0
    )
    cand = np.flatnonzero(n)
    keep = np.asarray([strategy.should_keep(int(c)) for c in n[cand]], dtype=bool)
    keys = cand[keep]
    est = n[keys] + rng.laplace(0.0, l0 / eps_count, keys.size)
    return score(true_users, keys, est)["total_abs_error"]


def pdp_oracle_l0(
    ds: Dataset, true_users: np.ndarray, eps: float, seed: int, grid: tuple[int, ...], draws: int
) -> tuple[int, dict[int, float]]:
    rng = np.random.default_rng([seed, 25])
    max_deg = int(np.bincount(ds.users).max())
    grid = [g for g in grid if g < max_deg] + [max_deg]  # L0 = max degree: no sampling
    errs = {
        g: float(
            np.mean([pdp_replica_users_error(ds, true_users, eps, g, rng) for _ in range(draws)])
        )
        for g in grid
    }
    return min(errs, key=errs.get), errs


# -- one dataset ---------------------------------------------------------------------------------
def bench_dataset(
    ds: Dataset,
    seeds: int,
    epsilons: tuple[float, ...],
    pdp: bool,
    have_aggregate: bool,
    grid: tuple[int, ...] = L0_GRID,
    pdp_epsilons: tuple[float, ...] | None = None,
) -> dict[str, Any]:
    """userdp at every epsilon and seed; PipelineDP at ``pdp_epsilons`` (all when None)."""
    log(f"[{ds.name}] {ds.rows:,} rows, {np.unique(ds.users).size:,} users, {ds.n_keys:,} keys")
    true = truth(ds)
    table = ds.table()
    out: dict[str, Any] = {
        "rows": ds.rows,
        "users": int(np.unique(ds.users).size),
        "true_keys": int((~np.isnan(true["users"])).sum()),
        "metrics": list(ds.metrics),
        "bounds": ds.bounds,
        "by_epsilon": {},
    }
    rows = pdp_rows(ds) if pdp else None
    for eps in epsilons:
        e: dict[str, Any] = {}
        if have_aggregate:
            runs = [run_userdp(ds, table, true, eps, s, "local") for s in range(seeds)]
            e["userdp"] = summarise_runs(runs, ds.metrics)
            log(f"  eps {eps}: userdp      {_line(e['userdp'], ds.metrics)}")
        if pdp and (pdp_epsilons is None or eps in pdp_epsilons):
            draws = 2 if ds.pipelinedp_seeds > 1 else 1
            oracle, errs = pdp_oracle_l0(ds, true["users"], eps, 0, grid, draws)
            for label, l0 in (
                ("pipelinedp default", PDP_DEFAULT_L0),
                ("pipelinedp oracle", oracle),
            ):
                runs = [run_pipelinedp(ds, rows, true, eps, l0) for _ in range(ds.pipelinedp_seeds)]
                e[label] = summarise_runs(runs, ds.metrics)
                e[label]["l0"] = l0
                log(f"  eps {eps}: {label:18s} L0={l0:<4d} {_line(e[label], ds.metrics)}")
            e["pipelinedp oracle"]["grid_replica_total_abs_error"] = errs
        out["by_epsilon"][str(eps)] = e
    return out


def _line(s: dict[str, Any], metrics: tuple[str, ...]) -> str:
    parts = [f"keys {s['keys']['mean']:9.1f}"]
    for m in metrics:
        parts.append(
            f"{m}: med rel {s[m]['median_rel_error']['mean']:.4f}"
            f" total {s[m]['total_abs_error']['mean']:.4g}"
        )
    parts.append(f"{s['seconds']['mean']:.2f} s")
    return "  ".join(parts)


# -- Spark ---------------------------------------------------------------------------------------
def bench_spark(sizes: list[int], repeats: int) -> list[dict[str, Any]]:
    """Spark against local at each size: ``repeats`` rounds, each timing in turn the local
    GROUP BY (the second of two runs), the Spark GROUP BY, the Spark key selection alone and
    the GROUP BY skeleton (seed = round), after one untimed round of all four on a small file
    (the JVM's compilation and the Python workers' start, which a session pays once). Ratios
    are of the medians, as in ``partition_spark_floor.py``: alternating the arms keeps the machine's
    drift (10-30% within an hour on two cores) out of the ratio, and each round's own ratio is
    kept to show the spread."""
    import pyarrow.parquet as pq

    try:
        from userdp.spark import spark_session

        spark = spark_session("local[2]")
    except Exception as err:
        log(f"Spark unavailable ({err}): skipping the Spark part")
        return []
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        _spark_size(spark, pq, Path(tmp), 20_000, 1, quiet=True)
        log(f"  spark part: an untimed round on 20,000 rows, {time.perf_counter() - t0:.1f} s")
        for n in sizes:
            out.append(_spark_size(spark, pq, Path(tmp), n, repeats))
    return out


def _spark_size(
    spark: Any, pq: Any, tmp: Path, n: int, repeats: int, quiet: bool = False
) -> dict[str, Any]:
    """One size of :func:`bench_spark` (``quiet``: no log lines, for the warm-up round)."""
    say = (lambda _: None) if quiet else log
    ds = make_zipf_rows(n)
    path = tmp / f"zipf_{n}.parquet"
    pq.write_table(ds.table(), path)
    true = truth(ds)
    runs: dict[str, list[Any]] = {"local": [], "spark": []}
    secs: dict[str, list[float]] = {
        "selection": [],
        "skeleton_selection": [],
        "skeleton_metrics": [],
    }
    first_local: list[float] = []

    def timed(engine: str, seed: int) -> dict[str, Any]:
        t0 = time.perf_counter()
        data = pq.read_table(path) if engine == "local" else spark.read.parquet(str(path))
        r = run_userdp(ds, data, true, 1.0, seed, engine)
        r["seconds"] = time.perf_counter() - t0  # reading the file included
        return r

    for s in range(repeats):
        # The local engine runs twice in a row and the second run is timed: at 10M rows its
        # first run after other work took 3.6-4.9 s, its repeats 2.8-3.4 s (benchmarks/
        # README.md), so both engines are timed in their steady state.
        first_local.append(timed("local", s)["seconds"])
        runs["local"].append(timed("local", s))
        runs["spark"].append(timed("spark", s))
        secs["selection"].append(_selection_alone(spark, path, s))
        a, b = _groupby_skeleton(spark, path)
        secs["skeleton_selection"].append(a)
        secs["skeleton_metrics"].append(b)
        say(
            f"  spark part {ds.rows:,} rows, round {s + 1}: local"
            f" {runs['local'][-1]['seconds']:.1f} s (its untimed first run"
            f" {first_local[-1]:.1f} s), spark {runs['spark'][-1]['seconds']:.1f} s"
            f" (x{runs['spark'][-1]['seconds'] / runs['local'][-1]['seconds']:.1f}), the key"
            f" selection alone {secs['selection'][-1]:.1f} s, a GROUP BY skeleton {a + b:.1f} s"
        )
    row: dict[str, Any] = {"rows": ds.rows, "repeats": repeats}
    for engine in ("local", "spark"):
        row[engine] = summarise_runs(runs[engine], ds.metrics)
        say(f"  spark part {ds.rows:,} rows {engine:5s} {_line(row[engine], ds.metrics)}")
    local = [r["seconds"] for r in runs["local"]]
    spark_secs = [r["seconds"] for r in runs["spark"]]
    skeleton = np.add(secs["skeleton_selection"], secs["skeleton_metrics"])
    row["median_seconds"] = {
        "local": float(np.median(local)),
        "local_first": float(np.median(first_local)),
        "spark": float(np.median(spark_secs)),
        "selection": float(np.median(secs["selection"])),
        "skeleton": float(np.median(skeleton)),
    }
    med = row["median_seconds"]
    row["selection_seconds"] = med["selection"]
    row["skeleton_parts"] = [
        float(np.median(secs["skeleton_selection"])),
        float(np.median(secs["skeleton_metrics"])),
    ]
    row["skeleton_seconds"] = med["skeleton"]
    row["ratio"] = med["spark"] / med["local"]
    row["skeleton_ratio"] = med["skeleton"] / med["local"]
    row["round_ratios"] = [t / lo for t, lo in zip(spark_secs, local, strict=True)]
    row["round_skeleton_ratios"] = [float(k / lo) for k, lo in zip(skeleton, local, strict=True)]
    say(
        f"  spark part {ds.rows:,} rows, medians of {repeats}: local {med['local']:.1f} s,"
        f" spark {med['spark']:.1f} s = {row['ratio']:.2f}x (each round's"
        f" {min(row['round_ratios']):.2f}-{max(row['round_ratios']):.2f}x); the key selection"
        f" alone {med['selection']:.1f} s; a GROUP BY skeleton {med['skeleton']:.1f} s ="
        f" {row['skeleton_ratio']:.2f}x local (selection part {row['skeleton_parts'][0]:.1f} s,"
        f" metrics part {row['skeleton_parts'][1]:.1f} s)"
    )
    return row


def _selection_alone(spark: Any, path: Path, seed: int) -> float:
    """Seconds of the Spark key selection by itself (``select_partitions`` with its default
    algorithm on the same file, the budget share the GROUP BY gives it by default does not
    change its work): how much of the GROUP BY's Spark time is the selection."""
    from userdp.partition import select_partitions

    t0 = time.perf_counter()
    r = select_partitions(
        spark.read.parquet(str(path)),
        epsilon=0.5,
        delta=DELTA / 2,
        engine="spark",
        user_column="user",
        item_column="key",
        seed=seed,
    )
    secs = time.perf_counter() - t0  # the result is materialized by the call
    r.dataframe.unpersist()
    return secs


def _groupby_skeleton(spark: Any, path: Path) -> tuple[float, float]:
    """Seconds of a *GROUP BY skeleton* on Spark: what a Spark GROUP BY with privately
    selected keys must do, with none of userdp's book-keeping. The MAD skeleton of
    ``partition_spark_floor.py`` (four rounds of MAD's passes over the capped (user, key)
    pairs, ranked once; no noise, biasing or removal; it overstates biased rounds that
    truncate nothing) stands for the key selection, then one
    aggregation for the metrics: rows grouped by (user, key) with their count and value sum,
    each user's l2 norm (a window by user), and per key the weighted users, rows and sums (no
    bound choice, histogram, noise, join with the selected keys or quantiles). Reads the same
    file as the timed runs. Returns the seconds of its two parts (selection, metrics)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    norm = F.sqrt(F.sum(F.col("c") * F.col("c")).over(Window.partitionBy("user")))
    t0 = time.perf_counter()
    df = spark.read.parquet(str(path))
    run_mad_skeleton(df, "user", "key")
    t1 = time.perf_counter()
    pairs = (
        df.repartition("user")
        .groupBy("user", "key")
        .agg(F.count(F.lit(1)).alias("c"), F.sum("value").alias("s"))
        .withColumn("n", norm)
        .withColumn("w", F.least(F.lit(1.0), 3.0 / F.col("n")))
    )
    (
        pairs.groupBy("key")
        .agg(F.sum("w"), F.sum(F.col("w") * F.col("c")), F.sum(F.col("w") * F.col("s")))
        .write.format("noop")
        .mode("overwrite")
        .save()
    )
    return t1 - t0, time.perf_counter() - t1


# -- report --------------------------------------------------------------------------------------
def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    data = results["datasets"]
    key_ratios = []
    for name, d in data.items():
        for eps, e in d["by_epsilon"].items():
            if "userdp" in e and "pipelinedp default" in e:
                best = max(
                    e["pipelinedp default"]["keys"]["mean"], e["pipelinedp oracle"]["keys"]["mean"]
                )
                ratio = e["userdp"]["keys"]["mean"] / best if best > 0 else float("inf")
                key_ratios.append((name, eps, ratio))
    if key_ratios:
        worst = min(key_ratios, key=lambda t: t[2])
        out.append(
            {
                "target": (
                    "keys released >= 1.5x PipelineDP's (its better bound) at the same budget"
                ),
                "status": "PASS" if worst[2] >= 1.5 else "FAIL",
                "detail": {
                    f"{n} eps {e}": round(r, 3) if np.isfinite(r) else "PipelineDP released 0"
                    for n, e, r in key_ratios
                },
            }
        )
    wins, compared = [], []
    for name, d in data.items():
        e = d["by_epsilon"].get("1.0", {})
        if "userdp" in e and "pipelinedp oracle" in e and not name.startswith("Zipf "):
            u = e["userdp"]["users"]["total_abs_error"]["mean"]
            p = e["pipelinedp oracle"]["users"]["total_abs_error"]["mean"]
            compared.append(name)
            if u < p:
                wins.append(name)
    if compared:
        out.append(
            {
                "target": "lower users total error than PipelineDP (oracle bound) on >= 3 of 4 "
                "datasets at epsilon 1",
                "status": "PASS"
                if len(wins) >= 3
                else ("FAIL" if len(compared) >= 4 else "PARTIAL"),
                "detail": {"wins": wins, "compared": compared},
            }
        )
    sp = results.get("spark") or []
    if sp:
        big = max(sp, key=lambda r: r["rows"])
        rows = np.array([r["rows"] for r in sp], dtype=float)
        secs = np.array([r["median_seconds"]["spark"] for r in sp])
        slope = float(np.polyfit(np.log(rows), np.log(secs), 1)[0]) if len(sp) > 1 else float("nan")
        out.append(
            {
                "target": "Spark within 10x of local at the largest size (medians), and linear "
                "in rows",
                "status": "PASS" if big["ratio"] <= 10 and slope <= 1.15 else "FAIL",
                "detail": {
                    "rows": big["rows"],
                    "ratio": round(big["ratio"], 2),
                    "each round's ratio": [round(x, 2) for x in big["round_ratios"]],
                    "log-log slope of Spark time": round(slope, 3),
                },
            }
        )
    return out


def print_summary(results: dict[str, Any]) -> None:
    print("\nPrivate GROUP BY, delta 1e-5 (mean over seeds; total error over all true keys)")
    hdr = f"{'dataset':22s} {'eps':>4s} {'method':20s} {'keys':>9s} {'users medrel':>12s}"
    hdr += f" {'users total':>12s} {'mean medrel':>11s} {'mean total':>11s} {'s':>8s}"
    print(hdr)
    for name, d in results["datasets"].items():
        for eps, e in d["by_epsilon"].items():
            for method, s in e.items():
                label = method + (f" L0={s['l0']}" if "l0" in s else "")
                mean = s.get("mean")
                print(
                    f"{name:22s} {eps:>4s} {label:20s} {s['keys']['mean']:9.1f}"
                    f" {s['users']['median_rel_error']['mean']:12.4f}"
                    f" {s['users']['total_abs_error']['mean']:12.4g}"
                    + (
                        f" {mean['median_rel_error']['mean']:11.4f}"
                        f" {mean['total_abs_error']['mean']:11.4g}"
                        if mean
                        else f" {'':11s} {'':11s}"
                    )
                    + f" {s['seconds']['mean']:8.2f}"
                )
    for r in results.get("spark") or []:
        med = r["median_seconds"]
        print(
            f"Spark {r['rows']:,} rows, medians of {r['repeats']}: local {med['local']:.1f} s,"
            f" spark {med['spark']:.1f} s (x{r['ratio']:.2f}, each round's"
            f" x{min(r['round_ratios']):.2f}-x{max(r['round_ratios']):.2f}; the key selection"
            f" alone {med['selection']:.1f} s; a GROUP BY skeleton {med['skeleton']:.1f} s ="
            f" x{r['skeleton_ratio']:.2f})"
        )
    print("\nTargets")
    for t in results["targets"]:
        print(f"  [{t['status']}] {t['target']}: {t['detail']}")
    for n in results["notes"]:
        print(f"  note: {n}")


def plots(results: dict[str, Any], out_dir: Path) -> list[str]:
    plt = pyplot()
    data = results["datasets"]
    if plt is None or not data:
        return []
    fig, axes = plt.subplots(2, len(data), figsize=(4 * len(data), 7), squeeze=False)
    for j, (name, d) in enumerate(data.items()):
        eps = [float(e) for e in d["by_epsilon"]]
        methods = sorted({m for e in d["by_epsilon"].values() for m in e})
        for m in methods:
            xs = [x for x, e in zip(eps, d["by_epsilon"].values(), strict=True) if m in e]
            es = [e[m] for e in d["by_epsilon"].values() if m in e]
            axes[0][j].plot(xs, [s["keys"]["mean"] for s in es], "o-", label=m)
            axes[1][j].plot(xs, [s["users"]["total_abs_error"]["mean"] for s in es], "o-", label=m)
        axes[0][j].set_title(name)
        axes[0][j].set_ylabel("keys released")
        axes[1][j].set_ylabel("users: total abs error, all true keys")
        for ax in (axes[0][j], axes[1][j]):
            ax.set_xscale("log")
            ax.set_xlabel("epsilon")
        axes[0][j].legend(fontsize=7)
    fig.tight_layout()
    path = out_dir / f"{results['name']}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [str(path)]


# -- main ----------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: ml-100k (or a small generated set), epsilon 1, 1 seed",
    )
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--epsilons", default=",".join(str(e) for e in EPSILONS))
    p.add_argument("--zipf-path", type=Path, default=DEFAULT_ZIPF)
    p.add_argument("--npm-path", type=Path, default=DEFAULT_NPM)
    p.add_argument("--movielens-root", type=Path, default=DEFAULT_MOVIELENS)
    p.add_argument(
        "--big-rows",
        type=float,
        default=10e6,
        help="rows of the generated Zipf set timed in the main table (0: skip)",
    )
    p.add_argument(
        "--pipelinedp-seeds",
        type=int,
        default=1,
        help="PipelineDP runs per setting on the large sets (3 on MovieLens)",
    )
    p.add_argument(
        "--pipelinedp-large-epsilons",
        default="1.0",
        help="epsilons at which PipelineDP runs on the shared Zipf and npm sets (every epsilon on "
        "MovieLens): its pure-Python backend takes minutes per run there",
    )
    p.add_argument(
        "--datasets",
        default="ml-100k,ml-latest-small,shared Zipf,npm words",
        help="comma list of the named datasets to run",
    )
    p.add_argument("--name", default="aggregate", help="base name of the JSON and PNG files")
    p.add_argument("--skip-pipelinedp", action="store_true")
    p.add_argument(
        "--pipelinedp-big",
        action="store_true",
        help="also time one PipelineDP run on the --big-rows set (minutes, GBs)",
    )
    p.add_argument("--spark", action="store_true", help="time engine='spark' against local")
    p.add_argument("--spark-sizes", default="1e6,3e6,10e6")
    p.add_argument(
        "--spark-repeats",
        type=int,
        default=3,
        help="rounds of the Spark part per size (local, Spark, selection alone, skeleton in "
        "turn); ratios are of the medians",
    )
    p.add_argument("--out-dir", type=Path, default=RESULTS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    epsilons = tuple(float(e) for e in args.epsilons.split(","))
    if args.quick:
        epsilons, args.seeds, args.big_rows = (1.0,), 1, 0
        args.spark_sizes = "2e5,4e5"
    results: dict[str, Any] = {
        "command": " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]),
        "machine": machine(),
        "versions": versions(extra=("pipeline-dp",)),
        "delta": DELTA,
        "epsilons": list(epsilons),
        "seeds": args.seeds,
        "name": args.name,
        "notes": [],
        "datasets": {},
    }
    try:
        from userdp import aggregate  # noqa: F401

        have_aggregate, why = True, ""
    except ImportError as err:
        have_aggregate, why = False, str(err)
    if not have_aggregate:
        results["notes"].append(f"userdp.aggregate not importable ({why}): userdp rows skipped")
        log(results["notes"][-1])
    pdp = not args.skip_pipelinedp and pipelinedp_available()
    if not args.skip_pipelinedp and not pdp:
        results["notes"].append("pipeline_dp not importable: PipelineDP rows skipped")
        log(results["notes"][-1])
    results["notes"].append(
        "PipelineDP oracle: max_partitions_contributed chosen on the true answer (not private)"
    )
    results["notes"].append("Tumult Analytics: benchmarks/aggregate_tumult.py (own environment)")

    loaders: list[tuple[str, Path, Callable[[], Dataset]]] = [
        (
            "ml-100k",
            args.movielens_root / "ml-100k",
            lambda: load_movielens(args.movielens_root, "ml-100k", 1 if args.quick else 3),
        ),
    ]
    if not args.quick:
        loaders += [
            (
                "ml-latest-small",
                args.movielens_root / "ml-latest-small",
                lambda: load_movielens(args.movielens_root, "ml-latest-small", 3),
            ),
            (
                "shared Zipf",
                args.zipf_path,
                lambda: load_zipf(args.zipf_path, args.pipelinedp_seeds),
            ),
            ("npm words", args.npm_path, lambda: load_npm(args.npm_path, args.pipelinedp_seeds)),
        ]
    wanted = set(args.datasets.split(","))
    large_eps = tuple(float(e) for e in args.pipelinedp_large_epsilons.split(","))
    for name, path, load in loaders:
        if name not in wanted:
            continue
        if not path.exists():
            results["notes"].append(f"{name}: {path} not found, skipped")
            log(results["notes"][-1])
            continue
        ds = load()
        large = ds.rows > 1_000_000
        results["datasets"][ds.name] = bench_dataset(
            ds,
            args.seeds,
            epsilons,
            pdp,
            have_aggregate,
            grid=QUICK_GRID if args.quick else (LARGE_GRID if large else L0_GRID),
            pdp_epsilons=large_eps if large else None,
        )
    if args.quick and not results["datasets"]:
        ds = make_zipf_rows(100_000)
        results["datasets"][ds.name] = bench_dataset(ds, 1, epsilons, False, have_aggregate)
    if args.big_rows > 0:
        ds = make_zipf_rows(int(args.big_rows))
        results["datasets"][ds.name] = bench_dataset(ds, 1, epsilons, False, have_aggregate)
        if pdp and args.pipelinedp_big:  # one PipelineDP run (epsilon 1, default bound): time
            true = truth(ds)
            r = run_pipelinedp(ds, pdp_rows(ds), true, 1.0, PDP_DEFAULT_L0)
            e = results["datasets"][ds.name]["by_epsilon"].setdefault("1.0", {})
            e["pipelinedp default"] = summarise_runs([r], ds.metrics) | {"l0": PDP_DEFAULT_L0}
            log(f"  eps 1.0: pipelinedp default {_line(e['pipelinedp default'], ds.metrics)}")
    if args.spark and have_aggregate:
        sizes = [int(float(s)) for s in args.spark_sizes.split(",")]
        results["spark"] = bench_spark(sizes, 1 if args.quick else args.spark_repeats)
    results["targets"] = targets(results)
    finish(results, args.out_dir, args.name, plots=plots, summary=print_summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
