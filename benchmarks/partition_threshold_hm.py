"""Can a non-additive release primitive replace the Gaussian threshold of MAD2R's final test?

Harrison & Manurangsi (2026, "Optimal partition selection with Renyi differential privacy",
arXiv 2603.09167) give release rules that are optimal under delta-approximate (alpha,
epsilon)-Renyi DP and offer one for l2-bounded weighted selection as a drop-in improvement over
the Gaussian mechanism when the counts are not released. userdp accounts a selection as ONE
Gaussian (exact composition, analytic conversion; the accountant's PLD-equivalent treatment of
Gaussian events) plus threshold deltas. This script measures what that accounting allows.

Part 1, ``gdp``: under userdp's accounting the Gaussian threshold is already the best release
rule. A rule that releases item i with probability p(w_i) (w_i its weight, coins independent)
may be recorded as the Gaussian event of scale sigma only if, for every weight w and change
0 < d <= 1, Bernoulli(p(w + d)) against Bernoulli(p(w)) is dominated by N(d, sigma^2) against
N(0, sigma^2) (a user with one item moves one coordinate alone). For two Bernoullis that is
``Phi^-1(p(w + d)) - Phi^-1(p(w)) <= d / sigma``; novel items pin ``p(h(t)) <= q_t``. The
largest p allowed at every w is therefore ``min_t Phi(Phi^-1(q_t) + (w - h(t)) / sigma)``,
which is exactly ``Phi((w - rho) / sigma)`` with userdp's rho. The script computes that largest
rule by a forward recursion on a grid (no closed form used) and prints its distance to the
Gaussian threshold's curve.

Part 2, ``rdp``: what an RDP accountant would buy. The Gaussian calibrated by RDP at (epsilon,
delta_g) needs a larger sigma than the analytic one; the best single-order rule (largest
p(w) with ``D_alpha(Bern(p(w+d)) || Bern(p(w))) <= alpha d^2 / (2 sigma^2)`` both ways, the
same anchors) is computed on a grid. The grid enforces the constraint only between grid points,
so the curve is an UPPER bound on any such rule (optimistic for the RDP side).

Part 3, ``pilot``: items released on the pilot draw (Zipf generator, seed 0, 200,000 users,
exponent 1.1; seeds 0-4). In MAD2R only the last round can use a non-additive rule (rounds
1..k-1 must release their noisy weights: later rounds' biases and removals read them); the
pooled default uses that round to pool the earlier rounds' noise, which a non-additive rule
cannot. Rows: the pooled default (measured); 4 unpooled rounds capped once with the Gaussian
last round (measured, and its expectation from the last round's true weights as a check); the
same at the RDP-calibrated sigma (measured); and the expectation of the RDP-optimal last round
(upper bound) at the RDP sigma, and at the analytic sigma (not a valid mechanism: the size of
the effect if RDP accounting were free).

Part 4, ``pooled-ideal``: the ceiling of an RDP rule that keeps pooling (see
:func:`pooled_ideal`; an estimate, not a mechanism). Run from the repository root::

    nice -n 10 python benchmarks/partition_threshold_hm.py [--part all] [--seeds 5]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from scipy import optimize, special, stats

from _harness import RESULTS, log, pyplot, versions
from userdp.privacy import gaussian_sigma, partition_threshold

EPS, DELTA = 1.0, 1e-5
THRESHOLD_SHARE = 0.5  # userdp's default: delta_g = dt_total = delta / 2
POOLED_FRACTIONS = (0.1, 0.2, 0.3, 0.4)  # the pooled default's precision shares (4 rounds)
DT_LAST = 0.95  # share of the threshold delta of the last test
B_MAX = 1.25  # MAD2R's default b_max: the biased rounds' novel bound h(t) = b_max / sqrt(t)


# -- anchors -------------------------------------------------------------------------------------
def anchors(dt: float, cap: int, h_scale: float) -> tuple[np.ndarray, np.ndarray]:
    """``(h_t, q_t)`` for t = 1..cap: a novel item of a degree-t user has weight <= h_t and may
    be released with probability <= q_t = 1 - (1 - dt)^(1/t) (then P(any of t) <= dt)."""
    t = np.arange(1, cap + 1, dtype=np.float64)
    return h_scale / np.sqrt(t), -np.expm1(np.log1p(-dt) / t)


def grid_with_anchors(h: np.ndarray, top: float, step: float) -> np.ndarray:
    return np.unique(np.concatenate([np.arange(0.0, top + step, step), h]))


def anchor_cap(w: np.ndarray, h: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Largest probability the anchors allow at each w: min of q_t over t with w <= h_t."""
    out = np.ones_like(w)
    for ht, qt in zip(h, q, strict=True):
        out = np.where(w <= ht, np.minimum(out, qt), out)
    return out


