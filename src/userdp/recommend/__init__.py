"""Private recommenders: DP matrix factorization under long-tail skew (Krichene et al. 2023).

:class:`MatrixFactorization` trains ALS, DPALS (uniform / tail sampling), AdaDPALS and the
DPSGD variants; :mod:`~userdp.recommend.core.metrics` scores them (RMSE, Recall@k, sliced by item
frequency) and :mod:`~userdp.recommend.core.protocols` holds the ML10M / ML20M benchmark splits.
:class:`PublicFeatureRecommender` (AM-SSP, Krichene et al. 2023b) trains an item encoder on
public item features (:mod:`~userdp.recommend.public.encoders`, :mod:`userdp.data.features`), with
the squared loss or any :class:`ConvexLoss` (:mod:`~userdp.recommend.public.convex`).
Both train on an :class:`ItemSet` fixed before training (a public catalogue, or a vocabulary
chosen by ``userdp.select_partitions`` and passed in: this package never imports
``userdp.partition``) and release a :class:`RecommenderModel`.

The package falls in five subpackages by idea, each importing only those before it (stated
and checked by the layering tests), so what a step may touch is where it lives:

- ``core``: what both families share and no engine: ``base`` (the estimators' shared keywords
  and ``fit`` preamble), ``spec`` (the frozen training specs), ``plans`` (the one noise
  planner), ``prior`` (the empirical-Bayes bias prior), ``items``, ``centring``, ``model`` (the
  release), ``metrics``, ``protocols`` and ``steps`` (the steps both families or the runners
  share: the user-side norm, the allocation weights, the DPSGD item update);
- ``engines``: where the data live: the ``Runner`` protocol and its factory (the package),
  ``local`` (NumPy) and ``spark``; they build on the core only;
- ``als``: :class:`MatrixFactorization` (``estimator``) and its driver-side item update
  (``steps``);
- ``public``: :class:`PublicFeatureRecommender` (``estimator``), its ``steps``, the ``convex``
  losses and the item ``encoders`` (``id_encoder``, ``_flat``);
- ``federated``: the federated protocol of the public-feature recommender (``messages``,
  ``parties``, ``estimator``); it builds on ``public`` (its keyword rules and encoder steps).

The two families (``als``, ``public``) import the core and the engines, never each other.
"""

from userdp.recommend.als.estimator import METHODS, MatrixFactorization, TrainingPlan, plan_noise
from userdp.recommend.core.items import ItemSet
from userdp.recommend.core.metrics import (
    frequency_buckets,
    popularity_scores,
    ranking_metrics_at_k,
    rmse,
    sliced_rmse,
)
from userdp.recommend.core.model import RecommenderModel
from userdp.recommend.core.plans import NoisePlan
from userdp.recommend.core.protocols import (
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
from userdp.recommend.public.convex import ConvexLoss
from userdp.recommend.public.encoders import (
    FeatureFamily,
    IdEncoder,
    ItemEncoder,
    PublicFeatureEncoder,
)
from userdp.recommend.public.estimator import PublicFeatureRecommender, plan_ssp_noise, ssp_gradient

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
