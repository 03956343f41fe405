"""The six official MovieLens versions: file layouts, rating scales and pinned checksums."""

from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MOVIELENS", "MovieLensSpec", "movielens_version"]


@dataclass(frozen=True)
class MovieLensSpec:
    """Layout of one official MovieLens version.

    Attributes
    ----------
    name : str
        Version name, e.g. ``"ml-100k"``.
    url : str
        Official zip URL.
    folder : str
        Folder inside the zip that holds the files (``"ml-10M100K"`` for ml-10m).
    ratings_file, movies_file : str
        File names of the ratings and the movie catalogue.
    ratings_sep, movies_sep : str
        Field separators: ``"\\t"``, ``"|"``, ``"::"`` or ``","`` (CSV with a header row).
    encoding : str
        Text encoding of the movie, tag and user files.
    tags_file, users_file : str or None
        Tag and user-demographics files, None when the version has none.
    rating_min, rating_max, rating_step : float
        Rating scale: 1..5 in whole stars, or 0.5..5 in half stars.
    sha256 : str or None
        SHA-256 of the official zip, None where no published value was found.
    stable : bool
        False for ml-latest and ml-latest-small, which GroupLens re-releases under the same
        URL: a pinned checksum then describes one release only.
    """

    name: str
    url: str
    folder: str
    ratings_file: str
    ratings_sep: str
    movies_file: str
    movies_sep: str
    encoding: str
    tags_file: str | None
    users_file: str | None
    rating_min: float
    rating_max: float
    rating_step: float
    sha256: str | None
    stable: bool = True

    @property
    def zip_name(self) -> str:
        """File name of the official zip (``ml-10m.zip`` for ml-10m)."""
        return self.url.rsplit("/", 1)[-1]


_URL = "https://files.grouplens.org/datasets/movielens/"