# -- part 1: the largest rule under Gaussian (f-DP) domination -----------------------------------
def gdp_largest_rule(w: np.ndarray, sigma: float, cap_p: np.ndarray) -> np.ndarray:
    """Largest p on the grid w with Bern(p(w_j)) vs Bern(p(w_i)) dominated by the Gaussian
    trade-off G_mu, mu = (w_j - w_i)/sigma, for all w_i < w_j <= w_i + 1, and p <= cap_p.

    Domination of a Bernoulli pair (q below p): its trade-off curve is the chord through
    (q, 1 - p); it lies above the convex G_mu iff 1 - p >= G_mu(q) = Phi(Phi^-1(1 - q) - mu).
    Larger earlier values only loosen later constraints, so the forward pass is optimal.
    """
    p = np.empty_like(w)
    for j in range(w.size):
        best = cap_p[j]
        lo = np.searchsorted(w, w[j] - 1.0, side="left")
        if j > lo:
            mu = (w[j] - w[lo:j]) / sigma
            g = stats.norm.cdf(stats.norm.ppf(1.0 - p[lo:j]) - mu)  # G_mu(p_i)
            best = min(best, float(np.min(1.0 - g)))
        p[j] = best
    return p


# -- part 2: RDP --------------------------------------------------------------------------------
def rdp_epsilon(sigma: float, delta: float, alpha: float) -> float:
    """(eps, delta)-DP of the Gaussian (sensitivity 1) from its RDP alpha/(2 sigma^2) at one
    order, by the conversion of Canonne, Kamath & Steinke 2020, Prop. 12."""
    return alpha / (2 * sigma**2) + math.log1p(-1 / alpha) - math.log(delta * alpha) / (alpha - 1)


def rdp_sigma(epsilon: float, delta: float) -> tuple[float, float]:
    """(sigma, alpha): the smallest Gaussian sigma whose RDP converts to (epsilon, delta) at
    some order, and that order (continuous search over alpha)."""

    def eps_of(sigma: float) -> tuple[float, float]:
        r = optimize.minimize_scalar(
            lambda a: rdp_epsilon(sigma, delta, a), bounds=(1.01, 1e4), method="bounded"
        )
        return float(r.fun), float(r.x)

    s = optimize.brentq(lambda s: eps_of(s)[0] - epsilon, 0.2, 100.0, xtol=1e-12)
    s = s * (1 + 1e-9)  # toward more noise
    return s, eps_of(s)[1]


def bern_renyi(p: np.ndarray, q: np.ndarray, alpha: float) -> np.ndarray:
    """D_alpha(Bern(p) || Bern(q)), element-wise, in log space."""
    a = alpha * np.log(p) + (1 - alpha) * np.log(q)
    b = alpha * np.log1p(-p) + (1 - alpha) * np.log1p(-q)
    return np.logaddexp(a, b) / (alpha - 1)


