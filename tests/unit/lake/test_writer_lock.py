"""One ingest writer per lake: the flock-based writer lock (lake/lock.py)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tidelake.config import load_config
from tidelake.lake.lock import LakeLockedError, lock_path, read_holder, writer_lock

#: A child process that takes the lock, says so on stdout, then sleeps until killed.
_HOLDER = """
import sys, time
from pathlib import Path
from tidelake.lake.lock import writer_lock
with writer_lock(Path(sys.argv[1])):
    print("locked", flush=True)
    time.sleep(600)
"""


def _spawn_holder(path: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(path)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_the_lock_lives_in_the_lake_state_directory(tmp_path: Path) -> None:
    """A local lake keeps its writer lock at <lake_root>/_tidelake/ingest.lock."""
    cfg = load_config(None, environ={"TIDELAKE_HOME": str(tmp_path)})
    expected = Path(cfg.lake_root) / "_tidelake" / "ingest.lock"
    assert expected == lock_path(cfg)


def test_a_second_writer_is_refused_and_told_who_holds_the_lock(tmp_path: Path) -> None:
    """While one process holds the lock, another gets LakeLockedError naming the holder's pid."""
    path = tmp_path / "_tidelake" / "ingest.lock"
    holder = _spawn_holder(path)
    try:
        with pytest.raises(LakeLockedError) as caught, writer_lock(path):
            pass
        message = str(caught.value)
        assert f"pid {holder.pid}" in message
        assert socket.gethostname() in message
        assert "would race" in message
        assert holder.pid == (read_holder(path) or {}).get("pid")
    finally:
        holder.kill()
        holder.wait()


def test_a_killed_holder_releases_the_lock(tmp_path: Path) -> None:
    """kill -9 of the holder frees the lock at once: no stale lock file blocks a restart."""
    path = tmp_path / "ingest.lock"
    holder = _spawn_holder(path)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    with writer_lock(path) as mine:
        assert os.getpid() == mine["pid"]
        assert os.getpid() == (read_holder(path) or {}).get("pid")


def test_the_lock_is_released_when_the_block_ends(tmp_path: Path) -> None:
    """Leaving the with-block releases the lock for the next writer in the same process."""
    path = tmp_path / "ingest.lock"
    started = time.time_ns() // 1_000_000
    with writer_lock(path) as first:
        assert first["since_ms"] >= started
    with writer_lock(path) as second:
        assert second["pid"] == first["pid"]


def test_a_second_ingest_command_exits_non_zero_and_says_why(tmp_path: Path) -> None:
    """`tidelake ingest` on a locked lake stops before Spark starts, exit 1, naming the holder."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDELAKE_")}
    env["TIDELAKE_HOME"] = str(tmp_path)
    cfg = load_config(None, environ=env)
    holder = _spawn_holder(lock_path(cfg))
    try:
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "tidelake.cli", "ingest", "--once"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 1, proc.stderr
        said = " ".join(proc.stderr.split())
        assert f"ingest pid {holder.pid}" in said
        assert "already writes this lake" in said
        assert time.monotonic() - started < 60  # refused before any JVM was started
    finally:
        holder.kill()
        holder.wait()
