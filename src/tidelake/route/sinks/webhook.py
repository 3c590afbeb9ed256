"""The webhook sink: each batch of a route POSTed as one signed JSON document.

Request
-------
``POST <url>`` with the body (UTF-8 JSON, written once per batch: every try sends the same
bytes)::

    {"route": "orders-hook",
     "batch_id": "<the idempotency key>",
     "changes": [{"table": "shop.orders", "op": "upsert", "key": {"id": 7},
                  "row": {"id": 7, "status": "paid", "amount": "12.50"},
                  "position": "00000000000000000042.00000000000000000001",
                  "seq": 1042, "commit_ts_ms": 1718000000000,
                  "column_types": {"amount": "decimal(10,2)"}}, ...]}

``op`` is ``upsert`` (``row`` holds the whole row), ``delete`` (``row`` is null) or
``schema``: a DDL statement of the source, in stream order between the rows, with ``key``
``{}``, ``row`` null, ``statement`` the source's text and ``operations`` what it does to the
route's tables, as the lake parses it (``lake/ddl.py``), columns named as the route's rows
name them::

    {"table": "shop.orders", "op": "schema", "key": {}, "row": null, "position": "…",
     "seq": 1077, "statement": "ALTER TABLE orders ADD COLUMN note varchar(40) DEFAULT 'n/a'",
     "operations": [{"op": "add_column", "table": "shop.orders",
                     "column": {"name": "note", "source_type": "varchar(40)",
                                "default": {"kind": "value", "text": "n/a"}}}]}

An operation's ``op`` is one of ``create_table`` (``columns``, ``primary_key``, ``like``),
``add_column`` (``column``; ``default.kind`` ``value`` with the text existing rows take —
null is NULL —, ``current_timestamp``: the statement's ``commit_ts_ms``, or ``expression``:
computed per row by the source), ``drop_column`` (``name``), ``rename_column`` (``old``,
``new``), ``modify_column`` (``name``, ``source_type``, ``new_name``), ``rename_table``
(``to``), ``truncate_table``, ``drop_table`` and ``drop_database`` (``database``). A receiver
keeping rows applies a truncate or drop at position P to the rows below P only. Values a
JSON number or string cannot hold exactly are text: a DECIMAL is its exact decimal string,
bytes are ``0x`` and hex, times are ISO 8601; ``column_types`` names the source SQL type of
each column when the producer sent it, so a receiver can read such text back.

Headers (the configured extra headers are sent too, but never replace these):

- ``Content-Type: application/json``;
- ``Idempotency-Key``: the ``batch_id``, SHA-256 hex of the route name and the
  ``(seq, position, table, op, key)`` of every change of the batch. It is the same on every
  try and on every redelivery of the same changes, and differs for any other batch;
- ``Tidelake-Route``: the route's name;
- ``Tidelake-Timestamp``: Unix time in whole seconds when this try was sent;
- ``Tidelake-Signature: sha256=<hex>`` (only when the route has a signing key): the
  lower-case hex HMAC-SHA256, keyed with the UTF-8 bytes of the signing key, of the bytes
  ``<Tidelake-Timestamp value> + "." + <the exact body bytes>``.

Verifying (what :func:`verify_signature` does): read the raw body before parsing it, compute
``hmac_sha256(key, f"{timestamp}.".encode() + body)``, compare it in constant time with the
hex after ``sha256=`` (the header may list several comma-separated ``sha256=`` values, one
per key during a key rotation: any match is enough), and refuse a timestamp too far from
your clock (5 minutes is usual) so a captured request cannot be replayed later. Each try is
signed again with a fresh timestamp; the body and the idempotency key do not change.

What a receiver must do
-----------------------
Delivery is **at least once**: a batch the receiver stored may arrive again (its answer was
lost, the route restarted before acknowledging), with the same ``Idempotency-Key``; a receiver
may skip a key it has already applied, but it must in any case apply changes **by position**:
keep, per ``(table, key)``, the greatest ``position`` seen (positions are fixed-width text,
compare them as strings) and ignore a change whose position is not greater, remembering the
position of a delete too. That way a redelivered batch, a replay and retries can never move
a row backwards or bring a deleted row back. Answer any 2xx once the batch is durable.

Answers and retries
-------------------
Any 2xx is success. A connection error, a timeout (``timeout_s`` per try), 408, 429 and any
5xx are retried: up to ``max_tries`` tries in all, waiting between them with the project's
exponential back-off with jitter (:func:`tidelake.retry.backoff_s`, from ``backoff_s``,
doubling), never more than ``max_backoff_s``; a ``Retry-After`` (seconds or an HTTP date)
replaces that wait, capped at ``max_backoff_s`` too. Any other answer (a 4xx, or a 3xx:
redirects are not followed) is permanent and not retried. When the tries run out or the
answer is permanent, :meth:`WebhookSink.apply` raises
:class:`~tidelake.route.change.ChangesRejected` for every change of the batch, its reason
naming the last status (or error) and the start of the answer's body, and the route
dead-letters them.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import email.utils
import hashlib
import hmac
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx
import orjson
import structlog

from tidelake.config import WebhookSinkConfig
from tidelake.errors import ConfigError
from tidelake.lake import ddl
from tidelake.retry import backoff_s
from tidelake.route.change import ChangesRejected, RowChange, scalar_text

log = structlog.get_logger(__name__)

SIGNATURE_HEADER = "Tidelake-Signature"
TIMESTAMP_HEADER = "Tidelake-Timestamp"
ROUTE_HEADER = "Tidelake-Route"
IDEMPOTENCY_HEADER = "Idempotency-Key"
#: The scheme prefix of each value in the signature header.
SIGNATURE_SCHEME = "sha256="
#: Statuses retried besides 5xx: Request Timeout and Too Many Requests.
RETRIED_STATUSES = frozenset({408, 429})
#: Characters of an answer's body quoted in a rejection's reason.
BODY_EXCERPT_CHARS = 200


def _json_default(value: Any) -> Any:
    """Values orjson does not write by itself: the sinks' text (``route.change.scalar_text``:
    exact DECIMAL, ``0x`` hex bytes), a duration in seconds, a set as a list."""
    text = scalar_text(value)
    if text is not None:
        return text
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)


def idempotency_key(route: str, changes: Sequence[RowChange]) -> str:
    """SHA-256 hex naming the batch ``changes`` of ``route``: the same for the same changes
    (a retry, a redelivery), different for any other batch (another route, one change more
    or less, another order)."""
    material = [
        [c.seq, c.position, c.table, c.kind, sorted((k, str(v)) for k, v in c.key.items())]
        for c in changes
    ]
    digest = hashlib.sha256(route.encode())
    digest.update(b"\n")
    digest.update(orjson.dumps(material))
    return digest.hexdigest()


def _operation_json(op: ddl.Operation) -> dict[str, Any]:
    """One DDL operation as the body carries it (module docstring)."""

    def value(v: Any) -> Any:
        if isinstance(v, ddl.TableName):
            return v.table_id
        if isinstance(v, ddl.ColumnSpec | ddl.Default):
            return {f.name: value(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, tuple):
            return [value(x) for x in v]
        return v

    name = re.sub(r"(?<!^)(?=[A-Z])", "_", type(op).__name__).lower()
    return {"op": name} | {f.name: value(getattr(op, f.name)) for f in dataclasses.fields(op)}


def _change_json(c: RowChange) -> dict[str, Any]:
    item: dict[str, Any] = {
        "table": c.table,
        "op": c.kind,
        "key": c.key,
        "row": c.row,
        "position": c.position,
        "seq": c.seq,
        "commit_ts_ms": c.commit_ts_ms,
    }
    if c.kind == "schema":
        item["statement"] = c.statement
        item["operations"] = [_operation_json(op) for op in c.operations]
    else:
        item["column_types"] = c.column_types
    return item


def encode_batch(route: str, batch_id: str, changes: Sequence[RowChange]) -> bytes:
    """The request body of one batch (module docstring)."""
    document = {"route": route, "batch_id": batch_id, "changes": [_change_json(c) for c in changes]}
    return orjson.dumps(document, default=_json_default, option=orjson.OPT_NON_STR_KEYS)


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """The value of the signature header: ``sha256=`` and the HMAC-SHA256 hex of
    ``timestamp + "." + body`` keyed with ``secret``."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return SIGNATURE_SCHEME + mac.hexdigest()


