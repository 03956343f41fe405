"""Smooth bounding of user contributions (Epasto et al., NeurIPS 2020).

Records are weighted so that each user's total weight is at most h (Lemma 3) instead of
dropping records beyond a per-user limit (sample limiting, the baseline of every function
here): a private mean (:func:`weighted_mean`, Alg. 1), quantiles (:func:`weighted_quantile`,
a weighted exponential mechanism), label-private linear regression
(:class:`LabelPrivateLinearRegression`, generalized weighted averaging, Alg. 3) and weighted
ERM (:class:`WeightedERM`, Alg. 2). :mod:`userdp.estimate.weighting` holds the weights and the
choice of h (Claims 1 and 2).

One convention (see :mod:`userdp.estimate._common`): functions take ``epsilon=`` and return a
result with ``budget``, ``dp_event`` and ``summary()``; estimators take ``epsilon`` (and
``delta`` when their noise is Gaussian) in the constructor and expose ``budget_``,
``dp_event_`` and ``summary()`` after ``fit``. Every entry point takes ``accountant=``, a shared
:class:`~userdp.privacy.PrivacyAccountant` that a release over its total budget is refused by
before any data is read. Every parameter has a rule in a declared table, checked first.
"""

from userdp.estimate.erm import WeightedERM
from userdp.estimate.mean import (
    SAMPLE_LIMITED_MEAN_PARAMETERS,
    WEIGHTED_MEAN_PARAMETERS,
    MeanResult,
    sample_limited_mean,
    weighted_mean,
)
from userdp.estimate.quantile import (
    SAMPLE_LIMITED_QUANTILE_PARAMETERS,
    WEIGHTED_QUANTILE_PARAMETERS,
    QuantileResult,
    sample_limited_quantile,
    weighted_quantile,
)
from userdp.estimate.regression import (
    GWA_LINEAR_REGRESSION_PARAMETERS,
    LabelPrivateLinearRegression,
    LabelPrivateRegressionResult,
    best_limit_h_regression,
    gwa_linear_regression,
    solve_gwa,
)
from userdp.estimate.weighting import (
    best_limit_h,
    best_smooth_h,
    private_size_histogram,
    smooth_weights,
)

__all__ = [
    "GWA_LINEAR_REGRESSION_PARAMETERS",
    "SAMPLE_LIMITED_MEAN_PARAMETERS",
    "SAMPLE_LIMITED_QUANTILE_PARAMETERS",
    "WEIGHTED_MEAN_PARAMETERS",
    "WEIGHTED_QUANTILE_PARAMETERS",
    "LabelPrivateLinearRegression",
    "LabelPrivateRegressionResult",
    "MeanResult",
    "QuantileResult",
    "WeightedERM",
    "best_limit_h",
    "best_limit_h_regression",
    "best_smooth_h",
    "gwa_linear_regression",
    "private_size_histogram",
    "sample_limited_mean",
    "sample_limited_quantile",
    "smooth_weights",
    "solve_gwa",
    "weighted_mean",
    "weighted_quantile",
]
