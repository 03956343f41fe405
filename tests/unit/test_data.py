"""Contributions construction, validation and the file readers."""

from __future__ import annotations

import gzip
import json
import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from userdp.data import Contributions, Ratings, as_contributions, read, read_table
from userdp.exceptions import DataError, InvalidParameterError

PAIRS = [("ann", "x"), ("ann", "y"), ("bob", "x"), ("ann", "x"), ("cy", "z"), ("bob", "x")]
DISTINCT = {("ann", "x"), ("ann", "y"), ("bob", "x"), ("cy", "z")}


def pair_set(c: Contributions) -> set[tuple[object, object]]:
    """Decode every stored pair back to original (user, item) values."""
    users = c.user_labels.take(pa.array(c.users.astype(np.int64))).to_pylist()
    items = c.item_values(c.items).to_pylist()
    return set(zip(users, items, strict=True))


def check_invariants(c: Contributions) -> None:
    assert c.users.dtype == np.int32 and c.items.dtype == np.int32
    assert np.all(np.diff(c.users) >= 0), "pairs must be sorted by user"
    assert c.n_pairs == len(pair_set(c)), "pairs must be distinct"
    assert set(np.unique(c.users).tolist()) == set(range(c.n_users)), "user codes dense"
    assert c.degrees().sum() == c.n_pairs


# -- constructors -------------------------------------------------------------------------------
def test_from_pairs_drops_and_counts_duplicates():
    c = Contributions.from_pairs(PAIRS)
    check_invariants(c)
    assert pair_set(c) == DISTINCT
    assert (c.n_users, c.n_items, c.n_pairs, c.duplicates_dropped) == (3, 3, 4, 2)
    assert "n_pairs=4" in repr(c)


@pytest.mark.parametrize(
    "make",
    [
        lambda u, i: (np.array(u), np.array(i)),
        lambda u, i: (pa.array(u), pa.array(i)),
        lambda u, i: (pa.chunked_array([u[:2], u[2:]]), pa.chunked_array([i[:3], i[3:]])),
        lambda u, i: (pd.Series(u), pd.Series(i)),
        lambda u, i: (pd.Series(u, dtype="category"), pd.Series(i, dtype="string")),
        lambda u, i: (list(u), list(i)),
    ],
    ids=["numpy", "pyarrow", "chunked", "pandas", "pandas-category", "lists"],
)
def test_from_columns_accepts_every_column_type(make):
    users, items = zip(*PAIRS, strict=True)
    c = Contributions.from_columns(*make(list(users), list(items)))
    check_invariants(c)
    assert pair_set(c) == DISTINCT
    assert c.duplicates_dropped == 2


@pytest.mark.parametrize(
    "make",
    [
        lambda u, i: pa.table({"user": u, "item": i}),
        lambda u, i: pd.DataFrame({"user": u, "item": i}),
        lambda u, i: {"user": u, "item": i},
    ],
    ids=["pyarrow", "pandas", "dict"],
)
def test_from_table_and_as_contributions_read_tables(make):
    users, items = (list(x) for x in zip(*PAIRS, strict=True))
    for c in (Contributions.from_table(make(users, items)), as_contributions(make(users, items))):
        check_invariants(c)
        assert pair_set(c) == DISTINCT


def test_from_table_uses_named_columns():
    df = pd.DataFrame({"doc": [1, 1, 2], "word": ["a", "b", "a"], "other": [0, 0, 0]})
    c = as_contributions(df, user_column="doc", item_column="word")
    assert pair_set(c) == {(1, "a"), (1, "b"), (2, "a")}


def test_from_codes_dedups_sorts_and_redensifies_sparse_users():
    users = np.array([40, 7, 40, 7, 40, 1000], dtype=np.int64)
    items = np.array([3, 0, 1, 0, 3, 2], dtype=np.int64)
    c = Contributions.from_codes(users, items)
    check_invariants(c)
    assert c.duplicates_dropped == 2
    assert c.n_users == 3
    # Labels of the re-densified codes keep the original user codes.
    assert c.user_labels.to_pylist() == [7, 40, 1000]
    assert pair_set(c) == {(7, 0), (40, 1), (40, 3), (1000, 2)}
    assert c.n_items == 4  # codes 0..max item
    assert c.users.tolist() == [0, 1, 1, 2]


def test_from_codes_keeps_given_labels_for_sparse_users():
    labels = pa.array(["u0", "u1", "u2", "u3"])
    c = Contributions.from_codes([3, 1, 3], [0, 0, 1], user_labels=labels, n_users=4)
    assert c.user_labels.to_pylist() == ["u1", "u3"]
    assert pair_set(c) == {("u1", 0), ("u3", 0), ("u3", 1)}


