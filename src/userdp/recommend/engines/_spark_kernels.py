"""The Spark runner's per-partition kernels (``mapInPandas`` bodies on the executors) and the
column layouts of its frames: each partition holds whole users and computes, with the local
runner's NumPy code, what the local runner computes for them; item statistics leave it as
partial sums per bucket of items, added up by :func:`_sum_partials`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from userdp.data.encoding import run_bounds
from userdp.multitask.allocation import row_keys, sample_per_user
from userdp.recommend.engines.local import LocalRunner, UserSolve

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

# Column names of the prepared frame: user partition, user code within it, item code
# (-1: outside the item set), rating, row key, counted in the private counts, kept by the
# sampled mean, the user's number of ratings, allocation weight; a repeated pair.
_B, _J, _I, _R, _K, _C, _S, _N, _W = "_b", "_j", "_i", "_r", "_k", "_c", "_s", "_n", "_w"
_D = "_d"  # the row repeats an earlier (user, item) pair
_PREPARED = (
    f"{_B} long, {_J} long, {_I} long, {_R} double, {_K} long, {_C} boolean, {_S} boolean, "
    f"{_N} long, {_D} boolean"
)
_TRAINING = f"{_B} long, {_J} long, {_I} long, {_R} double, {_W} double"
_PARTIAL = "_g long, _c binary, _x binary"  # item bucket, item codes, statistics


def _prepare_bucket(vocab: list, salt: int, count_sample: int, pdf: pd.DataFrame) -> pd.DataFrame:
    """One partition of users: user codes, row keys, the count and mean samples (per user)."""
    users, user_labels = _codes(pa.Array.from_pandas(pdf["_u"]).to_pylist())
    items = pdf[_I].to_numpy(dtype=np.int64)
    inside = items >= 0
    item_labels = pa.Array.from_pandas(pdf["_l"]).to_pylist()
    # The item's vocabulary label inside the item set (as the local runner hashes it), its own
    # label outside (as the local centre hashes the full ratings).
    keyed = [vocab[i] if i >= 0 else v for i, v in zip(items.tolist(), item_labels, strict=True)]
    codes, item_keys = _codes(keyed)
    keys = row_keys(users, codes, user_labels, item_keys, salt)
    pair = users * (len(item_keys) + 1) + codes
    order = np.argsort(pair, kind="stable")
    repeated = np.zeros(users.size, dtype=bool)  # reported by the driver, which raises
    repeated[order[1:]] = pair[order[1:]] == pair[order[:-1]]
    counted = np.zeros(users.size, dtype=bool)
    counted[inside] = sample_per_user(users[inside], count_sample, None, keys=keys[inside])
    sampled = sample_per_user(users, count_sample, None, keys=keys)
    n_u = np.bincount(users)[users]
    return pd_frame(
        {
            _B: pdf[_B].to_numpy(),
            _J: users,
            _I: items,
            _R: pdf[_R].to_numpy(dtype=np.float64),
            _K: keys.view(np.int64),
            _C: counted,
            _S: sampled,
            _N: n_u,
            _D: repeated,
        }
    )


def _codes(labels: list) -> tuple[np.ndarray, list]:
    """Codes of hashable labels by first appearance, and the distinct labels."""
    book: dict[Any, int] = {}
    codes = np.fromiter(
        (book.setdefault((type(v), v), len(book)) for v in labels), np.int64, len(labels)
    )
    return codes, [v for _, v in book]


def pd_frame(columns: dict[str, Any]) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(columns)


def _user_codes(pdf: pd.DataFrame) -> np.ndarray:
    """Codes 0..n-1 of the users of a partition (unique by (partition, code within it))."""
    key = (pdf[_B].to_numpy(dtype=np.int64) << 32) | pdf[_J].to_numpy(dtype=np.int64)
    return np.unique(key, return_inverse=True)[1].astype(np.int64).reshape(-1)


def _training_bucket(
    trained: np.ndarray, rule: Any, counts: np.ndarray | None, pdf: pd.DataFrame
) -> pd.DataFrame:
    """One partition's rows of trained items with their allocation weights (Table 2)."""
    from userdp.recommend.core.steps import user_weights

    items = pdf[_I].to_numpy(dtype=np.int64)
    pdf = pdf[(items >= 0) & trained[np.maximum(items, 0)]]
    users = _user_codes(pdf)
    items = pdf[_I].to_numpy(dtype=np.int64)
    if rule is None or users.size == 0:
        w = np.ones(users.size)
    else:
        keys = pdf[_K].to_numpy(dtype=np.int64).view(np.uint64)
        assert counts is not None  # released with the rule
        w = user_weights(rule, users, items, counts, None, keys)
    return pd_frame({_B: pdf[_B].to_numpy(), _J: users, _I: items, _R: pdf[_R].to_numpy(), _W: w})


