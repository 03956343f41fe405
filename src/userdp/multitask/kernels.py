"""Per-segment sufficient statistics: the one kernel every SSP step and ALS solve runs.

A *segment* is a task (an item) or a user: a run of rows in an order array. For every segment s
the kernel computes the weighted Gram matrix and moment vector

    A_s = sum_{r in s} w_r x_r x_r^T,        b_s = sum_{r in s} w_r y_r x_r,

where ``x_r = X[index[r]]`` is gathered from a small feature table (user or item embeddings).
Materialising one d x d outer product per row would need n_rows * d^2 floats (3 TB for 10M
ratings at d = 64), so rows are processed in blocks of whole segments instead:

- long segments (>= ``_DIRECT``) get one BLAS GEMM each, ``(X_s * w_s)^T X_s``;
- short segments are grouped by length class (powers of two), padded with a zero row to the
  class length L, and multiplied as a stack ``P^T P`` of shape (n_segments, L, d), which NumPy
  hands to BLAS slice by slice. Padding costs at most 2x and memory stays under ``_BLOCK`` floats.

:func:`segment_statistics_reference` is the slow, obviously correct version the tests compare
against.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal, overload

import numpy as np
from threadpoolctl import threadpool_limits

__all__ = [
    "batched",
    "segment_offsets",
    "segment_statistics",
    "segment_statistics_reference",
]

_DIRECT = 512  # segments at least this long get their own GEMM
# Floats per block (16 MiB of float64). Kept under glibc's 32 MiB mmap threshold on purpose:
# larger arrays are mmap'd afresh each time and first-touch page faults then cost more than
# the arithmetic (measured: 1.6 s vs 0.1 s for a 1 GiB multiply on this VM).
_BLOCK = 1 << 21


def segment_offsets(codes: np.ndarray, n_segments: int) -> tuple[np.ndarray, np.ndarray]:
    """A stable order grouping equal ``codes`` and CSR offsets of each code's run.

    ``order[offsets[s]:offsets[s + 1]]`` are the rows of segment ``s``.
    """
    counts = np.bincount(codes, minlength=n_segments)
    offsets = np.zeros(n_segments + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    if codes.size and np.all(codes[1:] >= codes[:-1]):
        order = np.arange(codes.size, dtype=np.int64)
    else:
        order = np.argsort(codes, kind="stable")
    return order, offsets


@overload
def segment_statistics(
    offsets: np.ndarray,
    rows: np.ndarray,
    index: np.ndarray,
    features: np.ndarray,
    weights: np.ndarray | None,
    labels: np.ndarray,
    *,
    gram: Literal[True] = ...,
    n_threads: int | None = ...,
) -> tuple[np.ndarray, np.ndarray]: ...
@overload
def segment_statistics(
    offsets: np.ndarray,
    rows: np.ndarray,
    index: np.ndarray,
    features: np.ndarray,
    weights: np.ndarray | None,
    labels: None,
    *,
    gram: Literal[True] = ...,
    n_threads: int | None = ...,
) -> tuple[np.ndarray, None]: ...
@overload
def segment_statistics(
    offsets: np.ndarray,
    rows: np.ndarray,
    index: np.ndarray,
    features: np.ndarray,
    weights: np.ndarray | None,
    labels: np.ndarray,
    *,
    gram: Literal[False],
    n_threads: int | None = ...,
) -> tuple[None, np.ndarray]: ...
@overload
def segment_statistics(
    offsets: np.ndarray,
    rows: np.ndarray,
    index: np.ndarray,
    features: np.ndarray,
    weights: np.ndarray | None,
    labels: np.ndarray | None,
    *,
    gram: bool = ...,
    n_threads: int | None = ...,
) -> tuple[np.ndarray | None, np.ndarray | None]: ...
def segment_statistics(
    offsets: np.ndarray,
    rows: np.ndarray,
    index: np.ndarray,
    features: np.ndarray,
    weights: np.ndarray | None,
    labels: np.ndarray | None,
    *,
    gram: bool = True,
    n_threads: int | None = None,
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """``(A, b)`` for every segment; ``A`` is None unless ``gram``, ``b`` None without labels.

    Parameters
    ----------
    offsets : int64 array, shape (n_segments + 1,)
        Segment ``s`` is ``rows[offsets[s]:offsets[s + 1]]``.
    rows : int array, shape (n_rows,)
        Row numbers ordered by segment (``segment_offsets``'s order).
    index : int array, shape (n_rows_total,)
        ``features[index[r]]`` is row r's feature vector.
    features : float64 array, shape (n_features, d)
    weights, labels : float64 arrays of shape (n_rows_total,) or None (weight 1 / no b).
        Weights must be >= 0.
    n_threads : int or None
        Worker threads (default: CPU count). BLAS runs single-threaded inside them: thousands
        of small multi-threaded GEMMs spend their time synchronising (measured 3-7x slower).
    """
    n_seg = offsets.size - 1
    d = features.shape[1]
    A = np.zeros((n_seg, d, d)) if gram else None
    b = np.zeros((n_seg, d)) if labels is not None else None
    lengths = np.diff(offsets)
    live = np.flatnonzero(lengths)
    if live.size == 0:
        return A, b
    args = (offsets, rows, index, features, weights, labels, A, b)
    tasks: list[tuple] = []
    # Length classes: 1, 2, 3-4, 5-8, ..., and "direct" for long segments.
    cls = np.ceil(np.log2(np.maximum(lengths[live], 1))).astype(np.int64)
    direct = lengths[live] >= _DIRECT
    tasks.extend((_direct_segment, int(s)) for s in live[direct])
    short, short_cls = live[~direct], cls[~direct]
    for c in np.unique(short_cls):
        segs = short[short_cls == c]
        length = 1 << int(c)
        per_block = max(1, _BLOCK // (length * d))
        tasks.extend(
            (_padded_block, segs[i : i + per_block], length) for i in range(0, segs.size, per_block)
        )
    workers = n_threads or os.cpu_count() or 1
    with threadpool_limits(1, user_api="blas"):
        if workers == 1 or len(tasks) == 1:
            for fn, *extra in tasks:
                fn(*extra, *args)
        else:
            # Largest first, so the pool does not end waiting on one big segment.
            tasks.sort(key=lambda t: -int(lengths[t[1]].sum()))
            with ThreadPoolExecutor(workers) as pool:
                for f in [pool.submit(fn, *extra, *args) for fn, *extra in tasks]:
                    f.result()
    return A, b


def batched(
    fn: Callable[..., Any], *arrays: np.ndarray, n_threads: int | None = None, chunk: int = 512
) -> Any:
    """``fn(*arrays)`` on chunks of the leading axis, run on a thread pool with 1-thread BLAS.

    For batched LAPACK calls (``eigh``, ``solve``) over thousands of small matrices, which
    NumPy runs one after the other on one core. ``fn`` returns one array or a tuple of them.
    """
    n = arrays[0].shape[0]
    workers = n_threads or os.cpu_count() or 1
    bounds = [(lo, min(lo + chunk, n)) for lo in range(0, n, chunk)]
    with threadpool_limits(1, user_api="blas"):
        if workers == 1 or len(bounds) <= 1:
            parts = [fn(*(a[lo:hi] for a in arrays)) for lo, hi in bounds]
        else:
            with ThreadPoolExecutor(workers) as pool:
                parts = list(pool.map(lambda b: fn(*(a[b[0] : b[1]] for a in arrays)), bounds))
    if isinstance(parts[0], tuple):
        return tuple(np.concatenate(p) for p in zip(*parts, strict=True))
    return np.concatenate(parts)


def _direct_segment(
    s: int,
    offsets: np.ndarray,
    rows: np.ndarray,
    index: np.ndarray,
    features: np.ndarray,
    weights: np.ndarray | None,
    labels: np.ndarray | None,
    A: np.ndarray | None,
    b: np.ndarray | None,
) -> None:
    """Statistics of one long segment, in row blocks of at most ``_BLOCK`` floats."""
    step = max(1, _BLOCK // features.shape[1])
    for lo in range(offsets[s], offsets[s + 1], step):
        r = rows[lo : min(lo + step, offsets[s + 1])]
        xs = features[index[r]]
        if weights is None:
            if A is not None:
                A[s] += xs.T @ xs
            if b is not None and labels is not None:  # b is None without labels
                b[s] += labels[r] @ xs
        else:
            # w >= 0: (sqrt(w) x)^T (sqrt(w) x) is a symmetric product BLAS does fastest.
            root = np.sqrt(weights[r])
            xs *= root[:, None]
            if A is not None:
                A[s] += xs.T @ xs
            if b is not None and labels is not None:  # b is None without labels
                b[s] += (labels[r] * root) @ xs


def _padded_block(
    segs: np.ndarray,
    length: int,
    offsets: np.ndarray,
    rows: np.ndarray,
    index: np.ndarray,
    features: np.ndarray,
    weights: np.ndarray | None,
    labels: np.ndarray | None,
    A: np.ndarray | None,
    b: np.ndarray | None,
) -> None:
    """Statistics of segments no longer than ``length``, as one stacked matmul."""
    lo = offsets[segs]
    n = offsets[segs + 1] - lo
    slot = np.arange(length)
    valid = slot[None, :] < n[:, None]  # (n_segs, L)
    pos = np.where(valid, lo[:, None] + slot[None, :], 0)
    r = rows[pos]  # (n_segs, L) row numbers (slot 0's row where padded; masked below)
    x = features[index[r]]  # (n_segs, L, d)
    root = valid.astype(np.float64) if weights is None else np.where(valid, weights[r], 0.0)
    np.sqrt(root, out=root)  # weights are >= 0; padding slots get 0
    x *= root[:, :, None]
    if A is not None:
        A[segs] = np.matmul(x.transpose(0, 2, 1), x)
    if b is not None and labels is not None:  # b is None without labels
        yw = np.where(valid, labels[r], 0.0) * root
        b[segs] = np.matmul(yw[:, None, :], x)[:, 0, :]


def segment_statistics_reference(
    segments: np.ndarray,
    n_segments: int,
    index: np.ndarray,
    features: np.ndarray,
    weights: np.ndarray | None,
    labels: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray]:
    """The same statistics by a plain loop over rows (for tests)."""
    d = features.shape[1]
    A = np.zeros((n_segments, d, d))
    b = np.zeros((n_segments, d))
    for r in range(segments.size):
        x = features[index[r]]
        w = 1.0 if weights is None else weights[r]
        A[segments[r]] += w * np.outer(x, x)
        if labels is not None:
            b[segments[r]] += w * labels[r] * x
    return A, b
