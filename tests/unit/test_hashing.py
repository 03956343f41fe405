"""Spark-compatible xxhash64: vectorized kernels vs a pure-Python XXH64 and vs real Spark."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from userdp.data import hashing
from userdp.data.hashing import (
    SPARK_SEED,
    canonical_column,
    pair_key,
    salted_hash,
    spark_xxhash64,
    xxhash64_bytes,
    xxhash64_long,
)

# -- pure-Python XXH64 reference, written from the xxHash specification -------------------------
M64 = (1 << 64) - 1
P1, P2, P3 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9
P4, P5 = 0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5


def rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & M64


def xxh_round(acc: int, lane: int) -> int:
    return rotl((acc + lane * P2) & M64, 31) * P1 & M64


def ref_xxh64(data: bytes, seed: int) -> int:
    """XXH64 of ``data`` as a signed 64-bit int (Spark's representation)."""
    seed &= M64
    n, p = len(data), 0

    def word(at: int, width: int) -> int:
        return int.from_bytes(data[at : at + width], "little")

    if n >= 32:
        v = [(seed + P1 + P2) & M64, (seed + P2) & M64, seed, (seed - P1) & M64]
        while p + 32 <= n:
            v = [xxh_round(v[j], word(p + 8 * j, 8)) for j in range(4)]
            p += 32
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & M64
        for vj in v:
            h = ((h ^ xxh_round(0, vj)) * P1 + P4) & M64
    else:
        h = (seed + P5) & M64
    h = (h + n) & M64
    while p + 8 <= n:
        h = (rotl(h ^ xxh_round(0, word(p, 8)), 27) * P1 + P4) & M64
        p += 8
    if p + 4 <= n:
        h = (rotl(h ^ (word(p, 4) * P1 & M64), 23) * P2 + P3) & M64
        p += 4
    while p < n:
        h = rotl(h ^ (data[p] * P5 & M64), 11) * P1 & M64
        p += 1
    h ^= h >> 33
    h = h * P2 & M64
    h ^= h >> 29
    h = h * P3 & M64
    h ^= h >> 32
    return h - (1 << 64) if h >> 63 else h


def ref_long(v: int, seed: int) -> int:
    return ref_xxh64(int(v).to_bytes(8, "little", signed=True), seed)


def ref_salted(data: bytes, salt: int) -> int:
    return ref_xxh64(data, ref_long(salt, SPARK_SEED))


int64s = st.integers(-(1 << 63), (1 << 63) - 1)
# Byte strings hitting every tail path and 0-3 stripes; unicode text up to ~4*40 UTF-8 bytes.
blobs = st.binary(max_size=130)
texts = st.text(max_size=40)


# -- the reference itself -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("data", "seed", "expected"),
    [
        (b"", 0, 0xEF46DB3751D8E999),
        (b"a", 0, 0xD24EC4F1A98C6E5B),
        (b"abc", 0, 0x44BC2CF5AD770999),
    ],
    ids=["empty", "a", "abc"],
)
def test_reference_matches_published_vectors(data, seed, expected):
    assert ref_xxh64(data, seed) & M64 == expected
    assert int(xxhash64_bytes(pa.array([data]), seed)[0]) & M64 == expected


# -- longs --------------------------------------------------------------------------------------
@given(st.lists(int64s, max_size=50), int64s)
def test_long_matches_reference_scalar_seed(values, seed):
    got = xxhash64_long(np.array(values, dtype=np.int64), seed)
    assert got.dtype == np.int64
    assert got.tolist() == [ref_long(v, seed) for v in values]


@given(st.lists(st.tuples(int64s, int64s), max_size=50))
def test_long_matches_reference_array_seed(pairs):
    values = np.array([v for v, _ in pairs], dtype=np.int64)
    seeds = np.array([s for _, s in pairs], dtype=np.int64)
    assert xxhash64_long(values, seeds).tolist() == [ref_long(v, s) for v, s in pairs]


