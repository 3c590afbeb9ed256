"""scan_stream counts distinct stream sequences, not deliveries."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from tidelake.bus.scan import scan_stream


class _Sub:
    """Delivers sequences 1, 2, 2, 3, 1, 4 (an ordered consumer reset redelivers)."""

    def __init__(self) -> None:
        self.order = [1, 2, 2, 3, 1, 4]
        self.unsubscribed = False

    async def next_msg(self, timeout: float) -> Any:
        seq = self.order.pop(0)
        meta = SimpleNamespace(sequence=SimpleNamespace(stream=seq))
        return SimpleNamespace(metadata=meta, data=f"m{seq}".encode())

    async def unsubscribe(self) -> None:
        self.unsubscribed = True


class _Js:
    def __init__(self) -> None:
        self.sub = _Sub()

    async def subscribe(self, subject: str, ordered_consumer: bool) -> _Sub:
        assert ordered_consumer
        return self.sub


def test_a_redelivered_message_does_not_push_the_last_one_out() -> None:
    js = _Js()
    msgs = asyncio.run(scan_stream(js, "cdc.>", 4))
    assert [b"m1", b"m2", b"m3", b"m4"] == [m.data for m in msgs]
    assert js.sub.unsubscribed
