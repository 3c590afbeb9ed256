"""A size-limited tmpfs for the disk-full regression tests, and a ballast file that fills it.

The fault suite (``src/tidelake/pipeline/disks.py``) uses loop-mounted ext4 images; the
short regression tests only need a filesystem that runs out of space, and tmpfs is the
cheapest one. Mounting needs root, as the fault suite does: without it a test is skipped,
saying so.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def mounted_tmpfs(mount_point: Path, size_mb: int) -> Iterator[Path]:
    """``mount_point`` as a ``size_mb`` MiB tmpfs while the block runs; unmounted after."""
    if os.geteuid() != 0:
        pytest.skip("mounting a size-limited tmpfs needs root")
    mount_point.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(mount_point)], check=True
    )
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill(disk: Path) -> Path:
    """Take every free byte of ``disk`` with a ballast file (halving the write size down to
    one byte once ENOSPC comes); its path, to delete when space is to be freed."""
    ballast = disk / "ballast"
    chunk = b"\0" * (1 << 20)
    with ballast.open("wb", buffering=0) as f:
        while True:
            try:
                f.write(chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                if len(chunk) == 1:
                    break
                chunk = chunk[: len(chunk) // 2]
    return ballast
