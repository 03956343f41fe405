"""Private partition selection: which items (keys) may be published.

Parallel algorithms (vectorized local engine): :func:`basic`, :func:`dp_sips`, :func:`mad`,
:func:`mad2r`; sequential baselines: :func:`policy_gaussian`, :func:`greedy_update`;
:func:`select_partitions` dispatches by name. The Spark engine (``pip install "userdp[spark]"``)
is :mod:`userdp.partition.spark`, with the same parallel algorithms on DataFrames.
"""

from userdp.partition.api import ALGORITHMS, select_partitions
from userdp.partition.baselines import greedy_update, policy_gaussian
from userdp.partition.result import SelectionDiagnostics, SelectionResult, SparkSelectionResult
from userdp.partition.select import basic, dp_sips, mad, mad2r
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
