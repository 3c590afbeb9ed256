"""``tidelake setup``: what it reports and its exit status (0 ready, 1 a jar missing or
refused, 3 jars in place but no usable Java), run as the program in a child process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

REPO = Path(__file__).resolve().parents[3]
BUNDLE = REPO / ".cache" / "jars" / "hudi-spark3.5-bundle_2.12-1.1.1.jar"


def _setup(*args: str, env: dict[str, str]) -> tuple[int, dict[str, object], str]:
    proc = subprocess.run(
        [sys.executable, "-m", "tidelake.cli", "setup", *args, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **env},
    )
    return proc.returncode, orjson.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def _seeded(tmp_path: Path) -> Path:
    if not BUNDLE.is_file():
        pytest.skip(f"{BUNDLE} missing: run scripts/setup")
    cache = tmp_path / "jars"
    cache.mkdir()
    try:
        (cache / BUNDLE.name).hardlink_to(BUNDLE)
    except OSError:
        (cache / BUNDLE.name).symlink_to(BUNDLE)
    return cache


def test_check_names_a_missing_jar_and_fetches_nothing(tmp_path: Path) -> None:
    """An empty cache: exit 1, the Hudi bundle reported missing, the cache still empty."""
    cache = tmp_path / "jars"
    code, report, _ = _setup("--check", env={"TIDELAKE_JAR_CACHE": str(cache)})
    states = {j["file"]: j["state"] for j in report["jars"]}
    assert (1, {BUNDLE.name: "missing"}) == (code, states)
    assert not cache.exists() or [] == list(cache.iterdir())


def test_ready_when_the_bundle_java_and_pyspark_are_there(tmp_path: Path) -> None:
    """The verified bundle, this machine's Java 17 and the dev venv's PySpark: exit 0."""
    code, report, stderr = _setup("--check", env={"TIDELAKE_JAR_CACHE": str(_seeded(tmp_path))})
    assert (0, True, "ok") == (code, report["ok"], report["jars"][0]["state"]), stderr


def test_jars_without_java_exit_3_and_say_so(tmp_path: Path) -> None:
    """No java where JAVA_HOME points: exit 3 (jars fine), and the report says no Java."""
    env = {"TIDELAKE_JAR_CACHE": str(_seeded(tmp_path)), "JAVA_HOME": str(tmp_path / "nojdk")}
    code, report, stderr = _setup(env=env)
    java = report["java"]
    assert (3, False) == (code, java["ok"]), stderr
    assert java["message"].startswith("no Java found")
    assert "no Java found" in " ".join(stderr.split())
