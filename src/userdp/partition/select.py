"""The local (NumPy) engine: book-keeping of a run and the local :class:`Runner`.

Items are integer codes; every item-level value (weights, noisy weights, removed items, biases)
is a NumPy array over all item codes. The algorithms themselves are in
:mod:`userdp.partition.algorithms`; the sequential baselines use :class:`_Run` directly.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import dp_accounting
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from userdp._validation import check_int
from userdp.data import Contributions, as_contributions
from userdp.data.hashing import salted_hash
from userdp.partition._local import cap_degrees, cap_pairs, filter_pairs
from userdp.partition.cap import HISTOGRAM_STREAM, degree_counts
from userdp.partition.result import SelectionDiagnostics, SelectionResult
from userdp.partition.rounds import (
    WEIGHT_GRID_ITEMS,
    Plan,
    PooledTest,
    Round,
    check_item_count,
)
from userdp.partition.runner import WEIGHT_STREAM, Basic, Decide, Mad, Tap
from userdp.partition.weights import basic_weights, mad_weights
from userdp.privacy import (
    NoiseSource,
    PrivacyAccountant,
    PrivacyBudget,
    add_on_grid,
    gaussian_on_grid,
    record,
)
from userdp.privacy.calibrate import grid_spacing
from userdp.privacy.recording import is_recording, released

__all__ = ["LocalRunner", "release_mask"]

_Round = Round  # the sequential baselines' name for one calibrated round


def present_mask(items: np.ndarray, n_items: int) -> np.ndarray:
    """Boolean mask over item codes: the codes that occur in ``items``."""
    present = np.zeros(n_items, dtype=bool)
    present[items] = True
    return present


def release_mask(
    noisy: np.ndarray, items: np.ndarray, threshold: float, present: np.ndarray | None = None
) -> np.ndarray:
    """Items released by a weight-and-threshold round (paper Alg. 1 line 8).

    Only codes present in the round's input ``items`` can pass, whatever their noise: releasing
    a code outside the round's union would not be covered by Thm. 3.3. ``present`` may pass
    ``present_mask(items, noisy.size)`` when the caller has it.
    """
    if present is None:
        present = present_mask(items, noisy.size)
    return present & (noisy >= threshold)


class _SaltedHashes:
    """``codes -> salted_hash(labels[codes], salt)``, each label hashed once, when first asked.

    The hash is element-wise, so hashing a subset gives the same values as hashing every label.
    """

    def __init__(self, labels: pa.Array, salt: int) -> None:
        self.labels, self.salt = labels, salt
        self.values = np.empty(len(labels), dtype=np.int64)
        self.done = np.zeros(len(labels), dtype=bool)

    def __call__(self, codes: np.ndarray) -> np.ndarray:
        n = self.done.size
        if codes.size >= n:  # likely most of the code book: hash what is left of it
            todo = np.flatnonzero(~self.done)
        else:
            new = np.zeros(n, dtype=bool)
            new[codes] = True
            new &= ~self.done
            todo = np.flatnonzero(new)
            if 2 * todo.size > n:  # most of them: hash the rest of the code book
                todo = np.flatnonzero(~self.done)
        if todo.size:
            labels = self.labels if todo.size == n else self.labels.take(todo)
            self.values[todo] = salted_hash(labels, self.salt)
            self.done[todo] = True
        return self.values.take(codes)


class _Run:
    """Book-keeping common to every local run: input, noise, accountant, diagnostics."""

    def __init__(
        self,
        data: Any,
        caller: str,
        user_column: str,
        item_column: str,
        max_items_per_user: int,
        seed: int | None,
        _tap: Tap | None = None,
    ) -> None:
        self.start = time.perf_counter()
        self.cap = check_int(max_items_per_user, "max_items_per_user", caller, low=1)
        self.noise = NoiseSource(seed)
        self.data: Contributions = as_contributions(
            data, user_column=user_column, item_column=item_column
        )
        self.accountant = PrivacyAccountant()
        self.dropped: list[int] = []
        self.round_sizes: list[int] = []
        self._hashes: tuple[np.ndarray, np.ndarray] | None = None
        self._lazy: tuple[_SaltedHashes, _SaltedHashes] | None = None
        self._tap = _tap

    def capped(self, users: np.ndarray, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Cap every user's set with the run's secret salt (the same salt in every round)."""
        u, i, dropped = cap_degrees(users, items, self.data.n_users, self.cap, *self._salted())
        self.dropped.append(dropped)
        return u, i

    def capped_codes(
        self, users: np.ndarray, items: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`capped`, as ``np.intp`` codes, with every user's capped degree."""
        u, i, dropped, degrees = cap_pairs(
            users, items, self.data.n_users, self.cap, *self._salted()
        )
        self.dropped.append(dropped)
        return u, i, degrees

    def _salted(self) -> tuple[_SaltedHashes, _SaltedHashes]:
        """Salted hashes of the user and item labels, each hashed when capping first needs it
        (capping hashes only the users above the cap and their items)."""
        if self._lazy is None:
            salt = self.noise.salt
            d = self.data
            self._lazy = (_SaltedHashes(d.user_labels, salt), _SaltedHashes(d.item_labels, salt))
        return self._lazy

    def release(
        self,
        rnd: Round,
        weights: np.ndarray,
        items: np.ndarray,
        test: Callable[[np.ndarray], np.ndarray] | None = None,
        present: np.ndarray | None = None,
        codes: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The noisy weights and the released mask over every item code (Alg. 1 lines 7-9).

        Without ``codes``, the noisy weights cover every code: codes absent from this round's
        input get pure noise (the w_ext of line 9), which later rounds may query. With
        ``codes`` (the sorted codes of the round's input, ``present``'s), only those are
        noised and the noisy weights are returned for them alone, in their order; no other
        code can be released or compared with a threshold. Only items present in the round's
        input can be released. Composes the round into the accountant. ``test(noisy)``
        replaces ``noisy >= rho`` (the pooled final test), on the returned noisy weights.
        """
        r = len(self.round_sizes)
        check_item_count(weights.size)
        tap = self._tap
        if tap is not None:  # tests only: record the weights
            self._tap_weights(tap, weights, items)
        n_codes = weights.size
        labels = self.data.item_labels
        if codes is not None:
            weights = weights.take(codes)
            if tap is not None or is_recording():
                labels = labels.take(pa.array(codes))
        if tap is None or tap.noise is None:
            # Safe noise on the run's one weight grid (rnd.grid; rho accounts for it, see
            # Round), from the round's own sub-stream, so the noise drawn does not depend on
            # earlier rounds' sizes; recorded for the auditor with the item labels as index.
            noisy = self.noise.add_gaussian(
                weights,
                rnd.sigma,
                statistic=f"partition.weights[round {r + 1}]",
                l2=1.0,
                linf=rnd.h_scale,
                index=labels if is_recording() else None,
                stream=(WEIGHT_STREAM, r),
                size=WEIGHT_GRID_ITEMS,
                thresholded=True,
            )
        else:  # tests only: substitute the noise, released on the same grid
            noise = np.asarray(tap.noise(r, labels.to_pylist(), rnd.sigma), dtype=np.float64)
            noisy = add_on_grid(weights, noise, rnd.grid)
        if codes is None:
            if test is None:
                selected = release_mask(noisy, items, rnd.rho, present)
            else:
                selected = release_mask(np.where(test(noisy), 1.0, 0.0), items, 1.0, present)
            size = int(np.count_nonzero(selected))
        else:  # the codes are the round's items: all present
            hits = codes.compress(noisy >= rnd.rho if test is None else test(noisy))
            selected = np.zeros(n_codes, dtype=bool)
            selected[hits] = True
            size = hits.size
        self.accountant.compose(rnd.event)
        self.round_sizes.append(size)
        return noisy, selected

    def user_order(self) -> np.ndarray:
        """User codes in a pseudo-random order: by keyed hash of (secret salt, user label).

        Each user's place depends only on its own label and the salt, so removing a user leaves
        the others' relative order unchanged (the coupling sequential sensitivity proofs use,
        and one the auditor's replay can see); without the salt the order is unpredictable.
        """
        return np.argsort(self.hashes()[0], kind="stable")

    def hashes(self) -> tuple[np.ndarray, np.ndarray]:
        """Salted hashes of every user and item label (computed once per run)."""
        if self._hashes is None:
            salt = self.noise.salt
            self._hashes = (
                salted_hash(self.data.user_labels, salt),
                salted_hash(self.data.item_labels, salt),
            )
        return self._hashes

    def _tap_weights(self, tap: Tap, weights: np.ndarray, items: np.ndarray) -> None:
        labels = self.data.item_labels.to_pylist()
        tap.weights.append({labels[c]: float(weights[c]) for c in np.unique(items)})

    def finish(
        self,
        selected: np.ndarray,
        algorithm: str,
        parameters: dict[str, Any],
        total: PrivacyBudget,
        gaussian_delta: float = 0.0,
    ) -> SelectionResult:
        spent = self.accountant.spent(gaussian_delta)
        if not total.covers(spent):  # pragma: no cover - a bug, never user input
            raise RuntimeError(f"{algorithm} spent {spent}, more than its budget {total}.")
        d = self.data
        values = d.item_values(np.flatnonzero(selected))
        # Code order is the input's order of first appearance, which depends on individual
        # users' rows: release the set in sorted order instead.
        try:
            values = values.take(pc.sort_indices(values))
        except pa.ArrowNotImplementedError:  # unsortable type: a random order reveals nothing
            values = values.take(pa.array(self.noise.permutation(len(values))))
        return SelectionResult(
            item_array=values,
            algorithm=algorithm,
            budget=spent,
            parameters=parameters,
            dp_event=dp_accounting.ComposedDpEvent(list(self.accountant.ledger)),
            diagnostics=SelectionDiagnostics(
                n_users=d.n_users,
                n_pairs=d.n_pairs,
                duplicates_dropped=d.duplicates_dropped,
                pairs_dropped_by_capping=tuple(self.dropped),
                round_sizes=tuple(self.round_sizes),
                seconds=time.perf_counter() - self.start,
            ),
        )


class _Noisy(NamedTuple):
    """A round's noisy weights, the mask of the round's items, and the codes noised: ``None``
    for every code (``values`` over every code), else the round's items, sorted (``values``
    over them alone, in their order)."""

    values: np.ndarray
    present: np.ndarray
    codes: np.ndarray | None

    def at(self, codes: np.ndarray) -> np.ndarray:
        """The noisy weights of ``codes`` (sorted; noised by this round)."""
        if self.codes is None or self.codes.size == self.present.size:  # over every code
            return self.values.take(codes)
        return self.values.take(np.searchsorted(self.codes, codes))


class LocalRunner:
    """:class:`~userdp.partition.runner.Runner` on NumPy code arrays (one machine).

    ``_tap`` is the tests' seam (see :class:`~userdp.partition.runner.Tap`). ``progress``, if
    given, is called with the number of rounds released so far after each round's release (a
    count of calls, the same for every input; it draws no noise and sees no data).
    """

    def __init__(
        self,
        data: Any,
        *,
        caller: str,
        max_items_per_user: int,
        seed: int | None = None,
        user_column: str = "user",
        item_column: str = "item",
        _tap: Tap | None = None,
        progress: Callable[[int], object] | None = None,
    ) -> None:
        self.run = _Run(data, caller, user_column, item_column, max_items_per_user, seed, _tap)
        self.progress = progress
        self.max_items_per_user = self.run.cap
        d = self.run.data
        self.removed = np.zeros(d.n_items, dtype=bool)
        self.biases = np.ones(d.n_items)
        self.users: np.ndarray = d.users
        self.items: np.ndarray = d.items
        self._degrees: np.ndarray | None = None
        self._present: np.ndarray | None = None
        self._codes: np.ndarray | None = None
        self._recap: bool | None = None  # the first cap's choice, which every round keeps

    @property
    def data(self) -> Contributions:
        return self.run.data

    def release_degree_histogram(self, sigma: float) -> np.ndarray:
        """Noisy number of users per degree bin (before capping), composed as a Gaussian
        release of l2 sensitivity 1 (one user changes one bin by 1)."""
        d = self.run.data
        exact = degree_counts(np.bincount(d.users, minlength=d.n_users))
        rng = self.run.noise.stream(*HISTOGRAM_STREAM)  # the Spark runner draws the same
        if is_recording():
            record(
                "user degree histogram",
                exact,
                l2=1.0,
                grid=grid_spacing(1.0, max(exact.size, 1), "l2"),
            )
        self.run.accountant.compose(dp_accounting.GaussianDpEvent(sigma))
        return released("user degree histogram", gaussian_on_grid(rng, exact, sigma, l2=1.0))

    def set_cap(self, cap: int) -> None:
        self.run.cap = self.max_items_per_user = cap

    def cap(self, *, recap: bool = True) -> None:
        if self._recap is None:
            self._recap = recap
        self._codes = None
        if recap or not self.run.dropped:  # (re-)cap what is left of every user's set
            d = self.run.data
            pairs = (d.users, d.items)
            if self.removed.any():
                pairs = filter_pairs(*pairs, self.removed)
            # The capped codes as np.intp once per cap: the weights' bincount and take calls
            # would otherwise convert them in every call (the input stays in its narrow type).
            self.users, self.items, self._degrees = self.run.capped_codes(*pairs)
            self._present = None
        else:  # Alg. 4 line 13: only remove items from the capped sets
            self.users, self.items = filter_pairs(self.users, self.items, self.removed)
            if self._present is not None:  # the capped sets lose exactly the removed items
                self._present = self._present & ~self.removed
            self._degrees = None

    def present(self) -> np.ndarray:
        """Mask of the item codes in the current round's input (computed once per cap)."""
        if self._present is None:
            self._present = present_mask(self.items, self.run.data.n_items)
        return self._present

    def codes(self) -> np.ndarray:
        """The item codes of the current round's input, sorted (computed once per round)."""
        if self._codes is None:
            self._codes = np.flatnonzero(self.present())
        return self._codes

    def degrees(self) -> np.ndarray:
        """Every user's number of pairs in the current round (computed once per round)."""
        if self._degrees is None:
            self._degrees = np.bincount(self.users, minlength=self.run.data.n_users)
        return self._degrees

    def weights(self, rule: Basic | Mad) -> np.ndarray:
        d = self.run.data
        if isinstance(rule, Basic):
            return basic_weights(
                self.users, self.items, d.n_users, d.n_items, degrees=self.degrees()
            )
        return mad_weights(
            self.users,
            self.items,
            d.n_users,
            d.n_items,
            tau=rule.tau,
            d_max=rule.d_max,
            biases=self.biases if rule.biased else None,
            b_min=rule.b_min,
            b_max=rule.b_max,
            degrees=self.degrees(),
        )

    def release(
        self, weights: np.ndarray, rnd: Round, *, every_item: bool = False
    ) -> tuple[_Noisy, np.ndarray]:
        """Noise the round's weights; ``every_item`` in a run that re-caps noises every code
        (an item absent now may enter a later round's capped sets: the w_ext of Alg. 1 line
        9). Otherwise only the round's items are noised: no later round can hold another
        (sets only shrink without re-capping), and only they can be released."""
        present = self.present()
        codes = None if every_item and self._recap else self.codes()
        noisy, selected = self.run.release(rnd, weights, self.items, present=present, codes=codes)
        self._released_round()
        return _Noisy(noisy, present, codes), selected

    def release_pooled(
        self,
        weights: np.ndarray,
        rnd: Round,
        history: Sequence[_Noisy],
        test: PooledTest,
    ) -> tuple[_Noisy, np.ndarray]:
        """The last round of a pooled run: its noisy weights and the items of its input that
        pass ``test`` on all rounds' noisy weights (each round noised every one of them: the
        round's items were in every earlier round's input, pooled runs never re-cap)."""
        present, codes = self.present(), self.codes()
        earlier = [h.at(codes) for h in history]  # this round's items: in every earlier round

        def passes(x: np.ndarray) -> np.ndarray:  # x: this round's, over its items
            return test.passes([*earlier, x], np)

        noisy, selected = self.run.release(rnd, weights, self.items, passes, present, codes)
        self._released_round()
        return _Noisy(noisy, present, codes), selected

    def _released_round(self) -> None:
        """Tell ``progress`` how many rounds are released (the number of releases so far)."""
        if self.progress is not None:
            self.progress(len(self.run.round_sizes))

    def remove(self, noisy: _Noisy, decide: Decide) -> None:
        """Apply ``decide`` to the codes the round noised: every code, or the round's items
        (codes never noised are neither removed nor biased; in a run that does not re-cap
        they have no pair left anyway)."""
        c, n = noisy.codes, self.removed.size
        # the round's items are all present; noisy.values cover exactly the codes noised
        present = noisy.present if c is None else np.ones(c.size, dtype=bool)
        removed, bias = decide(noisy.values, present, np)
        if c is None or c.size == n:  # over every code (a first round, usually): no scatter
            self.removed |= removed
            self.biases = np.ones(n) if bias is None else np.where(self.removed, 1.0, bias)
            return
        self.removed[c] |= removed
        self.biases = np.ones(n)
        if bias is not None:
            self.biases[c] = np.where(self.removed.take(c), 1.0, bias)

    def abort(self) -> None:
        """Nothing to free locally."""

    def finish(
        self,
        released: Sequence[np.ndarray],
        algorithm: str,
        parameters: dict[str, Any],
        plan: Plan,
    ) -> SelectionResult:
        found = np.logical_or.reduce(list(released))
        return self.run.finish(found, algorithm, parameters, plan.budget, plan.gaussian_delta)
