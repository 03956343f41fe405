"""Shared fixtures: one Spark session for the whole suite (started on first use), and the
``slow`` marker on every test that uses it.

``USERDP_SPARK_MASTER`` picks the master (default ``local[2]``): with
``local-cluster[2,1,1024]`` the executors are separate JVMs with their own Python workers, so a
test that passes there does not depend on the driver's memory, globals or files.
"""

from __future__ import annotations

import os

import pytest

SPARK_MASTER = os.environ.get("USERDP_SPARK_MASTER", "local[2]")


def pytest_report_header(config):
    return f"userdp Spark master: {SPARK_MASTER}"


def pytest_collection_modifyitems(config, items):
    """Every test that starts Spark (one under ``tests/spark`` or one that uses the ``spark``
    fixture) is ``slow`` and ``spark``: a JVM takes tens of seconds to start on a loaded
    two-core machine."""
    spark_dir = os.path.join(os.path.dirname(__file__), "spark") + os.sep
    for item in items:
        in_spark_dir = str(item.path).startswith(spark_dir)
        if in_spark_dir or "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark():
    """A SparkSession (master ``USERDP_SPARK_MASTER``, default ``local[2]``) shared by every
    Spark test; skips when PySpark is missing.

    Small shuffle partition counts keep the tiny test jobs fast; the suite stops the session
    at the end.
    """
    if os.environ.get("CI"):  # CI installs the spark extra: a missing engine is a failure
        import pyspark  # noqa: F401
    pytest.importorskip("pyspark")
    from userdp.spark import SparkUnavailableError, spark_session

    config = {
        "spark.sql.shuffle.partitions": "4",
        "spark.default.parallelism": "2",
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
