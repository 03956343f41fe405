"""Progress that counts the work: rows as the readers read them, rounds as a selection releases
them, and the bars of ``userdp select`` and ``userdp estimate`` built on those counts. A count
is only told: the table, every error and every seeded release are the same without it."""

from __future__ import annotations

import gzip
import io
import json
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from userdp.cli import main
from userdp.cli import options as cli_options
from userdp.cli import progress as cli_progress
from userdp.data import Contributions, read
from userdp.data import io as data_io
from userdp.data.io import read_table
from userdp.exceptions import DataError, InvalidParameterError
from userdp.partition.api import select_partitions

N_USERS = 1500


class _Terminal(io.StringIO):
    """A stderr that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def _pairs() -> list[tuple[str, str]]:
    """Every user holds "the", "a" and a rare item of its own: only "the" and "a" pass."""
    return [(f"u{u}", w) for u in range(N_USERS) for w in ("the", "a", f"rare{u}")]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("counted")
    rows = _pairs()
    out = {name: d / name for name in ("pairs.csv", "pairs.tsv", "noheader.csv", "pairs.csv.gz")}
    out["pairs.csv"].write_text("user,item\n" + "".join(f"{u},{i}\n" for u, i in rows))
    out["pairs.tsv"].write_text("user\titem\n" + "".join(f"{u}\t{i}\n" for u, i in rows))
    out["noheader.csv"].write_text("".join(f"{u},{i},x\n" for u, i in rows))
    out["pairs.csv.gz"].write_bytes(gzip.compress(out["pairs.csv"].read_bytes()))
    with open(d / "pairs.jsonl", "w") as f:
        f.writelines(json.dumps({"user": u, "item": i}) + "\n" for u, i in rows)
    out["pairs.jsonl"] = d / "pairs.jsonl"
    table = pa.table({"user": [u for u, _ in rows], "item": [i for _, i in rows]})
    pq.write_table(table, d / "pairs.parquet", row_group_size=1000)  # 5 row groups
    out["pairs.parquet"] = d / "pairs.parquet"
    (d / "parts").mkdir()
    pq.write_table(table.slice(0, 2000), d / "parts" / "part-0.parquet")
    pq.write_table(table.slice(2000), d / "parts" / "part-1.parquet")
    out["parts"] = d / "parts"
    # an extra column typed from the first block (integers) that a later block breaks
    lines = [f"u{k % 50},i{k % 7},{k}\n" for k in range(3000)] + ["u1,i1,not a number\n"]
    out["extra.csv"] = d / "extra.csv"
    out["extra.csv"].write_text("user,item,when\n" + "".join(lines))
    return out


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """CSV blocks of 4 KiB instead of 64 MiB, so a small file is read in many batches."""
    options = pacsv.ReadOptions

    def small(**kw: object) -> pacsv.ReadOptions:
        return options(**{**kw, "block_size": 1 << 12})

    monkeypatch.setattr(data_io.pacsv, "ReadOptions", small)


def _counted(path: Path, **kw: object) -> tuple[pa.Table, list[int]]:
    told: list[int] = []
    return read_table(path, progress=told.append, **kw), told


# -- the readers -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "kw"),
    [
        ("pairs.csv", {}),
        ("pairs.tsv", {}),
        ("noheader.csv", {"header": False}),
        ("pairs.csv.gz", {}),
        ("extra.csv", {}),
    ],
)
def test_a_csv_is_counted_block_by_block_and_reads_the_same_table(files, small_blocks, name, kw):
    plain = read_table(files[name], **kw)
    table, told = _counted(files[name], **kw)
    assert len(told) > 1  # one count per block
    assert all(n > 0 for n in told)
    assert sum(told) == plain.num_rows == table.num_rows
    assert table.equals(plain)
    assert table.schema.equals(plain.schema, check_metadata=True)


def test_an_extra_column_that_a_later_block_retypes_is_typed_from_the_whole_file(
    files, small_blocks
):
    # the streaming reader types 'when' as integers from the first block; the last row is
    # text, so the file is read again whole, as without progress: the column is text
    table, told = _counted(files["extra.csv"])
    assert table.schema.field("when").type == pa.string()
    assert sum(told) == 3001


def test_a_parquet_file_is_counted_by_row_group(files):
    plain = read_table(files["pairs.parquet"])
    table, told = _counted(files["pairs.parquet"])
    assert told == [1000, 1000, 1000, 1000, 500]
    assert table.equals(plain)
    assert table.schema.equals(plain.schema, check_metadata=True)


@pytest.mark.parametrize("name", ["pairs.jsonl", "parts"])
def test_formats_read_at_once_are_counted_once(files, name):
    plain = read_table(files[name])
    table, told = _counted(files[name])
    assert told == [plain.num_rows] == [3 * N_USERS]
    assert table.equals(plain)


def test_read_passes_the_counts_and_gives_the_same_contributions(files, small_blocks):
    told: list[int] = []
    counted = read(files["pairs.csv"], progress=told.append)
    plain = read(files["pairs.csv"])
    assert sum(told) == counted.n_pairs == plain.n_pairs == 3 * N_USERS
    assert np.array_equal(counted.users, plain.users)
    assert np.array_equal(counted.items, plain.items)
    assert counted.item_labels.equals(plain.item_labels)
    assert counted.user_labels.equals(plain.user_labels)


def _error(path: Path, **kw: object) -> tuple[type, str]:
    with pytest.raises(Exception) as info:  # any error, as long as both reads raise the same
        read_table(path, **kw)
    return type(info.value), str(info.value)


@pytest.mark.parametrize(
    ("content", "kw"),
    [
        (b"", {}),  # empty
        (b"user,item\n" + b"u,i\n" * 2000 + b"u,i,extra\n", {}),  # a bad row in a later block
        (b"user,item\n" + b"u,i\n" * 2000 + b"u,\xff\xfe\n", {}),  # not UTF-8 further on
        (b"only\n" + b"x\n" * 10, {"header": False}),  # one column, no header
    ],
)
def test_a_counted_read_fails_with_the_same_message(tmp_path, small_blocks, content, kw):
    path = tmp_path / "bad.csv"
    path.write_bytes(content)
    told: list[int] = []
    assert _error(path, progress=told.append, **kw) == _error(path, **kw)


UNTERMINATED = b'user,item\nu,"open\n' + b"u,i\n" * 2000


def test_an_unterminated_quote_in_one_block_fails_alike(tmp_path):
    path = tmp_path / "quote.csv"
    path.write_bytes(UNTERMINATED)
    counted = _error(path, progress=[].append)
    assert counted == _error(path)
    assert "spans several lines" in counted[1]


def test_a_counted_read_refuses_an_unterminated_quote_across_blocks(tmp_path, small_blocks):
    path = tmp_path / "quote.csv"
    path.write_bytes(UNTERMINATED)
    with pytest.raises(DataError, match="line 2 spans several lines"):
        read_table(path, progress=[].append)


@pytest.mark.xfail(
    strict=True,
    reason="Arrow's threaded read_csv drops the rows of a block whose quote never closes, "
    "without an error, when the file spans several blocks (64 MiB each)",
)
def test_an_uncounted_read_refuses_an_unterminated_quote_across_blocks(tmp_path, small_blocks):
    path = tmp_path / "quote.csv"
    path.write_bytes(UNTERMINATED)
    with pytest.raises(DataError, match="spans several lines"):
        read_table(path)


def test_a_header_only_file_counts_no_row(tmp_path):
    path = tmp_path / "empty.csv"
    path.write_text("user,item\n")
    table, told = _counted(path)
    assert table.num_rows == 0 and sum(told) == 0


def test_progress_must_be_callable(files):
    with pytest.raises(InvalidParameterError, match="'progress' parameter of read"):
        read_table(files["pairs.csv"], progress=3)  # type: ignore[arg-type]


# -- the rounds --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("algorithm", "options", "rounds"),
    [
        ("mad2r", {}, 4),
        ("mad2r", {"pooled": False}, 2),
        ("dp-sips", {"rounds": 3}, 3),
        ("basic", {}, 1),
        ("mad", {"max_items_per_user": "auto"}, 1),
    ],
)
def test_the_rounds_are_counted_and_the_seeded_release_is_the_same(algorithm, options, rounds):
    data = Contributions.from_pairs(_pairs())
    told: list[tuple[int, int]] = []
    kw = {"epsilon": 1.0, "delta": 1e-5, "algorithm": algorithm, "seed": 7, **options}
    counted = select_partitions(data, progress=lambda d, t: told.append((d, t)), **kw)
    plain = select_partitions(data, **kw)
    assert told == [(r, rounds) for r in range(rounds + 1)]
    assert counted.to_dict() == plain.to_dict()
    assert sorted(counted.items) == sorted(plain.items)


def test_a_sequential_baseline_is_not_counted():
    told: list[tuple[int, int]] = []
    select_partitions(
        _pairs(),
        epsilon=1.0,
        delta=1e-5,
        algorithm="policy-gaussian",
        seed=1,
        progress=lambda d, t: told.append((d, t)),
    )
    assert told == []


def test_select_progress_must_be_callable():
    with pytest.raises(InvalidParameterError, match="'progress' parameter of select_partitions"):
        select_partitions(_pairs(), epsilon=1.0, delta=1e-5, progress="yes")  # type: ignore[arg-type]


# -- the bars ----------------------------------------------------------------------------------
def test_phases_off_the_terminal_write_nothing_and_give_no_callback(monkeypatch):
    piped = io.StringIO()
    monkeypatch.setattr(sys, "stderr", piped)
    phases = cli_options.Phases(enabled=cli_options.Progress.wanted(False, 10**12))
    assert not phases.enabled
    assert phases.adding() is None and phases.counter("select", "rounds") is None
    with phases.stage("read"):
        phases.start("read", unit="rows")
        phases.add(10)
    phases.close()
    assert piped.getvalue() == ""


def test_phases_count_rows_then_rounds_on_a_terminal(monkeypatch):
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    phases = cli_options.Phases(enabled=cli_options.Progress.wanted(False, 10**12))
    try:
        phases.start("read", unit="rows")
        rows = phases.adding()
        assert rows is not None
        rows(1000)
        rows(234)
        assert (phases.bar.n, phases.bar.total) == (1234, None)
        rounds = phases.counter("select", "rounds")
        assert rounds is not None
        rounds(0, 4)
        assert (phases.name, phases.bar.n, phases.bar.total) == ("select", 0, 4)
        rounds(3, 4)
        assert phases.bar.n == 3
        phases.stop()
        assert phases.bar is None
    finally:
        phases.close()
    text = terminal.getvalue()
    assert "read: 0 rows [" in text and "0/4 [" in text


def _bar_on(monkeypatch: pytest.MonkeyPatch) -> _Terminal:
    """stderr is a terminal and every input is large enough for a bar."""
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setattr(cli_progress, "PROGRESS_MIN_BYTES", 0)
    return terminal


SELECT = ["--epsilon", "1", "--delta", "1e-5", "--seed", "11", "--json"]


@pytest.mark.parametrize("name", ["pairs.csv", "pairs.parquet"])
def test_a_seeded_select_is_the_same_with_the_bar_and_without(files, monkeypatch, capsys, name):
    monkeypatch.setattr(cli_progress, "PROGRESS_MIN_BYTES", 0)
    assert main(["select", str(files[name]), *SELECT]) == 0
    plain, err = capsys.readouterr()
    assert "\r" not in err and "rows" not in err and "round" not in err  # not a terminal
    terminal = _bar_on(monkeypatch)
    assert main(["select", str(files[name]), *SELECT]) == 0
    counted, _ = capsys.readouterr()
    assert counted == plain  # bit for bit: the same items, the same noise
    assert json.loads(plain)["items"] == ["a", "the"]
    drawn = terminal.getvalue()
    assert "read: 0 rows [" in drawn and "encode [" in drawn and "0/4 [" in drawn


def test_a_seeded_select_to_a_file_is_the_same_with_the_bar(files, monkeypatch, tmp_path):
    args = ["select", str(files["pairs.csv"]), *SELECT[:-1], "--algorithm", "dp-sips"]
    assert main([*args, "-o", str(tmp_path / "plain.parquet")]) == 0
    _bar_on(monkeypatch)
    assert main([*args, "-o", str(tmp_path / "counted.parquet")]) == 0
    plain = (tmp_path / "plain.parquet").read_bytes()
    assert (tmp_path / "counted.parquet").read_bytes() == plain


def test_select_prints_only_its_summary_when_stderr_is_not_a_terminal(files, monkeypatch, capsys):
    monkeypatch.setattr(cli_progress, "PROGRESS_MIN_BYTES", 0)
    assert main(["select", str(files["pairs.csv"]), *SELECT[:-1]]) == 0
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "userdp select: selected 2 items with mad2r at epsilon=1, delta=1e-05."
    ]


@pytest.fixture(scope="module")
def values(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(0)
    n = 4000
    users = rng.integers(0, 300, n)
    x = rng.normal(size=(n, 2))
    label = x @ np.array([3.0, -2.0]) + rng.normal(size=n)
    path = tmp_path_factory.mktemp("values") / "values.csv"
    lines = [f"u{u},{a},{b},{y}\n" for u, (a, b), y in zip(users, x, label, strict=True)]
    path.write_text("user,x1,x2,label\n" + "".join(lines))
    return path


@pytest.mark.parametrize(
    "args",
    [
        ["mean", "--value-column", "label", "--bounds", "-10", "10"],
        ["quantile", "--value-column", "label", "--bounds", "-10", "10", "--quantiles", "0.5"],
        ["linreg", "--label-column", "label", "--label-range", "-10", "10"],
    ],
)
def test_a_seeded_estimate_is_the_same_with_the_bar_and_without(values, monkeypatch, capsys, args):
    command = ["estimate", args[0], str(values), *args[1:], "--epsilon", "1", "--seed", "5"]
    monkeypatch.setattr(cli_progress, "PROGRESS_MIN_BYTES", 0)
    assert main([*command, "--json"]) == 0
    plain, err = capsys.readouterr()
    assert "\r" not in err and "rows" not in err  # not a terminal: the summary line only
    assert len(err.splitlines()) == 1 and err.startswith(f"userdp estimate {args[0]}: ")
    terminal = _bar_on(monkeypatch)
    assert main([*command, "--json"]) == 0
    counted, _ = capsys.readouterr()
    assert counted == plain
    drawn = terminal.getvalue()
    assert "read: 0 rows [" in drawn and "estimate [" in drawn
    if args[0] == "linreg":  # the feature columns are found by a first read
        assert "scan: 0 rows [" in drawn


def test_a_seeded_aggregate_is_the_same_with_the_bar_and_counts_its_rows(
    files, monkeypatch, capsys
):
    """The local GROUP BY's bar counts the rows as they are read (a long read is not a silent
    stage), then times its phases; the release is the same bit for bit."""
    args = ["aggregate", str(files["pairs.csv"]), "--key-column", "item", *SELECT]
    monkeypatch.setattr(cli_progress, "PROGRESS_MIN_BYTES", 0)
    assert main(args) == 0
    plain, err = capsys.readouterr()
    assert "\r" not in err and "rows" not in err  # not a terminal
    terminal = _bar_on(monkeypatch)
    assert main(args) == 0
    counted, _ = capsys.readouterr()
    assert counted == plain
    drawn = terminal.getvalue()
    assert "read: 0 rows [" in drawn and "aggregate [" in drawn


def test_a_seeded_sql_query_is_the_same_with_the_bar_and_shows_its_phases(
    files, monkeypatch, capsys
):
    """``userdp sql`` drew nothing while DuckDB ran the row query and the GROUP BY released;
    now the row query's percent, then the release's elapsed time; the output is the same."""
    query = "SELECT item, COUNT(DISTINCT user) AS users FROM t GROUP BY item"
    args = ["sql", query, "--table", f"t={files['pairs.csv']}", "--privacy-unit", "user"]
    args += ["--epsilon", "1", "--delta", "1e-5", "--seed", "11"]
    monkeypatch.setattr(cli_progress, "PROGRESS_MIN_BYTES", 0)
    assert main(args) == 0
    plain, err = capsys.readouterr()
    assert "\r" not in err and "%" not in err  # not a terminal
    terminal = _bar_on(monkeypatch)
    assert main(args) == 0
    counted, _ = capsys.readouterr()
    assert counted == plain and plain.startswith('"item","users"')
    drawn = terminal.getvalue()
    assert "row query (DuckDB):" in drawn and "/100 [" in drawn and "release [" in drawn
    assert drawn.index("row query") < drawn.index("release [")
