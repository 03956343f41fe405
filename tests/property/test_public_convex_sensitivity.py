"""Sensitivity of SSP for convex losses (Krichene et al. 2023b, Appendix D, Algorithm 7 lines
4-5): adding one user moves the stacked clipped Hessian statistics ``(H_j)`` by at most
``Gamma_H`` and the gradient statistics ``(g_j)`` by at most ``Gamma_g`` (l2), and every release
of a whole private training run by at most its stated bound."""

from __future__ import annotations

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import userdp.recommend.public.convex_fit as convex_fit_module  # noqa: E402
from helpers import Tape  # noqa: E402
from userdp.data.ratings import Ratings  # noqa: E402
from userdp.multitask.allocation import adaptive_weights  # noqa: E402
from userdp.multitask.kernels import segment_offsets  # noqa: E402
from userdp.multitask.ssp import clip_rows  # noqa: E402
from userdp.recommend import ConvexLoss, IdEncoder, PublicFeatureRecommender  # noqa: E402
from userdp.recommend.public.convex import LOGISTIC, SQUARED, convex_statistics  # noqa: E402

FAST = settings(max_examples=60, deadline=None, derandomize=True)
HUBER = ConvexLoss(
    "huber",
    value=lambda p, y: np.where(abs(p - y) <= 1, 0.5 * (p - y) ** 2, abs(p - y) - 0.5),
    grad=lambda p, y: np.clip(p - y, -1.0, 1.0),
    hess=lambda p, y: (abs(p - y) <= 1).astype(float),
)
LOSSES = {"squared": SQUARED, "logistic": LOGISTIC, "huber": HUBER}


def _statistics(loss, U, V, users, items, y, counts, clips):
    w = adaptive_weights(users, items, counts, mu=0.25, beta=1.0)
    order, offsets = segment_offsets(items, V.shape[0])
    return convex_statistics(loss, U, V, users, items, y, w, order, offsets, *clips)


@FAST
@given(
    seed=st.integers(0, 2**32 - 1),
    loss=st.sampled_from(sorted(LOSSES)),
    n_users=st.integers(0, 12),
    n_items=st.integers(1, 8),
    d=st.integers(1, 3),
    h_clip=st.floats(0.01, 3.0),
    g_clip=st.floats(0.01, 3.0),
)
def test_an_added_user_moves_each_statistic_within_its_clip(
    seed, loss, n_users, n_items, d, h_clip, g_clip
):
    rng = np.random.default_rng(seed)
    max_norm = float(rng.uniform(0.2, 2.0))
    rows = [(u, i) for u in range(n_users) for i in np.flatnonzero(rng.random(n_items) < 0.5)]
    k = int(rng.integers(1, n_items + 1))  # the added user's distinct items
    new_items = rng.choice(n_items, k, replace=False)
    users = np.array([r[0] for r in rows] + [n_users] * k, dtype=np.int64)
    items = np.array([r[1] for r in rows] + list(new_items), dtype=np.int64)
    y = rng.choice([0.0, 1.0, rng.normal(scale=3.0)], users.size)
    U = clip_rows(rng.normal(scale=2.0, size=(n_users + 1, d)), max_norm)
    V = rng.normal(scale=rng.uniform(0.1, 5.0), size=(n_items, d))
    counts = rng.uniform(0.0, 20.0, n_items)  # released counts: the same in both runs
    old = users < n_users
    clips = (h_clip, g_clip)
    H0, g0 = _statistics(LOSSES[loss], U, V, users[old], items[old], y[old], counts, clips)
    H1, g1 = _statistics(LOSSES[loss], U, V, users, items, y, counts, clips)
    assert np.linalg.norm(H1 - H0) <= h_clip * (1 + 1e-9)
    assert np.linalg.norm(g1 - g0) <= g_clip * (1 + 1e-9)


