"""The stager writes a cut batch while the next one fills, without bending the order rules.

A batch's messages are acked only after its manifest is durable, manifests are written in
stream order (a slow first batch is never overtaken by the second), and a batch that cannot
be written is never acked: a transient failure (disk full) is retried, its messages kept
alive, and the next cut waits for it; a terminal one stops the stager at the next cut.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tidelake.config import load_config
from tidelake.errors import StorageError
from tidelake.events import ChangeEvent, Op, Position
from tidelake.runtime.storage import LocalStorage
from tidelake.stage.batch import Batch
from tidelake.stage.consumer import Stager
from tidelake.stage.manifest import manifest_range


class RecordingStorage(LocalStorage):
    """Local storage that logs each write; writes of ``slow`` paths wait for ``gate``."""

    def __init__(self, root: Path, log: list[tuple[str, Any]]) -> None:
        super().__init__(root)
        self.log = log
        self.gate = threading.Event()
        self.gate.set()
        self.fail = False
        self.terminal = False

    def put(self, path: str, data: bytes) -> None:
        self.gate.wait(10)
        if self.fail:
            if self.terminal:
                raise StorageError(f"cannot write {path}: denied") from PermissionError(path)
            raise StorageError(f"cannot write {path}: disk full")
        super().put(path, data)
        if path.startswith("manifests/"):
            seq_range = manifest_range(path)
            assert seq_range is not None
            self.log.append(("manifest", seq_range[0]))


class FakeMsg:
    def __init__(self, seq: int, log: list[tuple[str, Any]]) -> None:
        self.seq = seq
        self.log = log

    async def ack(self) -> None:
        self.log.append(("ack", self.seq))

    async def in_progress(self) -> None:
        self.log.append(("in_progress", self.seq))


async def _flush(timeout: float = 0) -> None:
    return None


def _stager(tmp_path: Path, storage: RecordingStorage) -> Stager:
    cfg = load_config(None, environ={"TIDELAKE_HOME": str(tmp_path)})
    nc = SimpleNamespace(jetstream=lambda: None, flush=_flush)
    stager = Stager(nc, cfg.bus, cfg.stage, storage)  # type: ignore[arg-type]
    stager._flushed_floor = 0
    return stager


def _batch(stager: Stager, seqs: range, log: list[tuple[str, Any]]) -> Batch[Any]:
    batch: Batch[Any] = Batch(stager.limits)
    for seq in seqs:
        event = ChangeEvent(
            source="tidb",
            database="shop",
            table="orders",
            op=Op.INSERT,
            position=Position((1000 + seq, seq)),
            pk=("id",),
            key={"id": seq},
            after={"id": seq},
        )
        batch.add_events(FakeMsg(seq, log), seq, 100, [event])
    return batch


def test_acks_follow_their_manifest_and_manifests_keep_stream_order(tmp_path: Path) -> None:
    """Batch 1-3 is slow to write; batch 4-6 is cut meanwhile. Its manifest still comes after
    batch 1-3's, and every ack after the manifest of its own batch."""
    log: list[tuple[str, Any]] = []
    storage = RecordingStorage(tmp_path / "staging", log)
    stager = _stager(tmp_path, storage)

    async def main() -> None:
        storage.gate.clear()
        await stager._cut(_batch(stager, range(1, 4), log))
        threading.Timer(0.2, storage.gate.set).start()
        await stager._cut(_batch(stager, range(4, 7), log))
        await stager._settle()

    asyncio.run(main())
    expected = [("manifest", 1), ("ack", 1), ("ack", 2), ("ack", 3)]
    expected += [("manifest", 4), ("ack", 4), ("ack", 5), ("ack", 6)]
    assert expected == log
    assert 6 == stager._flushed_floor
    assert 2 == stager.stats.batches


