"""Where a recommender's statistics are computed: the engine names, the ``Runner`` protocol
every runner implements and the one factory that builds them (NumPy locally, Spark on a
cluster). The training loops see a runner only through this protocol, so a step cannot tell
(or touch) where the data live.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from userdp._engines import ENGINES, resolve_engine
from userdp.multitask.kernels import segment_statistics
from userdp.privacy.noise import NoiseSource
from userdp.recommend.core.items import ItemSet
from userdp.recommend.core.spec import Allocation, ItemUpdateSpec, RunSpec
from userdp.recommend.engines.local import LocalRunner, Preamble, UserSolve

__all__ = ["ENGINES", "Runner", "make_runner", "resolve_engine"]


class Runner(Protocol):
    """The calls of :mod:`userdp.recommend.engines.local`'s table (exact statistics, never
    released), as :class:`~userdp.recommend.engines.local.LocalRunner` and
    :class:`~userdp.recommend.engines.spark.SparkRunner` implement them."""

    n_users: int

    def check(self, spec: RunSpec, item_set: ItemSet | None) -> None: ...

    def prepare(
        self,
        spec: RunSpec,
        item_set: ItemSet | None,
        noise: NoiseSource,
        *,
        count_noise: float | None,
        center_noise: float | None,
    ) -> Preamble: ...

    def restrict(self, trained: np.ndarray) -> None: ...

    def allocate(self, rule: Allocation, counts: np.ndarray | None, noise: NoiseSource) -> None: ...

    def solve_users(self, U: np.ndarray, how: UserSolve, reg: float) -> None: ...

    def gravity(self) -> np.ndarray: ...

    def item_statistics(self, weighted: bool) -> tuple[np.ndarray, np.ndarray]: ...

    def gd_update(
        self,
        model: ItemUpdateSpec,
        U: np.ndarray,
        freq: np.ndarray,
        plan: Any,
        noise: NoiseSource,
        gravity: np.ndarray | None,
        labels: Any,
    ) -> np.ndarray: ...

    def close(self) -> None: ...


def make_runner(ratings: Any, engine: str, kernel: Any = segment_statistics) -> Runner:
    """The runner of a resolved ``engine`` (PySpark imported only for ``"spark"``);
    ``kernel``: the local runner's statistics kernel (see :class:`LocalRunner`)."""
    if engine == "spark":
        from userdp.recommend.engines.spark import SparkRunner

        return SparkRunner(ratings)
    return LocalRunner(ratings, kernel)
