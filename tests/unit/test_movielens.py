"""MovieLens loaders and the checked download, on tiny fake datasets in the official formats."""

from __future__ import annotations

import datetime
import gzip
import hashlib
import http.server
import io
import re
import shutil
import threading
import zipfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from userdp.data import movielens
from userdp.data.movielens import (
    MOVIELENS,
    download,
    load_movielens,
    load_movies,
    load_ratings_table,
    load_tags,
    load_users,
)
from userdp.exceptions import DataError, InvalidParameterError

VERSIONS = list(MOVIELENS)
LAYOUTS = ["plain", "gz", "zip"]


# -- fake datasets ------------------------------------------------------------------------------
def _genre_flags(*on: int) -> str:
    return "|".join("1" if i in on else "0" for i in range(19))


GENRE_100K = (
    "unknown|0\nAction|1\nAdventure|2\nAnimation|3\nChildren's|4\nComedy|5\nCrime|6\n"
    "Documentary|7\nDrama|8\nFantasy|9\nFilm-Noir|10\nHorror|11\nMusical|12\nMystery|13\n"
    "Romance|14\nSci-Fi|15\nThriller|16\nWar|17\nWestern|18\n\n"
)
# (user, item, rating, timestamp) in file order: not sorted, so the loader must sort.
RATINGS_STARS = [
    (2, 30, 2, 881250953),
    (1, 20, 3, 881250950),
    (1, 10, 5, 881250949),
    (3, 40, 1, 881250952),
    (2, 10, 4, 881250951),
]
RATINGS_HALF = [
    (7, 10, 5.0, 1138537770),
    (1, 20, 0.5, 1138537771),
    (1, 10, 4.5, 1138537772),
    (3, 30, 3.5, 1138537773),
    (3, 11, 2.0, 1138537774),
]


def _dat(rows) -> bytes:
    return "".join(
        "::".join(f"{v:g}" if isinstance(v, float) else str(v) for v in r) + "\n" for r in rows
    ).encode()


def _csv(rows) -> bytes:
    head = "userId,movieId,rating,timestamp\n"
    return (head + "".join(f"{u},{i},{r:.1f},{t}\n" for u, i, r, t in rows)).encode()


ITEM_100K = "\n".join(
    [
        f"10|Misérables, Les (1995)|01-Jan-1995||http://us.imdb.com/M/x|{_genre_flags(8, 12)}",
        (
            "20|Land Before Time III: The Time of the Great Giving (1995) (V)|14-Oct-1997||"
            f"http://us.imdb.com/M/y|{_genre_flags(3, 4)}"
        ),
        f"30|Toy Story (1995)|01-Jan-1995||http://us.imdb.com/M/z|{_genre_flags(3, 4, 5)}",
        f"40|unknown||||{_genre_flags(0)}",
    ]
)
MOVIES_STARS = [
    {"item": 10, "title": "Misérables, Les (1995)", "genres": ["Drama", "Musical"], "year": 1995},
    {
        "item": 20,
        "title": "Land Before Time III: The Time of the Great Giving (1995) (V)",
        "genres": ["Animation", "Children's"],
        "year": 1995,
    },
    {
        "item": 30,
        "title": "Toy Story (1995)",
        "genres": ["Animation", "Children's", "Comedy"],
        "year": 1995,
    },
]
MOVIES_100K = [*MOVIES_STARS, {"item": 40, "title": "unknown", "genres": ["unknown"], "year": None}]
MOVIES_1M = [*MOVIES_STARS, {"item": 40, "title": "Untitled", "genres": ["Drama"], "year": None}]
MOVIES_DAT_1M = "".join(
    f"{m['item']}::{m['title']}::{'|'.join(m['genres'])}\n" for m in MOVIES_1M
).encode("latin-1")