def test_from_codes_respects_n_items_for_absent_items():
    c = Contributions.from_codes([0, 1], [0, 2], n_items=10)
    assert c.n_items == 10
    assert c.item_values(np.array([9])).to_pylist() == [9]


@pytest.mark.parametrize(
    ("users", "items", "kwargs", "match"),
    [
        ([0, -1], [0, 1], {}, "Column 'user' codes must lie in"),
        ([0, 1], [0, -3], {}, "Column 'item' codes must lie in"),
        ([0, 1], [0], {}, "same length; got 2 and 1"),
        ([0.5, 1.0], [0, 1], {}, "Column 'user' must hold integer codes"),
        ([[0, 1]], [[0, 1]], {}, "Column 'user' must be one-dimensional"),
        ([0, 5], [0, 1], {"n_users": 3}, "smaller than the largest codes"),
        ([0, 1], [0, 1], {"item_labels": pa.array(["a"])}, "shorter than the number of codes"),
    ],
)
def test_from_codes_rejects_bad_codes(users, items, kwargs, match):
    with pytest.raises(DataError, match=match):
        Contributions.from_codes(np.asarray(users), np.asarray(items), **kwargs)


def test_as_contributions_dispatches_numpy_arrays():
    codes = np.array([[5, 1], [5, 2], [9, 1], [5, 1]])
    c = as_contributions(codes)
    check_invariants(c)
    assert pair_set(c) == {(5, 1), (5, 2), (9, 1)}
    assert c.duplicates_dropped == 1
    strs = np.array([["a", "x"], ["b", "x"]])
    assert pair_set(as_contributions(strs)) == {("a", "x"), ("b", "x")}
    with pytest.raises(DataError, match="shape \\(n_pairs, 2\\)"):
        as_contributions(np.zeros((3, 3), dtype=int))


def test_as_contributions_dispatches_column_tuples_iterables_and_itself():
    c = as_contributions((["a", "a", "b"], [1, 2, 1]))
    assert pair_set(c) == {("a", 1), ("a", 2), ("b", 1)}
    assert as_contributions(c) is c
    gen = ((u, u % 3) for u in range(6))
    assert pair_set(as_contributions(gen)) == {(u, u % 3) for u in range(6)}
    with pytest.raises(DataError, match=r"Pass a file path to userdp\.data\.read"):
        as_contributions("pairs.csv")
    with pytest.raises(DataError, match=r"Cannot read .* type int"):
        as_contributions(42)


def test_items_keep_their_original_type():
    ints = Contributions.from_columns(["a", "b"], [10, 20])
    assert ints.item_values(ints.items).to_pylist() == [10, 20]
    assert all(type(v) is int for v in ints.item_values(ints.items).to_pylist())
    strs = Contributions.from_columns([1, 2], ["10", "20"])
    assert all(type(v) is str for v in strs.item_values(strs.items).to_pylist())


# -- validation ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("users", "items", "match"),
    [
        (["a", None, "b"], ["x", "y", "z"], "Column 'user' has 1 null value.*first at row 1"),
        (["a", "b"], ["x", None], "Column 'item' has 1 null value.*first at row 1"),
        ([1.0, float("nan")], ["x", "y"], "Column 'user' has"),
        (np.array([1.0, 2.0, np.nan]), ["x", "y", "z"], "Column 'user' has NaN.*first at row 2"),
        (["a", "b"], ["x"], "same length; got 2 and 1"),
        (["a", 1], ["x", "y"], "Column 'user' cannot be read as one typed column"),
    ],
)
def test_from_columns_rejects_bad_columns_with_a_message_naming_them(users, items, match):
    with pytest.raises(DataError, match=match):
        Contributions.from_columns(users, items)


def test_pandas_nulls_are_rejected():
    df = pd.DataFrame({"user": ["a", "b", "c"], "item": ["x", None, "z"]})
    with pytest.raises(DataError, match="Column 'item' has 1 null"):
        as_contributions(df)
    df = pd.DataFrame({"user": [1.0, np.nan, 3.0], "item": ["x", "y", "z"]})
    with pytest.raises(DataError, match="Column 'user' has"):
        as_contributions(df)


def test_missing_column_is_named():
    with pytest.raises(DataError, match="Column 'item' not found; the input has columns"):
        as_contributions(pd.DataFrame({"user": [1], "word": ["x"]}))
    with pytest.raises(DataError, match="Column 'uid' not found"):
        as_contributions(pa.table({"user": [1], "item": [2]}), user_column="uid")


