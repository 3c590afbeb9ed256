"""Installed as a user installs it: ``pip install dist/tidelake-*.whl && tidelake setup &&
tidelake demo`` in a fresh virtualenv. The wheel is built from this tree; the base install has
no PySpark (``demo`` names the missing extra); ``tidelake setup`` installs the ``spark`` extra
with pip (dependencies resolved from PyPI, under constraints.txt through ``PIP_CONSTRAINT``)
and fetches and verifies the jars; ``tidelake demo`` from a directory outside the checkout
ends with 0 mismatches.

Kept fast without faking anything: pip's own cache serves the packages after the first run,
and the jar cache is seeded with hard links (copies across filesystems) of the two big jars
from the checkout's ``.cache/jars``; ``hadoop-aws`` (1 MB) is really fetched from Maven
Central and checked against its pinned SHA-256. A mirror serving other bytes is refused first.
"""

from __future__ import annotations

import hashlib
import http.server
import os
import shutil
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1500)]

REPO = Path(__file__).resolve().parents[2]
SEEDED = ("hudi-spark3.5-bundle_2.12-1.1.1.jar", "aws-java-sdk-bundle-1.12.262.jar")
FETCHED = "hadoop-aws-3.3.4.jar"
FETCHED_PATH = "/maven2/org/apache/hadoop/hadoop-aws/3.3.4/hadoop-aws-3.3.4.jar"


