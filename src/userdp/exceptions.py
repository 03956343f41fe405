"""Exception hierarchy of userdp: one root, typed leaves.

Every error raised on user input derives from :class:`UserDPError`, so callers can catch
everything userdp raises with one ``except`` while tests match the precise leaf.
"""

from __future__ import annotations

__all__ = [
    "BudgetExceededError",
    "DataError",
    "InvalidParameterError",
    "NotFittedError",
    "UnsupportedEventError",
    "UnusualBudgetWarning",
    "UserDPError",
]


class UserDPError(Exception):
    """Root of every error userdp raises on purpose."""


class InvalidParameterError(UserDPError, ValueError):
    """A parameter is out of its documented range or of the wrong type."""


class DataError(UserDPError, ValueError):
    """Input data are missing, empty, malformed or contain nulls/non-finite values."""


class UnsupportedEventError(UserDPError, TypeError):
    """The accountant was asked to compose an event it cannot account for."""


class BudgetExceededError(UserDPError):
    """Composing a release would exceed the accountant's total budget."""


class NotFittedError(UserDPError, AttributeError):
    """An estimator was used before ``fit``."""


class UnusualBudgetWarning(UserWarning):
    """A budget's epsilon or delta is valid but unusual (a very weak guarantee).

    Its own category so that a caller who has seen it for the budget they chose can tell it
    from the same warning about a share of that budget (the command line shows it once).
    """