def _solved_partition(
    U: np.ndarray,
    how: UserSolve,
    reg: float,
    lo: float,
    hi: float,
    center: float,
    weighted: bool,
    zz: np.ndarray | None,
    pdf: pd.DataFrame,
) -> tuple[LocalRunner, np.ndarray]:
    """A local runner over one partition's rows with its users solved (line 4), and the
    partition's item codes."""
    codes = _user_codes(pdf)
    items, icodes = np.unique(pdf[_I].to_numpy(dtype=np.int64), return_inverse=True)
    y = np.clip(pdf[_R].to_numpy(dtype=np.float64), lo, hi) - center
    w = pdf[_W].to_numpy(dtype=np.float64) if weighted else None
    local = LocalRunner.from_codes(codes, icodes, y, w, int(codes.max()) + 1, items.size)
    local.solve_users(U[items], how, reg, items_gram=zz)
    return local, items


def _step_bucket(
    U: np.ndarray,
    how: UserSolve,
    reg: float,
    lo: float,
    hi: float,
    center: float,
    weighted: bool,
    zz: np.ndarray | None,
    n_groups: int,
    pdf: pd.DataFrame,
) -> pd.DataFrame:
    """One partition: its users' exact solves, then their partial item statistics."""
    local, items = _solved_partition(U, how, reg, lo, hi, center, weighted, zz, pdf)
    gram, moment = local.item_statistics(weighted)
    k = gram.shape[1]
    iu = np.triu_indices(k)
    stats = np.concatenate([gram[:, iu[0], iu[1]], moment], axis=1)
    gravity = np.append(local.gravity().ravel(), float(local.n_users))
    return _pack(items, stats, n_groups, gravity)


def _gradient_bucket(
    U0: np.ndarray,
    how: UserSolve,
    reg: float,
    lo: float,
    hi: float,
    center: float,
    zz: np.ndarray | None,
    U: np.ndarray,
    clip: float,
    n_groups: int,
    pdf: pd.DataFrame,
) -> pd.DataFrame:
    """One partition: its users solved against the step's ``U0``, then their item gradient
    at ``U``, each user's whole gradient clipped to ``clip`` (Algorithm 2; the rows of a user
    are all in this partition, so the clipping is the local runner's)."""
    from userdp.recommend.core.steps import GradientOperator

    local, items = _solved_partition(U0, how, reg, lo, hi, center, True, zz, pdf)
    assert local.weights is not None  # weighted rows, asked for above
    op = GradientOperator(
        local.users,
        local.items,
        local.target,
        local.weights,
        local.item_order,
        local.item_offsets,
        local.n_items,
        local.n_users,
    )
    return _pack(items, op.gradient(U[items], local.V, clip), n_groups, None)


def _pack(
    items: np.ndarray, stats: np.ndarray, n_groups: int, extra: np.ndarray | None
) -> pd.DataFrame:
    """One row per item bucket (item code mod ``n_groups``): its item codes and their
    statistics; ``extra`` (the implicit term's Gram) as bucket -1."""
    group = items % n_groups
    order = np.argsort(group, kind="stable")
    rows = (
        [order[a:b] for a, b in zip(*run_bounds(group[order]), strict=True)] if order.size else []
    )
    tail = [] if extra is None else [(-1, b"", extra.tobytes())]
    return pd_frame(
        {
            "_g": [int(group[r[0]]) for r in rows] + [t[0] for t in tail],
            "_c": [items[r].tobytes() for r in rows] + [t[1] for t in tail],
            "_x": [stats[r].tobytes() for r in rows] + [t[2] for t in tail],
        }
    )


def _sum_partials(pdf: pd.DataFrame) -> pd.DataFrame:
    """Add the partial statistics of one item bucket's items over the user partitions (or the
    gravity rows, bucket -1)."""
    group = int(pdf["_g"].iloc[0])
    parts = [np.frombuffer(b, dtype=np.float64) for b in pdf["_x"]]
    if group < 0:
        return pd_frame({"_g": [group], "_c": [b""], "_x": [np.sum(parts, axis=0).tobytes()]})
    codes = np.concatenate([np.frombuffer(b, dtype=np.int64) for b in pdf["_c"]])
    x = np.concatenate(parts).reshape(codes.size, -1)
    order = np.argsort(codes, kind="stable")
    codes, x = codes[order], x[order]
    starts, _ = run_bounds(codes)
    total = np.add.reduceat(x, starts, axis=0)
    return pd_frame({"_g": [group], "_c": [codes[starts].tobytes()], "_x": [total.tobytes()]})