def test_from_pairs_rejects_rows_that_are_not_pairs():
    with pytest.raises(DataError, match="Row 1 is not a \\(user, item\\) pair"):
        Contributions.from_pairs([("a", "x"), ("b",), ("c", "z")])


# -- io -----------------------------------------------------------------------------------------
TOKENS = ["null", "NA", "none", "true", "N/A", "nan", "FALSE"]


def _token_rows():
    return [(f"u{k % 3}", tok) for k, tok in enumerate(TOKENS)]


def _expected_tokens():
    return {(u, t) for u, t in _token_rows()}


def test_read_csv_keeps_null_like_tokens_as_strings(tmp_path):
    p = tmp_path / "pairs.csv"
    p.write_text("user,item\n" + "".join(f"{u},{t}\n" for u, t in _token_rows()))
    c = read(p)
    assert pair_set(c) == _expected_tokens()
    assert all(isinstance(v, str) for v in c.item_values(c.items).to_pylist())


def test_read_csv_refuses_empty_string_ids(tmp_path):
    """Empty ids were accepted silently; now refused with the column and row."""
    p = tmp_path / "pairs.csv"
    p.write_text('user,item\na,""\nb,x\n')
    with pytest.raises(DataError, match=r"Column 'item' has an empty value \(first at row 0\)"):
        read(p)


def test_read_tsv_with_and_without_header(tmp_path):
    rows = _token_rows()
    with_header = tmp_path / "pairs.tsv"
    with_header.write_text("user\titem\n" + "".join(f"{u}\t{t}\n" for u, t in rows))
    assert pair_set(read(with_header)) == _expected_tokens()
    no_header = tmp_path / "pairs.tab"
    no_header.write_text("".join(f"{u}\t{t}\n" for u, t in rows))
    c = read(no_header, header=False)
    assert pair_set(c) == _expected_tokens()


def test_read_headerless_file_with_extra_columns_keeps_the_first_two(tmp_path):
    p = tmp_path / "pairs.tsv"
    p.write_text("a\tx\t1\nb\ty\t2\n")
    assert pair_set(read(p, header=False)) == {("a", "x"), ("b", "y")}


def test_read_tsv_without_header_keeps_null_like_tokens(tmp_path):
    p = tmp_path / "pairs.tsv"
    p.write_text("".join(f"{u}\t{t}\n" for u, t in _token_rows()))
    assert pair_set(read(p, header=False)) == _expected_tokens()


def test_read_csv_named_columns(tmp_path):
    p = tmp_path / "docs.csv"
    p.write_text("doc,word,n\n1,a,3\n1,b,4\n2,a,5\n")
    c = read(p, user_column="doc", item_column="word")
    # Text files are read as strings (no type inference), so "1" stays the string "1".
    assert pair_set(c) == {("1", "a"), ("1", "b"), ("2", "a")}
    with pytest.raises(DataError, match="Column 'user' not found"):
        read(p)


def test_read_gzip_compressed_csv(tmp_path):
    p = tmp_path / "pairs.csv.gz"
    with gzip.open(p, "wt") as fh:
        fh.write("user,item\n" + "".join(f"{u},{t}\n" for u, t in _token_rows()))
    assert pair_set(read(p)) == _expected_tokens()


def test_read_parquet_file_and_directory_of_parts(tmp_path):
    rows = _token_rows()
    table = pa.table({"user": [u for u, _ in rows], "item": [t for _, t in rows]})
    f = tmp_path / "pairs.parquet"
    pq.write_table(table, f)
    assert pair_set(read(f)) == _expected_tokens()
    d = tmp_path / "parts"
    d.mkdir()
    pq.write_table(table.slice(0, 3), d / "part-0.parquet")
    pq.write_table(table.slice(3), d / "part-1.parquet")
    assert pair_set(read(d)) == _expected_tokens()


def test_read_parquet_reads_only_the_needed_columns(tmp_path):
    f = tmp_path / "wide.parquet"
    pq.write_table(pa.table({"user": [1, 2], "item": ["a", "b"], "blob": ["x", "y"]}), f)
    assert read_table(f).column_names == ["user", "item"]


def test_read_jsonl(tmp_path):
    p = tmp_path / "pairs.jsonl"
    p.write_text(
        '{"user": 1, "item": "null"}\n{"user": 2, "item": "NA"}\n{"user": 1, "item": "x"}\n'
    )
    assert pair_set(read(p)) == {(1, "null"), (2, "NA"), (1, "x")}


def test_read_jsonl_with_a_json_null_is_rejected(tmp_path):
    p = tmp_path / "pairs.jsonl"
    p.write_text('{"user": 1, "item": "a"}\n{"user": 2, "item": null}\n')
    with pytest.raises(DataError, match="Column 'item' has 1 null"):
        read(p)


