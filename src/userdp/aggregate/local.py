"""The local (NumPy) engine: every pre-noise statistic of a GROUP BY, over a public key set.

The driver (:mod:`userdp.aggregate.api`) asks an engine for exact statistics whose sensitivity
is bounded by construction and adds the noise itself; the Spark engine answers the same
questions (:mod:`userdp.aggregate.spark`). What an engine returns is sized by the public key
set or the public histogram bins, never by users or rows.

Contribution vectors. Restricted to the key set K, user u has per key k a row count
``n_uk``, a sum of clipped values ``s_uk`` (centred on the bounds' midpoint when a mean is
released) and the indicator ``1[n_uk > 0]``. Smooth bounding scales the whole vector by
``w_u = min(1, C / ||x_u||_2)`` (:func:`userdp.estimate.weighting.smooth_weights` with the
norms as sizes, the one implementation of that weighting; with one key it is exactly Epasto
et al.'s ``min(h, s) / s``), so ``||w_u x_u||_2 <= C``: adding or removing u moves the
weighted per-key vector by at most C in l2, whatever the other users hold (each user's
weight depends on that user alone, for the fixed K).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from userdp.estimate.weighting import pool_upwards, smooth_weights
from userdp.exceptions import DataError

__all__ = [
    "HISTOGRAM_BINS",
    "QUANTILE_STREAM",
    "Columns",
    "LocalEngine",
    "StreamNoise",
    "bin_of",
    "draw_key_quantile",
    "key_quantile",
    "limit_keep",
    "row_keys",
    "user_weights",
]

#: Norm histogram bins: bin j >= 1 holds norms/unit in [2^((j - 1 + LOW)/4), 2^((j + LOW)/4));
#: bin 0 everything below (zero included), the last bin everything above.
_LOW, _HIGH = -32, 160
HISTOGRAM_BINS = _HIGH - _LOW + 2


def bin_of(norms: np.ndarray, unit: float) -> np.ndarray:
    """The histogram bin of each norm (in units of ``unit``), a pure function of one norm."""
    r = np.asarray(norms, dtype=np.float64) / unit
    with np.errstate(divide="ignore"):
        j = np.floor(4.0 * np.log2(r))
    j = np.where(r > 0, j, _LOW - 1)
    return (np.clip(j, _LOW - 1, _HIGH) - (_LOW - 1)).astype(np.int64)


def bin_representatives(unit: float) -> np.ndarray:
    """A norm per bin (geometric middle; the first bin: its upper edge / 2)."""
    j = np.arange(HISTOGRAM_BINS, dtype=np.float64) + (_LOW - 1)
    return unit * 2.0 ** ((j + 0.5) / 4.0)


@dataclass(frozen=True)
class Columns:
    """Column roles and the public value bounds."""

    user: str
    key: str | None
    value: str | None
    bounds: tuple[float, float] | None


def clip_values(values: np.ndarray, bounds: tuple[float, float]) -> np.ndarray:
    """Values clipped to the public ``bounds``, NaN kept as NaN: the one non-finite policy of
    both engines (docs/guarantees.md). A NaN (or null) is a row without a value: it counts
    for ``users`` and ``count``, adds nothing to ``sum``, is not a row of ``mean`` or
    ``quantiles``; ``inf`` and ``-inf`` are clipped like any value out of range. No error,
    branch or warning depends on whether a user holds one."""
    lo, hi = bounds
    return np.clip(np.asarray(values, dtype=np.float64), lo, hi)


def value_column(column: pa.ChunkedArray | pa.Array, name: str) -> np.ndarray:
    """A value column as float64, nulls as NaN: numbers and booleans as they are, text parsed
    as numbers (a cell that is not one is a missing value, as the file readers and Spark's
    cast read it). Any other type is refused by its type alone (public: the schema), never by
    a row's content."""
    import pyarrow.compute as pc

    from userdp.data.io import to_float64

    kind = column.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        chunked = column if isinstance(column, pa.ChunkedArray) else pa.chunked_array([column])
        floats = to_float64(chunked, name, "aggregate")
    elif (
        pa.types.is_integer(kind)
        or pa.types.is_floating(kind)
        or pa.types.is_boolean(kind)
        or pa.types.is_decimal(kind)
        or pa.types.is_null(kind)
    ):
        floats = pc.cast(column, pa.float64())
    else:
        raise DataError(
            f"aggregate: the value column {name!r} holds {kind}; it must hold numbers (a "
            "null or NaN value is a row without a value)."
        )
    return np.asarray(floats.to_numpy(zero_copy_only=False), dtype=np.float64)


