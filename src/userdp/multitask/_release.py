"""Gaussian releases of the multi-task and recommender statistics, through one call.

Every noise site of :mod:`userdp.multitask` and :mod:`userdp.recommend` goes through
:func:`add_gaussian`, which names the statistic, its declared l2 sensitivity under adding or
removing one user and the labels of its first axis, so the release recorder of
``userdp.privacy.recording`` (the shared release-recording hook) can audit it.

TODO(noise-audit): ``NoiseSource.add_gaussian`` (record, then noise; safe noise on a grid) lands
on the ``noise-audit`` branch. Until it is merged, a source without it gets plain Gaussian noise
here; after the merge this module reduces to the call ``noise.add_gaussian(...)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from userdp.privacy.noise import NoiseSource

__all__ = ["add_gaussian"]


def add_gaussian(
    noise: NoiseSource,
    value: Any,
    sigma: float,
    *,
    statistic: str,
    l2: float,
    index: Any = None,
) -> np.ndarray:
    """``value + N(0, sigma^2 I)``, recorded as ``statistic`` with l2 sensitivity ``l2``.

    ``index`` labels ``value``'s first axis (item labels) or is None when the axis is fixed.
    """
    release = getattr(noise, "add_gaussian", None)
    if release is not None:
        return release(value, sigma, statistic=statistic, l2=l2, index=index)
    value = np.asarray(value, dtype=np.float64)
    return value + noise.gaussian(sigma, value.size).reshape(value.shape)
