"""The auditor: record/replay sensitivity audit and epsilon lower bounds."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

import userdp.estimate._mean_kernels as mean_kernels
import userdp.privacy.noise as noise_module
from userdp.audit import (
    EXPERIMENTS,
    MECHANISMS,
    Mechanism,
    Table,
    audit_sensitivity,
    audit_table,
    clopper_pearson,
    epsilon_lower_bound,
    neighbours,
    run_audit,
    run_experiment,
)
from userdp.audit.epsilon import event_epsilon_bound
from userdp.audit.neighbours import Neighbour
from userdp.audit.replay import compare_releases
from userdp.cli import main
from userdp.estimate.weighting import smooth_weights
from userdp.exceptions import InvalidParameterError
from userdp.privacy import NoiseSource, Release, record, recording

SMALL = dict(max_removals=4)


@pytest.fixture(scope="module")
def small_table() -> Table:
    return audit_table(25, 20, seed=3)


# -- sensitivity audit of every release of every capability -------------------------------------
@pytest.mark.parametrize("name", list(MECHANISMS))
def test_every_release_of_every_capability_stays_within_its_declared_sensitivity(name, small_table):
    run = MECHANISMS[name].runner(small_table)
    rows, notes = audit_sensitivity(name, run, small_table, **SMALL)
    failed = [(r.statistic, r.norm, r.reason) for r in rows if r.verdict == "FAIL"]
    assert not failed
    # every release of every capability goes through the hook: partition selection's rounds
    # (aligned by item label) and the recommenders' statistics included, and every declared
    # statistic was compared on some neighbour, with replayable randomness
    assert rows, notes
    assert all(r.compared > 0 and r.not_replayable == 0 for r in rows if r.norm != "grid")
    # and every release has its float check
    releases = {r.statistic for r in rows if r.norm != "replay"}
    assert {r.statistic for r in rows if r.norm == "grid"} == releases
    # and one check that the released values and parameters are equal under replayed noise
    assert [r.statistic for r in rows if r.norm == "replay"] == ["released values"]


def test_every_capability_is_audited_with_replayable_recorded_releases(small_table):
    capabilities = {m.capability for m in MECHANISMS.values()}
    assert capabilities == {"estimate", "partition", "recommend", "multitask", "aggregate"}
    names = {
        "select[mad2r]",
        "recommend[public-features ssp2]",
        "weighted_mean",
        "multitask[ssp]",
        "aggregate[all metrics, public keys]",
    }
    assert {MECHANISMS[n].capability for n in names} == capabilities
    for name in names:
        rows, _ = audit_sensitivity(
            name, MECHANISMS[name].runner(small_table), small_table, **SMALL
        )
        assert rows and all(r.verdict == "pass" and r.not_replayable == 0 for r in rows), name


def test_mad2r_round_two_is_replayed_at_round_ones_output_by_item_label():
    """User 0 alone holds item 0: removing it shifts every other item's code by one. Round 1's
    replayed output must follow the labels; replayed by position, round 2 sees other removals
    and biases and its weights move by up to 90 times their bound (checked by hand)."""
    counts = 20 + 2 * np.arange(30)  # items 1..30 held by 20..78 single-item users: near rho
    item = np.concatenate([[0], np.repeat(np.arange(1, 31), counts)])
    table = Table(user=np.arange(item.size), item=item)
    run = MECHANISMS["select[mad2r]"].runner(table)
    for seed in range(2):
        rows, _ = audit_sensitivity("mad2r", run, table, max_removals=2, seed=seed)
        by_name = {(r.statistic, r.norm): r for r in rows}
        round2 = by_name[("partition.weights[round 2]", "l2")]
        assert round2.compared >= 2 and round2.not_replayable == 0
        assert 0.5 < round2.ratio <= 1.0 + 1e-9


def test_replayed_outputs_follow_their_labels_and_new_labels_keep_fresh_noise():
    def run(labels: list[str]) -> np.ndarray:
        value = np.array([float(ord(c)) for c in labels])
        return NoiseSource(7).add_gaussian(
            value, 1.0, statistic="s", l2=1.0, index=np.array(labels)
        )

    with recording() as base:
        first = run(["a", "b", "c"])
    with recording(replay=base):
        again = run(["c", "z", "a"])  # other positions, one new label
    assert again[0] == first[2] and again[2] == first[0]
    assert again[1] not in first


def test_replay_makes_every_step_of_noisy_gradient_descent_comparable(small_table):
    rows, _ = audit_sensitivity("erm", MECHANISMS["weighted_erm"].run, small_table, **SMALL)
    (grad,) = [r for r in rows if r.statistic == "erm.gradient_sum" and r.norm == "l2"]
    assert grad.not_replayable == 0
    assert grad.compared >= 20 * 5  # 20 steps x several neighbours, all at the same history
    assert 0.5 < grad.ratio <= 1.0 + 1e-9  # the bound L*h is reached, never exceeded


# -- a deliberately broken sensitivity must FAIL ---------------------------------------------------
def test_a_weight_one_percent_over_its_bound_fails_the_audit(monkeypatch, small_table):
    """Each user's weights sum to 1.01 h while the mean's release still declares h hw and h."""

    def inflated(codes, sizes, h):
        return 1.01 * smooth_weights(codes, sizes, h)

    monkeypatch.setattr(mean_kernels, "smooth_weights", inflated)
    rows, _ = audit_sensitivity("broken", MECHANISMS["weighted_mean"].run, small_table, **SMALL)
    (total,) = [r for r in rows if r.statistic == "mean.sum" and r.norm != "grid"]
    assert total.verdict == "FAIL"
    assert total.ratio == pytest.approx(1.01, rel=1e-6)


def test_a_test_only_count_with_an_understated_bound_fails():
    """Per-item counts of each user's first 3 records, each weighted 1.01, declared l2 sqrt(3)."""
    cap = 3

    def run(table: Table, seed: int) -> None:
        order = np.lexsort((np.arange(table.n_records), table.user))
        first = np.r_[True, table.user[order][1:] != table.user[order][:-1]]
        rank = np.arange(order.size) - np.maximum.accumulate(
            np.where(first, np.arange(order.size), 0)
        )
        kept = table.item[order][rank < cap]
        labels, counts = np.unique(kept, return_counts=True)
        NoiseSource(seed).add_gaussian(
            1.01 * counts, 1.0, statistic="toy.counts", l2=np.sqrt(cap), index=labels
        )

    rows, _ = audit_sensitivity("toy", run, audit_table(20, 15, seed=1), **SMALL)
    assert [(r.norm, r.verdict) for r in rows] == [
        ("l2", "FAIL"),
        ("grid", "FAIL"),
        ("replay", "FAIL"),  # its grid follows the number of the data's own labels
    ]
    assert "declared grid of toy.counts" in rows[2].reason
    assert rows[0].ratio == pytest.approx(1.01, rel=1e-9)
    assert "labels depend on the data" in rows[1].reason  # the data's own items, published


