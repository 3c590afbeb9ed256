"""The OpenSearch sink: the latest row of each key as a document, versioned by source position.

Talks to the REST API with httpx (``_bulk``, index creation, ``_mapping``); OpenSearch 2.x
(tested on 2.19) and Elasticsearch 7.10-compatible APIs, security plugin or not (basic auth
when ``username`` is set).

**Indices** (``P`` is ``index_prefix``, ``T`` the source ``database.table``): each table has one
concrete index ``P`` + ``escape(T)`` + ``%versions`` holding every key's latest document or
tombstone, and a filtered **alias** ``P`` + ``escape(T)`` over it that shows the live rows only
(tombstones filtered out) — readers search the alias. ``escape`` keeps ``a-z``, ``0-9``, ``.``,
``_`` and ``-`` and writes every other byte of the UTF-8 text (upper-case letters, ``%``
included) as ``%xx`` in lower-case hex: index names must be lower case, and the escape is a
bijection, so two tables never share an index (``Shop.Orders`` is ``%53hop.%4frders``). An
escaped name has ``%`` only before two hex digits, which ``%versions`` is not, so no alias is
another table's concrete index. The document id is :meth:`RowChange.key_text` as it is (JSON
in the bulk body escapes it; the ``\\x1f`` between a composite key's values included); a key
of more than 512 UTF-8 bytes, OpenSearch's limit for an id, is rejected.

**The position guard: a scripted upsert, not external versions.** OpenSearch's external
versioning compares one signed 64-bit number per document; a position is fixed-width decimal
text of several 20-digit components (``events.Position``), whose order no order-preserving map
into a long can keep in general. So every change is an ``update`` with ``scripted_upsert``
and one Painless script, which reads the stored ``_tl_position`` (a keyword) and writes only
when the change's position is strictly greater (``String.compareTo``: the positions are
ASCII, so that is their byte order), else it is a no-op. An upsert replaces the document with
the row plus ``_tl_position``; a **delete writes a tombstone** in its place,
``{"_tl_deleted": true, "_tl_position": ...}``, which the alias filters out. A real delete
would forget the key's version and let a replayed older upsert bring the row back; the
tombstone is under the same id, so the same script guards upserts and deletes, atomically per
document, without a second read. Tombstones are never removed (a reader who GETs by id sees
``_tl_deleted``; searches through the alias do not). Items of one shard in a bulk run in
order, so changes of one key within a batch apply in stream order; ``retry_on_conflict``
covers a concurrent writer of the same document.

**Mapping from column types**, put when a table or a column is first seen (``dynamic:
strict``, so nothing is ever guessed by OpenSearch); a column's type is the source type of the
first change that brings it, and is not changed afterwards (a source ``ALTER`` that changes a
column's type makes values that no longer fit rejected, until the index is rebuilt):

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

**Durability.** A bulk response whose items have no error means each operation is in the
shard's translog and the translog fsynced (``index.translog.durability: request``, the
default, set explicitly on the indices the sink creates). A ``refresh`` is not needed for
durability, only for visibility in searches (about a second later); the sink does not refresh.
The indices get OpenSearch's default replica count; replicas are not waited for beyond
OpenSearch's own default (``wait_for_active_shards: 1``), so a failover may lose the last
acknowledged writes.

**Errors.** A connection refused or reset, a timeout, HTTP 401/403/429/5xx on the request, or a
bulk item failing with 429, 409 (after the retries), 5xx or a missing index:
:class:`SinkUnavailable` (the route retries the batch; applying it again is harmless). A bulk
item failing with another 4xx (a value its field cannot hold): :class:`ChangesRejected` for
its change, after the rest of the batch is applied. Any other answer: :class:`SinkError`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

import httpx
import structlog

from tidelake.config import OpenSearchSinkConfig
from tidelake.route.change import (
    ChangesRejected,
    RowChange,
    SinkError,
    SinkUnavailable,
    scalar_text,
)
from tidelake.route.sinks.pg_types import normalise

log = structlog.get_logger(__name__)

#: The document's field holding the position of the change that wrote it.
POSITION_FIELD = "_tl_position"
#: The tombstone's marker field (true in a tombstone, absent in a row).
DELETED_FIELD = "_tl_deleted"
#: The last part of a table's concrete index name (module doc).
VERSIONS_SUFFIX = "%versions"
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

#: The guard: write ``params.doc`` only when ``params.pos`` is above the stored position.
GUARD_SCRIPT = (
    "String p = ctx._source." + POSITION_FIELD + "; "
    "if (p != null && p.compareTo(params.pos) >= 0) { ctx.op = 'none'; } "
    "else { ctx._source = params.doc; }"
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


def index_name(prefix: str, table: str) -> str:
    """The concrete index of ``table``: rows and tombstones."""
    return alias_name(prefix, table) + VERSIONS_SUFFIX


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
    return {POSITION_FIELD: {"type": "keyword"}, DELETED_FIELD: {"type": "boolean"}}


def index_body(properties: Mapping[str, Any], alias: str) -> dict[str, Any]:
    """The body creating a table's concrete index with its mapping and its filtered alias."""
    return {
        "settings": {"index.translog.durability": "request"},
        "mappings": {"dynamic": "strict", "properties": {**own_fields(), **properties}},
        "aliases": {alias: {"filter": {"bool": {"must_not": {"term": {DELETED_FIELD: True}}}}}},
    }


