"""The lossy filesystem itself (tests/support/lossyfs.py): a crash keeps exactly what was
synced, so the OS-crash tests built on it prove what they claim.

Each test states one rule of the model on a real FUSE mount: unsynced data, unsynced names,
unsynced removals and renames are undone; synced ones stay.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.lossyfs import LossyMount, fuse_available


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@pytest.fixture
def strict(tmp_path: Path) -> Iterator[LossyMount]:
    """A mount with the strict POSIX name rule: only a directory fsync makes a name durable."""
    why = fuse_available()
    if why is not None:
        pytest.skip(f"no FUSE here: {why}")
    with LossyMount(tmp_path, ext4_names=False) as mount:
        yield mount


def test_synced_data_and_names_stay_unsynced_ones_go(strict: LossyMount) -> None:
    """File synced + directory synced: kept. Appended later without fsync: cut back. A file
    whose data was synced but whose name was not: gone. A new file never synced: gone."""
    root = strict.mountpoint
    (root / "kept").write_bytes(b"synced")
    _fsync(root / "kept")
    _fsync(root)
    with (root / "kept").open("ab") as f:
        f.write(b"+unsynced")
    (root / "data-only").write_bytes(b"x")
    _fsync(root / "data-only")
    (root / "never").write_bytes(b"y")
    strict.crash()
    assert {"kept": b"synced"} == {p.name: p.read_bytes() for p in root.iterdir()}


def test_an_overwrite_and_a_truncate_are_undone_without_fsync(strict: LossyMount) -> None:
    """Bytes written over synced bytes, and a truncate below the synced size, come back as
    they were synced."""
    root = strict.mountpoint
    (root / "f").write_bytes(b"0123456789")
    _fsync(root / "f")
    _fsync(root)
    with (root / "f").open("r+b") as f:
        f.seek(2)
        f.write(b"XX")
        f.truncate(5)
        f.seek(8)
        f.write(b"YYYY")
    strict.crash()
    assert b"0123456789" == (root / "f").read_bytes()


def test_an_unsynced_unlink_and_rename_are_undone(strict: LossyMount) -> None:
    """Removing or renaming a durable file without syncing the directory: after the crash
    the old name holds the old content and the new name does not exist."""
    root = strict.mountpoint
    (root / "a").write_bytes(b"A")
    (root / "b").write_bytes(b"B")
    for p in (root / "a", root / "b", root):
        _fsync(p)
    (root / "a").unlink()
    os.rename(root / "b", root / "c")
    strict.crash()
    assert {"a": b"A", "b": b"B"} == {p.name: p.read_bytes() for p in root.iterdir()}


def test_a_synced_rename_over_a_file_stays(strict: LossyMount) -> None:
    """The atomic-replace pattern, fully synced (temporary file, rename, directory): the new
    content is what the crash keeps."""
    root = strict.mountpoint
    (root / "state").write_bytes(b"old")
    _fsync(root / "state")
    _fsync(root)
    (root / ".state.tmp").write_bytes(b"new")
    _fsync(root / ".state.tmp")
    os.replace(root / ".state.tmp", root / "state")
    _fsync(root)
    strict.crash()
    assert {"state": b"new"} == {p.name: p.read_bytes() for p in root.iterdir()}


def test_ext4_rule_a_new_files_fsync_makes_its_name_durable(tmp_path: Path) -> None:
    """With ext4's rule (the default) a new file's first fsync also makes its name and its
    new parent directories durable; a file never synced still goes."""
    why = fuse_available()
    if why is not None:
        pytest.skip(f"no FUSE here: {why}")
    with LossyMount(tmp_path) as mount:
        root = mount.mountpoint
        (root / "d" / "e").mkdir(parents=True)
        (root / "d" / "e" / "f").write_bytes(b"F")
        _fsync(root / "d" / "e" / "f")
        (root / "d" / "g").write_bytes(b"G")
        mount.crash()
        kept = sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))
    assert ["d", "d/e", "d/e/f"] == kept