def test_cli_audit_exits_1_on_a_broken_bound_and_prints_the_failing_row(monkeypatch, capsys):
    def inflated(codes, sizes, h):
        return 1.01 * smooth_weights(codes, sizes, h)

    monkeypatch.setattr(mean_kernels, "smooth_weights", inflated)
    code = main(
        [
            "audit",
            "--mechanism",
            "weighted_mean",
            "--users",
            "25",
            "--max-removals",
            "3",
            "--epsilon-runs",
            "0",
        ]
    )
    out = capsys.readouterr().out
    assert code == 1
    assert any(
        "mean.sum" in line and "FAIL" in line and "1.0100" in line for line in out.splitlines()
    )


# -- a comparison that could not be made is a FAIL -------------------------------------------------
def test_randomness_drawn_per_record_before_a_release_fails_as_not_replayable(small_table):
    """One fresh random draw per record before the release: removing a user shifts the
    generator, so no neighbour can be compared at the same randomness."""

    def run(table: Table, seed: int) -> None:
        noise = NoiseSource(seed)
        noise.uniform(table.n_records)
        noise.add_laplace(
            np.array([float(np.unique(table.user).size)]), 1.0, statistic="toy.users", l1=1.0
        )

    rows, _ = audit_sensitivity("toy", run, small_table, **SMALL)
    (count,) = [r for r in rows if r.norm == "l1"]
    assert count.verdict == "FAIL" and count.compared == 0 and count.not_replayable > 0
    assert "not replayable" in count.reason


def test_sample_limiting_is_replayed_with_keys_that_follow_the_user_labels(small_table):
    for name in ("sample_limited_mean", "sample_limited_quantile"):
        rows, _ = audit_sensitivity(name, MECHANISMS[name].run, small_table, **SMALL)
        for r in rows:
            if r.norm != "grid":
                assert r.not_replayable == 0 and r.compared > 0 and r.verdict == "pass", r


def test_record_keys_of_a_user_do_not_move_when_another_user_is_removed():
    from userdp.estimate.weighting import factorize_users, record_keys

    users = np.array(["b", "a", "c", "a", "b", "b"])
    codes, _ = factorize_users(users)
    keys = record_keys(users, codes, salt=12345)
    keep = users != "a"
    codes2, _ = factorize_users(users[keep])
    assert np.array_equal(record_keys(users[keep], codes2, salt=12345), keys[keep])
    assert not np.array_equal(record_keys(users, codes, salt=6789), keys)
    assert keys.min() >= 0 and keys.max() < 2**31