def test_long_blocks_broadcasting_and_no_warnings():
    rng = np.random.default_rng(1)
    n = 3 * (1 << 15) + 17  # several blocks plus a partial one
    values = rng.integers(-(1 << 63), (1 << 63) - 1, size=n, dtype=np.int64, endpoint=True)
    with np.errstate(all="raise"):
        got = xxhash64_long(values, 7)
    pick = rng.choice(n, size=200, replace=False)
    assert got[pick].tolist() == [ref_long(v, 7) for v in values[pick].tolist()]
    # Broadcasting: (3, 1) seeds against (4,) values -> (3, 4).
    vals, seeds = np.arange(4), np.array([[1], [2], [3]])
    grid = xxhash64_long(vals, seeds)
    assert grid.shape == (3, 4)
    assert grid.tolist() == [[ref_long(v, s) for v in range(4)] for s in (1, 2, 3)]
    # Seeds may be uint64 with the high bit set, values any integer dtype.
    big = np.array([1 << 63, (1 << 64) - 1], dtype=np.uint64)
    assert xxhash64_long(np.int32(-5) + np.zeros(2, np.int32), big).tolist() == [
        ref_long(-5, 1 << 63),
        ref_long(-5, -1),
    ]


def test_long_rejects_float_input():
    with pytest.raises(TypeError):
        xxhash64_long(np.array([1.0]), 0)
    with pytest.raises(TypeError):
        xxhash64_long(np.array([1]), np.array([1.5]))


# -- bytes --------------------------------------------------------------------------------------
@settings(max_examples=200)
@given(st.lists(blobs, max_size=30), int64s)
def test_binary_matches_reference(values, seed):
    got = xxhash64_bytes(pa.array(values, pa.binary()), seed)
    assert got.dtype == np.int64
    assert got.tolist() == [ref_xxh64(v, seed) for v in values]


@settings(max_examples=200)
@given(st.lists(texts, max_size=30), int64s)
def test_text_matches_reference(values, seed):
    expected = [ref_xxh64(v.encode("utf-8"), seed) for v in values]
    assert xxhash64_bytes(pa.array(values, pa.string()), seed).tolist() == expected
    assert xxhash64_bytes(pa.array(values, pa.large_string()), seed).tolist() == expected


@given(st.lists(st.tuples(blobs, int64s), max_size=30))
def test_bytes_array_seed_matches_reference(pairs):
    arr = pa.array([v for v, _ in pairs], pa.large_binary())
    seeds = np.array([s for _, s in pairs], dtype=np.int64)
    assert xxhash64_bytes(arr, seeds).tolist() == [ref_xxh64(v, s) for v, s in pairs]


@pytest.mark.parametrize("c_min", [None, 0, 1 << 62])
@pytest.mark.parametrize("block", [None, 7])
def test_bytes_every_length_in_one_batch(block, c_min, monkeypatch):
    # Every length 0..300 plus long strings, shuffled: exercises the stripe prefixes and all
    # 32 tail classes together, with words straddling unaligned data positions; a tiny block
    # size also exercises the blocking over strings.
    # c_min: every string through the C package (0), none (huge), or the long ones (default).
    if block is not None:
        monkeypatch.setattr(hashing, "_BYTES_BLOCK", block)
    if c_min is not None:
        monkeypatch.setattr(hashing, "_C_MIN_BYTES", c_min)
    rng = np.random.default_rng(2)
    lengths = np.concatenate([np.arange(301), [1000, 4099, 64, 64, 0]])
    rng.shuffle(lengths)
    values = [rng.bytes(int(k)) for k in lengths]
    seeds = rng.integers(-(1 << 63), (1 << 63) - 1, size=len(values), dtype=np.int64)
    arr = pa.array(values, pa.binary())
    assert xxhash64_bytes(arr, 99).tolist() == [ref_xxh64(v, 99) for v in values]
    expected = [ref_xxh64(v, s) for v, s in zip(values, seeds.tolist(), strict=True)]
    assert xxhash64_bytes(arr, seeds).tolist() == expected


def test_bytes_slices_chunks_and_nulls():
    values = ["", "é", "npm-package", "@scope/a-much-longer-package-name-over-32-bytes", "日本語"]
    arr = pa.array(values * 3)
    expected = [ref_xxh64(v.encode(), 5) for v in values * 3]
    sliced = arr.slice(4, 7)
    assert xxhash64_bytes(sliced, 5).tolist() == expected[4:11]
    chunked = pa.chunked_array([arr.slice(0, 4), arr.slice(4, 0), arr.slice(4)])
    assert xxhash64_bytes(chunked, 5).tolist() == expected
    seeds = np.arange(len(values) * 3)
    got = xxhash64_bytes(chunked, seeds)
    assert got.tolist() == [
        ref_xxh64(v.encode(), s) for v, s in zip(values * 3, seeds.tolist(), strict=True)
    ]
    # Spark leaves the running hash unchanged on nulls.
    with_nulls = pa.array(["x", None, "y"])
    assert xxhash64_bytes(with_nulls, 5).tolist() == [ref_xxh64(b"x", 5), 5, ref_xxh64(b"y", 5)]
    assert xxhash64_bytes(pa.array([], pa.string()), 5).shape == (0,)


