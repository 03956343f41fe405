"""The keywords of :class:`~userdp.recommend.MatrixFactorization`: its methods (Table 2 of
Krichene et al. 2023) and the declared table of its own keywords (those it shares with
``PublicFeatureRecommender`` are in :mod:`userdp.recommend.core.base`), checked first in ``fit``."""

from __future__ import annotations

from typing import Any

from userdp._validation import MAX_ITERATIONS
from userdp.recommend.als.steps import check_min_item_count, check_target_clip
from userdp.recommend.core.base import SHARED_CONSTRAINTS, check_biases

__all__ = ["CONSTRAINTS", "METHODS", "SPARK_METHODS"]

METHODS = (
    "als",
    "dpals-uniform",
    "dpals-tail",
    "adadpals",
    "dpsgd-uniform",
    "dpsgd-tail",
    "adadpsgd",
)
#: The methods the Spark engine runs: all of them.
SPARK_METHODS = METHODS

#: The declared keyword table (``MatrixFactorization._parameter_constraints``).
CONSTRAINTS: dict[str, dict[str, Any]] = {
    **SHARED_CONSTRAINTS,
    "method": {"choices": METHODS, "cli": False, "help": "Training method (Table 2)."},
    "dim": {"int": True, "low": 1, "help": "Embedding dimension."},
    "sample_size": {"int": True, "low": 1, "help": "Items sampled per user (k)."},
    "step_offset": {
        "low": 0.0,
        "low_open": True,
        "help": "Item i's step is learning-rate / (step-offset + n_hat_i).",
    },
    "sgd_steps": {
        "int": True,
        "low": 1,
        "high": MAX_ITERATIONS,
        "help": "Gradient steps per alternating step.",
    },
    "biases": {
        "check": check_biases,
        "metavar": "on|off|auto",
        "help": "Add released item biases and per-user biases (solved, never released); "
        "auto: on for explicit ratings (unobserved_weight 0), off for implicit feedback.",
    },
    "bias_prior": {
        "bool": True,
        "help": "Shrink the released item biases toward an empirical-Bayes prior fitted "
        "from each step's released statistics (SSP methods with biases; post-processing).",
    },
    "target_clip": {
        "check": check_target_clip,
        "none": True,
        "metavar": "X|auto|none",
        "help": "SSP methods: clip the item update's targets to +-this (rating units) and "
        "scale the moment noise to it; auto: half the rating range's half width with "
        "biases, no clipping without.",
    },
    "unobserved_weight": {
        "low": 0.0,
        "help": "Weight of the implicit-feedback term on unrated items (ml20m protocol: 1).",
    },
    "top_items": {
        "low": 0.0,
        "high": 1.0,
        "low_open": True,
        "none": True,
        "help": "Train only on this fraction of items with the largest private counts "
        "(ml20m protocol: 0.1).",
    },
    "min_item_count": {
        "check": check_min_item_count,
        "none": True,
        "metavar": "N|auto",
        "help": "Train only on items whose private count reaches this; 'auto' puts the "
        "cutoff where an item's noise starts to drown its signal (better at small epsilon).",
    },
}
