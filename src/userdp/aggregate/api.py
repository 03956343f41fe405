"""``aggregate``: a private GROUP BY (users, count, sum, mean, quantiles per key).

Written once over the engines (:mod:`userdp.aggregate.local`, :mod:`userdp.aggregate.spark`):
the engine computes exact statistics of bounded sensitivity over a
public key set; this driver plans the budget, selects the keys, chooses the bounds, adds
every noise and composes every event.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any, cast

import dp_accounting
import numpy as np
import pyarrow as pa

from userdp._engines import ENGINES, resolve_engine
from userdp.aggregate.cells import INTEGER_METRICS, Z95, count_cells, mean_cells, ratio_mean
from userdp.aggregate.inputs import _engine
from userdp.aggregate.local import HISTOGRAM_BINS, Columns, choose_bound
from userdp.aggregate.query import BOUNDINGS as BOUNDINGS
from userdp.aggregate.query import METRICS, _query
from userdp.aggregate.result import AggregateDiagnostics, AggregateResult
from userdp.aggregate.stages import _quantiles, _select
from userdp.exceptions import InvalidParameterError
from userdp.privacy import (
    NoiseSource,
    PrivacyAccountant,
    PrivacyBudget,
    check_accountant,
    event_cost,
)

__all__ = [
    "ENGINES",
    "INTEGER_METRICS",
    "METRICS",
    "Z95",
    "aggregate",
    "count_cells",
    "mean_cells",
    "ratio_mean",
]


def aggregate(
    data: Any,
    *,
    user_column: str = "user",
    key_column: str | None = "key",
    value_column: str | None = None,
    metrics: Sequence[str] | str = ("users", "count"),
    bounds: tuple[float, float] | None = None,
    keys: str | Sequence[Any] = "select",
    epsilon: float,
    delta: float,
    accountant: PrivacyAccountant | None = None,
    engine: str = "auto",
    seed: int | None = None,
    **options: Any,
) -> AggregateResult:
    """Private ``SELECT key, COUNT(DISTINCT user), COUNT(*), SUM(v), AVG(v) ... GROUP BY key``.

    Parameters
    ----------
    data : table, frame, file path or pyspark.sql.DataFrame
        One row per record; the privacy unit is a user with all their rows (add/remove).
        A pyarrow Table or RecordBatchReader, a pandas or Polars (lazy) frame, a dict of
        columns, a CSV/TSV/Parquet/JSON Lines path (read with the role columns), or Spark.
    user_column, key_column, value_column : str
        Column roles; ``key_column=None`` treats the whole table as one key (the smooth-bounded
        mean and quantiles of :mod:`userdp.estimate`, on either engine).
    metrics : sequence of {"users", "count", "sum", "mean", "quantiles"} or a comma list
        ``users`` = distinct users per key; ``count`` = rows; ``sum``, ``mean`` and
        ``quantiles`` need ``value_column`` and ``bounds`` (values are clipped to them).
    bounds : (float, float) or None
        Public range of the values.
    keys : "select" or a sequence of keys
        ``"select"``: keys chosen privately by :func:`userdp.partition.select_partitions`
        (MAD2R) with a share of the budget; a public list costs nothing, includes keys absent
        from the data (noise-only values) and drops rows of other keys.
    epsilon, delta : float
        The user-level budget of the whole run.
    accountant : PrivacyAccountant or None
        Charged with the run's event; refuses (BudgetExceededError) before any data is read.
    engine : {"auto", "local", "spark"}
    seed : int or None
        None draws from OS entropy; a fixed seed is for tests and benchmarks only.
    **options
        ``bounding`` ("smooth", default, or "limit": the baseline of PipelineDP-style hard
        limits, keep ``max_partitions_contributed`` random keys per user and
        ``max_contributions_per_partition`` random rows per user and key, defaults 1 and 1);
        ``contribution_bounds`` (a mapping family -> C, public: skips the bound choice);
        ``quantiles`` (levels, default (0.5,)); ``shares`` (overrides of
        :data:`~userdp.aggregate.plan.DEFAULT_SHARES`); ``selection`` (options passed to
        ``select_partitions``, e.g. ``{"algorithm": "mad2r", "max_items_per_user": 100}``).

    Returns
    -------
    AggregateResult

    Bias
    ----
    Smooth bounding scales user u's vector by ``w_u = min(1, C / ||x_u||_2)``: a key's released
    users/count/sum is biased low by ``sum_u (1 - w_u) x_uk`` (heavy users are scaled down;
    light users, ``||x_u|| <= C``, count fully). C is chosen to balance that loss against the
    noise ``z C`` per key, from a noisy histogram whose noise does not depend on the metrics
    asked beside it (each histogram has its own share), so neither does the bias much. The mean
    is a ratio of noisy weighted sums (same weights top and bottom), so the weighting only
    re-weights users; its noise adds a ratio bias of order
    ``sd_N^2 / N^2`` and it is clipped to the bounds (where the noisy count is <= 0 it is the
    bounds' midpoint). Hard limits drop rows instead (biased low by the dropped rows).
    Quantiles use the weighted exponential mechanism of :mod:`userdp.estimate.quantile` per
    key, with a user's weights over all keys summing to at most h (smooth) or the kept rows
    (limit).

    Privacy
    -------
    For a fixed key set each metric vector has l2 sensitivity C (its bound) and gets Gaussian
    noise z C; the selection's rounds, the bound histograms (one user in one bin: l2
    sensitivity 1) and the metrics compose as one Gaussian plus the selection's threshold
    deltas (:mod:`userdp.aggregate.plan`). Quantile level j is one exponential mechanism over
    all keys: key k's utility moves by at most ``max(q, 1-q) t_uk`` with ``sum_k t_uk <= h``,
    so the per-key losses ``eps t_uk / h`` sum to at most eps (basic composition).

    Engines
    -------
    With public keys (or one key) both engines release the same table for the same seed: equal
    pre-noise statistics (to float round-off) and the same noise. With ``keys="select"`` the
    released key sets differ for the same seed: both engines' selections cap every user to the
    same keys (a keyed hash of the user and key labels) and compute the same pre-noise weights,
    but the local selection draws its noise from one stream and the Spark selection per bucket
    of keys on the executors, so the two key sets are two independent draws of the same
    distribution. Given the same key set, every later statistic (bounds, metrics, quantiles) is
    again equal on both engines: the metrics' noise comes from a stream of its own, not shared
    with the selection.

    Examples
    --------
    >>> rows = {"user": [u for u in range(3000) for _ in (0, 1)],
    ...         "key": [k for u in range(3000) for k in ("a", f"rare{u}")]}
    >>> r = aggregate(rows, epsilon=1.0, delta=1e-5, seed=0)
    >>> r.to_arrow().column("key").to_pylist()
    ['a']
    """
    started = time.perf_counter()
    caller = "aggregate"
    budget = PrivacyBudget(epsilon, delta)
    q = _query(
        metrics=metrics,
        key_column=key_column,
        value_column=value_column,
        bounds=bounds,
        keys=keys,
        epsilon=epsilon,
        delta=delta,
        options=options,
        caller=caller,
    )
    engine = resolve_engine(data, engine, caller)
    check_accountant(accountant, "accountant", caller)
    ms, bounding, needs_values, lo_hi, select = (
        q.metrics,
        q.bounding,
        q.needs_values,
        q.bounds,
        q.select,
    )
    l0, linf, levels, shares, given_c = q.l0, q.linf, q.levels, q.shares, q.given_c
    selection_options, vectors, families, plan, o = (
        q.selection_options,
        q.vectors,
        q.families,
        q.plan,
        q.options,
    )
    mean, smooth = "mean" in ms, bounding == "smooth"
    planned = dp_accounting.ComposedDpEvent(plan.events(None))
    own = PrivacyAccountant(budget)
    own.check(planned)
    if accountant is not None:  # refuses before any data is read (budget, a repeated seed)
        accountant.check(planned, seed=seed, caller=caller)

    centre = 0.5 * (lo_hi[0] + lo_hi[1]) if (mean and lo_hi) else 0.0
    cols = Columns(user_column, key_column, value_column if needs_values else None, lo_hi)
    eng = _engine(engine, data, cols)
    noise = o["_noise"] if o["_noise"] is not None else NoiseSource(seed)

    # 1. keys
    events: list[Any] = []
    parameters: dict[str, Any] = {"bounding": bounding, "shares": shares}
    n_users: int | None = None
    if select:
        sel = _select(eng, plan, selection_options, seed)
        n_users = int(sel.diagnostics.n_users)  # the selection counted the input's users
        events.append(sel.dp_event)
        key_array = sel.to_arrow()
        if getattr(sel, "dataframe", None) is not None:
            sel.dataframe.unpersist()  # the Spark selection's cached keys: collected above
        parameters.update(
            selection_epsilon=plan.selection_epsilon,
            selection_delta=plan.selection_delta,
            selection_algorithm=sel.algorithm,
        )
        if event_cost(sel.dp_event).precision > plan.selection_cost.precision * (1 + 1e-9):
            raise InvalidParameterError("aggregate: the selection cost more than planned.")
    elif key_column is None:
        key_array = None
    else:
        key_array = pa.array(list(dict.fromkeys(keys)))
    eng.set_keys(key_array)
    key_array = eng.keys  # in the key column's type
    n_keys = eng.n_keys
    eng.restrict()
    if not smooth:
        eng.random_keep(noise.salt, l0, linf)

    # 2. contribution bounds
    # mean needs values, so lo_hi is set whenever mean is
    width = (
        (cast(tuple[float, float], lo_hi)[1] - cast(tuple[float, float], lo_hi)[0]) / 2
        if mean
        else max(abs(lo_hi[0]), abs(lo_hi[1]))
        if lo_hi
        else 1.0
    )
    units = {"users": 1.0, "count": 1.0, "value_count": 1.0, "sum": width}
    c_bound: dict[str, float] = {}
    # public: a user holds each key of K at most once, so sqrt(|K|) bounds the users norm
    users_cap = math.sqrt(max(n_keys, 1))
    if smooth:
        c_bound.update({f: float(given_c[f]) for f in vectors if f in given_c})
        if "users" in c_bound:
            c_bound["users"] = min(c_bound["users"], users_cap)
        if families:
            hists = eng.norm_histograms({f: units[f] for f in families}, centre)
            for f in families:
                z = plan.histogram_z[f]
                noisy = noise.add_gaussian(
                    hists[f],
                    z,
                    statistic=f"aggregate.{f}.norm_histogram",
                    l2=1.0,
                    index=np.arange(HISTOGRAM_BINS),
                )
                c_bound[f] = choose_bound(
                    noisy,
                    z,
                    units[f],
                    plan.metric_z[f],
                    n_keys,
                    spread=1.0 if f == "users" else 0.5,
                    cap=users_cap if f == "users" else None,
                    # declared default: no bias when a user has one row per key
                    fallback=None if f == "users" else units[f],
                    integral=f != "sum",
                )
                events.append(dp_accounting.GaussianDpEvent(z))
        fams: dict[str, tuple[str, ...]] = {
            "users": ("users",),
            "count": ("count",),
            "sum": ("sum",),
        }
        if mean:  # the mean's two vectors share each user's weight
            fams["value_count"] = fams["sum"] = ("value_count", "sum")
    else:
        root = math.sqrt(min(l0, max(n_keys, 1)))  # at most |K| keys are kept
        c_bound = {
            "users": root,
            "count": root * linf,
            "value_count": root * linf,
            "sum": root * linf * units["sum"],
        }
        c_bound = {v: c_bound[v] for v in vectors}
        fams = {v: () for v in vectors}

    # 3. metric vectors
    exact = eng.weighted_sums(c_bound, {v: fams[v] for v in vectors}, centre)
    labels = np.asarray(key_array.to_pylist(), dtype=object) if key_array is not None else None
    noisy_v: dict[str, np.ndarray] = {}
    noise_sd: dict[str, float] = {}
    for v in vectors:
        sd = plan.metric_z[v] * c_bound[v]
        noisy_v[v] = noise.add_gaussian(
            exact[v], sd, statistic=f"aggregate.{v}", l2=c_bound[v], index=labels
        )
        noise_sd[v] = sd
        events.append(dp_accounting.GaussianDpEvent(plan.metric_z[v]))

    columns: dict[str, Any] = {}
    for m in ("users", "count"):
        if m in ms:
            columns.update(count_cells(m, noisy_v[m], noise_sd[m]))
    if "sum" in ms:
        s, sd = noisy_v["sum"], noise_sd["sum"]
        if mean:  # the sum of the centred values plus the centre times COUNT(v)
            s = s + centre * noisy_v["value_count"]
            sd = math.hypot(sd, centre * noise_sd["value_count"])
        columns.update({"sum": s, "sum_low": s - Z95 * sd, "sum_high": s + Z95 * sd})
    if mean:
        assert lo_hi is not None  # mean needs values, so bounds
        columns.update(
            mean_cells(
                noisy_v["sum"],
                noisy_v["value_count"],
                noise_sd["sum"],
                noise_sd["value_count"],
                centre,
                lo_hi,
            )
        )

    # 4. quantiles
    if levels:
        columns.update(
            _quantiles(eng, plan, levels, lo_hi, smooth, given_c, l0 * linf, noise, events, c_bound)
        )

    ordered = {
        c: columns[c]
        for m in ["users", "count", "sum", "mean"]
        for c in (m, f"{m}_low", f"{m}_high")
        if c in columns
    }
    ordered.update({k: v for k, v in columns.items() if k.startswith("q")})
    key_col = key_array if key_array is not None else pa.array([None], pa.string())
    table = pa.table(
        {
            "key": key_col,
            **{
                k: pa.array(v, pa.int64() if k.split("_")[0] in INTEGER_METRICS else pa.float64())
                for k, v in ordered.items()
            },
        }
    )
    event = dp_accounting.ComposedDpEvent(events)
    own.compose(event)
    if accountant is not None:
        accountant.compose(event, seed=seed, caller=caller)
    parameters.update(
        keys_released=n_keys,
        noise_multipliers=dict(plan.metric_z),
        histogram_noise_multipliers=dict(plan.histogram_z),
    )
    diag = AggregateDiagnostics(
        eng.total_rows,
        eng.n_users if n_users is None else n_users,
        eng.n_rows,
        time.perf_counter() - started,
    )
    return AggregateResult(
        table=eng.finish(table),
        metrics=ms,
        budget=own.spent(),
        dp_event=event,
        contribution_bounds=c_bound,
        noise_sd=noise_sd,
        parameters=parameters,
        diagnostics=diag,
        engine=eng.name,
    )