MOVIES_10M = [
    {"item": 10, "title": "Misérables, Les (1995)", "genres": ["Drama", "Musical"], "year": 1995},
    {
        "item": 11,
        "title": "Star Wars: Episode IV - A New Hope (a.k.a. Star Wars) (1977)",
        "genres": ["Action", "Adventure", "Sci-Fi"],
        "year": 1977,
    },
    {"item": 20, "title": "Babylon 5", "genres": [], "year": None},
    {"item": 30, "title": "Cité des enfants perdus, La (1995)", "genres": ["Drama"], "year": 1995},
]
MOVIES_DAT_10M = (
    "10::Misérables, Les (1995)::Drama|Musical\n"
    "11::Star Wars: Episode IV - A New Hope (a.k.a. Star Wars) (1977)::Action|Adventure|Sci-Fi\n"
    "20::Babylon 5::(no genres listed)\n"
    "30::Cité des enfants perdus, La (1995)::Drama\n"
).encode()
TAGS_10M = [(1, 10, "Victor Hugo", 1138537770), (7, 20, "sci-fi: space", 1138537771)]

MOVIES_CSV_ROWS = [
    {"item": 10, "title": "Misérables, Les (1995)", "genres": ["Drama", "Musical"], "year": 1995},
    {"item": 11, "title": '"Great Performances" Cats (1998)', "genres": ["Musical"], "year": 1998},
    {"item": 20, "title": "Babylon 5", "genres": [], "year": None},
    {"item": 30, "title": "Diplomatic Immunity (2009– )", "genres": ["Comedy"], "year": 2009},
]
MOVIES_CSV = (
    "movieId,title,genres\n"
    '10,"Misérables, Les (1995)",Drama|Musical\n'
    '11,"""Great Performances"" Cats (1998)",Musical\n'
    "20,Babylon 5,(no genres listed)\n"
    "30,Diplomatic Immunity (2009– ),Comedy\n"
).encode()
TAGS_CSV_ROWS = [(1, 10, "musical, french", 1138537770), (7, 20, 'the "best"', 1138537771)]
TAGS_CSV = (
    b'userId,movieId,tag,timestamp\n1,10,"musical, french",1138537770\n'
    b'7,20,"the ""best""",1138537771\n'
)

USERS_100K = b"1|24|M|technician|85711\n2|53|F|other|94043\n3|23|M|writer|T8H1N\n"
USERS_1M = b"1::F::1::10::48067\n2::M::56::16::70072\n3::M::25::15::55117\n"

_CSV_FAKE = {
    "files": {"ratings.csv": _csv(RATINGS_HALF), "movies.csv": MOVIES_CSV, "tags.csv": TAGS_CSV},
    "ratings": RATINGS_HALF,
    "movies": MOVIES_CSV_ROWS,
    "tags": TAGS_CSV_ROWS,
}
FAKES = {
    "ml-100k": {
        "files": {
            "u.data": "".join("\t".join(map(str, r)) + "\n" for r in RATINGS_STARS).encode(),
            "u.item": (ITEM_100K + "\n").encode("latin-1"),
            "u.genre": GENRE_100K.encode("latin-1"),
            "u.user": USERS_100K,
        },
        "ratings": RATINGS_STARS,
        "movies": MOVIES_100K,
        "tags": None,
    },
    "ml-1m": {
        "files": {
            "ratings.dat": _dat(RATINGS_STARS),
            "movies.dat": MOVIES_DAT_1M,
            "users.dat": USERS_1M,
        },
        "ratings": RATINGS_STARS,
        "movies": MOVIES_1M,
        "tags": None,
    },
    "ml-10m": {
        "files": {
            "ratings.dat": _dat(RATINGS_HALF),
            "movies.dat": MOVIES_DAT_10M,
            "tags.dat": _dat(TAGS_10M),
        },
        "ratings": RATINGS_HALF,
        "movies": MOVIES_10M,
        "tags": TAGS_10M,
    },
    "ml-20m": _CSV_FAKE,
    "ml-latest": _CSV_FAKE,
    "ml-latest-small": _CSV_FAKE,
}


