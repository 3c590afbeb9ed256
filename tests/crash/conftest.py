"""Fixtures of the OS-crash tests: a lossy FUSE mount (tests/support/lossyfs.py) per test and
a current nats-server (>= 2.10: Debian's 2.9.10 rejects ``sync_interval``)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.lossyfs import LossyMount, fuse_available

REPO = Path(__file__).resolve().parents[2]


def _version(binary: str) -> tuple[int, ...]:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False)
    found = re.search(r"v?(\d+)\.(\d+)\.(\d+)", out.stdout + out.stderr)
    return tuple(int(x) for x in found.groups()) if found else (0,)


@pytest.fixture(scope="session")
def nats_binary() -> str:
    """The nats-server the embedded default runs: ``$TIDELAKE_NATS_SERVER``, the repo's
    ``.cache/bin/nats-server`` (scripts/gotools), else the PATH; at least 2.10."""
    candidates = [
        os.environ.get("TIDELAKE_NATS_SERVER"),
        str(REPO / ".cache" / "bin" / "nats-server"),
        shutil.which("nats-server"),
    ]
    for binary in candidates:
        if binary and os.access(binary, os.X_OK) and _version(binary) >= (2, 10, 0):
            return binary
    pytest.skip("no nats-server >= 2.10 (scripts/gotools builds one into .cache/bin)")


@pytest.fixture(params=["ext4-names", "posix-names"])
def lossy(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[LossyMount]:
    """A lossy mount over ``tmp_path/backing`` at ``tmp_path/mnt``, once with ext4's rule
    for names (a new file's first fsync makes its name durable) and once with the strict
    POSIX rule (only a directory fsync does)."""
    why = fuse_available()
    if why is not None:
        pytest.skip(f"no FUSE here: {why}")
    with LossyMount(tmp_path, ext4_names=request.param == "ext4-names") as mount:
        yield mount
