"""Helpers shared by the test folders (importable as ``helpers``: pytest puts ``tests/`` on the
path for ``tests/conftest.py``).

- :class:`Untouchable` / :data:`NO_DATA`: data that raise when read, for checks that must happen
  before any read;
- :func:`invalid_values` and :func:`message`: bad values of a declared parameter rule and the
  one error format;
- :func:`recording_noise` and :class:`Tape`: noise sources that record every Gaussian release
  (and replay a first run's outputs), for sensitivity and budget-split tests.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from userdp.privacy import NoiseSource


class Untouchable:
    """Data that raise if anything reads them: a release refused earlier never touches them."""

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise RuntimeError("the data were read")

    def __len__(self) -> int:
        raise RuntimeError("the data were read")

    def __iter__(self) -> Any:
        raise RuntimeError("the data were read")


NO_DATA = Untouchable()


def invalid_values(
    rule: Mapping[str, Any], custom: Mapping[str, list[Any]] | None = None, name: str = ""
) -> list[Any]:
    """Values that break ``rule`` (like scikit-learn's ``generate_invalid_param_val``).

    A rule stated as a custom ``check`` takes its bad values from ``custom[name]`` when given,
    else the string ``"invalid"``.
    """
    if "check" in rule:
        return list(custom[name]) if custom and name in custom else ["invalid"]
    if "choices" in rule:
        return ["not-a-choice", 1]
    if rule.get("bool"):
        return ["yes", 1]
    if rule.get("int"):
        bad: list[Any] = [2.5, "1"]
        if rule.get("low") is not None:
            bad.append(rule["low"] - 1)
        if rule.get("high") is not None:
            bad.append(rule["high"] + 1)
        return bad
    low, high = rule.get("low", -math.inf), rule.get("high", math.inf)
    bad = [math.nan, "1.0"]
    if math.isfinite(low):
        bad.append(low if rule.get("low_open") else low - abs(low) - 1.0)
    if math.isfinite(high):
        bad.append(high if rule.get("high_open") else high + abs(high) + 1.0)
    elif rule.get("high_open"):
        bad.append(math.inf)
    return bad


def message(name: str, caller: str) -> str:
    """The one format, as a regex: "The 'x' parameter of f must be ... Got ... instead" (an
    element of a pair reads 'x[0]'; a sentence of detail may follow)."""
    return rf"^The '{name}(\[\d\])?' parameter of {re.escape(caller)} must be .+ Got .+ instead"


def recording_noise(log: list[tuple[str, float, float]]) -> type[NoiseSource]:
    """A NoiseSource class that logs (statistic, sigma, l2) of every Gaussian it adds."""

    class Recording(NoiseSource):
        def add_gaussian(self, value, sigma, *, statistic, l2, index=None, linf=None):
            log.append((statistic, float(sigma), float(l2)))
            return super().add_gaussian(
                value, sigma, statistic=statistic, l2=l2, index=index, linf=linf
            )

    return Recording


@dataclass
class Release:
    """One Gaussian release as a recording noise source saw it."""

    statistic: str
    value: np.ndarray
    l2: float
    output: np.ndarray


class Tape:
    """Factory of recording noise sources; the second run replays the first run's noisy
    outputs, so both runs see the same released history (the conditioning of adaptive
    composition)."""

    def __init__(self) -> None:
        self.runs: list[list[Release]] = []

    def __call__(self, seed: int | None = None) -> NoiseSource:
        replay = self.runs[0] if self.runs else None
        log: list[Release] = []
        self.runs.append(log)

        class Recording(NoiseSource):
            def add_gaussian(self, value, sigma, *, statistic, l2, index=None, linf=None):
                value = np.array(value, dtype=np.float64)
                if replay is None:
                    out = value + self.gaussian(sigma, value.size).reshape(value.shape)
                else:
                    out = replay[len(log)].output.copy()
                log.append(Release(statistic, value, float(l2), out.copy()))
                return out

        return Recording(seed)
