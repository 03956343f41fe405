"""Shared fixtures: one Spark session for the whole suite (started on first use), and the
``slow`` marker on every test that uses it; the suite's Hypothesis profile.

``USERDP_SPARK_MASTER`` picks the master (default ``local[2]``): with
``local-cluster[2,1,1024]`` the executors are separate JVMs with their own Python workers, so a
test that passes there does not depend on the driver's memory, globals or files.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

#: The suite's Hypothesis profile, loaded for every run (``python -m pytest -q -n auto`` included):
#: no test depends on wall time, so no per-example deadline and no too-slow health check (a loaded
#: two-core machine made the 200 ms deadline fail hashing tests), and no reproduction blob after a
#: failure (the falsifying example is printed). It builds on the profile Hypothesis picked (``ci``
#: under CI: derandomized, no example database). ``--hypothesis-profile`` still overrides it.
HYPOTHESIS_PROFILE = "userdp"
settings.register_profile(
    HYPOTHESIS_PROFILE,
    parent=settings.get_profile(settings.get_current_profile_name()),
    deadline=None,
    print_blob=False,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(HYPOTHESIS_PROFILE)

SPARK_MASTER = os.environ.get("USERDP_SPARK_MASTER", "local[2]")


def pytest_report_header(config):
    return f"userdp Spark master: {SPARK_MASTER}"


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    """Every test that starts Spark (one under ``tests/spark`` or one that uses the ``spark``
    fixture) is ``slow`` and ``spark``: a JVM takes tens of seconds to start on a loaded
    two-core machine. With pytest-xdist (``-n auto``) they form one group, run by one worker
    in one JVM, while the other workers run everything else."""
    spark_dir = os.path.join(os.path.dirname(__file__), "spark") + os.sep
    for item in items:
        in_spark_dir = str(item.path).startswith(spark_dir)
        if in_spark_dir or "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.spark)
            item.add_marker(pytest.mark.xdist_group("spark"))


#: Settings of the suite's session on ``local[N]``, for frames of tens to thousands of rows, where
#: a Spark job's fixed costs are the whole cost: one shuffle partition (no task per empty
#: partition), no adaptive re-planning between stages, and interpreted expressions instead of
#: compiling Java for every new plan (the interpreted path Spark keeps and tests beside the
#: compiled one). Together they halve the Spark parity tests (two cores:
#: ``tests/spark/test_engine.py`` 268 s -> 118 s).
#: Production settings are still tested: by the tests that take the ``spark_defaults`` fixture
#: (the default selection's parity case among them) and by CI's ``local-cluster`` run, which
#: uses :data:`PRODUCTION` throughout; ``test_seeded_run_is_reproducible_across_partitionings``
#: sets other partition counts.
TINY_FRAMES = {
    "spark.sql.shuffle.partitions": "1",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}
#: What a user's session has (``userdp.spark.spark_session``'s choices and Spark's defaults),
#: with a few shuffle partitions so that tiny frames still spread over them. All settable on a
#: running session (the ``spark_defaults`` fixture sets them for one test).
PRODUCTION = {
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.codegen.wholeStage": "true",
    "spark.sql.codegen.factoryMode": "FALLBACK",
}


@pytest.fixture(scope="session")
def spark():
    """A SparkSession (master ``USERDP_SPARK_MASTER``, default ``local[2]``) shared by every
    Spark test; skips when PySpark is missing.

    On ``local[N]`` it runs with :data:`TINY_FRAMES`, on any other master with
    :data:`PRODUCTION`; the suite stops the session at the end.
    """
    if os.environ.get("CI"):  # CI installs the spark extra: a missing engine is a failure
        import pyspark  # noqa: F401
    pytest.importorskip("pyspark")
    from userdp.spark import SparkUnavailableError, spark_session

    local = SPARK_MASTER.startswith("local[")
    config = {
        **(TINY_FRAMES if local else PRODUCTION),
        "spark.default.parallelism": "1" if local else "2",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": "3g",
    }
    if SPARK_MASTER.startswith("local-cluster"):
        # each executor fits its worker's memory; the executors' Python imports the same
        # userdp as this process (a source checkout on PYTHONPATH included)
        config["spark.executor.memory"] = "512m"
        if os.environ.get("PYTHONPATH"):
            config["spark.executorEnv.PYTHONPATH"] = os.environ["PYTHONPATH"]
    try:
        session = spark_session(SPARK_MASTER, config=config)
    except SparkUnavailableError as err:  # no Java: the Spark tests cannot run here
        if os.environ.get("CI"):
            raise
        pytest.skip(str(err))
    # an already-running session of another master would silently test something else
    assert session.sparkContext.master == SPARK_MASTER, session.sparkContext.master
    yield session
    session.stop()


@pytest.fixture
def spark_defaults(spark):
    """The shared session with :data:`PRODUCTION` settings for one test (a frame large enough
    for compiled code and parallel partitions to pay, or a test of what users run), restored
    after it."""
    before = {key: spark.conf.get(key, None) for key in PRODUCTION}
    for key, value in PRODUCTION.items():
        spark.conf.set(key, value)
    yield spark
    for key, value in before.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)
