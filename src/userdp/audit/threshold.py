"""Threshold check: every weight-and-threshold round keeps a novel item's crossing probability
within its budget, computed exactly for the grid mechanism the round releases its weights with.

A round noises the weights ``w`` on the grid ``g`` as ``X = (k + m) g`` with ``k = rint(w/g)``
and ``m = floor(Z/g + 1/2)``, ``Z ~ N(0, s^2)`` (``s`` the scale actually drawn), and releases
the items with ``X >= rho``. For integers ``k, m``: ``X >= rho`` iff ``m >= M = ceil(rho/g -
k)`` iff ``Z >= (M - 1/2) g``, so a novel item of weight at most ``h(t) = h_scale / sqrt(t)``
(one of ``t`` novel items; ``k <= rint(h(t)/g)``) crosses with probability exactly

    ``p(t) = P[Z >= (ceil(rho/g - rint(h(t)/g)) - 1/2) g]``

at its worst weight. The round's threshold budget ``dt`` (half the delta of a round calibrated
on its own, ``threshold_delta`` of a round of a Gaussian composition) needs ``p(t) <= 1 - (1 -
dt)^(1/t)`` for every ``t`` up to the cap, so that the ``t`` novel items stay below ``rho``
together with probability ``>= 1 - dt``. The check reports the largest ratio of the two over
``t`` and every round of every planned algorithm: above 1 is a FAIL. A threshold computed for
the continuous mechanism (without the margin for the grid) exceeds 1 by about ``g / s``
relative, which is far above the ~1e-15 accuracy of the computation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

__all__ = ["THRESHOLD_CONFIGURATIONS", "ThresholdRow", "threshold_rows"]

TOLERANCE = 1e-12  # relative: the computation is accurate to ~1e-15

#: The planned selections checked: (label, algorithm, options).
THRESHOLD_CONFIGURATIONS: tuple[tuple[str, str, dict[str, object]], ...] = (
    ("select[mad2r]", "mad2r", {}),
    ("select[mad2r, rounds=3]", "mad2r", {"rounds": 3}),
    ("select[mad]", "mad", {}),
    ("select[basic]", "basic", {}),
    ("select[dp-sips]", "dp-sips", {}),
    ("select[dp-sips, rounds=3]", "dp-sips", {"rounds": 3}),
    ("select[mad2r, cap=4]", "mad2r", {"max_items_per_user": 4}),
    ("select[basic, cap=100]", "basic", {"max_items_per_user": 100}),
)


@dataclass(frozen=True)
class ThresholdRow:
    """The worst crossing-probability ratio of one round of one planned selection."""

    mechanism: str
    round: int
    rho: float
    grid: float
    threshold_delta: float
    worst_t: int
    ratio: float

    @property
    def verdict(self) -> str:
        return "FAIL" if not self.ratio <= 1.0 + TOLERANCE else "pass"

    def as_dict(self) -> dict[str, object]:
        return {
            "mechanism": self.mechanism,
            "round": self.round,
            "rho": self.rho,
            "grid": self.grid,
            "threshold_delta": self.threshold_delta,
            "worst_t": self.worst_t,
            "ratio": self.ratio,
            "verdict": self.verdict,
        }


def _threshold_delta(rnd: object) -> float:
    event = rnd.event  # type: ignore[attr-defined]
    if hasattr(event, "threshold_delta"):
        return float(event.threshold_delta)
    return float(event.delta) / 2.0  # a round on its own: half its delta on the threshold


def round_ratio(rnd: object) -> tuple[int, float]:
    """(t, p(t) / (1 - (1 - dt)^(1/t))) at the worst ``t`` of one round (module docstring)."""
    g, rho, s = float(rnd.grid), float(rnd.rho), float(rnd.noise_scale)  # type: ignore[attr-defined]
    dt = _threshold_delta(rnd)
    t = np.arange(1, int(rnd.cap) + 1, dtype=np.float64)  # type: ignore[attr-defined]
    k = np.rint(float(rnd.h_scale) / np.sqrt(t) / g)  # type: ignore[attr-defined]
    m = np.ceil(rho / g - k)  # exact: rho / g is a power-of-two scaling, k an integer
    p = stats.norm.sf((m - 0.5) * g / s)
    allowed = -np.expm1(np.log1p(-dt) / t)
    ratio = p / allowed
    worst = int(np.argmax(ratio))
    return worst + 1, float(ratio[worst])


def threshold_rows(
    configurations: Sequence[tuple[str, str, dict[str, object]]] = THRESHOLD_CONFIGURATIONS,
    *,
    epsilon: float = 1.0,
    delta: float = 1e-5,
) -> list[ThresholdRow]:
    """Plan each selection at (``epsilon``, ``delta``) and check every round's threshold."""
    from userdp.partition.api import ALGORITHMS
    from userdp.privacy import approximate_budget

    rows = []
    for label, name, options in configurations:
        spec = ALGORITHMS[name]
        if spec.plan is None or spec.check is None:
            continue
        o = spec.check(spec.caller, {**spec.options, **options})
        o["auto_cap"] = False
        plan = spec.plan(approximate_budget(epsilon, delta, spec.caller), o)
        for r, rnd in enumerate(plan.rounds, start=1):
            if not getattr(rnd, "grid", 0.0):
                continue
            t, ratio = round_ratio(rnd)
            rows.append(
                ThresholdRow(
                    label, r, float(rnd.rho), float(rnd.grid), _threshold_delta(rnd), t, ratio
                )
            )
    if not rows:
        return rows
    if not all(math.isfinite(r.ratio) for r in rows):
        raise ArithmeticError("threshold check: a crossing probability is not finite")
    return rows
