"""``score`` of the estimators: scikit-learn's R^2 and accuracy, without importing it.

Evaluation, not release: both are computed exactly on the data the caller passes.
"""

from __future__ import annotations

import numpy as np

from userdp.exceptions import DataError

__all__ = ["accuracy_score", "r2_score"]


def _weights(sample_weight: object, n: int, where: str) -> np.ndarray:
    if sample_weight is None:
        return np.ones(n)
    w = np.asarray(sample_weight, dtype=np.float64)
    if w.shape != (n,) or not np.all(np.isfinite(w)) or np.any(w < 0):
        raise DataError(f"{where}: sample_weight must be {n} finite non-negative numbers.")
    return w


def _targets(y: object, n: int, where: str) -> np.ndarray:
    arr = np.asarray(y)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise DataError(f"{where}: y must be 1-D with one value per row of X ({n}).")
    return arr


def r2_score(y: object, predicted: np.ndarray, sample_weight: object, where: str) -> float:
    """``1 - SS_res / SS_tot`` (weighted), as ``sklearn.metrics.r2_score``: 1.0 for a perfect
    fit of constant ``y``, 0.0 for an imperfect one.

    Examples
    --------
    >>> r2_score([1.0, 2.0, 3.0], np.array([1.0, 2.0, 4.0]), None, "doc")
    0.5
    """
    n = predicted.shape[0]
    truth = _targets(y, n, where).astype(np.float64)
    w = _weights(sample_weight, n, where)
    mean = np.average(truth, weights=w)
    residual = float(np.sum(w * (truth - predicted) ** 2))
    total = float(np.sum(w * (truth - mean) ** 2))
    if total == 0.0:
        return 1.0 if residual == 0.0 else 0.0
    return 1.0 - residual / total


def accuracy_score(y: object, predicted: np.ndarray, sample_weight: object, where: str) -> float:
    """Weighted fraction of exact matches, as ``sklearn.metrics.accuracy_score``.

    Examples
    --------
    >>> accuracy_score([0, 1, 1, 0], np.array([0, 1, 0, 0]), None, "doc")
    0.75
    """
    n = predicted.shape[0]
    truth = _targets(y, n, where)
    w = _weights(sample_weight, n, where)
    return float(np.average(truth == predicted, weights=w))


def sklearn_tags(estimator_type: str) -> object:
    """scikit-learn's ``Tags`` (1.6+) for a regressor or classifier, built on demand.

    scikit-learn is not a dependency: it is imported only when scikit-learn itself asks
    (``cross_val_score`` asks whether the model is a classifier to choose its splitter).
    """
    from sklearn.utils import ClassifierTags, InputTags, RegressorTags, Tags, TargetTags

    return Tags(
        estimator_type=estimator_type,
        target_tags=TargetTags(required=True),
        transformer_tags=None,
        regressor_tags=RegressorTags() if estimator_type == "regressor" else None,
        classifier_tags=ClassifierTags() if estimator_type == "classifier" else None,
        input_tags=InputTags(),
    )