def _run(
    argv: list[str], *, env: dict[str, str], cwd: Path, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of this tree, built from a clean copy (no stale build/ directory can leak
    removed modules into it)."""
    root = tmp_path_factory.mktemp("wheel-src")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (REPO / name).exists():
            shutil.copy2(REPO / name, root / name)
    shutil.copytree(
        REPO / "src", root / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    dist = tmp_path_factory.mktemp("dist")
    res = _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(root)],
        env=dict(os.environ),
        cwd=root,
    )
    assert 0 == res.returncode, res.stderr[-3000:]
    (built,) = dist.glob("tidelake-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with the wheel alone (no extras), under constraints.txt."""
    where = tmp_path_factory.mktemp("venv") / "venv"
    res = _run([sys.executable, "-m", "venv", str(where)], env=dict(os.environ), cwd=where.parent)
    assert 0 == res.returncode, res.stderr
    started = time.monotonic()
    res = _run(
        [
            str(where / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "-c",
            str(REPO / "constraints.txt"),
            str(wheel),
        ],
        env=_user_env(where, where.parent),
        cwd=where.parent,
    )
    assert 0 == res.returncode, res.stderr[-3000:]
    print(f"pip install {wheel.name}: {time.monotonic() - started:.1f} s")
    return where


def _user_env(venv: Path, home: Path) -> dict[str, str]:
    """An activated virtualenv and nothing of the checkout: no PYTHONPATH, no TIDELAKE_*."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TIDELAKE_", "PYTHON", "VIRTUAL_ENV", "SPARK_"))
    }
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    env["TIDELAKE_HOME"] = str(home / "home")
    # What `tidelake setup` installs with pip is pinned as an image would pin it.
    env["PIP_CONSTRAINT"] = str(REPO / "constraints.txt")
    env["XDG_CACHE_HOME"] = str(home / "xdg-cache")
    return env


def _seed(cache: Path) -> None:
    """Hard links (copies across filesystems) of the big jars from the checkout's cache."""
    cache.mkdir(parents=True)
    for name in SEEDED:
        source = REPO / ".cache" / "jars" / name
        if not source.is_file():
            pytest.skip(f"{source} missing: run scripts/setup")
        try:
            (cache / name).hardlink_to(source)
        except OSError:
            shutil.copy2(source, cache / name)


@pytest.fixture
def bad_mirror() -> Iterator[str]:
    """A Maven mirror serving other bytes for hadoop-aws (a tampered or broken mirror)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != FETCHED_PATH:
                self.send_error(404)
                return
            body = b"PK\x03\x04 not hadoop-aws" * 1000
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/maven2"
    server.shutdown()
    server.server_close()


def test_the_wheel_carries_what_runs(wheel: Path) -> None:
    """The built dashboard, the log4j2 properties and the pinned jar list are in the wheel;
    the base requirements hold no PySpark (the ``spark`` extra does)."""
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {
        "tidelake/api/static/index.html",
        "tidelake/lake/log4j2.properties",
        "tidelake/runtime/jars.txt",
        "tidelake/py.typed",
    }
    assert expected <= names
    assert any(n.startswith("tidelake/api/static/_astro/") for n in names)
    (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
    requires = [
        line.removeprefix("Requires-Dist: ")
        for line in zipfile.ZipFile(wheel).read(metadata).decode().splitlines()
        if line.startswith("Requires-Dist: ")
    ]
    assert ['pyspark==3.5.7; extra == "spark"'] == [r for r in requires if "pyspark" in r]


def test_pip_install_setup_demo(venv: Path, tmp_path: Path, bad_mirror: str) -> None:
    """From a fresh virtualenv with the bare wheel: ``demo`` names the spark extra it lacks;
    ``tidelake setup`` refuses a jar with other bytes, reports a corrupt one, then installs the
    spark extra and fetches hadoop-aws from Maven Central verified by its pinned SHA-256; and
    ``tidelake demo --json`` run from a directory outside the checkout ends with 0 mismatches."""
    tidelake = str(venv / "bin" / "tidelake")
    env = _user_env(venv, tmp_path)
    cache = tmp_path / "jars"
    env["TIDELAKE_JAR_CACHE"] = str(cache)
    _seed(cache)
    work = tmp_path / "work"
    work.mkdir()

    bare = _run([tidelake, "demo", "--json"], env=env, cwd=work)
    assert 2 == bare.returncode, bare.stderr[-3000:]
    assert "pip install 'tidelake[spark]'" in " ".join(bare.stderr.split())

    refused = _run(
        [tidelake, "setup", "--s3", "--repository", bad_mirror, "--no-install-extras", "--json"],
        env=env,
        cwd=work,
    )
    report = orjson.loads(refused.stdout.strip().splitlines()[-1])
    states = {j["file"]: (j["state"], j["fetched"]) for j in report["jars"]}
    assert 1 == refused.returncode, refused.stderr
    assert ("missing", False) == states[FETCHED]
    assert "refused: SHA-256" in " ".join(refused.stderr.split())
    assert sorted(SEEDED) == sorted(p.name for p in cache.iterdir())

    (cache / FETCHED).write_bytes(b"truncated")
    check = _run([tidelake, "setup", "--s3", "--check", "--json"], env=env, cwd=work)
    report = orjson.loads(check.stdout.strip().splitlines()[-1])
    assert (1, "corrupt") == (
        check.returncode,
        {j["file"]: j["state"] for j in report["jars"]}[FETCHED],
    )

    started = time.monotonic()
    setup = _run([tidelake, "setup", "--s3", "--json"], env=env, cwd=work)
    print(f"tidelake setup --s3: {time.monotonic() - started:.1f} s")
    print("\n".join(line for line in setup.stderr.splitlines() if not line.startswith(" " * 4)))
    report = orjson.loads(setup.stdout.strip().splitlines()[-1])
    fetched = {j["file"]: (j["state"], j["fetched"]) for j in report["jars"]}
    expected = {FETCHED: ("ok", True), **dict.fromkeys(SEEDED, ("ok", False))}
    assert expected == fetched, setup.stderr
    assert (0, True) == (setup.returncode, report["ok"]), setup.stderr
    pinned = next(j["sha256"] for j in report["jars"] if j["file"] == FETCHED)
    assert pinned == hashlib.sha256((cache / FETCHED).read_bytes()).hexdigest()

    started = time.monotonic()
    demo = _run(
        [tidelake, "demo", "--events", "3000", "--rate", "1500", "--json"], env=env, cwd=work
    )
    print(f"tidelake demo: {time.monotonic() - started:.1f} s")
    assert demo.stdout.strip(), demo.stderr[-3000:]
    summary = orjson.loads(demo.stdout.strip().splitlines()[-1])
    assert None is summary["error"], demo.stderr[-3000:]
    assert {"mismatches": 0, "dlq": 0} == {k: summary[k] for k in ("mismatches", "dlq")}
    assert summary["rows_in_lake"] == summary["rows_expected"] > 0
    assert 0 == demo.returncode
    # Nothing was written into the directory the user ran it from, nor into the checkout.
    assert [] == list(work.iterdir())
