"""Issue 23, deliver 6: hostile input over the whole decoder surface (``formats.decode``:
canal-json, the Debezium envelope, flattened Debezium).

The property, for every message: it decodes to events, or to nothing with a ``skipped``
reason, or raises :class:`DecodeError` with a non-empty reason — never another exception and
never a silent drop (no events and no reason). test_hostile_input.py covers random bytes and
random objects; this file widens it to any JSON value at any depth of a real message, hostile
JSON text (NaN, Infinity, 1e400, BOM, duplicate keys, invalid UTF-8), 10,000 columns, type
flips of a column across events and out-of-range position fields.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from golden import load_cases
from support.json_paths import json_paths, replaced
from tidelake.errors import DecodeError
from tidelake.formats import decode

CASES = load_cases()
MESSAGES = [(m, k) for case in CASES for m, k in zip(case.messages, case.keys, strict=True)]

#: JSON scalars at their edges: 64-bit limits, the largest and smallest doubles, control
#: characters, a path-like and a very long string.
EDGE_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.sampled_from([0, -1, 2**63 - 1, 2**63, 2**64 - 1, -(2**63), 10**15, 10**19])
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([1.7976931348623157e308, -1.7976931348623157e308, 5e-324, -0.0])
    | st.text(max_size=30)
    | st.sampled_from(["", "\x00", "../../x", "a.b", "NaN", "Infinity", "1e400", "x" * 5000])
    # Digits past Python's int_max_str_digits (4,300): int() of them raises ValueError.
    | st.sampled_from(["9" * 5000, "a.9" + "9" * 5000, '["1", "' + "9" * 5000 + '"]'])
)
ANY_JSON = st.recursive(
    EDGE_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=20,
)


def outcome(payload: bytes, key: bytes | None = None) -> str:
    """ "events", "skipped", "dead-letter" — or "silent drop" / "no reason" when the contract
    breaks; any other exception propagates and fails the test."""
    try:
        result = decode(payload, seq=7, key_json=key)
    except DecodeError as exc:
        return "dead-letter" if isinstance(exc.reason, str) and exc.reason.strip() else "no reason"
    if result.events:
        return "events"
    return "skipped" if result.skipped else "silent drop"


ACCEPTED = {"events", "skipped", "dead-letter"}


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_any_json_value_at_any_depth_of_a_real_message(data: st.DataObject) -> None:
    """Any field of any golden message (canal-json, envelope, flattened; nested fields such
    as source.pos, schema.fields[i].parameters or data[0].id included) replaced by any JSON
    value: decoded, skipped with a reason, or dead-lettered with a reason."""
    message, key = data.draw(st.sampled_from(MESSAGES))
    parsed = orjson.loads(message)
    path = data.draw(st.sampled_from(list(json_paths(parsed))))
    mutated = replaced(parsed, path, data.draw(ANY_JSON))
    assert outcome(orjson.dumps(mutated), key) in ACCEPTED


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_any_json_value_in_the_message_key(data: st.DataObject) -> None:
    """The Debezium message key (Tidelake-Key header) is input too: any JSON value, or any
    bytes, in place of a real key."""
    message, _ = data.draw(st.sampled_from(MESSAGES))
    key = data.draw(st.binary(max_size=40) | ANY_JSON.map(orjson.dumps))
    assert outcome(message, key) in ACCEPTED


#: Text a JSON value can be replaced by that orjson.dumps never writes: non-finite numbers,
#: out-of-range numbers, a BOM, invalid UTF-8, lone surrogates, bare control characters.
HOSTILE_TOKENS = [
    b"NaN", b"-NaN", b"Infinity", b"-Infinity", b"1e400", b"-1e400", b"1" + b"0" * 400,
    b"18446744073709551616", b"-9223372036854775809", b"\xef\xbb\xbf1", b'"\xff\xfe"',
    b'"\\ud800"', b'"\x00"', b'"\x1f"', b"01", b"1.", b".5", b"+1", b"0x10", b"undefined",
    b"[" * 2000 + b"]" * 2000, b'{"a":' * 2000 + b"1" + b"}" * 2000,
]  # fmt: skip


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_hostile_json_text_in_any_value_of_a_real_message(data: st.DataObject) -> None:
    """One value of a golden message written as hostile JSON text (NaN, Infinity, 1e400, a
    400-digit integer, a BOM, invalid UTF-8, a lone surrogate, a raw NUL, 2,000 levels):
    dead-lettered with a reason or decoded, never a crash."""
    message, key = data.draw(st.sampled_from(MESSAGES))
    parsed = orjson.loads(message)
    path = data.draw(st.sampled_from([p for p in json_paths(parsed) if p]))
    marker = "\u2063tidelake-hostile\u2063"
    token = data.draw(st.sampled_from(HOSTILE_TOKENS))
    text = orjson.dumps(replaced(parsed, path, marker))
    payload = text.replace(orjson.dumps(marker), token, 1)
    assert outcome(payload, key) in ACCEPTED


CANAL = {
    "id": 0, "database": "shop", "table": "t", "pkNames": ["id"], "isDdl": False,
    "type": "INSERT", "es": 1_700_000_000_000, "ts": 1_700_000_000_001, "sql": "",
    "sqlType": {"id": -5, "v": 12}, "mysqlType": {"id": "bigint", "v": "varchar(64)"},
    "data": [{"id": "1", "v": "a"}], "old": None, "_tidb": {"commitTs": 445_000_000_000_000_000},
}  # fmt: skip
ENVELOPE = {
    "before": None,
    "after": {"id": 1, "v": "a"},
    "source": {
        "connector": "mysql", "db": "shop", "table": "t", "file": "binlog.000003", "pos": 4_000,
        "row": 0, "ts_ms": 1_700_000_000_000, "snapshot": "false",
    },
    "op": "c",
    "ts_ms": 1_700_000_000_001,
}  # fmt: skip
ENVELOPE_KEY = orjson.dumps({"id": 1})


def _canal_text(**fields: Any) -> bytes:
    return orjson.dumps({**CANAL, **fields})


def _canal_with(old: bytes, new: bytes) -> bytes:
    """The plain canal-json row with one piece of its text replaced."""
    text = _canal_text()
    assert old in text
    return text.replace(old, new)


COMMIT_TS = b"445000000000000000"
ES = b'"es":1700000000000'


RAW_CASES: dict[str, tuple[bytes, str]] = {
    "empty body": (b"", "dead-letter"),
    "whitespace only": (b" \n\t", "dead-letter"),
    "BOM then a valid message": (b"\xef\xbb\xbf" + _canal_text(), "dead-letter"),
    "NaN": (_canal_with(ES, b'"es":NaN'), "dead-letter"),
    "Infinity": (_canal_with(ES, b'"es":Infinity'), "dead-letter"),
    "1e400 in a value": (_canal_with(b'"id":"1"', b'"id":1e400'), "dead-letter"),
    "invalid UTF-8 in a value": (_canal_with(b'"v":"a"', b'"v":"\xc3\x28"'), "dead-letter"),
    "lone surrogate in a value": (_canal_with(b'"v":"a"', b'"v":"\\udc80"'), "dead-letter"),
    "100,000 levels of nesting": (b"[" * 100_000 + b"]" * 100_000, "dead-letter"),
    "a JSON array": (b"[1, 2]", "dead-letter"),
    "a JSON string": (b'"INSERT"', "dead-letter"),
    "JSON null (a tombstone)": (b"null", "skipped"),
    "commitTs of 2^64": (_canal_with(COMMIT_TS, b"18446744073709551616"), "dead-letter"),
    "commitTs of 10^30": (_canal_with(COMMIT_TS, b"1" + b"0" * 30), "dead-letter"),
    "commitTs negative": (_canal_text(_tidb={"commitTs": -1}), "dead-letter"),
    "commitTs a float": (_canal_text(_tidb={"commitTs": 1.5}), "dead-letter"),
    "commitTs a string": (_canal_text(_tidb={"commitTs": "1"}), "dead-letter"),
    "es of 1e400": (_canal_with(ES, b'"es":1e400'), "dead-letter"),
    "binlog pos of 2^64": (
        orjson.dumps(ENVELOPE).replace(b'"pos":4000', b'"pos":18446744073709551616'),
        "dead-letter",
    ),
    "binlog file number of 5,000 digits": (
        orjson.dumps({**ENVELOPE, "source": {**ENVELOPE["source"], "file": "b." + "9" * 5000}}),  # type: ignore[dict-item]
        "dead-letter",
    ),
    "PostgreSQL LSN of 5,000 digits": (
        orjson.dumps(
            {
                **ENVELOPE,
                "source": {"connector": "postgresql", "db": "shop", "schema": "public",
                           "table": "t", "sequence": orjson.dumps(["1", "9" * 5000]).decode(),
                           "lsn": 5, "ts_ms": 1, "snapshot": "false"},
            }
        ),
        "dead-letter",
    ),
    "binlog pos negative": (
        orjson.dumps({**ENVELOPE, "source": {**ENVELOPE["source"], "pos": -4}}),  # type: ignore[dict-item]
        "dead-letter",
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(RAW_CASES))
def test_each_hostile_text_has_its_outcome(name: str) -> None:
    """The hostile texts of the probe list, one by one, with the outcome each must have."""
    payload, expected = RAW_CASES[name]
    key = ENVELOPE_KEY if b'"op":"c"' in payload else None
    assert expected == outcome(payload, key)


def test_a_dead_letter_reason_says_what_was_wrong() -> None:
    """The reason a hostile message carries names its fault (it ends in the DLQ header)."""
    reasons = {}
    for name in ("empty body", "BOM then a valid message", "NaN", "invalid UTF-8 in a value"):
        with pytest.raises(DecodeError) as caught:
            decode(RAW_CASES[name][0], seq=1)
        reasons[name] = caught.value.reason
    expected = {
        "empty body": True,
        "BOM then a valid message": True,
        "NaN": True,
        "invalid UTF-8 in a value": True,
    }
    words = {
        "empty body": "empty",
        "BOM then a valid message": "BOM",
        "NaN": "not JSON",
        "invalid UTF-8 in a value": "UTF-8",
    }
    assert expected == {name: words[name] in reason for name, reason in reasons.items()}


def test_duplicate_keys_take_the_last_value() -> None:
    """Documented rule for a key written twice in one object (no producer writes that): the
    last value wins, as in JSON.parse, Go and Jackson's defaults — one deterministic reading,
    the same on every redelivery, staged exactly."""
    text = _canal_text().replace(b'"v":"a"', b'"v":"first","v":"last"')
    text = text.replace(b'"table":"t"', b'"table":"ignored","table":"t"')
    [event] = decode(text, seq=1).events
    assert ("shop.t", "last") == (event.table_id, event.row["v"] if event.row else None)


def test_ten_thousand_columns_decode_whole() -> None:
    """A row of 10,000 columns (canal-json and Debezium): one event holding every column
    with its exact value."""
    columns = {f"c{i}": str(i * 7) for i in range(10_000)}
    canal = _canal_text(
        mysqlType={"id": "bigint", **dict.fromkeys(columns, "varchar(16)")},
        sqlType=None,
        data=[{"id": "1", **columns}],
    )
    [from_canal] = decode(canal, seq=1).events
    envelope = orjson.dumps({**ENVELOPE, "after": {"id": 1, **columns}})
    [from_debezium] = decode(envelope, seq=2, key_json=ENVELOPE_KEY).events
    expected = {"id": "1", **columns}
    assert [expected, expected] == [
        {k: str(v) for k, v in (e.row or {}).items()} for e in (from_canal, from_debezium)
    ]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ANY_JSON, min_size=2, max_size=6))
def test_a_column_whose_type_flips_across_events(values: list[Any]) -> None:
    """One column taking a different JSON type in each event of a table (schema-less
    Debezium, canal-json): every event decodes with its own exact text or is dead-lettered
    alone; the decoder keeps no state that one event could poison for the next."""
    outcomes = []
    for i, value in enumerate(values):
        after = {"id": i, "v": value}
        envelope = orjson.dumps({**ENVELOPE, "after": after})
        outcomes.append(outcome(envelope, orjson.dumps({"id": i})))
        canal_value = value if value is None or isinstance(value, str) else orjson.dumps(value)
        canal = orjson.dumps({**CANAL, "data": [{"id": str(i), "v": canal_value}]}, default=str)
        outcomes.append(outcome(canal))
    assert set(outcomes) <= ACCEPTED
    # Whatever came before, a plain row still decodes: nothing leaked between messages.
    assert "events" == outcome(_canal_text())
