"""The id-only item encoder (one free embedding per item, as in DP-ALS): the special case of
:class:`~userdp.recommend.public.encoders.PublicFeatureEncoder` with the identity as the only
feature family (Krichene et al. 2023b, the id-only baseline)."""

from __future__ import annotations

import math

import numpy as np
from scipy import sparse

from userdp._validation import check_int, check_real
from userdp.recommend.public._flat import FlatParameters, IdCache

__all__ = ["IdEncoder"]


class IdEncoder(FlatParameters):
    """The id-only item encoder: one free embedding per item, ``v_j = E[j]``.

    Same interface as :class:`PublicFeatureEncoder`; it is the special case of one family equal
    to the identity matrix with ``W = I`` and ``c = 0``.

    Parameters
    ----------
    n_items : int
        Number of items (>= 1).
    dim : int
        Embedding dimension ``d`` (>= 1).
    seed : int or None, default=0
        Seed of the data-independent initialisation (``None``: fresh entropy every call).
    init_scale : float, default=0.1
        Entries start ``N(0, init_scale^2 / dim)``, rows of norm ~``init_scale``.

    Raises
    ------
    InvalidParameterError
        If a parameter is out of range.

    Notes
    -----
    One parameter block, ``"embedding"`` of shape ``(n_items, dim)``.

    Privacy
    -------
    As for :class:`PublicFeatureEncoder`: rows of items absent from ``items`` get exactly 0
    gradient, so the item set passed to :meth:`vjp` must be public.

    Examples
    --------
    >>> import numpy as np
    >>> enc = IdEncoder(4, 2)
    >>> params = enc.init_params()
    >>> v, cache = enc.forward(params, np.array([1, 1]))
    >>> grad = enc.vjp(params, np.array([1, 1]), cache, np.ones((2, 2)))
    >>> enc.blocks(grad)["embedding"]
    array([[0., 0.],
           [2., 2.],
           [0., 0.],
           [0., 0.]])
    """

    def __init__(
        self, n_items: int, dim: int, *, seed: int | None = 0, init_scale: float = 0.1
    ) -> None:
        caller = "IdEncoder"
        self._n_items = check_int(n_items, "n_items", caller, low=1)
        self._dim = check_int(dim, "dim", caller, low=1)
        if seed is not None:
            check_int(seed, "seed", caller, low=0)
        self.seed = seed
        self.init_scale = check_real(init_scale, "init_scale", caller, low=0.0, high_open=True)
        self._set_layout({"embedding": (self._n_items, self._dim)})

    def __repr__(self) -> str:
        return f"IdEncoder(n_items={self._n_items}, dim={self._dim})"

    def init_params(self) -> np.ndarray:
        """A fresh, data-independent initial parameter vector of length ``n_params``."""
        rng = np.random.default_rng(self.seed)
        return rng.normal(0.0, self.init_scale / math.sqrt(self._dim), self._n_params)

    def forward(
        self, params: np.ndarray, items: np.ndarray | None = None
    ) -> tuple[np.ndarray, IdCache]:
        """Embeddings ``E[items]`` (a copy) and the cache :meth:`vjp` needs.

        Parameters and returns as :meth:`PublicFeatureEncoder.forward`.
        """
        caller = "IdEncoder.forward"
        table = self.blocks(self._params(params, caller))["embedding"]
        idx = self._items(items, caller)
        out = table.copy() if idx is None else table[idx]
        return out, IdCache(idx)

    def vjp(
        self,
        params: np.ndarray,
        items: np.ndarray | None,
        cache: IdCache | None,
        grad_out: np.ndarray,
    ) -> np.ndarray:
        """Gradient of ``sum_j <grad_out[j], E[items[j]]>``: grad_out rows scattered into E.

        Repeated items accumulate; rows of items not given are exactly 0. Parameters and
        returns as :meth:`PublicFeatureEncoder.vjp`.
        """
        caller = "IdEncoder.vjp"
        self._params(params, caller)
        idx = self._items(items, caller)
        if cache is None:
            cache = IdCache(idx)
        self._cache(cache, IdCache, idx, caller)
        n = self._n_items if idx is None else idx.size
        g = self._grad_out(grad_out, n, caller)
        if idx is None:
            return g.ravel().copy()
        # dE = S g with S[items[k], k] = 1 : (n_items, n), one sparse product sums repeats.
        scatter = sparse.csr_matrix(
            (np.ones(n), (idx, np.arange(n))), shape=(self._n_items, n), dtype=np.float64
        )
        return np.asarray(scatter @ g).ravel()
