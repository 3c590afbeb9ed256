"""The ordered publisher's recovery (``Publisher._recover``) retries through
``tidelake.retry``: a transient or unknown failure is retried until ``give_up_s``, a
terminal refusal ends it at once, and both end in a :class:`BusError` raised from the last
error (the real end-to-end behaviour under server kills is in
tests/integration/bus/test_publisher_survives_server_kills.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

import nats.errors
import nats.js.errors
import pytest
from nats.js.api import PubAck

from tidelake.capture import publisher as publisher_module
from tidelake.capture.publisher import Acked, Publisher
from tidelake.errors import BusError, classify


class FakeJetStream:
    """Every pipelined send fails (a closed connection); each synchronous send raises the
    next of ``errors``, then stores the message."""

    def __init__(self, errors: list[BaseException]) -> None:
        self.errors = errors
        self.stored: list[str] = []
        self.attempts = 0

    async def publish_async(self, subject: str, payload: bytes, headers: dict[str, str]) -> Any:
        raise nats.errors.ConnectionClosedError

    async def publish(
        self, subject: str, payload: bytes, headers: dict[str, str], timeout: float
    ) -> PubAck:
        self.attempts += 1
        if self.errors:
            raise self.errors.pop(0)
        self.stored.append(subject)
        return PubAck(stream="CDC", seq=len(self.stored), duplicate=False)


@pytest.fixture(autouse=True)
def fast_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    """Millisecond pauses keep the retries quick."""
    monkeypatch.setattr(publisher_module, "FIRST_RETRY_PAUSE_S", 0.001)
    monkeypatch.setattr(publisher_module, "MAX_RETRY_PAUSE_S", 0.002)


def publish_one(js: FakeJetStream, give_up_s: float = 5.0) -> list[Acked]:
    """Publish one message on ``js`` and wait until it is durable; the acks reported."""
    acked: list[Acked] = []

    async def run() -> None:
        pub = Publisher(js, on_acked=acked.append, give_up_s=give_up_s)
        await pub.publish("cdc.db.t", b"{}", "id-1")
        await pub.durable()

    asyncio.run(run())
    return acked


def test_transient_and_unknown_failures_are_retried_in_order() -> None:
    """A timeout, a 503 and an error nobody classified are all retried; the message is
    stored once and reported."""
    js = FakeJetStream(
        [nats.errors.TimeoutError(), nats.js.errors.NoStreamResponseError(), RuntimeError("?")]
    )
    acked = publish_one(js)
    assert (["cdc.db.t"], 4, [1]) == (js.stored, js.attempts, [a.seq for a in acked])


def test_terminal_refusal_ends_at_once() -> None:
    """A refusal (400) is not retried: BusError from it, classified terminal."""
    js = FakeJetStream([nats.js.errors.BadRequestError(code=400), nats.errors.TimeoutError()])
    with pytest.raises(BusError, match="refused") as raised:
        publish_one(js)
    assert (1, "terminal") == (js.attempts, classify(raised.value))


def test_gives_up_after_give_up_s() -> None:
    """A server that never comes back: BusError after give_up_s, still transient."""
    js = FakeJetStream([nats.errors.TimeoutError() for _ in range(100_000)])
    with pytest.raises(BusError, match="cannot publish") as raised:
        publish_one(js, give_up_s=0.05)
    assert (True, "transient") == (js.attempts > 1, classify(raised.value))
