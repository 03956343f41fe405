"""Private GROUP BY: users, counts, sums, means and quantiles per key, with one budget.

:func:`aggregate` selects the keys privately (or takes a public key list), chooses each
contribution bound privately from a noisy histogram of user norms, bounds every user's
contribution vector smoothly (scaling, not sampling) and releases every metric with Gaussian
noise, all composed as one Gaussian plus the selection's threshold deltas.
"""

from userdp.aggregate.api import ENGINES, METRICS, aggregate
from userdp.aggregate.plan import DEFAULT_SHARES
from userdp.aggregate.result import AggregateDiagnostics, AggregateResult

__all__ = [
    "DEFAULT_SHARES",
    "ENGINES",
    "METRICS",
    "AggregateDiagnostics",
    "AggregateResult",
    "aggregate",
]
