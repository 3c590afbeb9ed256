"""runtime/jars.py: the pinned jar list, where the cache is, and a fetch that keeps only the
pinned bytes (verified, atomic, resumable, idempotent) — against a real HTTP server on
127.0.0.1 serving a Maven repository layout."""

from __future__ import annotations

import hashlib
import http.server
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tidelake.runtime.jars import (
    Jar,
    JarFetchError,
    fetch_jar,
    jar_cache_dir,
    jar_state,
    parse_jar_list,
    pinned_jars,
    user_cache_dir,
)

PAYLOAD = bytes(range(256)) * 4096  # 1 MiB: several read chunks


@dataclass
class Mirror:
    """A Maven layout over HTTP: path -> bytes; records each request's Range header."""

    url: str
    files: dict[str, bytes] = field(default_factory=dict)
    ranges: list[str | None] = field(default_factory=list)


@pytest.fixture
def mirror() -> Iterator[Mirror]:
    state = Mirror(url="")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = state.files.get(self.path)
            state.ranges.append(self.headers.get("Range"))
            if body is None:
                self.send_error(404)
                return
            start = 0
            if self.headers.get("Range"):
                start = int(self.headers["Range"].removeprefix("bytes=").rstrip("-"))
                if start >= len(body):
                    self.send_error(416)
                    return
                self.send_response(206)
            else:
                self.send_response(200)
            self.send_header("Content-Length", str(len(body) - start))
            self.end_headers()
            self.wfile.write(body[start:])

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}/maven2"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


def _jar(payload: bytes = PAYLOAD) -> Jar:
    return Jar("org.example", "demo-lib", "1.0", hashlib.sha256(payload).hexdigest(), "core")


def _serve(mirror: Mirror, jar: Jar, body: bytes) -> None:
    mirror.files["/maven2/org/example/demo-lib/1.0/demo-lib-1.0.jar"] = body


def test_pinned_list_has_sums_and_roles() -> None:
    """Every pinned jar carries a SHA-256 and a role; the Hudi bundle is core, S3A is s3."""
    roles = {jar.filename: jar.role for jar in pinned_jars()}
    expected = {
        "hudi-spark3.5-bundle_2.12-1.1.1.jar": "core",
        "hadoop-aws-3.3.4.jar": "s3",
        "aws-java-sdk-bundle-1.12.262.jar": "s3",
    }
    assert expected == roles
    assert all(len(jar.sha256) == 64 for jar in pinned_jars())
    assert ["hudi-spark3.5-bundle_2.12-1.1.1.jar"] == [j.filename for j in pinned_jars(["core"])]


def test_maven_url_follows_the_repository_layout() -> None:
    """group dots become directories: the URL Maven Central serves the artifact at."""
    jar = pinned_jars(["core"])[0]
    expected = (
        "https://repo1.maven.org/maven2/org/apache/hudi/hudi-spark3.5-bundle_2.12/1.1.1/"
        "hudi-spark3.5-bundle_2.12-1.1.1.jar"
    )
    assert expected == jar.url()


def test_a_line_without_a_sum_is_refused() -> None:
    """An unpinned line in jars.txt is an error, not a jar fetched unverified."""
    with pytest.raises(ValueError, match="line 2"):
        parse_jar_list("# comment\norg.example:lib:1.0 core\n")


def test_cache_dir_precedence(tmp_path: Path) -> None:
    """Configured dir, then $TIDELAKE_JAR_CACHE; the user cache follows $XDG_CACHE_HOME and
    ignores a relative one (the XDG rule)."""
    env = {"TIDELAKE_JAR_CACHE": str(tmp_path / "env")}
    assert tmp_path / "cfg" == jar_cache_dir(tmp_path / "cfg", env)
    assert tmp_path / "env" == jar_cache_dir(None, env)
    xdg = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    assert tmp_path / "xdg" / "tidelake" / "jars" == user_cache_dir(xdg)
    assert Path.home() / ".cache" / "tidelake" / "jars" == user_cache_dir({"XDG_CACHE_HOME": "x"})


def test_fetch_verifies_and_is_idempotent(mirror: Mirror, tmp_path: Path) -> None:
    """The first call downloads and keeps the pinned bytes; the second sends no request."""
    jar = _jar()
    _serve(mirror, jar, PAYLOAD)
    seen: list[tuple[int, int | None]] = []
    assert fetch_jar(
        jar, tmp_path, repository=mirror.url, progress=lambda j, d, t: seen.append((d, t))
    )
    assert PAYLOAD == (tmp_path / jar.filename).read_bytes()
    assert (len(PAYLOAD), len(PAYLOAD)) == seen[-1]
    assert not fetch_jar(jar, tmp_path, repository=mirror.url)
    assert 1 == len(mirror.ranges)
    assert [jar.filename] == [p.name for p in tmp_path.iterdir()]


def test_other_bytes_are_refused_and_not_kept(mirror: Mirror, tmp_path: Path) -> None:
    """A mirror serving other bytes fails the fetch; neither the jar nor a part file remains."""
    jar = _jar()
    _serve(mirror, jar, PAYLOAD[:-1] + b"X")
    with pytest.raises(JarFetchError, match="refused: SHA-256"):
        fetch_jar(jar, tmp_path, repository=mirror.url)
    assert [] == list(tmp_path.iterdir())


def test_an_interrupted_download_resumes(mirror: Mirror, tmp_path: Path) -> None:
    """A part file left by an interrupted run is continued with a range request."""
    jar = _jar()
    _serve(mirror, jar, PAYLOAD)
    (tmp_path / f".{jar.filename}.part").write_bytes(PAYLOAD[:1000])
    assert fetch_jar(jar, tmp_path, repository=mirror.url)
    assert ["bytes=1000-"] == mirror.ranges
    assert PAYLOAD == (tmp_path / jar.filename).read_bytes()


def test_a_corrupt_jar_is_replaced_without_touching_its_hard_links(
    mirror: Mirror, tmp_path: Path
) -> None:
    """A jar with other bytes is fetched again and renamed over; a hard link to the old file
    (a seeded cache) keeps its bytes."""
    jar = _jar()
    _serve(mirror, jar, PAYLOAD)
    cache = tmp_path / "cache"
    cache.mkdir()
    original = tmp_path / "original.jar"
    original.write_bytes(b"not the jar")
    (cache / jar.filename).hardlink_to(original)
    assert "corrupt" == jar_state(jar, cache)
    assert fetch_jar(jar, cache, repository=mirror.url)
    assert "ok" == jar_state(jar, cache)
    assert b"not the jar" == original.read_bytes()


def test_a_missing_artifact_names_the_url(mirror: Mirror, tmp_path: Path) -> None:
    """HTTP 404 is reported with the address tried."""
    with pytest.raises(JarFetchError, match=r"demo-lib-1\.0\.jar answered HTTP 404"):
        fetch_jar(_jar(), tmp_path, repository=mirror.url)
