"""One dead-letter publish (``bus/dlq.publish``, used by the stager and the ingest): a
transient failure is retried up to ``PUBLISH_ATTEMPTS`` times, a refusal is not, and the
last error is raised as it is (the stager's real DLQ path is in
tests/integration/stage/test_stager_dlq.py)."""

from __future__ import annotations

import asyncio

import nats.errors
import nats.js.errors
import pytest
from nats.js.api import PubAck

from tidelake.bus import dlq


class FakeJetStream:
    """Raises the next of ``errors`` on each publish, then stores the message."""

    def __init__(self, errors: list[BaseException]) -> None:
        self.errors = errors
        self.attempts = 0

    async def publish(
        self, subject: str, payload: bytes, headers: dict[str, str], stream: str
    ) -> PubAck:
        self.attempts += 1
        if self.errors:
            raise self.errors.pop(0)
        return PubAck(stream=stream, seq=7)


@pytest.fixture(autouse=True)
def fast_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    """Millisecond pauses keep the retries quick."""
    monkeypatch.setattr(dlq, "PUBLISH_FIRST_WAIT_S", 0.001)


def publish(js: FakeJetStream) -> PubAck:
    """Publish one dead letter on ``js``."""
    ack: PubAck = asyncio.run(dlq.publish(js, "dlq.cdc.t", b"{}", {}, stream="DLQ"))
    return ack


def test_transient_failures_are_retried() -> None:
    """A timeout and a 503 on publish are retried; the PubAck is returned."""
    js = FakeJetStream([nats.errors.TimeoutError(), nats.js.errors.NoStreamResponseError()])
    assert (7, 3) == (publish(js).seq, js.attempts)


def test_refusal_is_raised_at_once() -> None:
    """A 400 answer is raised at the first attempt."""
    js = FakeJetStream([nats.js.errors.BadRequestError(code=400)])
    with pytest.raises(nats.js.errors.BadRequestError):
        publish(js)
    assert 1 == js.attempts


def test_out_of_attempts_raises_the_last_error() -> None:
    """A stream that never answers: the last timeout after PUBLISH_ATTEMPTS attempts."""
    js = FakeJetStream([nats.errors.TimeoutError() for _ in range(dlq.PUBLISH_ATTEMPTS + 3)])
    with pytest.raises(nats.errors.TimeoutError):
        publish(js)
    assert dlq.PUBLISH_ATTEMPTS == js.attempts
