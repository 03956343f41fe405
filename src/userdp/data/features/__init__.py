"""Sparse item and user features aligned to a code book: the public matrix X_pub and friends.

Private learning with public features (Krichene et al., https://arxiv.org/abs/2310.15454,
Section 2.1 in v1) joins each private rating with a row of a public item-feature matrix
``X_pub``. Appendix E.1 (in v1) builds it for MovieLens from the release year (univalent, one
value per movie) and the genres (multivalent, a bag of words whose repetitions count as
weights), plus richer metadata when available. This package builds those families as
:class:`SparseFeatures`, one CSR matrix each, whose row ``c`` describes item code ``c`` of the
model's code book (``Ratings.item_labels``):

- :func:`item_features`: genres (multi-hot) and year or decade (one-hot) of a movie table;
- :func:`tag_features`: bags of user-written tags (public only by the caller's choice);
- :func:`movielens_item_features`, :func:`movielens_user_features`: the same for a MovieLens
  folder or zip, the latter giving the *private* demographics of ml-100k and ml-1m.

Everything is vectorized with PyArrow compute and NumPy: ml-20m's 27k movies take
milliseconds. :class:`SparseFeatures` is the one feature container: the recommender's encoders
embed it (``userdp.recommend.FeatureFamily`` is the same class), while this package imports no
capability (the data layer imports no algorithm).

Modules: :mod:`.container` (the container and the matrix builders), :mod:`.items` (features of
any movie table) and :mod:`.movielens` (a MovieLens folder or zip).
"""

from userdp.data.features.container import SparseFeatures
from userdp.data.features.items import genome_features, item_features, tag_features
from userdp.data.features.movielens import movielens_item_features, movielens_user_features

__all__ = [
    "SparseFeatures",
    "genome_features",
    "item_features",
    "movielens_item_features",
    "movielens_user_features",
    "tag_features",
]
