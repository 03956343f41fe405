"""What every benchmark script shares: logging, machine and version facts, memory peaks, and
writing the JSON + PNG results with a printed summary.

Benchmarks are scripts (``python benchmarks/NAME.py``), so this module is imported by its
plain name from the ``benchmarks/`` folder; the scripts import nothing from each other.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import time
from collections.abc import Callable, Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = [
    "HERE",
    "RESULTS",
    "SHARED_DATA",
    "finish",
    "log",
    "machine",
    "peak_mb",
    "pyplot",
    "reset_peak",
    "versions",
]

HERE = Path(__file__).resolve().parent
#: Default output folder (git-ignored).
RESULTS = HERE / "results"
#: The team's benchmark datasets (never committed; every benchmark skips what is absent).
SHARED_DATA = HERE.parent.parent / "shared" / "data"
#: The npm package listing (a real text corpus) where the team's machines keep it; every
#: benchmark takes ``--npm-path`` and skips the corpus when the file is absent.
DEFAULT_NPM = Path("/work/.library/env/packages/npm.tsv")

_PACKAGES = ("userdp", "numpy", "scipy", "pyarrow", "dp-accounting", "pyspark", "matplotlib")


def log(msg: str) -> None:
    """One time-stamped progress line on stdout."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def versions(extra: Iterable[str] = ()) -> dict[str, str]:
    """Python's and the named packages' versions ("not installed" when absent)."""
    out = {"python": platform.python_version()}
    for pkg in (*_PACKAGES, *extra):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def machine() -> dict[str, Any]:
    """Platform, CPU model and count, total memory: what a timing depends on."""
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "processor": platform.processor(),
        "cpu_count": os.cpu_count(),
    }
    try:
        with open("/proc/meminfo") as f:
            info["mem_total_kb"] = int(f.readline().split()[1])
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu_model"] = line.split(":", 1)[1].strip()
                    break
        info["load_average"] = os.getloadavg()
    except OSError:
        pass
    return info


def peak_mb() -> float:
    """Peak RSS of this process in MiB: VmHWM from /proc (resettable), else ru_maxrss.

    ru_maxrss alone is not used when /proc is there: Linux carries it over from the parent
    across fork+exec, so a child of a big parent starts with the parent's peak.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0: write 5 to /proc/self/clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def pyplot() -> Any:
    """matplotlib.pyplot on the file-only Agg backend, or None (logged) when not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib not installed: no PNGs (pip install -e '.[bench]')")
        return None
    return plt


