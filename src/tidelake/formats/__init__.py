"""Wire formats: each decodes one message into ChangeEvents (``canal_json``, ``debezium``).

:func:`decode` detects the format per message and is the one entry point the stager uses.
Whatever the bytes, it returns a :class:`Decoded` or raises
:class:`~tidelake.errors.DecodeError` (whose ``reason`` the dead-letter headers carry);
nothing else escapes it.
"""

from __future__ import annotations

import orjson

from tidelake.errors import DecodeError
from tidelake.formats import canal_json, debezium
from tidelake.formats._common import Decoded, JsonObject

__all__ = ["Decoded", "decode"]


def decode(
    payload: bytes, *, seq: int, key_json: bytes | None = None, subject: str | None = None
) -> Decoded:
    """Decode one message of any supported format; every event gets stream sequence ``seq``.

    ``key_json`` is the message key (Kafka key / ``Tidelake-Key`` header): Debezium's names
    the primary key (without it the event leaves the key to the lake); canal-json names its
    key columns itself and ignores it. ``subject`` is the NATS subject the message came on:
    a flattened Debezium row that does not name its table takes it from there.
    Detection, per message: ``__deleted``/``__op`` → flattened Debezium; a
    ``{"schema", "payload"}`` wrapper or ``op`` + ``source`` + ``before``/``after`` → Debezium
    envelope; ``isDdl``/``pkNames``/``type`` + ``data`` → canal-json.
    """
    obj = _parse(payload)
    try:
        return _decode_object(obj, seq=seq, key_json=key_json, subject=subject)
    except RecursionError as exc:  # pathological nesting in a value the decoder walks
        raise DecodeError("message nested too deeply") from exc


def _parse(payload: bytes) -> JsonObject | None:
    # orjson checks UTF-8 itself, exactly as strictly as bytes.decode: a valid message is
    # parsed without a decoded copy; an invalid one takes the path below for its reason.
    try:
        obj = orjson.loads(payload)
    except orjson.JSONDecodeError:
        pass
    else:
        if obj is not None and not isinstance(obj, dict):
            raise DecodeError(f"not a JSON object: {type(obj).__name__}")
        return obj
    if not payload:
        raise DecodeError("empty message")
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError(f"invalid UTF-8 at byte {exc.start}") from exc
    try:
        obj = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(f"not JSON: {exc}") from exc
    if obj is not None and not isinstance(obj, dict):
        raise DecodeError(f"not a JSON object: {type(obj).__name__}")
    return obj


def _decode_object(
    obj: JsonObject | None, *, seq: int, key_json: bytes | None, subject: str | None
) -> Decoded:
    if obj is None:
        return Decoded(skipped="tombstone", format=debezium.FORMAT)
    if debezium.looks_like_flat(obj):
        return debezium.decode_flat(obj, None, seq=seq, key_json=key_json, subject=subject)
    if "payload" in obj and set(obj) <= {"schema", "payload"}:
        inner = obj["payload"]
        schema = obj.get("schema")
        if schema is not None and not isinstance(schema, dict):
            raise DecodeError(f"debezium: schema must be an object, got {type(schema).__name__}")
        if inner is None:
            return Decoded(skipped="tombstone", format=debezium.FORMAT)
        if not isinstance(inner, dict):
            raise DecodeError(f"debezium: payload must be an object, got {type(inner).__name__}")
        if debezium.looks_like_flat(inner):
            return debezium.decode_flat(inner, schema, seq=seq, key_json=key_json, subject=subject)
        if debezium.looks_like_envelope(inner):
            return debezium.decode_envelope(inner, schema, seq=seq, key_json=key_json)
        if _is_schema_change(inner):
            return Decoded(skipped="debezium schema change", format=debezium.FORMAT)
        raise DecodeError("unknown format: a payload wrapper holding neither envelope nor row")
    if canal_json.looks_like(obj):
        return canal_json.decode_object(obj, seq=seq)
    if debezium.looks_like_envelope(obj):
        return debezium.decode_envelope(obj, None, seq=seq, key_json=key_json)
    if _is_schema_change(obj):
        return Decoded(skipped="debezium schema change", format=debezium.FORMAT)
    fields = ", ".join(sorted(obj)[:8])
    raise DecodeError(f"unknown format: an object with fields {fields:.200}")


def _is_schema_change(obj: JsonObject) -> bool:
    """A Debezium MySQL/MariaDB schema-change event (``databaseName``, ``ddl``,
    ``tableChanges``: ``SchemaChangeEvent`` in debezium-core, published by Debezium Server on
    the bare ``<topic.prefix>`` subject). Skipped, counted: it replays the source's DDL
    history (a snapshot's ``DROP TABLE`` included), and with Debezium the lake types columns
    from the row schema, the config or the source catalog."""
    return "ddl" in obj and "databaseName" in obj and "source" in obj and "op" not in obj
