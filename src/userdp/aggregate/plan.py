"""How a GROUP BY's one budget is split, decided from public parameters before any data is read.

Every noised vector of the release is Gaussian (key selection's weight rounds, the histograms
that choose the contribution bounds, the per-key metric vectors); quantiles are the one
exception (exponential mechanisms, pure epsilon, basic composition). The Gaussian parts compose
as ONE Gaussian of precision ``sum_i z_i^-2`` (adaptive composition of Gaussian mechanisms is
exact; Dong, Roth & Su 2019, Cor. 3.3) and the selection's threshold failures add to delta:

    (epsilon, delta) = (eps_basic + eps_G(sigma_tot; delta_g), delta_g + sum_r dt_r)

where ``sigma_tot^-2`` is the total precision. Why the metrics may join that Gaussian: for every
fixed released key set K each metric vector restricted to K has l2 sensitivity at most its
bound C (see :mod:`userdp.aggregate.local`), and a novel key (held only by the added user)
reaches K only on the selection's threshold-failure event, whose probability is counted in
``sum_r dt_r``; off that event the outputs on neighbouring inputs are the same function of
the one composed Gaussian vector (the argument of the selection's own rounds, one step longer).

The split is in shares of the total precision ``1 / sigma_tot^2`` (:data:`DEFAULT_SHARES`). The
selection is run through :func:`userdp.partition.select_partitions`'s public signature only:
its (epsilon, delta) arguments are solved so that its Gaussian gets its share, and its event is
read back from a dry run on a one-row public table (no private data), so the plan follows
whatever that function composes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dp_accounting
import pyarrow as pa

from userdp.exceptions import InvalidParameterError
from userdp.privacy import Cost, ExponentialMechanismDpEvent, event_cost, gaussian_sigma

__all__ = ["DEFAULT_SHARES", "Plan", "make_plan"]

#: Shares of the total Gaussian precision: key selection (when keys are selected), each
#: bound-choosing histogram (``bounds`` per family, so a family's histogram has the same noise
#: whatever else is asked), the metric vectors (the rest, equally). Quantiles take
#: ``quantile_share`` of epsilon off the top (pure DP). Chosen on a synthetic pilot draw (20,000
#: users with Zipf(1.8) row counts over Zipf(1.3) keys, 183k rows, 12.9k keys; users and
#: count at epsilon 1, delta 1e-5, 3 seeds), never on a reported data set: selection shares
#: 0.3 / 0.5 / 0.7 kept 102 / 125 / 147 keys; the total absolute error of ``users`` over all
#: true keys stayed within 40-42k over the whole grid (bounds 0.02-0.1) and that of ``count``
#: ranged 113k-171k without a trend beyond its seed noise. 0.5 keeps most of the keys while
#: the metrics still get the larger part of the rest.
DEFAULT_SHARES: Mapping[str, float] = {"selection": 0.5, "bounds": 0.05, "quantiles": 0.25}


def total_precision(epsilon: float, delta: float, spent: Cost) -> float:
    """Precision ``sigma_tot^-2`` of the one Gaussian that fits with ``spent``'s basic parts."""
    eps, dlt = epsilon - spent.epsilon, delta - spent.delta
    if eps <= 0 or dlt <= 0:
        raise InvalidParameterError(
            f"aggregate: the budget (epsilon={epsilon:g}, delta={delta:g}) leaves nothing for the "
            "metrics after key selection and quantiles; raise it or lower their shares."
        )
    # a hair below the budget so that floating-point rounding never tips the composed total over
    return gaussian_sigma(eps * (1 - 1e-9), dlt * (1 - 1e-9)) ** -2


