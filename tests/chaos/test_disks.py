"""The disk-full fault's tool: a loop-mounted ext4 that a ballast file fills and frees."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from tidelake.pipeline.disks import LoopDisk, mounted, unmount_under

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="mounting a loop device needs root"),
]


def test_fill_makes_every_write_fail_with_enospc_and_free_gives_the_space_back(
    tmp_path: Path,
) -> None:
    """Issue 23 deliver 3 (disk full on the stage root and the lake): once filled, a write
    of even 4 KiB fails with ENOSPC; once freed, the same write succeeds and the free space
    is what it was. Unmount leaves neither the mount nor the image behind."""
    disk = LoopDisk(tmp_path / "img", tmp_path / "mnt", size_mb=32).mount()
    try:
        assert mounted(disk.mount_point)
        before = disk.free_bytes()
        held = disk.fill()
        assert 0 == disk.free_bytes()
        assert held >= before - (1 << 20)
        with pytest.raises(OSError, match="No space left") as err:
            (disk.mount_point / "batch.jsonl").write_bytes(b"x" * 4096)
        assert errno.ENOSPC == err.value.errno
        disk.free()
        assert before == disk.free_bytes()
        (disk.mount_point / "batch.jsonl").write_bytes(b"x" * 4096)
        assert 4096 == (disk.mount_point / "batch.jsonl").stat().st_size
    finally:
        disk.unmount()
    assert not mounted(tmp_path / "mnt")
    assert not (tmp_path / "img").exists()


def test_unmount_under_clears_what_a_crashed_run_left_mounted(tmp_path: Path) -> None:
    """A chaos run killed before its clean-up leaves its disks mounted in its home; the next
    run unmounts them before it wipes the home (else the wipe fails or reaches into them)."""
    left = LoopDisk(tmp_path / "home" / "disks" / "lake.img", tmp_path / "home" / "lake", 16)
    left.mount()
    assert [str((tmp_path / "home" / "lake").resolve())] == unmount_under(tmp_path / "home")
    assert not mounted(tmp_path / "home" / "lake")
    left.image.unlink()
