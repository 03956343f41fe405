"""What :class:`~userdp.recommend.MatrixFactorization` and
:class:`~userdp.recommend.PublicFeatureRecommender` share: the budget convention (``epsilon``,
``delta`` in the constructor, ``accountant=`` in ``fit``), the declared table of the common
hyper-parameters, the ``fit`` preamble (item set, rating range, private counts, centring) and
the use of the released model."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, overload

import dp_accounting
import numpy as np

from userdp._params import ParamsMixin
from userdp._validation import MAX_ITERATIONS, MIN_EPSILON, check_choice, check_real
from userdp.data.ratings import Ratings, as_ratings
from userdp.exceptions import DataError, InvalidParameterError, NotFittedError
from userdp.multitask.allocation import private_counts, row_keys
from userdp.privacy.accountant import PrivacyAccountant
from userdp.privacy.budget import PrivacyBudget
from userdp.privacy.checks import check_accountant
from userdp.privacy.noise import NoiseSource
from userdp.recommend.core.centring import CENTRES, centre_all
from userdp.recommend.core.items import ItemSet, as_item_set
from userdp.recommend.core.model import RecommenderModel
from userdp.recommend.core.spec import RunSpec

__all__ = [
    "SHARED_CONSTRAINTS",
    "PreparedRatings",
    "RecommenderBase",
    "check_biases",
    "prepare_ratings",
]

#: Keywords a release never keeps: the seed (it would regenerate the noise), the progress bar,
#: the item set (saved as the model's item labels) and the encoder object (its parameters and
#: class name are saved instead).
_NOT_DECLARED = ("seed", "progress", "items", "encoder")


def _check_rating_range(value: Any, name: str, caller: str) -> None:
    """A declared (low, high) pair of finite reals with low < high."""
    try:
        lo, hi = value
    except (TypeError, ValueError):
        raise InvalidParameterError(
            f"The {name!r} parameter of {caller} must be (low, high). Got {value!r} instead."
        ) from None
    check_real(
        lo, f"{name}[0]", caller, low=-math.inf, high=math.inf, low_open=True, high_open=True
    )
    check_real(
        hi, f"{name}[1]", caller, low=-math.inf, high=math.inf, low_open=True, high_open=True
    )
    if not lo < hi:
        raise InvalidParameterError(
            f"The {name!r} parameter of {caller} must be (low, high) with low < high. "
            f"Got {value!r} instead."
        )


def _check_center(value: Any, name: str, caller: str) -> None:
    """``"private-mean"``, ``"sampled-mean"``, ``"midpoint"`` or a finite number."""
    if isinstance(value, str):
        check_choice(value, name, caller, list(CENTRES))
    else:
        check_real(value, name, caller, low=-math.inf, high=math.inf, low_open=True, high_open=True)


def check_biases(value: Any, name: str, caller: str) -> None:
    """True, False or ``"auto"`` (the command line's on, off, auto)."""
    if not (value == "auto" if isinstance(value, str) else isinstance(value, bool | np.bool_)):
        raise InvalidParameterError(
            f"The {name!r} parameter of {caller} must be True, False or 'auto'. "
            f"Got {value!r} instead."
        )


def _check_items(value: Any, name: str, caller: str) -> None:
    """An :class:`ItemSet` or a sequence of distinct item ids (read as a public catalogue)."""
    try:
        as_item_set(value)
    except DataError as err:
        raise InvalidParameterError(
            f"The {name!r} parameter of {caller} must be an ItemSet or a sequence of distinct "
            f"item ids of one type. Got a {type(value).__name__} instead ({err})"
        ) from err


_SHARE = {"low": 0.0, "high": 1.0, "low_open": True, "high_open": True}

#: The keywords both recommenders take, declared once (same rule and wording for both).
SHARED_CONSTRAINTS: dict[str, dict[str, Any]] = {
    "epsilon": {
        "low": MIN_EPSILON,
        "none": True,
        "help": "Privacy budget epsilon of the training run (None: not private).",
    },
    "delta": {
        **_SHARE,
        "none": True,
        "help": "Privacy budget delta of the training run; Gaussian mechanisms need it > 0.",
    },
    "items": {
        "check": _check_items,
        "none": True,
        "cli": False,
        "help": "The item set, fixed before training (public catalogue or private selection).",
    },
    "steps": {
        "int": True,
        "low": 1,
        "high": MAX_ITERATIONS,
        "help": "Alternating steps; each private step is charged.",
    },
    "rating_range": {
        "check": _check_rating_range,
        "none": True,
        "cli": False,
        "help": "Declared rating scale (low, high); private training needs it.",
    },
    "center": {
        "check": _check_center,
        "cli": False,
        "help": "Value subtracted before factorizing: private-mean, sampled-mean, midpoint or "
        "a number.",
    },
    "mu": {
        "low": 0.0,
        "help": "Exponent of the adaptive weights n_hat^-mu (1/4 to 1/2 work best).",
    },
    "count_sample": {
        "int": True,
        "low": 1,
        "help": "At most this many items per user enter the private item counts (and the "
        "sampled mean).",
    },
    "count_fraction": {**_SHARE, "help": "Share of the budget spent on the private item counts."},
    "center_fraction": {
        **_SHARE,
        "help": "Share of the budget spent on the private mean (center=private-mean or "
        "sampled-mean).",
    },
    "moment_share": {
        **_SHARE,
        "help": "Share of each step's budget spent on the moments b (the rest on A).",
    },
    "max_norm": {
        "low": 0.0,
        "low_open": True,
        "help": "User embeddings are clipped to this norm before the item update.",
    },
    "reg": {"low": 0.0, "low_open": True, "help": "Frequency-scaled ridge regularisation."},
    "noise_reg": {
        "low": 0.0,
        "help": "Extra item ridge in units of the noise, for stable tail solves.",
    },
    "learning_rate": {"low": 0.0, "low_open": True, "help": "Step size of the gradient steps."},
    "clip_norm": {
        "low": 0.0,
        "low_open": True,
        "help": "User-level clipping norm of each user's gradient.",
    },
    "seed": {
        "int": True,
        "low": 0,
        "none": True,
        "cli": False,
        "help": "Seed of the noise, for tests and reproducible runs only.",
    },
    "progress": {"bool": True, "cli": False, "help": "Show a progress bar on stderr."},
}


@dataclass
class PreparedRatings:
    """What both ``fit`` methods compute before training, in the same order (the noise draws
    of the counts and the centre come first, so a seed gives the same model as before)."""

    data: Ratings
    item_set: ItemSet
    dropped: int
    lo: float
    hi: float
    values: np.ndarray
    keys: np.ndarray | None
    counts: np.ndarray | None
    exact_counts: np.ndarray | None
    center: float


class RecommenderBase(ParamsMixin):
    """Shared by the recommenders: the budget, the common keywords and the released model.

    Subclasses store their keywords in ``__init__`` (scikit-learn style), declare
    ``_parameter_constraints`` as ``{**SHARED_CONSTRAINTS, ...their own}`` and set ``model_``
    (a :class:`RecommenderModel`) in ``fit``; everything that uses the model goes through it.
    """

    _parameter_constraints: ClassVar[dict[str, dict[str, Any]]] = SHARED_CONSTRAINTS

    # The shared keywords every subclass stores in ``__init__`` (declared here for typing).
    epsilon: float | None
    delta: float | None
    items: Any
    rating_range: tuple[float, float] | None
    center: str | float
    center_fraction: float
    count_sample: int

    # -- the budget -----------------------------------------------------------------------------
    @overload
    def _check_budget_keywords(self, private: Literal[True]) -> PrivacyBudget: ...
    @overload
    def _check_budget_keywords(self, private: bool) -> PrivacyBudget | None: ...
    def _check_budget_keywords(self, private: bool) -> PrivacyBudget | None:
        """The target budget from ``epsilon``/``delta`` (None when training without privacy)."""
        name = type(self).__name__
        if not private:
            return None
        missing = [k for k in ("epsilon", "delta") if getattr(self, k) is None]
        if missing:
            raise InvalidParameterError(
                f"Private training needs a budget: pass {name}(epsilon=..., delta=...) "
                f"(missing {' and '.join(missing)}); Gaussian mechanisms need delta > 0."
            )
        if self.rating_range is None:
            raise InvalidParameterError(
                "Private training needs the declared rating range, e.g. rating_range=(0.5, 5.0): "
                "it bounds every user's influence and must not be read from the data."
            )
        assert self.epsilon is not None and self.delta is not None  # checked above
        return PrivacyBudget(self.epsilon, self.delta)

    #: ``accountant`` is a PrivacyAccountant or None (the multi-task entry points' rule).
    _check_accountant = staticmethod(check_accountant)

    @staticmethod
    def _spent(
        event: dp_accounting.DpEvent, item_set: ItemSet, delta: float
    ) -> tuple[dp_accounting.DpEvent, PrivacyBudget]:
        """The release's whole event (the item set's selection included) and its spend."""
        if item_set.dp_event is not None:
            event = dp_accounting.ComposedDpEvent([item_set.dp_event, event])
        return event, PrivacyAccountant().compose(event).spent(gaussian_delta=delta)

    # -- the fit preamble -----------------------------------------------------------------------
    @overload
    def _item_set(self, private: Literal[True]) -> ItemSet: ...
    @overload
    def _item_set(self, private: bool) -> ItemSet | None: ...
    def _item_set(self, private: bool) -> ItemSet | None:
        """The item set fixed before training (None: non-private training on the data's items).

        Private training needs an item set independent of any single user; without one, only
        non-private training may fall back on the data's own items (``source="data"``).
        """
        caller = type(self).__name__
        if self.items is None:
            if private:
                raise InvalidParameterError(
                    f"Private training needs an item set fixed before training: pass {caller}("
                    "items=...) a public catalogue of item ids, or ItemSet.selected(result) of "
                    "userdp.select_partitions on the (user, item) pairs. The data's own item "
                    "ids would reveal every user's rare items."
                )
            return None
        item_set = as_item_set(self.items)
        if len(item_set) == 0:
            raise InvalidParameterError(f"The item set of {caller} is empty; nothing to train.")
        return item_set

    def _run_spec(self, dim: int, biased: bool) -> RunSpec:
        """The preamble's declared inputs, resolved once at the top of ``fit``."""
        return RunSpec(self.rating_range, self.center, self.count_sample, int(dim), biased)

    def _prepare(
        self,
        ratings: Any,
        item_set: ItemSet | None,
        noise: NoiseSource,
        *,
        count_noise: float | None,
        center_noise: float | None,
    ) -> PreparedRatings:
        """:func:`prepare_ratings` with this estimator's declared keywords."""
        spec = self._run_spec(0, False)
        return prepare_ratings(
            spec, ratings, item_set, noise, count_noise=count_noise, center_noise=center_noise
        )

    def _center_fraction(self) -> float | None:
        """The private mean's budget share (None: the centre is free, nothing to plan)."""
        if isinstance(self.center, str) and self.center != "midpoint":
            return self.center_fraction
        return None

    def _declared(self, **extra: Any) -> dict[str, Any]:
        """The declared hyper-parameters a release keeps (never the seed or the item set)."""
        out = {
            k: v for k, v in vars(self).items() if not k.endswith("_") and k not in _NOT_DECLARED
        }
        if out.get("rating_range") is not None:
            out["rating_range"] = [float(v) for v in out["rating_range"]]
        out.update(extra)
        return out

    # -- using the model: the released RecommenderModel -----------------------------------------
    def _check_fitted(self) -> RecommenderModel:
        if not hasattr(self, "model_"):
            raise NotFittedError(f"This {type(self).__name__} is not fitted yet; call fit first.")
        return self.model_

    def summary(self) -> str:
        """One line on the release: released values and declared parameters only."""
        return self._check_fitted().summary()

    def item_codes(self, labels: Any) -> np.ndarray:
        """Model item codes of original item ids (-1 for ids the model does not know)."""
        return self._check_fitted().item_codes(labels)

    def predict(self, history: Any, users: np.ndarray, items: Any) -> np.ndarray:
        """See :meth:`RecommenderModel.predict`."""
        return self._check_fitted().predict(history, users, items)

    def recommend(
        self,
        userid: Any,
        user_items: Any = None,
        N: int = 10,
        filter_already_liked_items: bool = True,
        *,
        users: Any = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """See :meth:`RecommenderModel.recommend`."""
        return self._check_fitted().recommend(
            userid,
            user_items,
            N=N,
            filter_already_liked_items=filter_already_liked_items,
            users=users,
        )

    def similar_items(
        self, itemid: Any, N: int = 10, *, metric: str = "cosine"
    ) -> tuple[np.ndarray, np.ndarray]:
        """See :meth:`RecommenderModel.similar_items`."""
        return self._check_fitted().similar_items(itemid, N=N, metric=metric)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the released model (:meth:`RecommenderModel.save`; no seed, no fit time)."""
        self._check_fitted().save(path)

    @staticmethod
    def load(path: str | os.PathLike[str]) -> RecommenderModel:
        """Read a saved model: a :class:`RecommenderModel` (the release, not the trainer)."""
        return RecommenderModel.load(path)


def diagnostics(dropped: int, seconds: float) -> dict[str, Any]:
    """Exact, NON-PRIVATE figures for the curator; never saved, never part of the release."""
    return {
        "non_private": True,
        "ratings_outside_item_set": int(dropped),
        "fit_seconds": float(seconds),
    }


def prepare_ratings(
    spec: RunSpec,
    ratings: Any,
    item_set: ItemSet | None,
    noise: NoiseSource,
    *,
    count_noise: float | None,
    center_noise: float | None,
) -> PreparedRatings:
    """Read the ratings on the fixed item set, release the counts, centre (Algorithm 3's
    preamble, shared by both recommenders).

    Ratings of items outside the item set are dropped (counted in ``diagnostics_``); the
    private counts take at most ``count_sample`` items per user
    (:func:`~userdp.multitask.private_counts`) and the centre uses every rating, those
    outside the item set too (:func:`~userdp.recommend.core.centring.centre_all`); the private
    mean's per-user cap is chosen from the released counts (post-processing).
    ``count_noise`` None: not private (exact counts, exact centre).
    """
    full = as_ratings(ratings)
    if item_set is None:
        data, item_set, dropped = full, ItemSet(full.item_labels, "data"), 0
    else:
        data, dropped = full.restrict_items(item_set.labels)
    if spec.rating_range is not None:
        lo, hi = spec.rating_range
    else:
        lo, hi = float(data.values.min()), float(data.values.max())
    values = np.clip(data.values, lo, hi)
    private = count_noise is not None
    # Per-row random keys from (user label, item label): a user's random choices depend
    # only on that user's rows.
    keys = counts = exact = released_total = None
    if private:
        assert count_noise is not None  # private means count_noise is set
        keys = row_keys(data.users, data.items, data.user_labels, data.item_labels, noise.salt)
        counts = private_counts(
            data.users,
            data.items,
            data.n_items,
            count_sample=spec.count_sample,
            noise_multiplier=count_noise,
            noise=noise,
            keys=keys,
        ).counts
        released_total = float(np.sum(counts))
    else:
        exact = np.bincount(data.items, minlength=data.n_items).astype(np.float64)
    center = centre_all(
        full,
        lo,
        hi,
        center=spec.center,
        count_sample=spec.count_sample,
        noise_multiplier=center_noise,
        noise=noise,
        released_total=released_total,
    )
    return PreparedRatings(data, item_set, dropped, lo, hi, values, keys, counts, exact, center)