def rdp_largest_rule(
    w: np.ndarray, sigma: float, alpha: float, cap_p: np.ndarray, iters: int = 60
) -> np.ndarray:
    """Largest p on the grid with D_alpha both ways <= alpha d^2/(2 sigma^2) between every two
    grid points at distance d <= 1, and p <= cap_p (bisection on the log-odds)."""
    p = np.empty_like(w)
    for j in range(w.size):
        lo_i = np.searchsorted(w, w[j] - 1.0, side="left")
        prev, d = p[lo_i:j], w[j] - w[lo_i:j]
        if j == lo_i:
            p[j] = cap_p[j]
            continue
        budget = alpha * d**2 / (2 * sigma**2)
        lo, hi = special.logit(max(prev.max(), 1e-300)), special.logit(min(cap_p[j], 1 - 1e-15))

        def ok(x: float, prev: np.ndarray = prev, budget: np.ndarray = budget) -> bool:
            pj = np.full(prev.shape, special.expit(x))
            f = bern_renyi(pj, prev, alpha) <= budget
            return bool(np.all(f & (bern_renyi(prev, pj, alpha) <= budget)))

        if ok(hi):
            p[j] = special.expit(hi)
            continue
        for _ in range(iters):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if ok(mid) else (lo, mid)
        p[j] = special.expit(lo)
    return p


def crossing(w: np.ndarray, p: np.ndarray, level: float) -> float:
    """Smallest grid weight where the release probability reaches ``level``."""
    idx = np.flatnonzero(p >= level)
    return float(w[idx[0]]) if idx.size else math.inf


# -- part 3: pilot --------------------------------------------------------------------------------
def epsilon_for_sigma(sigma: float, delta_g: float) -> float:
    """The epsilon at which userdp's analytic calibration gives ``sigma`` (to run MAD2R with
    the RDP-calibrated noise through the public API: plan_rounds uses gaussian_sigma)."""
    return optimize.brentq(lambda e: gaussian_sigma(e, delta_g) - sigma, 0.05, 5.0, xtol=1e-13)


def _gaussian_rule(x: np.ndarray, rho: float, sigma: float) -> np.ndarray:
    return stats.norm.sf((rho - x) / sigma)


def expected_last_round(weights: dict[Any, float], rule: Any) -> float:
    w = np.fromiter(weights.values(), dtype=np.float64, count=len(weights))
    return float(np.sum(rule(w)))


