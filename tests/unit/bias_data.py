"""Shared by the bias tests of both recommenders (test_recommend_biases, test_public_biases)."""

from __future__ import annotations

import numpy as np

from userdp.data.ratings import Ratings


def pure_biases(seed: int = 0, n_users: int = 400, n_items: int = 40):
    """Noiseless ratings 3 + c_u + b_i on a random half of the (user, item) pairs."""
    rng = np.random.default_rng(seed)
    b = rng.normal(0.0, 0.6, n_items)
    c = rng.normal(0.0, 0.4, n_users)
    users, items = np.nonzero(rng.random((n_users, n_items)) < 0.5)
    values = np.clip(3.0 + c[users] + b[items], 0.5, 5.0)
    return users, items, values, b


def ratings_table(users, items, values) -> Ratings:
    """Integer codes as ``u<k>`` / ``i<k>`` labels."""
    return Ratings.from_columns([f"u{u}" for u in users], [f"i{i}" for i in items], list(values))
