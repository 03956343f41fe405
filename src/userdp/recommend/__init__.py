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

The modules fall in four groups, each importing only the groups before it (stated and checked
by the layering tests):

- shared core: ``_base`` (the estimators' shared keywords and ``fit`` preamble), ``spec``
  (the frozen training specs), ``plans`` (the one noise planner), ``prior`` (the
  empirical-Bayes bias prior), ``items``, ``centring``, ``model`` (the release), ``metrics``
  and ``protocols``;
- engines: ``runner`` (local), ``spark`` and ``engines`` (the ``Runner`` protocol and the
  factory); they may also use the ALS family's item update, ``als_steps``, which they run
  where the data live;
- ALS family: ``als`` (:class:`MatrixFactorization`) and ``als_steps``;
- public-feature family: ``public`` (:class:`PublicFeatureRecommender`), ``public_steps``,
  ``public_convex``, ``encoders``, ``id_encoder``, ``_flat``, ``federated`` and
  ``federated_messages``. Neither family imports the other.
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
