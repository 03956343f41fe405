"""``userdp audit --input``: every mechanism it names is audited on the file, or it refuses.

A check that cannot fail is a defect: ``audit --input`` once reported "audit: pass; worst ratio
0.0000" on zero comparisons for every mechanism but partition selection, since the file's
reader never set the values those mechanisms need.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from userdp.audit import MECHANISMS
from userdp.cli import main

FAST = ["--max-removals", "2", "--epsilon-runs", "0"]


def _write(path, header, rows):
    path.write_text(",".join(header) + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return path


@pytest.fixture
def ratings(tmp_path):
    """(user, item, value) rows: 30 users, 1 to 4 distinct items of 8 each, values 1..5."""
    rng = np.random.default_rng(1)
    rows = [
        (u, j, int(rng.integers(1, 6)))
        for u in range(30)
        for j in rng.choice(8, int(rng.integers(1, 5)), replace=False).tolist()
    ]
    return _write(tmp_path / "ratings.csv", ("user", "item", "value"), rows)


@pytest.fixture
def pairs(tmp_path):
    """(user, item) rows without a value column."""
    return _write(tmp_path / "pairs.csv", ("user", "item"), [(u, u % 5) for u in range(30)])


def _audit(argv, capsys):
    code = main(["audit", *argv, *FAST, "--json", "-q"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_every_group_by_mechanism_compares_statistics_on_a_ratings_file(ratings, capsys):
    code, out, err = _audit(["--input", str(ratings), "--capability", "aggregate"], capsys)
    assert code == 0, err
    report = json.loads(out)
    wanted = {n for n, m in MECHANISMS.items() if m.capability == "aggregate"}
    compared = {
        r["mechanism"] for r in report["sensitivity"] if r["norm"] != "grid" and r["compared"] > 0
    }
    assert compared == wanted
    summary = {m["mechanism"]: m for m in report["mechanisms"]}
    assert set(summary) == wanted
    assert all(m["statistics_compared"] > 0 and m["verdict"] == "pass" for m in summary.values())
    assert report["not_run"] == []


def test_a_key_column_is_read_as_the_item_column(ratings, tmp_path, capsys):
    keyed = tmp_path / "keyed.csv"
    keyed.write_text(ratings.read_text().replace("user,item,value", "user,key,value", 1))
    code, out, err = _audit(["--input", str(keyed), "--mechanism", "aggregate[count]"], capsys)
    assert code == 0, err
    (summary,) = json.loads(out)["mechanisms"]
    assert summary["mechanism"] == "aggregate[count]" and summary["statistics_compared"] > 0


def test_a_named_mechanism_that_needs_a_value_column_is_refused_in_one_line(pairs, capsys):
    code, out, err = _audit(["--input", str(pairs), "--mechanism", "weighted_mean"], capsys)
    assert code == 2
    assert out == ""
    (line,) = err.splitlines()
    assert line.startswith("userdp audit: error: ")
    assert "'weighted_mean'" in line and "needs a value column" in line


def test_a_named_mechanism_that_needs_features_is_refused_in_one_line(ratings, capsys):
    argv = ["--input", str(ratings), "--mechanism", "weighted_mean", "--mechanism", "linreg[gwa]"]
    code, _, err = _audit(argv, capsys)
    assert code == 2
    (line,) = err.splitlines()
    assert "'linreg[gwa]'" in line and "needs features" in line
    assert "'weighted_mean'" not in line  # it could run: only what cannot is named


def test_without_mechanisms_those_that_can_run_are_audited_and_the_rest_listed_as_not_run(
    ratings, capsys
):
    code, out, err = _audit(["--input", str(ratings), "--capability", "estimate"], capsys)
    assert code == 0, err
    report = json.loads(out)
    ran = {m["mechanism"] for m in report["mechanisms"]}
    assert {"weighted_mean", "weighted_quantile", "sample_limited_mean"} <= ran
    assert all(m["statistics_compared"] > 0 for m in report["mechanisms"])
    not_run = {s["mechanism"]: s["reason"] for s in report["not_run"]}
    assert set(not_run) == {
        "linreg[gwa]",
        "linreg[sample-limit]",
        "weighted_erm",
        "weighted_erm[public sizes]",
    }
    assert all(reason == "needs features" for reason in not_run.values())
    assert not ran & set(not_run)


def test_the_text_report_says_which_mechanisms_were_not_run(ratings, capsys):
    code = main(["audit", "--input", str(ratings), "--capability", "estimate", *FAST])
    out = capsys.readouterr().out
    assert code == 0
    assert any(
        line.startswith("not run: linreg[gwa]") and "needs features" in line
        for line in out.splitlines()
    )
    assert "4 not run" in out.splitlines()[-1]


def test_nothing_to_run_on_the_file_is_refused_not_passed(pairs, capsys):
    code, out, err = _audit(["--input", str(pairs), "--capability", "estimate"], capsys)
    assert code == 2
    assert out == ""
    (line,) = err.splitlines()
    assert "'weighted_mean'" in line and "(needs a value column)" in line


def test_the_declared_value_range_not_the_datas_bounds_the_audited_mean(ratings, capsys):
    """--value-range is public: the mean's declared sensitivities follow it (the first user
    moment's is the half-width, 2 for 1..5 and 10 for -10..10, whatever the data's values)."""

    def declared(value_range):
        argv = ["--input", str(ratings), "--mechanism", "weighted_mean"]
        code, out, err = _audit([*argv, "--value-range", *value_range], capsys)
        assert code == 0, err
        rows = json.loads(out)["sensitivity"]
        return {(r["statistic"], r["norm"]): r["declared_bound"] for r in rows}

    narrow, wide = declared(["1", "5"]), declared(["-10", "10"])
    assert narrow[("mean.user_first_moment", "l1")] == pytest.approx(2.0)
    assert wide[("mean.user_first_moment", "l1")] == pytest.approx(10.0)
