"""What :class:`~userdp.recommend.MatrixFactorization` and
:class:`~userdp.recommend.PublicFeatureRecommender` share: the common hyper-parameters' checks,
the declared parameters a release keeps, and the use of the released model."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pyarrow as pa

from userdp._validation import check_choice, check_int, check_real
from userdp.exceptions import InvalidParameterError, NotFittedError
from userdp.recommend.model import RecommenderModel

__all__ = ["RecommenderBase"]

#: Keywords a release never keeps: the seed (it would regenerate the noise), the progress bar,
#: the item set (saved as the model's item labels) and the encoder object (its parameters and
#: class name are saved instead).
_NOT_DECLARED = ("seed", "progress", "items", "encoder")


class RecommenderBase:
    """Shared by the recommenders: validation of the common keywords and the released model.

    Subclasses store their keywords in ``__init__`` (scikit-learn style) and set ``model_``
    (a :class:`RecommenderModel`) in ``fit``; everything that uses the model goes through it.
    """

    def _validate_common(self) -> None:
        """Check the keywords both recommenders take (the same rule and wording for both)."""
        name = type(self).__name__
        check_int(self.steps, "steps", name, low=1)
        check_real(self.mu, "mu", name, low=0.0)
        check_int(self.count_sample, "count_sample", name, low=1)
        for share in ("count_fraction", "center_fraction", "moment_share"):
            check_real(
                getattr(self, share), share, name, low=0.0, high=1.0, low_open=True,
                high_open=True,
            )  # fmt: skip
        check_real(self.max_norm, "max_norm", name, low=0.0, low_open=True)
        check_real(self.reg, "reg", name, low=0.0, low_open=True)
        check_real(self.noise_reg, "noise_reg", name, low=0.0)
        check_real(self.clip_norm, "clip_norm", name, low=0.0, low_open=True)
        if self.seed is not None:
            check_int(self.seed, "seed", name, low=0)
        if self.rating_range is not None:
            try:
                lo, hi = self.rating_range
            except (TypeError, ValueError):
                raise InvalidParameterError(
                    f"The 'rating_range' parameter of {name} must be (low, high). Got "
                    f"{self.rating_range!r} instead."
                ) from None
            check_real(lo, "rating_range[0]", name)
            check_real(hi, "rating_range[1]", name)
            if not lo < hi:
                raise InvalidParameterError(
                    f"The 'rating_range' parameter of {name} must be (low, high) with low < high. "
                    f"Got {self.rating_range!r} instead."
                )
        if isinstance(self.center, str):
            check_choice(self.center, "center", name, ["private-mean", "midpoint"])
        else:
            check_real(self.center, "center", name)

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

    def item_codes(self, labels: Any) -> np.ndarray:
        """Model item codes of original item ids (-1 for ids the model does not know)."""
        return self._check_fitted().item_codes(labels)

    def predict(self, history: Any, users: np.ndarray, items: Any) -> np.ndarray:
        """See :meth:`RecommenderModel.predict`."""
        return self._check_fitted().predict(history, users, items)

    def recommend(
        self,
        history: Any,
        users: np.ndarray | None = None,
        *,
        N: int = 10,
        filter_already_liked_items: bool = True,
    ) -> tuple[list[pa.Array], list[np.ndarray]]:
        """See :meth:`RecommenderModel.recommend`."""
        return self._check_fitted().recommend(
            history, users, N=N, filter_already_liked_items=filter_already_liked_items
        )

    def similar_items(
        self, item_ids: Any, *, N: int = 10, metric: str = "cosine"
    ) -> tuple[list[pa.Array], np.ndarray]:
        """See :meth:`RecommenderModel.similar_items`."""
        return self._check_fitted().similar_items(item_ids, N=N, metric=metric)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the released model (:meth:`RecommenderModel.save`; no seed, no fit time)."""
        self._check_fitted().save(path)

    @staticmethod
    def load(path: str | os.PathLike[str]) -> RecommenderModel:
        """Read a saved model: a :class:`RecommenderModel` (the release, not the trainer)."""
        return RecommenderModel.load(path)
