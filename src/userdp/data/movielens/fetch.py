"""A checked download of an official MovieLens zip: streamed, verified by SHA-256, extracted."""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import shutil
import stat
import sys
import tempfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path, PurePosixPath

from userdp._validation import check_choice
from userdp.data.movielens.files import _Files
from userdp.data.movielens.versions import _NAMES, MOVIELENS, MovieLensSpec
from userdp.exceptions import DataError, InvalidParameterError

__all__ = ["download"]

_CHUNK = 1 << 20  # download chunk
_TIMEOUT = 60.0  # seconds without data before a download fails


# -- download -----------------------------------------------------------------------------------
def _expected_sha256(spec: MovieLensSpec, sha256: str | None, verify: bool) -> str | None:
    if not isinstance(verify, bool):
        raise InvalidParameterError(
            f"The 'verify' parameter of download must be a bool. Got {verify!r} instead."
        )
    if sha256 is not None and not (
        isinstance(sha256, str) and re.fullmatch(r"[0-9a-fA-F]{64}", sha256)
    ):
        raise InvalidParameterError(
            "The 'sha256' parameter of download must be a string of 64 hexadecimal digits or "
            f"None. Got {sha256!r} instead."
        )
    if not verify:
        if sha256 is not None:
            raise InvalidParameterError(
                "download got sha256= together with verify=False; pass one or the other."
            )
        return None
    if sha256 is not None:
        return sha256.lower()
    if spec.sha256 is None:
        raise InvalidParameterError(
            f"No SHA-256 is pinned for {spec.name!r}: GroupLens re-releases it under the same "
            "URL. Pass sha256='<64 hex digits>' to check the file you expect, or verify=False "
            "to download it without any check."
        )
    return spec.sha256


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _is_tty(stream: object) -> bool:
    try:
        return bool(stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, ValueError, OSError):
        return False


def _fetch(
    url: str, zip_path: Path, expected: str | None, spec: MovieLensSpec, progress: bool
) -> None:
    """Stream ``url`` into a temporary file next to ``zip_path``, check it, then rename it."""
    from tqdm import tqdm

    try:
        request = urllib.request.Request(url, headers={"User-Agent": "userdp"})
    except ValueError as err:
        raise InvalidParameterError(
            f"The 'url' parameter of download must be a URL such as 'https://host/file.zip'. "
            f"Got {url!r} instead."
        ) from err
    fd, tmp_name = tempfile.mkstemp(
        dir=zip_path.parent, prefix=f".{zip_path.name}.", suffix=".part"
    )
    tmp = Path(tmp_name)
    try:
        digest = hashlib.sha256()
        received = 0
        with (
            os.fdopen(fd, "wb") as out,
            urllib.request.urlopen(request, timeout=_TIMEOUT) as response,
        ):
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
            with tqdm(
                total=total,
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                desc=zip_path.name,
                file=sys.stderr,
                disable=not (progress and _is_tty(sys.stderr)),
            ) as bar:
                while chunk := response.read(_CHUNK):
                    out.write(chunk)
                    digest.update(chunk)
                    received += len(chunk)
                    bar.update(len(chunk))
        if total is not None and received != total:
            raise DataError(
                f"The download of {url} stopped after {received} of {total} bytes; the partial "
                "file was deleted."
            )
        got = digest.hexdigest()
        if expected is not None and got != expected:
            hint = (
                " GroupLens re-releases this version under the same URL; if you trust the new "
                f"file, pass sha256={got!r}."
                if not spec.stable
                else ""
            )
            raise DataError(
                f"SHA-256 mismatch for {zip_path.name} downloaded from {url}: expected "
                f"{expected}, got {got}. The file was deleted.{hint}"
            )
        os.replace(tmp, zip_path)
    except (urllib.error.URLError, http.client.HTTPException, OSError) as err:
        tmp.unlink(missing_ok=True)
        raise DataError(f"The download of {url} failed: {err}") from err
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _check_member(info: zipfile.ZipInfo, root: Path, zip_path: Path) -> None:
    """Refuse members that are links or absolute, or that would land outside ``root``."""
    name = info.filename
    parts = PurePosixPath(name.replace("\\", "/")).parts
    unsafe = (
        not parts
        or name.startswith(("/", "\\"))
        or ".." in parts
        or ":" in parts[0]
        or stat.S_ISLNK(info.external_attr >> 16)
        or not (root / name).resolve().is_relative_to(root)
    )
    if unsafe:
        raise DataError(
            f"Refusing to extract {zip_path}: member {name!r} is a link, an absolute path or "
            "leaves the target folder."
        )


