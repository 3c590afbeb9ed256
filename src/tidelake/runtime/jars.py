"""The Java jars a wheel cannot carry: where they live and how ``tidelake setup`` fetches them.

The list is pinned in ``runtime/jars.txt`` (shipped in the package): Maven coordinates, the
SHA-256 of the artifact and a group (``core`` for every lake, ``s3`` for lakes on object
storage). A download is written to ``.<name>.part`` beside its target, resumed from there
with an HTTP range request when a previous run was interrupted, verified against the pinned
sum and only then renamed into place: the cache never holds a jar with other bytes, and a
jar already there is never written into (a test seeds the cache with hard links).

The cache is one directory, chosen once for the session builder (lake/spark.py) and the
setup verb: ``lake.spark.jar_cache``, else ``$TIDELAKE_JAR_CACHE``, else ``.cache/jars`` of
the source checkout this package runs from (scripts/setup fills it), else the user cache
``$XDG_CACHE_HOME/tidelake/jars`` (``~/.cache/tidelake/jars``).
"""

from __future__ import annotations

import hashlib
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Literal

from tidelake.errors import TidelakeError

JAR_CACHE_ENV = "TIDELAKE_JAR_CACHE"
#: A Maven repository layout to fetch from instead of Maven Central (a mirror or proxy); the
#: pinned sums still decide what is accepted.
MAVEN_URL_ENV = "TIDELAKE_MAVEN_URL"
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
_CHUNK = 1 << 20
_TIMEOUT_S = 60.0

#: ``progress(jar, bytes_done, bytes_total)``; total is None while the server has not said.
Progress = Callable[["Jar", int, int | None], None]
State = Literal["ok", "missing", "corrupt"]


class JarFetchError(TidelakeError):
    """A jar could not be fetched or its bytes are not the pinned ones (nothing was kept)."""


@dataclass(frozen=True)
class Jar:
    """One pinned Maven artifact."""

    group: str
    artifact: str
    version: str
    sha256: str
    #: ``core``: every lake; ``s3``: lakes on ``s3a://`` only.
    role: str

    @property
    def coordinate(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}"

    @property
    def filename(self) -> str:
        return f"{self.artifact}-{self.version}.jar"

    def url(self, base: str = MAVEN_CENTRAL) -> str:
        """The artifact's address in a Maven repository layout under ``base``."""
        path = "/".join([*self.group.split("."), self.artifact, self.version, self.filename])
        return f"{base.rstrip('/')}/{path}"


def parse_jar_list(text: str) -> list[Jar]:
    """The jars of a ``jars.txt`` text: ``group:artifact:version sha256 role`` per line."""
    jars = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        coordinate = fields[0].split(":")
        if len(fields) != 3 or len(coordinate) != 3 or len(fields[1]) != 64:
            raise ValueError(f"jars.txt line {number}: want 'group:artifact:version sha256 role'")
        group, artifact, version = coordinate
        jars.append(Jar(group, artifact, version, sha256=fields[1].lower(), role=fields[2]))
    return jars


def pinned_jars(roles: Iterable[str] | None = None) -> list[Jar]:
    """The jars ``runtime/jars.txt`` pins, in its order; only ``roles`` when given."""
    text = (resources.files("tidelake.runtime") / "jars.txt").read_text(encoding="utf-8")
    wanted = None if roles is None else set(roles)
    return [j for j in parse_jar_list(text) if wanted is None or j.role in wanted]


def checkout_root() -> Path | None:
    """The source checkout this package runs from (an editable install), else None."""
    for parent in Path(__file__).resolve().parents:
        if (parent / "scripts" / "setup").is_file() and (parent / "pyproject.toml").is_file():
            return parent
    return None


def user_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CACHE_HOME/tidelake/jars``, ``~/.cache/tidelake/jars`` when that is unset."""
    env = os.environ if environ is None else environ
    xdg = env.get("XDG_CACHE_HOME", "")
    # The XDG spec: a relative value is invalid and must be ignored.
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "tidelake" / "jars"


def jar_cache_dir(configured: Path | None = None, environ: Mapping[str, str] | None = None) -> Path:
    """The jar cache: ``configured`` (``lake.spark.jar_cache``), ``$TIDELAKE_JAR_CACHE``, the
    checkout's ``.cache/jars``, else the user cache (module docstring)."""
    env = os.environ if environ is None else environ
    if configured is not None:
        return configured
    if env.get(JAR_CACHE_ENV):
        return Path(env[JAR_CACHE_ENV])
    root = checkout_root()
    if root is not None:
        return root / ".cache" / "jars"
    return user_cache_dir(env)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def jar_state(jar: Jar, cache: Path) -> State:
    """``ok`` when the cache holds the pinned bytes, ``corrupt`` when other bytes."""
    path = cache / jar.filename
    if not path.is_file():
        return "missing"
    return "ok" if sha256_of(path) == jar.sha256 else "corrupt"


def _part_path(jar: Jar, cache: Path) -> Path:
    return cache / f".{jar.filename}.part"


def _download(jar: Jar, url: str, part: Path, progress: Progress | None) -> None:
    """Append the rest of ``url`` to ``part`` (a range request when part of it is there)."""
    have = part.stat().st_size if part.exists() else 0
    request = urllib.request.Request(url, headers={"User-Agent": "tidelake-setup"})
    if have:
        request.add_header("Range", f"bytes={have}-")
    try:
        response = urllib.request.urlopen(request, timeout=_TIMEOUT_S)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and have:
            return  # the part is already whole; the checksum decides
        raise JarFetchError(f"{jar.coordinate}: {url} answered HTTP {exc.code}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise JarFetchError(f"{jar.coordinate}: cannot reach {url}: {exc}") from exc
    with response:
        if have and response.status != 206:
            have = 0  # the server ignored the range: start over
        length = response.headers.get("Content-Length")
        total = have + int(length) if length is not None else None
        done = have
        if progress is not None:
            progress(jar, done, total)
        with part.open("ab" if have else "wb") as out:
            try:
                while chunk := response.read(_CHUNK):
                    out.write(chunk)
                    done += len(chunk)
                    if progress is not None:
                        progress(jar, done, total)
            except OSError as exc:
                # What arrived stays in the part file: the next run resumes from there.
                raise JarFetchError(f"{jar.coordinate}: download interrupted: {exc}") from exc
            out.flush()
            os.fsync(out.fileno())


def fetch_jar(
    jar: Jar,
    cache: Path,
    *,
    repository: str = MAVEN_CENTRAL,
    progress: Progress | None = None,
) -> bool:
    """Make ``cache`` hold ``jar``'s pinned bytes; True when it had to download.

    A jar already there with the pinned sum is left alone; one with other bytes is replaced.
    Raises :class:`JarFetchError` when the download fails or its sum is not the pinned one
    (the bytes are then deleted, so the next run starts clean).
    """
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / jar.filename
    if jar_state(jar, cache) == "ok":
        return False
    part = _part_path(jar, cache)
    _download(jar, jar.url(repository), part, progress)
    actual = sha256_of(part)
    if actual != jar.sha256:
        part.unlink(missing_ok=True)
        raise JarFetchError(
            f"{jar.coordinate}: refused: SHA-256 {actual} is not the pinned {jar.sha256}"
            f" (from {jar.url(repository)})"
        )
    # The rename replaces a corrupt jar as a new file: a hard-linked original is untouched.
    os.replace(part, target)
    directory = os.open(cache, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    return True
