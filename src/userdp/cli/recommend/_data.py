"""Library work the recommend subcommands share: reading the ratings (files or MovieLens), the
declared rating range, the public item features and the encoder of the am-* methods, the item
set (a public catalogue or a private selection) and the fit of one method."""

from __future__ import annotations

import argparse
import logging
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from scipy import sparse

from userdp.data.features import movielens_item_features
from userdp.data.io import infer_format, read_table, to_float64
from userdp.data.movielens import MOVIELENS, MovieLensSpec, load_movielens, movielens_version
from userdp.data.ratings import Ratings
from userdp.exceptions import DataError, InvalidParameterError
from userdp.partition import ALGORITHMS as SELECTION_ALGORITHMS
from userdp.partition import select_partitions
from userdp.privacy.budget import PrivacyBudget
from userdp.recommend import (
    FeatureFamily,
    IdEncoder,
    ItemSet,
    MatrixFactorization,
    PublicFeatureEncoder,
    PublicFeatureRecommender,
)

from ..options import given_parameters, report_duplicates
from ._options import (
    DEFAULT_FEATURES,
    MF_DEFAULTS,
    PUBLIC_METHODS,
    budget_keywords,
    is_private,
    keywords_for,
)

logger = logging.getLogger("userdp.cli")


def movielens_spec(path: Path) -> MovieLensSpec | None:
    """The MovieLens version of a folder or zip; None for anything else (a file, Parquet parts).

    A zip that is no MovieLens zip is an error: the CLI reads ratings files, not archives.
    """
    spec = movielens_version(path)
    if spec is None and path.is_file() and zipfile.is_zipfile(path):
        raise InvalidParameterError(
            f"{str(path)!r} is a zip file but not a MovieLens zip (ml-100k.zip, ml-1m.zip, "
            "ml-10m.zip, ml-20m.zip, ml-latest.zip, ml-latest-small.zip or one holding such "
            "a folder); extract ratings files from it first."
        )
    return spec


def read_ratings_table(path: str, args: argparse.Namespace) -> pa.Table:
    """A ratings file as a table with columns user, item and rating (float64)."""
    cols = (args.user_column, args.item_column, args.rating_column)
    table = read_table(path, columns=cols, format=args.format, delimiter=args.delimiter)
    for col in cols:
        if col not in table.column_names:
            raise DataError(
                f"{path}: column {col!r} not found; the input has columns "
                f"{table.column_names!r}. Name the columns with --user-column, --item-column "
                "and --rating-column."
            )
    rating = table.column(args.rating_column)
    if rating.type != pa.float64():  # names the row, not the value
        rating = to_float64(rating, args.rating_column, path)
    for col, values in zip(
        cols, (table.column(cols[0]), table.column(cols[1]), rating), strict=True
    ):
        if values.null_count:
            raise DataError(f"{path}: column {col!r} has {values.null_count} empty value(s).")
    return pa.table(
        {"user": table.column(cols[0]), "item": table.column(cols[1]), "rating": rating}
    )


def load(path: str, args: argparse.Namespace) -> tuple[Ratings, MovieLensSpec | None]:
    """Ratings of INPUT, and its MovieLens version if it is one."""
    spec = movielens_spec(Path(path))
    if spec is not None:
        logger.info("Reading MovieLens %s from %s.", spec.name, path)
        return load_movielens(path, name=spec.name), spec
    ratings = Ratings.from_table(read_ratings_table(path, args))
    report_duplicates(ratings.duplicates_dropped, "(user, item) ratings")
    return ratings, None


def rating_range(
    args: argparse.Namespace, spec: MovieLensSpec | None, methods: Sequence[str]
) -> tuple[float, float] | None:
    """--rating-range as given (the library checks it), else the MovieLens version's scale;
    private methods on other input must declare it."""
    if args.rating_range is not None:
        return (args.rating_range[0], args.rating_range[1])
    if spec is not None:
        return (spec.rating_min, spec.rating_max)
    private = [m for m in methods if is_private(m)]
    if private:
        raise InvalidParameterError(
            f"--method {private[0]} is private and needs the declared rating scale: pass "
            "--rating-range LOW HIGH (for example --rating-range 0.5 5). It bounds each user's "
            "influence, so it is never read from the data; only MovieLens input has a default."
        )
    return None