def finish(
    results: dict[str, Any],
    out_dir: Path,
    name: str,
    plots: Callable[[dict[str, Any], Path], list[str]] | None = None,
    summary: Callable[[dict[str, Any]], None] | None = None,
) -> Path:
    """Write ``results`` to ``out_dir/NAME.json``, draw the PNGs, print the summary.

    Machine facts and versions are added when the script did not record them. Returns the
    JSON path; every written file is printed last, so a reader finds them.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    results.setdefault("machine", machine())
    results.setdefault("versions", versions())
    pngs = plots(results, out_dir) if plots is not None else []
    results["pngs"] = [str(p) for p in pngs]
    path = out_dir / f"{name}.json"
    path.write_text(json.dumps(results, indent=1, default=float))
    if summary is not None:
        summary(results)
    print("".join(f"\nwrote {f}" for f in (path, *pngs)))
    return path


def npm_contributions(path: Path, bigrams: bool = True) -> Any:
    """The npm corpus as user-level data: one package summary = one user; its distinct
    lower-cased words (and, with ``bigrams``, word bigrams) = items.

    Each user's tokens are sorted, so item codes (hence seeded figures) are the same in every
    process whatever Python's string hashing.
    """
    import itertools
    import re

    import numpy as np
    import pyarrow as pa

    from userdp.data import Contributions

    token = re.compile(r"[a-z0-9]+")
    users: list[int] = []
    items: list[str] = []
    with open(path, encoding="utf-8", errors="replace") as f:
        header = f.readline().rstrip("\n").split("\t")
        # the listing's summary column may carry a note after its name
        col = next(k for k, name in enumerate(header) if name.split(" ")[0] == "summary")
        for row, line in enumerate(f):
            parts = line.rstrip("\n").split("\t")
            if len(parts) <= col:
                continue
            words = token.findall(parts[col].lower())
            toks = set(words)
            if bigrams:
                toks.update(f"{a} {b}" for a, b in itertools.pairwise(words))
            users.extend([row] * len(toks))
            items.extend(sorted(toks))
    # Items are strings, always: "null", "none", "true" stay tokens.
    return Contributions.from_columns(
        pa.array(np.asarray(users, dtype=np.int64)), pa.array(items, type=pa.string())
    )


def zipf_pairs(
    n_pairs: int, seed: int = 0, *, shuffle: bool = False, dtype: Any = "int64"
) -> tuple[Any, Any, int]:
    """``n_pairs`` Zipf-shaped integer (user, item) pairs and the number of users.

    Set sizes ~ s^-1.4 on 1..300 (mean ~17.5); items ~ Zipf(1.1) over 1M ranks by the inverse
    CDF of the continuous power law, drawn in chunks to keep the generator's peak small. A user
    may repeat an item (about a fifth of the pairs at 26M). Sorted by user, or in random order
    with ``shuffle`` (the floor benchmarks); the same ``seed`` gives the same pairs either way.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    n_items, a = 1_000_000, 1.1
    s = np.arange(1, 301, dtype=np.float64)
    p = s**-1.4
    cdf = np.cumsum(p) / p.sum()
    n_users = int(n_pairs / float((s * p).sum() / p.sum()) * 1.05) + 10
    sizes = (np.searchsorted(cdf, rng.random(n_users), side="right") + 1).astype(np.int64)
    csum = np.cumsum(sizes)
    n_users = int(np.searchsorted(csum, n_pairs)) + 1
    sizes = sizes[:n_users]
    sizes[-1] -= int(csum[n_users - 1] - n_pairs)
    users = np.repeat(np.arange(n_users, dtype=dtype), sizes)
    items = np.empty(n_pairs, dtype=dtype)
    hi = float(n_items + 1) ** (1 - a)
    chunk = 1 << 23
    for start in range(0, n_pairs, chunk):
        u = rng.random(min(chunk, n_pairs - start))
        x = (1.0 - u * (1.0 - hi)) ** (1.0 / (1 - a))  # density ~ x^-a on [1, n_items + 1)
        items[start : start + u.size] = np.minimum(x.astype(np.int64) - 1, n_items - 1)
    if shuffle:
        perm = rng.permutation(n_pairs)
        users, items = users[perm], items[perm]
    return users, items, n_users


def run_mad_skeleton(df: Any, user: str, item: str, rounds: int = 4) -> None:
    """The *MAD skeleton* on Spark: what a round of MAD itself must do (Alg. 3), ``rounds``
    times over the same capped pairs of ``df``'s (``user``, ``item``) columns, run to the end:
    each user's pairs ranked once in a hashed capping order (cached), then per round one pass
    summing the adaptive users' initial weights per item (the heavy items, broadcast) and one
    summing each user's excess over its items (a window by user) before the item sums, and a
    threshold on a stand-in for the noise; no noise draw, biasing, removal or book-keeping.
    A lower bound on what an engine running unbiased MAD rounds can reach; a biased round that
    truncates no item needs only the second pass, so it overstates MAD2R's later rounds
    (``partition_spark_floor.py``, ``aggregate.py --spark``)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    by_user = Window.partitionBy(user)
    pairs = (
        df.repartition(user)
        .groupBy(user, item)
        .count()
        .withColumn("h", F.xxhash64(user, item))
        .withColumn("rn", F.row_number().over(by_user.orderBy("h")))
        .withColumn("n", F.count(F.lit(1)).over(by_user))
        .persist()
    )
    pairs.count()
    capped = pairs.where(F.col("rn") <= 100).withColumn(
        "deg", F.least(F.col("n"), F.lit(100)).cast("double")
    )
    for _ in range(rounds):
        init = capped.withColumn("init", F.when(F.col("deg") <= 50, 1.0 / F.col("deg")))
        heavy = (
            init.groupBy(item)
            .agg(F.sum("init").alias("wi"))
            .where(F.col("wi") > 10.0)
            .select(item, ((F.col("wi") - 10.0) / F.col("wi")).alias("r"))
        )
        w = (
            init.join(F.broadcast(heavy), item, "left")
            .withColumn("e", F.sum(F.coalesce("r", F.lit(0.0))).over(by_user) / F.col("deg"))
            .groupBy(item)
            .agg(F.sum(F.col("e") + 1.0 / F.sqrt("deg")).alias("w"))
        )
        noisy = w.withColumn("x", F.col("w") + F.xxhash64(item) % 5)  # stands for noise
        noisy.where(F.col("x") >= 20.0).count()
    pairs.unpersist()
