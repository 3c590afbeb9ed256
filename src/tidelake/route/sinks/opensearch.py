"""The OpenSearch sink: the latest row of each key as a document, versioned by source position,
with the source's DDL applied in stream order.

Talks to the REST API with httpx (``_bulk``, index creation, ``_mapping``, scroll searches);
OpenSearch 2.x (tested on 2.19) and Elasticsearch 7.10-compatible APIs, security plugin or not
(basic auth when ``username`` is set). Only core APIs: not the ``reindex`` module
(``_delete_by_query``, ``_update_by_query``, ``_reindex``), which a node may lack.

**Indices** (``P`` is ``index_prefix``, ``T`` the source ``database.table``): each table has one
concrete index ``P`` + ``escape(T)`` + ``%versions`` holding every key's latest document or
tombstone, and a filtered **alias** ``P`` + ``escape(T)`` over it that shows the live rows only
(tombstones filtered out) — readers search the alias. ``escape`` keeps ``a-z``, ``0-9``, ``.``,
``_`` and ``-`` and writes every other byte of the UTF-8 text (upper-case letters, ``%``
included) as ``%xx`` in lower-case hex: index names must be lower case, and the escape is a
bijection, so two tables never share an index (``Shop.Orders`` is ``%53hop.%4frders``). An
escaped name has ``%`` only before two hex digits, which ``%versions`` and ``%schema`` are not,
so no alias is another table's concrete index or the schema index. The document id is
:meth:`RowChange.key_text` as it is (JSON in the bulk body escapes it; the ``\\x1f`` between a
composite key's values included); a key of more than 512 UTF-8 bytes, OpenSearch's limit for
an id, is rejected.

One more index, ``P%schema``, holds a small document per table the source's DDL reached (id:
``T``): ``applied``, the last schema change applied to the table (its position, ``#`` and the
operation's index in the statement), and ``cleared``, the position of the last ``TRUNCATE`` /
``DROP`` (or rename away from or onto the name) that emptied it. Both only ever grow. And
``log``: position → the column steps (``route/schema.py``) of each statement that changed the
table's columns, with which a row change of before it arriving later (a dead letter
re-processed) is brought forward into the table's present shape before it is written.

**The position guard: a scripted upsert, not external versions.** OpenSearch's external
versioning compares one signed 64-bit number per document; a position is fixed-width decimal
text of several 20-digit components (``events.Position``), whose order no order-preserving map
into a long can keep in general. So every change is an ``update`` with ``scripted_upsert``
and one Painless script, which reads the stored ``_tl_position`` (a keyword) and writes only
when the change's position is strictly greater (``String.compareTo``: the positions are
ASCII, so that is their byte order) and above the table's ``cleared`` position (a parameter of
the script), else it is a no-op. An upsert replaces the document with the row plus
``_tl_position``; a **delete writes a tombstone** in its place, ``{"_tl_deleted": true,
"_tl_position": ...}``, which the alias filters out. A real delete would forget the key's
version and let a replayed older upsert bring the row back; the tombstone is under the same
id, so the same script guards upserts and deletes, atomically per document, without a second
read. Tombstones stay until a ``TRUNCATE`` or ``DROP`` above them (a reader who GETs by id sees
``_tl_deleted``; searches through the alias do not). Items of one shard in a bulk run in order,
so changes of one key within a batch apply in stream order; ``retry_on_conflict`` covers a
concurrent writer of the same document.

``cleared`` is read (realtime ``_mget`` of ``P%schema``) when the sink first sees a table and
kept up to date by the schema changes it applies; a script cannot read another document, so
after each batch the sink reads it again, and should another writer have raised it meanwhile,
removes the documents at or below it before :meth:`~OpenSearchSink.apply` returns. A change at
or below ``cleared`` is not even sent (a replayed row of a dropped table does not re-create its
index).

**Mapping from column types**, put when a table or a column is first seen (``dynamic:
strict``, so nothing is ever guessed by OpenSearch); a column's type is the source type of the
first change or ``CREATE TABLE`` that brings it:

=================================================  ===========================================
source type                                        OpenSearch field
=================================================  ===========================================
integers (tinyint … bigint, serials, year)         ``long``
bigint unsigned                                    ``unsigned_long`` (2^64-1 fits no long)
decimal, numeric (any precision)                   ``keyword`` (the exact text) with a ``double``
                                                   sub-field ``.number`` for ranges and sorting
float, double, real                                ``double``
bool, boolean                                      ``boolean`` (``t``/``f``, ``1``/``0`` sent as
                                                   ``true``/``false``)
date                                               ``date`` (``uuuu-MM-dd``)
datetime, timestamp (MySQL), timestamp without     ``date``: ``uuuu-MM-dd HH:mm:ss`` with 0-9
time zone                                          fraction digits, or ISO 8601; zone-less is UTC
json, jsonb                                        ``object``, ``enabled: false`` (kept, not
                                                   indexed)
binary, varbinary, blobs, bytea                    ``keyword``, not indexed (kept in ``_source``)
anything else (strings, enum, set, uuid, time,     ``keyword`` (exact; ``ignore_above`` 8191
timestamp with time zone) or unknown               characters) with a ``text`` sub-field ``.text``
=================================================  ===========================================

Exactness over convenience: a DECIMAL is never a ``scaled_float`` or a ``double`` (both round);
its exact text is the field and the double is only a sub-field. A ``date`` indexes milliseconds;
the document's ``_source`` keeps the value's full text. Time-of-day and zoned PostgreSQL
timestamps stay text: their textual forms differ by producer. Values go as the producer sent
them (numbers as text are parsed by the field's type); a value the field cannot hold (``abc`` in a
``long``, a negative ``unsigned_long``, an object in a ``keyword``) fails its bulk item, and
the change is rejected. A column named ``_tl_position`` or ``_tl_deleted``, with a ``.`` (which
OpenSearch reads as an object path) or named as an OpenSearch metadata field is rejected
before anything is written.

**DDL** (a ``schema`` change, ``route/select.py``) is applied between the rows of a batch, in
stream order (:func:`~tidelake.route.change.split_at_schema`): the rows before it are written
first, the rows after it come in the new shape. Each operation of the statement at position
``S`` is applied to a table only when the table's ``applied`` is below it, and ``applied`` is
set last: a redelivery or a replay changes nothing, and an apply killed halfway is finished by
the route's retry. Documents are found with a scroll search (after a ``_refresh``, so that the
batch's own writes are seen) and changed with ``_bulk`` updates whose script checks each
document's position again:

==========================  ====================================================================
operation                   what the sink does
==========================  ====================================================================
``TRUNCATE``                ``cleared`` = ``S`` first, then every document (row or tombstone) at
                            or below ``S`` is deleted; the index and its mapping stay
``DROP TABLE``              the same, but an index left with nothing above ``S`` (always, but
                            for a replay past the drop) is deleted, alias and mapping with it:
                            a table created again under the name gets its new column types
``DROP DATABASE``           a drop of each table of the database that has an index here
``RENAME TABLE a TO b``     ``b``'s documents at or below ``S`` are stale (the name was free at
                            the source) and go as in a drop, ``cleared`` = ``S`` on both names,
                            ``b``'s index is created with ``a``'s mapping, ``a``'s rows are
                            copied into it (``create``: a document there already is kept, so a
                            retry copies nothing twice) and ``a``'s index is dropped as above
``ADD COLUMN``              the field is mapped from the column's type (a field mapped already
                            keeps its type), and each row below ``S`` gets the value existing
                            rows read at the source: the ``DEFAULT``'s text (sent as the field
                            takes it), or for ``CURRENT_TIMESTAMP`` the statement's commit time
                            as the rows' text for the type (``YYYY-MM-DD HH:MM:SS`` in
                            ``source_timezone`` — UTC for a zoned PostgreSQL timestamp — with
                            the type's fraction digits); a NULL default changes no document (a
                            missing field reads as null). A default computed per row, or one
                            the field cannot hold, is **rejected**
``DROP COLUMN``             the field is removed from each row below ``S`` (a mapping cannot
                            drop a field: it stays mapped, with no values)
``RENAME COLUMN``           the new field is mapped as the old one, and the value moved in each
                            row below ``S``; **rejected** when the new name is mapped already
                            with another type
``MODIFY``/``CHANGE``       the new name, as a rename; a type whose field is the same (``int`` →
                            ``bigint``, ``varchar(20)`` → ``text``) changes no value, except a
                            DECIMAL with a scale, whose values get exactly that many decimals,
                            rounded half away from zero (``1.5`` → ``1.50``, as the source shows
                            them). A type whose field differs (``int`` → ``decimal``, ``date`` →
                            ``datetime``) is **rejected**: OpenSearch cannot re-type a field in
                            place, and the index would have to be rebuilt
``CREATE TABLE``            the index and alias, with the declared columns mapped (``LIKE``:
                            the other table's mapping)
==========================  ====================================================================

A column operation rewrites only rows whose position is below ``S`` (a row a newer change
wrote has the new shape), all the statement's column operations on one table in one pass,
each document by an update that checks its position is still the one read; the rewritten
document keeps its ``_tl_position`` (a change of that key delivered late — a redelivery after
a kill comes after newer messages — still meets it) and ``_tl_schema`` becomes ``S``, so a
retry does not rewrite it twice. A schema change the sink cannot apply is :class:`ChangesRejected`
with the reason (dead-lettered alone; the rest of the batch is applied again).

**Durability.** A bulk response whose items have no error means each operation is in the
shard's translog and the translog fsynced (``index.translog.durability: request``, the
default, set explicitly on the indices the sink creates). A ``refresh`` is not needed for
durability, only for visibility in searches (about a second later); the sink refreshes only
before the searches of a schema change. The indices get OpenSearch's default replica count;
replicas are not waited for beyond OpenSearch's own default (``wait_for_active_shards: 1``),
so a failover may lose the last acknowledged writes.

**Errors.** A connection refused or reset, a timeout, HTTP 401/403/429/5xx on the request, or a
bulk item failing with 429, 409 (after the retries), 5xx or a missing index:
:class:`SinkUnavailable` (the route retries the batch; applying it again is harmless). A bulk
item failing with another 4xx (a value its field cannot hold): :class:`ChangesRejected` for
its change, after the rest of the batch is applied. Any other answer: :class:`SinkError`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import decimal
import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import quote

import httpx
import structlog

from tidelake import names
from tidelake.config import OpenSearchSinkConfig
from tidelake.lake import ddl
from tidelake.route.change import (
    ChangesRejected,
    RowChange,
    SinkError,
    SinkUnavailable,
    scalar_text,
    split_at_schema,
)
from tidelake.route.schema import (
    COLUMN_OPS,
    ColumnStep,
    SchemaRefusedError,
    applied_mark,
    column_groups,
    column_steps,
    forward,
    rewrite_row,
    schema_refusal,
    source_zone,
    steps_from_json,
    steps_json,
)
from tidelake.route.sinks.pg_types import normalise

log = structlog.get_logger(__name__)

#: The document's field holding the position of the change that wrote it.
POSITION_FIELD = "_tl_position"
#: The tombstone's marker field (true in a tombstone, absent in a row).
DELETED_FIELD = "_tl_deleted"
#: A document's field holding the position of the last schema change that rewrote it (a
#: rewrite keeps the document's own position: a change of that key delivered late meets it).
SCHEMA_FIELD = "_tl_schema"
#: The last part of a table's concrete index name (module doc).
VERSIONS_SUFFIX = "%versions"
#: The last part of the index holding the tables' schema documents (module doc).
SCHEMA_SUFFIX = "%schema"
#: The schema document's fields: the last schema change applied, the last emptying.
APPLIED_FIELD = "applied"
#: The schema document's ``log``: the mark of a column change (``applied_mark``) → its column
#: steps (route/schema.py ``steps_json``), for a row change of before it arriving later.
LOG_FIELD = "log"
CLEARED_FIELD = "cleared"
#: Documents per scroll page and per bulk request of a schema change.
_PAGE = 500
#: How long a scroll context lives between two pages.
_SCROLL = "2m"
#: OpenSearch's longest document id, in UTF-8 bytes.
MAX_ID_BYTES = 512
#: Longest keyword indexed: 8191 characters of at most 4 UTF-8 bytes fit Lucene's 32766.
KEYWORD_IGNORE_ABOVE = 8191

#: Field names OpenSearch keeps for itself.
_METADATA_FIELDS = frozenset(
    {
        "_id",
        "_index",
        "_source",
        "_routing",
        "_size",
        "_field_names",
        "_ignored",
        "_seq_no",
        "_primary_term",
        "_version",
        "_type",
        "_uid",
        "_parent",
        "_all",
        "_doc_count",
        "_data_stream_timestamp",
        "_tier",
    }
)

#: The guard: write ``params.doc`` only when ``params.pos`` is above the stored position and
#: above the table's ``params.cleared`` (absent: nothing cleared).
GUARD_SCRIPT = (
    "String p = ctx._source." + POSITION_FIELD + "; "
    "if (params.cleared != null && params.cleared.compareTo(params.pos) >= 0) "
    "{ ctx.op = 'none'; } "
    "else if (p != null && p.compareTo(params.pos) >= 0) { ctx.op = 'none'; } "
    "else { ctx._source = params.doc; }"
)
#: Delete the document when its position is at or below ``params.pos`` (a truncate's).
DELETE_BELOW_SCRIPT = (
    "String p = ctx._source." + POSITION_FIELD + "; "
    "if (p != null && p.compareTo(params.pos) <= 0) { ctx.op = 'delete'; } "
    "else { ctx.op = 'none'; }"
)
#: Replace the document by ``params.doc`` when its position is still ``params.expect``.
REWRITE_SCRIPT = (
    "if (ctx._source." + POSITION_FIELD + " == params.expect) { ctx._source = params.doc; } "
    "else { ctx.op = 'none'; }"
)
#: Raise each of ``params.fields`` of a schema document (never lowers one).
RECORD_SCRIPT = (
    "for (String f : params.fields.keySet()) { String v = params.fields.get(f); "
    "String c = ctx._source[f]; if (c == null || c.compareTo(v) < 0) { ctx._source[f] = v; } } "
    "ctx._source.table = params.table; "
    "if (params.log_at != null) { if (ctx._source.log == null) { ctx._source.log = [:]; } "
    "ctx._source.log[params.log_at] = params.log_steps; }"
)

_INTEGERS = frozenset(
    {
        "tinyint",
        "smallint",
        "mediumint",
        "int",
        "integer",
        "bigint",
        "int2",
        "int4",
        "int8",
        "smallserial",
        "serial",
        "bigserial",
        "year",
    }
)
_DECIMALS = frozenset({"decimal", "dec", "fixed", "numeric"})
_FLOATS = frozenset({"float", "float4", "float8", "double", "double precision", "real"})
_BOOLEANS = frozenset({"bool", "boolean"})
_DATETIMES = frozenset({"datetime", "timestamp", "timestamp without time zone", "smalldatetime"})
_JSON = frozenset({"json", "jsonb"})
_BINARY = frozenset({"binary", "varbinary", "blob", "tinyblob", "mediumblob", "longblob", "bytea"})

#: ``uuuu-MM-dd HH:mm:ss`` with no fraction or 1 to 9 fraction digits, or ISO 8601.
DATETIME_FORMAT = "||".join(
    ["uuuu-MM-dd HH:mm:ss"]
    + [f"uuuu-MM-dd HH:mm:ss.{'S' * n}" for n in range(1, 10)]
    + ["strict_date_optional_time"]
)

_TRUE = frozenset({"t", "true", "1", "y", "yes", "on"})
_FALSE = frozenset({"f", "false", "0", "n", "no", "off"})

#: Bulk item error types that mean "not now" rather than "never".
_TRANSIENT_ITEM_ERRORS = frozenset(
    {
        "es_rejected_execution_exception",
        "opensearch_rejected_execution_exception",
        "unavailable_shards_exception",
        "cluster_block_exception",
        "index_not_found_exception",
        "circuit_breaking_exception",
        "version_conflict_engine_exception",
        "process_cluster_event_timeout_exception",
        "no_shard_available_action_exception",
    }
)


# --- names, mappings and documents (pure) -----------------------------------------------------


def escape_name(text: str) -> str:
    """``text`` with every byte but ``a-z0-9._-`` as ``%xx`` (lower-case hex; module doc)."""
    out: list[str] = []
    for ch in text:
        if ch in "abcdefghijklmnopqrstuvwxyz0123456789._-":
            out.append(ch)
        else:
            out.extend(f"%{b:02x}" for b in ch.encode())
    return "".join(out)


def alias_name(prefix: str, table: str) -> str:
    """The filtered alias readers search: the live rows of ``table``."""
    return prefix + escape_name(table)


def unescape_name(text: str) -> str:
    """The inverse of :func:`escape_name`."""
    out = bytearray()
    i = 0
    while i < len(text):
        if text[i] == "%" and re.fullmatch(r"[0-9a-f]{2}", text[i + 1 : i + 3]):
            out.append(int(text[i + 1 : i + 3], 16))
            i += 3
        else:
            out += text[i].encode()
            i += 1
    return out.decode("utf-8", "replace")


def index_name(prefix: str, table: str) -> str:
    """The concrete index of ``table``: rows and tombstones."""
    return alias_name(prefix, table) + VERSIONS_SUFFIX


def schema_index(prefix: str) -> str:
    """The index of the tables' schema documents (``applied``, ``cleared``)."""
    return prefix + SCHEMA_SUFFIX


