"""Private partition selection: which items (keys) may be published.

:func:`select_partitions` is the one entry point: parallel algorithms :func:`basic`,
:func:`dp_sips`, :func:`mad`, :func:`mad2r` (each written once in
:mod:`userdp.partition.algorithms`, run by a local NumPy runner or, for a Spark DataFrame or
``engine="spark"``, a Spark runner: ``pip install "userdp[spark]"``); sequential baselines
:func:`policy_gaussian`, :func:`greedy_update` (local only).
"""

from userdp.partition.api import ALGORITHMS, basic, dp_sips, mad, mad2r, select_partitions
from userdp.partition.baselines import greedy_update, policy_gaussian
from userdp.partition.result import SelectionDiagnostics, SelectionResult, SparkSelectionResult
from userdp.partition.weights import basic_weights, mad_weights, user_weights

__all__ = [
    "ALGORITHMS",
    "SelectionDiagnostics",
    "SelectionResult",
    "SparkSelectionResult",
    "basic",
    "basic_weights",
    "dp_sips",
    "greedy_update",
    "mad",
    "mad2r",
    "mad_weights",
    "policy_gaussian",
    "select_partitions",
    "user_weights",
]
