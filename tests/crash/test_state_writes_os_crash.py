"""Issue 23, deliver 1: every state file a stage acks after survives an OS crash.

Each write site's helper writes on the lossy filesystem, then the "machine crashes" (all that
was not fsync-ed is dropped): the stager's batch file in a new batch directory and its
manifest (LocalStorage.put), the ingest's and the API's state (the ledger: a state file and
the commit log), the capture's position. A plain write-and-rename — what a heartbeat does, on
purpose — is the control that shows the crash takes unsynced files away.
"""

from __future__ import annotations

import os
from pathlib import Path

from support.lossyfs import LossyMount
from tidelake.capture.position import PositionStore
from tidelake.lake.ledger import CommitRecord, Ledger
from tidelake.runtime.storage import LocalStorage

MANIFEST = "manifests/00000000000000000002-00000000000000000001-b1.json"


def _write_everything(root: Path) -> None:
    storage = LocalStorage(root / "staging")
    storage.put("batches/b1/shop.orders.jsonl", b'{"id": 1}\n')
    storage.put(MANIFEST, b'{"batch": "b1"}')
    ledger = Ledger(root / "lake" / "_tidelake")
    ledger.save_cursor(2)
    ledger.append_commit(
        CommitRecord(table="shop.orders", instant="1", seq=2, events=1, committed_at_ms=1)
    )
    PositionStore(root / "capture" / "position.json").save({"gtid": "0-1-42"})


def _read_everything(root: Path) -> dict[str, object]:
    ledger = Ledger(root / "lake" / "_tidelake")
    return {
        "batch": (root / "staging/batches/b1/shop.orders.jsonl").read_bytes(),
        "manifest": (root / "staging" / MANIFEST).read_bytes(),
        "cursor": ledger.cursor(),
        "commits": [c.seq for c in ledger.commits()],
        "position": PositionStore(root / "capture" / "position.json").load(),
    }


def test_state_written_through_the_durable_helpers_survives_an_os_crash(
    lossy: LossyMount,
) -> None:
    """Batch file (new directories), manifest, ledger state and commit log, capture position:
    all present and whole after the crash, under ext4's and the strict POSIX name rule."""
    root = lossy.mountpoint
    _write_everything(root)
    before = _read_everything(root)
    dropped = lossy.crash()
    assert before == _read_everything(root)
    assert 0 == dropped["bytes_dropped"]


def test_a_write_and_rename_without_fsync_is_lost_at_an_os_crash(lossy: LossyMount) -> None:
    """The control: the same bytes written and renamed without fsync (a heartbeat's way) are
    gone after the crash — the layer does drop what was not synced."""
    root = lossy.mountpoint
    (root / "beats").mkdir()
    tmp = root / "beats" / ".stager.heartbeat.json.tmp"
    tmp.write_bytes(b'{"state": "running"}')
    os.replace(tmp, root / "beats" / "stager.heartbeat.json")
    lossy.crash()
    assert [] == sorted(p.name for p in root.iterdir())
