"""Mutation tests of the auditor: deliberate privacy bugs, each applied through a test seam
(monkeypatch), each of which the auditor must catch. ``pytest -k mutant`` runs the catalogue.

A mutant is caught when the audit of one configuration FAILs (a sensitivity row above its
bound, the float check, a comparison that could not be made) or an epsilon experiment reports
a VIOLATION. :data:`CATALOGUE` maps each mutant to (how it is applied, what is audited, the
check that must catch it); :func:`catch` runs one and returns (check, figure).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pytest

import userdp.aggregate.api as aggregate_api
import userdp.aggregate.cells as aggregate_cells
import userdp.aggregate.local as aggregate_local
import userdp.partition.baselines as baselines_module
import userdp.partition.rounds as rounds_module
import userdp.privacy.noise as noise_module
import userdp.recommend.als.steps as als_steps
import userdp.recommend.core.base as base_module
from userdp.audit import (
    MECHANISMS,
    audit_sensitivity,
    audit_table,
    run_experiment,
    threshold_rows,
)
from userdp.audit.hard import EXPERIMENTS
from userdp.privacy import NoiseSource

#: The GROUP BY's mutants are audited with public keys: the small table leaves a private key
#: selection with few keys to release.
PUBLIC_KEYS = "aggregate[all metrics, public keys]"
#: A choice made from exact statistics shows on the far data sets of the replay check only
#: once the table is large enough for a bin to pass the histograms' thresholds.
LARGE = (1000, 30)
REMOVALS = 4


@dataclass(frozen=True)
class Mutant:
    """``apply(monkeypatch)`` plants the bug; ``mechanism`` is audited (or ``experiment``,
    an epsilon experiment's mechanism and event); ``check`` is the row kind that must fail:
    a statistic name (sensitivity) or "grid" (float check) or "epsilon"."""

    apply: Callable[[pytest.MonkeyPatch], None]
    mechanism: str
    check: str
    experiment: str = ""
    table: tuple[int, int] = (25, 20)  # the audit table's (users, items)


# -- the seams -------------------------------------------------------------------------------
def _textbook(mp: pytest.MonkeyPatch) -> None:
    """``x + rng.normal(0, s)`` in floats instead of the grid mechanism (both helpers)."""

    def gaussian(rng, value, sigma, *, l2, size=None):
        x = np.asarray(value, dtype=np.float64)
        return x + rng.normal(0.0, sigma, x.shape)

    def laplace(rng, value, scale, *, l1):
        x = np.asarray(value, dtype=np.float64)
        return x + rng.laplace(0.0, scale, x.shape)

    mp.setattr(noise_module, "gaussian_on_grid", gaussian)
    mp.setattr(noise_module, "laplace_on_grid", laplace)


def _halved(statistic: str) -> Callable[[pytest.MonkeyPatch], None]:
    """The declared bound of ``statistic`` halved, and its noise with it (the bug a wrong
    sensitivity derivation makes: calibrated and declared from the same wrong figure)."""

    def apply(mp: pytest.MonkeyPatch) -> None:
        gaussian, laplace = NoiseSource.add_gaussian, NoiseSource.add_laplace

        def add_gaussian(self, value, sigma, *, statistic: str, l2: float, **kw):
            if statistic.startswith(target):
                sigma, l2 = sigma / 2, l2 / 2
                kw["linf"] = None if kw.get("linf") is None else kw["linf"] / 2
            return gaussian(self, value, sigma, statistic=statistic, l2=l2, **kw)

        def add_laplace(self, value, scale, *, statistic: str, l1: float, **kw):
            if statistic.startswith(target):
                scale, l1 = scale / 2, l1 / 2
                kw["linf"] = None if kw.get("linf") is None else kw["linf"] / 2
            return laplace(self, value, scale, statistic=statistic, l1=l1, **kw)

        mp.setattr(NoiseSource, "add_gaussian", add_gaussian)
        mp.setattr(NoiseSource, "add_laplace", add_laplace)

    target = statistic
    return apply


def _no_sqrt2(mp: pytest.MonkeyPatch) -> None:
    """The item update's user-side norm without the bias coordinate: max_norm, not
    sqrt(2) max_norm (``[v, max_norm]`` has norm up to sqrt(2) max_norm)."""
    mp.setattr(als_steps, "user_side_norm", lambda max_norm, beta: max_norm)


def _data_items(mp: pytest.MonkeyPatch) -> None:
    """Training on the data's own items instead of the item set fixed before training."""
    from userdp.recommend.engines import local as runner_module

    original = base_module.prepare_ratings

    def prepare(spec, ratings, item_set, noise, *args, **kwargs):
        from userdp.recommend.core.items import ItemSet

        items = np.unique(np.asarray(ratings[1]))
        return original(spec, ratings, ItemSet.public(items), noise, *args, **kwargs)

    # the preamble is one function, called by the estimators and by the local runner
    mp.setattr(base_module, "prepare_ratings", prepare)
    mp.setattr(runner_module, "prepare_ratings", prepare)


def _old_implicit(mp: pytest.MonkeyPatch) -> None:
    """The implicit term before the item set was fixed: the items (hence the unobserved term of
    every user's solve) come from the data, so one user's new item moves every user's factor."""
    _data_items(mp)


def _no_grid_margin(mp: pytest.MonkeyPatch) -> None:
    """Every round's threshold computed for the continuous mechanism: no margin for the grid."""
    original = rounds_module.partition_threshold

    def threshold(*args: object, grid: float = 0.0, **kwargs: object) -> float:
        return original(*args, grid=0.0, **kwargs)

    mp.setattr(rounds_module, "partition_threshold", threshold)


def _old_greedy(mp: pytest.MonkeyPatch) -> None:
    """GreedyUpdate's pre-fix candidate rule: every one of a user's items is a candidate (no
    cap) against ``rho = 1 + ln(1/(2 delta)) / epsilon`` (one novel item assumed)."""
    mp.setattr(
        baselines_module,
        "laplace_threshold",
        lambda scale, delta, weight=1.0, candidates=1: 1.0 + scale * math.log(1.0 / (2.0 * delta)),
    )
    original = baselines_module._Run.__init__

    def init(self, data, caller, user_column, item_column, cap, seed, *args, **kwargs):
        original(self, data, caller, user_column, item_column, 1 << 30, seed, *args, **kwargs)

    mp.setattr(baselines_module._Run, "__init__", init)


def _aggregate_data_keys(mp: pytest.MonkeyPatch) -> None:
    """The GROUP BY over the data's own keys instead of the released (or public) key set."""
    original = aggregate_local.LocalEngine.set_keys

    def set_keys(self, keys):
        if keys is not None and self._key_raw is not None:
            keys = pa.array(np.unique(self._key_raw.to_numpy(zero_copy_only=False)))
        return original(self, keys)

    mp.setattr(aggregate_local.LocalEngine, "set_keys", set_keys)


def _aggregate_exact_bounds(mp: pytest.MonkeyPatch) -> None:
    """The bounds C chosen from the exact norm histograms: the noise is drawn, then ignored."""
    original_hist = aggregate_local.LocalEngine.norm_histograms
    original_choose = aggregate_api.choose_bound
    exact: list[dict] = []

    def norm_histograms(self, units, centre):
        exact.append(original_hist(self, units, centre))
        return exact[-1]

    def choose_bound(noisy, z_hist, unit, *args, **kwargs):
        (family,) = [f for f, h in exact[-1].items() if h.size == noisy.size][:1] or [None]
        return original_choose(exact[-1][family], z_hist, unit, *args, **kwargs)

    mp.setattr(aggregate_local.LocalEngine, "norm_histograms", norm_histograms)
    mp.setattr(aggregate_api, "choose_bound", choose_bound)


def _aggregate_exact_denominator(mp: pytest.MonkeyPatch) -> None:
    """The mean divided by the exact weighted count (its numerator still noisy)."""
    original_sums = aggregate_local.LocalEngine.weighted_sums
    original_mean = aggregate_cells.ratio_mean
    exact: list[dict] = []

    def weighted_sums(self, *args, **kwargs):
        exact.append(original_sums(self, *args, **kwargs))
        return exact[-1]

    def ratio_mean(noisy_sum, noisy_count, centre, bounds):
        return original_mean(noisy_sum, exact[-1]["value_count"], centre, bounds)

    mp.setattr(aggregate_local.LocalEngine, "weighted_sums", weighted_sums)
    mp.setattr(aggregate_cells, "ratio_mean", ratio_mean)


def _aggregate_h_branch(mp: pytest.MonkeyPatch) -> None:
    """h for the quantiles chosen on the exact sizes instead of the noisy size histogram."""
    import userdp.estimate.weighting as weighting

    original = weighting.best_smooth_h
    exact: list[tuple] = []
    sizes = aggregate_local.LocalEngine.quantile_sizes

    def quantile_sizes(self):
        exact.append(sizes(self))
        return exact[-1]

    def best_smooth_h(values, nv, nu, *, counts=None):
        return original(exact[-1][0], nv, nu, counts=exact[-1][1])

    mp.setattr(aggregate_local.LocalEngine, "quantile_sizes", quantile_sizes)
    mp.setattr(weighting, "best_smooth_h", best_smooth_h)


CATALOGUE: dict[str, Mutant] = {
    "textbook_noise": Mutant(_textbook, "weighted_mean", "grid"),
    "textbook_noise_partition": Mutant(_textbook, "select[mad2r]", "grid"),
    "textbook_noise_recommender": Mutant(_textbook, "recommend[adadpals]", "grid"),
    "halved_mean": Mutant(_halved("mean.sum"), "weighted_mean", "mean.sum"),
    "halved_regression": Mutant(_halved("gwa"), "linreg[gwa]", "gwa"),
    "halved_erm": Mutant(_halved("erm.gradient_sum"), "weighted_erm", "erm.gradient_sum"),
    "halved_multitask_ssp": Mutant(_halved("task gram"), "multitask[ssp]", "task gram"),
    "halved_multitask_gd": Mutant(_halved("task gradient"), "multitask[noisy-gd]", "task gradient"),
    "halved_partition": Mutant(_halved("partition.weights"), "select[mad2r]", "partition.weights"),
    "halved_partition_rounds3": Mutant(
        _halved("partition.weights[round 3]"),
        "select[mad2r, rounds=3]",
        "partition.weights[round 3]",
    ),
    "halved_gram_adadpals": Mutant(_halved("item gram"), "recommend[adadpals]", "item gram"),
    "halved_gram_dpals_uniform": Mutant(
        _halved("item gram"), "recommend[dpals-uniform]", "item gram"
    ),
    "halved_gram_dpals_tail": Mutant(_halved("item gram"), "recommend[dpals-tail]", "item gram"),
    "halved_gradient_adadpsgd": Mutant(
        _halved("item gradient"), "recommend[adadpsgd]", "item gradient"
    ),
    "halved_gram_public_ssp2": Mutant(
        _halved("item gram"), "recommend[public-features ssp2]", "item gram"
    ),
    "halved_gram_public_ssp1": Mutant(
        _halved("item gram"), "recommend[public-features ssp1]", "item gram"
    ),
    "halved_gram_public_minibatch": Mutant(
        _halved("item gram"), "recommend[public-features minibatch]", "item gram"
    ),
    "halved_gradient_public_dpsgd": Mutant(
        _halved("encoder gradient"), "recommend[public-features dpsgd]", "encoder gradient"
    ),
    "halved_hessian_convex": Mutant(
        _halved("item hessian"), "recommend[public-features ssp2, loss=logistic]", "item hessian"
    ),
    "halved_gram_federated": Mutant(_halved("item gram"), "recommend[federated ssp2]", "item gram"),
    "dropped_sqrt2_bias_norm": Mutant(_no_sqrt2, "recommend[adadpals]", "item"),
    "items_from_data": Mutant(_data_items, "recommend[adadpals]", "grid"),
    "old_implicit_term": Mutant(
        _old_implicit, "recommend[adadpals, unobserved_weight=0.5]", "item gram"
    ),
    "threshold_without_grid_margin": Mutant(_no_grid_margin, "select[mad2r]", "threshold"),
    "halved_aggregate_count": Mutant(_halved("aggregate.count"), PUBLIC_KEYS, "aggregate.count"),
    "halved_aggregate_sum": Mutant(_halved("aggregate.sum"), PUBLIC_KEYS, "aggregate.sum"),
    "aggregate_data_keys": Mutant(_aggregate_data_keys, PUBLIC_KEYS, "grid"),
    "aggregate_bounds_from_exact_histograms": Mutant(
        _aggregate_exact_bounds, PUBLIC_KEYS, "released values", table=LARGE
    ),
    "aggregate_mean_over_exact_count": Mutant(
        _aggregate_exact_denominator, PUBLIC_KEYS, "released values"
    ),
    "aggregate_h_from_exact_sizes": Mutant(
        _aggregate_h_branch, PUBLIC_KEYS, "released values", table=LARGE
    ),
    "old_greedy_update": Mutant(
        _old_greedy, "select[greedy-update]", "epsilon", "a novel item released (delta 0.05)"
    ),
}


def catch(name: str, mp: pytest.MonkeyPatch) -> tuple[str, str]:
    """Apply mutant ``name`` and audit; (the check that failed, its figure) or ("", "")."""
    m = CATALOGUE[name]
    m.apply(mp)
    if m.check == "threshold":
        rows = threshold_rows()
        worst = max(rows, key=lambda r: r.ratio)
        if worst.verdict == "FAIL":
            excess = worst.ratio - 1.0
            return "threshold", f"{worst.mechanism} round {worst.round}: p/allowed 1 + {excess:.2g}"
        return "", f"worst p/allowed {worst.ratio:.12f}"
    if m.experiment:
        (exp,) = [
            e for e in EXPERIMENTS if e.mechanism == m.mechanism and e.event_label == m.experiment
        ]
        bound = run_experiment(exp, runs=1)
        if bound.verdict == "VIOLATION":
            return "epsilon", f"lower bound {bound.lower_bound:.2f} > 1 (p1 {bound.p1:.3f})"
        return "", f"lower bound {bound.lower_bound:.2f}"
    table = audit_table(*m.table, seed=3)
    rows, _ = audit_sensitivity(
        name, MECHANISMS[m.mechanism].runner(table), table, max_removals=REMOVALS
    )
    failed = [
        r
        for r in rows
        if r.verdict == "FAIL" and (r.statistic.startswith(m.check) or m.check == r.norm == "grid")
    ]
    if not failed:
        return "", f"worst {max((r.ratio for r in rows if r.norm != 'grid'), default=0):.3f}"
    r = max(failed, key=lambda r: r.ratio)
    if r.norm == "grid":
        return "float", f"{r.statistic}: {r.reason}"
    if r.norm == "replay":
        return "replay", f"{r.statistic}: {r.reason}"
    return "sensitivity", f"{r.statistic} ({r.norm}): {r.reason}"


def _test(name: str) -> Callable[[pytest.MonkeyPatch], None]:
    def test(monkeypatch: pytest.MonkeyPatch) -> None:
        check, figure = catch(name, monkeypatch)
        assert check, f"mutant {name} not caught: {figure}"

    test.__name__ = f"test_mutant_{name}"
    test.__doc__ = f"The auditor catches the mutant {name!r}."
    return test


for _name in CATALOGUE:
    globals()[f"test_mutant_{_name}"] = _test(_name)