def check_public(
    args: argparse.Namespace, methods: Sequence[str], spec: MovieLensSpec | None
) -> None:
    """Before reading data: a source for the am-* methods' features."""
    if not any(m in PUBLIC_METHODS for m in methods):
        return
    features = args.features or DEFAULT_FEATURES
    named = [f for f in features if f != "id"]
    if named and spec is None and args.item_features is None and Path(args.input).exists():
        default = "" if args.features is not None else " (the default)"
        raise InvalidParameterError(
            f"--features {','.join(features)}{default} needs MovieLens INPUT or a feature "
            f"table: {args.input!r} is a ratings file, so name its public item features with "
            "--item-features FILE (columns item, feature and an optional weight), or pass "
            "--features id for the id-only model."
        )
    if "tags" in named and spec is not None and spec.tags_file is None:
        with_tags = ", ".join(s.name for s in MOVIELENS.values() if s.tags_file)
        raise InvalidParameterError(
            f"--features tags: MovieLens {spec.name} has no tags (only {with_tags} have); "
            "drop tags from --features."
        )
    if "tags" in named and spec is not None:
        logger.warning(
            "--features tags: MovieLens tags are written by users; they are treated as public "
            "item features (GroupLens publishes them), so the privacy guarantee covers the "
            "ratings, not who tagged what."
        )
    if "genome" in named and spec is not None and spec.name not in ("ml-20m", "ml-latest"):
        raise InvalidParameterError(
            f"--features genome: MovieLens {spec.name} has no Tag Genome (only ml-20m and "
            "ml-latest have one); drop genome from --features."
        )
    if args.family_dim is not None and list(features) == ["id"] and args.item_features is None:
        logger.warning("--family-dim does not apply to --features id (no feature families).")


