"""The parameters of a private GROUP BY, validated and planned from public inputs only (no data
read), once for :func:`~userdp.aggregate.aggregate` and :func:`~userdp.aggregate.aggregate_plan`."""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from userdp._validation import check_choice, check_int, check_real
from userdp.aggregate.plan import DEFAULT_SHARES, Plan, make_plan
from userdp.exceptions import InvalidParameterError
from userdp.privacy import PrivacyBudget

METRICS = ("users", "count", "sum", "mean", "quantiles")
#: Hard limits whose count noise (standard deviation per key, in rows) passes this are warned
#: about: a key then needs millions of rows for its cells to say anything.
SWAMPING_SD = 1e6
BOUNDINGS = ("smooth", "limit")
_OPTIONS = {
    "bounding": "smooth",
    "max_partitions_contributed": 1,
    "max_contributions_per_partition": 1,
    "contribution_bounds": None,
    "quantiles": (0.5,),
    "shares": None,
    "selection": None,
    "_noise": None,
}


def _metrics(metrics: Any) -> tuple[str, ...]:
    items = metrics.split(",") if isinstance(metrics, str) else list(metrics)
    out = tuple(dict.fromkeys(m.strip() for m in items if str(m).strip()))
    bad = [m for m in out if m not in METRICS]
    if not out or bad:
        raise InvalidParameterError(
            f"The 'metrics' parameter of aggregate must name one or more of {list(METRICS)}. "
            f"Got {metrics!r} instead."
        )
    return out


def _bounds(bounds: Any) -> tuple[float, float]:
    from userdp.estimate.weighting import check_bounds

    return check_bounds(bounds, "aggregate")


@dataclass(frozen=True)
class _Query:
    """A GROUP BY's validated parameters and its budget plan, from public inputs only."""

    metrics: tuple[str, ...]
    bounding: str
    needs_values: bool
    bounds: tuple[float, float] | None
    select: bool
    l0: int
    linf: int
    levels: tuple[float, ...]
    shares: dict[str, float]
    given_c: dict[str, float]
    selection_options: dict[str, Any]
    vectors: list[str]
    families: list[str]
    plan: Plan
    options: dict[str, Any]


def _query(
    *,
    metrics: Sequence[str] | str,
    key_column: str | None,
    value_column: str | None,
    bounds: Any,
    keys: Any,
    epsilon: float,
    delta: float,
    options: Mapping[str, Any],
    caller: str,
) -> _Query:
    """Validate the parameters and plan the budget (no data read), once for ``aggregate`` and
    ``aggregate_plan``."""
    PrivacyBudget(epsilon, delta)  # the budget's own checks, before anything else
    ms = _metrics(metrics)
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        raise InvalidParameterError(
            f"aggregate does not take the option(s) {', '.join(map(repr, unknown))}; it takes "
            f"{', '.join(repr(k) for k in _OPTIONS if not k.startswith('_'))}."
        )
    o = {**_OPTIONS, **options}
    bounding = check_choice(o["bounding"], "bounding", caller, list(BOUNDINGS))
    needs_values = bool({"sum", "mean", "quantiles"} & set(ms))
    if needs_values and (value_column is None or bounds is None):
        raise InvalidParameterError(
            "aggregate: metrics sum, mean and quantiles need 'value_column' and 'bounds'."
        )
    lo_hi = _bounds(bounds) if needs_values else None
    select = isinstance(keys, str)
    if select and keys != "select":
        raise InvalidParameterError(
            f"The 'keys' parameter of aggregate must be 'select' or a sequence of keys. Got "
            f"{keys!r} instead."
        )
    if key_column is None:
        select = False
    l0 = check_int(o["max_partitions_contributed"], "max_partitions_contributed", caller, low=1)
    linf = check_int(
        o["max_contributions_per_partition"], "max_contributions_per_partition", caller, low=1
    )
    levels = (
        tuple(
            check_real(q, "quantiles", caller, low=0.0, high=1.0, low_open=True, high_open=True)
            for q in o["quantiles"]
        )
        if "quantiles" in ms
        else ()
    )
    shares = {**DEFAULT_SHARES, **(o["shares"] or {})}
    for name, v in shares.items():
        check_real(v, f"shares[{name!r}]", caller, low=0.0, high=1.0, low_open=True, high_open=True)
    given_c = dict(o["contribution_bounds"] or {})
    for name, v in given_c.items():
        check_real(v, f"contribution_bounds[{name!r}]", caller, low=0.0, low_open=True)
    selection_options = dict(o["selection"] or {})

    mean = "mean" in ms
    # COUNT(*) is its own vector; the mean is SUM(v) / COUNT(v) (rows with a value) under one
    # weight per user, so COUNT means the same with or without a mean beside it
    vectors = [
        v
        for v, want in (
            ("users", "users" in ms),
            ("count", "count" in ms),
            ("value_count", mean),
            ("sum", "sum" in ms or mean),
        )
        if want
    ]
    smooth = bounding == "smooth"
    families = [f for f in vectors if f not in given_c] if smooth else []
    plan = make_plan(
        epsilon,
        delta,
        select=select,
        vectors=vectors,
        families=families,
        quantile_levels=levels,
        smooth=smooth,
        size_histogram=smooth and "h" not in given_c,
        shares=shares,
        selection_options=selection_options,
    )
    if not smooth:
        _warn_if_swamped(plan, vectors, l0, linf, keys if not select else None)
    return _Query(
        ms,
        bounding,
        needs_values,
        lo_hi,
        select,
        l0,
        linf,
        levels,
        shares,
        given_c,
        selection_options,
        vectors,
        families,
        plan,
        o,
    )


def _warn_if_swamped(
    plan: Plan, vectors: Sequence[str], l0: int, linf: int, keys: Sequence[Any] | None
) -> None:
    """Warn when hard limits give noise no key's cells can rise above (public inputs only).

    A user keeps at most ``min(l0, |K|)`` keys and ``linf`` rows per key, so the count's noise
    per key has standard deviation ``z sqrt(min(l0, |K|)) linf`` rows (``|K|`` when the keys
    are public; ``l0`` otherwise) and that of users ``z sqrt(min(l0, |K|))`` users.
    """
    kept = min(l0, len(keys)) if keys is not None and len(keys) else l0
    units = {"users": 1.0, "count": float(linf), "value_count": float(linf), "sum": float(linf)}
    sd = max(plan.metric_z[v] * math.sqrt(kept) * units[v] for v in vectors)
    if sd > SWAMPING_SD:
        warnings.warn(
            f"aggregate: the hard limits 'max_partitions_contributed' {l0} and "
            f"'max_contributions_per_partition' {linf} give noise of standard deviation up to "
            f"{sd:.3g} rows per key: a key needs far more rows than that for its cells to mean "
            "anything. Lower the limits, or bound smoothly (the default).",
            UserWarning,
            stacklevel=4,
        )
