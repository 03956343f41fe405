"""One entry point that dispatches to an algorithm by name."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from userdp._validation import check_choice
from userdp.exceptions import InvalidParameterError
from userdp.partition.baselines import greedy_update, policy_gaussian
from userdp.partition.result import SelectionResult, SparkSelectionResult
from userdp.partition.select import basic, dp_sips, mad, mad2r

__all__ = ["ALGORITHMS", "select_partitions"]

ALGORITHMS: dict[str, Callable[..., SelectionResult]] = {
    "mad2r": mad2r,
    "mad": mad,
    "basic": basic,
    "dp-sips": dp_sips,
    "policy-gaussian": policy_gaussian,
    "greedy-update": greedy_update,
}


def _is_spark_dataframe(data: Any) -> bool:
    cls = type(data)
    return cls.__module__.startswith("pyspark.sql") and cls.__name__ == "DataFrame"


def _dispatch(
    algorithms: Mapping[str, Callable[..., Any]],
    data: Any,
    epsilon: float,
    delta: float,
    algorithm: str,
    options: dict[str, Any],
    engine: str,
) -> Any:
    name = check_choice(algorithm, "algorithm", "select_partitions", list(algorithms))
    func = algorithms[name]
    accepted = [p for p in inspect.signature(func).parameters if p not in ("data",)]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise InvalidParameterError(
            f"The {name!r} algorithm ({engine} engine) does not take the option(s) "
            f"{', '.join(map(repr, unknown))}; it takes {', '.join(map(repr, accepted))}."
        )
    return func(data, epsilon=epsilon, delta=delta, **options)


def select_partitions(
    data: Any,
    *,
    epsilon: float,
    delta: float,
    algorithm: str = "mad2r",
    engine: str = "auto",
    **options: Any,
) -> SelectionResult | SparkSelectionResult:
    """Privately select the items (partition keys) that may be published.

    Parameters
    ----------
    data : Contributions, pyarrow.Table, pandas.DataFrame, (users, items) or iterable of pairs
        One row per (user, item) contribution; repeated pairs count once.
    epsilon, delta : float
        The user-level budget: epsilon in (0, inf), delta in (0, 1).
    algorithm : {"mad2r", "mad", "basic", "dp-sips", "policy-gaussian", "greedy-update"}
        ``"mad2r"`` (default) releases the most items among the parallel algorithms.
    engine : {"auto", "local", "spark"}, default="auto"
        ``"spark"`` runs on a Spark DataFrame (parallel algorithms only) and returns a
        :class:`SparkSelectionResult`; ``"auto"`` picks it when ``data`` is a Spark DataFrame.
    **options
        Passed to the algorithm's function (``max_items_per_user``, ``seed``, ``user_column``,
        ...); see :func:`userdp.partition.mad2r` and the others.

    Returns
    -------
    SelectionResult or SparkSelectionResult

    Examples
    --------
    >>> pairs = [(u, w) for u in range(3000) for w in ("the", "a", f"rare{u}")]
    >>> sorted(select_partitions(pairs, epsilon=1.0, delta=1e-5, seed=1).items)
    ['a', 'the']
    """
    engine = check_choice(engine, "engine", "select_partitions", ["auto", "local", "spark"])
    if engine == "auto":
        engine = "spark" if _is_spark_dataframe(data) else "local"
    if engine == "spark":
        from userdp.partition import spark

        if algorithm in ALGORITHMS and algorithm not in spark.ALGORITHMS:
            raise InvalidParameterError(
                f"The {algorithm!r} algorithm is sequential and has no Spark engine; use one of "
                f"{', '.join(map(repr, spark.ALGORITHMS))} or the local engine."
            )
        return spark.select_partitions(
            data, epsilon=epsilon, delta=delta, algorithm=algorithm, **options
        )
    return _dispatch(ALGORITHMS, data, epsilon, delta, algorithm, options, "local")
