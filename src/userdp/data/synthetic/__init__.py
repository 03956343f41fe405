"""Synthetic data with a known shape, for demos, tests and benchmarks.

Nothing here touches real data: :func:`zipf_contributions` mimics a long-tailed
query/vocabulary log, :func:`section62_instance` is the explicit instance of Chen et al. 2025,
Section 6.2, where MAD provably beats Basic. :func:`lowrank_ratings` is a long-tail ratings set
shaped like MovieLens-10M with a planted low-rank signal, and :func:`multitask_regression` the
skewed multi-task regression of the multi-task DP paper (Appendix C). :func:`zipf_user_values`
and :func:`zipf_regression` give Zipf-sized users with i.i.d. values or regression records, for
the contribution-bounding estimators.

Modules: :mod:`.zipf` (contribution sets and per-user records), :mod:`.lowrank` (ratings) and
:mod:`.multitask` (multi-task regression).
"""

from userdp.data.synthetic.lowrank import lowrank_ratings, lowrank_ratings_with_features
from userdp.data.synthetic.multitask import MultiTaskData, multitask_regression
from userdp.data.synthetic.zipf import (
    UserRegression,
    UserValues,
    section62_instance,
    zipf_contributions,
    zipf_regression,
    zipf_user_sizes,
    zipf_user_values,
)

__all__ = [
    "MultiTaskData",
    "UserRegression",
    "UserValues",
    "lowrank_ratings",
    "lowrank_ratings_with_features",
    "multitask_regression",
    "section62_instance",
    "zipf_contributions",
    "zipf_regression",
    "zipf_user_sizes",
    "zipf_user_values",
]
