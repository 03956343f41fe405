"""Empirical epsilon lower bounds (black box) on constructed hard neighbours.

For a pair of neighbouring datasets ``D0, D1`` and an event ``E`` of the output, an
(epsilon, delta)-DP mechanism satisfies ``P[M(D1) in E] <= e^epsilon P[M(D0) in E] + delta`` (and
the same with ``D0, D1`` or ``E`` and its complement exchanged). Running the mechanism ``n`` times
on each side with fresh seeds and bounding the two probabilities with Clopper-Pearson intervals
gives, with 95% confidence, the lower bound

    ``epsilon >= ln((p1_lower - delta) / p0_upper)``

(each one-sided interval at 97.5%, so both hold together with probability >= 95%; Bonferroni
over the four orientations). Threshold events ``{output >= t}`` for numeric releases are chosen
on the first half of the runs and evaluated on the second half, so the choice does not bias the
bound. A bound above the declared epsilon is a violation; a bound below it says little (it is a
*lower* bound, e.g. 0.3 for a correct epsilon = 1 mechanism is normal at a few thousand runs).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import stats

__all__ = ["EpsilonBound", "clopper_pearson", "epsilon_lower_bound", "event_epsilon_bound"]

CONFIDENCE = 0.95


def clopper_pearson(k: int, n: int, alpha: float = 1.0 - CONFIDENCE) -> tuple[float, float]:
    """Two-sided ``1 - alpha`` Clopper-Pearson interval for ``k`` successes in ``n`` trials.

    Examples
    --------
    >>> lo, hi = clopper_pearson(0, 100)
    >>> lo, round(hi, 4)
    (0.0, 0.0362)
    """
    lo = 0.0 if k == 0 else float(stats.beta.ppf(alpha / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(stats.beta.ppf(1 - alpha / 2, k + 1, n - k))
    return lo, hi


def epsilon_lower_bound(k0: int, n0: int, k1: int, n1: int, delta: float) -> float:
    """95% lower bound on epsilon from event counts ``k0/n0`` on D0 and ``k1/n1`` on D1.

    Both orientations of the event and of the pair are tried; every interval is two-sided at
    ``1 - 0.05/4``, so the eight one-sided statements used hold together with probability
    >= 95% (Bonferroni). Returns ``max(0, best)``.
    """
    alpha = (1.0 - CONFIDENCE) / 4
    best = 0.0
    for a, na, b, nb in (
        (k1, n1, k0, n0),
        (k0, n0, k1, n1),
        (n1 - k1, n1, n0 - k0, n0),
        (n0 - k0, n0, n1 - k1, n1),
    ):
        a_lo, _ = clopper_pearson(a, na, alpha)
        _, b_hi = clopper_pearson(b, nb, alpha)
        if a_lo - delta > 0 and b_hi > 0:
            best = max(best, math.log((a_lo - delta) / b_hi))
    return best


@dataclass(frozen=True)
class EpsilonBound:
    """An empirical lower bound for one mechanism on one pair of hard neighbours."""

    mechanism: str
    neighbours: str
    event: str
    epsilon: float
    delta: float
    runs: int
    p0: float
    p1: float
    lower_bound: float

    @property
    def verdict(self) -> str:
        return "VIOLATION" if self.lower_bound > self.epsilon * (1 + 1e-9) else "consistent"

    def as_dict(self) -> dict[str, object]:
        return {
            "mechanism": self.mechanism,
            "neighbours": self.neighbours,
            "event": self.event,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "runs_per_side": self.runs,
            "p0": self.p0,
            "p1": self.p1,
            "epsilon_lower_bound": self.lower_bound,
            "verdict": self.verdict,
        }


def _nothing() -> None:
    return None


def event_epsilon_bound(
    run: Callable[[int, int], object],
    event: Callable[[object], bool] | None,
    *,
    runs: int,
    delta: float,
    progress: Callable[[], None] | None = None,
) -> tuple[float, float, float, str]:
    """Run ``run(side, seed)`` ``runs`` times per side (0 = D0, 1 = D1) and bound epsilon.

    ``progress`` (optional) is called after each run, for a progress bar; it draws no
    randomness, so the runs and the bound are the same with it or without.

    With ``event`` given, counts it on all runs. With ``event=None`` the outputs are numbers: the
    threshold event ``{output >= t}`` (or ``<= t``) is chosen on the first half of the runs among
    their pooled quantiles and evaluated on the second half. Returns (p0, p1, bound, event label).
    """
    tick = progress if progress is not None else _nothing
    out0, out1 = [], []
    for i in range(runs):
        out0.append(run(0, 2 * i))
        tick()
    for i in range(runs):
        out1.append(run(1, 2 * i + 1))
        tick()
    if event is not None:
        k0 = sum(bool(event(o)) for o in out0)
        k1 = sum(bool(event(o)) for o in out1)
        return k0 / runs, k1 / runs, epsilon_lower_bound(k0, runs, k1, runs, delta), "given"
    y0, y1 = np.asarray(out0, dtype=np.float64), np.asarray(out1, dtype=np.float64)
    half = runs // 2
    a0, a1, b0, b1 = y0[:half], y1[:half], y0[half:], y1[half:]
    best, best_t = -math.inf, float(np.median(np.concatenate([a0, a1])))
    for t in np.unique(np.quantile(np.concatenate([a0, a1]), np.linspace(0.02, 0.98, 49))):
        k0, k1 = int((a0 >= t).sum()), int((a1 >= t).sum())
        # Plug-in log ratio (smoothed), either orientation: picks the most separating event.
        score = max(
            abs(math.log((k1 + 0.5) / (k0 + 0.5))),
            abs(math.log((half - k1 + 0.5) / (half - k0 + 0.5))),
        )
        if score > best:
            best, best_t = score, float(t)
    k0, k1 = int((b0 >= best_t).sum()), int((b1 >= best_t).sum())
    n = runs - half
    return k0 / n, k1 / n, epsilon_lower_bound(k0, n, k1, n, delta), f"output >= {best_t:.6g}"
