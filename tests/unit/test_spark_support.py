"""Spark start-up checks and the executor-side noise, without starting Spark."""

from __future__ import annotations

import builtins
import math
import os
import stat
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from userdp import spark as support
from userdp.privacy import NoiseSource
from userdp.privacy.noise import spawn_generator

GIB = 1 << 30


@pytest.mark.parametrize(
    ("memory", "driver"),
    [(24 * GIB, "6144m"), (2 * GIB, "1024m"), (64 * GIB, "8192m"), (None, "4096m")],
)
def test_driver_memory_is_a_quarter_of_ram_within_1_to_8_gib(monkeypatch, memory, driver):
    monkeypatch.setattr(support, "_total_memory", lambda: memory)
    assert support.local_settings("local[2]")["spark.driver.memory"] == driver


@pytest.mark.parametrize(
    ("master", "partitions"), [("local[2]", 8), ("local[16]", 64), ("local", 8), ("local[3,2]", 12)]
)
def test_shuffle_partitions_follow_the_local_cores(master, partitions):
    assert support.local_settings(master, GIB)["spark.sql.shuffle.partitions"] == str(partitions)


def test_local_sessions_cache_frames_uncompressed():
    # one machine: cores are scarcer than memory (see local_settings)
    settings = support.local_settings("local[2]", GIB)
    assert settings["spark.sql.inMemoryColumnarStorage.compressed"] == "false"


@given(
    cores=st.integers(1, 512),
    rows=st.integers(0, 10**11),
    per_call=st.integers(1, 10**8),
)
def test_python_partitions_fill_every_core_and_bound_each_call(cores, rows, per_call):
    """Whole waves (a multiple of the cores, at least one task per core), each call at most
    ``per_call`` rows when the rows spread evenly, and no more waves than that needs."""
    spark = SimpleNamespace(sparkContext=SimpleNamespace(defaultParallelism=cores))
    n = support.python_partitions(spark, rows, per_call)
    assert n >= cores and n % cores == 0
    assert math.ceil(rows / n) <= per_call
    if n > cores:  # one wave fewer would put more than per_call rows in a call
        assert math.ceil(rows / (n - cores)) > per_call


def test_python_partitions_on_two_cores():
    spark = SimpleNamespace(sparkContext=SimpleNamespace(defaultParallelism=2))
    assert support.python_partitions(spark, 10_400_000, 8_000_000) == 2
    assert support.python_partitions(spark, 50_000_000, 8_000_000) == 8


def test_missing_java_says_what_to_install(monkeypatch):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", "")
    with pytest.raises(support.SparkUnavailableError, match=r"Java 17 or later.*no 'java'"):
        support.check_java()


def _fake_java(tmp_path, version: str) -> str:
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text(f"#!/bin/sh\necho 'openjdk version \"{version}\" 2020-01-01' >&2\n")
    java.chmod(java.stat().st_mode | stat.S_IEXEC)
    return str(home)


@pytest.mark.parametrize(("version", "major"), [("1.8.0_292", 8), ("11.0.2", 11)])
def test_old_java_is_refused_with_its_version(monkeypatch, tmp_path, version, major):
    monkeypatch.setenv("JAVA_HOME", _fake_java(tmp_path, version))
    with pytest.raises(support.SparkUnavailableError, match=f"is Java {major}"):
        support.check_java()


def test_java_17_is_accepted(monkeypatch, tmp_path):
    home = _fake_java(tmp_path, "17.0.15")
    monkeypatch.setenv("JAVA_HOME", home)
    assert support.check_java() == os.path.join(home, "bin", "java")


def test_missing_pyspark_says_how_to_install(monkeypatch):
    real_import = builtins.__import__

    def no_pyspark(name, *args, **kwargs):
        if name == "pyspark" or name.startswith("pyspark."):
            raise ImportError("No module named 'pyspark'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pyspark)
    with pytest.raises(support.SparkUnavailableError, match=r"pip install 'userdp\[spark\]'"):
        support.require_pyspark()


# -- executor noise -----------------------------------------------------------------------------
def test_executor_noise_is_gaussian_with_the_round_sigma():
    pd = pytest.importorskip("pandas")
    from userdp.partition.spark import _ExecutorNoise

    noise = _ExecutorNoise(NoiseSource().entropy)
    sigma = 3.7
    items = pd.Series(np.arange(5000))
    draws = np.concatenate(
        [noise(r, b, items, np.zeros(5000), sigma) for r in range(2) for b in range(4)]
    )
    assert stats.kstest(draws / sigma, "norm").pvalue > 1e-4


def test_executor_noise_streams_are_distinct_and_reproducible():
    pd = pytest.importorskip("pandas")
    from userdp.partition.spark import _ExecutorNoise

    entropy = NoiseSource(7).entropy
    a = _ExecutorNoise(entropy)
    items = pd.Series(np.arange(1000))
    same = _ExecutorNoise(entropy)(0, 5, items, np.zeros(1000), 1.0)
    np.testing.assert_array_equal(a(0, 5, items, np.zeros(1000), 1.0), same)
    streams = [a(r, b, items, np.zeros(1000), 1.0) for r, b in [(0, 5), (1, 5), (0, 6)]]
    corr = np.corrcoef(streams)
    assert np.all(np.abs(corr[np.triu_indices(3, 1)]) < 0.15)  # |r| < 4.7 sd under independence
    other = _ExecutorNoise(NoiseSource(8).entropy)(0, 5, items, np.zeros(1000), 1.0)
    assert not np.array_equal(other, same)


def test_salt_and_streams_come_from_the_entropy():
    a, b = NoiseSource(1), NoiseSource(1)
    assert a.salt == b.salt and -(2**63) <= a.salt < 2**63
    assert NoiseSource(2).salt != a.salt
    assert NoiseSource().salt != NoiseSource().salt  # fresh OS entropy each run
    x = spawn_generator(a.entropy, (0, 1)).random(4)
    np.testing.assert_array_equal(a.stream(0, 1).random(4), x)


def test_stopping_new_sessions_never_imports_pyspark():
    """The command line wraps every command in it, local ones too (``userdp --version``-fast
    imports: PySpark loads only for ``--engine spark``)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from userdp.spark import stopping_new_sessions\n"
        "with stopping_new_sessions():\n"
        "    pass\n"
        "print('pyspark' in sys.modules)\n"
    )
    src = os.path.join(os.path.dirname(__file__), "..", "..", "src")
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "False\n"


def test_stopping_new_sessions_lets_the_block_s_exception_through():
    with pytest.raises(KeyboardInterrupt), support.stopping_new_sessions():
        raise KeyboardInterrupt
