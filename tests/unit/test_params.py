"""The one estimator convention: get_params/set_params, the declared table, CLI flags from it."""

from __future__ import annotations

import pytest

from userdp._params import ParamsMixin, public_parameters
from userdp._validation import check_arguments
from userdp.cli.options import ArgumentParser, add_parameter_flags, given_parameters
from userdp.exceptions import InvalidParameterError


class _Toy(ParamsMixin):
    _parameter_constraints = {  # noqa: RUF012
        "epsilon": {"low": 0.0, "low_open": True, "help": "Privacy budget."},
        "steps": {"int": True, "low": 1, "high": 10, "help": "Steps."},
        "method": {"choices": ("a", "b"), "help": "Method."},
        "center": {"bool": True, "help": "Centre."},
        "items": {"none": True, "cli": False, "check": lambda v, n, c: None},
    }

    def __init__(
        self,
        *,
        epsilon: float = 1.0,
        steps: int = 3,
        method: str = "a",
        center: bool = True,
        items: object = None,
    ) -> None:
        self.epsilon, self.steps, self.method, self.center, self.items = (
            epsilon,
            steps,
            method,
            center,
            items,
        )


def test_get_params_returns_every_constructor_keyword_and_set_params_round_trips() -> None:
    toy = _Toy(steps=5)
    assert toy.get_params() == {
        "center": True,
        "epsilon": 1.0,
        "items": None,
        "method": "a",
        "steps": 5,
    }
    assert toy.set_params(method="b") is toy and toy.method == "b"
    assert repr(toy) == "_Toy(method='b', steps=5)"
    with pytest.raises(InvalidParameterError, match="Invalid parameter 'budget'"):
        toy.set_params(budget=1)


def test_sklearn_clone_copies_the_parameters() -> None:
    base = pytest.importorskip("sklearn.base")
    copy = base.clone(_Toy(steps=7, method="b"))
    assert isinstance(copy, _Toy) and copy.get_params()["steps"] == 7


@pytest.mark.parametrize(
    ("name", "value", "match"),
    [
        ("epsilon", 0.0, r"'epsilon' parameter of _Toy must be a float in the range \(0, inf"),
        ("steps", 11, r"'steps' parameter of _Toy must be an int in the range \[1, 10\]"),
        ("method", "c", r"'method' parameter of _Toy must be one of 'a', 'b'"),
        ("center", 1, r"'center' parameter of _Toy must be a bool"),
    ],
)
def test_the_declared_table_refuses_each_bad_value(name: str, value: object, match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match):
        _Toy(**{name: value})._validate_params()
    with pytest.raises(InvalidParameterError, match=match.replace("_Toy", "toy")):
        check_arguments({name: value}, {name: _Toy._parameter_constraints[name]}, "toy")


def test_cli_flags_come_from_the_table_and_pass_on_only_what_was_given() -> None:
    parser = ArgumentParser(prog="toy")
    add_parameter_flags(parser, _Toy._parameter_constraints, {"steps": 3, "epsilon": 1.0})
    names = public_parameters(_Toy._parameter_constraints)
    assert "items" not in names
    args = parser.parse_args(["--steps", "4", "--no-center", "--epsilon", "-1e3"])
    assert given_parameters(args, names) == {"steps": 4, "center": False, "epsilon": -1000.0}
    assert given_parameters(parser.parse_args([]), names) == {}
    assert "Default: 3." in parser.format_help()
    with pytest.raises(SystemExit):
        parser.parse_args(["--method", "c"])
