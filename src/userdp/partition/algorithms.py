"""Basic, DP-SIPS, MAD and MAD2R (k rounds), each written once against a runner.

All follow the weight-and-threshold meta-algorithm (Chen et al. 2025, "Scalable Private
Partition Selection via Adaptive Weighting", Alg. 1): cap each user's set, compute weights with
bounded l2 and novel l-infinity sensitivity, add Gaussian noise, release the items of the
round's input whose noisy weight reaches the threshold rho. Rounds are planned (noise scales,
thresholds, events) before any data is read (:mod:`userdp.partition.rounds`), and run on a
:class:`~userdp.partition.runner.Runner` (local NumPy or Spark).

:data:`SPECS` declares, once, every option each algorithm takes with its default; the
dispatcher (:func:`userdp.partition.select_partitions`) and the CLI read it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from userdp._validation import MAX_SELECTION_ROUNDS, check_int, check_real
from userdp.exceptions import InvalidParameterError
from userdp.partition.cap import AUTO_CAP_SHARE, CANDIDATES
from userdp.partition.rounds import (
    DEFAULT_THRESHOLD_SHARE,
    MAX_POOLED_ROUNDS,
    Plan,
    Round,
    check_composition,
    plan_rounds,
)
from userdp.partition.runner import Basic, Mad, Runner

__all__ = ["SPECS", "AlgorithmSpec"]

#: Options every algorithm takes, with their defaults.
COMMON: dict[str, Any] = {
    "max_items_per_user": 100,
    "seed": None,
    "user_column": "user",
    "item_column": "item",
}
_COMPOSITION = {
    "composition": "gaussian",
    "fractions": None,
    "delta_fractions": None,
    "threshold_share": DEFAULT_THRESHOLD_SHARE,
}


@dataclass(frozen=True)
class AlgorithmSpec:
    """One algorithm: its options (name -> default) and how it runs.

    ``check(caller, options)`` validates the options (before any data is read) and returns them
    completed; ``plan(budget, options)`` calibrates the rounds; ``steps(runner, plan,
    options)`` runs them. Sequential baselines have ``function`` (local data -> result) instead.
    """

    name: str
    caller: str
    options: Mapping[str, Any]
    engines: tuple[str, ...] = ("local", "spark")
    check: Callable[[str, dict[str, Any]], dict[str, Any]] | None = None
    plan: Callable[[Any, dict[str, Any]], Plan] | None = None
    steps: Callable[[Runner, Plan, dict[str, Any]], Any] | None = None
    function: Callable[..., Any] | None = None


# -- validation ---------------------------------------------------------------------------------
def _check_cap(caller: str, o: dict[str, Any]) -> int:
    """The cap, or for ``"auto"`` the largest cap the choice may make (for validation)."""
    if o["max_items_per_user"] == "auto":
        return max(CANDIDATES)
    return check_int(o["max_items_per_user"], "max_items_per_user", caller, low=1)


def _check_mad(caller: str, o: dict[str, Any]) -> dict[str, Any]:
    """MAD's parameters; d_max defaults to min(50, cap)."""
    cap = _check_cap(caller, o)
    if cap < 4:
        raise InvalidParameterError(
            f"{caller} needs max_items_per_user >= 4 (its privacy proof needs 4 <= d_max <= "
            f"max_items_per_user). Got max_items_per_user={cap!r}; use 'basic' or 'dp-sips' for "
            "smaller caps."
        )
    check_real(o["beta"], "beta", caller, low=0.0)
    if o["d_max"] is None:  # with an automatic cap, d_max follows the chosen cap
        return o if o["max_items_per_user"] == "auto" else {**o, "d_max": min(50, cap)}
    check_int(o["d_max"], "d_max", caller, low=4)
    if o["d_max"] > cap:
        raise InvalidParameterError(
            f"The 'd_max' parameter of {caller} must be an int in the range "
            f"[4, max_items_per_user={cap}]. Got {o['d_max']!r} instead."
        )
    return o


def _check_rounds(caller: str, o: dict[str, Any], rounds: int) -> dict[str, Any]:
    composition, frac, dfrac = check_composition(
        caller,
        o["composition"],
        rounds,
        o["fractions"],
        o["delta_fractions"],
        o["threshold_share"],
        "dp-sips" if caller == "dp_sips" else "mad2r",
        pooled=o.get("pooled", False),
    )
    return {**o, "composition": composition, "fractions": frac, "delta_fractions": dfrac}