@pytest.mark.parametrize("loss", sorted(LOSSES))
def test_one_clipped_row_of_weight_one_moves_each_statistic_by_its_whole_clip(loss):
    # The bounds are tight: a user with one row (adaptive weight 1) whose terms exceed the clips
    # moves H by Gamma_H and g by Gamma_g exactly, so half the stated bounds would fail above.
    U = np.array([[0.0, 0.0], [3.0, 4.0]])  # ||u|| = 5
    V = np.array([[0.1, 0.0], [0.2, -0.3]])
    users, items, y = np.array([0, 1]), np.array([0, 1]), np.array([1.0, -1.0])
    clips = (0.05, 0.05)
    counts = np.array([3.0, 7.0])
    H0, g0 = _statistics(LOSSES[loss], U, V, users[:1], items[:1], y[:1], counts, clips)
    H1, g1 = _statistics(LOSSES[loss], U, V, users, items, y, counts, clips)
    assert np.linalg.norm(H1 - H0) == pytest.approx(clips[0], rel=1e-6)
    assert np.linalg.norm(g1 - g0) == pytest.approx(clips[1], rel=1e-6)


# -- whole training runs on neighbouring datasets ---------------------------------------------


def _neighbours(seed: int, kind: str) -> tuple[Ratings, Ratings, list[str]]:
    """Implicit D, D' = D + 'rare-user', and the public item set (D's items + 2 nobody rated)."""
    rng = np.random.default_rng(seed)
    n_users, n_items = int(rng.integers(8, 25)), int(rng.integers(4, 10))
    rows = []
    for u in range(n_users):
        for i in rng.choice(n_items, int(rng.integers(1, n_items + 1)), replace=False):
            rows.append((f"u{u}", f"i{i}", 1.0))
    vocab = [f"i{i}" for i in range(n_items)] + ["rare-title-42", "rare-title-43"]
    new = {
        "new-outside": ["rare-title-99", "rare-title-98"],
        "new-inside": ["rare-title-42", "rare-title-43"],
        "mix": ["rare-title-42", "rare-title-99", "i0", f"i{n_items - 1}"],
    }[kind]
    added = [("rare-user", item, 1.0) for item in new]

    def table(r):
        return Ratings.from_columns(*(list(col) for col in zip(*r, strict=True)))

    return table(rows), table(rows + added), vocab


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["new-outside", "new-inside", "mix"])
@pytest.mark.parametrize("variant", ["ssp2", "minibatch", "dpsgd"])
@settings(
    max_examples=4,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(seed=st.integers(0, 2**32 - 1))
def test_every_logistic_release_holds_its_bound_for_an_added_user(monkeypatch, variant, kind, seed):
    d, d2, vocab = _neighbours(seed, kind)
    tape = Tape()
    # the convex fit builds the noise source and hands it to the convex training
    monkeypatch.setattr(convex_fit_module, "NoiseSource", tape)
    for data in (d, d2):
        model = PublicFeatureRecommender(
            encoder=IdEncoder(len(vocab), 2, seed=0),
            items=vocab,
            variant=variant,
            steps=2,
            inner_steps=2,
            batch_items=3,
            count_sample=3,
            rating_range=(0.0, 1.0),
            center=0.0,
            loss="logistic",
            hessian_clip=0.1,
            gradient_clip=0.3,
            negatives=1.5,
            seed=5,
            epsilon=2.0,
            delta=1e-5,
        )
        model.fit(data)
        assert model.model_.item_labels.to_pylist() == vocab  # never outside the item set
    a, b = tape.runs
    names = [r.statistic for r in a]
    assert names == [r.statistic for r in b]
    expected = {"encoder gradient"} if variant == "dpsgd" else {"item hessian", "item gradient"}
    assert expected <= set(names)
    for ra, rb in zip(a, b, strict=True):
        assert ra.value.shape == rb.value.shape, ra.statistic
        moved = float(np.linalg.norm(rb.value - ra.value))
        assert moved <= ra.l2 * (1 + 1e-9) + 1e-12, (ra.statistic, moved, ra.l2)
        if ra.statistic == "item hessian":
            assert ra.l2 == 0.1
        if ra.statistic == "item gradient":
            assert ra.l2 == 0.3
