"""Hard neighbours for the black-box epsilon lower bounds (selection, mean, quantile).

* Selection, "novel user": D0 = a few users sharing one item; D1 adds one user holding many
  (200 x scale) items nobody else has. Event: any of the novel items is released. Under D0 that
  is impossible, so a release frequency well above ``delta`` under D1 shows up as a large bound.
  GreedyUpdate's former candidate rule (before its fix) gives a bound of 1.13 > epsilon = 1 at
  scale 1000 (200,000 novel items) with 40 runs per side; at most 100 runs per side are made,
  since each run holds ``200 x scale`` pairs.
* Selection, "threshold item": D0 = ``k`` single-item users on item 0, with ``k`` below the
  threshold so that item 0 is released rarely; D1 adds one more. Event: item 0 released.
* Selection, "delta": the novel-user pair at a declared delta of 0.05 (epsilon 1), where a
  failure of the delta guarantee is measurable: the added user holds 200 novel items, none of
  which may be released with probability above delta. With 1,000 runs per side a release
  rate of 0.08 already gives a bound above epsilon, and a rate of 1e-2 is measured to about
  +-0.6e-2 (95%). The pre-fix GreedyUpdate (every novel item a candidate against
  ``rho = 1 + ln(1/(2 delta)) / epsilon``) releases one in most runs there.
* Mean and quantile (default configuration, user sizes private): D0 = users with one value at
  the middle of the range; D1 adds a user with several values at the upper bound. Threshold
  events.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from userdp.audit.epsilon import EpsilonBound, event_epsilon_bound
from userdp.audit.mechanisms.base import DELTA, EPSILON, RATING_RANGE

__all__ = ["EXPERIMENTS", "Experiment", "run_experiment"]

SELECTION = ("mad2r", "mad", "basic", "dp-sips", "policy-gaussian", "greedy-update")


@dataclass(frozen=True)
class Experiment:
    """``run(side, seed, scale)`` returns the release on D0 (side 0) or D1 (side 1)."""

    mechanism: str
    neighbours: str
    run: Callable[[int, int, int], object]
    event: Callable[[Any], bool] | None
    event_label: str
    delta: float
    max_runs: int | None = None  # cap on runs per side (for experiments on large inputs)
    epsilon: float = EPSILON  # the declared budget of the experiment's runs
    min_runs: int | None = None  # runs per side at least (delta-scale events need many)


def _novel_user(algorithm: str) -> Experiment:
    def run(side: int, seed: int, scale: int) -> object:
        from userdp.partition import select_partitions

        users, items = np.arange(5), np.zeros(5, dtype=np.int64)
        if side:
            many = 200 * scale
            users = np.concatenate([users, np.full(many, 5)])
            items = np.concatenate([items, np.arange(1, many + 1)])
        res = select_partitions(
            (users, items), epsilon=EPSILON, delta=DELTA, algorithm=algorithm, seed=seed
        )
        return [int(i) for i in res.items]

    return Experiment(
        f"select[{algorithm}]",
        "5 users on item 0 vs + 1 user with 200 x scale novel items",
        run,
        lambda items: any(i != 0 for i in items),
        "a novel item released",
        DELTA,
        max_runs=100,
    )


def _threshold_item(algorithm: str) -> Experiment:
    k = 14  # ~2 sigma below Basic's threshold 20.79 at (1, 1e-5): released with p ~ 0.04

    def run(side: int, seed: int, scale: int) -> object:
        from userdp.partition import select_partitions

        n = k + side
        users = np.arange(n + 3)
        items = np.concatenate([np.zeros(n, dtype=np.int64), np.array([1, 2, 3])])
        res = select_partitions(
            (users, items), epsilon=EPSILON, delta=DELTA, algorithm=algorithm, seed=seed
        )
        return [int(i) for i in res.items]

    return Experiment(
        f"select[{algorithm}]",
        f"{k} vs {k + 1} single-item users on item 0",
        run,
        lambda items: 0 in items,
        "item 0 released",
        DELTA,
    )


DELTA_CHECK = 0.05  # a declared delta large enough for its failures to be measured


def _novel_user_delta(algorithm: str) -> Experiment:
    def run(side: int, seed: int, scale: int) -> object:
        from userdp.partition import select_partitions

        users, items = np.arange(5), np.zeros(5, dtype=np.int64)
        if side:
            users = np.concatenate([users, np.full(200, 5)])
            items = np.concatenate([items, np.arange(1, 201)])
        with warnings.catch_warnings():  # "delta is large": on purpose here
            warnings.simplefilter("ignore", UserWarning)
            res = select_partitions(
                (users, items), epsilon=EPSILON, delta=DELTA_CHECK, algorithm=algorithm, seed=seed
            )
        return [int(i) for i in res.items]

    return Experiment(
        f"select[{algorithm}]",
        "delta 0.05: 5 users on item 0 vs + 1 user with 200 novel items",
        run,
        lambda items: any(i != 0 for i in items),
        "a novel item released (delta 0.05)",
        DELTA_CHECK,
        min_runs=1000,
    )


def _value_data(side: int) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = RATING_RANGE
    values, users = np.full(20, 0.5 * (lo + hi)), np.arange(20)
    if side:
        values = np.concatenate([values, np.full(5, hi)])
        users = np.concatenate([users, np.full(5, 20)])
    return values, users


def _mean() -> Experiment:
    def run(side: int, seed: int, scale: int) -> object:
        from userdp.estimate import weighted_mean

        v, u = _value_data(side)
        return weighted_mean(v, u, epsilon=EPSILON, bounds=RATING_RANGE, seed=seed).estimate

    return Experiment(
        "weighted_mean",
        "20 users at the mid-range vs + 1 user with 5 values at the upper bound",
        run,
        None,
        "",
        0.0,
    )


def _quantile() -> Experiment:
    def run(side: int, seed: int, scale: int) -> object:
        from userdp.estimate import weighted_quantile

        v, u = _value_data(side)
        return weighted_quantile(
            v, u, q=0.5, epsilon=EPSILON, bounds=RATING_RANGE, seed=seed
        ).estimate

    return Experiment(
        "weighted_quantile",
        "20 users at the mid-range vs + 1 user with 5 values at the upper bound",
        run,
        None,
        "",
        0.0,
    )


def _all() -> list[Experiment]:
    out = [_novel_user(a) for a in SELECTION]
    out += [_threshold_item(a) for a in SELECTION]
    out += [_novel_user_delta(a) for a in SELECTION]
    return [*out, _mean(), _quantile()]


#: Every hard-neighbour experiment.
EXPERIMENTS: list[Experiment] = _all()


def runs_per_side(exp: Experiment, runs: int) -> int:
    """The runs per side ``exp`` makes when asked for ``runs`` (its own floor and cap)."""
    if exp.min_runs is not None:
        runs = max(runs, exp.min_runs)
    if exp.max_runs is not None:
        runs = min(runs, exp.max_runs)
    return runs


def run_experiment(
    exp: Experiment,
    *,
    runs: int,
    scale: int = 1,
    seed: int = 0,
    progress: Callable[[], None] | None = None,
) -> EpsilonBound:
    """Run ``exp`` ``runs`` times per side (at least ``exp.min_runs``, at most ``exp.max_runs``;
    seeds offset by ``seed``) and bound epsilon; ``progress()`` is called after each run."""
    runs = runs_per_side(exp, runs)
    base = seed * 4 * runs

    def side_run(side: int, s: int) -> object:
        return exp.run(side, base + s, scale)

    p0, p1, bound, label = event_epsilon_bound(
        side_run, exp.event, runs=runs, delta=exp.delta, progress=progress
    )
    return EpsilonBound(
        exp.mechanism,
        exp.neighbours,
        exp.event_label or label,
        exp.epsilon,
        exp.delta,
        runs,
        p0,
        p1,
        bound,
    )
