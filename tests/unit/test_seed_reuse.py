"""A seed may be used once per accountant: seeds never repeat noise across releases charged to
one accountant.

Two releases with the same seed draw the same noise, so differencing them cancels it: two seeded
means over data that differ in one user's value give that user's value exactly, though each
release's noise is ten times the change. The accountant keeps the seeds of the releases composed
into it and refuses a release whose seed it holds, before any data is read; ``seed=None`` (fresh
OS entropy) is never refused, and a seeded release on its own is unchanged, bit for bit.
"""

from __future__ import annotations

import dp_accounting
import pytest

import userdp
from userdp.exceptions import InvalidParameterError
from userdp.privacy import PrivacyAccountant, PrivacyBudget

REUSED = "The 'seed' parameter of {} must not repeat the seed of a release already charged"
EVENT = dp_accounting.LaplaceDpEvent(1.0)


# -- the accountant -------------------------------------------------------------------------------
def test_a_seed_the_accountant_holds_is_refused_and_nothing_is_recorded():
    acc = PrivacyAccountant().compose(EVENT, seed=11)
    assert acc.seeds == {11}
    with pytest.raises(InvalidParameterError, match=REUSED.format("my_release")):
        acc.check(EVENT, seed=11, caller="my_release")
    with pytest.raises(InvalidParameterError, match="use a different seed per release, or seed"):
        acc.compose(EVENT, seed=11)
    assert len(acc.ledger) == 1 and acc.seeds == {11}


def test_other_seeds_unseeded_releases_and_other_accountants_are_not_refused():
    acc = PrivacyAccountant().compose(EVENT, seed=11)
    acc.compose(EVENT, seed=12).compose(EVENT).compose(EVENT, seed=None)
    assert acc.seeds == {11, 12} and len(acc.ledger) == 4
    assert PrivacyAccountant().compose(EVENT, seed=11).seeds == {11}  # another accountant


def test_a_release_refused_for_its_budget_does_not_take_its_seed():
    acc = PrivacyAccountant(PrivacyBudget(1.0, 1e-5)).compose(EVENT, seed=1)
    with pytest.raises(userdp.BudgetExceededError):
        acc.compose(EVENT, seed=2)
    assert acc.seeds == {1}


def test_a_seed_that_is_not_a_non_negative_int_is_refused_in_the_house_format():
    with pytest.raises(
        InvalidParameterError, match=r"'seed' parameter of PrivacyAccountant\.check"
    ):
        PrivacyAccountant().check(EVENT, seed=-1)
