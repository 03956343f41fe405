"""``userdp recommend``: train, evaluate and query private matrix-factorization recommenders.

Three subcommands over :class:`~userdp.recommend.MatrixFactorization` and, for the ``am-*``
methods, :class:`~userdp.recommend.PublicFeatureRecommender` (an item encoder on public item
features, trained by AM-SSP or DP-SGD), one module each:

* :mod:`.train`: fit one method on a ratings file or a MovieLens folder/zip and save the
  released model (item embeddings, private centring value and private item counts) as ``.npz``;
* :mod:`.evaluate`: score a saved model on history/test files, or split a data set with a
  benchmark protocol (ML10M RMSE, ML20M Recall@k), train every method at every epsilon and
  score them, always beside the non-private global-mean / popularity baselines;
* :mod:`.neighbors`: the nearest items of given items in a saved model, with MovieLens titles.

:mod:`._options` holds the shared flags (the model's built from the recommenders' declared
parameter tables) and :mod:`._data` the shared reading, features, item set and fit.
"""

from __future__ import annotations

import argparse
from typing import Any

from . import evaluate, neighbors, train

__all__ = ["add_parser"]

DESCRIPTION = """\
Train, evaluate and query recommenders built by matrix factorization under user-level
(epsilon, delta)-differential privacy (Krichene et al. 2023): only the item embeddings, a
private centring value and private item counts are released; a user's embedding is computed
from the released items and the user's own history. The am-* methods embed each item with an
encoder of its public features (genres, year, ...; Krichene et al. 2023b), trained privately.
"""

EPILOG = """\
examples:
  userdp recommend train ml-100k.zip --epsilon 1 --delta 1e-5 --output model.npz
  userdp recommend train ml-100k.zip --method am-ssp --features genres,year,id \\
      --epsilon 1 --delta 1e-5 --output am-ssp.npz
  userdp recommend evaluate ml-100k/ --protocol ml10m --method adadpals,dpals-uniform \\
      --epsilon 1 --epsilon 5 --delta 1e-5
  userdp recommend neighbors --model model.npz 50 181 --movies ml-100k/
"""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``recommend`` and its subcommands on the ``userdp`` subcommand parsers."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "recommend",
        help="Train, evaluate and query private matrix-factorization recommenders.",
        description=DESCRIPTION,
        epilog=EPILOG + "\nRun 'userdp recommend COMMAND --help' for the options of a command.\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(title="commands", dest="recommend_command", metavar="COMMAND")
    commands.required = True
    train.add_parser(commands)
    evaluate.add_parser(commands)
    neighbors.add_parser(commands)
    parser.set_defaults(parser=parser)
    return parser
