"""Check that two versions of ``src`` release the same partitions, bit for bit, for fixed seeds.

Run from the repository root, with the other version's ``src`` extracted somewhere::

    mkdir -p /tmp/before && git archive main src | tar -x -C /tmp/before
    python benchmarks/partition_release_identity.py --before-src /tmp/before/src

Each version runs in its own subprocess (its ``src`` first on ``PYTHONPATH``) over every
algorithm and several option sets, 4 input kinds and 3 seeds, and records the released items,
every noisy vector drawn through ``NoiseSource.add_gaussian`` / ``add_laplace``, the round sizes
and the capped-pair counts. The two records must be equal byte for byte; the script prints the
runs that differ and exits 1 if any does. A check for speed work on the local engine, not a
benchmark: nothing is timed.
"""

from __future__ import annotations

import argparse
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

CONFIGS = [
    ("mad2r", {}),
    ("mad2r", {"pooled": False}),
    ("mad2r", {"rounds": 3, "pooled": False, "recap": False}),
    ("mad2r", {"composition": "basic", "rounds": 3}),
    ("mad2r", {"max_items_per_user": "auto"}),
    ("mad2r", {"max_items_per_user": 10}),
    ("mad", {}),
    ("basic", {}),
    ("dp-sips", {}),
    ("dp-sips", {"rounds": 3, "pooled": True}),
    ("dp-sips", {"recap": False}),
    ("policy-gaussian", {}),
    ("greedy-update", {}),
]
SEEDS = (0, 1, 2)


def _inputs() -> dict[str, object]:
    from userdp.data import zipf_contributions

    rng = np.random.default_rng(5)
    return {
        "zipf": zipf_contributions(20_000, n_items=50_000, seed=3),
        "zipf_strings": zipf_contributions(5_000, n_items=20_000, seed=4, string_items=True),
        "uniform": (rng.integers(0, 3000, 200_000), rng.integers(0, 400, 200_000)),
        "heavy_users": (
            np.r_[rng.integers(0, 50, 100_000), rng.integers(0, 5000, 50_000)],
            np.r_[rng.integers(0, 3000, 100_000), rng.zipf(1.5, 50_000) % 10_000],
        ),
    }


def dump(path: str) -> None:
    """Run every configuration with the ``userdp`` on ``sys.path`` and pickle the record."""
    import userdp
    from userdp.partition import select_partitions
    from userdp.privacy import noise as noise_mod

    print("recording with", Path(userdp.__file__).parent)

    captured: list[np.ndarray] = []
    for name in ("add_gaussian", "add_laplace"):
        original = getattr(noise_mod.NoiseSource, name)

        def wrapped(self, *a, _f=original, **k):  # type: ignore[no-untyped-def]
            out = _f(self, *a, **k)
            captured.append(np.array(out, copy=True))
            return out

        setattr(noise_mod.NoiseSource, name, wrapped)
    record = {}
    for data_name, data in _inputs().items():
        for algorithm, options in CONFIGS:
            for seed in SEEDS:
                captured.clear()
                r = select_partitions(
                    data, epsilon=1.0, delta=1e-5, algorithm=algorithm, seed=seed, **options
                )
                d = r.diagnostics
                record[(data_name, algorithm, repr(options), seed)] = (
                    list(r.items),
                    list(captured),
                    d.round_sizes,
                    d.pairs_dropped_by_capping,
                )
    with open(path, "wb") as f:
        pickle.dump(record, f)


def _same(a: tuple, b: tuple) -> bool:
    items_a, noisy_a, *rest_a = a
    items_b, noisy_b, *rest_b = b
    return (
        items_a == items_b
        and rest_a == rest_b
        and len(noisy_a) == len(noisy_b)
        and all(
            x.shape == y.shape and x.tobytes() == y.tobytes()
            for x, y in zip(noisy_a, noisy_b, strict=True)
        )
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before-src", required=True, help="the other version's src folder")
    parser.add_argument("--after-src", default="src", help="default: this checkout's src")
    parser.add_argument("--dump", help=argparse.SUPPRESS)  # internal: one side's record
    args = parser.parse_args()
    if args.dump:
        dump(args.dump)
        return 0
    records = {}
    with tempfile.TemporaryDirectory() as tmp:
        for side, src in (("before", args.before_src), ("after", args.after_src)):
            out = str(Path(tmp) / f"{side}.pkl")
            env = {**os.environ, "PYTHONPATH": str(Path(src).resolve())}
            cmd = [sys.executable, __file__, "--before-src", src, "--dump", out]
            subprocess.run(cmd, check=True, env=env)
            with open(out, "rb") as f:
                records[side] = pickle.load(f)
    before, after = records["before"], records["after"]
    differ = [k for k in before if k not in after or not _same(before[k], after[k])]
    for k in differ:
        print("differs:", k)
    n_vectors = sum(len(v[1]) for v in before.values())
    print(f"{len(before)} runs, {n_vectors} noisy vectors compared: {len(differ)} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
