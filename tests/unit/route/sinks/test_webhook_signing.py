"""The webhook sink's signature scheme and idempotency key (route/sinks/webhook.py), without
a server: what a receiver verifies, and which batches share a key."""

from __future__ import annotations

import decimal
import hashlib
import hmac
from collections.abc import Callable

import httpx
import orjson
import pytest

from tidelake.config import WebhookSinkConfig
from tidelake.route.change import RowChange
from tidelake.route.sinks.webhook import (
    WebhookSink,
    encode_batch,
    idempotency_key,
    signature,
    verify_signature,
)

SECRET = "s3cret-key"
NOW = 1_718_000_000.0
#: Changes a signed request: (body, headers) -> (body, headers).
Tamper = Callable[[bytes, dict[str, str]], tuple[bytes, dict[str, str]]]


def _change(seq: int, key: int = 1, position: str | None = None) -> RowChange:
    return RowChange(
        table="shop.orders",
        kind="upsert",
        key={"id": key},
        row={"id": key, "amount": decimal.Decimal("12.50"), "blob": b"\x00\xff"},
        position=position or f"{seq:020d}",
        seq=seq,
        column_types={"amount": "decimal(10,2)"},
    )


def _signed_headers(body: bytes, at: float = NOW) -> dict[str, str]:
    timestamp = str(int(at))
    return {
        "Tidelake-Timestamp": timestamp,
        "Tidelake-Signature": signature(SECRET, timestamp, body),
    }


def test_signature_is_the_documented_hmac_of_timestamp_dot_body() -> None:
    """A receiver that follows the module docstring by hand gets the same hex."""
    body = b'{"changes":[]}'
    expected = hmac.new(SECRET.encode(), b"1718000000." + body, hashlib.sha256).hexdigest()
    assert "sha256=" + expected == signature(SECRET, "1718000000", body)


def test_signature_round_trip_with_any_header_case() -> None:
    body = encode_batch("hook", "id", [_change(1)])
    headers = _signed_headers(body)
    assert verify_signature(SECRET, headers, body, 300, now=NOW)
    lower = {k.lower(): v for k, v in headers.items()}
    assert verify_signature(SECRET, lower, body, None)


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(lambda b, h: (b + b" ", h), id="body"),
        pytest.param(lambda b, h: (b, {**h, "Tidelake-Timestamp": str(int(NOW) + 1)}), id="ts"),
        pytest.param(lambda b, h: (b, {"Tidelake-Timestamp": h["Tidelake-Timestamp"]}), id="none"),
        pytest.param(lambda b, h: (b, {**h, "Tidelake-Timestamp": "soon"}), id="bad-ts"),
        pytest.param(lambda b, h: (b, {**h, "Tidelake-Signature": "sha256=00"}), id="bad-sig"),
    ],
)
def test_a_tampered_request_fails(tamper: Tamper) -> None:
    body = encode_batch("hook", "id", [_change(1)])
    changed_body, changed_headers = tamper(body, _signed_headers(body))
    assert not verify_signature(SECRET, changed_headers, changed_body, None)


def test_another_key_fails_and_a_rotation_list_passes() -> None:
    body = b"{}"
    headers = _signed_headers(body)
    assert not verify_signature("other", headers, body, None)
    both = {
        **headers,
        "Tidelake-Signature": signature("old", "1", body) + ", " + headers["Tidelake-Signature"],
    }
    assert verify_signature(SECRET, both, body, None)


def test_a_timestamp_outside_the_tolerance_fails() -> None:
    body = b"{}"
    headers = _signed_headers(body, at=NOW - 301)
    assert not verify_signature(SECRET, headers, body, 300, now=NOW)
    assert verify_signature(SECRET, headers, body, 400, now=NOW)
    assert verify_signature(SECRET, headers, body, None, now=NOW)


