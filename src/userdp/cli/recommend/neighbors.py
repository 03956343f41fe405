"""``userdp recommend neighbors``: the nearest items of items in a saved model (released
values only)."""

from __future__ import annotations

import argparse
import sys
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from userdp.data.movielens import MOVIELENS, load_movies
from userdp.exceptions import DataError, InvalidParameterError
from userdp.recommend import RecommenderModel

from ..options import common_options, positive_int, run_guarded
from ._options import PROG

__all__ = ["add_parser", "run"]

NEIGHBORS_DESCRIPTION = """\
Print the nearest items of each ITEM in a saved model's item embeddings, best first, as
tab-separated lines under a header: item, rank, neighbor, score (and title with --movies).
The embeddings are released values: this reads no private data.
"""


def add_parser(commands: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(
        "neighbors",
        parents=[common_options()],
        help="Print the nearest items of items in a saved model.",
        description=NEIGHBORS_DESCRIPTION,
        epilog="example:\n  userdp recommend neighbors --model model.npz 50 181 --n 5 "
        "--movies ml-100k.zip\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "items",
        nargs="+",
        metavar="ITEM",
        help="Item ids as in the training data (converted to the model's id type).",
    )
    parser.add_argument(
        "--model", required=True, metavar="MODEL", help="A model written by 'train'. Required."
    )
    parser.add_argument(
        "--n",
        type=positive_int,
        default=10,
        metavar="N",
        help="Neighbours per item. Default: %(default)s.",
    )
    parser.add_argument(
        "--metric",
        choices=("cosine", "dot"),
        default="cosine",
        help="Similarity: cosine of the embeddings, or their inner product (which favours "
        "items with large embeddings). Default: %(default)s.",
    )
    parser.add_argument(
        "--movies",
        default=None,
        metavar="SOURCE",
        help="Add titles from a MovieLens catalogue: a MovieLens folder or .zip, or its "
        "movies file (u.item, movies.dat or movies.csv, optionally .gz). Default: no titles.",
    )
    parser.set_defaults(
        handler=lambda args: run_guarded(f"{PROG} neighbors", run, args), parser=parser
    )
    return parser


def _parse_ids(texts: Sequence[str], type_: pa.DataType) -> list[Any]:
    if pa.types.is_integer(type_):
        convert: Callable[[str], Any] = int
    elif pa.types.is_floating(type_):
        convert = float
    else:
        return list(texts)
    out = []
    for text in texts:
        try:
            out.append(convert(text))
        except ValueError:
            raise InvalidParameterError(
                f"Unknown item id {text!r}: the model's item ids are {type_} numbers."
            ) from None
    return out


def _titles(source: str) -> dict[str, str]:
    """Movie id (as text) -> title, from a MovieLens folder, zip or movies file."""
    path = Path(source)
    if not path.exists():
        raise DataError(f"--movies: {source!r} does not exist.")
    if path.is_dir() or zipfile.is_zipfile(path):
        table = load_movies(source)
    else:
        base = path.name.lower().removesuffix(".gz")
        names = [s.name for s in MOVIELENS.values() if s.movies_file == base]
        if not names:
            raise InvalidParameterError(
                f"--movies: {source!r} is not a MovieLens folder, zip or movies file (u.item, "
                "movies.dat, movies.csv)."
            )
        table, errors = None, []
        for name in [None, *names]:  # the folder's own version first, then the file's kinds
            try:
                table = load_movies(path.parent, name=name)
                break
            except (DataError, InvalidParameterError) as err:
                errors.append(err)
        if table is None:
            raise errors[-1]
    ids = [str(v) for v in table.column("item").to_pylist()]
    return dict(zip(ids, table.column("title").to_pylist(), strict=True))


def run(args: argparse.Namespace) -> int:
    """Run ``userdp recommend neighbors`` on parsed arguments; errors propagate to the guard."""
    model = RecommenderModel.load(args.model)
    titles = _titles(args.movies) if args.movies is not None else None
    ids = _parse_ids(args.items, model.item_labels.type)
    codes = model.item_codes(pa.array(ids, type=model.item_labels.type))
    unknown = [text for text, c in zip(args.items, codes, strict=True) if c < 0]
    if unknown:
        shown = ", ".join(repr(u) for u in unknown[:5])
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        raise InvalidParameterError(
            f"Unknown item id(s) {shown}{more}: the model has no embedding for them."
        )
    scores: Any  # per-row arrays, then each row's scores of the items found
    found_codes, scores = model.similar_items(codes, N=args.n, metric=args.metric)
    neighbours = [model.item_labels.take(pa.array(row[row >= 0])) for row in found_codes]
    scores = [row[row_codes >= 0] for row, row_codes in zip(scores, found_codes, strict=True)]
    header = ["item", "rank", "neighbor", "score"] + (["title"] if titles is not None else [])
    lines = ["\t".join(header)]
    for text, found, row in zip(args.items, neighbours, scores, strict=True):
        for rank, (other, score) in enumerate(zip(found.to_pylist(), row, strict=True), 1):
            cells = [text, str(rank), str(other), f"{score:.4f}"]
            if titles is not None:
                cells.append(titles.get(str(other), ""))
            lines.append("\t".join(cells))
    sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()
    return 0