def table_of_index(prefix: str, index: str) -> str | None:
    """The table whose concrete index is ``index``; None for another index."""
    if not (index.startswith(prefix) and index.endswith(VERSIONS_SUFFIX)):
        return None
    return unescape_name(index[len(prefix) : -len(VERSIONS_SUFFIX)])


def field_mapping(source_type: str | None) -> dict[str, Any]:
    """The OpenSearch field of a column of ``source_type`` (the module doc's table)."""
    text_field: dict[str, Any] = {
        "type": "keyword",
        "ignore_above": KEYWORD_IGNORE_ABOVE,
        "fields": {"text": {"type": "text"}},
    }
    if not source_type:
        return text_field
    name, _args, unsigned = normalise(source_type)
    if name in _INTEGERS:
        return {"type": "unsigned_long" if unsigned and name in ("bigint", "int8") else "long"}
    if name in _DECIMALS:
        return {"type": "keyword", "fields": {"number": {"type": "double"}}}
    if name in _FLOATS:
        return {"type": "double"}
    if name in _BOOLEANS:
        return {"type": "boolean"}
    if name == "date":
        return {"type": "date", "format": "uuuu-MM-dd"}
    if name in _DATETIMES:
        return {"type": "date", "format": DATETIME_FORMAT}
    if name in _JSON:
        return {"type": "object", "enabled": False}
    if name in _BINARY:
        return {"type": "keyword", "index": False, "doc_values": False}
    return text_field


