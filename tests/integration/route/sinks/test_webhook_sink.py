"""The webhook sink against a real HTTP server on 127.0.0.1 (route/sinks/webhook.py).

The server (stdlib ``ThreadingHTTPServer`` in a thread) records every request and answers
from a script: 2xx, 503 or 429 with ``Retry-After``, 400, or hanging past the sink's timeout.
"""

from __future__ import annotations

import decimal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
import pytest

from tidelake.config import WebhookSinkConfig
from tidelake.route.change import ChangesRejected, RowChange
from tidelake.route.sinks.webhook import WebhookSink, idempotency_key, verify_signature

pytestmark = pytest.mark.integration

SECRET = "hook-signing-key"


@dataclass(frozen=True)
class Answer:
    """One scripted answer: a status (with headers and body), or ``hang_s`` of silence."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    hang_s: float = 0.0


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


class Hook:
    """The scripted receiver: ``script`` answers the next requests in turn, then 200."""

    def __init__(self) -> None:
        self.script: list[Answer] = []
        self.received: list[Received] = []
        self.release = threading.Event()
        self._lock = threading.Lock()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with hook._lock:
                    hook.received.append(Received(self.path, dict(self.headers.items()), body))
                    answer = hook.script.pop(0) if hook.script else Answer()
                if answer.hang_s:
                    hook.release.wait(answer.hang_s)
                try:
                    self.send_response(answer.status)
                    for name, value in answer.headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(answer.body)))
                    self.end_headers()
                    self.wfile.write(answer.body)
                except OSError:
                    pass  # the client gave up waiting (the timeout case)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/in"
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(5)


@pytest.fixture
def hook() -> Iterator[Hook]:
    server = Hook()
    try:
        yield server
    finally:
        server.close()


@dataclass
class Sleeps:
    """The sink's sleep: records each wait, and sleeps it unless ``real`` is False."""

    real: bool = True
    waits: list[float] = field(default_factory=list)

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        if self.real:
            time.sleep(seconds)


def _config(url: str, **overrides: Any) -> WebhookSinkConfig:
    values: dict[str, Any] = {
        "kind": "webhook",
        "url": url,
        "signing_key": SECRET,
        "timeout_s": 0.5,
        "max_tries": 3,
        "backoff_s": 0.01,
        "max_backoff_s": 0.05,
        "headers": {"X-Team": "data"},
    }
    return WebhookSinkConfig.model_validate(values | overrides)


def _changes() -> list[RowChange]:
    return [
        RowChange(
            table="shop.orders",
            kind="upsert",
            key={"id": 1},
            row={"id": 1, "amount": decimal.Decimal("9.90"), "status": "paid"},
            position="00000000000000000100.00000000000000000000",
            seq=41,
            column_types={"amount": "decimal(10,2)"},
            commit_ts_ms=1_718_000_000_000,
        ),
        RowChange(
            table="shop.orders",
            kind="delete",
            key={"id": 2},
            row=None,
            position="00000000000000000100.00000000000000000001",
            seq=42,
        ),
    ]


def _sink(hook: Hook, sleeps: Sleeps, **overrides: Any) -> WebhookSink:
    return WebhookSink("orders-hook", _config(hook.url, **overrides), sleep=sleeps)


def test_a_batch_is_one_signed_json_post(hook: Hook) -> None:
    sleeps = Sleeps()
    sink = _sink(hook, sleeps)
    try:
        sink.apply(_changes())
    finally:
        sink.close()
    [request] = hook.received
    assert "/hooks/in" == request.path
    headers = {k.lower(): v for k, v in request.headers.items()}
    key = idempotency_key("orders-hook", _changes())
    assert {
        "content-type": "application/json",
        "idempotency-key": key,
        "tidelake-route": "orders-hook",
        "x-team": "data",
    }.items() <= headers.items()
    assert verify_signature(SECRET, request.headers, request.body, 60)
    assert not verify_signature("another-key", request.headers, request.body, 60)
    assert {
        "route": "orders-hook",
        "batch_id": key,
        "changes": [
            {
                "table": "shop.orders",
                "op": "upsert",
                "key": {"id": 1},
                "row": {"id": 1, "amount": "9.90", "status": "paid"},
                "position": "00000000000000000100.00000000000000000000",
                "seq": 41,
                "commit_ts_ms": 1_718_000_000_000,
                "column_types": {"amount": "decimal(10,2)"},
            },
            {
                "table": "shop.orders",
                "op": "delete",
                "key": {"id": 2},
                "row": None,
                "position": "00000000000000000100.00000000000000000001",
                "seq": 42,
                "commit_ts_ms": None,
                "column_types": {},
            },
        ],
    } == orjson.loads(request.body)
    assert [] == sleeps.waits