def test_the_next_batch_fills_while_a_cut_one_is_written(tmp_path: Path) -> None:
    """A cut returns a new, empty batch at once; the cut batch is acked only once written."""
    log: list[tuple[str, Any]] = []
    storage = RecordingStorage(tmp_path / "staging", log)
    stager = _stager(tmp_path, storage)

    async def main() -> None:
        storage.gate.clear()
        started = time.monotonic()
        fresh = await stager._cut(_batch(stager, range(1, 4), log))
        assert time.monotonic() - started < 1.0
        assert 0 == len(fresh)
        await asyncio.sleep(0.05)
        assert [] == log  # nothing written, nothing acked yet
        storage.gate.set()
        await stager._settle()

    asyncio.run(main())
    assert [("manifest", 1), ("ack", 1), ("ack", 2), ("ack", 3)] == log


def test_a_batch_that_cannot_be_written_is_not_acked_and_stops_the_next_cut(
    tmp_path: Path,
) -> None:
    """A terminal write error of batch 1-3 surfaces at the next cut; nothing is acked,
    batch 4-6 is not written."""
    log: list[tuple[str, Any]] = []
    storage = RecordingStorage(tmp_path / "staging", log)
    storage.fail = storage.terminal = True
    stager = _stager(tmp_path, storage)

    async def main() -> None:
        await stager._cut(_batch(stager, range(1, 4), log))
        with pytest.raises(StorageError, match="denied"):
            await stager._cut(_batch(stager, range(4, 7), log))

    asyncio.run(main())
    assert [] == log
    assert [] == storage.list("manifests")
    assert 0 == stager._flushed_floor


def test_a_full_disk_holds_the_batch_and_its_messages_until_space_is_back(
    tmp_path: Path,
) -> None:
    """Issue 23: a disk-full write of batch 1-3 is retried, not raised: nothing is acked
    while it fails, every message of it and of the batch cut behind it has its AckWait
    extended (``in_progress``), the failure shows as ``last_error``; once the disk has
    room both batches are written in order and acked after their manifests."""
    log: list[tuple[str, Any]] = []
    storage = RecordingStorage(tmp_path / "staging", log)
    storage.fail = True
    stager = _stager(tmp_path, storage)
    stager.bus = stager.bus.model_copy(
        update={"consumer": stager.bus.consumer.model_copy(update={"ack_wait_s": 0.3})}
    )
    seen: dict[str, Any] = {}

    async def main() -> None:
        await stager._cut(_batch(stager, range(1, 4), log))
        second = asyncio.create_task(stager._cut(_batch(stager, range(4, 7), log)))
        await asyncio.sleep(1.5)
        seen["error"] = stager.stats.last_error
        seen["stalled"] = stager._stalled.is_set()
        seen["acked"] = [x for x in log if x[0] != "in_progress"]
        storage.fail = False  # space freed
        await second
        await stager._settle()

    asyncio.run(main())
    assert [] == seen["acked"]
    assert seen["stalled"]
    assert "disk full" in seen["error"]
    kept = {seq for kind, seq in log if kind == "in_progress"}
    assert set(range(1, 7)) == kept
    expected = [("manifest", 1), ("ack", 1), ("ack", 2), ("ack", 3)]
    expected += [("manifest", 4), ("ack", 4), ("ack", 5), ("ack", 6)]
    assert expected == [x for x in log if x[0] != "in_progress"]
    assert ("", 6) == (stager.stats.last_error, stager._flushed_floor)


def test_a_redelivery_of_the_batch_being_written_is_acked_with_it(tmp_path: Path) -> None:
    """Batch 1-3 is being written and the next batch is still empty when message 2 comes
    again: the copy is acked right after batch 1-3's manifest, not left for AckWait."""
    log: list[tuple[str, Any]] = []
    storage = RecordingStorage(tmp_path / "staging", log)
    stager = _stager(tmp_path, storage)
    stager._next_seq = 4
    stager._held = {}
    again = FakeMsg(2, log)
    again.reply = "$JS.ACK.CDC.stager.2.2.9.1700000000000000000.0"  # type: ignore[attr-defined]

    async def main() -> None:
        storage.gate.clear()
        fresh = await stager._cut(_batch(stager, range(1, 4), log))
        assert [] == await stager._in_order([again], fresh)  # type: ignore[list-item]
        assert [] == fresh.extra_acks
        storage.gate.set()
        await stager._settle()

    asyncio.run(main())
    assert [("manifest", 1), ("ack", 1), ("ack", 2), ("ack", 3), ("ack", 2)] == log
    assert [] == stager._late_acks