def _check_pooled(caller: str, o: dict[str, Any]) -> dict[str, Any]:
    """``pooled`` needs gaussian composition and one cap (``recap`` None follows it)."""
    if not isinstance(o["pooled"], bool):
        raise InvalidParameterError(
            f"The 'pooled' parameter of {caller} must be True or False. Got {o['pooled']!r}."
        )
    if o["recap"] is None:
        return {**o, "recap": not o["pooled"]}
    if not isinstance(o["recap"], bool):
        raise InvalidParameterError(
            f"The 'recap' parameter of {caller} must be True, False or None. Got {o['recap']!r}."
        )
    if o["pooled"] and o["recap"]:
        raise InvalidParameterError(
            f"{caller} with pooled=True caps every user once (the pooled test's proof needs "
            "it); pass recap=False or leave it None."
        )
    return o


def _check_pooled_composition(caller: str, o: dict[str, Any]) -> dict[str, Any]:
    if o["pooled"] and o["composition"] != "gaussian":
        raise InvalidParameterError(
            f"{caller} with pooled=True needs composition='gaussian' (the pooled test adds "
            f"the rounds' noise into one Gaussian). Got composition={o['composition']!r}."
        )
    if o["pooled"] and o["rounds"] > MAX_POOLED_ROUNDS:
        raise InvalidParameterError(
            f"{caller} with pooled=True takes at most {MAX_POOLED_ROUNDS} rounds. Got "
            f"rounds={o['rounds']!r}."
        )
    return o


def _check_single(caller: str, o: dict[str, Any]) -> dict[str, Any]:
    _check_cap(caller, o)
    return _check_rounds(caller, o, 1)


def _check_mad_single(caller: str, o: dict[str, Any]) -> dict[str, Any]:
    return _check_single(caller, _check_mad(caller, o))


def _check_dp_sips(caller: str, o: dict[str, Any]) -> dict[str, Any]:
    _check_cap(caller, o)
    rounds = o["rounds"]
    if rounds is None:
        rounds = len(o["fractions"]) if isinstance(o["fractions"], (list, tuple)) else 2
    rounds = check_int(rounds, "rounds", caller, low=1, high=MAX_SELECTION_ROUNDS)
    o = _check_rounds(caller, _check_pooled(caller, o), rounds)
    return _check_pooled_composition(caller, {**o, "rounds": rounds})


def _check_mad2r(caller: str, o: dict[str, Any]) -> dict[str, Any]:
    o = _check_mad(caller, o)
    if o["pooled"] is None:  # the default: pooled under gaussian composition
        o = {**o, "pooled": o["composition"] == "gaussian"}
    if o["rounds"] is None:  # 4 pooled rounds, else the paper's 2
        o = {**o, "rounds": 4 if o["pooled"] is True else 2}
    rounds = check_int(o["rounds"], "rounds", caller, low=2, high=MAX_SELECTION_ROUNDS)
    o = {**o, "rounds": rounds}
    for name in ("c_lb", "c_ub"):
        check_real(o[name], name, caller, low=0.0)
    check_real(o["b_min"], "b_min", caller, low=0.5, high=1.0)
    check_real(o["b_max"], "b_max", caller, low=1.0)
    o = _check_rounds(caller, _check_pooled(caller, o), rounds)
    return _check_pooled_composition(caller, o)


def _plan(h_scales: Callable[[dict[str, Any]], list[float]]) -> Callable[..., Plan]:
    def plan(budget: Any, o: dict[str, Any]) -> Plan:
        cap = o["max_items_per_user"]
        return plan_rounds(
            budget,
            cap=100 if cap == "auto" else cap,  # the cost does not depend on the cap
            histogram_share=AUTO_CAP_SHARE if o["auto_cap"] else 0.0,
            h_scales=h_scales(o),
            composition=o["composition"],
            fractions=o["fractions"],
            delta_fractions=o["delta_fractions"],
            threshold_share=o["threshold_share"],
            pooled=o.get("pooled", False),
        )

    return plan


def _rounds(rounds: Sequence[Round]) -> list[dict[str, float]]:
    return [{"sigma": r.sigma, "rho": r.rho} for r in rounds]


