"""Test seam: observe pre-noise weights and substitute the noise of a selection run.

Both engines consult :func:`current` at each release. Outside a :func:`probe` block this is a
no-op. Inside, the engine records every round's pre-noise weights and, when the probe has a
``noise`` function, draws the round's noise from it instead of the secret generator, so tests
can check that the local and Spark engines compute the same weights and select the same items
given the same noise. Never used by the product.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Probe", "current", "probe"]

#: ``noise(round_index, items, sigma) -> array``: one value per item, a pure function of the
#: item so that both engines get the same noise whatever order they hold items in. Must be
#: picklable by value (a closure or lambda) to reach Spark executors.
NoiseFunction = Callable[[int, Sequence[Any], float], np.ndarray]


@dataclass
class Probe:
    """What a run recorded: ``weights[r]`` is round r's pre-noise weights (engine-specific:
    a ``{item: weight}`` dict locally, a DataFrame of ``_i``/``_w`` on Spark)."""

    noise: NoiseFunction | None = None
    weights: list[Any] = field(default_factory=list)


_CURRENT: ContextVar[Probe | None] = ContextVar("userdp_probe", default=None)


def current() -> Probe | None:
    """The active probe, or None (always None outside tests)."""
    return _CURRENT.get()


@contextmanager
def probe(noise: NoiseFunction | None = None) -> Iterator[Probe]:
    """Record weights (and optionally substitute noise) for the runs inside the block."""
    p = Probe(noise=noise)
    token = _CURRENT.set(p)
    try:
        yield p
    finally:
        _CURRENT.reset(token)
