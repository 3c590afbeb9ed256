"""The stager hands messages to batches strictly in stream order (see ``Stager._in_order``).

Messages that arrive in order go straight through; one that arrives ahead of a gap waits
for it, and a message already in a durable manifest is acked again, never staged twice.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tidelake.config import load_config
from tidelake.runtime.storage import LocalStorage
from tidelake.stage.batch import Batch
from tidelake.stage.consumer import Stager


class FakeMsg:
    def __init__(self, seq: int) -> None:
        self.seq = seq
        self.reply = f"$JS.ACK.CDC.stager.1.{seq}.{seq}.1700000000000000000.0"
        self.acked = False

    async def ack(self) -> None:
        self.acked = True


def _stager(tmp_path: Path, flushed_floor: int) -> Stager:
    cfg = load_config(None, environ={"TIDELAKE_HOME": str(tmp_path)})
    nc = SimpleNamespace(jetstream=lambda: None)
    stager = Stager(nc, cfg.bus, cfg.stage, LocalStorage(tmp_path / "staging"))  # type: ignore[arg-type]
    stager._flushed_floor = flushed_floor
    stager._next_seq = flushed_floor + 1
    stager._held = {}
    return stager


def _seqs(msgs: list[Any]) -> list[int]:
    return [m.seq for m in msgs]


def test_in_order_and_out_of_order_lots_come_out_in_stream_order(tmp_path: Path) -> None:
    """11, 13, 12, 14 after floor 10: 11 goes straight through, 13 waits for 12, then
    12-14 follow, in order, and nothing is left held."""
    stager = _stager(tmp_path, 10)
    batch: Batch[Any] = Batch(stager.limits)
    lot = [FakeMsg(s) for s in (11, 13, 12, 14)]
    ready = asyncio.run(stager._in_order(lot, batch))  # type: ignore[arg-type]
    assert [11, 12, 13, 14] == _seqs(ready)
    assert {} == stager._held
    assert 15 == stager._next_seq


def test_a_message_already_staged_is_acked_and_one_in_the_open_batch_acked_with_it(
    tmp_path: Path,
) -> None:
    """Floor 10, next 13 (11 and 12 are in the open batch): a redelivered 9 is acked at once,
    a redelivered 12 joins the batch's extra acks; neither is handed out again."""
    stager = _stager(tmp_path, 10)
    stager._next_seq = 13
    batch: Batch[Any] = Batch(stager.limits)
    for seq in (11, 12):
        batch.add_skipped(FakeMsg(seq), seq, 100, "watermark")
    old, in_batch, new = FakeMsg(9), FakeMsg(12), FakeMsg(13)
    ready = asyncio.run(stager._in_order([old, in_batch, new], batch))  # type: ignore[list-item]
    assert [13] == _seqs(ready)
    assert old.acked
    assert not in_batch.acked
    assert [in_batch] == batch.extra_acks