# -- decisions between rounds (functions of the release only) ---------------------------------
@dataclass(frozen=True)
class ReleasedItems:
    """DP-SIPS between rounds: remove the items just released."""

    rho: float

    def __call__(self, noisy: Any, present: Any, ops: Any) -> tuple[Any, Any]:
        return present & (noisy >= self.rho), None


@dataclass(frozen=True)
class Mad2rDecision:
    """MAD2R between rounds r-1 and r (Alg. 4 lines 9-14) from round r-1's noisy weights.

    Remove the items released in round r-1 and those whose upper bound ``noisy + c_ub
    sigma_{r-1}`` is below every remaining threshold ``rho_floor = min_{s >= r} rho_s`` (lines
    11-13; = rho_2 for two rounds: an item hopeless in round r may still pass a later, lower
    threshold); bias the rest by ``b = min(1, rho_r / w_lb)`` with ``w_lb = max(0, noisy -
    c_lb sigma_{r-1})`` (lines 10, 14). In a pooled run ``rho`` is the pooled test's threshold
    rho_Y (what an item must reach in the end), not round r's own.
    """

    rho_prev: float
    sigma_prev: float
    rho: float
    rho_floor: float
    c_lb: float
    c_ub: float

    def __call__(self, noisy: Any, present: Any, ops: Any) -> tuple[Any, Any]:
        found = present & (noisy >= self.rho_prev)
        low = noisy + self.c_ub * self.sigma_prev < self.rho_floor  # lines 11-12
        w_lb = ops.maximum(noisy - self.c_lb * self.sigma_prev, 0.0)  # line 10
        bias = self.rho / ops.maximum(w_lb, self.rho)  # line 14: min(1, rho_r / w_lb)
        return found | low, bias


# -- the algorithms -----------------------------------------------------------------------------
def _basic_steps(run: Runner, plan: Plan, o: dict[str, Any]) -> Any:
    """Basic (Alg. 1 with Alg. 5): one round."""
    (rnd,) = plan.rounds
    run.cap()
    _, released = run.release(run.weights(Basic()), rnd)
    params = {"max_items_per_user": run.max_items_per_user, "sigma": rnd.sigma, "rho": rnd.rho}
    return run.finish([released], "basic", {**params, **plan.describe()}, plan)


def _mad_steps(run: Runner, plan: Plan, o: dict[str, Any]) -> Any:
    """MaxAdaptiveDegree (Alg. 3, unbiased): one round, tau = rho + beta sigma."""
    (rnd,) = plan.rounds
    tau = rnd.rho + o["beta"] * rnd.sigma
    run.cap()
    _, released = run.release(run.weights(Mad(tau=tau, d_max=o["d_max"])), rnd)
    params = {
        "max_items_per_user": run.max_items_per_user,
        "d_max": o["d_max"],
        "beta": o["beta"],
        "sigma": rnd.sigma,
        "rho": rnd.rho,
        "tau": tau,
    }
    return run.finish([released], "mad", {**params, **plan.describe()}, plan)


def _dp_sips_steps(run: Runner, plan: Plan, o: dict[str, Any]) -> Any:
    """DP-SIPS (Swanberg et al. 2023): Basic on the items not released in earlier rounds."""
    released: list[Any] = []
    noisy: Any = None
    history: list[Any] = []
    k = len(plan.rounds)
    for r, rnd in enumerate(plan.rounds):
        if r > 0:
            run.remove(noisy, ReleasedItems(plan.rounds[r - 1].rho))
        run.cap(recap=o["recap"])
        if plan.pooled is not None and r == k - 1:
            noisy, rel = run.release_pooled(run.weights(Basic()), rnd, history, plan.pooled)
        else:
            noisy, rel = run.release(run.weights(Basic()), rnd, every_item=plan.pooled is not None)
        history.append(noisy)
        released.append(rel)
    params = {
        "max_items_per_user": run.max_items_per_user,
        "recap": o["recap"],
        "pooled": o["pooled"],
        "rounds": _rounds(plan.rounds),
        **plan.describe(),
    }
    return run.finish(released, "dp-sips", params, plan)


