"""``userdp aggregate --engine spark`` writes what ``--engine local`` writes, for a seed and a
public key list."""

from __future__ import annotations

import pyarrow.csv as pacsv
import pytest

from userdp.cli import main

pytestmark = pytest.mark.spark


def test_spark_cli_equals_local_with_public_keys(spark, tmp_path, capsys):
    rows = ["u,page,t"] + [f"{u},p{(u * 7) % 5},{u % 9}" for u in range(400)]
    rows += [f"{u},p{(u * 3) % 5},{u % 4}" for u in range(0, 400, 3)]
    (tmp_path / "visits.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "keys.txt").write_text("p0\np1\np2\np9\n")
    outs = {}
    for engine in ("local", "spark"):
        out = tmp_path / f"{engine}.csv"
        argv = [
            "aggregate",
            str(tmp_path / "visits.csv"),
            "--user-column",
            "u",
            "--key-column",
            "page",
            "--value-column",
            "t",
            "--bounds",
            "0",
            "8",
            "--metrics",
            "users,count,sum,mean",
            "--keys",
            str(tmp_path / "keys.txt"),
            "--epsilon",
            "1",
            "--delta",
            "1e-5",
            "--seed",
            "3",
            "--engine",
            engine,
            "-o",
            str(out),
        ]
        assert main(argv) == 0, capsys.readouterr().err
        outs[engine] = pacsv.read_csv(out).to_pandas()
    assert outs["local"]["key"].tolist() == ["p0", "p1", "p2", "p9"]
    assert outs["local"].round(6).equals(outs["spark"].round(6))