def test_bytes_rejects_other_types():
    with pytest.raises(TypeError):
        xxhash64_bytes(pa.array([1, 2]), 0)
    with pytest.raises(TypeError):
        xxhash64_bytes(["a"], 0)


# -- dispatch, salted hash, pair key ------------------------------------------------------------
@pytest.mark.parametrize(
    "typ", [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint32(), pa.bool_()]
)
def test_integers_and_booleans_hash_as_longs(typ):
    raw = [0, 1, 1, 0] if typ == pa.bool_() else [0, 1, -1, 100, -128, 127]
    if pa.types.is_unsigned_integer(typ):
        raw = [abs(v) for v in raw]
    arr = pa.array([bool(v) for v in raw] if typ == pa.bool_() else raw, typ)
    expected = [ref_long(v, SPARK_SEED) for v in raw]
    assert spark_xxhash64(arr).tolist() == expected
    assert spark_xxhash64(arr.to_numpy(zero_copy_only=False)).tolist() == expected


def test_dispatch_bytes_dictionary_views_and_fallback():
    words = ["b", "", "ß", "b", "a-long-value-with-more-than-32-bytes!"]
    expected = [ref_xxh64(w.encode(), 3) for w in words]
    for arr in (
        pa.array(words),
        pa.array(words, pa.large_string()),
        pa.array(words).dictionary_encode(),
        # Chunks with different dictionaries.
        pa.chunked_array(
            [pa.array(words[:2]).dictionary_encode(), pa.array(words[2:]).dictionary_encode()]
        ),
        pa.array(words, pa.string_view()),
        words,  # plain Python list goes through pa.array
    ):
        assert spark_xxhash64(arr, 3).tolist() == expected
    seeds = np.arange(5)
    assert spark_xxhash64(pa.array(words).dictionary_encode(), seeds).tolist() == [
        ref_xxh64(w.encode(), s) for w, s in zip(words, range(5), strict=True)
    ]
    fixed = pa.array([b"ab", b"cd"], pa.binary(2))
    assert spark_xxhash64(fixed, 3).tolist() == [ref_xxh64(b"ab", 3), ref_xxh64(b"cd", 3)]
    # Fallback: other types hash Arrow's string rendering.
    floats = pa.array([1.5, -2.0])
    rendered = pc.cast(floats, pa.string()).to_pylist()
    assert spark_xxhash64(floats, 3).tolist() == [ref_xxh64(s.encode(), 3) for s in rendered]
    nulls = pa.array([None, 4], pa.int64())
    assert spark_xxhash64(nulls, 3).tolist() == [3, ref_long(4, 3)]


@given(st.lists(int64s, max_size=20), int64s)
def test_salted_hash_and_pair_key_chain_like_spark(values, salt):
    arr = np.array(values, dtype=np.int64)
    salted = salted_hash(arr, salt)
    assert salted.tolist() == [ref_long(v, ref_long(salt, SPARK_SEED)) for v in values]
    assert salted_hash(pa.array(arr), salt).tolist() == salted.tolist()
    users = xxhash64_long(arr)
    assert pair_key(users, salted).tolist() == [
        ref_long(i, ref_long(u, SPARK_SEED))
        for u, i in zip(users.tolist(), salted.tolist(), strict=True)
    ]


@given(st.lists(texts, max_size=20), int64s)
def test_salted_hash_of_text(values, salt):
    expected = [ref_salted(v.encode(), salt) for v in values]
    assert salted_hash(pa.array(values, pa.string()), salt).tolist() == expected


