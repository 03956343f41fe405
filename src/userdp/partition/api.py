"""One entry point: choose the algorithm and the engine, check the budget, run."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any

from userdp._engines import ENGINES, resolve_engine
from userdp._validation import check_choice
from userdp.exceptions import InvalidParameterError
from userdp.partition.algorithms import COMMON, SPECS, AlgorithmSpec
from userdp.partition.baselines import greedy_update, policy_gaussian
from userdp.partition.cap import choose_cap
from userdp.partition.result import SelectionResult, SparkSelectionResult
from userdp.partition.runner import Tap
from userdp.partition.select import LocalRunner
from userdp.privacy import (
    LaplaceThresholdDpEvent,
    PrivacyAccountant,
    approximate_budget,
    check_accountant,
)

__all__ = ["ALGORITHMS", "ENGINES", "basic", "dp_sips", "mad", "mad2r", "select_partitions"]

#: Every algorithm by name, with the options it takes (declared once, here and in
#: :data:`userdp.partition.algorithms.SPECS`).
ALGORITHMS: dict[str, AlgorithmSpec] = {
    **SPECS,
    "policy-gaussian": AlgorithmSpec(
        "policy-gaussian",
        "policy_gaussian",
        {**COMMON, "beta": 4.0, "show_progress": False},
        engines=("local",),
        function=policy_gaussian,
    ),
    "greedy-update": AlgorithmSpec(
        "greedy-update",
        "greedy_update",
        {**COMMON, "max_items_per_user": 10, "beta": 4.0, "show_progress": False},
        engines=("local",),
        function=greedy_update,
    ),
}


def select_partitions(
    data: Any,
    *,
    epsilon: float,
    delta: float,
    algorithm: str = "mad2r",
    engine: str = "auto",
    accountant: PrivacyAccountant | None = None,
    progress: Callable[[int, int], object] | None = None,
    _tap: Tap | None = None,
    **options: Any,
) -> SelectionResult | SparkSelectionResult:
    """Privately select the items (partition keys) that may be published.

    Parameters
    ----------
    data : Contributions, pyarrow.Table, pandas.DataFrame, (users, items), iterable of pairs, \
