"""The library's one keyed hash: a vectorized NumPy port of Spark's ``xxhash64``, bit for bit.

Every keyed hash of userdp derives from :func:`salted_hash` (a label's hash keyed by a secret
salt) and :func:`pair_key` (two hashes chained): partition selection's pair keys and user
order, aggregation's row keys, the recommenders' and multi-task row keys
(:func:`userdp.multitask.allocation.row_keys`) and the estimators' record keys. It sits in the
data layer, below every capability.

The local engine and the Spark engine must derive the same 64-bit keys from the same data (the
pair key, salted item hashes), so this module reproduces ``pyspark.sql.functions.xxhash64``:

* ``xxhash64(c1, c2, ...)`` starts from seed 42 and chains ``h = hash(c_k, seed=h)``; a null
  value leaves ``h`` unchanged. The result is a signed 64-bit long.
* ``LongType``: ``XXH64.hashLong``, i.e. standard XXH64 of the 8 little-endian bytes.
* ``StringType`` / ``BinaryType``: ``XXH64.hashUnsafeBytes`` over the UTF-8 / raw bytes, which
  is standard XXH64 (four-lane 32-byte stripes, then 8-byte words, one 4-byte word and single
  bytes, then the avalanche), as in the xxHash specification.

Integers and booleans are always cast to ``long`` on the Spark side (:func:`canonical_column`),
so Spark's 4-byte ``hashInt`` path (used by ``F.xxhash64`` on Byte/Short/Integer/Boolean columns,
which therefore hash differently from the same values as longs) is never needed. All arithmetic
is on ``uint64`` arrays, where NumPy wraps modulo 2**64 without warnings; results are returned as
``int64`` views.

Long inputs are hashed in cache-sized blocks with in-place ufuncs. Byte strings are hashed
straight from the Arrow offsets and data buffers: the 32-byte stripe loop runs once per stripe
index over the (length-sorted) strings that still have that stripe, and the tail, whose control
flow depends only on ``length % 32``, runs once per residue class, so there is no per-element
Python work. Strings of ``_C_MIN_BYTES`` or more go to the C ``xxhash`` package instead (same
standard XXH64, one call per string), so one huge id costs milliseconds, not one Python step
per 32 bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

if TYPE_CHECKING:
    from pyspark.sql import Column
    from pyspark.sql.types import DataType

__all__ = [
    "SPARK_SEED",
    "canonical_column",
    "is_integral",
    "pair_key",
    "salted_hash",
    "signed_salt",
    "spark_xxhash64",
    "xxhash64_bytes",
    "xxhash64_long",
]

SPARK_SEED = 42
"""Default seed of Spark's ``xxhash64`` SQL function."""

_MASK = (1 << 64) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_P1 = 0x9E3779B185EBCA87
_P2 = 0xC2B2AE3D27D4EB4F
_P3 = 0x165667B19E3779F9
_P4 = 0x85EBCA77C2B2AE63
_P5 = 0x27D4EB2F165667C5
_U1, _U2, _U3, _U4, _U5 = (np.uint64(p) for p in (_P1, _P2, _P3, _P4, _P5))
_SH = [np.uint64(r) for r in range(65)]  # shift amounts as uint64 scalars (no dtype promotion)
_BLOCK = 1 << 15  # elements per block in xxhash64_long: keeps the working set in L2
_BYTES_BLOCK = 1 << 16  # strings per block in xxhash64_bytes (cache-resident gathers)
#: Strings of at least this many bytes are hashed by the C ``xxhash`` package, one call each.
_C_MIN_BYTES = 512

_BYTES_TYPES = ("string", "large_string", "binary", "large_binary")

Seed = int | np.integer | np.ndarray


# -- uint64 kernels (all in place; ``tmp`` is scratch of the same shape) --------------------------
def _rotl(x: np.ndarray, r: int, tmp: np.ndarray) -> None:
    np.right_shift(x, _SH[64 - r], out=tmp)
    np.left_shift(x, _SH[r], out=x)
    np.bitwise_or(x, tmp, out=x)


def _fmix(h: np.ndarray, tmp: np.ndarray) -> None:
    """XXH64 avalanche."""
    np.right_shift(h, _SH[33], out=tmp)
    h ^= tmp
    h *= _U2
    np.right_shift(h, _SH[29], out=tmp)
    h ^= tmp
    h *= _U3
    np.right_shift(h, _SH[32], out=tmp)
    h ^= tmp