def _header(headers: Mapping[str, str], name: str) -> str | None:
    """``headers[name]`` looked up without regard to case (HTTP header names have none)."""
    wanted = name.lower()
    for key, value in headers.items():
        if key.lower() == wanted:
            return value
    return None


def verify_signature(
    secret: str,
    headers: Mapping[str, str],
    body: bytes,
    tolerance_s: float | None = 300.0,
    *,
    now: float | None = None,
) -> bool:
    """True when ``body`` and ``headers`` carry a valid signature made with ``secret``.

    ``body`` must be the raw bytes received. With ``tolerance_s`` set, the timestamp header
    must also lie within that many seconds of ``now`` (default: the clock), against replays;
    ``None`` skips that check. A missing or malformed header is False, never an error.
    """
    timestamp = _header(headers, TIMESTAMP_HEADER)
    sent = _header(headers, SIGNATURE_HEADER)
    if timestamp is None or sent is None:
        return False
    timestamp = timestamp.strip()
    try:
        sent_at = int(timestamp)
    except ValueError:
        return False
    if tolerance_s is not None:
        clock = time.time() if now is None else now
        if abs(clock - sent_at) > tolerance_s:
            return False
    expected = signature(secret, timestamp, body)
    candidates = [v.strip() for v in sent.split(",")]
    # compare_digest on every candidate: no early exit that would time which one matched.
    matches = [hmac.compare_digest(expected.encode(), c.encode()) for c in candidates]
    return any(matches)