def _file_family(path: str, labels: Any, n_items: int) -> tuple[str, sparse.csr_matrix]:
    """``--item-features FILE`` as one family: a column per distinct feature string.

    Item ids are compared as text (a CSV reads them as strings); rows of items absent from the
    ratings are dropped, and items without a row get an empty one.
    """
    where = f"--item-features {path}"
    table = read_table(path, columns=("item", "feature"))
    for col in ("item", "feature"):
        if col not in table.column_names:
            raise DataError(
                f"{where}: column {col!r} not found; the file has columns "
                f"{table.column_names!r} (needed: item, feature and an optional weight)."
            )
    cols = ("item", "feature", "weight") if "weight" in table.column_names else ("item", "feature")
    for col in cols:
        if table.column(col).null_count:
            raise DataError(f"{where}: column {col!r} has empty values.")
    if isinstance(labels, pa.ChunkedArray):
        labels = labels.combine_chunks()
    try:
        items = table.column("item").cast(pa.string())
        codes = pc.index_in(items, value_set=labels.cast(pa.string()))
        feature = table.column("feature").cast(pa.string())
        weight = (
            table.column("weight").cast(pa.float64()).to_numpy()
            if "weight" in cols
            else np.ones(table.num_rows)
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
        raise DataError(f"{where}: {str(err).splitlines()[0]}") from err
    codes = pc.fill_null(codes, -1).to_numpy().astype(np.int64)
    keep = codes >= 0
    if not keep.any():
        raise DataError(
            f"{where}: no row names an item of the ratings (item ids are compared as text)."
        )
    feature = feature.filter(pa.array(keep))
    vocab = pc.unique(feature)
    vocab = vocab.take(pc.array_sort_indices(vocab))
    col = pc.index_in(feature, value_set=vocab).to_numpy().astype(np.int64)
    matrix = sparse.coo_matrix(
        (weight[keep], (codes[keep], col)), shape=(n_items, len(vocab))
    ).tocsr()
    return Path(path).name.split(".")[0] or "file", matrix


def item_families(
    args: argparse.Namespace, spec: MovieLensSpec | None, ratings: Any
) -> list[FeatureFamily]:
    """The encoder's feature families, rows aligned to ``ratings.item_labels``."""
    features = args.features or DEFAULT_FEATURES
    labels, n = ratings.item_labels, ratings.n_items
    named = [f for f in features if f != "id"]
    built: dict[str, Any] = {}
    if named and spec is not None:
        base = [f for f in named if f in ("genres", "year")]
        if base or "tags" in named or "genome" in named:
            # tags=True / genome=True acknowledge that user-derived data are treated as public.
            got = movielens_item_features(
                args.input,
                labels,
                name=spec.name,
                families=base or ["genres"],
                tags="tags" in named,
                genome="genome" in named,
            )
            built.update({f.name: f.matrix for f in got})
        if "decade" in named:
            (decade,) = movielens_item_features(
                args.input, labels, name=spec.name, families=["year"], year_buckets="decade"
            )
            built["decade"] = decade.matrix
    parts = [(f, built[f]) for f in named if f in built]
    if args.item_features is not None:
        name, matrix = _file_family(args.item_features, labels, n)
        taken = {p[0] for p in parts} | {"id"}
        parts.append((name if name not in taken else f"{name}-file", matrix))
    if "id" in features:
        parts.append(("id", sparse.identity(n, format="csr")))
    families = []
    for name, matrix in parts:
        if matrix.shape[1] == 0 or matrix.nnz == 0:
            logger.warning("The feature family %r has no value for any item; left out.", name)
        else:
            families.append(FeatureFamily(name, matrix))
    if not families:
        raise DataError(
            f"--features {','.join(features)}: every family is empty for the items of "
            f"{args.input!r}; add id or another family."
        )
    for f in families:
        logger.info("Feature family %r: %d values, %d entries.", f.name, f.n_values, f.matrix.nnz)
    return families


def encoder(args: argparse.Namespace, families: Sequence[FeatureFamily], n_items: int) -> Any:
    """IdEncoder for the id family alone, else the PublicFeatureEncoder of the families."""
    seed = 0 if args.encoder_seed is None else args.encoder_seed
    dim = MF_DEFAULTS["dim"] if args.dim is None else args.dim
    if [f.name for f in families] == ["id"] and args.item_features is None:
        return IdEncoder(n_items, dim, seed=seed)
    return PublicFeatureEncoder(families, dim, family_dim=args.family_dim, seed=seed)


def describe_encoder(encoder: Any) -> str:
    if isinstance(encoder, IdEncoder):
        return f"id-only encoder ({encoder.n_items} item embeddings)"
    parts = ", ".join(f"{f.name} ({f.n_values})" for f in encoder.families)
    return f"encoder on {parts} with family dimension {encoder.family_dim}"


def check_user_features(args: argparse.Namespace, spec: MovieLensSpec | None) -> None:
    """Before reading data: --user-features needs an am-* method and ml-100k or ml-1m."""
    if not args.user_features:
        return
    if args.method not in PUBLIC_METHODS:
        raise InvalidParameterError(
            f"--user-features applies to the am-* methods ({', '.join(PUBLIC_METHODS)}); got "
            f"--method {args.method}."
        )
    if spec is None or spec.name not in ("ml-100k", "ml-1m"):
        raise InvalidParameterError(
            "--user-features reads MovieLens' user file: INPUT must be ml-100k or ml-1m (the "
            "versions with age, gender and occupation)."
        )


# -- the item set -------------------------------------------------------------------------------
def _is_table_file(path: str) -> bool:
    """Whether ``--items`` names a table (CSV, Parquet, ...) rather than one id per line."""
    if Path(path).suffix.lower() == ".txt":
        return False
    try:
        infer_format(path)
    except InvalidParameterError:  # no table suffix: /dev/stdin, a pipe, ids.list
        return False
    return True


def _read_catalogue(path: str, item_type: pa.DataType) -> pa.Array:
    """``--items FILE``: one item id per line (.txt or a name without a table suffix, such as
    /dev/stdin; as ``userdp select`` writes), or a table
    with an ``item`` column. Ids are matched to the ratings' id type when they convert."""
    where = f"--items {path}"
    if not _is_table_file(path):  # .txt, or a stream such as /dev/stdin
        try:
            with open(path, encoding="utf-8") as f:
                ids = pa.array([line.rstrip("\r\n") for line in f if line.strip()])
        except (OSError, UnicodeDecodeError) as err:
            raise DataError(f"{where}: cannot read the file ({type(err).__name__}).") from err
    else:
        table = read_table(path, columns=("item",))
        if "item" not in table.column_names:
            raise DataError(
                f"{where}: column 'item' not found; the file has columns "
                f"{table.column_names!r} (or give a .txt file with one item id per line)."
            )
        ids = table.column("item").combine_chunks()
    if len(ids) == 0:
        raise DataError(f"{where}: the catalogue is empty.")
    if ids.type != item_type:
        try:
            ids = ids.cast(item_type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass  # compared as given; unmatched ratings are dropped
    return pc.unique(ids)


def item_set(
    args: argparse.Namespace, ratings: Ratings, budget: PrivacyBudget | None
) -> tuple[ItemSet | None, PrivacyBudget | None]:
    """The item set of ``train`` and the budget left for the model.

    ``--items FILE``: a public catalogue, free. Otherwise, for private methods: partition
    selection on the (user, item) pairs with ``--selection-fraction`` of epsilon and delta
    (the CLI may use two capabilities; the recommender itself never imports partition). The
    non-private als trains on the data's items.
    """
    if args.items is not None:
        catalogue = ItemSet.public(_read_catalogue(args.items, ratings.item_labels.type))
        if ratings.restrict_items(catalogue.labels)[0].n_ratings == 0:
            raise DataError(
                f"--items {args.items}: no rating names an item of the catalogue (item ids are "
                f"compared as {catalogue.labels.type}); check the ids and --item-column."
            )
        return catalogue, budget
    if budget is None:
        return None, None
    f = args.selection_fraction
    selection_budget, model_budget = budget.split([f, 1.0 - f])
    pairs = (ratings.users, ratings.item_labels.take(pa.array(ratings.items)))
    # Basic composition keeps the selection's (epsilon, delta) a fixed share of the budget, as
    # the model's calibration assumes (the tight default would spend less than asked overall).
    tight = "composition" in SELECTION_ALGORITHMS[args.selection_algorithm].options
    basic: dict[str, Any] = {"composition": "basic"} if tight else {}
    result = select_partitions(
        pairs,
        epsilon=selection_budget.epsilon,
        delta=selection_budget.delta,
        algorithm=args.selection_algorithm,
        seed=args.seed,
        **basic,
    )
    logger.info(
        "Selected %d items privately (%s, epsilon %.4g, delta %.3g).",
        len(result),
        args.selection_algorithm,
        selection_budget.epsilon,
        selection_budget.delta,
    )
    if len(result) == 0:
        raise DataError(
            "Private item selection released no item at this budget: raise --epsilon or "
            "--selection-fraction, or pass a public catalogue with --items FILE."
        )
    return ItemSet.selected(result), model_budget


def fit(
    method: str,
    train: Any,  # Ratings, or a Spark DataFrame for the Spark engine
    budget: PrivacyBudget | None,
    rating_range: tuple[float, float] | None,
    args: argparse.Namespace,
    options: dict[str, Any],
    *,
    items: Any = None,
    encoder: Any = None,
    user_features: Any = None,
    progress: bool = False,
) -> MatrixFactorization | PublicFeatureRecommender:
    """Train ``method`` (its release is ``model_``, a RecommenderModel): the keywords given on
    the command line and the budget go to the estimator, which validates them."""
    common = {
        "items": items,
        "rating_range": rating_range,
        "seed": args.seed,
        "progress": progress,
        **given_parameters(args, ("steps",)),
        **budget_keywords(budget),
        **keywords_for(method, options),
    }
    if method not in PUBLIC_METHODS:
        dim = given_parameters(args, ("dim",))
        return MatrixFactorization(method=method, **dim, **common).fit(train)
    model = PublicFeatureRecommender(encoder=encoder, variant=PUBLIC_METHODS[method], **common)
    model.fit(train, user_features=user_features)
    if not np.all(np.isfinite(model.item_factors_)):
        raise DataError(f"{method} diverged (non-finite item embeddings); lower --learning-rate.")
    return model
