"""decode() tells the formats apart per message and refuses what is none of them."""

from __future__ import annotations

import orjson
import pytest

from tidelake.errors import DecodeError
from tidelake.formats import decode

CANAL = {
    "database": "shop",
    "table": "t",
    "pkNames": ["id"],
    "isDdl": False,
    "type": "INSERT",
    "data": [{"id": "1"}],
}
ENVELOPE = {
    "before": None,
    "after": {"id": 1},
    "source": {"connector": "mysql", "db": "shop", "table": "t"},
    "op": "c",
}
FLAT = {"id": 1, "__deleted": "false", "__db": "shop", "__table": "t"}


@pytest.mark.parametrize(
    ("message", "fmt"),
    [
        (CANAL, "canal-json"),
        ({k: v for k, v in CANAL.items() if k not in ("isDdl", "pkNames")} | {"pkNames": ["id"]},
         "canal-json"),
        (ENVELOPE, "debezium"),
        ({"schema": {"type": "struct"}, "payload": ENVELOPE}, "debezium"),
        ({"payload": ENVELOPE}, "debezium"),
        (FLAT, "debezium-flat"),
        ({"schema": None, "payload": FLAT}, "debezium-flat"),
        ({"id": 1, "__op": "c", "__db": "shop", "__table": "t"}, "debezium-flat"),
    ],
)  # fmt: skip
def test_format_is_detected_per_message(message: dict[str, object], fmt: str) -> None:
    """Each shape decodes with its own decoder, named in Decoded.format."""
    decoded = decode(orjson.dumps(message), seq=1, key_json=b'{"id": 1}')
    expected = (fmt, 1)
    actual = (decoded.format, len(decoded.events))
    assert expected == actual


def test_formats_mix_in_one_stream() -> None:
    """Consecutive messages of different formats each decode, with their own sequence."""
    messages = [CANAL, ENVELOPE, FLAT]
    decoded = [
        decode(orjson.dumps(m), seq=i, key_json=b'{"id": 1}') for i, m in enumerate(messages, 10)
    ]
    expected = [("canal-json", 10), ("debezium", 11), ("debezium-flat", 12)]
    actual = [(d.format, d.events[0].seq) for d in decoded]
    assert expected == actual


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"", "empty message"),
        (b"\xff\xfe{}", "invalid UTF-8 at byte 0"),
        (b'{"a": "\xc3"}', "invalid UTF-8 at byte 7"),
        (b'{"database": "shop", "ta', "not JSON: unexpected end of data"),
        (b"[1, 2]", "not a JSON object: list"),
        (b"42", "not a JSON object: int"),
        (b'{"hello": "world"}', "unknown format: an object with fields hello"),
        (b'{"payload": {"x": 1}}', "unknown format: a payload wrapper"),
        (b'{"payload": [1]}', "debezium: payload must be an object, got list"),
        (b'{"schema": 1, "payload": {}}', "debezium: schema must be an object, got int"),
    ],
)
def test_undecodable_bytes_raise_decode_error_with_reason(payload: bytes, reason: str) -> None:
    """Bytes that are not a message of a known format raise DecodeError naming the cause."""
    with pytest.raises(DecodeError) as info:
        decode(payload, seq=1)
    expected = True
    actual = info.value.reason.startswith(reason)
    assert expected == actual, info.value.reason