or pyspark.sql.DataFrame
        One row per (user, item) contribution; repeated pairs count once.
    epsilon, delta : float
        The user-level budget: epsilon in (0, inf), delta in (0, 1).
    algorithm : {"mad2r", "mad", "basic", "dp-sips", "policy-gaussian", "greedy-update"}
        ``"mad2r"`` (default) releases the most items among the parallel algorithms.
    engine : {"auto", "local", "spark"}, default="auto"
        ``"spark"`` runs on a Spark DataFrame (parallel algorithms only) and returns a
        :class:`SparkSelectionResult`; ``"auto"`` picks it when ``data`` is a Spark DataFrame.
    accountant : PrivacyAccountant or None, default=None
        Charge the selection to this accountant (its ledger gets the run's event). If the
        accountant has a budget the selection cannot fit in, :class:`BudgetExceededError` is
        raised before any data is read.
    progress : callable or None, default=None
        ``progress(done, total)``, for a progress bar: called with 0 rounds done before the
        first round and after each round's release, ``total`` the number of rounds. The local
        engine's parallel algorithms only (never called otherwise). It only counts: the rounds
        are a parameter, not the data, and the release (its noise too) is the same without it.
    **options
        The algorithm's options (``ALGORITHMS[algorithm].options`` lists them with their
        defaults): ``max_items_per_user``, ``seed``, ``user_column``, ``item_column``;
        ``composition`` ("gaussian" or "basic"), ``rounds``, ``fractions``, ``recap``, ... for
        the parallel algorithms; see :func:`userdp.partition.mad2r` and the others.

    Returns
    -------
    SelectionResult or SparkSelectionResult

    Examples
    --------
    >>> pairs = [(u, w) for u in range(3000) for w in ("the", "a", f"rare{u}")]
    >>> sorted(select_partitions(pairs, epsilon=1.0, delta=1e-5, seed=1).items)
    ['a', 'the']
    """
    name = check_choice(algorithm, "algorithm", "select_partitions", list(ALGORITHMS))
    spec = ALGORITHMS[name]
    engine = resolve_engine(data, engine, "select_partitions")
    unknown = sorted(set(options) - set(spec.options))
    if unknown:
        raise InvalidParameterError(
            f"The {name!r} algorithm does not take the option(s) "
            f"{', '.join(map(repr, unknown))}; it takes {', '.join(map(repr, spec.options))}."
        )
    if engine not in spec.engines:
        raise InvalidParameterError(
            f"The {name!r} algorithm is sequential and has no Spark engine; use one of "
            f"{', '.join(repr(n) for n, s in ALGORITHMS.items() if engine in s.engines)} or "
            "the local engine."
        )
    total = approximate_budget(epsilon, delta, spec.caller)
    check_accountant(accountant, "accountant", "select_partitions")
    if progress is not None and not callable(progress):
        raise InvalidParameterError(
            "The 'progress' parameter of select_partitions must be a callable or None. Got "
            f"{progress!r} instead."
        )
    if spec.function is not None:  # sequential baselines: one local function each
        if accountant is not None:
            # same basic-composition cost (epsilon, delta) as the baselines' own events
            accountant.check(
                LaplaceThresholdDpEvent(epsilon, delta, 1.0, 1.0),
                seed=options.get("seed"),
                caller="select_partitions",
            )
        result = spec.function(data, epsilon=epsilon, delta=delta, **options)
    else:
        # a spec without a function has check, plan and steps
        assert spec.check is not None and spec.plan is not None and spec.steps is not None
        o = spec.check(spec.caller, {**spec.options, **options})
        o["auto_cap"] = o["max_items_per_user"] == "auto"
        plan = spec.plan(total, o)
        if accountant is not None:
            accountant.check(plan.event, seed=o["seed"], caller="select_partitions")
        rounds = None
        if progress is not None and engine == "local":
            k = len(plan.rounds)  # a re-plan for an automatic cap keeps the number of rounds
            progress(0, k)

            def rounds(done: int) -> None:
                progress(done, k)

        runner = _runner(engine, data, spec, o, _tap, rounds)
        try:
            if o["auto_cap"]:
                o, plan = _auto_cap(runner, spec, total, o, plan)
            result = spec.steps(runner, plan, o)
        except BaseException:
            # Best effort: freeing the engine's frames must never replace the error (or the
            # Ctrl-C) that got here, e.g. a py4j call failing after an interrupted one.
            with contextlib.suppress(Exception):
                runner.abort()
            raise
    if accountant is not None:
        accountant.compose(result.dp_event, seed=options.get("seed"), caller="select_partitions")
    return result


def _auto_cap(
    runner: Any, spec: AlgorithmSpec, total: Any, o: dict[str, Any], plan: Any
) -> tuple[dict[str, Any], Any]:
    """Release the degree histogram, choose the cap from it, and re-plan with that cap."""
    noisy = runner.release_degree_histogram(plan.histogram_sigma)
    plan_of = spec.plan
    assert plan_of is not None  # only planned algorithms choose their cap

    def rho_of(c: int) -> float:
        return plan_of(total, {**o, "max_items_per_user": c}).rounds[-1].rho

    cap = choose_cap(noisy, plan.histogram_sigma, rho_of, fallback=COMMON["max_items_per_user"])
    if "d_max" in o:  # MAD: d_max <= cap; default min(50, cap)
        cap = max(cap, o["d_max"] or 0)
        o = {**o, "d_max": o["d_max"] or min(50, cap)}
    o = {**o, "max_items_per_user": cap}
    runner.set_cap(cap)
    return o, plan_of(total, o)


def _runner(
    engine: str,
    data: Any,
    spec: AlgorithmSpec,
    o: Mapping[str, Any],
    tap: Any,
    progress: Callable[[int], object] | None = None,
) -> Any:
    cap = o["max_items_per_user"]
    kw = {
        "caller": spec.caller,
        "max_items_per_user": 1 if cap == "auto" else cap,  # set once chosen
        "seed": o["seed"],
        "user_column": o["user_column"],
        "item_column": o["item_column"],
        "_tap": tap,
    }
    if engine == "spark":
        from userdp.partition.spark import SparkRunner  # pyspark only when asked for

        return SparkRunner(data, **kw)
    return LocalRunner(data, **kw, progress=progress)


# -- one function per algorithm (documentation; the options and defaults live in SPECS) ----------
def basic(data: Any, *, epsilon: float, delta: float, **options: Any) -> Any:
    """Basic weighting in one weight-and-threshold round (paper Alg. 1 with Alg. 5).

    Options (defaults in ``ALGORITHMS["basic"].options``): ``max_items_per_user`` (Delta_0,
    default 100: a larger set keeps its Delta_0 items of smallest keyed hash of (secret salt,
    user, item), a pseudo-random subset the Spark engine reproduces for the same seed);
    ``seed`` (None draws from OS entropy; a fixed seed is for tests and reproducible benchmarks
    only); ``user_column``, ``item_column``; ``composition`` ("gaussian" default, "basic": the
    same sigma and rho for one round, a different event); ``engine``, ``accountant`` as in
    :func:`select_partitions`.

    Privacy
    -------
    (epsilon, delta)-DP for adding/removing one user: l2 sensitivity 1 and novel l-infinity
    1/sqrt(t) (Thm. 3.3).

    Examples
    --------
    >>> pairs = [(f"u{u}", "common") for u in range(2000)]
    >>> basic(pairs, epsilon=1.0, delta=1e-5, seed=0).items
    ['common']
    """
    return select_partitions(data, epsilon=epsilon, delta=delta, algorithm="basic", **options)


def dp_sips(data: Any, *, epsilon: float, delta: float, **options: Any) -> Any:
    """DP-SIPS (Swanberg et al. 2023): Basic over rounds on the items not yet released.

    Options beyond :func:`basic`'s: ``rounds`` (default: len(fractions), else 2); ``fractions``
    (per round: share of precision 1/sigma^2 under ``composition="gaussian"``, of epsilon and
    delta under ``"basic"``); ``delta_fractions`` (split of the threshold delta, gaussian; of
    delta, basic); ``threshold_share`` (gaussian: share of delta paid for thresholds, the rest
    converts the one composed Gaussian); ``recap`` (default True: re-cap every user's remaining
    items each round with the same salt; False only removes items from the first capped sets);
    ``pooled`` (default False; True tests the last round on the precision-weighted sum of every
    round's noisy weights, capping once, as :func:`mad2r` does by default).

    Privacy
    -------
    Each round's removals are functions of earlier releases; gaussian composition gives
    (epsilon, delta) by :mod:`userdp.partition.rounds`, basic composition by summing rounds.
    """
    return select_partitions(data, epsilon=epsilon, delta=delta, algorithm="dp-sips", **options)


def mad(data: Any, *, epsilon: float, delta: float, **options: Any) -> Any:
    """MaxAdaptiveDegree in one weight-and-threshold round (paper Alg. 3, unbiased).

    Options beyond :func:`basic`'s: ``d_max`` (4 <= d_max <= max_items_per_user; None means
    min(50, max_items_per_user)); ``beta`` (default 2: tau = rho + beta sigma >= 1).

    Privacy
    -------
    Same sensitivities as Basic (Cor. 5.2): l2 <= 1, novel l-infinity 1/sqrt(t); same sigma
    and rho; (epsilon, delta)-DP. Every item's weight is at least min(Basic weight, tau)
    (Thm. 6.1).
    """
    return select_partitions(data, epsilon=epsilon, delta=delta, algorithm="mad", **options)


def mad2r(data: Any, *, epsilon: float, delta: float, **options: Any) -> Any:
    """MAD in k rounds, biasing round r with round r-1's noisy weights (Alg. 4), by default
    with a pooled final test (not in the paper).

    Round 1 runs unbiased MAD. Round r > 1 removes the items released so far and those whose
    upper bound ``w~_{r-1} + c_ub sigma_{r-1}`` is below every later round's threshold, biases
    items with a large lower bound ``w_lb = max(0, w~_{r-1} - c_lb sigma_{r-1})`` by ``b =
    min(1, rho / w_lb)``, and runs biased MAD with h(t) = b_max/sqrt(t). Noisy intermediate
    weights are never returned.

    Pooled final test (``pooled=True``, the default under ``composition="gaussian"``): every
    user is capped ONCE; rounds 1..k-1 release as above, and the last round releases nothing
    on its own: each item still in play is released iff ``Y(i) = sum_r p_r X_r(i)``, the
    precision-weighted sum of its noisy weights over ALL rounds, reaches ``rho_Y``. Y's noise
    is N(0, sigma_tot^2), the whole budget's, so the items that decide the count (just above
    the threshold, tested late when users' common items are gone) face the noise of one
    full-budget round instead of the last round's share; biases aim at ``rho_Y``. Defaults:
    4 rounds, precision ``p = (0.1, 0.2, 0.3, 0.4)`` (``p_r`` proportional to r), 5% of the
    threshold delta over rounds 1-3 and 95% for the pooled test. Chosen on a pilot draw only
    (``zipf_contributions(200_000, item_exponent=1.1, seed=0)``, seeds 0-1, mean items): the
    former default (2 rounds, unpooled, re-capped) 2857; pooled 3 rounds 3325, 4 rounds 3500,
    5 rounds 3557 at 1.7x the time of 4, 6 rounds 3509, 8 rounds 3253; 4 unpooled rounds
    (capped once) 2881; at 4 rounds a flatter (0.2, 0.2, 0.2, 0.4) 3419, a steeper (0.05,
    0.15, 0.3, 0.5) 3270; threshold-delta shares 2% / 10% for rounds 1-3: 3489 / 3499.
    ``pooled=False`` (or ``composition="basic"``) gives the former behaviour: 2 rounds,
    re-capped.

    .. note:: Erratum
       Alg. 4 line 4 prints ``delta`` inside rho_1; each round uses its own threshold delta, as
       the privacy proof requires.

    Options beyond :func:`mad`'s and :func:`dp_sips`'s: ``rounds`` (>= 2; default 4 pooled, 2
    otherwise); ``pooled`` (None: True under gaussian composition); ``c_lb``, ``c_ub``
    (confidence multipliers >= 0, defaults 1 and 3); ``b_min``, ``b_max`` (0.5 <= b_min <= 1
    <= b_max, defaults 0.5 and 1.25); ``recap`` (None: False when pooled, else True: round r
    re-caps S_u minus the removed items; the removed set and biases are functions of earlier
    releases, so for each fixed earlier output neighbouring inputs stay neighbouring with every
    degree <= Delta_0). A pooled run refuses ``recap=True``.

    Privacy
    -------
    ``composition="gaussian"`` (default): the rounds' noisy weight vectors compose as one
    Gaussian and the threshold failures add, (epsilon, delta)-DP; proof in
    :mod:`userdp.partition.rounds`, and for the pooled test in
    :class:`userdp.partition.rounds.PooledTest` (a novel item's pooled mean is at most 1 for
    every history, the pooled noise is exactly N(0, sigma_tot^2), so it passes with probability
    at most the test's threshold delta; the accountant composes one Gaussian plus the summed
    threshold deltas). ``"basic"``: Thm. 5.1, sum of the rounds' budgets.
    """
    return select_partitions(data, epsilon=epsilon, delta=delta, algorithm="mad2r", **options)