@dataclass(frozen=True)
class Plan:
    """The noise of every release of one run, from public parameters only.

    Attributes
    ----------
    selection_epsilon, selection_delta : float or None
        What :func:`~userdp.partition.select_partitions` is called with (None: public keys).
    selection_cost : Cost
        Its event's cost (from the dry run).
    histogram_z : dict
        Family (``"users"``, ``"count"``, ``"sum"``) -> noise multiplier of its norm histogram.
    metric_z : dict
        Vector (``"users"``, ``"count"``, ``"sum"``) -> noise multiplier (noise sd = z * C).
    quantile_epsilon : float
        Per quantile level (all keys together); ``size_histogram_epsilon`` chooses h.
    """

    selection_epsilon: float | None
    selection_delta: float | None
    selection_cost: Cost
    histogram_z: dict[str, float]
    metric_z: dict[str, float]
    quantile_epsilon: float
    size_histogram_epsilon: float
    quantile_levels: tuple[float, ...] = ()
    selection_event: dp_accounting.DpEvent | None = field(default=None, repr=False)

    def events(self, selection_event: dp_accounting.DpEvent | None) -> list[Any]:
        """Every event of the run, in release order (``selection_event`` as run or planned)."""
        out: list[Any] = []
        sel = selection_event if selection_event is not None else self.selection_event
        if sel is not None:
            out.append(sel)
        out += [dp_accounting.GaussianDpEvent(z) for z in self.histogram_z.values()]
        out += [dp_accounting.GaussianDpEvent(z) for z in self.metric_z.values()]
        if self.size_histogram_epsilon:
            out.append(dp_accounting.LaplaceDpEvent(1.0 / self.size_histogram_epsilon))
        out += [ExponentialMechanismDpEvent(self.quantile_epsilon)] * len(self.quantile_levels)
        return out


def _selection_event(
    epsilon: float, delta: float, options: Mapping[str, Any]
) -> dp_accounting.DpEvent:
    """The event ``select_partitions`` composes at (epsilon, delta): a dry run on public data."""
    from userdp.partition import select_partitions  # the public signature only

    dummy = pa.table({"user": ["u"], "item": ["k"]})
    opts = {k: v for k, v in options.items() if k not in ("user_column", "item_column", "seed")}
    return select_partitions(
        dummy, epsilon=epsilon, delta=delta, engine="local", seed=0, **opts
    ).dp_event


def make_plan(
    epsilon: float,
    delta: float,
    *,
    select: bool,
    vectors: Sequence[str],
    families: Sequence[str],
    quantile_levels: Sequence[float],
    smooth: bool,
    size_histogram: bool,
    shares: Mapping[str, float],
    selection_options: Mapping[str, Any],
) -> Plan:
    """Split (epsilon, delta) over selection, bound choice and metrics (see the module doc)."""
    levels = tuple(quantile_levels)
    eps_q_total = shares["quantiles"] * epsilon if levels else 0.0
    size_eps = 0.1 * eps_q_total if (levels and size_histogram) else 0.0
    per_level = (eps_q_total - size_eps) / len(levels) if levels else 0.0
    basic = Cost(epsilon=eps_q_total)
    sel_eps = sel_delta = None
    sel_cost, sel_event = Cost(), None
    if select:
        # pass 1: the threshold deltas depend on delta only; pass 2: epsilon for the share
        probe = event_cost(_selection_event(epsilon, delta, selection_options))
        p_tot = total_precision(epsilon, delta, basic + Cost(probe.epsilon, probe.delta))
        sigma_sel = (shares["selection"] * p_tot) ** -0.5
        sel_delta = delta
        g_delta = delta - probe.delta
        sel_eps = float(dp_accounting.get_epsilon_gaussian(sigma_sel, g_delta)) * (1 - 1e-9)
        sel_event = _selection_event(sel_eps, sel_delta, selection_options)
        sel_cost = event_cost(sel_event)
    p_tot = total_precision(epsilon, delta, basic + Cost(sel_cost.epsilon, sel_cost.delta))
    left = p_tot - sel_cost.precision
    one_hist = shares["bounds"] * p_tot if (smooth and families) else 0.0
    metric_p = left - one_hist * len(families)
    if not vectors:
        metric_p = 0.0
    if metric_p <= 0.01 * p_tot and vectors:
        raise InvalidParameterError(
            "aggregate: key selection and the bound histograms take the whole budget; lower "
            "their shares."
        )
    histogram_z = {f: one_hist**-0.5 for f in families} if one_hist else {}
    metric_z = {v: (metric_p / len(vectors)) ** -0.5 for v in vectors}
    return Plan(
        sel_eps,
        sel_delta,
        sel_cost,
        histogram_z,
        metric_z,
        per_level,
        size_eps,
        levels,
        sel_event,
    )