def pilot(seeds: int, sigma_r: float, alpha: float, cap: int, step: float) -> dict[str, Any]:
    from userdp.data import zipf_contributions
    from userdp.partition import select_partitions
    from userdp.partition.runner import Tap

    c = zipf_contributions(200_000, item_exponent=1.1, seed=0)  # the pilot draw
    log(f"pilot draw: {c}")
    delta_g = DELTA * (1 - THRESHOLD_SHARE)
    dt_last = DELTA * THRESHOLD_SHARE * DT_LAST
    q = (1 - DT_LAST) / 3  # rounds 1-3 share the rest of the threshold delta evenly
    unpooled = {
        "rounds": 4,
        "pooled": False,
        "recap": False,
        "fractions": POOLED_FRACTIONS,
        "delta_fractions": (q, q, q, DT_LAST),
        "max_items_per_user": cap,
    }
    eps_r = epsilon_for_sigma(sigma_r, delta_g)
    sigma_p = gaussian_sigma(EPS, delta_g)
    h, qq = anchors(dt_last, cap, B_MAX)
    rules: dict[str, Any] = {}
    for tag, s_tot in (("analytic", sigma_p), ("rdp", sigma_r)):
        s_k = s_tot / math.sqrt(POOLED_FRACTIONS[-1])
        top = partition_threshold(s_k, 2 * dt_last, cap, B_MAX) + 8 * s_k
        w = grid_with_anchors(h, top, step)
        p = rdp_largest_rule(w, s_k, alpha, anchor_cap(w, h, qq))
        rho = partition_threshold(s_k, 2 * dt_last, cap, B_MAX)
        rules[tag] = {
            "sigma_last": s_k,
            "rho_gaussian": rho,
            "rdp_rule": (w, p),
            "w50_gaussian": rho,
            "w50_rdp_rule": crossing(w, p, 0.5),
            "w90_gaussian": rho + s_k * stats.norm.ppf(0.9),
            "w90_rdp_rule": crossing(w, p, 0.9),
        }
        log(
            f"  last round, {tag} sigma {s_k:.4f}: 50% release at w = {rho:.2f} (Gaussian) vs "
            f"{rules[tag]['w50_rdp_rule']:.2f} (RDP-optimal rule); 90% at "
            f"{rules[tag]['w90_gaussian']:.2f} vs {rules[tag]['w90_rdp_rule']:.2f}"
        )
    rows: dict[str, list[float]] = {
        "pooled default (measured)": [],
        "unpooled 4r capped once (measured)": [],
        "unpooled 4r capped once (expected from last-round weights)": [],
        "unpooled 4r at RDP sigma, Gaussian last round (measured)": [],
        "unpooled 4r at RDP sigma, RDP-optimal last round (expected, upper bound)": [],
        "unpooled 4r, RDP-optimal last round at the analytic sigma (NOT private: scale only)": [],
    }

    def interp(tag: str) -> Any:
        w, p = rules[tag]["rdp_rule"]
        # step function from below: the grid value at the largest grid point <= w (p increases)
        return lambda x: p[np.clip(np.searchsorted(w, x, side="right") - 1, 0, w.size - 1)]

    for s in range(seeds):
        t0 = time.perf_counter()
        rows["pooled default (measured)"].append(
            len(select_partitions(c, epsilon=EPS, delta=DELTA, seed=s, max_items_per_user=cap))
        )
        for tag, eps in (("analytic", EPS), ("rdp", eps_r)):
            tap = Tap()
            r = select_partitions(c, epsilon=eps, delta=DELTA, seed=s, _tap=tap, **unpooled)
            last = tap.weights[-1]
            before = sum(1 for i in r.items if i not in last)
            s_k, rho = rules[tag]["sigma_last"], rules[tag]["rho_gaussian"]
            exp_rdp = before + expected_last_round(last, interp(tag))
            if tag == "analytic":
                rows["unpooled 4r capped once (measured)"].append(len(r))
                gauss = partial(_gaussian_rule, rho=rho, sigma=s_k)
                g = before + expected_last_round(last, gauss)
                rows["unpooled 4r capped once (expected from last-round weights)"].append(g)
                rows[
                    "unpooled 4r, RDP-optimal last round at the analytic sigma (NOT private: "
                    "scale only)"
                ].append(exp_rdp)
            else:
                rows["unpooled 4r at RDP sigma, Gaussian last round (measured)"].append(len(r))
                rows[
                    "unpooled 4r at RDP sigma, RDP-optimal last round (expected, upper bound)"
                ].append(exp_rdp)
        log(f"  seed {s}: {time.perf_counter() - t0:.1f} s")
    out: dict[str, Any] = {"epsilon_for_rdp_sigma": eps_r, "rows": {}}
    for k, v in rows.items():
        a = np.asarray(v, float)
        out["rows"][k] = {"values": v, "mean": float(a.mean()), "sd": float(a.std(ddof=1))}
        log(f"  {k:86s} {a.mean():8.1f} +- {a.std(ddof=1):5.1f}")
    for tag in rules:
        rules[tag].pop("rdp_rule")
    out["last_round"] = rules
    return out


