"""The released GROUP BY table plus what it cost and how it was made."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import dp_accounting
import pyarrow as pa

from userdp._diagnostics import NotPrivateMapping
from userdp.privacy import PrivacyBudget

__all__ = ["AggregateDiagnostics", "AggregateResult"]


@dataclass(frozen=True)
class AggregateDiagnostics(NotPrivateMapping):
    """NON-PRIVATE exact statistics of the input, for the data curator only (a mapping).

    .. warning:: Not private. Un-noised counts of the input, to monitor the job; not part of
       the release, never printed by :meth:`AggregateResult.summary`, never to be published.
    """

    n_rows: int
    n_users: int
    rows_in_keys: int
    seconds: float


@dataclass(frozen=True)
class AggregateResult:
    """A private GROUP BY release.

    Attributes
    ----------
    table : pyarrow.Table or pyspark.sql.DataFrame
        Column ``key`` (the released or public keys; null for the one-key case) then one
        column per metric: ``users``, ``count``, ``sum``, ``mean`` and ``q<level>`` (e.g.
        ``q0.5``) for quantiles. A Spark DataFrame on the Spark engine.
    metrics : tuple of str
    budget : PrivacyBudget
        The (epsilon, delta) of the whole run (selection, bound choice and metrics composed).
    dp_event : dp_accounting.DpEvent
        Every release of the run as one ``ComposedDpEvent``.
    contribution_bounds : Mapping
        The l2 bound C of each contribution vector (``users``, ``count``, ``sum``) and ``h``
        (the l1 bound on a user's quantile weight): released values (chosen from noisy
        histograms, or given), safe to publish.
    noise_sd : Mapping
        Noise standard deviation of each noised vector (z * C, on the released grid): a
        function of public parameters and released bounds only.
    parameters : Mapping
        Everything else the run used (shares, selection budget and algorithm, bounding form).
    diagnostics : AggregateDiagnostics
        Exact NON-PRIVATE counts for the curator (see its warning).
    """

    table: Any = field(repr=False)
    metrics: tuple[str, ...]
    budget: PrivacyBudget
    dp_event: dp_accounting.DpEvent = field(repr=False)
    contribution_bounds: Mapping[str, float]
    noise_sd: Mapping[str, float]
    parameters: Mapping[str, Any]
    diagnostics: AggregateDiagnostics
    engine: str = "local"

    def to_arrow(self) -> pa.Table:
        """The released table as PyArrow (collected from Spark: one row per key)."""
        if isinstance(self.table, pa.Table):
            return self.table
        ordered = self.table
        if hasattr(ordered, "toArrow"):  # Spark >= 4.0
            return ordered.toArrow()
        return pa.Table.from_pandas(ordered.toPandas(), preserve_index=False)

    def to_pandas(self) -> Any:
        """The released table as a pandas DataFrame."""
        return self.to_arrow().to_pandas()

    def to_polars(self) -> Any:
        """The released table as a Polars DataFrame (the columns of :meth:`to_arrow`).

        Needs Polars (``pip install polars``); it is not a dependency of userdp.
        """
        from userdp.data.io import polars_frame

        return polars_frame(self.to_arrow())

    def to_spark(self) -> Any:
        """The released table as a Spark DataFrame (Spark engine only)."""
        if isinstance(self.table, pa.Table):
            from userdp.exceptions import InvalidParameterError

            raise InvalidParameterError(
                "to_spark needs a result of the Spark engine; use to_arrow or to_pandas."
            )
        return self.table

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.to_arrow().to_pylist())

    def __len__(self) -> int:
        return int(self.parameters.get("keys_released", self.to_arrow().num_rows))

    def to_dict(self, *, rows: bool = True) -> dict[str, Any]:
        """The release as plain data (ready for ``json.dumps``): budget, unit, metrics, the
        released bounds, the noise sd of each vector and, with ``rows``, the table's rows.
        Never the diagnostics."""
        out: dict[str, Any] = {
            "epsilon": self.budget.epsilon,
            "delta": self.budget.delta,
            "unit": "user",
            "keys": len(self),
            "metrics": list(self.metrics),
            "contribution_bounds": {k: float(v) for k, v in self.contribution_bounds.items()},
            "noise_sd": {k: float(v) for k, v in self.noise_sd.items()},
        }
        if rows:
            out["rows"] = self.to_arrow().to_pylist()
        return out

    def summary(self) -> str:
        """One line of released facts only: keys, metrics, bounds and budget."""
        bounds = ", ".join(f"{k}={v:.4g}" for k, v in self.contribution_bounds.items())
        n = len(self)
        return (
            f"aggregate: {n} key{'' if n == 1 else 's'}, metrics {','.join(self.metrics)}, "
            f"bounds {bounds or 'none'} at epsilon={self.budget.epsilon:g}, "
            f"delta={self.budget.delta:g}"
        )
