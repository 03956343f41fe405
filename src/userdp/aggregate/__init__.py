"""Private GROUP BY: users, counts, sums, means and quantiles per key, with one budget.

:func:`aggregate` selects the keys privately (or takes a public key list), chooses each
contribution bound privately from a noisy histogram of user norms, bounds every user's
contribution vector smoothly (scaling, not sampling) and releases every metric with Gaussian
noise, all composed as one Gaussian plus the selection's threshold deltas.
"""

import inspect
import sys
import types
from typing import Any

from userdp.aggregate.api import ENGINES, METRICS, aggregate
from userdp.aggregate.explain import AggregatePlan, aggregate_plan
from userdp.aggregate.plan import DEFAULT_SHARES
from userdp.aggregate.result import AggregateDiagnostics, AggregateResult

__all__ = [
    "DEFAULT_SHARES",
    "ENGINES",
    "METRICS",
    "AggregateDiagnostics",
    "AggregatePlan",
    "AggregateResult",
    "aggregate",
    "aggregate_plan",
]


class _CallableModule(types.ModuleType):
    """``userdp.aggregate`` is both this package and its function: importing the package
    (``import userdp.aggregate``) binds the module to that name, so the module is made callable
    as :func:`aggregate`."""

    def __call__(self, *args: Any, **kwargs: Any) -> AggregateResult:
        return aggregate(*args, **kwargs)

    @property
    def __signature__(self) -> inspect.Signature:
        """The function's signature, for ``help``, IDEs and ``inspect.signature``."""
        return inspect.signature(aggregate)


sys.modules[__name__].__class__ = _CallableModule
