"""The auditor's configurations of :mod:`userdp.recommend`: each MatrixFactorization method
(with the implicit term, without item biases, each centre, a privately selected item set) and
each PublicFeatureRecommender variant (item features, biases off, a centre, the convex loss,
the federated protocol), all on a public catalogue fixed from the audited data."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from userdp.audit.mechanisms.base import (
    DELTA,
    EPSILON,
    SELECT_DELTA,
    SELECT_EPSILON,
    Mechanism,
    bounds,
    public_catalogue,
)
from userdp.audit.neighbours import Table

__all__ = ["mechanisms"]


def _factorization(
    method: str, *, private_items: bool = False, **options: Any
) -> Callable[[Table], Callable[[Table, int], object]]:
    """MatrixFactorization on the public catalogue (fixed from the audited data), or
    (``private_items``) on an item set selected privately from each run's own data with
    MAD2R, composed with training; ``options`` go to the constructor."""

    def bind(base: Table) -> Callable[[Table, int], object]:
        from userdp.recommend.als.estimator import MatrixFactorization

        # Private training takes an item set fixed before training: a public catalogue.
        catalogue = public_catalogue(base)

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
                rating_range=bounds(t),
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

        catalogue = public_catalogue(base)
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
                    rating_range=bounds(t),
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
                rating_range=bounds(t),
                seed=seed,
                biases=biases,
                **options,
            )
            return model.fit((t.user, t.item, t.value))

        return run

    return bind


def mechanisms() -> list[Mechanism]:
    """Each method's and variant's default, then one configuration per option that changes a
    sensitivity or what is released."""
    out = []
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
