"""The engines every capability runs on, and the one rule that picks one.

``engine="local"`` computes with NumPy/Arrow in this process; ``engine="spark"`` on a
``pyspark.sql.DataFrame`` across a cluster; ``engine="auto"`` (the default everywhere) picks
``"spark"`` for a Spark DataFrame and ``"local"`` for anything else. The check is by type name,
so this module (in the base layer) never imports PySpark.
"""

from __future__ import annotations

from typing import Any

from userdp._validation import check_choice

__all__ = ["ENGINES", "is_spark_dataframe", "resolve_engine"]

#: The engine names every entry point accepts.
ENGINES = ("auto", "local", "spark")


def is_spark_dataframe(data: Any) -> bool:
    """Whether ``data`` is a ``pyspark.sql.DataFrame`` (classic or Connect), without importing
    PySpark."""
    cls = type(data)
    return cls.__module__.startswith("pyspark.sql") and cls.__name__ == "DataFrame"


def resolve_engine(data: Any, engine: str, caller: str) -> str:
    """``engine`` checked (one of :data:`ENGINES`) and ``"auto"`` resolved from the type of
    ``data``: ``"spark"`` for a Spark DataFrame, else ``"local"``. Reads no data, so every
    caller resolves before any budget is charged.

    >>> resolve_engine([("alice", "a")], "auto", "select_partitions")
    'local'
    """
    engine = check_choice(engine, "engine", caller, list(ENGINES))
    if engine == "auto":
        engine = "spark" if is_spark_dataframe(data) else "local"
    return engine
