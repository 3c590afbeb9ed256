"""Durable writes on a local filesystem: the one place that knows how to make a file survive
an OS crash or a power loss, not only a ``kill -9`` of the writer.

A process killed with ``kill -9`` loses nothing the kernel already holds; an OS crash loses
whatever the kernel had not yet written to the disk. ``write()`` and ``rename()`` return once
the page cache and the in-memory directory hold the change, so without ``fsync`` a stage could
ack its input for output that a crash then takes away. POSIX needs three syncs for a file to
survive (see fsync(2), rename(2) and the ext4/XFS notes on "directory fsync"):

1. the file's own data: ``fsync`` of the file before it is renamed into place, else the
   rename can reach the disk before the data and a crash leaves an empty or torn file;
2. the new name: ``fsync`` of the directory that holds the entry (a create or a rename
   changes the directory, not the file);
3. every directory this write created: a new directory is itself an entry of its parent.

Every stage that acks after a local write uses these helpers (the stager's batch files and
manifests through :class:`tidelake.runtime.storage.LocalStorage`, the ingest's and the API's
state through :mod:`tidelake.lake.ledger`, the capture's position through
:mod:`tidelake.capture.position`). Heartbeats do not: they are hints, rewritten every few
seconds, and a lost one only makes a status page a few seconds older.

Object storage (S3, MinIO) needs none of this: a PUT answers only once the object is stored.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

__all__ = ["append_line", "fsync_dir", "fsync_paths", "make_dirs", "write_atomic"]


def fsync_dir(directory: str | Path) -> None:
    """Make the entries of ``directory`` (creates, renames, unlinks in it) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(directory: str | Path) -> None:
    """``mkdir -p`` whose result survives a crash: each directory it creates is fsync-ed in
    its parent (the deepest missing one first created, the parents' fsyncs last).

    A directory that already exists costs one ``stat`` and no fsync: it was made durable by
    whoever created it (through this function).
    """
    path = Path(directory)
    if path.is_dir():
        return
    missing: list[Path] = []
    probe = path
    while not probe.is_dir():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    for new in reversed(missing):
        with contextlib.suppress(FileExistsError):  # another writer made it first: fine
            new.mkdir()
    # Sync each parent after its child exists: the entry of ``new`` lives in ``new.parent``.
    for new in missing:
        fsync_dir(new.parent)


def write_atomic(path: str | Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that after a crash it holds the old or the new bytes.

    A temporary file in the same directory (unique per call, so concurrent writers never
    share one; its name starts with ``.`` and ends with ``.tmp`` so listings skip it) is
    written and fsync-ed, renamed over ``path``, then the directory is fsync-ed. Missing
    parent directories are created durably (:func:`make_dirs`). On return the new content
    survives an OS crash. Raises ``OSError`` (the temporary file is removed).
    """
    target = Path(path)
    make_dirs(target.parent)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(target.parent)


def append_line(path: str | Path, line: bytes) -> None:
    """Append one line (``line`` without its newline) to ``path`` and fsync it.

    When the file does not end with a newline, an earlier append was cut by a crash: the new
    line starts on a line of its own, so only the torn line is lost. When this append
    created the file, its directory is fsync-ed too (the new name).
    """
    target = Path(path)
    make_dirs(target.parent)
    created = not target.exists()
    with target.open("a+b") as f:
        f.seek(0, os.SEEK_END)
        if f.tell() > 0:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                line = b"\n" + line
        f.write(line + b"\n")
        f.flush()
        os.fsync(f.fileno())
    if created:
        fsync_dir(target.parent)


def fsync_paths(paths: Iterable[str | Path]) -> int:
    """Fsync each existing file of ``paths`` and then each directory holding one (once).

    For files written by someone who never syncs them (the JVM's Hadoop ``LocalFileSystem``
    under Hudi): after this returns they and their names survive a crash. A path that no
    longer exists is skipped (a concurrent cleaner removed it). Returns the number of fsyncs.
    """
    dirs: dict[Path, None] = {}
    count = 0
    for raw in paths:
        p = Path(raw)
        try:
            fd = os.open(p, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        count += 1
        dirs.setdefault(p.parent)
    for d in dirs:
        with contextlib.suppress(FileNotFoundError):
            fsync_dir(d)
            count += 1
    return count