def limit_keep(
    user: np.ndarray, key: np.ndarray, rand: np.ndarray, l0: int, linf: int
) -> np.ndarray:
    """Hard limits (the baseline): keep at most ``linf`` random rows of each (user, key) and at
    most ``l0`` random keys of each user. ``rand`` holds independent random 62-bit keys, one per
    row (the key of a (user, key) pair is its first kept row's)."""
    n = user.size
    order = np.lexsort((rand, key, user))
    u, k = user[order], key[order]
    new_pair = np.ones(n, dtype=bool)
    new_pair[1:] = (u[1:] != u[:-1]) | (k[1:] != k[:-1])
    pair_start = np.maximum.accumulate(np.where(new_pair, np.arange(n), 0))
    keep_row = (np.arange(n) - pair_start) < linf
    # rank the user's pairs by their first row's random key
    first = np.flatnonzero(new_pair)
    pu, pr = u[first], rand[order][first]
    porder = np.lexsort((pr, pu))
    pu_sorted = pu[porder]
    new_user = np.ones(first.size, dtype=bool)
    new_user[1:] = pu_sorted[1:] != pu_sorted[:-1]
    ustart = np.maximum.accumulate(np.where(new_user, np.arange(first.size), 0))
    keep_pair = np.empty(first.size, dtype=bool)
    keep_pair[porder] = (np.arange(first.size) - ustart) < l0
    pair_id = np.cumsum(new_pair) - 1
    keep = np.empty(n, dtype=bool)
    keep[order] = keep_row & keep_pair[pair_id]
    return keep


def row_keys(labels: pa.Array, user: np.ndarray, code: np.ndarray, salt: int) -> np.ndarray:
    """64-bit keys per row: a keyed hash of (secret ``salt``, the user's label, the row's key
    code over K, its occurrence among the user's rows of that key in input order).

    A row's key depends only on its own user's label and rows, K (public) and the secret salt,
    so adding or removing a user leaves every other row's key, and so every other user's kept
    rows, unchanged: the coupling the hard limits' sensitivity argument uses, and what lets the
    auditor replay the release on a neighbour.
    """
    from userdp.data.hashing import pair_key, salted_hash

    by_user = salted_hash(labels, salt)
    order = np.lexsort((code, user))  # stable: input order within each (user, key)
    u, k = user[order], code[order]
    new = np.ones(u.size, dtype=bool)
    new[1:] = (u[1:] != u[:-1]) | (k[1:] != k[:-1])
    start = np.maximum.accumulate(np.where(new, np.arange(u.size), 0))
    occurrence = np.empty(u.size, dtype=np.int64)
    occurrence[order] = np.arange(u.size) - start
    return pair_key(pair_key(by_user[user], code), occurrence)


