"""The auditor's configurations of :mod:`userdp.estimate`: the means and quantiles (weighted,
with public user sizes, sample-limited), label-private linear regression (each method) and
weighted ERM (with and without public user sizes)."""

from __future__ import annotations

from collections.abc import Callable

from userdp.audit.mechanisms.base import DELTA, EPSILON, FEATURES, Mechanism, bounds
from userdp.audit.neighbours import Table

__all__ = ["mechanisms"]


def _mean(public: bool, limit: bool) -> Callable[[Table, int], object]:
    def run(t: Table, seed: int) -> object:
        from userdp.estimate import sample_limited_mean, weighted_mean

        fn = sample_limited_mean if limit else weighted_mean
        return fn(
            t.value,
            t.user,
            epsilon=EPSILON,
            bounds=bounds(t),
            public_user_sizes=public,
            seed=seed,
        )

    return run


def _quantile(public: bool, limit: bool) -> Callable[[Table, int], object]:
    def run(t: Table, seed: int) -> object:
        from userdp.estimate import sample_limited_quantile, weighted_quantile

        fn = sample_limited_quantile if limit else weighted_quantile
        return fn(
            t.value,
            t.user,
            q=0.5,
            epsilon=EPSILON,
            bounds=bounds(t),
            public_user_sizes=public,
            seed=seed,
        )

    return run


def _regression(method: str) -> Callable[[Table, int], object]:
    def run(t: Table, seed: int) -> object:
        from userdp.estimate import LabelPrivateLinearRegression

        model = LabelPrivateLinearRegression(
            epsilon=EPSILON, label_range=bounds(t), method=method, seed=seed
        )
        return model.fit(t.x, t.value, t.user)

    return run


def _erm(public: bool) -> Callable[[Table, int], object]:
    def run(t: Table, seed: int) -> object:
        from userdp.estimate import WeightedERM

        model = WeightedERM(
            loss="squared",
            epsilon=EPSILON,
            delta=DELTA,
            steps=20,
            public_user_sizes=public,
            seed=seed,
        )
        return model.fit(t.x, t.value, t.user)

    return run


def mechanisms() -> list[Mechanism]:
    """Each estimator's default, and its public-user-size form where it has one."""
    return [
        Mechanism("weighted_mean", "estimate", _mean(False, False)),
        Mechanism("weighted_mean[public sizes]", "estimate", _mean(True, False)),
        Mechanism("sample_limited_mean", "estimate", _mean(False, True)),
        Mechanism("weighted_quantile", "estimate", _quantile(False, False)),
        Mechanism("weighted_quantile[public sizes]", "estimate", _quantile(True, False)),
        Mechanism("sample_limited_quantile", "estimate", _quantile(False, True)),
        Mechanism("linreg[gwa]", "estimate", _regression("gwa"), needs=FEATURES),
        Mechanism("linreg[sample-limit]", "estimate", _regression("sample-limit"), needs=FEATURES),
        Mechanism(
            "weighted_erm", "estimate", _erm(False), "steps=20 (default 100)", needs=FEATURES
        ),
        Mechanism(
            "weighted_erm[public sizes]",
            "estimate",
            _erm(True),
            "steps=20 (default 100)",
            needs=FEATURES,
        ),
    ]