def own_fields() -> dict[str, Any]:
    """The sink's own fields of every index."""
    keyword = {"type": "keyword"}
    return {POSITION_FIELD: keyword, DELETED_FIELD: {"type": "boolean"}, SCHEMA_FIELD: keyword}


def schema_index_body() -> dict[str, Any]:
    """The body creating the schema index."""
    keyword = {"type": "keyword"}
    fields = {
        "table": keyword,
        APPLIED_FIELD: keyword,
        CLEARED_FIELD: keyword,
        LOG_FIELD: {"type": "object", "enabled": False},  # kept, never searched
    }
    return {
        "settings": {"index.translog.durability": "request"},
        "mappings": {"dynamic": "strict", "properties": fields},
    }


def same_field(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two field mappings are one (an object's ``type`` may be left out)."""

    def norm(m: Mapping[str, Any]) -> str:
        return json.dumps({"type": "object", **m}, sort_keys=True)

    return norm(a) == norm(b)


def field_kind(field: Mapping[str, Any]) -> str:
    """A field mapping in a few words, for reasons."""
    kind = str(field.get("type", "object"))
    if kind == "keyword" and "number" in field.get("fields", {}):
        return "keyword with a .number (a DECIMAL)"
    if kind == "date":
        return f"date ({field.get('format', 'default format')})"
    return kind


_DATE_RE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")
_DATETIME_RE = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.\d{1,9})?(Z|[+-]\d{2}:?\d{2})?$"
)