def pair_stats(
    user: np.ndarray, code: np.ndarray, value: np.ndarray | None, n_keys: int, centre: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Distinct (user, key code) pairs, ordered by user then key, with their row counts, value
    sums centred at ``centre`` and counts of rows with a value: ``(user, key, n, s, m)``.

    A NaN value is a row without a value (:func:`clip_values`): it counts in ``n``, adds
    nothing to ``s`` and is not counted in ``m`` (without values ``s`` is zero and ``m = n``).
    Both engines compute the pairs with this function (Spark once per partition of whole
    users)."""
    if user.size == 0:
        e = np.zeros(0, dtype=np.int64)
        f = e.astype(np.float64)
        return e, e, f, f, f
    uniq, inv = np.unique(user * n_keys + code, return_inverse=True)
    n = np.bincount(inv).astype(np.float64)
    s: np.ndarray
    m: np.ndarray
    if value is not None:
        valued = ~np.isnan(value)
        s = np.bincount(inv, weights=np.where(valued, value - centre, 0.0), minlength=uniq.size)
        m = np.bincount(inv, weights=valued, minlength=uniq.size)
    else:
        s = np.zeros(uniq.size)
        m = n
    return uniq // n_keys, uniq % n_keys, n, s, m


def user_norms(
    pu: np.ndarray, n: np.ndarray, s: np.ndarray, m: np.ndarray, n_users: int
) -> dict[str, np.ndarray]:
    """Per-user l2 norms of the four contribution vectors (users: ones, count: ``n``, sum:
    ``s``, value_count: ``m``) from :func:`pair_stats`' pairs."""
    return {
        "users": np.sqrt(np.bincount(pu, minlength=n_users).astype(np.float64)),
        "count": np.sqrt(np.bincount(pu, weights=n * n, minlength=n_users)),
        "sum": np.sqrt(np.bincount(pu, weights=s * s, minlength=n_users)),
        "value_count": np.sqrt(np.bincount(pu, weights=m * m, minlength=n_users)),
    }


def norm_counts(norms: dict[str, np.ndarray], units: dict[str, float]) -> dict[str, np.ndarray]:
    """Users per norm bin (:func:`bin_of`) for each family of ``units``, over the given users'
    norms: both engines' histograms (Spark's per partition of whole users, then added).

    Each user falls in one bin per family, so adding or removing a user moves each histogram
    by 1 in l2 (``tests/property/test_aggregate_neighbours.py`` replays neighbours)."""
    return {
        f: np.bincount(bin_of(norms[f], u), minlength=HISTOGRAM_BINS).astype(np.float64)
        for f, u in units.items()
    }


def key_sums(
    pu: np.ndarray,
    pk: np.ndarray,
    n: np.ndarray,
    s: np.ndarray,
    m: np.ndarray,
    norms: dict[str, np.ndarray],
    bounds_c: dict[str, float],
    vectors: dict[str, tuple[str, ...]],
    n_keys: int,
) -> dict[str, np.ndarray]:
    """Per-key sums of ``w_u x_uk`` for each vector, over :func:`pair_stats`' pairs and the
    users' :func:`user_norms` (indexed by ``pu``); both engines compute them with this function
    (Spark once per partition of whole users, then adds the partitions' sums per key).

    ``vectors[v]`` names the families whose bounds the vector's weight respects:
    ``w_u = min over f of min(1, C_f / ||x_u^f||)`` (``()``: weight 1, the hard-limit form).
    Since ``w_u`` depends on user u alone, adding or removing u moves vector ``v`` by
    ``||w_u x_u^v||_2 <= C_f`` for each f it respects (the neighbour replay in
    ``tests/property/test_aggregate_neighbours.py`` checks the declared bound).
    """
    values = {"users": np.ones_like(n), "count": n, "sum": s, "value_count": m}
    n_users = norms["users"].size
    out = {}
    for v, fams in vectors.items():
        w = np.ones(n_users)
        for f in fams:
            w = np.minimum(w, user_weights(norms[f], bounds_c[f]))
        out[v] = np.bincount(pk, weights=w[pu] * values[v], minlength=n_keys)
    return out


class LocalEngine:
    """Rows held as NumPy arrays; statistics over a public key array."""

    name = "local"

    def __init__(self, table: pa.Table, cols: Columns) -> None:
        from userdp.data.encoding import encode_ids

        self.cols = cols
        self.n_rows = self.total_rows = table.num_rows
        codes, self._user_labels = encode_ids(table.column(cols.user), "users", order="sorted")
        self._user = codes.astype(np.int64)
        self.n_users = int(self._user.max()) + 1 if self._user.size else 0
        self._key_raw: pa.Array | None
        if cols.key is None:
            self._key_raw = None
        else:
            self._key_raw = table.column(cols.key).combine_chunks()
        self._value: np.ndarray | None
        if cols.value is not None:
            assert cols.bounds is not None  # values come with bounds
            self._value = clip_values(
                value_column(table.column(cols.value), cols.value), cols.bounds
            )
        else:
            self._value = None
        self._keys: pa.Array | None = None
        # key code per row over K, -1 when not in K; set_keys() sets it before any use
        self._code: np.ndarray = None  # type: ignore[assignment]
        self._memo: dict[float, Any] = {}  # centre -> pairs (cleared when rows change)

    # -- selection input and the key set ------------------------------------------------------
    def selection_input(self) -> pa.Table:
        """(user, item) columns for :func:`~userdp.partition.select_partitions`, with the
        user labels as given (as the Spark engine passes them), so that both engines' selections
        cap every user to the same keys (a keyed hash of the labels) for the same seed."""
        return pa.table(
            {"user": self._user_labels.take(pa.array(self._user)), "item": self._key_raw}
        )

    def set_keys(self, keys: pa.Array | None) -> None:
        """Restrict every later statistic to the public key array ``keys`` (None: one key)."""
        self._keys = keys
        if keys is None:
            self._code = np.zeros(self.n_rows, dtype=np.int64)
            self.n_keys = 1
            return
        import pyarrow.compute as pc

        assert self._key_raw is not None  # public keys come with a key column
        if keys.type != self._key_raw.type:
            try:
                keys = keys.cast(self._key_raw.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as err:
                raise DataError(
                    f"aggregate: the public keys ({keys.type}) do not match the key column's "
                    f"type ({self._key_raw.type})."
                ) from err
        self._keys = keys
        idx = pc.index_in(self._key_raw, value_set=keys)
        self._code = idx.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        self.n_keys = len(keys)

    def restrict(self, keep: np.ndarray | None = None) -> None:
        """Drop rows outside K (and, for hard limits, the rows ``keep`` is False on)."""
        mask = self._code >= 0
        if keep is not None:
            mask &= keep
        self._user, self._code = self._user[mask], self._code[mask]
        self._memo = {}
        if self._value is not None:
            self._value = self._value[mask]
        self.n_rows = int(mask.sum())

    def random_keep(self, salt: int, l0: int, linf: int) -> None:
        """Hard limits with keyed-hash row keys (:func:`row_keys`): as unpredictable as fresh
        random bits without the salt, and unchanged when another user is added or removed."""
        self.restrict()
        keys = row_keys(self._user_labels, self._user, self._code, salt)
        self.restrict(limit_keep(self._user, self._code, keys, l0, linf))

    # -- per-(user, key) aggregates -----------------------------------------------------------
    def _pairs(
        self, centre: float
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Distinct (user, key) pairs in K with their row counts, (centred) value sums and
        counts of rows with a value (:func:`pair_stats`)."""
        if centre not in self._memo:
            self._memo[centre] = self._compute_pairs(centre)
        return self._memo[centre]

    def _compute_pairs(
        self, centre: float
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        return pair_stats(self._user, self._code, self._value, self.n_keys, centre)

    def norms(self, centre: float) -> dict[str, np.ndarray]:
        """Per-user l2 norms of the contribution vectors (:func:`user_norms`)."""
        pu, _, n, s, m = self._pairs(centre)
        return user_norms(pu, n, s, m, self.n_users)

    def norm_histograms(self, units: dict[str, float], centre: float) -> dict[str, np.ndarray]:
        """Exact users per norm bin for each family (one user in one bin: l2 sensitivity 1)."""
        present = self.present_users()
        return norm_counts({f: r[present] for f, r in self.norms(centre).items()}, units)

    @property
    def keys(self) -> pa.Array | None:
        """The key set in the key column's type (None: one key)."""
        return self._keys

    def finish(self, table: pa.Table) -> pa.Table:
        return table

    def present_users(self) -> np.ndarray:
        return np.bincount(self._user, minlength=self.n_users) > 0

    def weighted_sums(
        self, bounds_c: dict[str, float], vectors: dict[str, tuple[str, ...]], centre: float
    ) -> dict[str, np.ndarray]:
        """Per-key sums of ``w_u x_uk`` for each vector (:func:`key_sums`)."""
        pu, pk, n, s, m = self._pairs(centre)
        return key_sums(pu, pk, n, s, m, self.norms(centre), bounds_c, vectors, self.n_keys)

    def _valued(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The rows on K that have a value (the rows of ``quantiles``): user, key code, value."""
        assert self._value is not None  # quantiles come with values
        has = ~np.isnan(self._value)
        return self._user[has], self._code[has], self._value[has]

    def quantile_sizes(self) -> tuple[np.ndarray, np.ndarray]:
        """Distinct counts of rows with a value on K of the users holding such rows, and how
        many users have each."""
        sizes = np.bincount(self._valued()[0], minlength=self.n_users)
        values, counts = np.unique(sizes[sizes > 0], return_counts=True)
        return values.astype(np.int64), counts.astype(np.int64)

    def key_quantiles(
        self,
        q: float,
        level: int,
        h: float,
        smooth: bool,
        *,
        epsilon: float,
        sensitivity: float,
        bounds: tuple[float, float],
        entropy: int,
    ) -> np.ndarray:
        """One draw per key (:func:`draw_key_quantile`), over the rows with a value."""
        user, code, value = self._valued()
        sizes = np.bincount(user, minlength=self.n_users)[user]
        order = np.argsort(code, kind="stable")
        starts = np.searchsorted(code[order], np.arange(self.n_keys + 1))
        y, s = value[order], sizes[order]
        out = np.empty(self.n_keys)
        for k in range(self.n_keys):
            a, b = starts[k], starts[k + 1]
            out[k] = draw_key_quantile(
                y[a:b],
                s[a:b],
                k,
                q,
                level=level,
                h=h,
                smooth=smooth,
                epsilon=epsilon,
                sensitivity=sensitivity,
                bounds=bounds,
                entropy=entropy,
            )
        return out


def user_weights(norms: np.ndarray, c: float) -> np.ndarray:
    """``min(1, C / ||x_u||)`` per user (1 for a zero vector), by the estimate layer's
    smooth weights with the norms as sizes (``min(h, s) / s`` with ``h = C``)."""
    r = np.asarray(norms, dtype=np.float64)
    pos = r > 0
    w = np.ones(r.size)
    if pos.any():
        w[pos] = smooth_weights(np.arange(int(pos.sum())), r[pos], c)
    return w


def choose_bound(
    noisy: np.ndarray,
    z_hist: float,
    unit: float,
    z_metric: float,
    n_keys: int,
    *,
    spread: float = 1.0,
    cap: float | None = None,
    fallback: float | None = None,
    integral: bool = False,
) -> float:
    """The bound C minimising a proxy of the total absolute error over the keys.

    ``integral``: every user's squared norm is an integer (``users``, ``count``,
    ``value_count``: sums of squared row counts), so the chosen C is lowered to the largest
    ``sqrt(k) <= C`` (at least one unit): no user's norm lies between the two, so every user
    below C keeps weight 1, those above lose the same factor the noise of every key does (a
    bin edge such as 1.19 above the norm 1 that every user of one key has cost 19% more noise
    for nothing). Post-processing of the chosen C.

    ``sum_j c_j max(0, r_j - C) (r_j / unit)^spread`` (the l1 mass heavy users lose: scaling a
    vector of l2 norm r to C removes ``(1 - C/r) ||x||_1``, and ``||x||_1 = r^2`` for the ones
    of ``users`` (``spread=1``); for counts and sums ``||x||_1`` lies between r (one key) and
    r^2 (unit entries), taken as ``r^1.5`` (``spread=0.5``), which did best on the pilot draw)
    plus ``n_keys z C sqrt(2/pi)`` (the expected absolute noise summed over the keys), over C
    on the bins' lower edges, from the noisy bin counts ``c_j`` pooled upwards
    (:func:`userdp.estimate.weighting.pool_upwards`: contiguous bins from the smallest norm up
    until a group's sum passes 4.5 sd times the square root of its bins, put on its median
    bin; a group of empty bins passes with probability 3.4e-6, so the ~190 empty bins add a
    phantom group with probability < 7e-4, and a phantom at a large norm would drag C up).
    Pooling sees the thin tail of heavy users that no single bin shows; thresholding each bin
    alone dropped it and chose C as if no heavy user existed (measured: total users error
    over ml-100k's items 213k -> 131k, counts with repeated rows 264k -> 252k at epsilon 1;
    one key per user unchanged). Post-processing of the noisy histogram.

    ``cap`` is a public upper bound on every user's norm (``sqrt(|K|)`` for ``users``: a user
    holds each released key at most once): C never exceeds it, since above it C adds noise and
    removes no bias, and the cap itself is a candidate. When the histogram is mostly noise (no
    bin passes the threshold, or the bins that pass hold fewer users than one threshold, so
    that one noise excursion would decide C) C is ``fallback`` (default: ``cap``, or ``unit``
    without a cap), a declared public value: a choice among public values made from the noisy
    histogram only, so still post-processing. Without the fallback a small data set (a few
    hundred users spread over many bins) left C at ``unit``, scaling down every user who holds
    more than one key.
    """
    threshold = 4.5 * z_hist
    if fallback is None:
        fallback = cap if cap is not None else unit
    # bins pooled from the smallest norm up until a group's sum clears threshold * sqrt(its
    # bins), on its median bin: a thin tail of heavy users no single bin shows still counts
    c = pool_upwards(np.asarray(noisy, dtype=np.float64), threshold).astype(np.float64)
    if c.sum() < 2.0 * threshold:
        return float(fallback)
    reps = bin_representatives(unit)
    cands = unit * 2.0 ** (np.arange(-8, _HIGH + 1) / 4.0)
    if cap is not None:
        cands = np.append(cands[cands < cap], cap)
    lost = np.maximum(0.0, reps[None, :] - cands[:, None]) * (reps[None, :] / unit) ** spread
    cost = lost @ c + n_keys * z_metric * cands * math.sqrt(2.0 / math.pi)
    best = float(cands[int(np.argmin(cost))])
    if integral:  # every user's squared norm is an integer: no norm lies between sqrt(k)'s
        best = unit * max(1.0, math.sqrt(math.floor((best / unit) ** 2 * (1 + 1e-12))))
    return best


#: First key of the quantiles' noise sub-streams: level j of key k draws from
#: ``(QUANTILE_STREAM, j, k)``, on the driver or on an executor alike.
QUANTILE_STREAM = 0xA99


class StreamNoise:
    """What the estimate layer's exponential mechanism asks of a noise source, from one
    sub-stream generator (picklable: Spark executors build it from the run's entropy)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng

    def uniform(self, size: int) -> np.ndarray:
        return self._rng.random(size)

    def integers(self, high: int, size: int) -> np.ndarray:
        return self._rng.integers(0, high, size, dtype=np.int64)

    def fingerprint(self) -> None:
        return None


def key_quantile(
    values: np.ndarray,
    weights: np.ndarray,
    q: float,
    *,
    epsilon: float,
    sensitivity: float,
    bounds: tuple[float, float],
    noise: Any,
) -> float:
    """One key's draw of the estimate layer's weighted exponential mechanism, on the public grid
    of ``bounds`` at the estimate layer's default resolution (the output is a grid point: a
    function of its index and public values only)."""
    from userdp.estimate.quantile import exponential_mechanism, make_grid

    grid = make_grid(bounds, None, "aggregate")
    cells = grid.codes(np.asarray(values, dtype=np.float64))
    order = np.argsort(cells, kind="stable")  # the order among equal cells does not matter
    return exponential_mechanism(
        cells[order],
        weights[order],
        q,
        epsilon=epsilon,
        sensitivity=sensitivity,
        grid=grid,
        noise=noise,
    )


def draw_key_quantile(
    values: np.ndarray,
    user_sizes: np.ndarray,
    key: int,
    q: float,
    *,
    level: int,
    h: float,
    smooth: bool,
    epsilon: float,
    sensitivity: float,
    bounds: tuple[float, float],
    entropy: int,
) -> float:
    """Key ``key``'s draw, on either engine: record weights ``min(h, s_u) / s_u`` from the
    estimate layer's :func:`smooth_weights` (``user_sizes``: each record's user's rows on K;
    a user's weights over all keys sum to ``min(h, s_u) <= h``) or 1 (hard limits), and the
    key's own noise sub-stream ``(QUANTILE_STREAM, level, key)``."""
    from userdp.privacy.noise import spawn_generator

    s = np.asarray(user_sizes, dtype=np.float64)
    if smooth and s.size:
        w = smooth_weights(np.arange(s.size), np.maximum(s, 1.0), h)
    else:
        w = np.ones(s.size)
    noise = StreamNoise(spawn_generator(entropy, (QUANTILE_STREAM, level, int(key))))
    return key_quantile(
        values, w, q, epsilon=epsilon, sensitivity=sensitivity, bounds=bounds, noise=noise
    )


def not_scalar(role: str, name: str, kind: str) -> str:
    """The one-line refusal of a user or key column of lists, maps or structs (both engines)."""
    return (
        f"aggregate: the {role} column {name!r} holds {kind} values; {role}s must be scalars "
        "(strings or integers): explode or join the lists first."
    )
