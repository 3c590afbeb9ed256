"""The stager's in-order hold after a nats-server kill -9 (found by `make chaos`).

After the restart the consumer's ack floor lagged behind messages that had been staged and
acked: the stager waited for a redelivery of the "gap" that could never come, holding every
newer message, and nothing landed any more. A gap that is pending nowhere (every message
awaiting an ack is one the stager holds, none undelivered) was acked: it is skipped.
"""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

from tidelake.config import load_config
from tidelake.runtime.storage import LocalStorage
from tidelake.stage.consumer import Stager


class FakeJs:
    """Answers the two JetStream calls the gap check makes."""

    def __init__(self, ack_floor: int, num_pending: int, num_ack_pending: int) -> None:
        self.info = SimpleNamespace(
            ack_floor=SimpleNamespace(stream_seq=ack_floor),
            num_pending=num_pending,
            num_ack_pending=num_ack_pending,
        )

    async def get_msg(self, stream: str, **kwargs: Any) -> Any:
        return SimpleNamespace(seq=kwargs["seq"])  # the gap message is in the stream

    async def consumer_info(self, stream: str, durable: str) -> Any:
        return self.info


def _delivery(seq: int) -> Any:
    """A held message: only its ack subject (stream and consumer sequence) is read."""
    return SimpleNamespace(reply=f"$JS.ACK.TIDELAKE_CDC.tidelake-stager.1.{seq}.{seq}.1.0")


def _stager(tmp_path: Any, js: FakeJs) -> Stager:
    cfg = load_config(None, environ={"TIDELAKE_HOME": str(tmp_path)})
    nc = SimpleNamespace(jetstream=lambda: js)
    stager = Stager(nc, cfg.bus, cfg.stage, LocalStorage(str(tmp_path / "staging")))  # type: ignore[arg-type]
    stager._flushed_floor = 1613
    stager._next_seq = 1614
    stager._held = {seq: _delivery(seq) for seq in (3278, 3279)}
    stager._gap_checked_at = 0.0
    stager._held_touched_at = time.monotonic()
    return stager


def test_a_gap_pending_nowhere_is_skipped_as_already_staged(tmp_path: Any) -> None:
    """Ack floor 1613, nothing undelivered, the 2 ack-pending messages are the 2 held: the
    stager moves on to 3278 and both held messages become ready, in order."""
    stager = _stager(tmp_path, FakeJs(ack_floor=1613, num_pending=0, num_ack_pending=2))
    asyncio.run(stager._mind_gap())
    assert 3278 == stager._next_seq
    assert 3277 == stager._flushed_floor
    assert 2 == len(stager._take_ready())
    assert 3280 == stager._next_seq


def test_a_gap_still_pending_elsewhere_or_undelivered_is_waited_for(tmp_path: Any) -> None:
    """One more message awaits an ack than the stager holds (a dead predecessor's), or one
    is undelivered: the gap may still come, so the stager keeps waiting for 1614."""
    for js in (
        FakeJs(ack_floor=1613, num_pending=0, num_ack_pending=3),
        FakeJs(ack_floor=1613, num_pending=1, num_ack_pending=2),
    ):
        stager = _stager(tmp_path, js)
        asyncio.run(stager._mind_gap())
        assert 1614 == stager._next_seq
        assert [] == stager._take_ready()
