"""``userdp estimate mean|quantile|linreg``: private statistics of a table through ``main``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from userdp.cli import ExitCode, main
from userdp.data.synthetic import zipf_regression, zipf_user_values


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("estimate")
    v = zipf_user_values(800, seed=3)
    users = pa.array([f"u{u}" for u in v.users])
    pacsv.write_csv(pa.table({"customer": users, "amount": v.values}), d / "values.csv")
    r = zipf_regression(1_500, 3, noise=1.0, seed=2)
    cols = {"user": pa.array([f"u{u}" for u in r.users])}
    cols.update({name: r.X[:, j] for j, name in enumerate("abc")})
    cols["rating"] = r.y
    pacsv.write_csv(pa.table(cols), d / "regression.csv")
    (d / "coef.json").write_text(json.dumps([*r.coef.tolist(), list(r.label_range)]))
    return {"dir": d, "values": d / "values.csv", "regression": d / "regression.csv"}


VALUES = ["--user-column", "customer", "--value-column", "amount", "--bounds", "0", "10"]


def _table(out: str) -> dict[str, float]:
    rows = [line.split() for line in out.strip().splitlines()]
    return {name: float(value) for name, value in rows}


def test_mean_prints_one_private_estimate_near_the_truth(files, capsys):
    assert (
        main(["estimate", "mean", str(files["values"]), *VALUES, "--epsilon", "50", "--seed", "1"])
        == ExitCode.OK
    )
    out, err = capsys.readouterr()
    got = _table(out)
    assert set(got) == {"mean"}
    assert abs(got["mean"] - 20 / 7) < 0.05  # 10 * Beta(2, 5) has mean 20/7
    assert "weighted" in err and "epsilon=50" in err
    assert " s." not in err and "not private" not in err  # no timing unless -v


def test_timing_only_with_verbose_and_labelled_not_private(files, capsys):
    assert (
        main(["estimate", "mean", str(files["values"]), *VALUES, "--epsilon", "1", "-v"])
        == ExitCode.OK
    )
    err = capsys.readouterr().err
    (line,) = [ln for ln in err.splitlines() if ln.endswith(" s.")]
    assert "not private" in line


@pytest.mark.parametrize(
    "flags",
    [
        [],
        ["--public-user-sizes"],
        ["--method", "sample-limit"],
        ["--threshold", "4", "--noise-variance", "2.5"],
    ],
)
def test_every_mean_mode_runs_and_stays_in_the_bounds(files, capsys, flags):
    args = ["estimate", "mean", str(files["values"]), *VALUES, "--epsilon", "1", *flags]
    assert main(args) == ExitCode.OK
    assert 0.0 <= _table(capsys.readouterr().out)["mean"] <= 10.0


def test_quantiles_as_json_follow_the_requested_order(files, capsys):
    args = [
        "estimate",
        "quantile",
        str(files["values"]),
        *VALUES,
        "--quantiles",
        "0.5,0.9",
        "--epsilon",
        "20",
        "--seed",
        "3",
        "--json",
    ]
    assert main(args) == ExitCode.OK
    record = json.loads(capsys.readouterr().out)
    assert record["statistic"] == "quantile" and record["epsilon"] == pytest.approx(20.0)
    q = record["estimates"]
    assert list(q) == ["q0.5", "q0.9"]
    # Quantiles of 10 * Beta(2, 5): median 2.64, 90th percentile 5.10.
    assert abs(q["q0.5"] - 2.64) < 0.3 and abs(q["q0.9"] - 5.10) < 0.5


def test_quantiles_are_points_of_the_declared_resolution(files, capsys):
    args = [
        "estimate",
        "quantile",
        str(files["values"]),
        *VALUES,
        "--quantiles",
        "0.25,0.5",
        "--epsilon",
        "2",
        "--resolution",
        "0.25",
        "--json",
    ]
    assert main(args) == ExitCode.OK
    q = json.loads(capsys.readouterr().out)["estimates"]
    assert all(v * 4 == round(v * 4) and 0 <= v <= 10 for v in q.values())


def test_linreg_recovers_the_coefficients_at_a_large_epsilon(files, capsys):
    *coef, (low, high) = json.loads((files["dir"] / "coef.json").read_text())
    args = [
        "estimate",
        "linreg",
        str(files["regression"]),
        "--label-column",
        "rating",
        "--label-range",
        str(low),
        str(high),
        "--epsilon",
        "1e5",
        "--seed",
        "0",
    ]
    assert main(args) == ExitCode.OK
    got = _table(capsys.readouterr().out)
    assert list(got) == ["intercept", "a", "b", "c"]  # every other column is a feature
    np.testing.assert_allclose([got[k] for k in "abc"], coef, atol=1.0)
    assert abs(got["intercept"]) < 1.0


def test_linreg_sample_limit_with_named_features_and_no_intercept(files, capsys):
    args = [
        "estimate",
        "linreg",
        str(files["regression"]),
        "--label-column",
        "rating",
        "--feature-columns",
        "a,c",
        "--no-intercept",
        "--label-range",
        "-400",
        "400",
        "--method",
        "sample-limit",
        "--threshold",
        "max",
        "--epsilon",
        "1",
    ]
    assert main(args) == ExitCode.OK
    assert list(_table(capsys.readouterr().out)) == ["a", "c"]


def test_output_json_is_written_once_and_not_overwritten(files, capsys, tmp_path):
    out = tmp_path / "mean.json"
    args = ["estimate", "mean", str(files["values"]), *VALUES, "--epsilon", "1", "-o", str(out)]
    assert main(args) == ExitCode.OK
    record = json.loads(out.read_text())
    assert record["statistic"] == "mean" and record["delta"] == 0.0
    assert capsys.readouterr().out == ""
    assert main(args) == ExitCode.USAGE
    assert "already exists" in capsys.readouterr().err
    assert main([*args, "--overwrite"]) == ExitCode.OK


V = "--user-column customer --value-column amount --bounds 0 10"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ("mean {values} --user-column customer --value-column nope --bounds 0 1", "column 'nope'"),
        # parameter values are checked by the library, in its one format
        ("mean {values} --user-column customer --bounds 5 1", "--bounds must be"),
        (f"quantile {{values}} {V} --quantiles 1.5", "--quantiles must be"),
        (f"quantile {{values}} {V} --selection-share 1", "--selection-share must be"),
        (f"quantile {{values}} {V} --resolution 0", "--resolution must be"),
        (f"quantile {{values}} {V} --resolution 1e-300", "too fine"),
        (f"mean {{values}} {V} --method sample-limit --threshold 0", "--threshold must be"),
        (
            "linreg {regression} --label-column rating --feature-columns a,zz --label-range 0 1",
            "column 'zz'",
        ),
        (f"mean {{missing}} {V}", "no such file"),
    ],
)
def test_bad_input_gives_one_error_line_and_exit_code_2(files, capsys, argv, message):
    paths = {
        "values": files["values"],
        "regression": files["regression"],
        "missing": files["dir"] / "missing.csv",
    }
    argv = argv.format(**paths).split()
    assert main(["estimate", *argv, "--epsilon", "1"]) == ExitCode.USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


@pytest.mark.parametrize(
    "argv",
    [
        f"mean {{missing}} {V} --epsilon 1 --selection-share 1.5",
        f"quantile {{missing}} {V} --epsilon 1 --quantiles 0",
        "linreg {missing} --label-range 0 1 --epsilon 1 --threshold 3",
        "linreg {missing} --label-range 0 1 --epsilon 0",
    ],
)
def test_bad_parameters_are_refused_before_the_input_is_read(files, capsys, argv):
    # The library checks its table before any data; the command asks it to before reading.
    argv = argv.format(missing=files["dir"] / "missing.csv").split()
    assert main(["estimate", *argv]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert ("must be" in err or "only used with" in err) and "missing.csv" not in err


def test_epsilon_is_required(files, capsys):
    assert main(["estimate", "mean", str(files["values"]), *VALUES]) == ExitCode.USAGE
    assert "--epsilon" in capsys.readouterr().err
