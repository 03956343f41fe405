"""The releases the auditor knows how to run: every capability's default configuration, and
one configuration per option that changes a sensitivity.

Each :class:`Mechanism` runs one public entry point of userdp on a :class:`Table` with a seed.
Default parameters are the library's defaults (epsilon = 1, delta = 1e-5 where one is needed);
only sizes that the audit data cannot support are reduced, and that is said in ``notes``.
Options that change a declared sensitivity or what is released get their own entry: the
implicit term (``unobserved_weight``), item biases on and off, each centre, convex losses,
federated training, every matrix-factorization method, more selection rounds, the automatic
cap, a privately selected item set, multi-task SSP and noisy gradient descent.

Adding a capability
-------------------
:data:`MECHANISMS` is built from one list, :func:`_all`. A new release (for example a private
GROUP BY) adds one ``Mechanism(name, capability, run)`` there per configuration whose
sensitivity differs: ``run(table, seed)`` calls the public entry point on the audit table
(``bind`` instead when a public input, such as an item catalogue, must be fixed from the
audited data before any neighbour is built), with ``needs`` naming the table's columns it
reads when they differ from its capability's (:data:`NEEDS`). Its noise must go through
:class:`~userdp.privacy.NoiseSource`'s helpers (or declare ``grid`` and call ``released``),
so that the float check and the replay see it. The mutation catalogue
(``tests/unit/test_audit_mutants.py``) should gain a halved-bound mutant for it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from userdp.audit.neighbours import Table

__all__ = ["MECHANISMS", "NEEDS", "Mechanism", "audit_table", "describe_unrunnable", "unrunnable"]

EPSILON, DELTA = 1.0, 1e-5
SELECT_EPSILON, SELECT_DELTA = 8.0, 1e-2  # the private item set's selection on the audit table
RATING_RANGE = (1.0, 5.0)

#: The :class:`Table` columns (besides ``user``) a capability's configurations read, unless a
#: :class:`Mechanism` names its own ``needs``: ``item``, ``value`` (with the table's declared,
#: public ``value_range``) and ``x`` (features).
NEEDS: dict[str, tuple[str, ...]] = {
    "estimate": ("value",),
    "partition": ("item",),
    "recommend": ("item", "value"),
    "multitask": ("item", "value", "x"),
    "aggregate": ("item", "value"),
}
FEATURES = ("value", "x")  # regression and ERM: labels and features
_NEEDS_TEXT = {"item": "an item column", "value": "a value column", "x": "features"}


@dataclass(frozen=True)
class Mechanism:
    """A release to audit: ``runner(data)(table, seed)`` performs it (imports lazily)."""

    name: str
    capability: str
    run: Callable[[Table, int], object] | None = None
    notes: str = ""
    bind: Callable[[Table], Callable[[Table, int], object]] | None = None
    needs: tuple[str, ...] | None = None  # None: its capability's NEEDS

    def missing(self, table: Table) -> str:
        """Why this release cannot run on ``table`` ("" when it can): the columns it reads
        that the table lacks, e.g. "needs a value column and features"."""
        needs = self.needs if self.needs is not None else NEEDS[self.capability]
        lacking = [_NEEDS_TEXT[c] for c in needs if getattr(table, c) is None]
        if "value" in needs and table.value is not None and table.value_range is None:
            lacking.append("a declared value range")
        return f"needs {' and '.join(lacking)}" if lacking else ""

    def runner(self, base: Table) -> Callable[[Table, int], object]:
        """``run``, or ``bind(base)`` for mechanisms with public inputs fixed from the data."""
        if self.bind is not None:
            return self.bind(base)
        if self.run is None:
            raise TypeError(f"Mechanism {self.name!r} has neither run nor bind.")
        return self.run


def unrunnable(names: list[str], table: Table) -> dict[str, str]:
    """The mechanisms among ``names`` that cannot run on ``table``, each with the reason."""
    return {n: why for n in names if (why := MECHANISMS[n].missing(table))}


def describe_unrunnable(cannot: dict[str, str]) -> str:
    """``cannot`` (from :func:`unrunnable`) in a line, grouped by reason:
    "'a', 'b' (needs a value column); 'c' (needs a value column and features)"."""
    by_reason: dict[str, list[str]] = {}
    for name, why in cannot.items():
        by_reason.setdefault(why, []).append(repr(name))
    return "; ".join(f"{', '.join(names)} ({why})" for why, names in by_reason.items())


def _bounds(t: Table) -> tuple[float, float]:
    """The declared, public range of the table's values (never the data's own min and max):
    ``value_range`` (``userdp audit --value-range``), else the configurations' rating range."""
    return t.value_range if t.value_range is not None else RATING_RANGE