def zip_bytes(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for member, data in members.items():
            zf.writestr(member, data)
    return buf.getvalue()


def official_zip(name: str) -> bytes:
    spec = MOVIELENS[name]
    return zip_bytes({f"{spec.folder}/{f}": d for f, d in FAKES[name]["files"].items()})


def write_fake(root: Path, name: str, layout: str, files: dict[str, bytes] | None = None) -> Path:
    """Write the fake ``name`` under ``root`` and return what to pass to the loaders."""
    spec = MOVIELENS[name]
    files = FAKES[name]["files"] if files is None else files
    root.mkdir(parents=True, exist_ok=True)
    if layout == "zip":
        path = root / spec.zip_name
        path.write_bytes(zip_bytes({f"{spec.folder}/{f}": d for f, d in files.items()}))
        return path
    folder = root / spec.folder
    folder.mkdir()
    for fname, data in files.items():
        if layout == "gz":
            (folder / (fname + ".gz")).write_bytes(gzip.compress(data))
        else:
            (folder / fname).write_bytes(data)
    return folder


def triples(r) -> list[tuple[int, int, float]]:
    users = r.user_labels.take(pa.array(r.users)).to_pylist()
    items = r.item_labels.take(pa.array(r.items)).to_pylist()
    return list(zip(users, items, r.values.tolist(), strict=True))


# -- loaders ------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", VERSIONS)
def test_load_movielens_exact_triples(tmp_path, name, layout):
    rows = FAKES[name]["ratings"]
    r = load_movielens(write_fake(tmp_path, name, layout))
    assert triples(r) == sorted((u, i, float(v)) for u, i, v, _ in rows)
    assert r.values.dtype == np.float64
    assert r.user_labels.type == pa.int64() and r.item_labels.type == pa.int64()
    assert r.n_ratings == len(rows)
    assert r.n_users == len({u for u, *_ in rows})
    assert r.n_items == len({i for _, i, *_ in rows})
    assert r.duplicates_dropped == 0


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", VERSIONS)
def test_load_movies(tmp_path, name, layout):
    movies = load_movies(write_fake(tmp_path, name, layout))
    assert movies.schema.field("item").type == pa.int64()
    assert movies.schema.field("genres").type == pa.list_(pa.string())
    assert movies.schema.field("year").type == pa.int32()
    got = movies.select(["item", "title", "genres", "year"]).to_pylist()
    assert got == FAKES[name]["movies"]


def test_load_movies_100k_release_dates(tmp_path):
    movies = load_movies(write_fake(tmp_path, "ml-100k", "plain"))
    assert movies.column("release_date").to_pylist() == [
        datetime.date(1995, 1, 1),
        datetime.date(1997, 10, 14),
        datetime.date(1995, 1, 1),
        None,
    ]


def test_load_movies_100k_without_u_genre_uses_readme_names(tmp_path):
    files = dict(FAKES["ml-100k"]["files"])
    del files["u.genre"]
    movies = load_movies(write_fake(tmp_path, "ml-100k", "plain", files))
    assert movies.column("genres").to_pylist()[2] == ["Animation", "Children's", "Comedy"]


@pytest.mark.parametrize("name", VERSIONS)
def test_load_ratings_table_keeps_file_order_and_timestamps(tmp_path, name):
    table = load_ratings_table(write_fake(tmp_path, name, "gz"))
    assert table.schema == pa.schema(
        {"user": pa.int64(), "item": pa.int64(), "rating": pa.float64(), "timestamp": pa.int64()}
    )
    expected = [(u, i, float(v), t) for u, i, v, t in FAKES[name]["ratings"]]
    assert [tuple(row.values()) for row in table.to_pylist()] == expected


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", VERSIONS)
def test_load_tags(tmp_path, name, layout):
    tags = load_tags(write_fake(tmp_path, name, layout))
    if FAKES[name]["tags"] is None:
        assert tags is None
    else:
        assert tags.column_names == ["user", "item", "tag", "timestamp"]
        assert [tuple(r.values()) for r in tags.to_pylist()] == FAKES[name]["tags"]


def test_load_tags_absent_file_gives_none(tmp_path):
    files = {"ratings.csv": _csv(RATINGS_HALF), "movies.csv": MOVIES_CSV}
    assert load_tags(write_fake(tmp_path, "ml-20m", "plain", files)) is None


@pytest.mark.parametrize("layout", LAYOUTS)
def test_load_users(tmp_path, layout):
    users = load_users(write_fake(tmp_path / "a", "ml-100k", layout))
    assert users.to_pylist()[2] == {
        "user": 3,
        "age": 23,
        "gender": "M",
        "occupation": "writer",
        "zip_code": "T8H1N",
    }
    users = load_users(write_fake(tmp_path / "b", "ml-1m", layout))
    assert users.column_names == ["user", "age", "gender", "occupation", "zip_code"]
    assert users.column("occupation").to_pylist() == [
        "K-12 student",
        "self-employed",
        "scientist",
    ]
    assert users.column("age").to_pylist() == [1, 56, 25]


def test_load_users_of_version_without_users(tmp_path):
    with pytest.raises(DataError, match="ml-20m has no user demographics"):
        load_users(write_fake(tmp_path, "ml-20m", "plain"))


# -- name inference and errors ------------------------------------------------------------------
def test_name_inferred_from_parent_folder(tmp_path):
    write_fake(tmp_path, "ml-10m", "plain")  # writes tmp_path/ml-10M100K
    assert load_movielens(tmp_path).n_ratings == len(RATINGS_HALF)


def test_name_inferred_from_zip_folder_when_zip_name_is_unofficial(tmp_path):
    path = tmp_path / "download.zip"
    path.write_bytes(official_zip("ml-10m"))
    assert load_movielens(path).n_ratings == len(RATINGS_HALF)
    with pytest.raises(DataError, match=r"scale 1\.\.5"):  # half stars are off ml-1m's scale
        load_movielens(path, name="ml-1m")


def test_zip_with_files_at_its_root(tmp_path):
    path = tmp_path / "ml-1m.zip"
    path.write_bytes(zip_bytes(FAKES["ml-1m"]["files"]))
    assert triples(load_movielens(path)) == triples(load_movielens(official_zip_path(tmp_path)))


def official_zip_path(tmp_path: Path) -> Path:
    return write_fake(tmp_path / "official", "ml-1m", "zip")


def test_local_copy_named_by_version_name(tmp_path):
    folder = tmp_path / "ml-10m"  # named like our local copies, not like the zip folder
    folder.mkdir()
    (folder / "ratings.dat.gz").write_bytes(gzip.compress(_dat(RATINGS_HALF)))
    assert load_movielens(folder).n_ratings == len(RATINGS_HALF)
    assert load_movielens(tmp_path, name="ml-10m").n_ratings == len(RATINGS_HALF)


def test_explicit_name_for_any_folder(tmp_path):
    folder = tmp_path / "my data"
    folder.mkdir()
    (folder / "ratings.dat").write_bytes(_dat(RATINGS_STARS))
    with pytest.raises(InvalidParameterError, match="Pass name="):
        load_movielens(folder)
    assert load_movielens(folder, name="ml-1m").n_ratings == len(RATINGS_STARS)


def test_several_versions_need_a_name(tmp_path):
    write_fake(tmp_path, "ml-1m", "plain")
    write_fake(tmp_path, "ml-100k", "plain")
    with pytest.raises(InvalidParameterError, match="several MovieLens versions"):
        load_movielens(tmp_path)
    assert load_movielens(tmp_path, name="ml-100k").n_ratings == len(RATINGS_STARS)


def test_unknown_name(tmp_path):
    msg = (
        "The 'name' parameter of load_movielens must be one of 'ml-100k', 'ml-1m', 'ml-10m', "
        "'ml-20m', 'ml-latest', 'ml-latest-small'. Got 'ml-2m' instead."
    )
    with pytest.raises(InvalidParameterError, match=re.escape(msg)):
        load_movielens(tmp_path, name="ml-2m")


def test_missing_ratings_file_is_named(tmp_path):
    # Like our local ml-1m copy: metadata only.
    write_fake(tmp_path, "ml-1m", "gz", {"movies.dat": MOVIES_DAT_1M})
    with pytest.raises(DataError, match=r"ratings file 'ratings\.dat'.*holds: movies\.dat\.gz"):
        load_movielens(tmp_path / "ml-1m")
    assert load_movies(tmp_path / "ml-1m").num_rows == len(MOVIES_1M)


def test_missing_source_and_non_zip_file(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        load_movielens(tmp_path / "nowhere")
    (tmp_path / "ml-1m.zip").write_bytes(b"not a zip")
    with pytest.raises(DataError, match="neither a folder nor a zip"):
        load_movielens(tmp_path / "ml-1m.zip")
    with pytest.raises(InvalidParameterError, match="'source' parameter"):
        load_movielens(42)


@pytest.mark.parametrize(
    ("name", "files", "match"),
    [
        ("ml-1m", {"ratings.dat": b"1::10::4.5::1\n"}, r"off the ml-1m scale"),
        ("ml-latest", {"ratings.csv": _csv([(1, 10, 5.5, 1)])}, r"first: 5\.5 at row 0"),
        ("ml-1m", {"ratings.dat": b"1::10::4::1\n2:10:4:1\n"}, r"Cannot read .*ratings\.dat"),
        ("ml-100k", {"u.data": b"1\t10\t\t1\n"}, r"column 'rating' has 1 empty"),
        ("ml-20m", {"ratings.csv": b"user,item,rating,timestamp\n1,2,3,4\n"}, r"Cannot read"),
        ("ml-10m", {"ratings.dat": b""}, r"Cannot read|no ratings"),
        ("ml-10m", {"movies.dat": "1::Café (1995)::Drama\n".encode("latin-1")}, "not valid utf-8"),
    ],
)
def test_malformed_files(tmp_path, name, files, match):
    src = write_fake(tmp_path, name, "plain", files)
    with pytest.raises(DataError, match=match):
        if "movies.dat" in files:
            load_movies(src)
        else:
            load_movielens(src)


# -- download -----------------------------------------------------------------------------------
class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.server.hits.append(self.path)
        body = self.server.files.get(self.path)
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        extra = 100 if self.path.startswith("/truncated") else 0
        self.send_header("Content-Length", str(len(body) + extra))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def server(monkeypatch):
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.files, srv.hits = {}, []
    srv.url = lambda path: f"http://127.0.0.1:{srv.server_address[1]}{path}"
    thread = threading.Thread(target=srv.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join()


def serve(srv, path: str, body: bytes) -> tuple[str, str]:
    srv.files[path] = body
    return srv.url(path), hashlib.sha256(body).hexdigest()


def test_download_verifies_extracts_and_loads(tmp_path, server, capsys):
    url, sha = serve(server, "/ml-100k.zip", official_zip("ml-100k"))
    folder = download("ml-100k", tmp_path / "dl", sha256=sha.upper(), url=url)
    assert folder == tmp_path / "dl" / "ml-100k"
    assert (tmp_path / "dl" / "ml-100k.zip").read_bytes() == server.files["/ml-100k.zip"]
    assert sorted(p.name for p in (tmp_path / "dl").iterdir()) == ["ml-100k", "ml-100k.zip"]
    assert load_movielens(folder).n_ratings == len(RATINGS_STARS)
    assert capsys.readouterr().err == ""  # stderr is not a terminal: no progress bar


def test_download_progress_bar_on_a_terminal(tmp_path, server, capsys, monkeypatch):
    monkeypatch.setattr(movielens.fetch, "_is_tty", lambda stream: True)
    url, sha = serve(server, "/ml-100k.zip", official_zip("ml-100k"))
    download("ml-100k", tmp_path / "a", sha256=sha, url=url)
    assert "ml-100k.zip" in capsys.readouterr().err
    download("ml-100k", tmp_path / "b", sha256=sha, url=url, progress=False)
    assert capsys.readouterr().err == ""


def test_download_ml10m_extracts_its_folder(tmp_path, server):
    url, sha = serve(server, "/ml-10m.zip", official_zip("ml-10m"))
    folder = download("ml-10m", tmp_path, sha256=sha, url=url, progress=False)
    assert folder == tmp_path / "ml-10M100K"
    assert (tmp_path / "ml-10m.zip").is_file()
    assert load_tags(folder).num_rows == len(TAGS_10M)


def test_download_mismatch_leaves_nothing(tmp_path, server):
    url, sha = serve(server, "/ml-100k.zip", official_zip("ml-100k"))
    with pytest.raises(DataError, match=f"expected {'0' * 64}, got {sha}"):
        download("ml-100k", tmp_path, sha256="0" * 64, url=url)
    # Without sha256= the pinned checksum of the official zip applies, which the fake fails.
    with pytest.raises(DataError, match=f"expected {MOVIELENS['ml-100k'].sha256}, got {sha}"):
        download("ml-100k", tmp_path, url=url)
    assert list(tmp_path.iterdir()) == []


def test_download_reuses_zip_and_folder(tmp_path, server):
    url, sha = serve(server, "/ml-100k.zip", official_zip("ml-100k"))
    folder = download("ml-100k", tmp_path, sha256=sha, url=url)
    assert download("ml-100k", tmp_path, sha256=sha, url=url) == folder  # folder reused
    shutil.rmtree(folder)
    assert download("ml-100k", tmp_path, sha256=sha, url=url) == folder  # verified zip reused
    assert load_movielens(folder).n_ratings == len(RATINGS_STARS)
    assert server.hits == ["/ml-100k.zip"]
    download("ml-100k", tmp_path, sha256=sha, url=url, overwrite=True)
    assert server.hits == ["/ml-100k.zip"] * 2


def test_download_replaces_a_corrupt_zip(tmp_path, server):
    url, sha = serve(server, "/ml-100k.zip", official_zip("ml-100k"))
    (tmp_path / "ml-100k.zip").write_bytes(b"stale")
    folder = download("ml-100k", tmp_path, sha256=sha, url=url)
    assert server.hits == ["/ml-100k.zip"]
    assert load_movielens(folder).n_ratings == len(RATINGS_STARS)


def test_download_refuses_folder_without_ratings(tmp_path, server):
    url, sha = serve(server, "/ml-1m.zip", official_zip("ml-1m"))
    (tmp_path / "ml-1m").mkdir()
    (tmp_path / "ml-1m" / "movies.dat").write_bytes(MOVIES_DAT_1M)
    with pytest.raises(DataError, match="overwrite=True"):
        download("ml-1m", tmp_path, sha256=sha, url=url)
    assert server.hits == []
    folder = download("ml-1m", tmp_path, sha256=sha, url=url, overwrite=True)
    assert load_movielens(folder).n_ratings == len(RATINGS_STARS)


@pytest.mark.parametrize("member", ["../evil.txt", "ml-100k/../../evil.txt", "/tmp/evil.txt"])
def test_download_refuses_zip_slip(tmp_path, server, member):
    files = {f"ml-100k/{f}": d for f, d in FAKES["ml-100k"]["files"].items()}
    url, sha = serve(server, "/ml-100k.zip", zip_bytes({**files, member: b"pwned"}))
    target = tmp_path / "a" / "b"
    with pytest.raises(DataError, match=re.escape(repr(member))):
        download("ml-100k", target, sha256=sha, url=url)
    assert not (target / "ml-100k").exists()
    assert not list(tmp_path.rglob("evil.txt"))
    assert sorted(p.name for p in target.iterdir()) == ["ml-100k.zip"]


def test_download_zip_without_expected_folder(tmp_path, server):
    url, sha = serve(server, "/x.zip", zip_bytes({"other/u.data": b"1\t2\t3\t4\n"}))
    with pytest.raises(DataError, match="has no folder 'ml-100k/'"):
        download("ml-100k", tmp_path, sha256=sha, url=url)


def test_download_without_pinned_checksum_is_explicit(tmp_path, server):
    assert MOVIELENS["ml-latest"].sha256 is None
    url, sha = serve(server, "/ml-latest.zip", official_zip("ml-latest"))
    with pytest.raises(InvalidParameterError, match=r"No SHA-256 is pinned.*verify=False"):
        download("ml-latest", tmp_path, url=url)
    assert server.hits == []
    with pytest.raises(InvalidParameterError, match="one or the other"):
        download("ml-latest", tmp_path, url=url, sha256=sha, verify=False)
    folder = download("ml-latest", tmp_path, url=url, verify=False)
    assert load_movielens(folder).n_ratings == len(RATINGS_HALF)
    folder = download("ml-latest", tmp_path / "b", url=url, sha256=sha)
    assert load_movielens(folder).n_ratings == len(RATINGS_HALF)


def test_download_mismatch_hint_for_rereleased_versions(tmp_path, server):
    url, sha = serve(server, "/s.zip", official_zip("ml-latest-small"))
    with pytest.raises(DataError, match=f"re-releases.*pass sha256='{sha}'"):
        download("ml-latest-small", tmp_path, url=url)


def test_download_http_errors_leave_nothing(tmp_path, server):
    with pytest.raises(DataError, match=r"download of .* failed.*404"):
        download("ml-100k", tmp_path, sha256="a" * 64, url=server.url("/missing.zip"))
    url, sha = serve(server, "/truncated.zip", official_zip("ml-100k"))
    with pytest.raises(DataError, match="download of"):
        download("ml-100k", tmp_path, sha256=sha, url=url)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": "ml-25m"}, "The 'name' parameter of download must be one of"),
        ({"sha256": "abc"}, "The 'sha256' parameter of download must be a string of 64"),
        ({"verify": "yes"}, "The 'verify' parameter of download must be a bool"),
        ({"sha256": "a" * 64, "url": "no-scheme"}, "The 'url' parameter of download must be"),
    ],
)
def test_download_parameter_errors(tmp_path, kwargs, match):
    kwargs = {"name": "ml-100k", **kwargs}
    with pytest.raises(InvalidParameterError, match=match):
        download(directory=tmp_path, **kwargs)


# -- specs --------------------------------------------------------------------------------------
def test_specs():
    assert VERSIONS == ["ml-100k", "ml-1m", "ml-10m", "ml-20m", "ml-latest", "ml-latest-small"]
    for name, spec in MOVIELENS.items():
        assert spec.name == name
        assert spec.url == f"https://files.grouplens.org/datasets/movielens/{name}.zip"
        assert spec.sha256 is None or re.fullmatch(r"[0-9a-f]{64}", spec.sha256)
    assert MOVIELENS["ml-10m"].folder == "ml-10M100K"
    assert MOVIELENS["ml-10m"].zip_name == "ml-10m.zip"
    assert [n for n, s in MOVIELENS.items() if not s.stable] == ["ml-latest", "ml-latest-small"]
    with pytest.raises(AttributeError):
        MOVIELENS["ml-1m"].sha256 = None  # frozen