def _lane_round(acc: np.ndarray, lane: np.ndarray, tmp: np.ndarray) -> None:
    """``acc = rotl(acc + lane * P2, 31) * P1``; clobbers ``lane``."""
    lane *= _U2
    acc += lane
    _rotl(acc, 31, tmp)
    acc *= _U1


def _word_step(h: np.ndarray, k: np.ndarray, tmp: np.ndarray) -> None:
    """Consume one 8-byte word ``k`` (clobbered) into ``h``."""
    k *= _U2
    _rotl(k, 31, tmp)
    k *= _U1
    h ^= k
    _rotl(h, 27, tmp)
    h *= _U1
    h += _U4


def _merge_lane(h: np.ndarray, v: np.ndarray, tmp: np.ndarray) -> None:
    """Fold accumulator ``v`` (clobbered) into ``h`` after the stripe loop."""
    v *= _U2
    _rotl(v, 31, tmp)
    v *= _U1
    h ^= v
    h *= _U1
    h += _U4


# -- argument normalisation ---------------------------------------------------------------------
def _is_scalar(x: object) -> bool:
    return isinstance(x, int | np.integer) or (isinstance(x, np.ndarray) and x.ndim == 0)


def _as_uint64(x: object, name: str) -> np.ndarray:
    """Integer (or bool) array-like as a ``uint64`` array with two's-complement int64 bits."""
    arr = np.asarray(x)
    if arr.dtype.kind not in "biu":
        raise TypeError(f"{name} must have an integer dtype, got {arr.dtype}")
    if arr.dtype.kind != "b" and arr.dtype.itemsize == 8:
        return arr.view(np.uint64)  # int64 / uint64: same bits, no copy
    return arr.astype(np.int64).view(np.uint64)


def _scalar_seed(seed: int | np.integer | np.ndarray) -> int:
    s = int(seed)
    if not _INT64_MIN <= s <= _MASK:
        raise ValueError(f"seed {s} does not fit in 64 bits")
    return s & _MASK


def _seed_vector(seed: Seed, n: int) -> int | np.ndarray:
    """A scalar seed as a masked Python int, an array seed as a length-``n`` uint64 array."""
    if _is_scalar(seed):
        return _scalar_seed(seed)
    seeds = _as_uint64(seed, "seed")
    if seeds.ndim > 1:
        raise ValueError(f"seed array must be 1-D for Arrow input, got shape {seeds.shape}")
    return np.broadcast_to(seeds, (n,))


def _seed_slice(seed: int | np.ndarray, start: int, stop: int) -> int | np.ndarray:
    return seed if isinstance(seed, int) else seed[start:stop]


# -- longs --------------------------------------------------------------------------------------
def xxhash64_long(values: np.ndarray, seed: np.ndarray | int = SPARK_SEED) -> np.ndarray:
    """Spark's ``XXH64.hashLong(v, seed)`` for every element: XXH64 of the 8 little-endian bytes.

    ``values`` is an integer array (cast to int64 first, as Spark's ``cast("long")`` would);
    ``seed`` is an int or an integer array broadcastable against ``values``, so chained hashes
    such as :func:`pair_key` can use per-element seeds. Returns an int64 array of the broadcast
    shape. Works in cache-sized blocks with two buffers in total, so it scales to 10^8 elements.
    """
    vals = _as_uint64(values, "values")
    if _is_scalar(seed):
        init = np.uint64((_scalar_seed(seed) + _P5 + 8) & _MASK)
        shape = vals.shape
        flat_v, flat_s = vals.reshape(-1), None
    else:
        seeds = _as_uint64(seed, "seed")
        shape = np.broadcast_shapes(vals.shape, seeds.shape)
        flat_v = np.broadcast_to(vals, shape).reshape(-1)
        flat_s = np.broadcast_to(seeds, shape).reshape(-1)
    n = flat_v.size
    out = np.empty(n, dtype=np.uint64)
    tmp = np.empty(min(_BLOCK, n), dtype=np.uint64)
    p5_8 = np.uint64((_P5 + 8) & _MASK)
    for a in range(0, n, _BLOCK):
        b = min(a + _BLOCK, n)
        h, t = out[a:b], tmp[: b - a]
        np.multiply(flat_v[a:b], _U2, out=h)
        _rotl(h, 31, t)
        h *= _U1
        if flat_s is None:
            h ^= init
        else:
            np.add(flat_s[a:b], p5_8, out=t)
            h ^= t
        _rotl(h, 27, t)
        h *= _U1
        h += _U4
        _fmix(h, t)
    return out.view(np.int64).reshape(shape)


