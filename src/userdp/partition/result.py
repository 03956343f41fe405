"""The result of a partition selection: released items plus what it cost."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import dp_accounting
import pyarrow as pa

from userdp._diagnostics import NotPrivateMapping
from userdp.privacy import PrivacyBudget
from userdp.privacy.budget import format_delta

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame

__all__ = ["SelectionDiagnostics", "SelectionResult", "SparkSelectionResult"]


@dataclass(frozen=True)
class SelectionDiagnostics(NotPrivateMapping):
    """NON-PRIVATE exact statistics of the input, for the data curator only (a mapping).

    .. warning:: Not private. These are un-noised counts of the input, shown to whoever runs
       the selection so they can monitor the job; they are not part of the release, are never
       printed by :meth:`SelectionResult.summary`, and must not be published alongside the
       items. ``round_sizes`` is the exception: the number of items each round released is
       post-processing of the release.
    """

    n_users: int
    n_pairs: int
    duplicates_dropped: int
    pairs_dropped_by_capping: tuple[int, ...]
    round_sizes: tuple[int, ...]
    seconds: float


class _ItemsAsData:
    """Iteration, ``in``, ``len`` and data-frame exports over ``to_arrow()`` (the items)."""

    def to_arrow(self) -> pa.Array:  # pragma: no cover - defined by the result classes
        raise NotImplementedError

    def __iter__(self) -> Iterator[Any]:
        """The selected items, as Python values (``for item in result``)."""
        return iter(self.to_arrow().to_pylist())

    def __contains__(self, value: object) -> bool:
        """Whether ``value`` was selected (compared as the items' Arrow type)."""
        items = self.to_arrow()
        try:
            probe = pa.array([value])
            if _kind(probe.type) != _kind(items.type):  # 5 is not "5", as for a Python list
                return False
            probe = probe.cast(items.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
            return False
        import pyarrow.compute as pc

        return bool(pc.is_in(probe, value_set=items)[0].as_py())

    def to_table(self) -> pa.Table:
        """The selected items as a one-column PyArrow table (column ``item``)."""
        return pa.table({"item": self.to_arrow()})

    def to_pandas(self) -> Any:
        """The selected items as a one-column pandas DataFrame (column ``item``)."""
        return self.to_table().to_pandas()

    def to_polars(self) -> Any:
        """The selected items as a one-column Polars DataFrame (column ``item``).

        Needs Polars (``pip install polars``); it is not a dependency of userdp.
        """
        from userdp.data.io import polars_frame

        return polars_frame(self.to_table())

    def to_dict(self) -> dict[str, Any]:
        """Released facts as plain Python values, ready for ``json.dumps``: the items, the
        algorithm and the budget (never the non-private diagnostics)."""
        budget = self.budget  # type: ignore[attr-defined]
        return {
            "algorithm": self.algorithm,  # type: ignore[attr-defined]
            "items": self.to_arrow().to_pylist(),
            "epsilon": budget.epsilon,
            "delta": budget.delta,
            "unit": budget.unit,
        }


def _kind(t: pa.DataType) -> str:
    if pa.types.is_dictionary(t):
        return _kind(t.value_type)
    if pa.types.is_integer(t):
        return "integer"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return "binary"
    return str(t)


@dataclass(frozen=True)
class SelectionResult(_ItemsAsData):
    """Items released by a partition-selection algorithm.

    Attributes
    ----------
    algorithm : str
        Name of the algorithm that ran.
    budget : PrivacyBudget
        (epsilon, delta) spent, from the accountant's basic composition over the rounds.
    parameters : Mapping
        Every parameter the algorithm used, including derived noise scales and thresholds.
    dp_event : dp_accounting.DpEvent
        The composed event of all rounds, for use in a larger accountant.
    diagnostics : SelectionDiagnostics
        A mapping of exact, NON-PRIVATE statistics for the curator (see its warning); never in
        :meth:`summary`.

    Noisy weights are never stored here.
    """

    item_array: pa.Array = field(repr=False)
    algorithm: str
    budget: PrivacyBudget
    parameters: Mapping[str, Any]
    dp_event: dp_accounting.DpEvent = field(repr=False)
    diagnostics: SelectionDiagnostics

    @property
    def items(self) -> list[Any]:
        """The selected items as Python values of the input's type (str, int, ...)."""
        return self.item_array.to_pylist()

    def to_arrow(self) -> pa.Array:
        """The selected items as a PyArrow array."""
        return self.item_array

    def __len__(self) -> int:
        return len(self.item_array)

    def summary(self) -> str:
        """One line of released facts only: algorithm, number of items, budget."""
        return _summary(self.algorithm, len(self), self.budget)


def _summary(algorithm: str, n: int, budget: PrivacyBudget) -> str:
    # Only the release and its cost: the exact input counts are in ``diagnostics``.
    return (
        f"{algorithm}: selected {n} item{'' if n == 1 else 's'} at "
        f"epsilon={budget.epsilon:g}, delta={format_delta(budget.delta)}"
    )


@dataclass(frozen=True)
class SparkSelectionResult(_ItemsAsData):
    """Items released by the Spark engine: a DataFrame plus the local result's metadata.

    Attributes
    ----------
    dataframe : pyspark.sql.DataFrame
        One column (named like the input's item column, with its type) of selected items,
        cached on the cluster; ``dataframe.unpersist()`` frees it.
    algorithm, budget, parameters, dp_event, diagnostics
        As in :class:`SelectionResult`.
    """

    dataframe: DataFrame = field(repr=False)
    algorithm: str
    budget: PrivacyBudget
    parameters: Mapping[str, Any]
    dp_event: dp_accounting.DpEvent = field(repr=False)
    diagnostics: SelectionDiagnostics

    @property
    def items(self) -> list[Any]:
        """The selected items, collected to the driver and sorted (for small releases)."""
        column = self.dataframe.columns[0]
        return [row[0] for row in self.dataframe.orderBy(column).collect()]

    def to_arrow(self) -> pa.Array:
        """The selected items as a PyArrow array, collected to the driver and sorted."""
        column = self.dataframe.columns[0]
        ordered = self.dataframe.orderBy(column)
        if hasattr(ordered, "toArrow"):  # Spark >= 4.0
            return ordered.toArrow().column(0).combine_chunks()
        frame: Any = ordered.toPandas()  # pandas (typed by pandas-stubs when installed)
        return pa.Array.from_pandas(frame[column])

    def __len__(self) -> int:
        return sum(self.diagnostics.round_sizes)

    def summary(self) -> str:
        """One line of released facts only: algorithm, number of items, budget."""
        return _summary(self.algorithm, len(self), self.budget)