def _retry_after_s(value: str | None, now: float) -> float | None:
    """Seconds a ``Retry-After`` value asks to wait (delta seconds or an HTTP date)."""
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return max(0.0, when.timestamp() - now)


def _excerpt(text: str) -> str:
    """The start of an answer's body on one line, for a rejection's reason."""
    flat = " ".join(text.split())
    if len(flat) <= BODY_EXCERPT_CHARS:
        return flat
    return flat[: BODY_EXCERPT_CHARS - 1] + "…"


class WebhookSink:
    """POSTs each batch of route ``route`` to ``config.url`` (module docstring).

    ``sleep`` waits between tries and ``clock`` gives the signature's timestamp (tests pass
    their own, so nothing sleeps); ``transport`` replaces httpx's network transport.
    """

    kind = "webhook"

    def __init__(
        self,
        route: str,
        config: WebhookSinkConfig,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        try:
            url = httpx.URL(config.url)
        except httpx.InvalidURL as exc:
            raise ConfigError(f"webhook url {config.url!r}: {exc}") from exc
        if url.scheme not in ("http", "https") or not url.host:
            raise ConfigError(f"webhook url {config.url!r}: needs http:// or https:// and a host")
        self.route = route
        self.config = config
        self._url = url
        self._secret = config.signing_key_value()
        self._sleep = sleep
        self._clock = clock
        self._client = httpx.Client(
            timeout=httpx.Timeout(config.timeout_s),
            follow_redirects=False,
            transport=transport,
        )

    def apply(self, changes: Sequence[RowChange]) -> None:
        """POST ``changes`` as one batch until a 2xx answer; :class:`ChangesRejected` for all
        of them when the answer is permanent or the tries run out."""
        if not changes:
            return
        batch_id = idempotency_key(self.route, changes)
        body = encode_batch(self.route, batch_id, changes)
        seqs = [c.seq for c in changes]
        tries = self.config.max_tries
        for attempt in range(1, tries + 1):
            reason, retryable, retry_after = self._post(batch_id, body)
            if reason is None:
                return
            if not retryable:
                raise ChangesRejected(seqs, f"webhook answered {reason} (not retried)")
            if attempt == tries:
                raise ChangesRejected(
                    seqs, f"webhook failed {tries} tr{'y' if tries == 1 else 'ies'}: {reason}"
                )
            wait = self._wait_s(attempt, retry_after)
            log.warning(
                "retrying",
                what=f"webhook POST of route {self.route}",
                attempt=attempt,
                wait_s=round(wait, 3),
                error=reason,
                changes=len(changes),
            )
            self._sleep(wait)

    def _headers(self, batch_id: str, body: bytes) -> dict[str, str]:
        """The request headers of one try (signed now)."""
        headers = dict(self.config.headers)
        # The configured headers first: the protocol's own replace any of the same name.
        for name in (
            "content-type",
            IDEMPOTENCY_HEADER,
            ROUTE_HEADER,
            TIMESTAMP_HEADER,
            SIGNATURE_HEADER,
        ):
            for key in [k for k in headers if k.lower() == name.lower()]:
                del headers[key]
        timestamp = str(int(self._clock()))
        headers["Content-Type"] = "application/json"
        headers[IDEMPOTENCY_HEADER] = batch_id
        headers[ROUTE_HEADER] = self.route
        headers[TIMESTAMP_HEADER] = timestamp
        if self._secret is not None:
            headers[SIGNATURE_HEADER] = signature(self._secret, timestamp, body)
        return headers

    def _post(self, batch_id: str, body: bytes) -> tuple[str | None, bool, float | None]:
        """One try: ``(None, _, _)`` on success, else ``(reason, retryable, retry_after_s)``."""
        try:
            response = self._client.post(
                self._url, content=body, headers=self._headers(batch_id, body)
            )
        except httpx.UnsupportedProtocol as exc:
            return f"{type(exc).__name__}: {exc}", False, None
        except httpx.RequestError as exc:  # connect, read and write errors, timeouts
            return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__, True, None
        status = response.status_code
        if 200 <= status < 300:
            return None, False, None
        reason = f"HTTP {status}"
        excerpt = _excerpt(response.text)
        if excerpt:
            reason += f": {excerpt}"
        retryable = status in RETRIED_STATUSES or 500 <= status < 600
        retry_after = _retry_after_s(response.headers.get("retry-after"), self._clock())
        return reason, retryable, retry_after

    def _wait_s(self, attempt: int, retry_after: float | None) -> float:
        """The pause after failed try ``attempt``: the answer's Retry-After, else the
        jittered exponential back-off; at most ``max_backoff_s`` either way."""
        cap = self.config.max_backoff_s
        if retry_after is not None:
            return min(retry_after, cap)
        wait = backoff_s(attempt, first_wait_s=self.config.backoff_s, max_wait_s=cap)
        return min(wait, cap)

    def close(self) -> None:
        """Close the HTTP client and its connections."""
        self._client.close()
