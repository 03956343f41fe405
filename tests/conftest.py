"""Shared fixtures: one local Spark session for the whole suite (started on first use)."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def spark():
    """A local[2] SparkSession shared by every Spark test; skips when PySpark is missing.

    Small shuffle partition counts keep the tiny test jobs fast; the suite stops the session
    at the end.
    """
    if os.environ.get("CI"):  # CI installs the spark extra: a missing engine is a failure
        import pyspark  # noqa: F401
    pytest.importorskip("pyspark")
    from userdp.spark import SparkUnavailableError, spark_session

    try:
        session = spark_session(
            "local[2]",
            config={
                "spark.sql.shuffle.partitions": "4",
                "spark.default.parallelism": "2",
                "spark.ui.showConsoleProgress": "false",
                "spark.driver.memory": "3g",
            },
        )
    except SparkUnavailableError as err:  # no Java: the Spark tests cannot run here
        if os.environ.get("CI"):
            raise
        pytest.skip(str(err))
    yield session
    session.stop()
