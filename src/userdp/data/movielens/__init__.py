"""MovieLens (GroupLens) datasets: version specs, fast loaders and a checked download.

:data:`MOVIELENS` describes the six official versions. :func:`load_movielens` reads the
ratings of an extracted folder (or a parent of it) or of the official ``.zip`` into
:class:`~userdp.data.Ratings`; :func:`load_ratings_table`, :func:`load_movies`,
:func:`load_tags` and :func:`load_users` return PyArrow tables. Every data file may also be
stored gzip-compressed (``u.data.gz``). :func:`download` fetches and verifies an official zip.

The data are not part of userdp. Their READMEs forbid redistribution (except for
ml-latest-small) and commercial use, and ask publications to cite F. M. Harper and J. A.
Konstan, *The MovieLens Datasets: History and Context*, ACM TiiS 5(4), 2015.

The package is split by what each part does: :mod:`.versions` (the specs and checksums),
:mod:`.files` (locating and parsing files), :mod:`.loaders` (the public loaders) and
:mod:`.fetch` (the download).
"""

from userdp.data.movielens.fetch import download
from userdp.data.movielens.loaders import (
    load_genome,
    load_movielens,
    load_movies,
    load_ratings_table,
    load_tags,
    load_users,
)
from userdp.data.movielens.versions import MOVIELENS, MovieLensSpec, movielens_version

__all__ = [
    "MOVIELENS",
    "MovieLensSpec",
    "download",
    "load_genome",
    "load_movielens",
    "load_movies",
    "load_ratings_table",
    "load_tags",
    "load_users",
    "movielens_version",
]
