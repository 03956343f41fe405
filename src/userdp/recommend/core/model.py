"""The released recommender: what a private training run publishes, and how to use it.

:class:`RecommenderModel` is the one released-model type. ``MatrixFactorization`` and
``PublicFeatureRecommender`` both produce it (``model_``), ``save`` writes it to ``.npz`` and
``RecommenderModel.load`` reads it back without pickles. It holds only:

- the released values: item embeddings, the centring value, the private item counts, the item
  set (a public catalogue or a privately selected vocabulary), which items were trained
  (post-processing of the private counts), the encoder's parameters and the user-feature prior
  when present;
- the declared parameters (hyper-parameters, rating range, budget and the ``dp_event``).

Never: the seed (it would let anyone regenerate the noise), fit times, exact counts, or
anything else that depends on the data beyond the released values. Its shapes depend only on
the item set, which is fixed before any statistic is computed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import attr
import dp_accounting
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from scipy import sparse

from userdp._validation import check_choice, check_int
from userdp.data.io import check_model_file
from userdp.data.ratings import Ratings, as_ratings
from userdp.exceptions import DataError, InvalidParameterError
from userdp.multitask.kernels import batched, segment_offsets, segment_statistics
from userdp.privacy import events as userdp_events
from userdp.privacy.budget import PrivacyBudget

__all__ = ["ITEM_SOURCES", "RecommenderModel", "solve_users", "user_feature_matrix"]

ITEM_SOURCES = ("public", "private", "data")
"""Where the item set came from: a public catalogue, private partition selection, or (only for
non-private training) the data itself."""

_FORMAT = "userdp-recommender-1"


def user_feature_matrix(user_features: Any, n_users: int) -> tuple[sparse.csr_matrix, int]:
    """Stack private user-feature families into ``Phi`` (n_users x values) and count them.

    Each family's rows are scaled to sum to 1 (a multivalent feature is averaged, as the item
    encoder does), so every user's row has ``||phi_k||_2^2 <= F`` for F families: the bound the
    prior's sensitivity rests on. Accepts a :class:`~userdp.data.features.SparseFeatures`, a
    list of them, or one nonnegative sparse matrix (one family).
    """
    families = user_features if isinstance(user_features, list | tuple) else [user_features]
    if not families:
        raise InvalidParameterError("user_features must hold at least one feature family.")
    blocks = []
    for fam in families:
        m = getattr(fam, "matrix", fam)
        if not sparse.issparse(m):
            m = sparse.csr_matrix(np.asarray(m, dtype=np.float64))
        m = sparse.csr_matrix(m, dtype=np.float64)
        if m.shape[0] != n_users:
            raise InvalidParameterError(
                f"A user-feature family has {m.shape[0]} rows but the ratings have {n_users} "
                "users; build the features on ratings.user_labels."
            )
        if m.nnz and (not np.all(np.isfinite(m.data)) or m.data.min() < 0):
            raise InvalidParameterError("User features must be finite and nonnegative.")
        total = np.asarray(m.sum(axis=1)).ravel()
        scale = np.divide(1.0, total, out=np.zeros_like(total), where=total > 0)
        blocks.append(sparse.diags(scale) @ m)
    return sparse.csr_matrix(sparse.hstack(blocks, format="csr")), len(families)


def solve_users(gram: np.ndarray, moment: np.ndarray, ridge: np.ndarray) -> np.ndarray:
    """Batched ``(A_s + ridge_s I)^-1 b_s`` (A PSD by construction: a Cholesky-backed solve)."""
    d = gram.shape[1]
    idx = np.arange(d)
    gram[:, idx, idx] += ridge[:, None]
    return batched(np.linalg.solve, gram, moment[:, :, None])[:, :, 0]


@dataclass(frozen=True, eq=False)
class RecommenderModel:
    """A released recommender: item embeddings and what is needed to use them.

    Attributes
    ----------
    method : str
        The training method (``"adadpals"``, ``"am-ssp"``, ...).
    item_labels : pyarrow.Array
        The item set, fixed before training: a public catalogue (``item_source="public"``),
        a privately selected vocabulary (``"private"``), or the data's items (``"data"``,
        non-private training only).
    item_factors : ndarray, shape (n_items, dim)
        Released item embeddings; rows of untrained items are 0 (they predict the centre).
    center : float
        The released centring value.
    rating_range : (float, float)
        The declared rating range.
    item_counts : ndarray or None
        Released private item counts (None for non-private training).
    trained_items : ndarray of bool
        Items trained on: post-processing of the released counts and the declared parameters.
    budget : PrivacyBudget or None
        What the release spends, the item set's selection included when it was private.
    dp_event : dp_accounting.DpEvent or None
    item_source : {"public", "private", "data"}
    params : Mapping
        The declared hyper-parameters (never the seed).
    encoder_params : ndarray or None
        The public-feature encoder's trained parameters (``PublicFeatureRecommender``).
    user_prior : ndarray or None
        The released user-feature prior table (feature values x dim), when trained with user
        features.
    item_biases : ndarray of shape (n_items,) or None
        Released item biases (trained with ``biases=True``): predictions are ``center + c_u +
        b_i + <u_i, v_u>``, where the user's bias ``c_u`` is solved from their own history.
    """

    method: str
    item_labels: pa.Array = field(repr=False)
    item_factors: np.ndarray = field(repr=False)
    center: float
    rating_range: tuple[float, float]
    item_counts: np.ndarray | None = field(repr=False)
    trained_items: np.ndarray = field(repr=False)
    budget: PrivacyBudget | None
    dp_event: dp_accounting.DpEvent | None = field(repr=False)
    item_source: str
    params: Mapping[str, Any] = field(repr=False)
    encoder_params: np.ndarray | None = field(default=None, repr=False)
    user_prior: np.ndarray | None = field(default=None, repr=False)
    item_biases: np.ndarray | None = field(default=None, repr=False)

    @property
    def dim(self) -> int:
        return int(self.item_factors.shape[1])

    @property
    def n_items(self) -> int:
        return int(self.item_factors.shape[0])

    def summary(self) -> str:
        """One line with released values and declared parameters only."""
        b = self.budget
        spent = "non-private" if b is None else f"epsilon={b.epsilon:g}, delta={b.delta:g}"
        return (
            f"{self.method}: {self.n_items} items ({self.item_source} item set), "
            f"{int(self.trained_items.sum())} trained, dim {self.dim}, center {self.center:.4g}, "
            f"rating range {self.rating_range[0]:g}..{self.rating_range[1]:g}, {spent}"
        )

    # -- using the model ------------------------------------------------------------------------
    def item_codes(self, labels: Any) -> np.ndarray:
        """Model item codes of original item ids (-1 for ids the model does not know)."""
        arr = pa.array(labels) if not isinstance(labels, (pa.Array, pa.ChunkedArray)) else labels
        if arr.type != self.item_labels.type:
            try:
                arr = arr.cast(self.item_labels.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
                raise DataError(
                    f"Item ids of type {arr.type} cannot be matched to the model's item ids "
                    f"({self.item_labels.type})."
                ) from err
        idx = pc.index_in(arr, value_set=self.item_labels)
        return np.asarray(idx.fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)

    def user_factors(
        self, history: Any, *, reg: float | None = None, user_features: Any = None
    ) -> np.ndarray:
        """Embeddings of ``history``'s users from their own ratings (billboard model, Remark D.1).

        ``v_j = argmin_v sum_i (<u_i, v> - (r_ij - center))^2 + reg * n_j ||v||^2`` over the
        user's ratings of items the model knows (plus the implicit term with
        ``unobserved_weight``, and a pull toward the released user-feature prior when
        ``user_features`` are given). Uses only released values and the user's own data: no
        privacy cost. Returns shape (history.n_users, dim). With item biases the user's bias is
        solved jointly (see :meth:`user_biases`) and ``b_i`` is subtracted from the targets.
        """
        return self._solve_users(history, reg=reg, user_features=user_features)[0]

    def user_biases(
        self, history: Any, *, reg: float | None = None, user_features: Any = None
    ) -> np.ndarray:
        """Biases ``c_u`` of ``history``'s users, solved with their factors from their own
        ratings (zeros for a model without biases). Returns shape (history.n_users,)."""
        return self._solve_users(history, reg=reg, user_features=user_features)[1]

    def _solve_users(
        self, history: Any, *, reg: float | None = None, user_features: Any = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Factors and biases of ``history``'s users (biases 0 without item biases)."""
        h = as_ratings(history)
        codes = self.item_codes(h.item_labels)[h.items]
        known = codes >= 0
        if self.item_biases is not None:
            # As in training: only items trained on (the others' rows were left out there).
            known[known] &= self.trained_items[codes[known]]
        users = h.users[known]
        y = np.clip(h.values[known], *self.rating_range) - self.center
        order, offsets = segment_offsets(users, h.n_users)
        features = self.item_factors
        if self.item_biases is not None:
            # [v, c] against items [u_i, 1] and targets y - b_i.
            features = np.column_stack([features, np.ones(self.n_items)])
            y = y - self.item_biases[codes[known]]
        gram, moment = segment_statistics(offsets, order, codes[known], features, None, y)
        alpha = float(self.params.get("unobserved_weight", 0.0) or 0.0)
        if alpha:
            gram += alpha * (features.T @ features)
        lam = (self.params["reg"] if reg is None else reg) * np.maximum(np.diff(offsets), 1)
        lam = lam.astype(np.float64)
        if user_features is not None:
            if self.user_prior is None:
                raise InvalidParameterError(
                    "This model was trained without user features; refit with "
                    "fit(..., user_features=...) to use them."
                )
            phi, _ = user_feature_matrix(user_features, h.n_users)
            if phi.shape[1] != self.user_prior.shape[0]:
                raise InvalidParameterError(
                    f"The user features have {phi.shape[1]} values; the model was trained on "
                    f"{self.user_prior.shape[0]}."
                )
            moment[:, : self.dim] += lam[:, None] * (phi @ self.user_prior)
        out = solve_users(gram, moment, lam)
        if self.item_biases is None:
            return out, np.zeros(h.n_users)
        return np.ascontiguousarray(out[:, : self.dim]), out[:, self.dim]

    def predict(self, history: Any, users: np.ndarray, items: Any) -> np.ndarray:
        """Predicted ratings of (user code in ``history``, item id) pairs, clipped to the range."""
        V, c = self._solve_users(history)
        codes = self.item_codes(items)
        users = np.asarray(users)
        out = np.full(users.size, self.center)
        ok = codes >= 0
        out[ok] += np.einsum("nd,nd->n", V[users[ok]], self.item_factors[codes[ok]])
        if self.item_biases is not None:
            out += c[users]  # a user's own bias applies to items the model does not know too
            out[ok] += self.item_biases[codes[ok]]
        return np.clip(out, *self.rating_range)

    def _histories(self, user_items: Any, users: np.ndarray) -> tuple[Any, np.ndarray]:
        """``user_items`` as a Ratings over this model's item codes and the rows of ``users``.

        A SciPy sparse matrix (users x items, columns are this model's item codes, values the
        ratings or confidences) is sliced to the requested rows first; anything else is read by
        :func:`~userdp.data.as_ratings` (its user codes are the rows)."""
        if sparse.issparse(user_items):
            csr = sparse.csr_matrix(user_items)
            if csr.shape[1] != self.n_items:
                raise InvalidParameterError(
                    f"user_items has {csr.shape[1]} columns; the model has {self.n_items} items "
                    "(columns are item codes: model.item_codes(ids))."
                )
            if users.size and (users.min() < 0 or users.max() >= csr.shape[0]):
                raise InvalidParameterError(
                    f"userid must be row numbers of user_items (0..{csr.shape[0] - 1})."
                )
            sub = csr[users].tocoo()
            h = Ratings.from_codes(
                sub.row,
                sub.col,
                sub.data.astype(np.float64),
                n_users=users.size,
                n_items=self.n_items,
                item_labels=self.item_labels,
                keep_empty_users=True,
            )
            return h, np.arange(users.size)
        h = as_ratings(user_items)
        if users.size and (users.min() < 0 or users.max() >= h.n_users):
            raise InvalidParameterError(
                f"userid must be user codes of user_items (0..{h.n_users - 1})."
            )
        return h, users

    def recommend(
        self,
        userid: Any,
        user_items: Any = None,
        N: int = 10,
        filter_already_liked_items: bool = True,
        *,
        users: Any = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``N`` items for one user or many, best first (the ``implicit`` library's call).

        ``userid``: a user's row (an int) or an array of rows of ``user_items``, their
        histories: a SciPy sparse matrix (users x items; columns are this model's item codes,
        values the ratings) or a :class:`~userdp.data.Ratings` / table (rows: its user codes).
        Returns ``(ids, scores)``, item codes (``item_labels.take(ids)`` gives the ids) and
        predicted centred ratings, of shape (N,) for one user and (n, N) for an array. Items the
        user rated are excluded unless ``filter_already_liked_items=False``; rows with fewer
        than ``N`` candidates are padded with code -1 and score ``-inf``. ``users``: the old
        call's keyword, refused with a message naming this form.
        """
        old = isinstance(userid, Ratings | pa.Table | Mapping) or _is_frame(userid)
        if old or users is not None or user_items is None:
            raise InvalidParameterError(
                "recommend(history, users) is now recommend(userid, user_items): user rows "
                "first, then their histories (CSR matrix, Ratings or table)."
            )
        scalar = np.ndim(userid) == 0
        users = np.atleast_1d(np.asarray(userid))
        if users.size and not np.issubdtype(users.dtype, np.integer):
            raise InvalidParameterError(
                f"userid must be an int or an array of ints (rows of user_items); got "
                f"{users.dtype}."
            )
        users = users.astype(np.int64)
        N = check_int(N, "N", "recommend", low=1)
        h, rows = self._histories(user_items, users)
        V, c = self._solve_users(h)
        scores = V[rows] @ self.item_factors.T
        if self.item_biases is not None:
            scores += self.item_biases[None, :] + c[rows][:, None]
        if filter_already_liked_items:
            codes = self.item_codes(h.item_labels)[h.items]
            pos = np.full(h.n_users, -1)
            pos[rows] = np.arange(rows.size)
            row = pos[h.users]
            keep = (row >= 0) & (codes >= 0)
            scores[row[keep], codes[keep]] = -np.inf
        ids, top = _top(scores, N)
        return (ids[0], top[0]) if scalar else (ids, top)

    def similar_items(
        self, itemid: Any, N: int = 10, *, metric: str = "cosine"
    ) -> tuple[np.ndarray, np.ndarray]:
        """Nearest neighbours of one item or many by cosine similarity (or ``metric="dot"``, the
        paper's inner product, which favours items with large norms), the item excluded.

        ``itemid``: an item code or an array of codes (``item_codes(ids)`` maps ids to codes).
        Returns ``(ids, scores)``: item codes and similarities, shape (N,) or (n, N).
        """
        metric = check_choice(metric, "metric", "similar_items", ["cosine", "dot"])
        N = check_int(N, "N", "similar_items", low=1)
        scalar = np.ndim(itemid) == 0
        codes = np.atleast_1d(np.asarray(itemid))
        if codes.size and not np.issubdtype(codes.dtype, np.integer):
            raise InvalidParameterError(
                "similar_items takes item codes now: similar_items(model.item_codes(ids)); "
                "it returns codes (item_labels.take(codes) gives the ids)."
            )
        codes = codes.astype(np.int64)
        if codes.size and (codes.min() < 0 or codes.max() >= self.n_items):
            bad = codes[(codes < 0) | (codes >= self.n_items)][:5].tolist()
            raise DataError(
                f"Unknown item code(s) {bad!r}: codes run from 0 to {self.n_items - 1} "
                "(item_codes gives -1 for ids the model does not know)."
            )
        U = self.item_factors
        if metric == "cosine":
            U = U / np.maximum(np.linalg.norm(U, axis=1, keepdims=True), 1e-12)
        scores = U[codes] @ U.T
        scores[np.arange(codes.size), codes] = -np.inf
        ids, top = _top(scores, min(N, max(U.shape[0] - 1, 1)))
        return (ids[0], top[0]) if scalar else (ids, top)

    # -- persistence ----------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the released model to ``.npz`` (no pickles: loads with ``allow_pickle=False``).

        The file holds the arrays of the attributes above and one JSON string of the declared
        values; its keys, shapes and dtypes depend only on the item set and the parameters.
        """
        meta = {
            "format": _FORMAT,
            "method": self.method,
            "params": dict(self.params),
            "center": self.center,
            "rating_range": list(self.rating_range),
            "item_source": self.item_source,
            "item_type": str(self.item_labels.type),
            "budget": None
            if self.budget is None
            else {"epsilon": self.budget.epsilon, "delta": self.budget.delta},
            "dp_event": None if self.dp_event is None else _event_to_json(self.dp_event),
        }
        labels = np.asarray(self.item_labels.to_numpy(zero_copy_only=False))
        if labels.dtype == object:
            labels = labels.astype(str)
        arrays: dict[str, Any] = {
            "item_factors": np.asarray(self.item_factors, dtype=np.float64),
            "item_labels": labels,
            "trained_items": np.asarray(self.trained_items, dtype=bool),
        }
        for key, value in (
            ("item_counts", self.item_counts),
            ("encoder_params", self.encoder_params),
            ("user_prior", self.user_prior),
            ("item_biases", self.item_biases),
        ):
            if value is not None:
                arrays[key] = np.asarray(value, dtype=np.float64)
        path = os.fspath(path)
        tmp = f"{path}.tmp.npz"
        np.savez(tmp, meta=np.array(json.dumps(meta, sort_keys=True)), **arrays)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> RecommenderModel:
        """Read a model written by :meth:`save` (``allow_pickle=False``)."""
        check_model_file(path)  # empty, truncated or foreign files: one clear DataError
        try:
            with np.load(path, allow_pickle=False) as z:
                meta = json.loads(str(z["meta"]))
                arrays = {k: z[k] for k in z.files if k != "meta"}
            if meta.get("format") != _FORMAT:
                raise ValueError(f"not a {_FORMAT} file")
            labels = pa.array(arrays["item_labels"])
            if str(labels.type) != meta["item_type"] and meta["item_type"] in ("int64", "int32"):
                labels = labels.cast(meta["item_type"])
            b = meta["budget"]
            return cls(
                method=meta["method"],
                item_labels=labels,
                item_factors=arrays["item_factors"],
                center=float(meta["center"]),
                rating_range=(float(meta["rating_range"][0]), float(meta["rating_range"][1])),
                item_counts=arrays.get("item_counts"),
                trained_items=arrays["trained_items"],
                budget=None if b is None else PrivacyBudget.derived(b["epsilon"], b["delta"]),
                dp_event=None if meta["dp_event"] is None else _event_from_json(meta["dp_event"]),
                item_source=meta["item_source"],
                params=meta["params"],
                encoder_params=arrays.get("encoder_params"),
                user_prior=arrays.get("user_prior"),
                item_biases=arrays.get("item_biases"),
            )
        except (OSError, KeyError, ValueError, TypeError) as err:
            raise DataError(
                f"Cannot read a userdp recommender from {os.fspath(path)!r}: {type(err).__name__}."
            ) from err


# -- dp_event <-> JSON (attrs events of dp-accounting and userdp.privacy.events only) -----------
def _top(scores: np.ndarray, N: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``N`` best columns of each row, best first (ties by code): codes and scores, with
    code -1 where the row has fewer than ``N`` finite scores (or columns)."""
    n, m = scores.shape
    k = min(N, m)
    ids = np.full((n, N), -1, dtype=np.int64)
    out = np.full((n, N), -np.inf)
    if k == 0 or n == 0:
        return ids, out
    if k < m:
        top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    else:
        top = np.tile(np.arange(m), (n, 1))
    part = np.take_along_axis(scores, top, axis=1)
    order = np.argsort(-part, axis=1, kind="stable")
    top = np.take_along_axis(top, order, axis=1)
    part = np.take_along_axis(part, order, axis=1)
    ok = np.isfinite(part)
    ids[:, :k] = np.where(ok, top, -1)
    out[:, :k] = np.where(ok, part, -np.inf)
    return ids, out


def _is_frame(value: Any) -> bool:
    """A pandas or Spark DataFrame (the old call's history), without importing either."""
    return type(value).__name__ == "DataFrame"


def _event_classes() -> dict[str, type]:
    out: dict[str, type] = {}
    for module in (dp_accounting, userdp_events):
        for name in dir(module):
            obj = getattr(module, name)
            if isinstance(obj, type) and issubclass(obj, dp_accounting.DpEvent):
                out[name] = obj
    return out


def _event_to_json(value: Any) -> Any:
    if isinstance(value, dp_accounting.DpEvent):
        fields = {a.name: _event_to_json(getattr(value, a.name)) for a in attr.fields(type(value))}
        return {"__type__": type(value).__name__, **fields}
    if isinstance(value, (list, tuple)):
        return [_event_to_json(v) for v in value]
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    return value


def _event_from_json(value: Any) -> Any:
    if isinstance(value, dict) and "__type__" in value:
        kind = _event_classes().get(value["__type__"])
        if kind is None:
            raise ValueError(f"unknown dp_event type {value['__type__']!r}")
        return kind(**{k: _event_from_json(v) for k, v in value.items() if k != "__type__"})
    if isinstance(value, list):
        return [_event_from_json(v) for v in value]
    return value
