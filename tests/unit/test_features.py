"""Sparse item/user features: exact matrices on tiny catalogues and fake MovieLens folders."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import scipy.sparse as sp

from userdp.data.features import (
    SparseFeatures,
    genome_features,
    item_features,
    movielens_item_features,
    movielens_user_features,
    tag_features,
)
from userdp.data.movielens import MOVIELENS, load_genome, load_movielens, load_movies
from userdp.exceptions import DataError, InvalidParameterError

# item, genres, year: a movie without year (20), one with no genres (20, 40), one whose only
# genre is the "(no genres listed)" marker (40).
MOVIES = pa.table(
    {
        "item": pa.array([10, 11, 20, 30, 40], pa.int64()),
        "title": ["A (1995)", "B (1977)", "C", "D (1995)", "E (2009)"],
        "genres": pa.array(
            [
                ["Drama", "Musical"],
                ["Action", "Adventure", "Sci-Fi"],
                [],
                ["Drama"],
                ["(no genres listed)"],
            ],
            pa.list_(pa.string()),
        ),
        "year": pa.array([1995, 1977, None, 1995, 2009], pa.int32()),
    }
)
# Code book: 99 has no movie row.
LABELS = pa.array([10, 11, 20, 30, 40, 99], pa.int64())
GENRES = ["Action", "Adventure", "Drama", "Musical", "Sci-Fi"]
GENRE_ROWS = [
    [0, 0, 1, 1, 0],  # 10
    [1, 1, 0, 0, 1],  # 11
    [0, 0, 0, 0, 0],  # 20: no genres
    [0, 0, 1, 0, 0],  # 30
    [0, 0, 0, 0, 0],  # 40: (no genres listed)
    [0, 0, 0, 0, 0],  # 99: no movie row
]
YEARS = ["1977", "1995", "2009"]
YEAR_ROWS = [[0, 1, 0], [1, 0, 0], [0, 0, 0], [0, 1, 0], [0, 0, 1], [0, 0, 0]]


def dense(f: SparseFeatures) -> list[list[float]]:
    return f.matrix.toarray().tolist()


# -- fake MovieLens folders ---------------------------------------------------------------------
def _flags(*on: int) -> str:
    return "|".join("1" if i in on else "0" for i in range(19))


GENRE_100K = (
    "unknown|0\nAction|1\nAdventure|2\nAnimation|3\nChildren's|4\nComedy|5\nCrime|6\n"
    "Documentary|7\nDrama|8\nFantasy|9\nFilm-Noir|10\nHorror|11\nMusical|12\nMystery|13\n"
    "Romance|14\nSci-Fi|15\nThriller|16\nWar|17\nWestern|18\n\n"
)
ITEM_100K = (
    f"1|Toy Story (1995)|01-Jan-1995||http://x|{_flags(3, 4, 5)}\n"
    f"2|GoldenEye (1995)|01-Jan-1995||http://y|{_flags(1, 2, 16)}\n"
    f"3|Casablanca (1942)|01-Jan-1942||http://z|{_flags(8, 14, 17)}\n"
    f"4|unknown||||{_flags(0)}\n"
)
# Ages on both sides of every ml-1m bucket edge.
AGES_100K = [7, 17, 18, 24, 25, 34, 35, 44, 45, 49, 50, 55, 56, 73]
AGE_BUCKETS = ["under 18", "18-24", "25-34", "35-44", "45-49", "50-55", "56+"]
OCCUPATIONS_100K = (
    "administrator|artist|doctor|educator|engineer|entertainment|executive|healthcare|homemaker|"
    "lawyer|librarian|marketing|none|other|programmer|retired|salesman|scientist|student|"
    "technician|writer"
).split("|")
USERS_100K = [
    (u + 1, age, "MF"[u % 2], ("technician", "writer", "student")[u % 3], f"{10000 + u}")
    for u, age in enumerate(AGES_100K)
]
USERS_1M = b"1::F::1::10::48067\n2::M::56::16::70072\n3::M::25::15::55117\n"
RATINGS_CSV = b"userId,movieId,rating,timestamp\n1,10,4.0,1\n1,30,3.5,2\n2,11,5.0,3\n3,20,1.0,4\n"
MOVIES_CSV = (
    "movieId,title,genres\n"
    '10,"Misérables, Les (1995)",Drama|Musical\n'
    "11,Star Wars (1977),Action|Adventure|Sci-Fi\n"
    "20,Babylon 5,(no genres listed)\n"
    "30,Heat (1995),Drama\n"
    "50,Unrated (2001),Comedy\n"
).encode()
TAGS_CSV = (
    b"userId,movieId,tag,timestamp\n"
    b"1,10,Victor Hugo,1\n"
    b"2,10,victor hugo ,2\n"
    b"3,10,musical,3\n"
    b"1,11,space,4\n"
    b"2,11,Space,5\n"
    b"3,11,space,6\n"
    b"1,30,musical,7\n"
    b"2,30,rare,8\n"
    b"2,50,space,9\n"
)


def write_folder(root: Path, name: str, files: dict[str, bytes]) -> Path:
    folder = root / MOVIELENS[name].folder
    folder.mkdir(parents=True)
    for fname, data in files.items():
        (folder / fname).write_bytes(data)
    return folder


def fake_100k(root: Path) -> Path:
    users = "".join("|".join(map(str, row)) + "\n" for row in USERS_100K)
    return write_folder(
        root,
        "ml-100k",
        {
            "u.data": b"1\t1\t5\t881250949\n2\t3\t4\t881250950\n",
            "u.item": ITEM_100K.encode("latin-1"),
            "u.genre": GENRE_100K.encode("latin-1"),
            "u.user": users.encode(),
        },
    )


def fake_small(root: Path) -> Path:
    return write_folder(
        root,
        "ml-latest-small",
        {"ratings.csv": RATINGS_CSV, "movies.csv": MOVIES_CSV, "tags.csv": TAGS_CSV},
    )


# -- item_features ------------------------------------------------------------------------------
def test_genres_are_multi_hot_and_years_one_hot():
    genres, year = item_features(MOVIES, LABELS)
    assert (genres.name, genres.values, dense(genres)) == ("genres", GENRES, GENRE_ROWS)
    assert (year.name, year.values, dense(year)) == ("year", YEARS, YEAR_ROWS)
    for f in (genres, year):
        assert isinstance(f.matrix, sp.csr_matrix) and f.matrix.dtype == np.float64
        assert f.shape == (len(LABELS), len(f.values))


def test_rows_follow_a_shuffled_code_book():
    perm = np.random.default_rng(3).permutation(len(LABELS))
    shuffled = LABELS.take(pa.array(perm))
    genres, year = item_features(MOVIES, shuffled)
    assert dense(genres) == [GENRE_ROWS[p] for p in perm]
    assert dense(year) == [YEAR_ROWS[p] for p in perm]


def test_code_book_may_be_a_numpy_array_of_another_integer_type():
    (genres,) = item_features(MOVIES, np.array([30, 10], dtype=np.int32), families=["genres"])
    assert genres.values == ["Drama", "Musical"]
    assert dense(genres) == [[1.0, 0.0], [1.0, 1.0]]


def test_families_come_in_the_order_asked():
    year, genres = item_features(MOVIES, LABELS, families=("year", "genres"))
    assert (year.name, genres.name) == ("year", "genres")


def test_decades_are_one_hot_and_sorted_by_number():
    table = pa.table(
        {
            "item": [1, 2, 3, 4],
            "genres": pa.array([[], [], [], []], pa.list_(pa.string())),
            "year": pa.array([1995, 2001, 1990, 987], pa.int32()),
        }
    )
    (year,) = item_features(table, [1, 2, 3, 4], families=["year"], year_buckets="decade")
    assert year.values == ["980s", "1990s", "2000s"]
    assert dense(year) == [[0, 1, 0], [0, 0, 1], [0, 1, 0], [1, 0, 0]]


def test_min_count_drops_values_held_by_too_few_items_of_the_code_book():
    genres, year = item_features(MOVIES, LABELS, min_count=2)
    assert genres.values == ["Drama"] and dense(genres) == [[1], [0], [0], [1], [0], [0]]
    assert year.values == ["1995"] and dense(year) == [[1], [0], [0], [1], [0], [0]]
    # Counted over the code book: without movie 30, Drama and 1995 are held once.
    genres, year = item_features(MOVIES, [10, 11], min_count=2)
    assert genres.values == [] and year.values == [] and genres.shape == (2, 0)


def test_matches_a_python_loop_on_a_random_catalogue():
    rng = np.random.default_rng(0)
    names = [f"g{k}" for k in range(12)]
    n = 300
    genres = [list(rng.choice(names, size=rng.integers(0, 4))) for _ in range(n)]
    years = [None if rng.random() < 0.1 else int(rng.integers(1900, 2020)) for _ in range(n)]
    ids = rng.permutation(np.arange(1000, 1000 + 2 * n))[:n]
    table = pa.table({"item": ids, "genres": genres, "year": pa.array(years, pa.int32())})
    labels = rng.permutation(np.concatenate([ids[: n - 20], [5, 6, 7]]))
    got_g, got_y = item_features(table, labels)
    # Reference: a dict per code, repetitions counted.
    row_of = {int(i): r for r, i in enumerate(ids)}
    ref_g = np.zeros((labels.size, len(got_g.values)))
    ref_y = np.zeros((labels.size, len(got_y.values)))
    for c, label in enumerate(labels):
        r = row_of.get(int(label))
        if r is None:
            continue
        for g in genres[r]:
            ref_g[c, got_g.values.index(g)] += 1
        if years[r] is not None:
            ref_y[c, got_y.values.index(str(years[r]))] += 1
    assert got_g.values == sorted(
        {g for r in map(row_of.get, labels.tolist()) if r is not None for g in genres[r]}
    )
    np.testing.assert_array_equal(got_g.matrix.toarray(), ref_g)
    np.testing.assert_array_equal(got_y.matrix.toarray(), ref_y)


def test_27k_movies_with_sparse_labels_are_encoded():
    n = 27_000
    rng = np.random.default_rng(1)
    counts = rng.integers(0, 4, size=n)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    flat = pa.array(
        np.array([f"g{k}" for k in range(20)], dtype=object)[rng.integers(0, 20, size=offsets[-1])]
    )
    table = pa.table(
        {
            "item": np.arange(n, dtype=np.int64) * 3,
            "genres": pa.ListArray.from_arrays(pa.array(offsets), flat),
            "year": pa.array(rng.integers(1900, 2020, size=n).astype(np.int32)),
        }
    )
    labels = rng.permutation(np.arange(0, 3 * n, 2))
    genres, year = item_features(table, labels)  # its speed is measured in benchmarks/
    assert genres.matrix.shape[0] == year.shape[0] == labels.size
    assert genres.matrix.nnz > 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"families": "genres"}, "'families' parameter of item_features"),
        ({"families": ()}, "'families' parameter of item_features"),
        ({"families": ("genres", "cast")}, "'families' parameter of item_features"),
        ({"families": ("year", "year")}, "must not repeat"),
        ({"year_buckets": "century"}, "'year_buckets' parameter of item_features"),
        ({"min_count": 0}, "'min_count' parameter of item_features"),
        ({"min_count": 1.5}, "'min_count' parameter of item_features"),
    ],
)
def test_bad_parameters_are_rejected(kwargs, match):
    with pytest.raises(InvalidParameterError, match=match):
        item_features(MOVIES, LABELS, **kwargs)


def test_bad_tables_and_code_books_are_data_errors():
    with pytest.raises(DataError, match=r"lacks column\(s\) \['year'\]"):
        item_features(MOVIES.drop_columns(["year"]), LABELS)
    twice = pa.concat_tables([MOVIES, MOVIES.slice(0, 1)])
    with pytest.raises(DataError, match="column 'item' holds some id on more than one row"):
        item_features(twice, LABELS)
    with pytest.raises(DataError, match="more than once"):
        item_features(MOVIES, [10, 10])
    with pytest.raises(DataError, match="has type string but column 'item' has type int64"):
        item_features(MOVIES, ["ten", "eleven"])
    with pytest.raises(DataError, match="has type string but column 'item' has type int64"):
        item_features(MOVIES, ["10"])
    with pytest.raises(InvalidParameterError, match="'table' parameter of item_features"):
        item_features(MOVIES.to_pylist(), LABELS)


# -- tag_features -------------------------------------------------------------------------------
TAGS = pa.table(
    {
        "user": [1, 2, 3, 1, 2, 3, 1, 2, 1, 2],
        "item": pa.array([10, 10, 10, 11, 11, 11, 30, 30, 99, 30], pa.int64()),
        "tag": ["Pixar", " pixar", "funny", "space", "Space", "space", "funny", "rare", "x", " "],
    }
)


def test_tags_are_counted_and_rare_tags_dropped():
    f = tag_features(TAGS, LABELS, public=True)  # min_count=2
    assert (f.name, f.values) == ("tags", ["funny", "pixar", "space"])
    assert dense(f) == [
        [1, 2, 0],  # 10: funny, Pixar + " pixar"
        [0, 0, 3],  # 11: space three times
        [0, 0, 0],
        [1, 0, 0],  # 30: funny ("rare" is used once, " " is empty)
        [0, 0, 0],
        [0, 0, 0],  # 99: its tag "x" is used once
    ]


def test_tags_keep_case_and_singletons_when_asked():
    f = tag_features(TAGS, LABELS, min_count=1, lowercase=False, public=True)
    assert f.values == ["Pixar", "Space", "funny", "pixar", "rare", "space", "x"]
    assert f.matrix.sum() == 9  # every non-empty application
    assert dense(f)[1] == [0, 1, 0, 0, 0, 2, 0]


@pytest.mark.parametrize("public", [False, None, 1, "yes"])
def test_tags_need_an_explicit_public_true(public):
    with pytest.raises(InvalidParameterError, match="needs public=True"):
        tag_features(TAGS, LABELS, public=public)
    with pytest.raises(InvalidParameterError, match="needs public=True"):
        tag_features(TAGS, LABELS)


def test_tag_table_needs_item_and_tag_columns():
    with pytest.raises(DataError, match=r"lacks column\(s\) \['tag'\]"):
        tag_features(TAGS.drop_columns(["tag"]), LABELS, public=True)


# -- MovieLens folders --------------------------------------------------------------------------
def test_movielens_item_features_align_to_the_ratings_code_book(tmp_path):
    folder = fake_small(tmp_path)
    ratings = load_movielens(folder)
    assert ratings.item_labels.to_pylist() == [10, 11, 20, 30]
    genres, year, tags = movielens_item_features(folder, ratings.item_labels, tags=True)
    assert genres.values == ["Action", "Adventure", "Drama", "Musical", "Sci-Fi"]
    assert dense(genres) == [[0, 0, 1, 1, 0], [1, 1, 0, 0, 1], [0, 0, 0, 0, 0], [0, 0, 1, 0, 0]]
    assert year.values == ["1977", "1995"]
    assert dense(year) == [[0, 1], [1, 0], [0, 0], [0, 1]]
    # Movie 50 is not in the code book: its "space" does not count, "rare" is used once.
    assert tags.values == ["musical", "space", "victor hugo"]
    assert dense(tags) == [[1, 0, 2], [0, 3, 0], [0, 0, 0], [1, 0, 0]]


def test_movielens_item_features_on_a_shuffled_catalogue(tmp_path):
    folder = fake_small(tmp_path)
    movies = load_movies(folder)
    labels = [50, 30, 777, 10, 20, 11]
    genres, year = movielens_item_features(folder, labels)
    ref_genres, ref_year = item_features(movies, labels)
    assert genres.values == ref_genres.values == sorted(genres.values)
    assert dense(genres) == dense(ref_genres) and dense(year) == dense(ref_year)
    assert year.values == ["1977", "1995", "2001"]
    assert dense(year) == [[0, 0, 1], [0, 1, 0], [0, 0, 0], [0, 1, 0], [0, 0, 0], [1, 0, 0]]


def test_movielens_100k_genres_come_from_the_flags(tmp_path):
    folder = fake_100k(tmp_path)
    genres, year = movielens_item_features(folder, [4, 3, 2, 1], year_buckets="decade")
    flagged = ["Animation", "Children's", "Comedy", "Action", "Adventure", "Thriller", "Drama"]
    assert genres.values == sorted([*flagged, "Romance", "War", "unknown"])
    got = [{genres.values[k] for k in row.indices} for row in genres.matrix]
    assert got == [
        {"unknown"},
        {"Drama", "Romance", "War"},
        {"Action", "Adventure", "Thriller"},
        {"Animation", "Children's", "Comedy"},
    ]
    assert year.values == ["1940s", "1990s"]
    assert dense(year) == [[0, 0], [1, 0], [0, 1], [0, 1]]


def test_movielens_tags_of_a_version_without_tags_are_a_data_error(tmp_path):
    with pytest.raises(DataError, match="has no tags file"):
        movielens_item_features(fake_100k(tmp_path), [1, 2], tags=True)


GENOME_SCORES = (
    b"movieId,tagId,relevance\n"
    b"10,1,0.90\n10,2,0.20\n10,3,0.55\n"
    b"11,1,0.10\n11,2,0.95\n11,3,0.50\n"
    b"50,1,0.99\n50,2,0.99\n50,3,0.99\n"
)
GENOME_TAGS = b"tagId,tag\n1,musical\n2,space\n3,based on a book\n"


def fake_20m(root: Path, *, genome: bool = True) -> Path:
    files = {"ratings.csv": RATINGS_CSV, "movies.csv": MOVIES_CSV}
    if genome:
        files |= {"genome-scores.csv": GENOME_SCORES, "genome-tags.csv": GENOME_TAGS}
    return write_folder(root, "ml-20m", files)


def test_the_tag_genome_keeps_relevant_tags_weighted_by_relevance(tmp_path):
    folder = fake_20m(tmp_path)
    scores = load_genome(folder)
    assert scores.num_rows == 9 and scores.column("tag").to_pylist()[:3] == [
        "musical",
        "space",
        "based on a book",
    ]
    ratings = load_movielens(folder)  # items 10, 11, 20, 30; movie 50 is not rated
    (genome,) = movielens_item_features(
        folder, ratings.item_labels, families=["genres"], genome=True
    )[1:]
    assert genome.name == "genome"
    assert genome.values == ["based on a book", "musical", "space"]  # sorted; 50's don't count
    np.testing.assert_allclose(
        genome.matrix.toarray(), [[0.55, 0.90, 0.0], [0.50, 0.0, 0.95], [0, 0, 0], [0, 0, 0]]
    )
    strict = genome_features(scores, ratings.item_labels, min_relevance=0.6, public=True)
    assert strict.values == ["musical", "space"]


def test_the_tag_genome_needs_public_true_and_a_version_that_has_one(tmp_path):
    with pytest.raises(InvalidParameterError, match="needs public=True"):
        genome_features(load_genome(fake_20m(tmp_path / "a")), [10, 11])
    assert load_genome(fake_20m(tmp_path / "b", genome=False)) is None
    with pytest.raises(DataError, match="has no Tag Genome"):
        movielens_item_features(fake_small(tmp_path / "c"), [10], genome=True)


# -- user features ------------------------------------------------------------------------------
def test_movielens_100k_user_features_are_one_hot_with_ml_1m_age_buckets(tmp_path):
    folder = fake_100k(tmp_path)
    labels = [999, *range(len(AGES_100K), 0, -1)]  # an unknown user, then ids in reverse
    age, gender, occupation = movielens_user_features(folder, labels)
    assert (age.name, gender.name, occupation.name) == ("age", "gender", "occupation")
    assert age.values == AGE_BUCKETS
    assert gender.values == ["F", "M"]
    assert occupation.values == OCCUPATIONS_100K
    for f in (age, gender, occupation):
        m = f.matrix.toarray()
        assert m[0].sum() == 0  # user 999
        assert (m[1:].sum(axis=1) == 1).all()
    expected_age = [
        "under 18",
        "under 18",
        "18-24",
        "18-24",
        "25-34",
        "25-34",
        "35-44",
        "35-44",
        "45-49",
        "45-49",
        "50-55",
        "50-55",
        "56+",
        "56+",
    ]
    got_age = [age.values[row.indices[0]] for row in age.matrix[1:]]
    assert got_age == expected_age[::-1]
    users = USERS_100K[::-1]
    assert [gender.values[row.indices[0]] for row in gender.matrix[1:]] == [u[2] for u in users]
    got_occ = [occupation.values[row.indices[0]] for row in occupation.matrix[1:]]
    assert got_occ == [u[3] for u in users]


def test_movielens_1m_user_features_use_its_codes(tmp_path):
    folder = write_folder(tmp_path, "ml-1m", {"users.dat": USERS_1M})
    age, gender, occupation = movielens_user_features(folder, [3, 1, 2])
    assert [age.values[r.indices[0]] for r in age.matrix] == ["25-34", "under 18", "56+"]
    assert [gender.values[r.indices[0]] for r in gender.matrix] == ["M", "F", "M"]
    got = [occupation.values[r.indices[0]] for r in occupation.matrix]
    assert got == ["scientist", "K-12 student", "self-employed"]
    assert len(occupation.values) == 21


def test_user_values_outside_the_readme_vocabulary_are_data_errors(tmp_path):
    folder = write_folder(
        tmp_path,
        "ml-100k",
        {"u.data": b"1\t1\t5\t1\n", "u.user": b"1|30|M|astronaut|12345\n"},
    )
    with pytest.raises(DataError, match="unknown value 'astronaut'"):
        movielens_user_features(folder, [1])


def test_user_features_of_a_version_without_users_are_a_data_error(tmp_path):
    with pytest.raises(DataError, match="no user demographics"):
        movielens_user_features(fake_small(tmp_path), [1, 2])


# -- SparseFeatures -----------------------------------------------------------------------------
def test_sparse_features_check_their_matrix():
    ok = sp.csr_matrix(np.array([[1.0, 0.0], [0.0, 2.0]]))
    assert SparseFeatures("g", ok, ["a", "b"]).shape == (2, 2)
    with pytest.raises(InvalidParameterError, match="2 columns but 1 values"):
        SparseFeatures("g", ok, ["a"])
    # One container with recommend's FeatureFamily: a negative weight is a DataError
    # naming its row and column, and any sparse or dense matrix is stored as a float64 CSR copy.
    with pytest.raises(DataError, match=r"weight -1.0 at row 0, column 0; .* finite and >= 0"):
        SparseFeatures("g", sp.csr_matrix(np.array([[-1.0]])), ["a"])
    coo = SparseFeatures("g", ok.tocoo(), ["a", "b"])
    assert coo.matrix.format == "csr" and (coo.matrix != ok).nnz == 0
    assert coo.matrix is not ok and SparseFeatures("g", ok).values == ["0", "1"]
    with pytest.raises(InvalidParameterError, match="non-empty str"):
        SparseFeatures("", ok, ["a", "b"])
