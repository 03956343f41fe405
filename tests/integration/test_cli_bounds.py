"""Sizes that cannot finish are refused on the command line, before any work: one line, exit 2.

Each bound is a named constant of :mod:`userdp._validation`; the library refuses the same
values (the API and the command line cannot drift apart).
"""

from __future__ import annotations

import pytest

from userdp import _validation as bounds
from userdp.cli import ExitCode, main
from userdp.exceptions import InvalidParameterError

#: (argv before the flag, the flag, its bound): every bounded flag of every command. The input
#: need not exist: the flag is refused while the arguments are parsed, before any file is read.
BOUNDED = [
    (["audit"], "--epsilon-runs", bounds.MAX_AUDIT_RUNS),
    (["audit"], "--users", bounds.MAX_AUDIT_USERS),
    (["audit"], "--novel-items", bounds.MAX_NOVEL_ITEMS),
    (["select", "missing.csv", "--epsilon", "1", "--delta", "1e-5"], "--rounds", None),
    (["recommend", "train", "missing.csv", "-o", "model.npz"], "--steps", None),
    (["recommend", "train", "missing.csv", "-o", "model.npz"], "--inner-steps", None),
    (["recommend", "train", "missing.csv", "-o", "model.npz"], "--sgd-steps", None),
]


def _bound(flag: str, bound: int | None) -> int:
    if bound is not None:
        return bound
    return bounds.MAX_SELECTION_ROUNDS if flag == "--rounds" else bounds.MAX_ITERATIONS


@pytest.mark.parametrize(("argv", "flag", "bound"), BOUNDED, ids=[f for _, f, _ in BOUNDED])
def test_a_size_above_its_bound_is_one_line_and_exit_2(argv, flag, bound, capsys):
    too_many = _bound(flag, bound) + 1
    assert main([*argv, flag, str(too_many)]) == ExitCode.USAGE
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("userdp ") and ": error: " in lines[0]
    assert flag in lines[0]
    assert f"at most {_bound(flag, bound):,}" in lines[0]


def test_the_huge_sizes_users_typed_are_refused(capsys):
    for argv in (
        ["audit", "--epsilon-runs", "1000000000000"],
        ["recommend", "train", "missing.csv", "-o", "m.npz", "--steps", "1000000000"],
    ):
        assert main(argv) == ExitCode.USAGE
        assert len(capsys.readouterr().err.splitlines()) == 1


def test_the_library_refuses_the_same_sizes():
    from userdp.audit import run_audit
    from userdp.estimate.erm import WeightedERM
    from userdp.partition.api import select_partitions
    from userdp.recommend import MatrixFactorization

    with pytest.raises(InvalidParameterError, match="'epsilon_runs'"):
        run_audit(epsilon_runs=bounds.MAX_AUDIT_RUNS + 1)
    with pytest.raises(InvalidParameterError, match="'users'"):
        run_audit(users=bounds.MAX_AUDIT_USERS + 1)
    with pytest.raises(InvalidParameterError, match="'steps'"):
        MatrixFactorization(steps=bounds.MAX_ITERATIONS + 1)._validate_params()
    with pytest.raises(InvalidParameterError, match="'steps'"):
        WeightedERM(epsilon=1.0, delta=1e-5, steps=bounds.MAX_ITERATIONS + 1)._validate_params()
    pairs = {"user": [0, 1], "item": [0, 0]}
    with pytest.raises(InvalidParameterError, match="'rounds'"):
        select_partitions(
            pairs,
            epsilon=1.0,
            delta=1e-5,
            algorithm="dp-sips",
            rounds=bounds.MAX_SELECTION_ROUNDS + 1,
        )