def value_fits(value: Any, field: Mapping[str, Any]) -> bool:
    """Whether OpenSearch takes ``value`` (as :func:`encode_value` sends it) into ``field``:
    numbers parse, an unsigned one is not negative, a boolean is one, a date is a real date
    (not MySQL's zero date). Other fields take any text."""
    if value is None:
        return True
    kind = field.get("type", "object")
    if kind in ("long", "unsigned_long", "double"):
        try:
            number = decimal.Decimal(str(value).strip())
        except decimal.InvalidOperation:
            return False
        if not number.is_finite():
            return False
        if kind == "long":
            return -(2**63) <= number < 2**63
        return not (kind == "unsigned_long" and not 0 <= number < 2**64)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "date":
        text = str(value)
        day = _DATE_RE.match(text)
        match = day or _DATETIME_RE.match(text)
        if match is None or (field.get("format") == "uuuu-MM-dd" and day is None):
            return False
        try:
            dt.date(*(int(g) for g in match.groups()[:3]))
        except ValueError:
            return False
        if day is None:
            hour, minute, second = (int(g) for g in match.groups()[3:6])
            return hour < 24 and minute < 60 and second < 60
    return True


def index_body(properties: Mapping[str, Any], alias: str) -> dict[str, Any]:
    """The body creating a table's concrete index with its mapping and its filtered alias."""
    return {
        "settings": {"index.translog.durability": "request"},
        "mappings": {"dynamic": "strict", "properties": {**own_fields(), **properties}},
        "aliases": {alias: {"filter": {"bool": {"must_not": {"term": {DELETED_FIELD: True}}}}}},
    }


def check_column(column: str) -> None:
    """Raise :class:`ValueError` for a column name the sink cannot write as a field."""
    if column in (POSITION_FIELD, DELETED_FIELD, SCHEMA_FIELD):
        raise ValueError(f"column {column!r} is the sink's own field")
    if not column or "." in column:
        raise ValueError(f"column {column!r}: an empty name or a '.' is not a field name here")
    if column in _METADATA_FIELDS:
        raise ValueError(f"column {column!r} is an OpenSearch metadata field")


def _json_default(value: Any) -> str:
    """JSON text of the values JSON has no type for (``route.change.scalar_text``)."""
    text = scalar_text(value)
    if text is None:
        raise TypeError(f"a {type(value).__name__} value cannot be sent to OpenSearch")
    return text


def encode_value(value: Any, field: Mapping[str, Any]) -> Any:
    """A column value as put in the document of a field ``field``: JSON types as they are
    (text stays text, parsed by the field's type), a boolean field's ``t``/``f`` as JSON
    booleans, other values as their text. Raises :class:`TypeError` or :class:`ValueError`."""
    if value is None or isinstance(value, str | bool | int | dict | list):
        if field.get("type") == "boolean" and isinstance(value, str | int):
            word = str(value).strip().lower()
            if word in _TRUE:
                return True
            if word in _FALSE:
                return False
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} has no JSON form")
        return value
    return _json_default(value)


def document(change: RowChange, fields: Mapping[str, Any]) -> dict[str, Any]:
    """The document a change writes (its row, or a tombstone) with its position. Raises
    :class:`ValueError` for a column or a value that cannot be written."""
    if change.kind == "delete":
        return {DELETED_FIELD: True, POSITION_FIELD: change.position}
    if change.row is None:
        raise ValueError("an upsert without a row")
    doc: dict[str, Any] = {}
    for column, value in change.row.items():
        check_column(column)
        try:
            doc[column] = encode_value(value, fields.get(column, {}))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"column {column!r}: {exc}") from None
    doc[POSITION_FIELD] = change.position
    return doc