def check_column(column: str) -> None:
    """Raise :class:`ValueError` for a column name the sink cannot write as a field."""
    if column in (POSITION_FIELD, DELETED_FIELD):
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


def bulk_lines(index: str, change: RowChange, doc: Mapping[str, Any]) -> list[str]:
    """The two NDJSON lines of one change's guarded scripted upsert."""
    action = {"update": {"_index": index, "_id": change.key_text(), "retry_on_conflict": 3}}
    body = {
        "scripted_upsert": True,
        "upsert": {},
        "script": {
            "lang": "painless",
            "source": GUARD_SCRIPT,
            "params": {"pos": change.position, "doc": doc},
        },
    }
    dumps = json.dumps
    return [
        dumps(action, ensure_ascii=False, separators=(",", ":")),
        dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False),
    ]


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
    """A route's sink into OpenSearch: the module doc describes indices, guard and mapping."""

    kind = "opensearch"

    def __init__(self, config: OpenSearchSinkConfig) -> None:
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

    # -- indices and mappings ------------------------------------------------------------------

    def _known_fields(self, index: str, table: str, wanted: Mapping[str, Any]) -> dict[str, Any]:
        """The index's mapped fields, creating the index (with ``wanted``) when it is missing."""
        known = self._fields.get(index)
        if known is not None:
            return known
        path = "/" + quote(index, safe="")
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
        if resp.status_code >= 300:
            raise SinkError(f"opensearch: mapping of {index}: {resp.status_code} {resp.text[:500]}")
        answer: dict[str, Any] = resp.json()
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
            path = "/" + quote(index, safe="") + "/_mapping"
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

    # -- apply ---------------------------------------------------------------------------------

    def apply(self, changes: Sequence[RowChange]) -> None:
        """Apply ``changes`` (stream order) in one ``_bulk`` request; see the module doc."""
        if not changes:
            return
        prefix = self.config.index_prefix
        bad: list[tuple[int, str]] = []
        wanted: dict[str, dict[str, Any]] = {}  # table → column → mapping
        for change in changes:
            try:
                if len(change.key_text().encode()) > MAX_ID_BYTES:
                    raise ValueError(f"the key is longer than {MAX_ID_BYTES} bytes")
                for column in change.row or {}:
                    check_column(column)
            except ValueError as exc:
                bad.append((change.seq, f"{change.table} seq {change.seq}: {exc}"))
                continue
            columns = wanted.setdefault(change.table, {})
            for column in change.row or {}:
                if column not in columns:
                    columns[column] = field_mapping(change.column_types.get(column))
        fields: dict[str, dict[str, Any]] = {}
        for table, columns in wanted.items():
            try:
                fields[table] = self._ensure_fields(index_name(prefix, table), table, columns)
            except _TableRefusedError as exc:
                bad += [(c.seq, f"{table}: {exc}") for c in changes if c.table == table]
        lines: list[str] = []
        sent: list[RowChange] = []
        bad_seqs = {seq for seq, _ in bad}
        for change in changes:
            if change.seq in bad_seqs or change.table not in fields:
                continue
            try:
                doc = document(change, fields[change.table])
                lines += bulk_lines(index_name(prefix, change.table), change, doc)
            except ValueError as exc:
                bad.append((change.seq, f"{change.table} seq {change.seq}: {exc}"))
                continue
            sent.append(change)
        if bad:
            # As the other sinks: nothing written; the route dead-letters these and applies
            # the rest again.
            seqs = list(dict.fromkeys(seq for seq, _ in bad))
            raise ChangesRejected(seqs, "; ".join(reason for _, reason in bad))
        self._bulk(lines, sent)

    def _bulk(self, lines: list[str], sent: Sequence[RowChange]) -> None:
        """POST the bulk body and map its items' errors (module doc: errors)."""
        body = ("\n".join(lines) + "\n").encode()
        resp = self._request(
            "POST", "/_bulk", content=body, headers={"Content-Type": "application/x-ndjson"}
        )
        if resp.status_code >= 300:
            raise SinkError(f"opensearch: _bulk answered {resp.status_code}: {resp.text[:500]}")
        answer = resp.json()
        if not answer.get("errors"):
            return
        items = answer.get("items", [])
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
        if rejected:
            seqs = list(dict.fromkeys(seq for seq, _ in rejected))
            raise ChangesRejected(seqs, "; ".join(reason for _, reason in rejected))

    def close(self) -> None:
        """Close the HTTP client's connections."""
        self._client.close()


class _TableRefusedError(SinkError):
    """OpenSearch refused a table's index or mapping for good (its changes are rejected)."""
