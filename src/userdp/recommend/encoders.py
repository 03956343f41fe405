"""Public item encoders for learning with public features (Krichene et al. 2023, arXiv:2310.15454).

The model of Section 2.2 scores ``u(x_priv) . v_theta(x_pub_j)``; ``v_theta`` is the *public
encoder*: it reads only the public feature row of item ``j``. Trained by sufficient statistics
perturbation (SSP, Algorithms 3 and 5), its gradient is eq. (4)::

    G = sum_j J_j(theta)^T (A_j v_j(theta) - b_j),    J_j = d v_j / d theta,

where ``A_j``, ``b_j`` are the released noisy per-item statistics. An encoder therefore needs a
forward pass over a set of items and one vector-Jacobian product (VJP) per step: ``vjp`` with
``grad_out[j] = A_j v_j - b_j`` returns ``G``.

:class:`PublicFeatureEncoder` is the architecture of Appendix E.1 ("Model Architecture"): one
embedding table per feature family, bag-of-words averaging, concatenation, one dense layer.
:class:`IdEncoder` is the id-only variant (one free embedding per item, as in DP-ALS).
:class:`ItemEncoder` is the protocol both satisfy, for user-supplied encoders.

Parameters live in ONE flat float64 vector, so optimisers and clipping act on a single array;
``blocks(params)`` returns named, reshaped views into it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
from scipy import sparse

from userdp._validation import check_choice, check_int, check_real
from userdp.data.features import SparseFeatures as FeatureFamily  # the one container
from userdp.exceptions import DataError, InvalidParameterError

__all__ = ["FeatureFamily", "IdEncoder", "ItemEncoder", "PublicFeatureEncoder"]

ACTIVATIONS = ("linear", "tanh")


@runtime_checkable
class ItemEncoder(Protocol):
    """What an item encoder provides to SSP training: a forward pass and a VJP.

    Parameters are one flat float64 vector of length ``n_params``. ``forward(params, items)``
    returns the embeddings of ``items`` (all items when ``None``), shape ``(len(items), dim)``,
    and an opaque cache; ``vjp(params, items, cache, grad_out)`` returns, as a vector of length
    ``n_params``, the gradient of ``sum_j <grad_out[j], v_j(params)>``.
    """

    @property
    def n_items(self) -> int: ...

    @property
    def dim(self) -> int: ...

    @property
    def n_params(self) -> int: ...

    def init_params(self) -> np.ndarray: ...

    def forward(
        self, params: np.ndarray, items: np.ndarray | None = None
    ) -> tuple[np.ndarray, Any]: ...

    def vjp(
        self, params: np.ndarray, items: np.ndarray | None, cache: Any, grad_out: np.ndarray
    ) -> np.ndarray: ...


def _row_normalize(matrix: sparse.csr_matrix) -> sparse.csr_matrix:
    """``diag(1 / rowsum) M``: each row becomes averaging weights; rows summing to 0 stay 0."""
    sums = np.asarray(matrix.sum(axis=1)).ravel()
    scale = np.divide(1.0, sums, out=np.zeros_like(sums), where=sums > 0)
    out = matrix.copy()
    out.data *= np.repeat(scale, np.diff(out.indptr))
    return out


@dataclass(frozen=True)
class _FeatureCache:
    items: np.ndarray | None
    rows: tuple[sparse.csr_matrix, ...]  # normalised M_f[items], one per family
    hidden: np.ndarray  # h, shape (n, hidden_dim)
    output: np.ndarray  # v, shape (n, dim)


@dataclass(frozen=True)
class _IdCache:
    items: np.ndarray | None


class _FlatParameters:
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

    def _cache(self, cache: object, kind: type, items: np.ndarray | None, caller: str) -> None:
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


class PublicFeatureEncoder(_FlatParameters):
    """The public encoder of Appendix E.1: averaged family embeddings, then one dense layer.

    For item ``j`` and each family ``f`` with weights ``M_f[j]``, the family embedding is the
    weighted average ``h_fj = M_f[j] E_f / sum(M_f[j])`` (0 when the row sums to 0); the
    hidden vector is the concatenation ``h_j = [h_1j, ..., h_Fj]`` in ``R^(F * family_dim)``
    and the output is ``v_j = h_j W + c`` (``activation="linear"``, the default) or
    ``tanh(h_j W + c)``. The linear encoder has no nonlinearity: ``v`` is linear in each
    parameter block (``E_f``, ``W``, ``c``) with the others fixed.

    Parameters
    ----------
    families : sequence of FeatureFamily
        At least one family, all with the same number of item rows and distinct names.
    dim : int
        Output dimension ``d`` (>= 1).
    family_dim : int or None, default=None
        Embedding dimension of every family (>= 1); ``None`` uses ``dim`` (the paper's choice,
        footnote 5).
    seed : int or None, default=0
        Seed of the random initialisation. The initialisation depends only on the shapes, never
        on data, so a fixed seed is safe; ``None`` draws fresh entropy on every call.
    init_scale : float, default=0.1
        Embedding entries start ``N(0, init_scale^2 / family_dim)`` (a value's embedding has
        norm ~``init_scale``); the kernel ``W`` starts ``N(0, 1 / (F * family_dim))``, so an
        item with one value per family starts with ``||v_j|| ~ init_scale``; the bias starts 0.
    activation : {"linear", "tanh"}, default="linear"
        Output nonlinearity.

    Raises
    ------
    InvalidParameterError
        If a parameter is out of range or ``families`` is not a sequence of distinct families.
    DataError
        If the families disagree on the number of items.

    Notes
    -----
    Parameter blocks, in flat order: ``"embedding/<name>"`` of shape
    ``(n_values_f, family_dim)`` per family, ``"dense/kernel"`` of shape
    ``(F * family_dim, dim)``, ``"dense/bias"`` of shape ``(dim,)``.

    Privacy
    -------
    The encoder reads only public data: the feature matrices and a data-independent
    initialisation. The parameters trained by SSP are post-processing of the released ``A_j``,
    ``b_j``. The embedding rows of values absent from ``items`` get exactly 0 gradient (Section
    3.2), so the item set passed to :meth:`vjp` must itself be public (all items, or a sample
    drawn independently of the data, Algorithm 5); otherwise the gradient's support reveals it.

    References
    ----------
    Krichene, Mayoraz, Rendle, Song, Thakurta, Zhang. "Private Learning with Public Features",
    arXiv:2310.15454v1 (2023): eq. (4), Section 3.2, Appendix E.1.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy import sparse
    >>> genres = FeatureFamily("genres", sparse.csr_matrix([[1.0, 1.0], [0.0, 2.0], [0, 0]]))
    >>> enc = PublicFeatureEncoder([genres], dim=3)
    >>> params = enc.init_params()
    >>> v, cache = enc.forward(params, np.array([0, 2, 2]))
    >>> v.shape
    (3, 3)
    >>> enc.vjp(params, np.array([0, 2, 2]), cache, np.ones((3, 3))).shape == (enc.n_params,)
    True
    """

    def __init__(
        self,
        families: Sequence[FeatureFamily],
        dim: int,
        *,
        family_dim: int | None = None,
        seed: int | None = 0,
        init_scale: float = 0.1,
        activation: str = "linear",
    ) -> None:
        caller = "PublicFeatureEncoder"
        if isinstance(families, Sequence) and not isinstance(families, (str, bytes)):
            # Anything with a name and a sparse matrix (e.g. userdp.data.features.SparseFeatures)
            families = [
                FeatureFamily(f.name, f.matrix)
                if not isinstance(f, FeatureFamily) and hasattr(f, "name") and hasattr(f, "matrix")
                else f
                for f in families
            ]
        if (
            isinstance(families, (str, bytes))
            or not isinstance(families, Sequence)
            or len(families) == 0
            or not all(isinstance(f, FeatureFamily) for f in families)
        ):
            raise InvalidParameterError(
                f"The 'families' parameter of {caller} must be a non-empty sequence of "
                f"FeatureFamily. Got {families!r} instead."
            )
        names = [f.name for f in families]
        if len(set(names)) != len(names):
            raise InvalidParameterError(
                f"The 'families' parameter of {caller} must have distinct names. "
                f"Got {names!r} instead."
            )
        rows = {f.name: f.n_items for f in families}
        if len(set(rows.values())) != 1:
            raise DataError(
                f"Every feature family needs one row per item; got rows per family {rows!r}."
            )
        self._dim = check_int(dim, "dim", caller, low=1)
        self.family_dim = (
            self._dim if family_dim is None else check_int(family_dim, "family_dim", caller, low=1)
        )
        if seed is not None:
            check_int(seed, "seed", caller, low=0)
        self.seed = seed
        self.init_scale = check_real(init_scale, "init_scale", caller, low=0.0, high_open=True)
        self.activation = check_choice(activation, "activation", caller, ACTIVATIONS)
        self.families = tuple(families)
        self._n_items = self.families[0].n_items
        self.hidden_dim = len(self.families) * self.family_dim
        # P_f = diag(1 / rowsum(M_f)) M_f: the bag-of-words average as one sparse product.
        self._normalized = tuple(_row_normalize(f.matrix) for f in self.families)
        shapes: dict[str, tuple[int, int] | tuple[int]] = {
            f"embedding/{f.name}": (f.n_values, self.family_dim) for f in self.families
        }
        shapes["dense/kernel"] = (self.hidden_dim, self._dim)
        shapes["dense/bias"] = (self._dim,)
        self._set_layout(shapes)

    def __repr__(self) -> str:
        names = [f.name for f in self.families]
        return (
            f"PublicFeatureEncoder(families={names!r}, dim={self._dim}, "
            f"family_dim={self.family_dim}, activation={self.activation!r})"
        )

    def init_params(self) -> np.ndarray:
        """A fresh, data-independent initial parameter vector of length ``n_params``.

        With an integer ``seed`` every call returns the same vector.
        """
        rng = np.random.default_rng(self.seed)
        params = np.zeros(self._n_params)
        blocks = self.blocks(params)
        for f in self.families:
            table = blocks[f"embedding/{f.name}"]
            table[...] = rng.normal(0.0, self.init_scale / math.sqrt(self.family_dim), table.shape)
        kernel = blocks["dense/kernel"]
        kernel[...] = rng.normal(0.0, 1.0 / math.sqrt(self.hidden_dim), kernel.shape)
        return params

    def forward(
        self, params: np.ndarray, items: np.ndarray | None = None
    ) -> tuple[np.ndarray, _FeatureCache]:
        """Embeddings ``v_j`` of ``items`` and the cache :meth:`vjp` needs.

        Parameters
        ----------
        params : ndarray, shape (n_params,)
            Flat parameters.
        items : int array, shape (n,), or None, default=None
            Item indices in ``[0, n_items)``; repeats allowed. ``None`` means all items.

        Returns
        -------
        embeddings : ndarray, shape (n, dim)
            One row per entry of ``items`` (``n = n_items`` when ``items`` is None).
        cache : object
            Opaque; pass it to :meth:`vjp` with the same ``params`` and ``items``.

        Raises
        ------
        InvalidParameterError
            If ``params`` has the wrong length or an item is out of range.
        """
        caller = "PublicFeatureEncoder.forward"
        blocks = self.blocks(self._params(params, caller))
        idx = self._items(items, caller)
        rows = self._normalized if idx is None else tuple(p[idx] for p in self._normalized)
        n = self._n_items if idx is None else idx.size
        hidden = np.empty((n, self.hidden_dim))
        for k, (f, p) in enumerate(zip(self.families, rows, strict=True)):
            # h_f = P_f[items] E_f : (n, family_dim), the weighted average of value embeddings.
            part = slice(k * self.family_dim, (k + 1) * self.family_dim)
            hidden[:, part] = p @ blocks[f"embedding/{f.name}"]
        # v = h W + c : (n, dim)
        out = hidden @ blocks["dense/kernel"] + blocks["dense/bias"]
        if self.activation == "tanh":
            np.tanh(out, out=out)
        return out, _FeatureCache(idx, rows, hidden, out)

    def vjp(
        self,
        params: np.ndarray,
        items: np.ndarray | None,
        cache: _FeatureCache | None,
        grad_out: np.ndarray,
    ) -> np.ndarray:
        """Gradient of ``sum_j <grad_out[j], v_j(params)>`` with respect to ``params``.

        With ``grad_out[j] = A_j v_j - b_j`` this is the SSP gradient of eq. (4). Exact and
        vectorised; embedding rows of values active in none of ``items`` are exactly 0.

        Parameters
        ----------
        params : ndarray, shape (n_params,)
            The parameters ``forward`` was called with.
        items : int array, shape (n,), or None
            The items ``forward`` was called with.
        cache : object or None
            The cache from ``forward(params, items)``; ``None`` recomputes it.
        grad_out : float array, shape (n, dim)
            Cotangent of each output row.

        Returns
        -------
        ndarray, shape (n_params,)
            The gradient, laid out like ``params`` (see :meth:`blocks`).

        Raises
        ------
        InvalidParameterError
            If a shape is wrong, an item is out of range, or ``cache`` came from other items.
        """
        caller = "PublicFeatureEncoder.vjp"
        theta = self._params(params, caller)
        idx = self._items(items, caller)
        if cache is None:
            _, cache = self.forward(theta, idx)
        self._cache(cache, _FeatureCache, idx, caller)
        g = self._grad_out(grad_out, cache.hidden.shape[0], caller)
        if self.activation == "tanh":
            g = g * (1.0 - cache.output**2)  # d tanh(z) = 1 - tanh(z)^2
        grad = np.zeros(self._n_params)
        out = self.blocks(grad)
        out["dense/kernel"][...] = cache.hidden.T @ g  # dW = H^T g
        out["dense/bias"][...] = g.sum(axis=0)  # dc = sum_j g_j
        d_hidden = g @ self.blocks(theta)["dense/kernel"].T  # dH = g W^T
        for k, (f, p) in enumerate(zip(self.families, cache.rows, strict=True)):
            # dE_f = P_f[items]^T dH_f: sparse, so absent values get exact zeros.
            part = slice(k * self.family_dim, (k + 1) * self.family_dim)
            out[f"embedding/{f.name}"][...] = p.T @ d_hidden[:, part]
        return grad


class IdEncoder(_FlatParameters):
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
    ) -> tuple[np.ndarray, _IdCache]:
        """Embeddings ``E[items]`` (a copy) and the cache :meth:`vjp` needs.

        Parameters and returns as :meth:`PublicFeatureEncoder.forward`.
        """
        caller = "IdEncoder.forward"
        table = self.blocks(self._params(params, caller))["embedding"]
        idx = self._items(items, caller)
        out = table.copy() if idx is None else table[idx]
        return out, _IdCache(idx)

    def vjp(
        self,
        params: np.ndarray,
        items: np.ndarray | None,
        cache: _IdCache | None,
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
            cache = _IdCache(idx)
        self._cache(cache, _IdCache, idx, caller)
        n = self._n_items if idx is None else idx.size
        g = self._grad_out(grad_out, n, caller)
        if idx is None:
            return g.ravel().copy()
        # dE = S g with S[items[k], k] = 1 : (n_items, n), one sparse product sums repeats.
        scatter = sparse.csr_matrix(
            (np.ones(n), (idx, np.arange(n))), shape=(self._n_items, n), dtype=np.float64
        )
        return np.asarray(scatter @ g).ravel()
