"""``userdp sql``: the table it writes, EXPLAIN, its errors (one line, exit 2)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from userdp.cli import main


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(0)
    n = 12_000
    visits = pa.table(
        {
            "uid": rng.integers(0, 3000, n),
            "page": rng.integers(0, 10, n),
            "secs": rng.uniform(0, 100, n),
        }
    )
    pq.write_table(visits, tmp_path / "visits.parquet")
    (tmp_path / "pages.csv").write_text(
        "page,section\n" + "".join(f"{p},s{p % 2}\n" for p in range(10))
    )
    return tmp_path


QUERY = (
    "SELECT p.section, COUNT(DISTINCT v.uid) AS users, AVG(CLAMP(v.secs, 0, 100)) AS secs "
    "FROM visits v JOIN pages p ON v.page = p.page WHERE v.secs > 1 GROUP BY p.section "
    "ORDER BY p.section"
)


def argv(files, *more):
    return [
        "sql",
        QUERY,
        "--table",
        f"visits={files / 'visits.parquet'}",
        "--table",
        f"pages={files / 'pages.csv'}",
        "--public",
        "pages",
        "--privacy-unit",
        "uid",
        "--epsilon",
        "1",
        "--delta",
        "1e-5",
        *more,
    ]


def test_writes_the_table_in_each_format(files, capsys):
    for suffix in ("csv", "parquet", "json"):
        out = files / f"out.{suffix}"
        assert main(argv(files, "--seed", "0", "-o", str(out))) == 0, capsys.readouterr().err
        if suffix == "csv":
            table = pacsv.read_csv(out)
        elif suffix == "parquet":
            table = pq.read_table(out)
        else:
            table = pa.Table.from_pylist(json.loads(out.read_text()))
        assert table.column_names == ["section", "users", "secs"]
        assert table.column("section").to_pylist() == ["s0", "s1"]
    err = capsys.readouterr().err
    assert "userdp sql: 2 rows" in err


def test_stdout_csv_and_json(files, capsys):
    assert main(argv(files, "--seed", "1")) == 0
    assert capsys.readouterr().out.splitlines()[0] == '"section","users","secs"'
    assert main(argv(files, "--seed", "1", "--json")) == 0
    release = json.loads(capsys.readouterr().out)
    assert release["epsilon"] <= 1 + 1e-9 and len(release["rows"]) == 2


def test_an_existing_output_needs_overwrite_and_stays_intact(files, capsys):
    out = files / "out.csv"
    out.write_text("keep\n")
    assert main(argv(files, "-o", str(out))) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert out.read_text() == "keep\n"
    assert main(argv(files, "-o", str(out), "--overwrite")) == 0
    assert out.read_text().startswith('"section",')


def test_explain_prints_the_plan_and_writes_nothing(files, capsys):
    out = files / "plan.csv"
    (files / "visits.parquet").unlink()  # nothing is read: the file may be absent
    assert main(argv(files, "--explain", "-o", str(out))) == 0
    printed = capsys.readouterr().out
    assert "userdp sql plan" in printed and "noise per cell" in printed
    assert "table pages AS p: public" in printed
    assert not out.exists()


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("SELECT page, secs, COUNT(*) FROM visits GROUP BY page", "column 'secs'"),
        ("SELECT page, SUM(secs) FROM visits GROUP BY page", "public range"),
        ("SELECT page, COUNT(*) OVER () FROM visits", "window function"),
        ("SELECT COUNT(*) FROM nowhere", "'nowhere', which is not in tables"),
        (
            "SELECT page, COUNT(*) FROM visits GROUP BY page HAVING COUNT(DISTINCT uid) > 1",
            "HAVING",
        ),
        ("SELECT COUNT(*) FROM visits WHERE nope = 1", "nope"),
        ("SELEC COUNT(*) FROM visits", "error"),
    ],
)
def test_a_refused_query_is_one_line_and_exit_2(files, capsys, query, named):
    args = argv(files)
    args[1] = query
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("userdp sql: error: ") and named in err
    assert err.count("\n") == 1


def test_bad_flags_are_one_line_and_exit_2(files, capsys):
    cases = [
        [*argv(files)[:2], "--table", "visits"],
        argv(files, "-o", str(files / "out.txt")),
        [*argv(files)[:-4], "--epsilon", "-1", "--delta", "1e-5"],
        [*argv(files)[:2], "--table", f"visits={files / 'visits.parquet'}", "--epsilon", "1",
         "--delta", "1e-5"],
    ]  # fmt: skip
    for case in cases:
        assert main(case) == 2
        err = capsys.readouterr().err
        assert err.startswith("userdp sql: error: ") and err.count("\n") == 1, err


def test_bigquerys_form_runs_as_is(files, capsys):
    query = (
        "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=1, delta=1e-5, privacy_unit_column=uid) "
        "page, AVG(secs, contribution_bounds_per_group => (0, 100)) AS s FROM visits GROUP BY page"
    )
    args = ["sql", query, "--table", f"visits={files / 'visits.parquet'}", "--seed", "2"]
    assert main(args) == 0, capsys.readouterr().err
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == '"page","s"' and len(lines) == 11
