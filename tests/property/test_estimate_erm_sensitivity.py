"""Property tests of the user-level sensitivity of weighted ERM's per-step statistic.

Epasto et al. 2020, Algorithm 2 runs a record-level DP-ERM algorithm on the user-level loss
``l'(theta, M_l) = sum_{i in S_l} c_i l(theta; x_i, y_i)``. With per-example gradients clipped
to L and each user's weights summing to at most h, the step statistic
``G(theta) = sum_i w_i clip(grad l(theta; x_i, y_i), L)`` moves by at most ``L h`` in l2 when
one user is added or removed (Lemma 1's argument, for vectors), provided the other users'
weights stay the same -- which smooth weights ``min(h, s_l)/s_l`` do for a fixed h -- and by at
most ``2 L h`` when one user's record values are replaced (public partition).

Neighbouring datasets: D' = D plus one new user whose id sorts at a random position among the
existing ids (so the dense codes of later users shift), with a random number of records,
extreme labels and large features.
"""

from __future__ import annotations

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from userdp.estimate.erm import weighted_gradient_sum  # noqa: E402
from userdp.estimate.weighting import factorize_users, limit_mask, smooth_weights  # noqa: E402
from userdp.privacy import NoiseSource  # noqa: E402

TOL = 1e-9

FAST = settings(
    max_examples=80,
    deadline=None,
    derandomize=True,  # fixed examples: the same run every time
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


class Neighbours:
    """D (existing users, ids 0, 2, 4, ...) and D' = D plus a new user with an odd id."""

    def __init__(self, data: st.DataObject) -> None:
        draw = data.draw
        self.loss = draw(st.sampled_from(["logistic", "squared"]), label="loss")
        self.fit_intercept = draw(st.booleans(), label="fit_intercept")
        self.lipschitz = draw(st.floats(0.01, 5.0), label="lipschitz")
        self.h = draw(st.floats(0.5, 12.0), label="h")
        d = draw(st.integers(1, 3), label="d")
        n_old = draw(st.integers(0, 6), label="n_old_users")
        old_sizes = [draw(st.integers(1, 6)) for _ in range(n_old)]
        new_size = draw(st.integers(1, 30), label="new_size")
        position = draw(st.integers(0, n_old), label="new_user_position")
        seed = draw(st.integers(0, 2**32 - 1), label="seed")
        rng = np.random.default_rng(seed)
        old_users = np.repeat(2 * np.arange(n_old), old_sizes)
        n = old_users.size
        self.x = rng.normal(size=(n, d))
        self.y = self._labels(rng, n)
        self.users = old_users
        # The new user: extreme labels, large features, id between existing ones.
        new_x = rng.normal(size=(new_size, d)) * 100.0
        new_y = self._labels(rng, new_size) * (1.0 if self.loss == "logistic" else 1e3)
        self.x2 = np.vstack([self.x, new_x])
        self.y2 = np.concatenate([self.y, new_y])
        self.users2 = np.concatenate([old_users, np.full(new_size, 2 * position - 1)])
        self.theta = rng.normal(size=d + self.fit_intercept) * draw(st.floats(0.0, 10.0))

    def _labels(self, rng: np.random.Generator, size: int) -> np.ndarray:
        if self.loss == "logistic":
            return rng.choice([-1.0, 1.0], size)
        return rng.normal(size=size) * 3.0

    def statistic(self, x: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
        return weighted_gradient_sum(
            self.theta, x, y, w, self.loss, self.lipschitz, fit_intercept=self.fit_intercept
        )


@FAST
@given(st.data())
def test_adding_a_user_moves_the_smooth_weighted_gradient_by_at_most_lh(data):
    nb = Neighbours(data)
    codes2, sizes2 = factorize_users(nb.users2)
    w2 = smooth_weights(codes2, sizes2, nb.h)
    old = nb.users.size
    if nb.users.size:
        codes, sizes = factorize_users(nb.users)
        w = smooth_weights(codes, sizes, nb.h)
        np.testing.assert_array_equal(w2[:old], w)  # existing users' weights do not change
        before = nb.statistic(nb.x, nb.y, w)
    else:
        before = np.zeros_like(nb.theta)
    after = nb.statistic(nb.x2, nb.y2, w2)
    assert np.linalg.norm(after - before) <= nb.lipschitz * nb.h * (1 + TOL)


@FAST
@given(st.data())
def test_sample_limiting_keeps_at_most_floor_h_records_and_moves_the_sum_by_at_most_lh(data):
    nb = Neighbours(data)
    h = max(1.0, nb.h)
    codes2, sizes2 = factorize_users(nb.users2)
    keep = limit_mask(codes2, sizes2, h, NoiseSource(data.draw(st.integers(0, 2**31))))
    kept = np.bincount(codes2, weights=keep, minlength=sizes2.size)
    np.testing.assert_array_equal(kept, np.minimum(np.floor(h), sizes2))
    w = keep.astype(np.float64)
    is_new = np.arange(nb.users2.size) >= nb.users.size
    # The others' selection does not depend on the new user, so the change is the new user's
    # kept records' clipped gradients.
    change = nb.statistic(nb.x2, nb.y2, w) - nb.statistic(nb.x2, nb.y2, w * ~is_new)
    assert np.linalg.norm(change) <= nb.lipschitz * np.floor(h) * (1 + TOL)


@FAST
@given(st.data())
def test_replacing_one_users_values_moves_the_gradient_by_at_most_2lh(data):
    nb = Neighbours(data)
    codes2, sizes2 = factorize_users(nb.users2)
    w2 = smooth_weights(codes2, sizes2, nb.h)
    is_new = np.arange(nb.users2.size) >= nb.users.size
    # Near the worst case: same features, labels that turn every gradient of the user around.
    y3 = nb.y2.copy()
    if nb.loss == "logistic":
        y3[is_new] = -y3[is_new]
    else:
        pred = nb.x2 @ nb.theta[: nb.x2.shape[1]] + (nb.theta[-1] if nb.fit_intercept else 0.0)
        residual = pred - nb.y2
        y3[is_new] = pred[is_new] + np.where(residual[is_new] >= 0, 1e6, -1e6)
    change = nb.statistic(nb.x2, nb.y2, w2) - nb.statistic(nb.x2, y3, w2)
    assert np.linalg.norm(change) <= 2 * nb.lipschitz * nb.h * (1 + TOL)