# -- the float check ------------------------------------------------------------------------------
def test_textbook_float_noise_fails_the_float_check(monkeypatch, small_table):
    def textbook(rng, value, sigma, *, l2, size=None):
        x = np.asarray(value, dtype=np.float64)
        return x + rng.normal(0.0, sigma, x.shape)

    monkeypatch.setattr(noise_module, "gaussian_on_grid", textbook)
    rows, _ = audit_sensitivity("erm", MECHANISMS["weighted_erm"].run, small_table, **SMALL)
    (grid,) = [r for r in rows if r.norm == "grid" and r.statistic == "erm.gradient_sum"]
    assert grid.verdict == "FAIL" and "off the declared grid" in grid.reason
    assert grid.worst == grid.compared  # every value off the grid


def test_a_grid_that_depends_on_the_data_fails():
    """A bound (hence a grid) computed from the data's own number of users."""

    def run(table: Table, seed: int) -> None:
        bound = 2.0 ** np.unique(table.user).size
        NoiseSource(seed).add_gaussian(np.zeros(1), bound, statistic="toy.zero", l2=bound)

    rows, _ = audit_sensitivity("toy", run, audit_table(40, 10, seed=2), max_removals=2)
    (grid,) = [r for r in rows if r.norm == "grid"]
    assert grid.verdict == "FAIL" and "grid depends on the data" in grid.reason


def test_a_published_release_over_the_datas_labels_fails():
    def run(table: Table, seed: int) -> None:
        labels, counts = np.unique(table.item, return_counts=True)
        NoiseSource(seed).add_gaussian(
            np.minimum(counts, 1.0),
            1.0,
            statistic="toy.items",
            l2=np.sqrt(30.0),
            index=labels,
            size=1000,
        )

    rows, _ = audit_sensitivity("toy", run, audit_table(20, 15, seed=1), max_removals=2)
    (grid,) = [r for r in rows if r.norm == "grid"]
    assert grid.verdict == "FAIL" and "labels depend on the data" in grid.reason


# -- alignment and neighbours --------------------------------------------------------------------
def test_statistics_are_aligned_by_their_labels_with_missing_labels_as_zero():
    a = Release("c", np.array([2.0, 1.0, 4.0]), l1=1.0, index=np.array([10, 30, 40]))
    b = Release("c", np.array([5.0, 2.0]), l1=1.0, index=np.array([5, 10]))
    nb = Neighbour("n", "add-remove", Table(user=np.zeros(0, dtype=np.int64)))
    (c,) = compare_releases([a], [b], nb)
    # labels 5, 10, 30, 40: differences -5, 0, 1, 4 (not the positional 2-5, 1-2)
    assert c.change == {"l1": 10.0, "l2": pytest.approx(np.sqrt(42.0)), "linf": 5.0}


def test_neighbours_remove_the_heaviest_first_and_add_users_from_the_datas_items():
    t = Table(
        user=np.array([0, 0, 0, 1, 2, 2]),
        item=np.array([5, 6, 7, 5, 5, 6]),
        value=np.array([1.0, 2, 3, 4, 5, 1]),
        value_range=(1.0, 5.0),
    )
    nbs = neighbours(t, max_removals=2, heaviest=1, seed=0)
    assert nbs[0].label == "removed user 0"
    added = {nb.label: nb.table for nb in nbs if nb.label.startswith("added")}
    new = added["added: all-new items"]
    assert set(new.item[new.user == 3].tolist()).isdisjoint({5, 6, 7})
    popular = added["added: most popular items"]
    assert popular.item[popular.user == 3][0] == 5
    assert set(added["added: extreme low values"].value[-3:].tolist()) == {1.0}


# -- epsilon lower bounds ------------------------------------------------------------------------
def test_clopper_pearson_matches_the_binomial_tails():
    """Independent computation: the interval ends solve the exact binomial tail equations."""
    for k, n in [(0, 50), (3, 50), (25, 50), (50, 50)]:
        lo, hi = clopper_pearson(k, n, alpha=0.05)
        if k > 0:
            assert stats.binom.sf(k - 1, n, lo) == pytest.approx(0.025, rel=1e-6)
        if k < n:
            assert stats.binom.cdf(k, n, hi) == pytest.approx(0.025, rel=1e-6)


def test_epsilon_lower_bound_flags_laplace_noise_four_times_too_small():
    rng = np.random.default_rng(0)

    def laplace(scale):
        return lambda side, seed: float(side + rng.laplace(0.0, scale))

    too_small = event_epsilon_bound(laplace(0.25), None, runs=3000, delta=0.0)[2]
    correct = event_epsilon_bound(laplace(1.0), None, runs=3000, delta=0.0)[2]
    assert too_small > 1.0  # declared epsilon 1, really 4
    assert correct <= 1.0
    assert epsilon_lower_bound(0, 100, 50, 100, 1e-5) > 1.0  # the shape of a delta violation