def _extract(zip_path: Path, spec: MovieLensSpec, target: Path) -> None:
    """Extract the zip through a temporary folder, then move its ``spec.folder`` to ``target``."""
    try:
        with zipfile.ZipFile(zip_path) as zf:
            infos = zf.infolist()
            root = zip_path.parent.resolve()
            for info in infos:
                _check_member(info, root, zip_path)
            if not any(i.filename.startswith(spec.folder + "/") for i in infos):
                raise DataError(
                    f"{zip_path} has no folder {spec.folder + '/'!r}; is it the {spec.name} zip?"
                )
            tmp = Path(tempfile.mkdtemp(dir=zip_path.parent, prefix=f".{spec.name}.extract."))
            try:
                zf.extractall(tmp)
                if target.exists():
                    shutil.rmtree(target)
                os.replace(tmp / spec.folder, target)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    except zipfile.BadZipFile as err:
        raise DataError(f"{zip_path} is not a valid zip file: {err}") from err


def download(
    name: str,
    directory: str | os.PathLike[str],
    *,
    sha256: str | None = None,
    verify: bool = True,
    url: str | None = None,
    progress: bool = True,
    overwrite: bool = False,
) -> Path:
    """Download, verify and extract an official MovieLens zip.

    The zip is streamed to a temporary file in ``directory``, its SHA-256 is checked, and only
    then is it renamed to ``directory / <zip name>`` and extracted (members that would land
    outside the folder are refused). A zip already there is reused when it passes the check
    (and downloaded again otherwise); an extracted folder already holding the ratings file is
    returned as is, without any request or check.

    A download is checked against ``sha256`` or, when omitted, the value pinned in
    :data:`MOVIELENS`. ml-latest has none (GroupLens refreshes it), so it needs ``sha256=`` or an
    explicit ``verify=False``; downloading without a checksum is never the default.

    Parameters
    ----------
    name : str
        Version name, one of :data:`MOVIELENS`.
    directory : str or path-like
        Where the zip and the extracted folder go; created if needed.
    sha256 : str, optional
        Expected SHA-256 (64 hex digits), overriding the pinned one.
    verify : bool, default True
        False downloads without any checksum (not allowed together with ``sha256``).
    url : str, optional
        Download from here instead of GroupLens (a mirror, or a local server in tests); the
        checksum rules are the same.
    progress : bool, default True
        Show a progress bar on stderr when it is a terminal.
    overwrite : bool, default False
        Download and extract again, replacing the zip and the extracted folder.

    Returns
    -------
    pathlib.Path
        The extracted folder, e.g. ``directory / "ml-10M100K"``; pass it to
        :func:`load_movielens`.

    Raises
    ------
    DataError
        If the download fails or is truncated, the checksum does not match (the file is then
        deleted), the zip is unsafe or lacks the expected folder, or ``directory / folder``
        exists without the ratings file.
    InvalidParameterError
        If ``name`` is unknown, ``sha256`` is malformed, or no checksum is available while
        ``verify`` is True.
    """
    spec = MOVIELENS[check_choice(name, "name", "download", _NAMES)]
    expected = _expected_sha256(spec, sha256, verify)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / spec.folder
    zip_path = directory / spec.zip_name
    if not overwrite and target.exists():
        if _Files(spec, root=target).find(spec.ratings_file) is not None:
            return target
        raise DataError(
            f"{target} exists but holds no {spec.ratings_file!r}; remove it or pass overwrite=True."
        )
    reuse = (
        not overwrite
        and zip_path.is_file()
        and (expected is None or _sha256_file(zip_path) == expected)
    )
    if not reuse:
        _fetch(url or spec.url, zip_path, expected, spec, progress)
    _extract(zip_path, spec, target)
    return target