def _ndjson(*items: Mapping[str, Any]) -> list[str]:
    return [
        json.dumps(item, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        for item in items
    ]


def bulk_lines(
    index: str, change: RowChange, doc: Mapping[str, Any], cleared: str | None = None
) -> list[str]:
    """The two NDJSON lines of one change's guarded scripted upsert (``cleared``: the table's
    cleared position, when it has one)."""
    action = {"update": {"_index": index, "_id": change.key_text(), "retry_on_conflict": 3}}
    params: dict[str, Any] = {"pos": change.position, "doc": doc}
    if cleared is not None:
        params["cleared"] = cleared
    body = {
        "scripted_upsert": True,
        "upsert": {},
        "script": {"lang": "painless", "source": GUARD_SCRIPT, "params": params},
    }
    return _ndjson(action, body)


def script_lines(index: str, doc_id: str, source: str, params: Mapping[str, Any]) -> list[str]:
    """The two NDJSON lines of a scripted update of an existing document."""
    action = {"update": {"_index": index, "_id": doc_id, "retry_on_conflict": 3}}
    return _ndjson(action, {"script": {"lang": "painless", "source": source, "params": params}})


def item_outcome(item: Mapping[str, Any]) -> tuple[str, str]:
    """A bulk response item as ``("ok" | "retry" | "reject", reason)``."""
    result: Mapping[str, Any] = next(iter(item.values()), {}) if item else {}
    status = int(result.get("status", 500))
    error = result.get("error")
    if error is None and status < 300:
        return "ok", ""
    if isinstance(error, Mapping):
        etype = str(error.get("type", "?"))
        reason = f"{etype}: {error.get('reason', '')}"
        caused = error.get("caused_by")
        if isinstance(caused, Mapping):
            reason += f" ({caused.get('type', '?')}: {caused.get('reason', '')})"
    else:
        etype, reason = "", str(error)
    if status in (404, 408, 409, 429) or status >= 500 or etype in _TRANSIENT_ITEM_ERRORS:
        return "retry", reason
    return "reject", reason


# --- the sink ---------------------------------------------------------------------------------


class OpenSearchSink:
    """A route's sink into OpenSearch: the module doc describes indices, guard, mapping and
    DDL."""

    kind = "opensearch"

    def __init__(self, config: OpenSearchSinkConfig, *, source_timezone: str = "UTC") -> None:
        self.config = config
        password = config.password_value()
        auth = (config.username, password or "") if config.username else None
        self._client = httpx.Client(
            base_url=config.url.rstrip("/"),
            auth=auth,
            timeout=httpx.Timeout(config.timeout_s, connect=min(config.timeout_s, 5.0)),
            headers={"Accept": "application/json"},
        )
        #: Concrete index → its mapped fields (name → mapping), as known to this sink.
        self._fields: dict[str, dict[str, Any]] = {}
        #: Table → its ``cleared`` position (None: never cleared), as last read or set.
        self._cleared: dict[str, str | None] = {}
        self._zone = source_zone(source_timezone)
        self._schema_index_ready = False

    # -- HTTP ----------------------------------------------------------------------------------

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request; :class:`SinkUnavailable` for a transport error or a "not now" status."""
        try:
            resp = self._client.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise SinkUnavailable(f"opensearch {self.config.url}: {exc!r}") from exc
        if resp.status_code in (401, 403, 408, 429) or resp.status_code >= 500:
            raise SinkUnavailable(
                f"opensearch {self.config.url}: {method} {path} answered "
                f"{resp.status_code}: {resp.text[:500]}"
            )
        return resp

    @staticmethod
    def _path(index: str, *rest: str) -> str:
        return "/" + "/".join([quote(index, safe=""), *rest])

    def _expect(self, resp: httpx.Response, what: str) -> Any:
        """The JSON answer of a request that must succeed."""
        if resp.status_code >= 300:
            raise SinkError(f"opensearch: {what}: {resp.status_code} {resp.text[:500]}")
        return resp.json()

    # -- indices and mappings ------------------------------------------------------------------

    def _known_fields(self, index: str, table: str, wanted: Mapping[str, Any]) -> dict[str, Any]:
        """The index's mapped fields, creating the index (with ``wanted``) when it is missing."""
        known = self._fields.get(index)
        if known is not None:
            return known
        path = self._path(index)
        resp = self._request("GET", f"{path}/_mapping")
        if resp.status_code == 404:
            body = index_body(wanted, alias_name(self.config.index_prefix, table))
            created = self._request("PUT", path, json=body)
            if created.status_code >= 300:
                if "resource_already_exists_exception" not in created.text:
                    raise _TableRefusedError(f"creating index {index}: {created.text[:500]}")
            else:
                log.info("opensearch sink: index created", index=index)
            resp = self._request("GET", f"{path}/_mapping")
        answer: dict[str, Any] = self._expect(resp, f"mapping of {index}")
        first: dict[str, Any] = next(iter(answer.values()), {})
        mapping: dict[str, Any] = first.get("mappings", {})
        known = dict(mapping.get("properties", {}))
        self._fields[index] = known
        return known

    def _ensure_fields(self, index: str, table: str, wanted: Mapping[str, Any]) -> dict[str, Any]:
        """The index's fields after adding the columns of ``wanted`` it lacks."""
        known = self._known_fields(index, table, wanted)
        missing = {c: m for c, m in wanted.items() if c not in known}
        if missing:
            path = self._path(index, "_mapping")
            resp = self._request("PUT", path, json={"properties": missing})
            if resp.status_code == 404:
                self._fields.pop(index, None)
                raise SinkUnavailable(f"opensearch: index {index} went away")
            self._fields.pop(index, None)
            known = self._known_fields(index, table, wanted)
            if resp.status_code >= 300:
                still = sorted(c for c in missing if c not in known)
                if still:
                    raise _TableRefusedError(
                        f"mapping columns {still} of {index}: {resp.text[:500]}"
                    )
            else:
                log.info("opensearch sink: fields mapped", index=index, fields=sorted(missing))
        return known

    def _mapping_of(self, index: str) -> dict[str, Any] | None:
        """The index's mapped fields as the server has them now; None when there is no index."""
        resp = self._request("GET", self._path(index, "_mapping"))
        if resp.status_code == 404:
            self._fields.pop(index, None)
            return None
        answer: dict[str, Any] = self._expect(resp, f"mapping of {index}")
        first: dict[str, Any] = next(iter(answer.values()), {})
        known = dict(first.get("mappings", {}).get("properties", {}))
        self._fields[index] = known
        return known

    def _refresh(self, index: str) -> bool:
        """Make the index's writes visible to searches; False when there is no index."""
        resp = self._request("POST", self._path(index, "_refresh"))
        if resp.status_code == 404:
            return False
        self._expect(resp, f"refreshing {index}")
        return True

    def _delete_index(self, index: str) -> None:
        resp = self._request("DELETE", self._path(index))
        self._fields.pop(index, None)
        if resp.status_code != 404:
            self._expect(resp, f"deleting index {index}")
        log.info("opensearch sink: index deleted", index=index)

    def _count(self, index: str, query: Mapping[str, Any]) -> int:
        resp = self._request("POST", self._path(index, "_count"), json={"query": query})
        if resp.status_code == 404:
            return 0
        return int(self._expect(resp, f"counting in {index}")["count"])

    def _scan(
        self, index: str, query: Mapping[str, Any], *, source: bool
    ) -> Iterator[list[dict[str, Any]]]:
        """The documents matching ``query``, a page at a time (a scroll: a snapshot of the
        index as last refreshed). Nothing when there is no index."""
        body = {"size": _PAGE, "query": query, "sort": ["_doc"], "_source": source}
        resp = self._request(
            "POST", self._path(index, "_search"), params={"scroll": _SCROLL}, json=body
        )
        if resp.status_code == 404:
            return
        answer = self._expect(resp, f"searching {index}")
        scroll_id = answer.get("_scroll_id")
        try:
            hits: list[dict[str, Any]] = answer["hits"]["hits"]
            while hits:
                yield hits
                resp = self._request(
                    "POST", "/_search/scroll", json={"scroll": _SCROLL, "scroll_id": scroll_id}
                )
                answer = self._expect(resp, f"scrolling {index}")
                scroll_id = answer.get("_scroll_id", scroll_id)
                hits = answer["hits"]["hits"]
        finally:
            if scroll_id:
                with contextlib.suppress(httpx.HTTPError):  # else it expires by itself
                    self._client.request(
                        "DELETE", "/_search/scroll", json={"scroll_id": [scroll_id]}
                    )

    def tables_of(self, database: str) -> list[str]:
        """The tables of ``database`` that have an index here."""
        prefix = self.config.index_prefix
        resp = self._request(
            "GET",
            f"/_cat/indices/{quote(prefix, safe='')}*",
            params={"format": "json", "h": "index"},
        )
        if resp.status_code == 404:
            return []
        tables: set[str] = set()
        for item in self._expect(resp, "listing indices"):
            table = table_of_index(prefix, str(item.get("index", "")))
            if table is None:
                continue
            try:
                if names.split_table_id(table)[0] == database:
                    tables.add(table)
            except ValueError:
                continue
        return sorted(tables)

    # -- schema documents ----------------------------------------------------------------------

    def _records(self, tables: set[str]) -> dict[str, tuple[str | None, str | None]]:
        """Table → (``applied``, ``cleared``) of the schema documents there are (realtime)."""
        if not tables:
            return {}
        index = schema_index(self.config.index_prefix)
        resp = self._request("POST", self._path(index, "_mget"), json={"ids": sorted(tables)})
        if resp.status_code == 404:
            return {}
        out: dict[str, tuple[str | None, str | None]] = {}
        for doc in self._expect(resp, f"reading {index}").get("docs", []):
            if doc.get("found"):
                source = doc.get("_source", {})
                out[str(doc["_id"])] = (source.get(APPLIED_FIELD), source.get(CLEARED_FIELD))
            elif "error" in doc and "index_not_found" not in json.dumps(doc["error"]):
                raise SinkUnavailable(f"opensearch: reading {index}: {doc['error']}")
        return out

    def record(self, table: str) -> tuple[str | None, str | None]:
        """The table's (``applied``, ``cleared``), None where unset."""
        return self._records({table}).get(table, (None, None))

    def _logs(self, tables: set[str]) -> dict[str, list[tuple[str, list[ColumnStep]]]]:
        """Table → the column steps logged for it, (position, steps) in order (realtime)."""
        if not tables:
            return {}
        index = schema_index(self.config.index_prefix)
        resp = self._request("POST", self._path(index, "_mget"), json={"ids": sorted(tables)})
        if resp.status_code == 404:
            return {}
        out: dict[str, list[tuple[str, list[ColumnStep]]]] = {}
        for doc in self._expect(resp, f"reading {index}").get("docs", []):
            source = doc.get("_source") or {}
            applied = source.get(APPLIED_FIELD) or ""
            # Only a change whose rewrite is done (its mark reached): until then a row of
            # before it is written as it is, and the rewrite, when it runs again, takes it.
            out[str(doc["_id"])] = sorted(
                (mark.split("#", 1)[0], steps_from_json(text))
                for mark, text in (source.get(LOG_FIELD) or {}).items()
                if mark <= applied
            )
        return out

    def _forward(self, rows: Sequence[RowChange]) -> list[RowChange]:
        """``rows`` with each one older than a column change of its table brought forward
        through the steps logged since (a dead letter re-processed after the DDL)."""
        history = self._logs({c.table for c in rows})
        return [
            forward(c, [s for at, taken in history.get(c.table, ()) if at > c.position
                        for s in taken])
            for c in rows
        ]  # fmt: skip

    def _set_record(self, table: str, **fields: str) -> None:
        """Raise the table's schema fields to ``fields`` (never lowers one); durable on return."""
        self._update_record(table, fields, None)

    def _log_steps(self, table: str, mark: str, steps: str) -> None:
        """Log the column steps (JSON) of the table's schema change under its ``mark``."""
        self._update_record(table, {}, (mark, steps))

    def _update_record(
        self, table: str, fields: Mapping[str, str], log_steps: tuple[str, str] | None
    ) -> None:
        """The table's schema document: ``fields`` raised, ``log_steps`` logged; durable on
        return."""
        index = schema_index(self.config.index_prefix)
        if not self._schema_index_ready:
            created = self._request("PUT", self._path(index), json=schema_index_body())
            if created.status_code >= 300 and "resource_already_exists" not in created.text:
                raise SinkError(f"opensearch: creating {index}: {created.text[:500]}")
            self._schema_index_ready = True
        body = {
            "scripted_upsert": True,
            "upsert": {},
            "script": {
                "lang": "painless",
                "source": RECORD_SCRIPT,
                "params": {
                    "fields": dict(fields),
                    "table": table,
                    "log_at": log_steps[0] if log_steps else None,
                    "log_steps": log_steps[1] if log_steps else None,
                },
            },
        }
        resp = self._request(
            "POST",
            self._path(index, "_update", quote(table, safe="")),
            params={"retry_on_conflict": 3},
            json=body,
        )
        if resp.status_code == 404:
            self._schema_index_ready = False
            raise SinkUnavailable(f"opensearch: {index} went away")
        self._expect(resp, f"writing {index}")
        cleared = fields.get(CLEARED_FIELD)
        if cleared is not None:
            known = self._cleared.get(table)
            self._cleared[table] = cleared if known is None else max(known, cleared)

    def _load_cleared(self, tables: set[str]) -> None:
        """Read the ``cleared`` of tables not seen yet."""
        unknown = tables - self._cleared.keys()
        records = self._records(unknown)
        for table in unknown:
            self._cleared[table] = records.get(table, (None, None))[1]

    def _recheck_cleared(self, tables: set[str]) -> None:
        """After the batch: a ``cleared`` another writer raised meanwhile (its truncate may
        have run before this batch's rows landed) → the documents at or below it go again."""
        fresh = self._records(tables)
        for table in sorted(tables):
            cleared = fresh.get(table, (None, None))[1]
            known = self._cleared.get(table)
            if cleared is not None and (known is None or cleared > known):
                log.warning(
                    "opensearch sink: the table was cleared by another writer; removing what "
                    "this batch wrote below it",
                    table=table,
                    cleared=cleared,
                )
                self._cleared[table] = cleared
                self._remove_docs(table, cleared, drop=False)

    # -- apply ---------------------------------------------------------------------------------

    def apply(self, changes: Sequence[RowChange]) -> None:
        """Apply ``changes`` (stream order): each run of rows in one ``_bulk`` request, each
        schema change between them; see the module doc."""
        if not changes:
            return
        bad: list[tuple[int, str]] = []
        for change in changes:
            if change.kind == "schema":
                reason = schema_refusal(change, self._zone)
                if reason is not None:
                    bad.append((change.seq, reason))
                continue
            try:
                if len(change.key_text().encode()) > MAX_ID_BYTES:
                    raise ValueError(f"the key is longer than {MAX_ID_BYTES} bytes")
                document(change, {})  # column names and values it cannot write
            except ValueError as exc:
                bad.append((change.seq, f"{change.table} seq {change.seq}: {exc}"))
        if bad:
            # As the other sinks: nothing written; the route dead-letters these and applies
            # the rest again.
            seqs = list(dict.fromkeys(seq for seq, _ in bad))
            raise ChangesRejected(seqs, "; ".join(reason for _, reason in bad))
        tables = {c.table for c in changes if c.kind != "schema"}
        self._load_cleared(tables)
        rejected: list[tuple[int, str]] = []
        for rows, schema in split_at_schema(changes):
            if rows:
                rejected += self._apply_rows(self._forward(rows))
            if schema is not None:
                try:
                    self._apply_schema(schema)
                except SchemaRefusedError as exc:
                    # The rest is applied again by the route, after this one is dead-lettered.
                    rejected.append((schema.seq, f"{schema.table} seq {schema.seq}: {exc}"))
                    break
        self._recheck_cleared(tables)
        if rejected:
            seqs = list(dict.fromkeys(seq for seq, _ in rejected))
            raise ChangesRejected(seqs, "; ".join(reason for _, reason in rejected))

    def _apply_rows(self, rows: Sequence[RowChange]) -> list[tuple[int, str]]:
        """One run of row changes in one ``_bulk``; the changes refused for good."""
        prefix = self.config.index_prefix
        rejected: list[tuple[int, str]] = []
        live: list[RowChange] = []
        wanted: dict[str, dict[str, Any]] = {}  # table → column → mapping
        for change in rows:
            cleared = self._cleared.get(change.table)
            if cleared is not None and change.position <= cleared:
                continue  # older than the table's truncate or drop: the guard refuses it
            live.append(change)
            columns = wanted.setdefault(change.table, {})
            for column in change.row or {}:
                if column not in columns:
                    columns[column] = field_mapping(change.column_types.get(column))
        fields: dict[str, dict[str, Any]] = {}
        for table, columns in wanted.items():
            try:
                fields[table] = self._ensure_fields(index_name(prefix, table), table, columns)
            except _TableRefusedError as exc:
                rejected += [(c.seq, f"{table}: {exc}") for c in live if c.table == table]
        lines: list[str] = []
        sent: list[RowChange] = []
        for change in live:
            if change.table not in fields:
                continue
            doc = document(change, fields[change.table])
            index = index_name(prefix, change.table)
            lines += bulk_lines(index, change, doc, self._cleared.get(change.table))
            sent.append(change)
        if lines:
            rejected += self._bulk(lines, sent)
        return rejected

    def _bulk_items(self, lines: list[str]) -> list[dict[str, Any]]:
        """POST a bulk body; its items."""
        body = ("\n".join(lines) + "\n").encode()
        resp = self._request(
            "POST", "/_bulk", content=body, headers={"Content-Type": "application/x-ndjson"}
        )
        if resp.status_code >= 300:
            raise SinkError(f"opensearch: _bulk answered {resp.status_code}: {resp.text[:500]}")
        items: list[dict[str, Any]] = resp.json().get("items", [])
        return items

    def _bulk(self, lines: list[str], sent: Sequence[RowChange]) -> list[tuple[int, str]]:
        """POST the rows' bulk body and map its items' errors (module doc: errors); the
        changes refused for good."""
        items = self._bulk_items(lines)
        retry: list[str] = []
        rejected: list[tuple[int, str]] = []
        for change, item in zip(sent, items, strict=False):
            outcome, reason = item_outcome(item)
            if outcome == "retry":
                retry.append(f"{change.table} seq {change.seq}: {reason}")
                if "index_not_found" in reason:
                    self._fields.pop(index_name(self.config.index_prefix, change.table), None)
            elif outcome == "reject":
                rejected.append((change.seq, f"{change.table} seq {change.seq}: {reason}"))
        if retry:
            raise SinkUnavailable(f"opensearch: {len(retry)} item(s) to retry: {retry[0]}")
        return rejected

    def _schema_bulk(self, lines: list[str], what: str, *, ok: tuple[str, ...] = ()) -> int:
        """A bulk of a schema change's document operations; the number of no-ops. An item
        failing with an error type in ``ok`` (or a document gone meanwhile) is fine; one to
        retry raises :class:`SinkUnavailable`, any other :class:`SchemaRefusedError`."""
        noops = 0
        for item in self._bulk_items(lines):
            result: Mapping[str, Any] = next(iter(item.values()), {})
            outcome, reason = item_outcome(item)
            if outcome == "ok":
                noops += result.get("result") == "noop"
            elif "document_missing_exception" in reason or any(e in reason for e in ok):
                continue
            elif outcome == "retry":
                raise SinkUnavailable(f"opensearch: {what}: {reason}")
            else:
                raise SchemaRefusedError(f"{what}: {reason}")
        return noops

    # -- schema changes ------------------------------------------------------------------------

    def _apply_schema(self, change: RowChange) -> None:
        """Apply a schema change's operations in order (module doc: DDL)."""
        position = change.position
        groups = column_groups(change.operations)
        for i, op in enumerate(change.operations):
            mark = applied_mark(position, i)
            if isinstance(op, COLUMN_OPS):
                table = op.table.table_id
                first, ops = groups[table]
                if first == i:
                    self._alter_columns(table, ops, change, mark)
            elif isinstance(op, ddl.CreateTable):
                self._create_table(op, mark)
            elif isinstance(op, ddl.TruncateTable | ddl.DropTable):
                drop = isinstance(op, ddl.DropTable)
                self._clear(op.table.table_id, position, mark, drop=drop)
            elif isinstance(op, ddl.DropDatabase):
                for table in self.tables_of(op.database):
                    self._clear(table, position, mark, drop=True)
            elif isinstance(op, ddl.RenameTable):
                self._rename_table(op.table.table_id, op.to.table_id, position, mark)

    def _remove_docs(self, table: str, position: str, *, drop: bool) -> None:
        """Delete the table's documents at or below ``position``; with ``drop``, the whole
        index when nothing above it is left."""
        index = index_name(self.config.index_prefix, table)
        if not self._refresh(index):
            return
        if drop and not self._count(index, {"range": {POSITION_FIELD: {"gt": position}}}):
            self._delete_index(index)
            return
        query = {"range": {POSITION_FIELD: {"lte": position}}}
        for hits in self._scan(index, query, source=False):
            lines: list[str] = []
            for hit in hits:
                lines += script_lines(index, hit["_id"], DELETE_BELOW_SCRIPT, {"pos": position})
            self._schema_bulk(lines, f"clearing {table}")

    def _clear(self, table: str, position: str, mark: str, *, drop: bool) -> None:
        """TRUNCATE / DROP TABLE at ``position``: ``cleared`` first, then the documents."""
        applied, _cleared = self.record(table)
        if applied is not None and applied >= mark:
            return
        self._set_record(table, **{CLEARED_FIELD: position})
        self._remove_docs(table, position, drop=drop)
        self._set_record(table, **{APPLIED_FIELD: mark})
        log.info("opensearch sink: table cleared", table=table, position=position, drop=drop)

    def _create_table(self, op: ddl.CreateTable, mark: str) -> None:
        """The table's index and alias, its declared columns mapped."""
        table = op.table.table_id
        applied, _cleared = self.record(table)
        if applied is not None and applied >= mark:
            return  # a replay: the table may have been dropped since
        prefix = self.config.index_prefix
        columns: dict[str, Any] = {}
        if op.like is not None:
            like = self._mapping_of(index_name(prefix, op.like.table_id)) or {}
            columns.update({c: m for c, m in like.items() if c not in own_fields()})
        for spec in op.columns:
            try:
                check_column(spec.name)
            except ValueError:
                continue  # its values are rejected with the rows that bring them
            columns.setdefault(spec.name, field_mapping(spec.source_type))
        try:
            self._ensure_fields(index_name(prefix, table), table, columns)
        except _TableRefusedError as exc:
            raise SchemaRefusedError(f"create table {table}: {exc}") from exc
        self._set_record(table, **{APPLIED_FIELD: mark})

    def _rename_table(self, old: str, new: str, position: str, mark: str) -> None:
        """RENAME TABLE ``old`` TO ``new`` at ``position`` (module doc)."""
        applied, _cleared = self.record(old)
        if applied is not None and applied >= mark:
            return
        _applied, new_cleared = self.record(new)
        if new_cleared is None or new_cleared < position:
            # The name was free at the source: what this sink holds under it is stale. Done
            # once: after it, ``cleared`` says so, and a retry keeps the rows copied already.
            self._remove_docs(new, position, drop=True)
            self._set_record(new, **{CLEARED_FIELD: position})
        self._set_record(old, **{CLEARED_FIELD: position})
        prefix = self.config.index_prefix
        old_index, new_index = index_name(prefix, old), index_name(prefix, new)
        mapped = self._mapping_of(old_index)
        if mapped is not None:
            columns = {c: m for c, m in mapped.items() if c not in own_fields()}
            try:
                self._ensure_fields(new_index, new, columns)
            except _TableRefusedError as exc:
                raise SchemaRefusedError(f"rename table {old} to {new}: {exc}") from exc
            self._refresh(old_index)
            rows = {
                "bool": {
                    "filter": [{"range": {POSITION_FIELD: {"lte": position}}}],
                    "must_not": [{"term": {DELETED_FIELD: True}}],
                }
            }
            copied = 0
            for hits in self._scan(old_index, rows, source=True):
                lines: list[str] = []
                for hit in hits:
                    lines += _ndjson({"create": {"_index": new_index, "_id": hit["_id"]}})
                    lines += _ndjson(hit["_source"])
                copied += len(hits)
                # A document there already: copied by a try killed halfway (or newer).
                self._schema_bulk(
                    lines, f"copying {old} to {new}", ok=("version_conflict_engine_exception",)
                )
            self._remove_docs(old, position, drop=True)
            log.info("opensearch sink: table renamed", table=old, to=new, rows=copied)
        self._set_record(new, **{APPLIED_FIELD: mark})
        self._set_record(old, **{APPLIED_FIELD: mark})

    def _planned_fields(
        self, ops: Sequence[ddl.Operation], mapped: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The fields a statement's column operations add to the mapping; raises
        :class:`SchemaRefusedError` for a change a mapping cannot take."""
        added: dict[str, Any] = {}

        def held(name: str) -> Mapping[str, Any] | None:
            return added.get(name) or mapped.get(name)

        def fieldable(name: str) -> None:
            try:
                check_column(name)
            except ValueError as exc:
                raise SchemaRefusedError(str(exc)) from exc

        for op in ops:
            if isinstance(op, ddl.AddColumn):
                fieldable(op.column.name)
                if held(op.column.name) is None:
                    added[op.column.name] = field_mapping(op.column.source_type)
                continue
            renamed: tuple[str, str] | None = None
            if isinstance(op, ddl.RenameColumn):
                renamed = (op.old, op.new)
            elif isinstance(op, ddl.ModifyColumn) and op.new_name not in (None, op.name):
                renamed = (op.name, op.new_name or op.name)
            if renamed is not None:
                old, new = renamed
                fieldable(new)
                source, target = held(old), held(new)
                if source is not None and target is None:
                    added[new] = dict(source)
                elif source is not None and target is not None and not same_field(source, target):
                    raise SchemaRefusedError(
                        f"column {old} renamed to {new}: {new} is mapped already as "
                        f"{field_kind(target)}, {old} as {field_kind(source)}; OpenSearch cannot "
                        "re-type a field in place (the index would have to be rebuilt)"
                    )
            if isinstance(op, ddl.ModifyColumn):
                name = op.new_name or op.name
                current, wanted = held(name), field_mapping(op.source_type)
                if current is not None and not same_field(current, wanted):
                    raise SchemaRefusedError(
                        f"column {name}: {op.source_type} maps to {field_kind(wanted)}, the index "
                        f"has it as {field_kind(current)}; OpenSearch cannot re-type a field in "
                        "place (the index would have to be rebuilt)"
                    )
        return added

    def _alter_columns(
        self, table: str, ops: Sequence[ddl.Operation], change: RowChange, mark: str
    ) -> None:
        """The statement's column operations on ``table``: mapping first, then each row
        below the change rewritten once (module doc)."""
        applied, _cleared = self.record(table)
        if applied is not None and applied >= mark:
            return
        index = index_name(self.config.index_prefix, table)
        mapped = self._mapping_of(index)
        if mapped is not None:
            added = self._planned_fields(ops, mapped)
            if SCHEMA_FIELD not in mapped:  # an index made before the sink had the field
                added[SCHEMA_FIELD] = own_fields()[SCHEMA_FIELD]
            fields = {**mapped, **added}
            steps: list[ColumnStep] = []
            taken = column_steps(ops, change.commit_ts_ms, self._zone)
            if taken:  # logged first, under the mark reached once the rewrite is done
                self._log_steps(table, mark, steps_json(taken))
            for step in taken:
                if step.kind == "set":
                    field = fields.get(step.name, {})
                    value = encode_value(step.value, field)
                    if not value_fits(value, field):
                        raise SchemaRefusedError(
                            f"column {step.name}: a {field_kind(field)} field cannot hold "
                            f"{step.value!r}, the value existing rows take"
                        )
                    step = dataclasses.replace(step, value=value)
                steps.append(step)
            if added:
                resp = self._request(
                    "PUT", self._path(index, "_mapping"), json={"properties": added}
                )
                self._fields.pop(index, None)
                if resp.status_code == 404:
                    raise SinkUnavailable(f"opensearch: index {index} went away")
                if resp.status_code >= 300:
                    raise SchemaRefusedError(f"mapping {sorted(added)}: {resp.text[:500]}")
            if steps:
                rows = self._rewrite(index, steps, change.position)
                log.info("opensearch sink: rows rewritten", table=table, rows=rows)
        self._set_record(table, **{APPLIED_FIELD: mark})

    def _rewrite(self, index: str, steps: Sequence[ColumnStep], position: str) -> int:
        """Rewrite the rows of ``index`` below ``position``; the number rewritten."""
        below = {  # written before the change, and not rewritten by it yet
            "bool": {
                "filter": [{"range": {POSITION_FIELD: {"lt": position}}}],
                "must_not": [
                    {"term": {DELETED_FIELD: True}},
                    {"range": {SCHEMA_FIELD: {"gte": position}}},
                ],
            }
        }
        done = 0
        for _attempt in range(5):
            self._refresh(index)
            missed = 0
            for hits in self._scan(index, below, source=True):
                lines: list[str] = []
                for hit in hits:
                    row = dict(hit.get("_source", {}))
                    at = row.pop(POSITION_FIELD, None)
                    row.pop(SCHEMA_FIELD, None)
                    new = rewrite_row(row, steps)
                    if at is None or new == row:
                        continue
                    # Its own position stays (a change of the key delivered late meets it);
                    # the mark keeps a retry from rewriting it twice.
                    doc = {**new, POSITION_FIELD: at, SCHEMA_FIELD: position}
                    params = {"expect": at, "doc": doc}
                    lines += script_lines(index, hit["_id"], REWRITE_SCRIPT, params)
                if lines:
                    noops = self._schema_bulk(lines, f"rewriting the rows of {index}")
                    missed += noops  # a newer change wrote them since the search: again
                    done += len(lines) // 2 - noops
            if not missed:
                return done
        raise SinkUnavailable(f"opensearch: rows of {index} kept changing while being rewritten")

    def close(self) -> None:
        """Close the HTTP client's connections."""
        self._client.close()


class _TableRefusedError(SinkError):
    """OpenSearch refused a table's index or mapping for good (its changes are rejected)."""
