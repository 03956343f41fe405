"""``aggregate_plan``: what a GROUP BY will spend and how much noise each cell gets, before any
data is read (the plan of :mod:`userdp.aggregate.plan`, from public parameters only)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from userdp.aggregate.plan import Plan

__all__ = ["AggregatePlan", "aggregate_plan"]

#: Bounds C at which :meth:`AggregatePlan.table` shows each metric's noise.
SHOWN_BOUNDS = (1.0, 2.0, 4.0, 8.0, 16.0)
_Z95 = 1.959963984540054


@dataclass(frozen=True)
class AggregatePlan:
    """The budget split and the noise per cell of one GROUP BY, from public parameters only.

    Attributes
    ----------
    epsilon, delta : float
        The whole run's budget.
    metrics : tuple of str
    selection : dict or None
        ``{"epsilon", "delta"}`` the key selection is called with (None: public keys).
    noise_multipliers : dict
        Vector (``users``, ``count``, ``value_count``, ``sum``) -> z: its noise sd is ``z * C``
        for the bound C chosen at run time (or given), in the vector's unit (one user, one row,
        one value unit: half the bounds' width for a mean's sum, else the larger bound).
    histogram_noise_multipliers : dict
        Family -> z of the noisy norm histogram that chooses its bound (empty when given).
    quantile_epsilon : float
        Per quantile level, over all keys (pure epsilon); ``size_histogram_epsilon`` picks h.
    """

    epsilon: float
    delta: float
    metrics: tuple[str, ...]
    selection: dict[str, float] | None
    noise_multipliers: dict[str, float]
    histogram_noise_multipliers: dict[str, float]
    quantile_epsilon: float
    size_histogram_epsilon: float
    quantile_levels: tuple[float, ...] = ()
    given_bounds: Mapping[str, float] = field(default_factory=dict)

    def noise_sd(self, vector: str, bound: float) -> float:
        """The noise sd of ``vector``'s cells at contribution bound ``bound``."""
        return self.noise_multipliers[vector] * float(bound)

    def expected_error(self, vector: str, bound: float) -> float:
        """The expected absolute noise of one cell, ``z C sqrt(2/pi)``; heavy users' loss
        below C comes on top (it depends on the data, which the plan does not read)."""
        return self.noise_sd(vector, bound) * math.sqrt(2.0 / math.pi)

    def to_dict(self) -> dict[str, Any]:
        """The plan as plain data (for ``json.dumps``)."""
        return {
            "epsilon": self.epsilon,
            "delta": self.delta,
            "metrics": list(self.metrics),
            "selection": self.selection,
            "noise_multipliers": dict(self.noise_multipliers),
            "histogram_noise_multipliers": dict(self.histogram_noise_multipliers),
            "quantile_epsilon": self.quantile_epsilon,
            "size_histogram_epsilon": self.size_histogram_epsilon,
            "quantile_levels": list(self.quantile_levels),
            "given_bounds": dict(self.given_bounds),
        }

    def table(self) -> str:
        """The plan as a text table: the budget split, then per vector its noise multiplier
        and the 95% half-width of a cell's noise at a few bounds C."""
        sel = self.selection
        lines = [
            f"budget: epsilon={self.epsilon!r}, delta={self.delta!r}",
            "keys: "
            + (
                f"selected privately with epsilon={sel['epsilon']:.6g}, delta={sel['delta']:.6g}"
                if sel
                else "public (free)"
            ),
        ]
        if self.histogram_noise_multipliers:
            hist = ", ".join(f"{f} {z:.4g}" for f, z in self.histogram_noise_multipliers.items())
            lines.append(f"bound-choosing histograms (noise multiplier z): {hist}")
        head = "vector        z        " + "".join(f"95% at C={c:<6g}" for c in SHOWN_BOUNDS)
        lines += ["", head]
        for v, z in self.noise_multipliers.items():
            given = self.given_bounds.get(v)
            cells = (
                f"C={given:g} (given): +-{_Z95 * z * given:.4g}"
                if given is not None
                else "".join(f"+-{_Z95 * z * c:<13.4g}" for c in SHOWN_BOUNDS)
            )
            lines.append(f"{v:<13} {z:<8.4g} {cells}")
        if self.quantile_levels:
            levels = ", ".join(f"{q:g}" for q in self.quantile_levels)
            lines += [
                "",
                (
                    f"quantiles {levels}: epsilon {self.quantile_epsilon:.4g} per level (all "
                    f"keys), h from a size histogram at epsilon {self.size_histogram_epsilon:.4g}"
                ),
            ]
        return "\n".join(lines)


def from_plan(
    plan: Plan,
    *,
    epsilon: float,
    delta: float,
    metrics: tuple[str, ...],
    given: Mapping[str, float],
) -> AggregatePlan:
    """An :class:`AggregatePlan` of a driver's :class:`~userdp.aggregate.plan.Plan`."""
    selection = (
        None
        if plan.selection_epsilon is None
        else {"epsilon": plan.selection_epsilon, "delta": float(plan.selection_delta or 0.0)}
    )
    return AggregatePlan(
        epsilon=float(epsilon),
        delta=float(delta),
        metrics=metrics,
        selection=selection,
        noise_multipliers=dict(plan.metric_z),
        histogram_noise_multipliers=dict(plan.histogram_z),
        quantile_epsilon=plan.quantile_epsilon,
        size_histogram_epsilon=plan.size_histogram_epsilon,
        quantile_levels=plan.quantile_levels,
        given_bounds={k: float(v) for k, v in given.items() if k in plan.metric_z},
    )


def aggregate_plan(
    *,
    metrics: Sequence[str] | str = ("users", "count"),
    keys: str | Sequence[Any] = "select",
    bounds: tuple[float, float] | None = None,
    epsilon: float,
    delta: float,
    one_key: bool = False,
    **options: Any,
) -> AggregatePlan:
    """The plan :func:`~userdp.aggregate.aggregate` would follow, before any data is read.

    Takes ``aggregate``'s parameters that shape the plan (``metrics``, ``keys``, ``bounds``,
    ``epsilon``, ``delta`` and its options: ``bounding``, ``shares``, ``quantiles``,
    ``contribution_bounds``, ``selection``); ``one_key=True`` for ``key_column=None``. Reads
    no data and charges nothing: the budget split, each vector's noise multiplier (noise sd
    per unit of bound) and the expected noise per cell as a function of the bound.

    Examples
    --------
    >>> p = aggregate_plan(metrics="users,count", keys=["a", "b"], epsilon=1.0, delta=1e-5)
    >>> sorted(p.noise_multipliers)
    ['count', 'users']
    >>> p.selection is None  # public keys cost nothing
    True
    """
    from userdp.aggregate.api import _query

    q = _query(
        metrics=metrics,
        key_column=None if one_key else "key",
        value_column="value" if bounds is not None else None,
        bounds=bounds,
        keys=keys,
        epsilon=epsilon,
        delta=delta,
        options=options,
        caller="aggregate_plan",
    )
    return from_plan(q.plan, epsilon=epsilon, delta=delta, metrics=q.metrics, given=q.given_c)