def test_503s_are_retried_with_the_same_idempotency_key_and_body(hook: Hook) -> None:
    """Two 503s, then 200: three tries, two back-off waits within ``max_backoff_s``, one key
    and one body on every try, each try validly signed."""
    hook.script = [Answer(503, body=b"busy"), Answer(503, body=b"busy")]
    sleeps = Sleeps()
    sink = _sink(hook, sleeps)
    try:
        sink.apply(_changes())
    finally:
        sink.close()
    assert 3 == len(hook.received)
    assert {idempotency_key("orders-hook", _changes())} == {
        r.headers["Idempotency-Key"] for r in hook.received
    }
    assert 1 == len({r.body for r in hook.received})
    assert all(verify_signature(SECRET, r.headers, r.body, 60) for r in hook.received)
    assert 2 == len(sleeps.waits)
    assert all(0 < w <= 0.05 for w in sleeps.waits)


def test_429_waits_as_long_as_retry_after_says_within_max_backoff(hook: Hook) -> None:
    hook.script = [
        Answer(429, headers={"Retry-After": "2"}),
        Answer(429, headers={"Retry-After": "3600"}),
    ]
    sleeps = Sleeps(real=False)
    sink = _sink(hook, sleeps, max_backoff_s=30.0)
    try:
        sink.apply(_changes())
    finally:
        sink.close()
    assert 3 == len(hook.received)
    assert [2.0, 30.0] == sleeps.waits


def test_400_is_rejected_after_one_try(hook: Hook) -> None:
    hook.script = [Answer(400, body=b'{"error": "unknown table shop.orders"}')]
    sleeps = Sleeps()
    sink = _sink(hook, sleeps, max_tries=5)
    try:
        with pytest.raises(ChangesRejected) as caught:
            sink.apply(_changes())
    finally:
        sink.close()
    assert 1 == len(hook.received)
    assert [] == sleeps.waits
    assert (41, 42) == caught.value.seqs
    assert "400" in caught.value.reason
    assert "unknown table shop.orders" in caught.value.reason


def test_5xx_every_time_is_rejected_after_max_tries(hook: Hook) -> None:
    hook.script = [Answer(500, body=b"boom " * 100) for _ in range(10)]
    sleeps = Sleeps()
    sink = _sink(hook, sleeps, max_tries=4)
    try:
        with pytest.raises(ChangesRejected) as caught:
            sink.apply(_changes())
    finally:
        sink.close()
    assert 4 == len(hook.received)
    assert 3 == len(sleeps.waits)
    assert (41, 42) == caught.value.seqs
    assert "4 tries" in caught.value.reason
    assert "HTTP 500: boom" in caught.value.reason
    assert len(caught.value.reason) < 300  # the body is quoted, not copied whole


def test_a_hanging_receiver_is_a_failed_try(hook: Hook) -> None:
    """A try that outlives ``timeout_s`` counts as failed and is retried; the next answers."""
    hook.script = [Answer(hang_s=5.0)]
    sleeps = Sleeps()
    sink = _sink(hook, sleeps, timeout_s=0.3)
    started = time.monotonic()
    try:
        sink.apply(_changes())
    finally:
        sink.close()
    assert time.monotonic() - started < 3.0
    assert 2 == len(hook.received)
    assert 1 == len(sleeps.waits)


def test_hanging_every_time_is_rejected_after_max_tries(hook: Hook) -> None:
    hook.script = [Answer(hang_s=5.0) for _ in range(2)]
    sleeps = Sleeps()
    sink = _sink(hook, sleeps, timeout_s=0.3, max_tries=2)
    try:
        with pytest.raises(ChangesRejected) as caught:
            sink.apply(_changes())
    finally:
        sink.close()
    assert 2 == len(hook.received)
    assert "Timeout" in caught.value.reason


def test_a_refused_connection_is_retried_then_rejected() -> None:
    """Nobody listening: every try fails to connect, the batch is rejected after max_tries."""
    closed = Hook()
    url = closed.url
    closed.close()
    sleeps = Sleeps()
    sink = WebhookSink("orders-hook", _config(url, max_tries=2), sleep=sleeps)
    try:
        with pytest.raises(ChangesRejected) as caught:
            sink.apply(_changes())
    finally:
        sink.close()
    assert 1 == len(sleeps.waits)
    assert "ConnectError" in caught.value.reason
