"""Private recommenders: DP matrix factorization under long-tail skew (Krichene et al. 2023).

:class:`MatrixFactorization` trains ALS, DPALS (uniform / tail sampling), AdaDPALS and the
DPSGD variants; :mod:`~userdp.recommend.metrics` scores them (RMSE, Recall@k, sliced by item
frequency) and :mod:`~userdp.recommend.protocols` holds the ML10M / ML20M benchmark splits.
:class:`PublicFeatureRecommender` (AM-SSP, Krichene et al. 2023b) trains an item encoder on
public item features (:mod:`~userdp.recommend.encoders`, :mod:`userdp.data.features`), with
the squared loss or any :class:`ConvexLoss` (:mod:`~userdp.recommend.public_convex`).
Both train on an :class:`ItemSet` fixed before training (a public catalogue, or a vocabulary
chosen by ``userdp.select_partitions`` and passed in: this package never imports
``userdp.partition``) and release a :class:`RecommenderModel`.
"""

from userdp.recommend.als import METHODS, MatrixFactorization, TrainingPlan, plan_noise
from userdp.recommend.encoders import FeatureFamily, IdEncoder, ItemEncoder, PublicFeatureEncoder
from userdp.recommend.items import ItemSet
from userdp.recommend.metrics import (
    frequency_buckets,
    popularity_scores,
    ranking_metrics_at_k,
    rmse,
    sliced_rmse,
)
from userdp.recommend.model import RecommenderModel
from userdp.recommend.plans import NoisePlan
from userdp.recommend.protocols import (
    ML20M_MODEL_DEFAULTS,
    EvaluationTask,
    HeldOutSplit,
    RatingSplit,
    baseline_scores,
    holdout_rmse,
    ml10m_split,
    ml20m_split,
    protocol_task,
    restrict_items,
    score_model,
)
from userdp.recommend.public import PublicFeatureRecommender, plan_ssp_noise, ssp_gradient
from userdp.recommend.public_convex import ConvexLoss

__all__ = [
    "METHODS",
    "ML20M_MODEL_DEFAULTS",
    "ConvexLoss",
    "EvaluationTask",
    "FeatureFamily",
    "HeldOutSplit",
    "IdEncoder",
    "ItemEncoder",
    "ItemSet",
    "MatrixFactorization",
    "NoisePlan",
    "PublicFeatureEncoder",
    "PublicFeatureRecommender",
    "RatingSplit",
    "RecommenderModel",
    "TrainingPlan",
    "baseline_scores",
    "frequency_buckets",
    "holdout_rmse",
    "ml10m_split",
    "ml20m_split",
    "plan_noise",
    "plan_ssp_noise",
    "popularity_scores",
    "protocol_task",
    "ranking_metrics_at_k",
    "restrict_items",
    "rmse",
    "score_model",
    "sliced_rmse",
    "ssp_gradient",
]
