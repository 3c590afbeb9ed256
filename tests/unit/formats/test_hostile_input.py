"""Whatever arrives, decode() returns a Decoded or raises DecodeError: nothing else escapes.

That is what routes a malformed message to the dead-letter stream instead of crashing the
stager (docs/architecture.md §4).
"""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidelake.errors import DecodeError
from tidelake.formats import Decoded, decode

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
JSON = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=5)
    ),
    max_leaves=25,
)
#: Field names the decoders look at, so random objects reach deep into each decoder.
NAMES = st.sampled_from(
    [
        "database", "table", "pkNames", "isDdl", "type", "es", "ts", "sql", "mysqlType", "data",
        "old", "_tidb", "commitTs", "watermarkTs", "_tidelake", "position", "source",
        "commit_ts_ms", "payload", "schema", "before", "after", "op", "ts_ms", "connector", "db",
        "file", "pos", "row", "lsn", "sequence", "fields", "field", "name", "parameters", "scale",
        "__deleted", "__op", "__db", "__table", "__lsn", "__source_ts_ms", "__file", "__pos",
        "__schema", "id", "INSERT", "UPDATE", "DELETE", "ALTER", "TIDB_WATERMARK", "c", "u",
        "d", "r", "t", "mysql", "postgresql", "org.apache.kafka.connect.data.Decimal",
        "io.debezium.time.Timestamp", "io.debezium.time.ZonedTimestamp", "io.debezium.time.Date",
        "bytes",
    ]
)  # fmt: skip
KNOWN = st.recursive(
    SCALARS | NAMES,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(NAMES, inner, max_size=8),
    max_leaves=25,
)


def _decode_or_error(payload: bytes, key: bytes | None = None) -> str:
    """ "ok" or "decode-error"; any other exception propagates and fails the test."""
    try:
        result = decode(payload, seq=1, key_json=key)
    except DecodeError as exc:
        return "decode-error" if isinstance(exc.reason, str) and exc.reason else "no reason"
    assert isinstance(result, Decoded)
    return "ok"


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_arbitrary_bytes_only_raise_decode_error(payload: bytes) -> None:
    """Random bytes decode or raise DecodeError."""
    expected = True
    actual = _decode_or_error(payload) in ("ok", "decode-error")
    assert expected == actual


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(JSON, st.one_of(st.none(), JSON))
def test_arbitrary_json_only_raises_decode_error(message: Any, key: Any) -> None:
    """Random JSON values (and keys) decode or raise DecodeError."""
    key_bytes = None if key is None else orjson.dumps(key)
    expected = True
    actual = _decode_or_error(orjson.dumps(message), key_bytes) in ("ok", "decode-error")
    assert expected == actual


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(NAMES, KNOWN, max_size=12), st.one_of(st.none(), KNOWN))
def test_objects_with_format_field_names_only_raise_decode_error(message: Any, key: Any) -> None:
    """Objects built from the fields the decoders read decode or raise DecodeError."""
    key_bytes = None if key is None else orjson.dumps(key)
    expected = True
    actual = _decode_or_error(orjson.dumps(message), key_bytes) in ("ok", "decode-error")
    assert expected == actual


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_golden_messages_only_raise_decode_error(data: st.DataObject) -> None:
    """Real messages with one field replaced by a random value decode or raise DecodeError."""
    from golden import load_cases

    case = data.draw(st.sampled_from(load_cases()))
    index = data.draw(st.integers(0, len(case.messages) - 1))
    message = orjson.loads(case.messages[index])
    target = message.get("payload") if isinstance(message.get("payload"), dict) else message
    name = data.draw(st.sampled_from(sorted(target)))
    target[name] = data.draw(KNOWN)
    expected = True
    actual = _decode_or_error(orjson.dumps(message), case.keys[index]) in ("ok", "decode-error")
    assert expected == actual