def audit_table(n_users: int = 40, n_items: int = 30, *, seed: int = 0) -> Table:
    """Synthetic ratings with skewed user sizes and item popularity, 2 public features per
    record, labels in ``RATING_RANGE`` linear in the features (for regression and ERM)."""
    rng = np.random.default_rng(seed)
    sizes = np.minimum(rng.zipf(1.8, n_users), max(2, n_items // 2))
    pop = 1.0 / np.arange(1, n_items + 1)
    pop /= pop.sum()
    user = np.repeat(np.arange(n_users, dtype=np.int64), sizes)
    item = np.concatenate([rng.choice(n_items, s, replace=False, p=pop) for s in sizes])
    x = rng.normal(0.0, 1.0, (user.size, 2))
    y = np.clip(3.0 + x @ np.array([0.8, -0.5]) + rng.normal(0.0, 0.5, user.size), *RATING_RANGE)
    return Table(user=user, item=item.astype(np.int64), value=y, x=x, value_range=RATING_RANGE)


# -- estimate ------------------------------------------------------------------------------------
def _mean(public: bool, limit: bool) -> Callable[[Table, int], object]:
    def run(t: Table, seed: int) -> object:
        from userdp.estimate import sample_limited_mean, weighted_mean

        fn = sample_limited_mean if limit else weighted_mean
        return fn(
            t.value,
            t.user,
            epsilon=EPSILON,
            bounds=_bounds(t),
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
            bounds=_bounds(t),
            public_user_sizes=public,
            seed=seed,
        )

    return run


def _regression(method: str) -> Callable[[Table, int], object]:
    def run(t: Table, seed: int) -> object:
        from userdp.estimate import LabelPrivateLinearRegression

        model = LabelPrivateLinearRegression(
            epsilon=EPSILON, label_range=_bounds(t), method=method, seed=seed
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


# -- partition -----------------------------------------------------------------------------------
def _selection(algorithm: str, **options: Any) -> Callable[[Table, int], object]:
    def run(t: Table, seed: int) -> object:
        from userdp.partition import select_partitions

        return select_partitions(
            (t.user, t.item),
            epsilon=EPSILON,
            delta=DELTA,
            algorithm=algorithm,
            seed=seed,
            **options,
        )

    return run


# -- multitask -----------------------------------------------------------------------------------
def _multitask(solver: str) -> Callable[[Table], Callable[[Table, int], object]]:
    """Task-weighted SSP / noisy GD with tasks = the catalogue's items, features the table's
    (clipped), labels the values centred on their range's midpoint and weights
    ``1/sqrt(n_u)`` (each user's squared weights sum to 1: the user budget ``beta = 1``)."""

    def bind(base: Table) -> Callable[[Table, int], object]:
        n_tasks = int(_catalogue(base).size)

        def run(t: Table, seed: int) -> object:
            from userdp.multitask import clip_rows, task_weighted_noisy_gd, task_weighted_ssp

            # the multitask audit tables always carry items, values and features
            assert t.item is not None and t.value is not None and t.x is not None
            _, inverse, counts = np.unique(t.user, return_inverse=True, return_counts=True)
            w: np.ndarray = (1.0 - 1e-12) / np.sqrt(counts[inverse])  # squares sum to < 1 in floats
            x = clip_rows(t.x, 1.0)
            lo, hi = _bounds(t)
            y = np.clip(t.value, lo, hi) - 0.5 * (lo + hi)
            if solver == "ssp":
                return task_weighted_ssp(
                    t.user,
                    t.item,
                    x,
                    y,
                    w,
                    n_tasks=n_tasks,
                    feature_bound=1.0,
                    label_bound=0.5 * (hi - lo),
                    ridge=1.0,
                    epsilon=EPSILON,
                    delta=DELTA,
                    seed=seed,
                )
            return task_weighted_noisy_gd(
                t.user,
                t.item,
                x,
                y,
                w,
                n_tasks=n_tasks,
                clip_norm=1.0,
                steps=3,
                learning_rate=0.1,
                epsilon=EPSILON,
                delta=DELTA,
                seed=seed,
            )

        return run

    return bind


# -- recommend -----------------------------------------------------------------------------------
def _catalogue(base: Table) -> np.ndarray:
    """A public item catalogue fixed from the audited data before any neighbour is built: its
    items and the new labels the adversarial added users take (up to twice the largest user)."""
    largest = int(base.sizes()[1][0]) if base.n_records else 0
    assert base.item is not None  # the recommend audit tables always carry items
    return np.arange(int(base.item.max()) + 1 + 2 * largest, dtype=np.int64)


def _factorization(
    method: str, *, private_items: bool = False, **options: Any
) -> Callable[[Table], Callable[[Table, int], object]]:
    """MatrixFactorization on the public catalogue (fixed from the audited data), or
    (``private_items``) on an item set selected privately from each run's own data with
    MAD2R, composed with training; ``options`` go to the constructor."""

    def bind(base: Table) -> Callable[[Table, int], object]:
        from userdp.recommend.als.estimator import MatrixFactorization

        # Private training takes an item set fixed before training: a public catalogue.
        catalogue = _catalogue(base)

        def run(t: Table, seed: int) -> object:
            items: object = catalogue
            if private_items:
                from userdp.partition import select_partitions
                from userdp.recommend import ItemSet

                # a large budget so that the small audit table has items to select
                chosen = select_partitions(
                    (t.user, t.item), epsilon=SELECT_EPSILON, delta=SELECT_DELTA, seed=seed
                )
                items = ItemSet.selected(chosen)
                if len(items) == 0:
                    return None
            model = MatrixFactorization(
                method=method,
                dim=4,
                steps=2,
                rating_range=_bounds(t),
                epsilon=EPSILON,
                delta=DELTA,
                items=items,
                seed=seed,
                **options,
            )
            return model.fit((t.user, t.item, t.value))

        return run

    return bind


def _public_features(
    variant: str,
    features: bool = False,
    biases: bool | str = "auto",
    federated: bool = False,
    **options: Any,
) -> Callable[[Table], Callable[[Table, int], object]]:
    """PublicFeatureRecommender on the public catalogue (fixed from the audited data, as for
    MatrixFactorization) with an encoder built on that catalogue, so the encoder's item codes
    are the catalogue's and do not move between neighbours: an id encoder, or (``features``)
    a public-feature encoder on a public one-hot feature of each item id (id mod 5). Item
    biases as ``biases`` (default "auto": on); ``federated``: the federated SSP2 protocol
    (no biases); ``options`` go to the constructor (e.g. ``loss``, ``center``)."""

    def bind(base: Table) -> Callable[[Table, int], object]:
        from userdp.recommend import FeatureFamily, IdEncoder, PublicFeatureEncoder

        catalogue = _catalogue(base)
        encoder: PublicFeatureEncoder | IdEncoder
        if features:
            onehot = np.eye(5)[catalogue % 5]
            encoder = PublicFeatureEncoder([FeatureFamily("id mod 5", onehot)], dim=4)
        else:
            encoder = IdEncoder(catalogue.size, 4)

        def run(t: Table, seed: int) -> object:
            from userdp.recommend import PublicFeatureRecommender

            if federated:
                from userdp.recommend.federated import FederatedPublicFeatureRecommender

                fed = FederatedPublicFeatureRecommender(
                    encoder=encoder,
                    items=catalogue,
                    variant=variant,
                    epsilon=EPSILON,
                    delta=DELTA,
                    steps=2,
                    inner_steps=3,
                    rating_range=_bounds(t),
                    seed=seed,
                    **options,
                )
                return fed.fit((t.user, t.item, t.value))
            model = PublicFeatureRecommender(
                encoder=encoder,
                items=catalogue,
                variant=variant,
                epsilon=EPSILON,
                delta=DELTA,
                steps=2,
                inner_steps=3,
                rating_range=_bounds(t),
                seed=seed,
                biases=biases,
                **options,
            )
            return model.fit((t.user, t.item, t.value))

        return run

    return bind


def _all() -> list[Mechanism]:
    out = [
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
    for algorithm in ("mad2r", "mad", "basic", "dp-sips", "policy-gaussian", "greedy-update"):
        out.append(Mechanism(f"select[{algorithm}]", "partition", _selection(algorithm)))
    out += [
        Mechanism("select[mad2r, rounds=3]", "partition", _selection("mad2r", rounds=3)),
        Mechanism(
            "select[mad2r, auto cap]", "partition", _selection("mad2r", max_items_per_user="auto")
        ),
        Mechanism("select[dp-sips, rounds=3]", "partition", _selection("dp-sips", rounds=3)),
        Mechanism(
            "multitask[ssp]", "multitask", notes="tasks = catalogue items", bind=_multitask("ssp")
        ),
        Mechanism(
            "multitask[noisy-gd]",
            "multitask",
            notes="tasks = catalogue items, steps=3",
            bind=_multitask("noisy-gd"),
        ),
    ]
    mf = "dim=4, steps=2 (defaults 32, 3)"
    for method in ("adadpals", "dpals-uniform", "dpals-tail", "adadpsgd"):
        # Uniform and tail sampling give every sampled item weight 1/sqrt(sample_size): only a
        # user with sample_size ratings reaches the bound, so the audit table (users of at
        # most 10 ratings) is audited with sample_size=5.
        sampled: dict[str, Any] = {"sample_size": 5} if method.startswith("dpals") else {}
        notes = f"{mf}, sample_size=5 (default 50)" if sampled else mf
        out.append(
            Mechanism(
                f"recommend[{method}]",
                "recommend",
                notes=notes,
                bind=_factorization(method, **sampled),
            )
        )
        out.append(
            Mechanism(
                f"recommend[{method}, unobserved_weight=0.5]",
                "recommend",
                notes=notes,
                bind=_factorization(method, unobserved_weight=0.5, **sampled),
            )
        )
        out.append(
            Mechanism(
                f"recommend[{method}, biases off]",
                "recommend",
                notes=notes,
                bind=_factorization(method, biases=False, **sampled),
            )
        )
    for center in ("sampled-mean", "midpoint"):
        out.append(
            Mechanism(
                f"recommend[adadpals, center={center}]",
                "recommend",
                notes=mf,
                bind=_factorization("adadpals", center=center),
            )
        )
    out.append(
        Mechanism(
            "recommend[adadpals, private item set]",
            "recommend",
            notes=f"{mf}; items by MAD2R (epsilon 8, delta 0.01) on each run's data",
            bind=_factorization("adadpals", private_items=True),
        )
    )
    pf = "id encoder, dim=4, steps=2, inner_steps=3 (defaults 3, 10)"
    for variant in ("ssp2", "ssp1", "minibatch", "dpsgd"):
        out.append(
            Mechanism(
                f"recommend[public-features {variant}]",
                "recommend",
                notes=pf,
                bind=_public_features(variant),
            )
        )
    out.append(
        Mechanism(
            "recommend[public-features ssp2, item features]",
            "recommend",
            notes="public-feature encoder, dim=4, steps=2, inner_steps=3",
            bind=_public_features("ssp2", features=True),
        )
    )
    for variant in ("ssp2", "dpsgd"):  # the audited defaults have item biases; without them:
        out.append(
            Mechanism(
                f"recommend[public-features {variant}, biases off]",
                "recommend",
                notes=f"{pf}, biases=False",
                bind=_public_features(variant, biases=False),
            )
        )
    out.append(
        Mechanism(
            "recommend[public-features ssp2, center=sampled-mean]",
            "recommend",
            notes=pf,
            bind=_public_features("ssp2", center="sampled-mean"),
        )
    )
    out.append(
        Mechanism(
            "recommend[public-features ssp2, loss=logistic]",
            "recommend",
            notes=f"{pf}; convex-loss SSP (Algorithm 7)",
            bind=_public_features("ssp2", loss="logistic", biases=False),
        )
    )
    out.append(
        Mechanism(
            "recommend[federated ssp2]",
            "recommend",
            notes=f"{pf}; federated SSP2 (no biases)",
            bind=_public_features("ssp2", federated=True),
        )
    )
    return out


def _registered() -> list[Mechanism]:
    """The configurations above plus those a capability keeps in its own module (imported
    here, at the end, since they build on :class:`Mechanism`)."""
    from userdp.audit.aggregate_mechanisms import aggregate_mechanisms

    return [*_all(), *aggregate_mechanisms()]


#: Every audited release, by name.
MECHANISMS: dict[str, Mechanism] = {m.name: m for m in _registered()}