def test_idempotency_key_is_stable_for_the_same_changes() -> None:
    """Equal changes built twice (a redelivery) name one batch; the key is SHA-256 hex."""
    first = idempotency_key("hook", [_change(1), _change(2, key=2)])
    again = idempotency_key("hook", [_change(1), _change(2, key=2)])
    assert first == again
    assert 64 == len(first)
    int(first, 16)


@pytest.mark.parametrize(
    "other",
    [
        pytest.param(("hook2", [_change(1), _change(2, key=2)]), id="route"),
        pytest.param(("hook", [_change(1)]), id="fewer"),
        pytest.param(("hook", [_change(1), _change(2, key=2), _change(3)]), id="more"),
        pytest.param(("hook", [_change(2, key=2), _change(1)]), id="order"),
        pytest.param(("hook", [_change(1), _change(3, key=2)]), id="seq"),
        pytest.param(("hook", [_change(1), _change(2, key=2, position="9")]), id="position"),
        pytest.param(("hook", [_change(1), _change(2, key=3)]), id="key"),
    ],
)
def test_idempotency_key_differs_for_other_changes(
    other: tuple[str, list[RowChange]],
) -> None:
    assert idempotency_key("hook", [_change(1), _change(2, key=2)]) != idempotency_key(*other)


def test_body_holds_exact_decimals_hex_bytes_and_the_batch_id() -> None:
    document = orjson.loads(encode_batch("hook", "abc", [_change(7, key=7)]))
    assert {"route": "hook", "batch_id": "abc"} == {k: document[k] for k in ("route", "batch_id")}
    [change] = document["changes"]
    assert {
        "table": "shop.orders",
        "op": "upsert",
        "key": {"id": 7},
        "row": {"id": 7, "amount": "12.50", "blob": "0x00ff"},
        "position": f"{7:020d}",
        "seq": 7,
        "commit_ts_ms": None,
        "column_types": {"amount": "decimal(10,2)"},
    } == change


def test_configured_headers_never_replace_the_protocol_headers() -> None:
    """An extra header of the same name as a signed one (any case) is dropped; others go."""
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(204)

    config = WebhookSinkConfig.model_validate(
        {
            "kind": "webhook",
            "url": "http://hooks.invalid/in",
            "signing_key": SECRET,
            "headers": {"tidelake-signature": "forged", "X-Team": "data", "Content-Type": "x"},
        }
    )
    sink = WebhookSink("hook", config, clock=lambda: NOW, transport=httpx.MockTransport(answer))
    try:
        sink.apply([_change(1)])
    finally:
        sink.close()
    [request] = seen
    assert "data" == request.headers["x-team"]
    assert "application/json" == request.headers["content-type"]
    assert verify_signature(SECRET, dict(request.headers), request.content, 300, now=NOW)


def test_retry_after_as_an_http_date_is_honoured_and_capped() -> None:
    answers = iter(
        [
            httpx.Response(503, headers={"Retry-After": "Mon, 10 Jun 2024 06:13:22 GMT"}),
            httpx.Response(200),
        ]
    )
    sleeps: list[float] = []
    config = WebhookSinkConfig(kind="webhook", url="http://hooks.invalid/in", max_backoff_s=30.0)
    # NOW is 06:13:20 GMT that day: the date is 2 s ahead of the clock.
    sink = WebhookSink(
        "hook",
        config,
        sleep=sleeps.append,
        clock=lambda: NOW,
        transport=httpx.MockTransport(lambda _: next(answers)),
    )
    sink.apply([_change(1)])
    sink.close()
    assert [2.0] == sleeps


def test_an_empty_batch_posts_nothing() -> None:
    def answer(_: httpx.Request) -> httpx.Response:
        raise AssertionError("no request expected")

    config = WebhookSinkConfig(kind="webhook", url="http://hooks.invalid/in")
    sink = WebhookSink("hook", config, transport=httpx.MockTransport(answer))
    sink.apply([])
    sink.close()
