"""Property tests of the partition-selection algorithms and of degree capping.

- every algorithm releases a subset of the union of the users' items;
- the same seed gives the same output;
- ``cap_degrees`` keeps a subset of each user's pairs, every degree <= cap, and leaves users
  under the cap untouched.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from userdp.data.hashing import salted_hash  # noqa: E402
from userdp.partition import ALGORITHMS, select_partitions  # noqa: E402
from userdp.partition._local import cap_degrees  # noqa: E402
from userdp.privacy import NoiseSource  # noqa: E402

N_EXAMPLES = int(os.environ.get("USERDP_PROPERTY_EXAMPLES", "150"))
SETTINGS = settings(
    max_examples=max(N_EXAMPLES // 5, 10),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

VOCAB = ["the", "a", "of", "none", "null", "x", "y", "z", "rare", "zipf"]


@st.composite
def pair_lists(draw):
    """(user, item) pairs: 1..200 users, items from a small vocabulary, duplicates allowed.

    A few popular words are shared by most users so that something is actually released at a
    moderate epsilon.
    """
    n_users = draw(st.integers(1, 200))
    vocab_size = draw(st.integers(1, len(VOCAB)))
    vocab = VOCAB[:vocab_size]
    popular = draw(st.integers(0, vocab_size))
    pairs = []
    for u in range(n_users):
        mine = vocab[:popular] + draw(st.lists(st.sampled_from(vocab), max_size=4))
        if not mine:
            mine = [draw(st.sampled_from(vocab))]
        pairs.extend((f"user{u}", w) for w in mine)
    perm = draw(st.permutations(range(len(pairs))))
    return [pairs[k] for k in perm]


@pytest.mark.slow
@SETTINGS
@given(
    pairs=pair_lists(),
    algorithm=st.sampled_from(sorted(ALGORITHMS)),
    epsilon=st.sampled_from([0.5, 1.0, 5.0, 20.0]),
    seed=st.integers(0, 2**32 - 1),
)
def test_output_is_subset_of_union_and_deterministic(pairs, algorithm, epsilon, seed):
    union = {w for _, w in pairs}
    kw = {"epsilon": epsilon, "delta": 1e-5, "algorithm": algorithm, "seed": seed}
    if algorithm in ("mad", "mad2r"):
        kw["d_max"] = 4
        kw["max_items_per_user"] = 8
    result = select_partitions(pairs, **kw)
    items = result.items
    assert set(items) <= union
    assert len(items) == len(set(items))
    again = select_partitions(pairs, **kw)
    assert again.items == items


@pytest.mark.slow
@SETTINGS
@given(
    pairs=pair_lists(),
    algorithm=st.sampled_from(sorted(ALGORITHMS)),
    seed=st.integers(0, 2**32 - 1),
)
def test_every_algorithm_default_options(pairs, algorithm, seed):
    union = {w for _, w in pairs}
    result = select_partitions(pairs, epsilon=1.0, delta=1e-5, algorithm=algorithm, seed=seed)
    assert set(result.items) <= union


@st.composite
def sorted_codes(draw):
    n_users = draw(st.integers(1, 200))
    n_items = draw(st.integers(1, 40))
    sets = []
    for _ in range(n_users):
        deg = draw(st.integers(1, n_items))
        perm = draw(st.permutations(range(n_items)))
        sets.append(sorted(perm[:deg]) if draw(st.booleans()) else perm[:deg])
    users = np.repeat(np.arange(n_users), [len(s) for s in sets]).astype(np.int32)
    items = np.array([i for s in sets for i in s], dtype=np.int32)
    return users, items, n_users


@pytest.mark.slow
@settings(
    max_examples=N_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(codes=sorted_codes(), cap=st.integers(1, 45), seed=st.integers(0, 2**63 - 1))
def test_cap_degrees(codes, cap, seed):
    users, items, n_users = codes
    salt = NoiseSource(seed).salt
    hashes = (
        salted_hash(np.arange(n_users, dtype=np.int64), salt),
        salted_hash(np.arange(int(items.max()) + 1, dtype=np.int64), salt),
    )
    cu, ci, dropped = cap_degrees(users, items, n_users, cap, *hashes)
    assert np.all(np.diff(cu) >= 0)
    assert cu.size == ci.size == users.size - dropped
    original = {(int(u), int(i)) for u, i in zip(users, items, strict=True)}
    kept = [(int(u), int(i)) for u, i in zip(cu, ci, strict=True)]
    assert len(set(kept)) == len(kept)
    assert set(kept) <= original
    deg = np.bincount(users, minlength=n_users)
    new_deg = np.bincount(cu, minlength=n_users)
    assert np.all(new_deg == np.minimum(deg, cap))
    for u in np.flatnonzero(deg <= cap):  # users under the cap: same pairs, same order
        assert np.array_equal(ci[cu == u], items[users == u])
    # same seed, same subsets
    cu2, ci2, dropped2 = cap_degrees(users, items, n_users, cap, *hashes)
    assert dropped2 == dropped and np.array_equal(cu2, cu) and np.array_equal(ci2, ci)
