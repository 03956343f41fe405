"""The solver of Theorem 6's program: projected semismooth Newton on its dual, and the LP.

:func:`userdp.estimate._gwa.solve_gwa` minimises GWA's total variance over ``C X = I`` with
these kernels: the design sorted by user with its exact projection (:class:`_Design`), the dual
Newton method with continuation in ``rho`` (:func:`_solve_dual`, after Bertsekas 1982), and the
``sigma^2 = 0`` linear program (:func:`_solve_lp`). The method is described in docs/estimate.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import linalg, optimize, sparse

from userdp.exceptions import DataError

_STAGE_FACTOR = 10.0  # continuation: rho shrinks by this factor per stage
_STAGE_TOL = 1e-4  # relative duality gap that ends an intermediate stage
_ARMIJO = 1e-4
_MAX_HALVINGS = 50


# -- the design, sorted by user --------------------------------------------------------------------
class _Design:
    """``X`` sorted by user, its thin QR, and the exact projection onto ``{C : C X = I}``.

    Columns of every matrix handled here are in the sorted order (users contiguous), so
    per-user sums are one ``np.add.reduceat`` over ``starts``.
    """

    def __init__(self, x: np.ndarray, codes: np.ndarray, sizes: np.ndarray) -> None:
        self.order = np.argsort(codes, kind="stable")
        self.codes = codes[self.order]
        self.starts = np.cumsum(sizes) - sizes
        self.x = x[self.order]
        q, r = np.linalg.qr(self.x)
        self.q = q  # (n, d)
        self.qt = np.ascontiguousarray(q.T)  # (d, n)
        self.rinv = linalg.solve_triangular(r, np.eye(r.shape[0]))  # R^-1, C_ols = R^-1 Q^T
        self.d = x.shape[1]

    def project(self, c: np.ndarray) -> np.ndarray:
        """Orthogonal projection onto ``C X = I`` with the residual measured on ``X`` itself.

        ``C - (C X - I) R^-1 Q^T`` satisfies ``C X = I`` exactly in exact arithmetic; a second
        pass (iterative refinement) removes the rounding error of the first.
        """
        eye = np.eye(self.d)
        for _ in range(2):
            c = c - ((c @ self.x - eye) @ self.rinv) @ self.qt
        return c

    def user_l1(self, c: np.ndarray) -> np.ndarray:
        return np.add.reduceat(np.abs(c).sum(axis=0), self.starts)

    def unsort(self, c: np.ndarray) -> np.ndarray:
        out = np.empty_like(c)
        out[:, self.order] = c
        return out


# -- the dual Newton solver ------------------------------------------------------------------------
@dataclass
class _Best:
    """Best exactly-feasible iterate so far, by the target (scaled) objective."""

    matrix: np.ndarray
    value: float  # ||C||^2 + T^2 / rho_target
    lower: float = -math.inf  # dual lower bound at rho_target


def _schur_solve(
    hess: np.ndarray,
    coupling: np.ndarray,
    diag: np.ndarray,
    rho: float,
    g_n: np.ndarray,
    g_nu: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Solve ``[[H, B], [B^T, D + rho 11^T]] [p; r] = -[g_n; g_nu]`` via the Schur complement.

    ``(D + rho 11^T)^-1`` is applied by Sherman-Morrison, so the cost is that of the
    ``d^2 x d^2`` Schur complement ``H - B (D + rho 11^T)^-1 B^T``.
    """
    inv = 1.0 / diag
    denom = 1.0 + rho * inv.sum()

    def e_inv(v: np.ndarray) -> np.ndarray:
        iv = inv[:, None] * v if v.ndim == 2 else inv * v
        return iv - rho * np.multiply.outer(inv, inv @ v) / denom

    schur = hess - coupling @ e_inv(coupling.T)
    rhs = -g_n + coupling @ e_inv(g_nu)
    try:
        p = linalg.solve(schur, rhs, assume_a="pos")
    except (linalg.LinAlgError, ValueError):
        p = np.linalg.lstsq(schur, rhs, rcond=None)[0]
    return p, e_inv(-g_nu - coupling.T @ p)