def test_read_format_override(tmp_path):
    p = tmp_path / "pairs.data"
    p.write_text("user\titem\na\tnull\n")
    with pytest.raises(InvalidParameterError, match="Cannot tell the format"):
        read(p)
    assert pair_set(read(p, format="tsv")) == {("a", "null")}
    with pytest.raises(InvalidParameterError, match="'format' parameter of read"):
        read(p, format="xlsx")


def test_read_missing_file_is_a_data_error(tmp_path):
    with pytest.raises(DataError, match="no such file or directory"):
        read(tmp_path / "absent.csv")


def test_read_malformed_file_is_a_data_error(tmp_path):
    p = tmp_path / "bad.parquet"
    p.write_bytes(b"this is not parquet")
    with pytest.raises(DataError, match=r"Cannot read .* as parquet"):
        read(p)


def test_read_csv_keeps_numeric_looking_tokens_distinct(tmp_path):
    p = tmp_path / "pairs.csv"
    p.write_text("user,item\na,1\nb,01\nc,1.0\n")
    assert read(p).n_items == 3


def test_read_csv_keeps_nan_tokens_as_strings(tmp_path):
    p = tmp_path / "pairs.csv"
    p.write_text("user,item\na,nan\nb,NaN\n")
    assert sorted(read(p).item_values(np.arange(2)).to_pylist()) == ["NaN", "nan"]


def test_chunked_columns_are_encoded_across_chunks_with_one_code_book():
    # Parquet row groups arrive as chunks; one value in several chunks must get one code.
    users = pa.chunked_array([["u1", "u2"], ["u1", "u3"], ["u2"]])
    items = pa.chunked_array([["x", "y"], ["y", "x"], ["z"]])
    c = Contributions.from_columns(users, items)
    got = set(
        zip(
            c.user_labels.take(pa.array(c.users)).to_pylist(),
            c.item_values(c.items).to_pylist(),
            strict=True,
        )
    )
    assert got == {("u1", "x"), ("u2", "y"), ("u1", "y"), ("u3", "x"), ("u2", "z")}
    assert c.n_items == 3 and c.n_users == 3


def test_dictionary_columns_are_decoded_before_encoding():
    items = pa.chunked_array(
        [pa.array(["b", "a"]).dictionary_encode(), pa.array(["a", "c"]).dictionary_encode()]
    )
    c = Contributions.from_columns(pa.array([1, 1, 2, 2]), items)
    assert sorted(c.item_values(c.items).to_pylist()) == ["a", "a", "b", "c"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes (POSIX)")
@pytest.mark.parametrize("name", ["pairs.csv", "pairs.csv.gz", "pairs.jsonl", "pairs.parquet"])
def test_a_named_pipe_reads_like_the_file_it_carries(tmp_path, name):
    """Arrow seeks in what it reads and a pipe cannot ("lseek failed"): a pipe is read once."""
    import threading

    from userdp.data.io import read_table

    table = pa.table({"user": ["u1", "u2", "u2"], "item": ["a", "a", "b"]})
    plain = tmp_path / ("plain" + name[len("pairs") :])
    if name.endswith(".parquet"):
        pq.write_table(table, plain)
    elif name.endswith(".jsonl"):
        plain.write_text("".join(json.dumps(row) + "\n" for row in table.to_pylist()))
    else:
        text = b"user,item\nu1,a\nu2,a\nu2,b\n"
        plain.write_bytes(gzip.compress(text) if name.endswith(".gz") else text)
    pipe = tmp_path / name
    os.mkfifo(pipe)
    writer = threading.Thread(target=lambda: pipe.write_bytes(plain.read_bytes()))
    writer.start()
    try:
        got = read_table(pipe)
    finally:
        writer.join(timeout=30)
    assert got.select(["user", "item"]).to_pylist() == read_table(plain).to_pylist()


def test_zero_pairs_are_a_data_set_of_no_user_but_zero_ratings_are_refused():
    """A refusal that only the empty input gets tells it apart from one user's input (a
    release): zero pairs are a valid Contributions of no user. The recommenders' Ratings
    still need ratings to train on."""
    for c in (
        Contributions.from_codes(np.array([], dtype=np.int64), np.array([], dtype=np.int64)),
        Contributions.from_columns([], []),
        Contributions.from_table(
            pa.table({"user": pa.array([], pa.string()), "item": pa.array([], pa.string())})
        ),
    ):
        assert (c.n_users, c.n_items, c.users.size) == (0, 0, 0)
    with pytest.raises(DataError, match="no ratings"):
        Ratings.from_columns([], [], [])
