"""Size-limited filesystems that a fault run can fill up: disk full on demand, then freed.

A :class:`LoopDisk` is an ext4 image (a sparse file, so it costs no disk until written)
loop-mounted on a directory. The chaos harness puts the stage root (or MinIO's data
directory) and the lake on two of them; a *disk-full* fault writes a ballast file that
takes every free block, holds it, then deletes it. Whatever the pipeline writes meanwhile
gets ``ENOSPC``: the point is that nothing it acked was not durable, and that it carries on
by itself once the space is back.

Why a loop-mounted ext4 and not a tmpfs: the ballast of a tmpfs lives in memory (the
machine is shared), tmpfs does not support ``O_DIRECT`` (MinIO wants it for its data
directory), and ext4 is what a stage root is likely to sit on. ``-m 0``: no blocks are
reserved for root (every stage runs as the same user as the harness, root in CI), so the
ballast really leaves nothing.

Mounting needs root (``mount``, ``losetup`` through ``mount -o loop``); without it
:meth:`LoopDisk.mount` raises :class:`DiskError` saying so.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
from pathlib import Path

import structlog

from tidelake.errors import TidelakeError

log = structlog.get_logger(__name__)

#: The file a disk-full fault writes; removed to free the space.
BALLAST = ".chaos-ballast"

_CHUNK = 1 << 20


class DiskError(TidelakeError):
    """A size-limited filesystem could not be made, mounted, filled or unmounted."""


def _run(*argv: str) -> None:
    res = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise DiskError(f"{' '.join(argv)}: {(res.stderr or res.stdout).strip()}")


def mounted(path: Path) -> bool:
    """``path`` is a mount point (read from ``/proc/self/mounts``, which survives a
    ``stat`` of a hung mount)."""
    target = str(path.resolve())
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return False
    # /proc/self/mounts escapes a space as \040: compare escaped forms.
    escaped = target.replace(" ", "\\040")
    return any(line.split(" ")[1] == escaped for line in lines if line.count(" ") >= 2)


def unmount_under(root: Path) -> list[str]:
    """Unmount every filesystem mounted at or below ``root`` (a crashed earlier run may have
    left them); the mount points unmounted, deepest first."""
    prefix = str(root.resolve())
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return []
    points = [line.split(" ")[1].replace("\\040", " ") for line in lines if line.count(" ") >= 2]
    mine = sorted(
        (p for p in points if p == prefix or p.startswith(prefix + "/")), key=len, reverse=True
    )
    for point in mine:
        # -l (lazy): a process of the crashed run may still hold a file open there.
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)
    return mine


class LoopDisk:
    """An ext4 image of ``size_mb`` at ``image``, loop-mounted on ``mount_point``."""

    def __init__(self, image: Path, mount_point: Path, size_mb: int) -> None:
        self.image = image
        self.mount_point = mount_point
        self.size_mb = size_mb

    @property
    def ballast(self) -> Path:
        return self.mount_point / BALLAST

    @property
    def is_mounted(self) -> bool:
        return mounted(self.mount_point)

    def mount(self) -> LoopDisk:
        """Make the image (sparse), format it and mount it; the mount point is made too."""
        if os.geteuid() != 0:
            raise DiskError("disk-full faults mount a loop device: run as root")
        for tool in ("mkfs.ext4", "mount", "umount"):
            if shutil.which(tool) is None:
                raise DiskError(f"{tool} not found (e2fsprogs / mount)")
        self.image.parent.mkdir(parents=True, exist_ok=True)
        self.mount_point.mkdir(parents=True, exist_ok=True)
        with self.image.open("wb") as f:
            f.truncate(self.size_mb * _CHUNK)
        _run("mkfs.ext4", "-q", "-F", "-m", "0", "-E", "nodiscard", str(self.image))
        _run("mount", "-o", "loop", str(self.image), str(self.mount_point))
        log.info("loop disk mounted", mount=str(self.mount_point), size_mb=self.size_mb)
        return self

    def free_bytes(self) -> int:
        st = os.statvfs(self.mount_point)
        return st.f_bavail * st.f_frsize

    def fill(self) -> int:
        """Take every free block with the ballast file; the bytes it holds. Idempotent."""
        fd = os.open(self.ballast, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            free = self.free_bytes()
            if free > 0:
                # fallocate takes the blocks at once (no write of every byte); what it
                # cannot take (metadata blocks, rounding) the writes below take.
                with contextlib.suppress(OSError):
                    os.posix_fallocate(fd, os.fstat(fd).st_size, free)
            chunk = b"\0" * _CHUNK
            size = _CHUNK
            while size >= 1024:
                try:
                    os.write(fd, chunk[:size])
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise DiskError(f"filling {self.mount_point}: {exc}") from exc
                    size //= 2
            with contextlib.suppress(OSError):
                os.fsync(fd)
        finally:
            os.close(fd)
        held = self.ballast.stat().st_size
        log.info("disk full", mount=str(self.mount_point), ballast=held, free=self.free_bytes())
        return held

    def free(self) -> None:
        """Remove the ballast (the space is back at once)."""
        self.ballast.unlink(missing_ok=True)
        log.info("disk freed", mount=str(self.mount_point), free=self.free_bytes())

    def unmount(self, *, keep_image: bool = False) -> None:
        """Free, unmount (lazily when busy) and delete the image (``keep_image``: leave it,
        to mount and look into after a failed run)."""
        if self.is_mounted:
            with contextlib.suppress(OSError):
                self.free()
            res = subprocess.run(
                ["umount", str(self.mount_point)], capture_output=True, check=False
            )
            if res.returncode != 0:
                subprocess.run(["umount", "-l", str(self.mount_point)], check=False)
        if not keep_image:
            self.image.unlink(missing_ok=True)