# Checksums (SHA-256 of the official zips) as recorded by third parties; GroupLens itself
# publishes only MD5 files (<zip>.md5):
# - ml-100k, ml-1m, ml-20m, ml-latest-small: TensorFlow Datasets,
#   tensorflow/datasets tensorflow_datasets/url_checksums/movielens.txt; the same values are in
#   ISG-Siegen/OmniRec src/omnirec/data_loaders/ (movielens_100k.py, movielens_small.py,
#   movielens_large.py), and ml-20m / ml-latest-small in dmbates/GroupLens.jl src/GroupLens.jl.
# - ml-10m: ISG-Siegen/OmniRec src/omnirec/data_loaders/movielens_small.py (not in TFDS); public
#   research notes pair it with the official MD5 ce571fd55effeba0271552578f2648bd and a size of
#   65,566,137 bytes.
# - ml-latest-small: the September 2018 release (three sources agree); GroupLens may re-release
#   it, and a download will then fail the check until the caller passes the new sha256=.
# - ml-latest: None. It is refreshed upstream and the sources disagree
#   (dmbates/GroupLens.jl: b9c23b66..., OmniRec: 66a9e518...), so no value can be pinned.
MOVIELENS: dict[str, MovieLensSpec] = {
    "ml-100k": MovieLensSpec(
        name="ml-100k",
        url=_URL + "ml-100k.zip",
        folder="ml-100k",
        ratings_file="u.data",
        ratings_sep="\t",
        movies_file="u.item",
        movies_sep="|",
        encoding="latin-1",
        tags_file=None,
        users_file="u.user",
        rating_min=1.0,
        rating_max=5.0,
        rating_step=1.0,
        sha256="50d2a982c66986937beb9ffb3aa76efe955bf3d5c6b761f4e3a7cd717c6a3229",
    ),
    "ml-1m": MovieLensSpec(
        name="ml-1m",
        url=_URL + "ml-1m.zip",
        folder="ml-1m",
        ratings_file="ratings.dat",
        ratings_sep="::",
        movies_file="movies.dat",
        movies_sep="::",
        encoding="latin-1",
        tags_file=None,
        users_file="users.dat",
        rating_min=1.0,
        rating_max=5.0,
        rating_step=1.0,
        sha256="a6898adb50b9ca05aa231689da44c217cb524e7ebd39d264c56e2832f2c54e20",
    ),
    "ml-10m": MovieLensSpec(
        name="ml-10m",
        url=_URL + "ml-10m.zip",
        folder="ml-10M100K",
        ratings_file="ratings.dat",
        ratings_sep="::",
        movies_file="movies.dat",
        movies_sep="::",
        encoding="utf-8",
        tags_file="tags.dat",
        users_file=None,
        rating_min=0.5,
        rating_max=5.0,
        rating_step=0.5,
        sha256="813c411ccb6122564edfe752e7f80c4dcc5aa25fa94c93622f6877a7ba252862",
    ),
    "ml-20m": MovieLensSpec(
        name="ml-20m",
        url=_URL + "ml-20m.zip",
        folder="ml-20m",
        ratings_file="ratings.csv",
        ratings_sep=",",
        movies_file="movies.csv",
        movies_sep=",",
        encoding="utf-8",
        tags_file="tags.csv",
        users_file=None,
        rating_min=0.5,
        rating_max=5.0,
        rating_step=0.5,
        sha256="96f243c338a8665f6bcc89c53edf6ee39162a846940de6b7c8c48aeada765ff3",
    ),
    "ml-latest": MovieLensSpec(
        name="ml-latest",
        url=_URL + "ml-latest.zip",
        folder="ml-latest",
        ratings_file="ratings.csv",
        ratings_sep=",",
        movies_file="movies.csv",
        movies_sep=",",
        encoding="utf-8",
        tags_file="tags.csv",
        users_file=None,
        rating_min=0.5,
        rating_max=5.0,
        rating_step=0.5,
        sha256=None,
        stable=False,
    ),
    "ml-latest-small": MovieLensSpec(
        name="ml-latest-small",
        url=_URL + "ml-latest-small.zip",
        folder="ml-latest-small",
        ratings_file="ratings.csv",
        ratings_sep=",",
        movies_file="movies.csv",
        movies_sep=",",
        encoding="utf-8",
        tags_file="tags.csv",
        users_file=None,
        rating_min=0.5,
        rating_max=5.0,
        rating_step=0.5,
        sha256="696d65a3dfceac7c45750ad32df2c259311949efec81f0f144fdfb91ebc9e436",
        stable=False,
    ),
}

_NAMES = list(MOVIELENS)


def _spec_for_label(label: str) -> MovieLensSpec | None:
    """The version whose name or zip folder is ``label`` (case-insensitive, ``.zip`` ignored)."""
    low = label.lower().removesuffix(".zip")
    for spec in MOVIELENS.values():
        if low in (spec.name, spec.folder.lower()):
            return spec
    return None


def movielens_version(source: str | os.PathLike[str]) -> MovieLensSpec | None:
    """The MovieLens version a folder or zip holds, or None when it is not a MovieLens one.

    Recognised by the name of the folder or zip, or by the one MovieLens folder inside it.
    """
    path = Path(source)
    if path.is_dir():
        spec = _spec_for_label(path.name)
        if spec is None:
            found = {
                s.name: s for c in path.iterdir() if c.is_dir() and (s := _spec_for_label(c.name))
            }
            spec = next(iter(found.values())) if len(found) == 1 else None
        return spec
    if path.is_file() and zipfile.is_zipfile(path):
        spec = _spec_for_label(path.name)
        if spec is None:
            with zipfile.ZipFile(path) as zf:
                tops = {n.split("/", 1)[0] for n in zf.namelist() if "/" in n}
            found = {s.name: s for t in tops if (s := _spec_for_label(t)) is not None}
            spec = next(iter(found.values())) if len(found) == 1 else None
        return spec
    return None
