"""``max_deliver`` convicts a message only after stagers with working storage died holding it
(``stage/consumer.py`` module docstring; issue 23, deliver 4).

Probe: with the stage root full, restarts raised every valid message's delivery count past
``max_deliver`` and the stager dead-lettered them as ``max_deliver``. A message past the
count is now a suspect: its tries are recorded durably in staging storage before it is
decoded, and only a record showing ``SUSPECT_TRIES`` tries convicts it; while the record
cannot be written, the message is held.
"""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path
from types import SimpleNamespace

from tidelake.config import load_config
from tidelake.errors import StorageError
from tidelake.runtime.storage import LocalStorage
from tidelake.stage.batch import Batch
from tidelake.stage.consumer import SUSPECT_TRIES, Stager, suspect_path


class FlakyStorage(LocalStorage):
    """Local storage whose writes fail with ENOSPC while ``full``."""

    full = False

    def put(self, path: str, data: bytes) -> None:
        if self.full:
            raise StorageError(f"cannot write {path}") from OSError(errno.ENOSPC, "disk full")
        super().put(path, data)


class Msg:
    """A JetStream message delivered ``deliveries`` times (its ack subject says so)."""

    def __init__(self, seq: int, deliveries: int) -> None:
        self.reply = f"$JS.ACK.CDC.stager.{deliveries}.{seq}.{seq}.1704067200000000000.0"
        self.kept = 0

    async def in_progress(self) -> None:
        self.kept += 1


def _stager(tmp_path: Path, storage: LocalStorage) -> Stager:
    cfg = load_config(
        None,
        environ={"TIDELAKE_HOME": str(tmp_path), "TIDELAKE_BUS__CONSUMER__ACK_WAIT_S": "0.3"},
    )
    nc = SimpleNamespace(jetstream=lambda: None)
    return Stager(nc, cfg.bus, cfg.stage, storage)  # type: ignore[arg-type]


def test_a_suspect_is_tried_until_stagers_with_working_storage_died_holding_it(
    tmp_path: Path,
) -> None:
    """Past max_deliver (5), the first stagers to see message 7 record a try each and decode
    it; after SUSPECT_TRIES recorded tries the next stager dead-letters it as max_deliver."""
    storage = FlakyStorage(tmp_path / "staging")
    verdicts = []
    for n in range(SUSPECT_TRIES + 1):  # each a fresh process that died holding it
        stager = _stager(tmp_path, storage)
        batch: Batch[Msg] = Batch(stager.limits)
        verdicts.append(asyncio.run(stager._convicted(Msg(7, 6 + n), batch)))  # type: ignore[arg-type]
    expected = [None] * SUSPECT_TRIES + [
        f"max_deliver: delivered {6 + SUSPECT_TRIES} times; "
        f"{SUSPECT_TRIES} stager(s) with working storage stopped while holding it"
    ]
    assert expected == verdicts
    assert 5 == stager.bus.consumer.max_deliver
    assert None is asyncio.run(stager._convicted(Msg(8, 5), batch))  # type: ignore[arg-type]


def test_a_suspect_is_held_while_its_record_cannot_be_written(tmp_path: Path) -> None:
    """The disk is full: the suspect is neither decoded nor dead-lettered; its AckWait is
    kept alive and the failure shown, until the record can be written."""
    storage = FlakyStorage(tmp_path / "staging")
    storage.full = True
    stager = _stager(tmp_path, storage)
    batch: Batch[Msg] = Batch(stager.limits)
    msg = Msg(9, 40)

    async def main() -> tuple[bool, str, str | None]:
        task = asyncio.create_task(stager._convicted(msg, batch))  # type: ignore[arg-type]
        await asyncio.sleep(1.2)
        waiting = not task.done()
        shown = stager.stats.last_error
        storage.full = False
        return waiting, shown, await task

    waiting, shown, verdict = asyncio.run(main())
    assert (True, None) == (waiting, verdict)
    assert shown.startswith("staging storage: suspect record of message 9")
    assert msg.kept > 0
    assert b"1" == storage.get(suspect_path(9))
