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
from typing import Any, Protocol, runtime_checkable

import numpy as np
from scipy import sparse

from userdp._validation import check_choice, check_int, check_real
from userdp.data.features import SparseFeatures as FeatureFamily  # the one container
from userdp.exceptions import DataError, InvalidParameterError
from userdp.recommend.public._flat import FeatureCache as _FeatureCache
from userdp.recommend.public._flat import FlatParameters as _FlatParameters
from userdp.recommend.public.id_encoder import IdEncoder  # re-exported: the id-only encoder

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