@pytest.mark.parametrize(
    "exp",
    [e for e in EXPERIMENTS if e.min_runs is None],
    ids=lambda e: f"{e.mechanism}:{e.event_label}",
)
def test_no_hard_neighbour_experiment_shows_more_than_the_declared_epsilon(exp):
    bound = run_experiment(exp, runs=30)
    assert bound.verdict == "consistent", bound


def test_cli_audit_json_reports_rows_and_bounds(capsys):
    code = main(
        [
            "audit",
            "--mechanism",
            "weighted_mean",
            "--users",
            "20",
            "--max-removals",
            "2",
            "--epsilon-runs",
            "10",
            "--json",
            "-q",
        ]
    )
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert {(r["statistic"], r["norm"]) for r in report["sensitivity"]} >= {
        ("mean.sum", "l1"),
        ("mean.sum", "grid"),
    }
    assert report["epsilon_lower_bounds"][0]["mechanism"] == "weighted_mean"


@pytest.mark.parametrize("algorithm", ["mad2r", "greedy-update"])
def test_the_delta_check_measures_a_novel_item_release_rate_to_about_a_percent(algorithm):
    (exp,) = [e for e in EXPERIMENTS if e.mechanism == f"select[{algorithm}]" and e.min_runs]
    bound = run_experiment(exp, runs=1)
    assert bound.runs >= 1000 and bound.delta == 0.05
    assert bound.verdict == "consistent", bound
    lo, hi = clopper_pearson(round(bound.p1 * bound.runs), bound.runs)
    assert hi - lo < 0.04  # a rate near delta is measured to within +-2%


def test_cli_audit_rejects_an_unknown_mechanism(capsys):
    assert main(["audit", "--mechanism", "nope", "--epsilon-runs", "0"]) == 2
    assert "Unknown mechanism" in capsys.readouterr().err


def test_run_audit_refuses_unknown_names():
    with pytest.raises(ValueError, match="Unknown mechanism"):
        run_audit(["nope"])


def test_recording_is_inactive_outside_the_auditor():
    with recording() as releases:
        pass
    assert releases == []


def test_cli_audits_a_given_file_and_names_a_missing_column(tmp_path, capsys):
    good = tmp_path / "pairs.csv"
    good.write_text("user,item\n" + "".join(f"{u},{u % 7}\n" for u in range(60)))
    code = main(
        [
            "audit",
            "--input",
            str(good),
            "--mechanism",
            "select[basic]",
            "--max-removals",
            "2",
            "--epsilon-runs",
            "0",
        ]
    )
    assert code == 0
    assert "select[basic]" in capsys.readouterr().out
    bad = tmp_path / "bad.csv"
    bad.write_text("person,item\n1,2\n")
    assert main(["audit", "--input", str(bad), "--epsilon-runs", "0"]) == 2
    assert "missing column(s) 'user'" in capsys.readouterr().err


# -- a mechanism that compared nothing is never a pass ---------------------------------------------
def _silent(table: Table, seed: int) -> None:
    """Records no release at all (its noise would bypass the hook)."""


def _thresholded_only(table: Table, seed: int) -> None:
    """Records one thresholded release with no declared norm: nothing for a neighbour to bound."""
    labels, counts = np.unique(table.item, return_counts=True)
    record("toy.kept", counts, index=labels, thresholded=True)


@pytest.mark.parametrize("run", [_silent, _thresholded_only], ids=["silent", "thresholded only"])
def test_a_mechanism_that_made_no_comparison_fails_the_report(run, monkeypatch, small_table):
    monkeypatch.setitem(MECHANISMS, "toy", Mechanism("toy", "estimate", run))
    report = run_audit(["toy"], table=small_table, max_removals=2)
    assert not any(r.compared for r in report.rows if r.norm not in ("grid", "replay"))
    assert report.failed
    (summary,) = report.as_dict()["mechanisms"]
    assert summary["mechanism"] == "toy" and summary["statistics_compared"] == 0
    assert summary["verdict"] == "FAIL" and "no statistic compared" in summary["reason"]
    assert report.table().splitlines()[-1].startswith("audit: FAIL")


def test_run_audit_refuses_to_audit_nothing(small_table):
    with pytest.raises(InvalidParameterError, match="'mechanisms' parameter of run_audit"):
        run_audit([], table=small_table)


def test_run_audit_refuses_a_named_mechanism_the_table_cannot_feed():
    pairs = Table(user=np.arange(10), item=np.arange(10) % 3)
    with pytest.raises(InvalidParameterError, match=r"'weighted_mean' \(needs a value column\)"):
        run_audit(["weighted_mean", "select[basic]"], table=pairs)