def test_module_imports_without_pyspark():
    code = (
        "import sys; sys.modules['pyspark'] = None; "
        "import userdp.data.hashing as h; print(h.spark_xxhash64(h.np.arange(2))[0])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == ref_long(0, SPARK_SEED)


# -- agreement with real Spark ------------------------------------------------------------------
# The session is the suite's shared ``spark`` fixture (tests/conftest.py).
SALT = 123_456_789


def spark_test(fn):
    """Mark a test as needing Spark (pyspark's pandas>=3 FutureWarning is irrelevant here)."""
    quiet = pytest.mark.filterwarnings("ignore:PySpark does not yet fully support:FutureWarning")
    return pytest.mark.spark(quiet(fn))


def spark_hashes(session, values, spark_type):
    """Spark's plain, salted and pair-key hashes of ``values`` (in input order)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    schema = T.StructType(
        [T.StructField("i", T.LongType(), False), T.StructField("v", spark_type, True)]
    )
    df = session.createDataFrame(list(enumerate(values)), schema)
    col = canonical_column(F.col("v"), df.schema["v"].dataType)
    plain = F.xxhash64(col)
    salted = F.xxhash64(F.lit(SALT).cast("long"), col)
    rows = df.select(
        "i",
        plain.alias("plain"),
        salted.alias("salted"),
        F.xxhash64(plain, salted).alias("pair"),
    ).collect()
    rows.sort(key=lambda r: r["i"])
    return tuple(
        np.array([r[c] for r in rows], dtype=np.int64) for c in ("plain", "salted", "pair")
    )


def check_against_spark(session, values, arrow_type, spark_type):
    arr = pa.array(values, arrow_type)
    plain, salted, pair = spark_hashes(session, values, spark_type)
    ours_plain = spark_xxhash64(arr)
    ours_salted = salted_hash(arr, SALT)
    np.testing.assert_array_equal(ours_plain, plain)
    np.testing.assert_array_equal(ours_salted, salted)
    np.testing.assert_array_equal(pair_key(ours_plain, ours_salted), pair)


@spark_test
def test_spark_longs(spark):
    from pyspark.sql import types as T

    rng = np.random.default_rng(10)
    values = rng.integers(-(1 << 63), (1 << 63) - 1, size=300, dtype=np.int64, endpoint=True)
    values = [*values.tolist(), 0, -1, 1, (1 << 63) - 1, -(1 << 63), None]
    check_against_spark(spark, values, pa.int64(), T.LongType())


@spark_test
def test_spark_ints(spark):
    from pyspark.sql import types as T

    rng = np.random.default_rng(11)
    values = rng.integers(-(1 << 31), (1 << 31) - 1, size=300, dtype=np.int32, endpoint=True)
    values = [*values.tolist(), 0, -1, None]
    check_against_spark(spark, values, pa.int32(), T.IntegerType())


def random_texts(rng, n):
    alphabet = list("abcxyz-_@/.0123456789") + list("éßøжλ日本語😀")
    out = ["", "a", "@scope/pkg"]
    for _ in range(n):
        k = int(rng.integers(0, 45))
        out.append("".join(rng.choice(alphabet, size=k).tolist()))
    return [*out, None]


@spark_test
def test_spark_strings(spark):
    from pyspark.sql import types as T

    values = random_texts(np.random.default_rng(12), 300)
    check_against_spark(spark, values, pa.string(), T.StringType())


@spark_test
def test_spark_long_strings(spark):
    """Ids beyond the C package's threshold (and one of 1 MB) hash as Spark hashes them."""
    from pyspark.sql import types as T

    rng = np.random.default_rng(14)
    lengths = [*rng.integers(400, 3000, size=40).tolist(), hashing._C_MIN_BYTES, 1 << 20]
    values = ["".join(rng.choice(list("ab日😀"), size=int(k)).tolist()) for k in lengths]
    check_against_spark(spark, [*values, None, "short"], pa.string(), T.StringType())


def test_one_huge_id_goes_to_the_c_package():
    """A 50 MB id (the NumPy kernel looped over its 1.6M stripes in Python: minutes)."""
    import xxhash

    value = b"x" * 50_000_000
    want = xxhash.xxh64_intdigest(value, SPARK_SEED)
    got = spark_xxhash64(pa.array([value], pa.binary()))
    assert got.tolist() == [want - (1 << 64) if want >> 63 else want]


@spark_test
def test_spark_binary(spark):
    from pyspark.sql import types as T

    rng = np.random.default_rng(13)
    values = [rng.bytes(int(k)) for k in rng.integers(0, 140, size=300)]
    values = [b"", *values, None]
    check_against_spark(spark, values, pa.binary(), T.BinaryType())


def test_is_integral_names_the_types_hashed_and_sorted_as_one_long():
    # the Spark runner sorts and windows an integral user on the id itself, any other on its
    # hash first; canonical_column casts exactly these to long before hashing
    pytest.importorskip("pyspark")
    from pyspark.sql import types as T

    integral = [T.ByteType(), T.ShortType(), T.IntegerType(), T.LongType(), T.BooleanType()]
    other = [
        T.FloatType(),
        T.DoubleType(),
        T.DecimalType(10, 0),
        T.StringType(),
        T.BinaryType(),
        T.DateType(),
        T.TimestampType(),
    ]
    assert all(hashing.is_integral(t) for t in integral)
    assert not any(hashing.is_integral(t) for t in other)
