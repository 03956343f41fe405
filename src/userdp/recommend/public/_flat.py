"""The parameter layout both item encoders share: named blocks in ONE flat float64 vector (so
optimisers and clipping act on a single array), the checks of ``forward``/``vjp`` arguments,
and the caches ``forward`` hands to ``vjp`` (see :mod:`userdp.recommend.public.encoders`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import sparse

from userdp.exceptions import InvalidParameterError

__all__ = ["FeatureCache", "FlatParameters", "IdCache"]


@dataclass(frozen=True)
class FeatureCache:
    items: np.ndarray | None
    rows: tuple[sparse.csr_matrix, ...]  # normalised M_f[items], one per family
    hidden: np.ndarray  # h, shape (n, hidden_dim)
    output: np.ndarray  # v, shape (n, dim)


@dataclass(frozen=True)
class IdCache:
    items: np.ndarray | None


class FlatParameters:
    """Layout of named blocks in one flat float64 vector, and the checks shared by encoders."""

    _layout: dict[str, tuple[int, tuple[int, int] | tuple[int]]]
    _n_params: int
    _n_items: int
    _dim: int

    def _set_layout(self, shapes: dict[str, tuple[int, int] | tuple[int]]) -> None:
        self._layout, start = {}, 0
        for name, shape in shapes.items():
            self._layout[name] = (start, shape)
            start += math.prod(shape)
        self._n_params = start

    @property
    def n_items(self) -> int:
        """Number of items the encoder embeds."""
        return self._n_items

    @property
    def dim(self) -> int:
        """Output embedding dimension ``d``."""
        return self._dim

    @property
    def n_params(self) -> int:
        """Length of the flat parameter vector."""
        return self._n_params

    def blocks(self, params: np.ndarray) -> dict[str, np.ndarray]:
        """Named, reshaped views into ``params`` (writing through them changes ``params``).

        Parameters
        ----------
        params : ndarray, shape (n_params,)
            A flat parameter vector, e.g. from :meth:`init_params`.

        Returns
        -------
        dict of str to ndarray
            One view per block, in layout order.

        Raises
        ------
        InvalidParameterError
            If ``params`` is not a 1-D ndarray of length ``n_params``.
        """
        caller = f"{type(self).__name__}.blocks"
        if not isinstance(params, np.ndarray) or params.shape != (self._n_params,):
            got = params.shape if isinstance(params, np.ndarray) else type(params).__name__
            raise InvalidParameterError(
                f"The 'params' parameter of {caller} must be a 1-D ndarray of length "
                f"{self._n_params}. Got {got!r} instead."
            )
        return {
            name: params[start : start + math.prod(shape)].reshape(shape)
            for name, (start, shape) in self._layout.items()
        }

    def _params(self, params: object, caller: str) -> np.ndarray:
        arr = np.asarray(params)
        if arr.shape != (self._n_params,) or arr.dtype.kind not in "fiu":
            raise InvalidParameterError(
                f"The 'params' parameter of {caller} must be a 1-D float array of length "
                f"{self._n_params}. Got dtype {arr.dtype} and shape {arr.shape!r} instead."
            )
        return arr.astype(np.float64, copy=False)

    def _items(self, items: object, caller: str) -> np.ndarray | None:
        if items is None:
            return None
        arr = np.asarray(items)
        expected = (
            f"The 'items' parameter of {caller} must be None or a 1-D array of ints in the "
            f"range [0, {self._n_items - 1}]."
        )
        if arr.ndim == 1 and arr.size == 0:
            return np.empty(0, dtype=np.intp)
        if arr.ndim != 1 or arr.dtype.kind not in "iu":
            raise InvalidParameterError(
                f"{expected} Got dtype {arr.dtype} and shape {arr.shape!r} instead."
            )
        outside = np.flatnonzero((arr < 0) | (arr >= self._n_items))
        if outside.size:
            k = int(outside[0])
            raise InvalidParameterError(f"{expected} Got {int(arr[k])!r} at position {k} instead.")
        return arr.astype(np.intp, copy=False)

    def _grad_out(self, grad_out: object, n_rows: int, caller: str) -> np.ndarray:
        arr = np.asarray(grad_out)
        if arr.shape != (n_rows, self._dim) or arr.dtype.kind not in "fiu":
            raise InvalidParameterError(
                f"The 'grad_out' parameter of {caller} must be a float array of shape "
                f"({n_rows}, {self._dim}), one row per item given. Got dtype {arr.dtype} and "
                f"shape {arr.shape!r} instead."
            )
        return arr.astype(np.float64, copy=False)

    def _cache(self, cache: Any, kind: type[Any], items: np.ndarray | None, caller: str) -> None:
        if not isinstance(cache, kind):
            raise InvalidParameterError(
                f"The 'cache' parameter of {caller} must be None or the cache returned by "
                f"{type(self).__name__}.forward. Got {type(cache).__name__} instead."
            )
        same = (cache.items is None and items is None) or (
            cache.items is not None and items is not None and np.array_equal(cache.items, items)
        )
        if not same:
            raise InvalidParameterError(
                f"The 'cache' parameter of {caller} was computed by forward for other items; "
                "pass the same 'items' to forward and vjp."
            )
