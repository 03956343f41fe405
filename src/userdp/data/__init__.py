"""The contributions table, its readers and the one keyed hash (:mod:`userdp.data.hashing`)."""

from userdp.data.contributions import Contributions, as_contributions
from userdp.data.io import read, read_table
from userdp.data.ratings import Ratings, as_ratings
from userdp.data.synthetic import section62_instance, zipf_contributions

__all__ = [
    "Contributions",
    "Ratings",
    "as_contributions",
    "as_ratings",
    "read",
    "read_table",
    "section62_instance",
    "zipf_contributions",
]