# -- part 4: an idealised pooled rule --------------------------------------------------------------
def pooled_ideal(seeds: int, sigma_r: float, alpha: float, cap: int, step: float) -> dict[str, Any]:
    """The ceiling of an RDP-accounted rule that KEEPS pooling (not a mechanism: an estimate).

    The pooled default tests Y = sum_r p_r X_r, i.e. each item's precision-weighted mean weight
    m = sum_r p_r w_r under N(0, s_Y^2), s_Y about sigma_tot. Idealise: release each item of the
    last round with the largest single-order RDP rule at the WHOLE run's RDP sigma applied to m
    (anchored at the pooled novel bound H(t)), as if the whole budget bought one non-additive
    test of m; rounds 1-3 run as in the pooled default at that sigma. This overstates what any
    real rule can do (rounds 1-3 spend budget on their own noisy vectors), so if it does not
    beat the pooled default by much, no RDP rule will. Expected counts from the recorded
    pre-noise weights. They miss the selection effect (an item still in play at the last round
    tends to have had positive noise, which Y keeps and m does not), so they sit below the
    measured count; compare the idealised rule with the Gaussian test computed the same way
    ("expected from m"), not with the measured count.
    """
    from userdp.data import zipf_contributions
    from userdp.partition import select_partitions
    from userdp.partition.runner import Tap

    c = zipf_contributions(200_000, item_exponent=1.1, seed=0)  # the pilot draw
    delta_g = DELTA * (1 - THRESHOLD_SHARE)
    dt_y = DELTA * THRESHOLD_SHARE * DT_LAST
    eps_r = epsilon_for_sigma(sigma_r, delta_g)
    h_scales = (1.0,) + (B_MAX,) * (len(POOLED_FRACTIONS) - 1)
    t = np.arange(1, cap + 1, dtype=np.float64)
    shares = zip(POOLED_FRACTIONS, h_scales, strict=True)
    h_y = sum(p * np.minimum(1.0, hs / np.sqrt(t)) for p, hs in shares)  # the pooled H(t)
    q_y = -np.expm1(np.log1p(-dt_y) / t)
    out: dict[str, Any] = {"epsilon_for_rdp_sigma": eps_r, "rows": {}}
    rows: dict[str, list[float]] = {}
    for tag, eps in (("analytic", EPS), ("rdp", eps_r)):
        sigma_y = gaussian_sigma(eps, delta_g)
        top = float(np.max(h_y)) + sigma_y * 12
        w = grid_with_anchors(h_y, top, step)
        p_rule = rdp_largest_rule(w, sigma_y, alpha, anchor_cap(w, h_y, q_y))
        w50 = crossing(w, p_rule, 0.5)
        log(f"  pooled, {tag} sigma_tot {sigma_y:.4f}: RDP-optimal rule on m, 50% at {w50:.2f}")
        for s in range(seeds):
            tap = Tap()
            r = select_partitions(c, epsilon=eps, delta=DELTA, seed=s, _tap=tap)
            last = tap.weights[-1]
            m = np.zeros(len(last))
            keys = list(last)
            for p, wr in zip(POOLED_FRACTIONS, tap.weights, strict=True):
                m += p * np.array([wr.get(k, 0.0) for k in keys])
            before = sum(1 for i in r.items if i not in last)
            rho_y = r.parameters["pooled"]["rho"]
            s_y = r.parameters["pooled"]["sigma"]
            rows.setdefault(f"pooled at {tag} sigma (measured)", []).append(len(r))
            rows.setdefault(f"pooled at {tag} sigma (expected from m)", []).append(
                before + float(np.sum(stats.norm.sf((rho_y - m) / s_y)))
            )
            idx = np.clip(np.searchsorted(w, m, side="right") - 1, 0, w.size - 1)
            key = f"pooled at {tag} sigma, idealised RDP rule on m (expected)"
            if tag == "analytic":
                key += " (NOT private: scale only)"
            rows.setdefault(key, []).append(before + float(np.sum(p_rule[idx])))
    for k, v in rows.items():
        a = np.asarray(v, float)
        out["rows"][k] = {"values": v, "mean": float(a.mean()), "sd": float(a.std(ddof=1))}
        log(f"  {k:86s} {a.mean():8.1f} +- {a.std(ddof=1):5.1f}")
    return out