class _DualNewton:
    """Projected semismooth Newton on the dual of the scaled problem (docs/estimate.md)."""

    def __init__(self, design: _Design, rho_target: float, tol: float) -> None:
        self.dz = design
        self.rho_target = rho_target
        self.tol = tol
        self.frob_ols = float(np.vdot(design.rinv, design.rinv))  # min ||C||_F^2 (Q orthonormal)

    def _evaluate(self, n_mat: np.ndarray, nu: np.ndarray, rho: float) -> tuple:
        a = n_mat @ self.dz.qt  # (d, n): N q_i
        pos = np.abs(a)
        pos -= nu[self.dz.codes]
        np.maximum(pos, 0.0, out=pos)  # |soft(N q_i, nu_l)|
        s = nu.sum()
        phi = -np.vdot(n_mat, self.dz.rinv) + 0.5 * np.vdot(pos, pos) + 0.5 * rho * s * s
        return a, pos, phi

    def _direction(
        self,
        a: np.ndarray,
        pos: np.ndarray,
        nu: np.ndarray,
        g_n: np.ndarray,
        g_nu: np.ndarray,
        rho: float,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Newton direction on the free variables; bound ``nu_l`` go straight to 0.

        A free ``nu_l`` whose user has no active entry (every ``|N q_i| <= nu_l``) has zero
        curvature but slope ``T > 0``: it moves to its kink ``max_i |N q_i|`` instead of taking
        a Newton step (which would be of size ~ T / rho). A free ``nu_l`` at (or within the
        epsilon of) 0 whose Newton step points below 0 is fixed at 0 and the step recomputed,
        so that the projection does not bend the step away from descent.
        """
        dz, d, q = self.dz, self.dz.d, self.dz.q
        active = pos > 0
        signs = np.sign(a) * active
        diag = np.add.reduceat(active.sum(axis=0), dz.starts).astype(np.float64)
        # epsilon-active set of Bertsekas (1982): near 0 with a gradient pushing outwards.
        w = math.sqrt(np.vdot(g_n, g_n) + np.sum((nu - np.maximum(nu - g_nu, 0.0)) ** 2))
        near = nu <= min(1e-3 * float(nu.max(initial=0.0)), w)
        flat = ~(near & (g_nu > 0)) & (diag == 0) & (g_nu > 0)
        fixed = (near & (g_nu > 0)) | flat
        # Generalized Hessian: block diagonal in the rows of N (sum over active q_i q_i^T),
        # coupling B[(j,k), l] = -sum_{i in S_l} sign_ji q_ik, and diag(#active) + rho 11^T.
        hess = np.zeros((d * d, d * d))
        coupling: np.ndarray = np.empty((d, d, diag.size))
        for j in range(d):
            qa = q * active[j][:, None]
            hess[j * d : (j + 1) * d, j * d : (j + 1) * d] = qa.T @ q
            coupling[j] = -np.add.reduceat(q * signs[j][:, None], dz.starts).T
        coupling = coupling.reshape(d * d, diag.size)
        tau = 1e-12 * max(1.0, float(diag.max(initial=0.0)))
        hess[np.diag_indices(d * d)] += tau
        p_nu = -nu.copy()
        for _ in range(8):
            free = np.flatnonzero(~fixed)
            p_n, p_nu[free] = _schur_solve(
                hess, coupling[:, free], diag[free] + tau, rho, g_n.ravel(), g_nu[free]
            )
            leaving = ~fixed & near & (p_nu < 0)
            if not leaving.any():
                break
            fixed |= leaving
            p_nu[leaving] = -nu[leaving]
        if flat.any():
            kink = np.maximum.reduceat(np.abs(a).max(axis=0), dz.starts)
            p_nu[flat] = kink[flat] - nu[flat]
        return p_n.reshape(d, d), p_nu

    def _record(
        self,
        c: np.ndarray,
        n_mat: np.ndarray,
        nu: np.ndarray,
        a: np.ndarray,
        phi: float,
        rho: float,
        best: _Best,
    ) -> float:
        """Keep the best feasible ``c`` and the best lower bound; return this stage's gap.

        ``c`` is the primal point projected onto ``C Q = R^-1``. Lower bounds on the target
        problem (weak duality): ``-2 phi`` at ``rho_target`` (``phi`` falls as rho does), and
        ``||C_ols||^2 + T_low^2 / rho_target`` with ``T_low = <N, R^-1> / sum_l max_{i in S_l}
        ||N q_i||_inf <= min T`` (``N`` scaled to a feasible point of the dual of ``min T``).
        """
        dz = self.dz
        frob, t = float(np.vdot(c, c)), float(dz.user_l1(c).max())
        value = frob + t * t / self.rho_target
        if value < best.value:
            best.matrix, best.value = c, value
        primal, dual = frob + t * t / rho, -2.0 * phi
        s = float(nu.sum())
        best.lower = max(best.lower, dual + (rho - self.rho_target) * s * s)
        t_low = (
            np.vdot(n_mat, dz.rinv) / np.maximum.reduceat(np.abs(a).max(axis=0), dz.starts).sum()
        )
        if t_low > 0:
            best.lower = max(best.lower, self.frob_ols + t_low * t_low / self.rho_target)
        return (primal - dual) / primal

    def stage(
        self,
        n_mat: np.ndarray,
        nu: np.ndarray,
        rho: float,
        best: _Best,
        *,
        tol: float,
        max_iter: int,
    ) -> tuple[np.ndarray, np.ndarray, int, bool]:
        """Newton iterations at one ``rho`` until its relative gap is <= tol (or a stall).

        Also returns whether the best iterate is already certified for the target problem
        (``best.value - best.lower <= self.tol * best.value``), which ends the continuation.
        """
        dz = self.dz
        a, pos, phi = self._evaluate(n_mat, nu, rho)
        for it in range(max_iter + 1):
            c_soft = np.sign(a) * pos
            g_n = c_soft @ dz.q - dz.rinv  # = C Q - R^-1
            g_nu = rho * nu.sum() - np.add.reduceat(pos.sum(axis=0), dz.starts)  # T - g_l
            gap = self._record(c_soft - g_n @ dz.qt, n_mat, nu, a, phi, rho, best)
            if best.value - best.lower <= self.tol * best.value:
                return n_mat, nu, it, True
            if gap <= tol or it == max_iter:
                return n_mat, nu, it, False
            p_n, p_nu = self._direction(a, pos, nu, g_n, g_nu, rho)
            step = 1.0
            for _ in range(_MAX_HALVINGS):  # projected Armijo search
                n2, nu2 = n_mat + step * p_n, np.maximum(nu + step * p_nu, 0.0)
                a2, pos2, phi2 = self._evaluate(n2, nu2, rho)
                decrease = np.vdot(g_n, n2 - n_mat) + g_nu @ (nu2 - nu)
                if phi2 <= phi + _ARMIJO * decrease:
                    break
                step *= 0.5
            if not phi2 < phi:  # no decrease within rounding: the gap is as small as it gets
                return n_mat, nu, it, False
            n_mat, nu, a, pos, phi = n2, nu2, a2, pos2, phi2
        return n_mat, nu, max_iter, False


def _solve_dual(design: _Design, rho: float, *, tol: float, max_iter: int) -> tuple:
    """Continuation in rho from the OLS end down to the target (docs/estimate.md)."""
    dz = design
    ols = dz.rinv @ dz.qt
    frob = float(np.vdot(dz.rinv, dz.rinv))  # ||C_ols||_F^2 (Q orthonormal)
    t_ols = float(dz.user_l1(ols).max())
    best = _Best(ols, frob + t_ols * t_ols / rho)
    rho_star = t_ols * t_ols / frob
    stage_rho = max(rho, _STAGE_FACTOR * rho_star)
    solver = _DualNewton(dz, rho, tol)
    n_mat, nu = dz.rinv.copy(), np.zeros(dz.starts.size)  # the dual point of OLS
    used = 0
    while True:
        last = stage_rho <= rho * (1.0 + 1e-12)
        stage_rho = rho if last else stage_rho
        n_mat, nu, it, certified = solver.stage(
            n_mat, nu, stage_rho, best, tol=tol if last else _STAGE_TOL, max_iter=max_iter - used
        )
        used += it
        if last or certified or used >= max_iter:
            return best, used
        stage_rho /= _STAGE_FACTOR


def _solve_lp(design: _Design) -> tuple[np.ndarray, float]:
    """``min T`` s.t. ``C X = I`` and ``sum_{S_l} ||c_i||_1 <= T`` (sigma^2 = 0), by HiGHS.

    Variables ``[C+ (d*n), C- (d*n), T]``, ``C = C+ - C-``. Returns C (sorted order) and the
    LP's dual bound on ``T``.
    """
    dz = design
    n, d = dz.x.shape
    m = dz.starts.size
    # Equality rows (j, k): sum_i c_ji X_ik = delta_jk; column of c_ji is j * n + i.
    rows = (np.arange(d)[:, None, None] * d + np.arange(d)[None, None, :]).repeat(n, axis=1)
    cols = np.broadcast_to((np.arange(d)[:, None] * n + np.arange(n))[:, :, None], (d, n, d))
    vals = np.broadcast_to(dz.x[None, :, :], (d, n, d))
    e = sparse.csr_array((vals.ravel(), (rows.ravel(), cols.ravel())), shape=(d * d, d * n))
    a_eq = sparse.hstack([e, -e, sparse.csr_array((d * d, 1))], format="csr")
    # User rows l: sum_{i in S_l} sum_j (c+_ji + c-_ji) - T <= 0.
    user = np.tile(dz.codes, d)
    ones = np.ones(d * n)
    g = sparse.csr_array((ones, (user, np.arange(d * n))), shape=(m, d * n))
    a_ub = sparse.hstack([g, g, sparse.csr_array(-np.ones((m, 1)))], format="csr")
    cost = np.zeros(2 * d * n + 1)
    cost[-1] = 1.0
    res = optimize.linprog(
        cost,
        A_ub=a_ub,
        b_ub=np.zeros(m),
        A_eq=a_eq,
        b_eq=np.eye(d).ravel(),
        bounds=(0, None),
        method="highs",
    )
    if res.status != 0:
        raise DataError(
            f"solve_gwa: HiGHS could not solve the noise_variance=0 linear program "
            f"({res.message}); a small positive noise_variance uses the Newton solver instead."
        )
    c = (res.x[: d * n] - res.x[d * n : 2 * d * n]).reshape(d, n)
    lower = float(np.eye(d).ravel() @ res.eqlin.marginals)
    return dz.project(c), max(lower, 0.0)