def _mad2r_steps(run: Runner, plan: Plan, o: dict[str, Any]) -> Any:
    """MAD in k rounds, round r biased by round r-1's noisy weights (Alg. 4 for k = 2).

    Round 1 is unbiased MAD; round r > 1 removes the items released so far and those ruled out
    by round r-1, biases the rest (:class:`Mad2rDecision`), and runs biased MAD with
    h(t) = b_max/sqrt(t). Noisy weights of rounds < k cover every item a later round may hold
    (the w_ext of Alg. 1; without re-capping, the round's own items) and never leave the
    runner.
    """
    k = len(plan.rounds)
    released: list[Any] = []
    noisy: Any = None
    taus: list[Any] = []
    history: list[Any] = []
    for r, rnd in enumerate(plan.rounds):
        if r > 0:
            prev = plan.rounds[r - 1]
            floor = min(later.rho for later in plan.rounds[r:])
            # pooled: bias towards what the pooled test needs, not this round's own rho
            target = rnd.rho if plan.pooled is None else plan.pooled.rho
            decide = Mad2rDecision(prev.rho, prev.sigma, target, floor, o["c_lb"], o["c_ub"])
            run.remove(noisy, decide)
        run.cap(recap=o["recap"])
        tau = rnd.rho + o["beta"] * rnd.sigma
        taus.append(tau)
        rule = Mad(
            tau=tau,
            d_max=o["d_max"],
            biased=r > 0,
            b_min=o["b_min"] if r > 0 else 1.0,
            b_max=o["b_max"] if r > 0 else 1.0,
        )
        if plan.pooled is not None and r == k - 1:  # the pooled final test
            noisy, rel = run.release_pooled(run.weights(rule), rnd, history, plan.pooled)
        else:
            noisy, rel = run.release(run.weights(rule), rnd, every_item=r < k - 1)
        history.append(noisy)
        released.append(rel)
    params = {
        "max_items_per_user": run.max_items_per_user,
        **{n: o[n] for n in ("d_max", "beta", "c_lb", "c_ub", "b_min", "b_max", "recap")},
        "pooled": o["pooled"],
        "rounds": [{**d, "tau": t} for d, t in zip(_rounds(plan.rounds), taus, strict=True)],
        **plan.describe(),
    }
    return run.finish(released, "mad2r", params, plan)


_MAD = {"d_max": None, "beta": 2.0}


def _spec(name: str, caller: str, options: dict[str, Any], **kw: Any) -> AlgorithmSpec:
    return AlgorithmSpec(name, caller, MappingProxyType({**COMMON, **options}), **kw)


SPECS: dict[str, AlgorithmSpec] = {
    "mad2r": _spec(
        "mad2r",
        "mad2r",
        {
            # pilot draw (seed 0, 2 seeds, mean items): 2 rounds unpooled (the former default)
            # 2857; pooled with p_r proportional to r: 4 rounds 3500, 5 rounds 3557 (1.7x
            # the time of 4), 6 rounds 3509, 8 rounds 3253; 3 rounds 3325
            "rounds": None,  # 4 when pooled, else 2
            **_COMPOSITION,
            **_MAD,
            "c_lb": 1.0,
            "c_ub": 3.0,
            "b_min": 0.5,
            "b_max": 1.25,  # pilot: 1.25 beat 2 on 10 paired seeds (+4.6 items, 8 of 10)
            "recap": None,  # None: True, or False (cap once) when pooled
            "pooled": None,  # None: True under composition="gaussian"
        },
        check=_check_mad2r,
        plan=_plan(lambda o: [1.0] + [o["b_max"]] * (o["rounds"] - 1)),
        steps=_mad2r_steps,
    ),
    "mad": _spec(
        "mad",
        "mad",
        {**_COMPOSITION, **_MAD},
        check=_check_mad_single,
        plan=_plan(lambda o: [1.0]),
        steps=_mad_steps,
    ),
    "basic": _spec(
        "basic",
        "basic",
        dict(_COMPOSITION),
        check=_check_single,
        plan=_plan(lambda o: [1.0]),
        steps=_basic_steps,
    ),
    "dp-sips": _spec(
        "dp-sips",
        "dp_sips",
        {"rounds": None, **_COMPOSITION, "recap": None, "pooled": False},
        check=_check_dp_sips,
        plan=_plan(lambda o: [1.0] * o["rounds"]),
        steps=_dp_sips_steps,
    ),
}