def plot_curves(
    curves: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]], path: Path
) -> Path | None:
    """Release probability against weight: the Gaussian threshold at the analytic and at the
    RDP sigma, and the largest single-order RDP rule at the RDP sigma (one round)."""
    plt = pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    w, _, g = curves["analytic sigma, Gaussian threshold"]
    ax.plot(w, g, label="Gaussian threshold, analytic sigma (userdp)")
    w, p_r, g = curves["rdp sigma"]
    ax.plot(w, g, "--", label="Gaussian threshold, RDP sigma")
    ax.plot(w, p_r, label="largest single-order RDP rule, RDP sigma (upper bound)")
    ax.set_xlabel("item weight w (one round, cap 100)")
    ax.set_ylabel("release probability")
    ax.set_xlim(5, 35)
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title("epsilon 1, delta 1e-5: release rules (benchmarks/partition_threshold_hm.py)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--part", choices=("all", "gdp", "rdp", "pilot", "pooled-ideal"), default="all")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--cap", type=int, default=100)
    p.add_argument("--step", type=float, default=0.02, help="weight grid step")
    p.add_argument("--out", type=Path, default=RESULTS / "partition_threshold_hm.json")
    args = p.parse_args()
    t0 = time.perf_counter()
    res: dict[str, Any] = {
        "epsilon": EPS,
        "delta": DELTA,
        "load_average_start": os.getloadavg(),
        "versions": versions(),
    }
    delta_g = DELTA * (1 - THRESHOLD_SHARE)
    dt = DELTA * THRESHOLD_SHARE
    sigma_p = gaussian_sigma(EPS, delta_g)
    sigma_r, alpha = rdp_sigma(EPS, delta_g)
    res["sigma_analytic"], res["sigma_rdp"], res["rdp_order"] = sigma_p, sigma_r, alpha
    log(
        f"sigma_tot at (eps={EPS}, delta_g={delta_g:g}): analytic {sigma_p:.5f}, RDP {sigma_r:.5f}"
        f" (order {alpha:.2f}): x{sigma_r / sigma_p:.4f}"
    )
    if args.part in ("all", "gdp"):
        h, q = anchors(dt, args.cap, 1.0)
        rho = partition_threshold(sigma_p, 2 * dt, args.cap)
        w = grid_with_anchors(h, rho + 6 * sigma_p, args.step)
        p_best = gdp_largest_rule(w, sigma_p, anchor_cap(w, h, q))
        p_gauss = stats.norm.sf((rho - w) / sigma_p)
        above = w >= h[0]
        gap = float(np.max(np.abs(p_best[above] - p_gauss[above])))
        res["gdp"] = {"rho": rho, "max_abs_gap_above_h1": gap, "grid_points": int(w.size)}
        log(f"gdp: largest Gaussian-dominated rule vs Phi((w - rho)/sigma): max gap {gap:.2e}")
    if args.part in ("all", "rdp"):
        h, q = anchors(dt, args.cap, 1.0)
        rows = []
        curves: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        for tag, s in (("analytic sigma, Gaussian threshold", sigma_p), ("rdp sigma", sigma_r)):
            rho = partition_threshold(s, 2 * dt, args.cap)
            w = grid_with_anchors(h, rho + 6 * s, args.step)
            p_r = rdp_largest_rule(w, s, alpha, anchor_cap(w, h, q))
            row = {
                "sigma": s,
                "gaussian_w50": rho,
                "gaussian_w90": rho + s * stats.norm.ppf(0.9),
                "rdp_rule_w50": crossing(w, p_r, 0.5),
                "rdp_rule_w90": crossing(w, p_r, 0.9),
            }
            rows.append((tag, row))
            curves[tag] = (w, p_r, stats.norm.sf((rho - w) / s))
            log(
                f"rdp, one round, {tag}: sigma {s:.4f}: Gaussian 50%/90% at "
                f"{row['gaussian_w50']:.2f}/{row['gaussian_w90']:.2f}; RDP-optimal rule 50%/90% at "
                f"{row['rdp_rule_w50']:.2f}/{row['rdp_rule_w90']:.2f}"
            )
        res["rdp"] = dict(rows)
        png = plot_curves(curves, args.out.with_suffix(".png"))
        if png is not None:
            res["pngs"] = [str(png)]
    if args.part in ("all", "pilot"):
        res["pilot"] = pilot(args.seeds, sigma_r, alpha, args.cap, args.step)
    if args.part in ("all", "pooled-ideal"):
        res["pooled_ideal"] = pooled_ideal(args.seeds, sigma_r, alpha, args.cap, args.step)
    res["load_average_end"] = os.getloadavg()
    res["seconds"] = time.perf_counter() - t0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2, default=float))
    log(f"load average {res['load_average_start']} -> {res['load_average_end']}")
    log(f"{res['seconds']:.0f} s; wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