# -- byte strings -------------------------------------------------------------------------------
def _unaligned(data: np.ndarray, dtype: str) -> np.ndarray:
    """View of ``data`` whose element ``p`` is the little-endian word starting at byte ``p``."""
    width = np.dtype(dtype).itemsize
    return np.ndarray((max(data.size - width + 1, 0),), dtype=dtype, buffer=data, strides=(1,))


def _offsets_and_data(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Int64 offsets (length ``len(arr) + 1``, slice offset applied) and the uint8 data buffer."""
    _, off_buf, data_buf = arr.buffers()
    large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    off_type = np.dtype(np.int64 if large else np.int32)
    offsets = np.frombuffer(
        off_buf, dtype=off_type, count=len(arr) + 1, offset=arr.offset * off_type.itemsize
    ).astype(np.int64, copy=False)
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.empty(0, "u1")
    return offsets, data


def _hash_bytes(
    starts: np.ndarray, ends: np.ndarray, data: np.ndarray, seed: int | np.ndarray
) -> np.ndarray:
    """Unsigned XXH64 of ``data[starts[i]:ends[i]]`` for every ``i`` (the NumPy kernel)."""
    n = starts.size
    lengths = ends - starts
    u64, u32 = _unaligned(data, "<u8"), _unaligned(data, "<u4")
    scalar = isinstance(seed, int)
    h: np.ndarray
    if scalar:
        h = np.full(n, (seed + _P5) & _MASK, dtype=np.uint64)
    else:
        h = cast(np.ndarray, seed) + _U5

    # Stripe loop (length >= 32): sorted by stripe count, the strings that still have stripe s
    # form a prefix, so each round works on contiguous slices.
    big = np.flatnonzero(lengths >= 32)
    if big.size:
        nst = lengths[big] >> 5
        order = np.argsort(-nst, kind="stable")
        big, nst = big[order], nst[order]
        m = big.size
        pos = starts[big]
        if scalar:
            v = [np.full(m, (seed + c) & _MASK, dtype=np.uint64) for c in (_P1 + _P2, _P2, 0, -_P1)]
        else:
            sb = cast(np.ndarray, seed)[big]
            v = [sb + np.uint64(c & _MASK) for c in (_P1 + _P2, _P2, 0, -_P1)]
        active = np.searchsorted(-nst, -np.arange(int(nst[0])), side="left")
        tmp = np.empty(m, dtype=np.uint64)
        for k in active.tolist():
            p, t = pos[:k], tmp[:k]
            for j in range(4):
                _lane_round(v[j][:k], u64[p + 8 * j], t)
            p += 32
        acc = np.zeros(m, dtype=np.uint64)
        for vj, r in zip(v, (1, 7, 12, 18), strict=True):
            rot = vj.copy()
            _rotl(rot, r, tmp)
            acc += rot
        for vj in v:
            _merge_lane(acc, vj, tmp)
        h[big] = acc

    h += lengths.view(np.uint64)

    # Tail: 8-byte words, a 4-byte word, single bytes; the steps depend only on length % 32.
    rem = (lengths & 31).astype(np.int8)
    by_rem = np.argsort(rem, kind="stable")
    bounds = np.concatenate(([0], np.cumsum(np.bincount(rem, minlength=32))))
    for r in range(1, 32):
        a, b = int(bounds[r]), int(bounds[r + 1])
        if a == b:
            continue
        idx = by_rem[a:b]
        hg = h[idx]
        p = ends[idx] - r
        t = np.empty_like(hg)
        for _ in range(r >> 3):
            _word_step(hg, u64[p], t)
            p += 8
        if r & 4:
            k = u32[p].astype(np.uint64)
            k *= _U1
            hg ^= k
            _rotl(hg, 23, t)
            hg *= _U2
            hg += _U3
            p += 4
        for _ in range(r & 3):
            k = data[p].astype(np.uint64)
            k *= _U5
            hg ^= k
            _rotl(hg, 11, t)
            hg *= _U1
            p += 1
        h[idx] = hg

    _fmix(h, np.empty_like(h))
    return h


def _null_to_seed(out: np.ndarray, arr: pa.Array, seed: int | np.ndarray) -> np.ndarray:
    """Spark skips null values: the hash stays equal to the incoming seed."""
    if arr.null_count:
        nulls = arr.is_null().to_numpy(zero_copy_only=False)
        out[nulls] = np.uint64(seed) if isinstance(seed, int) else seed[nulls]
    return out


def _chunks(values: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    return values.chunks if isinstance(values, pa.ChunkedArray) else [values]


def _per_chunk(
    values: pa.Array | pa.ChunkedArray,
    seed: Seed,
    fn: Callable[[pa.Array, int | np.ndarray], np.ndarray],
) -> np.ndarray:
    """Apply ``fn(chunk, chunk_seed) -> uint64`` chunk by chunk and return the int64 result."""
    n = len(values)
    seeds = _seed_vector(seed, n)
    out = np.empty(n, dtype=np.uint64)
    start = 0
    for chunk in _chunks(values):
        stop = start + len(chunk)
        out[start:stop] = fn(chunk, _seed_slice(seeds, start, stop))
        start = stop
    return out.view(np.int64)


def _c_hash_bytes(
    starts: np.ndarray, ends: np.ndarray, data: np.ndarray, seed: int | np.ndarray
) -> np.ndarray:
    """Unsigned XXH64 of each ``data[starts[i]:ends[i]]`` by the C ``xxhash`` package."""
    out = np.empty(starts.size, dtype=np.uint64)
    seeds = [seed] * starts.size if isinstance(seed, int) else seed.tolist()
    for i, (a, b, s) in enumerate(zip(starts.tolist(), ends.tolist(), seeds, strict=True)):
        # an ndarray slice is a buffer; NumPy's stubs declare no __buffer__ before 3.12
        out[i] = xxhash.xxh64_intdigest(data[a:b], int(s) & _MASK)  # type: ignore[arg-type]
    return out


def _bytes_chunk(arr: pa.Array, seed: int | np.ndarray) -> np.ndarray:
    if len(arr) == 0:
        return np.empty(0, dtype=np.uint64)
    offsets, data = _offsets_and_data(arr)
    n = len(arr)
    out = np.empty(n, dtype=np.uint64)
    for a in range(0, n, _BYTES_BLOCK):  # blocks keep the random gathers cache-resident
        b = min(a + _BYTES_BLOCK, n)
        starts, ends = offsets[a:b], offsets[a + 1 : b + 1].copy()
        block_seed = _seed_slice(seed, a, b)
        # Long strings go to C: the NumPy kernel loops in Python once per 32-byte stripe of the
        # longest string (a 50 MB id took minutes); short ones stay vectorised (one C call per
        # string costs more than the NumPy kernel for millions of short ids).
        long = np.flatnonzero(ends - starts >= _C_MIN_BYTES)
        ends[long] = starts[long]  # hashed as empty by NumPy, replaced below
        out[a:b] = _hash_bytes(starts, ends, data, block_seed)
        if long.size:
            seeds = block_seed if isinstance(block_seed, int) else block_seed[long]
            out[a + long] = _c_hash_bytes(starts[long], offsets[a + 1 + long], data, seeds)
    return _null_to_seed(out, arr, seed)


def xxhash64_bytes(
    values: pa.Array | pa.ChunkedArray, seed: int | np.ndarray = SPARK_SEED
) -> np.ndarray:
    """Spark's ``XXH64.hashUnsafeBytes`` (standard XXH64) of every string/binary element.

    ``values`` is a string, large_string, binary or large_binary Arrow array (strings hash their
    UTF-8 bytes, as Spark's ``StringType`` does). ``seed`` is an int or a length-``len(values)``
    integer array. Works on the Arrow offsets and data buffers without per-element Python work.
    Null elements hash to the seed, as in Spark. Returns int64.
    """
    typ = getattr(values, "type", type(values).__name__)
    if not isinstance(values, pa.Array | pa.ChunkedArray) or str(typ) not in _BYTES_TYPES:
        raise TypeError(f"xxhash64_bytes needs a string or binary Arrow array, got {typ}")
    return _per_chunk(values, seed, _bytes_chunk)


# -- Arrow dispatch -----------------------------------------------------------------------------
def _long_chunk(arr: pa.Array, seed: int | np.ndarray) -> np.ndarray:
    longs = pc.cast(arr, pa.int64()).fill_null(0).to_numpy()
    return _null_to_seed(xxhash64_long(longs, seed).view(np.uint64), arr, seed)


def _hash_chunk(arr: pa.Array, seed: int | np.ndarray) -> np.ndarray:
    t = arr.type
    if pa.types.is_null(t):
        return np.full(len(arr), seed, dtype=np.uint64) if isinstance(seed, int) else seed.copy()
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return _long_chunk(arr, seed)
    if str(t) in _BYTES_TYPES:
        return _bytes_chunk(arr, seed)
    if pa.types.is_dictionary(t):
        if isinstance(seed, int) and arr.null_count == 0:
            # Hash each distinct value once, then gather by index.
            return _hash_chunk(arr.dictionary, seed)[arr.indices.to_numpy()]
        return _hash_chunk(arr.dictionary_decode(), seed)
    if pa.types.is_string_view(t):
        return _hash_chunk(pc.cast(arr, pa.large_string()), seed)
    if pa.types.is_binary_view(t) or pa.types.is_fixed_size_binary(t):
        return _hash_chunk(pc.cast(arr, pa.large_binary()), seed)
    try:
        as_text = pc.cast(arr, pa.large_string())
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid) as exc:
        raise TypeError(f"cannot hash Arrow type {t}: no cast to string") from exc
    return _hash_chunk(as_text, seed)


def spark_xxhash64(
    values: pa.Array | pa.ChunkedArray | np.ndarray, seed: int | np.ndarray = SPARK_SEED
) -> np.ndarray:
    """What ``F.xxhash64(canonical_column(col))`` computes in Spark, as an int64 array.

    Dispatch on the Arrow type mirrors :func:`canonical_column`: integers and booleans are cast
    to int64 and hashed with :func:`xxhash64_long`; string/binary types hash their bytes with
    :func:`xxhash64_bytes`; dictionaries are decoded (with a scalar seed, each distinct value is
    hashed once); anything else is cast to string by Arrow and its UTF-8 is hashed. That fallback
    may NOT agree with Spark's ``cast("string")``: floats render as Arrow "1" / "1e+20" vs
    Spark "1.0" / "1.0E20", timestamps as "2020-01-02 03:04:05.000000" vs "2020-01-02 03:04:05"
    (dates agree), so give such keys an integer or string type if both engines must agree.
    Nulls hash to the seed, as in Spark. A NumPy integer/bool array is hashed directly as longs;
    other inputs go through ``pa.array``.
    """
    if isinstance(values, np.ndarray) and values.dtype.kind in "biu":
        return xxhash64_long(values, seed)
    if not isinstance(values, pa.Array | pa.ChunkedArray):
        values = pa.array(values)
    return _per_chunk(values, seed, _hash_chunk)


def canonical_column(col: Column | str, data_type: DataType) -> Column:
    """The Spark column to feed to ``F.xxhash64`` so that it matches :func:`spark_xxhash64`.

    Byte/Short/Integer/Long and Boolean are cast to ``long`` (Spark would otherwise use its
    4-byte ``hashInt`` for ints); String and Binary are hashed as they are; any other type is
    cast to ``string``. pyspark is imported lazily: it is an optional dependency.
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if isinstance(col, str):
        col = F.col(col)
    if is_integral(data_type):
        return col.cast("long")
    if isinstance(data_type, T.StringType | T.BinaryType):
        return col
    return col.cast("string")


def is_integral(data_type: DataType) -> bool:
    """Whether a Spark type is Byte/Short/Integer/Long or Boolean: a value that fits 64 bits
    as a ``long`` (hashed as one by :func:`canonical_column`, sorted by radix by Spark)."""
    from pyspark.sql import types as T

    return isinstance(
        data_type, T.ByteType | T.ShortType | T.IntegerType | T.LongType | T.BooleanType
    )


def signed_salt(salt: int) -> int:
    """``salt`` modulo 2**64 as a signed 64-bit integer, the range :func:`salted_hash` takes
    (a :class:`~userdp.privacy.noise.NoiseSource` salt is any 64-bit value)."""
    return ((int(salt) + (1 << 63)) % (1 << 64)) - (1 << 63)


def salted_hash(values: pa.Array | pa.ChunkedArray | np.ndarray, salt: int) -> np.ndarray:
    """Spark's ``F.xxhash64(F.lit(salt).cast("long"), canonical_column(col))`` as int64.

    The salt is hashed first (``seed = hashLong(salt, 42)``) and seeds the value's hash, so
    different salts give independent-looking keys for the same values.
    """
    salt = int(salt)
    if not _INT64_MIN <= salt <= _INT64_MAX:
        raise ValueError(f"salt {salt} is not a 64-bit signed integer")
    seed = int(xxhash64_long(np.array([salt], dtype=np.int64), SPARK_SEED)[0])
    return spark_xxhash64(values, seed)


def pair_key(h_user: np.ndarray, h_item: np.ndarray) -> np.ndarray:
    """Spark's ``F.xxhash64(h_user, h_item)`` on two long columns, as int64.

    Equals ``hashLong(h_item, seed=hashLong(h_user, 42))``, element-wise (broadcasting).
    """
    return xxhash64_long(h_item, xxhash64_long(h_user, SPARK_SEED))
