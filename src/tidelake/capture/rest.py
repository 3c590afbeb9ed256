"""``tidelake capture rest``: an HTTP API's records, polled by an ``updated_since`` cursor, into
the bus as the change events of one table (docs/rest-source.md).

Each poll asks ``capture.rest.url`` for the records whose cursor (``cursor_field``, say
``updated_at``) is at or after the saved cursor (``cursor_param``: inclusive, so records that
share the last cursor value are never lost), follows the pages (``page``/``limit``
parameters, a ``next`` link in the body or the ``Link`` header, or none), and publishes every
new record version as tidelake's own canal-json (``capture/canal.py``): an INSERT (an upsert:
an API does not tell a create from an update), or a DELETE when ``deleted_field`` is true.

**Position.** One component: the cursor as an integer (a timestamp in nanoseconds since 1970
UTC, or an integer cursor as is). Records of one cursor value share it; the ingest drops
only what is *strictly* below its per-table watermark and collapses one key by position, so
a record that appears later with the same cursor value as records already applied (and a key
sorting before theirs) still lands, which a tie-breaking ordinal would not allow. The same
record version always gets the same position on a re-poll, a newer version (a greater
cursor) a greater one. Within a poll records go out in (cursor, key) order.

**Message id.** ``rest:<position>:<digest of (table, key, position)>``: the same record
version published again after a crash is dropped by JetStream inside the duplicate window,
and beyond it applied again at the same position by the ingest, which changes nothing.

**Saving.** The state (the raw cursor text to send, its position, and the keys already
published at that position) is written atomically (``capture/position.py``) only after every
message of the poll is acknowledged. A crash anywhere re-polls from the saved cursor.

**Values.** The body is parsed with every JSON number kept as its literal text (no float
rounding), and each value goes as canal-json text: strings as they are, numbers as written,
booleans ``true``/``false``, objects and arrays as compact JSON text, null as NULL. A field's
type is ``capture.rest.column_types[field]`` or ``longtext`` (the exact text).

**What the rules rest on.** There is no one producer to read here, so the HTTP and JSON
standards are the primary sources, and the integration test (tests/integration/capture/
test_rest_capture.py) runs each against a real HTTP server: a JSON number is a decimal
literal of any length (RFC 8259 §6), kept as written rather than read into a double; a
``Link`` header's ``rel="next"`` names the next page (RFC 8288 §3); ``If-None-Match`` with
the last ``ETag`` is answered ``304 Not Modified`` when nothing changed (RFC 9110 §13.1.2,
§15.4.5). A cursor timestamp is ISO 8601 (Python's ``datetime.fromisoformat``), its
fraction read to the nanosecond: digits past the ninth are left out of the position (two
versions of a key whose cursors differ only there would share one), never out of a value,
and the cursor text is sent back as it came.

Test-only hook: ``TEST_TIDELAKE_REST_CRASH_AT=after_publish`` SIGKILLs the process after a
poll's messages are acknowledged and before its cursor is saved.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import hashlib
import importlib.util
import json
import os
import re
import signal
import time
from collections.abc import Awaitable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin

import orjson
import structlog

from tidelake.capture.bus_publisher import open_publisher
from tidelake.capture.canal import CanalEncoder, Outgoing, subject_for
from tidelake.capture.position import PositionStore
from tidelake.capture.publisher import Acked
from tidelake.config import Config, RestSourceConfig
from tidelake.errors import ConfigError, Terminal, TidelakeError, Transient
from tidelake.events import Position
from tidelake.names import table_id
from tidelake.retry import async_retrying

if TYPE_CHECKING:
    import httpx

log = structlog.get_logger(__name__)

SOURCE = "rest"
CRASH_HOOK_ENV = "TEST_TIDELAKE_REST_CRASH_AT"
CRASH_POINTS = frozenset({"after_publish"})
#: The type of a field ``column_types`` does not name: its exact JSON text.
DEFAULT_TYPE = "longtext"
STATE_VERSION = 1
_POSITION_LIMIT = 10**20
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
#: ``HH:MM:SS`` then a fraction of any length (Python keeps 6 digits; we keep 9).
_FRACTION = re.compile(r"(\d{2}:\d{2}:\d{2})[.,](\d+)")
_TRUE = frozenset({"1", "true", "t", "yes", "y"})


class RestSourceError(TidelakeError, Terminal):
    """The API or the configuration does not allow the poll (a 4xx, a body of the wrong
    shape, a record without its cursor)."""


class RestUnavailableError(TidelakeError, Transient):
    """The API cannot be reached now (connection error, timeout, 5xx, 408, 429)."""


# -- values ------------------------------------------------------------------------------------


class RawNumber(str):
    """A JSON number kept as its literal text (``parse_body``): no float rounding."""

    __slots__ = ()


def _reject_constant(name: str) -> Any:
    raise RestSourceError(f"the body holds {name}, which is not JSON")


def parse_body(text: str | bytes) -> Any:
    """The JSON body, every number a :class:`RawNumber`."""
    try:
        return json.loads(
            text, parse_float=RawNumber, parse_int=RawNumber, parse_constant=_reject_constant
        )
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RestSourceError(f"the response is not JSON: {exc}") from exc


def json_text(value: Any) -> str:
    """Compact JSON text of a parsed value, numbers as they were written."""
    if isinstance(value, RawNumber):
        return str.__str__(value)
    if isinstance(value, dict):
        items = (f"{json.dumps(k, ensure_ascii=False)}:{json_text(v)}" for k, v in value.items())
        return "{" + ",".join(items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(json_text(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def value_text(value: Any) -> str | None:
    """A record value as canal-json text (module docstring, Values)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, RawNumber):
        return str.__str__(value)
    if isinstance(value, str):
        return value
    if isinstance(value, dict | list):
        return json_text(value)
    return str(value)


def is_true(value: Any) -> bool:
    """A soft-delete flag: JSON true, a non-zero number, or ``"true"``/``"1"``/``"yes"``."""
    if isinstance(value, bool):
        return value
    if isinstance(value, RawNumber):
        return Decimal(value) != 0
    if isinstance(value, str):
        return value.strip().lower() in _TRUE
    return False


# -- cursor and position -------------------------------------------------------------------------


def timestamp_ns(text: str) -> int:
    """Nanoseconds since 1970-01-01 UTC of an ISO-8601 timestamp (no zone = UTC)."""
    raw = text.strip()
    fraction_ns = 0
    match = _FRACTION.search(raw)
    if match:
        digits = match.group(2)
        fraction_ns = int(digits[:9].ljust(9, "0"))
        raw = raw[: match.end(1)] + raw[match.end(2) :]
    try:
        parsed = dt.datetime.fromisoformat(raw)
    except ValueError as exc:
        raise RestSourceError(f"cursor {text!r:.80} is not an ISO-8601 timestamp") from exc
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    micros = (parsed - _EPOCH) // dt.timedelta(microseconds=1)
    return micros * 1000 + fraction_ns


def cursor_position(value: Any, cursor_type: str) -> int:
    """The position component of a cursor value (module docstring, Position)."""
    if value is None or isinstance(value, bool | dict | list):
        raise RestSourceError(f"cursor value {value!r:.80} is not a {cursor_type}")
    text = str.__str__(value) if isinstance(value, str) else str(value)
    if cursor_type == "integer":
        if not text.strip().isdigit():
            raise RestSourceError(f"cursor value {text!r:.80} is not a non-negative integer")
        number = int(text)
    else:
        number = timestamp_ns(text)
    if not 0 <= number < _POSITION_LIMIT:
        raise RestSourceError(f"cursor value {text!r:.80} is out of range for a position")
    return number


def message_id(table: str, key: Iterable[str | None], position: int) -> str:
    """The ``Nats-Msg-Id`` of one record version: stable across re-polls and restarts."""
    digest = hashlib.sha256(orjson.dumps([table, list(key), position])).hexdigest()[:32]
    return f"{SOURCE}:{position}:{digest}"


def dig(body: Any, path: str | None) -> Any:
    """``body`` at a dotted path (``"data"``, ``"result.items"``); None when absent."""
    if not path:
        return body
    node = body
    for part in path.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


# -- what a poll publishes ------------------------------------------------------------------------


@dataclass(frozen=True)
class RestState:
    """The saved cursor: its raw text (sent as ``cursor_param``), its position, and the keys
    already published at that position (skipped when the inclusive re-poll returns them)."""

    table: str
    cursor: str | None = None
    position: int | None = None
    keys: frozenset[str] = frozenset()

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "source": SOURCE,
            "table": self.table,
            "cursor": self.cursor,
            "position": self.position,
            "keys_at_position": sorted(self.keys),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RestState:
        position = data.get("position")
        return cls(
            table=str(data.get("table") or ""),
            cursor=data.get("cursor"),
            position=int(position) if position is not None else None,
            keys=frozenset(data.get("keys_at_position") or ()),
        )


@dataclass(frozen=True)
class Change:
    """One record version to publish."""

    position: int
    key_json: str
    key: tuple[str | None, ...]
    cursor: str
    deleted: bool
    row: dict[str, str | None]


@dataclass
class Plan:
    """A poll's records, sorted into what to publish and what not."""

    changes: list[Change] = field(default_factory=list)
    #: Already published at the saved position (the inclusive re-poll returns them).
    seen: int = 0
    #: Below the saved position: the API returned an older version than the saved cursor.
    stale: int = 0


def plan(
    records: Iterable[Mapping[str, Any]],
    rcfg: RestSourceConfig,
    state: RestState,
    where: str = "capture.rest",
) -> Plan:
    """The changes of a poll in (cursor, key) order, one per record version (``where``: the
    settings' place in the config, for messages)."""
    out = Plan()
    by_identity: dict[tuple[int, str], Change] = {}
    for record in records:
        if rcfg.cursor_field not in record or record[rcfg.cursor_field] is None:
            raise RestSourceError(
                f"a record has no cursor field {rcfg.cursor_field!r} ({where}.cursor_field)"
            )
        position = cursor_position(record[rcfg.cursor_field], rcfg.cursor_type)
        key = tuple(value_text(record.get(k)) for k in rcfg.primary_key)
        key_json = orjson.dumps(key).decode()
        if state.position is not None:
            if position < state.position:
                out.stale += 1
                continue
            if position == state.position and key_json in state.keys:
                out.seen += 1
                continue
        cursor_value = record[rcfg.cursor_field]
        deleted = rcfg.deleted_field is not None and is_true(record.get(rcfg.deleted_field))
        # The last copy of one version wins (a record read twice while pages shifted).
        by_identity[(position, key_json)] = Change(
            position=position,
            key_json=key_json,
            key=key,
            cursor=value_text(cursor_value) or "",
            deleted=deleted,
            row={name: value_text(v) for name, v in record.items()},
        )
    out.changes = [by_identity[k] for k in sorted(by_identity)]
    return out


def next_state(state: RestState, changes: list[Change]) -> RestState:
    """The state to save once every change of a poll is acknowledged."""
    if not changes:
        return state
    last = changes[-1]
    keys = {c.key_json for c in changes if c.position == last.position}
    if state.position == last.position:
        keys |= state.keys
    return dataclasses.replace(
        state, cursor=last.cursor, position=last.position, keys=frozenset(keys)
    )


def rest_subject(rcfg: RestSourceConfig, database: str, table: str) -> str:
    """``<subject_prefix>.<database>.<table>``, names escaped as for every capture."""
    return rcfg.subject_prefix + subject_for(database, table).removeprefix("cdc")


def encode(change: Change, rcfg: RestSourceConfig, encoder: CanalEncoder) -> Outgoing:
    """The canal-json message of one change (``capture/canal.py``, with its own msg id)."""
    assert rcfg.database is not None
    assert rcfg.table is not None
    types = {name: rcfg.column_types.get(name, DEFAULT_TYPE) for name in change.row}
    commit_ms = (
        change.position // 1_000_000 if rcfg.cursor_type == "timestamp" else int(time.time() * 1000)
    )
    out = encoder.row(
        database=rcfg.database,
        table=rcfg.table,
        pk=rcfg.primary_key,
        kind="DELETE" if change.deleted else "INSERT",
        data=change.row,
        old=None,
        types=types,
        position=Position((change.position,)),
        commit_ts_ms=commit_ms,
    )
    return dataclasses.replace(
        out,
        subject=rest_subject(rcfg, rcfg.database, rcfg.table),
        msg_id=message_id(out.table, change.key, change.position),
    )


# -- the poller ---------------------------------------------------------------------------------


@dataclass
class RestSourceStats:
    """What one poller did since it started (``/metrics``: ``runtime/live_metrics.py``)."""

    polls: int = 0
    pages: int = 0
    not_modified: int = 0
    records: int = 0
    published: int = 0
    duplicates: int = 0
    seen: int = 0
    stale: int = 0
    saves: int = 0
    #: Polls that failed (``capture/source_runner.py`` counts them and polls again), by kind.
    errors: dict[str, int] = field(default_factory=dict)
    #: When the last poll ended, and the last one that succeeded (Unix ms; 0 = not yet).
    last_poll_ms: int = 0
    last_success_ms: int = 0
    #: The saved cursor's position (nanoseconds since 1970 or the integer), None = none yet.
    position: int | None = None
    cursor_type: str = "timestamp"
    paused: bool = False


def _crash_point(point: str) -> None:
    if os.environ.get(CRASH_HOOK_ENV) == point:
        log.warning("test crash hook: SIGKILL", point=point)
        os.kill(os.getpid(), signal.SIGKILL)


class RestSource:
    """Polls one endpoint every ``interval_s`` until :meth:`request_stop` (or once).

    ``capture.rest`` by default; with ``name`` and ``rcfg``, the source ``sources.<name>``
    (its cursor in a file of its own: :meth:`RestSourceConfig.state_path`)."""

    def __init__(
        self,
        cfg: Config,
        bus_url: str | None = None,
        *,
        name: str | None = None,
        rcfg: RestSourceConfig | None = None,
    ) -> None:
        if (name is None) != (rcfg is None):
            raise ValueError("a named source takes its settings (rcfg), and only it")
        rcfg = rcfg if rcfg is not None else cfg.capture.rest
        where = f"sources.{name}" if name is not None else "capture.rest"
        if not rcfg.url:
            raise ConfigError(f"{where}.url is not set")
        if not rcfg.url.startswith(("http://", "https://")):
            raise ConfigError(f"{where}.url: not an http(s) URL: {rcfg.url!r}")
        if not rcfg.database or not rcfg.table:
            raise ConfigError(f"{where}: set database and table (the table the records become)")
        if importlib.util.find_spec("httpx") is None:
            raise ConfigError("capture rest needs httpx: pip install 'tidelake[capture]'")
        crash = os.environ.get(CRASH_HOOK_ENV)
        if crash and crash not in CRASH_POINTS:
            raise ConfigError(f"{CRASH_HOOK_ENV} must be one of {sorted(CRASH_POINTS)}")
        self.cfg = cfg
        self.rcfg = rcfg
        self.name = name
        self.where = where
        self.bus_url = bus_url or cfg.bus.url
        self.table_id = table_id(rcfg.database, rcfg.table)
        self.store = PositionStore(rcfg.state_path(cfg.home, name))
        self.stats = RestSourceStats(cursor_type=rcfg.cursor_type)
        self._encoder = CanalEncoder(SOURCE)
        self._stop = asyncio.Event()
        #: (first request's URL, its ETag): sent as If-None-Match when the same URL is asked
        #: again. Kept only after a poll of one page: page 1 unchanged says nothing of page 2.
        self._etag: tuple[str, str] | None = None

    def request_stop(self) -> None:
        self._stop.set()

    def load_state(self) -> RestState:
        saved = self.store.load()
        if saved is None:
            return RestState(table=self.table_id, cursor=self.rcfg.initial_cursor)
        state = RestState.from_dict(saved)
        if state.table != self.table_id:
            raise ConfigError(
                f"{self.store.path} holds the cursor of {state.table}, not {self.table_id}: "
                f"set {self.where}.state_file to a file of this table"
            )
        self.stats.position = state.position
        return state

    # -- HTTP ---------------------------------------------------------------------------------

    def client(self) -> httpx.AsyncClient:
        """The HTTP client of the polls (bearer token, ``headers``, ``timeout_s``)."""
        import httpx

        headers = {"Accept": "application/json", **self.rcfg.headers}
        token = self.rcfg.resolved_token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return httpx.AsyncClient(
            timeout=self.rcfg.timeout_s, headers=headers, follow_redirects=True
        )

    async def _get(
        self,
        client: httpx.AsyncClient,
        url: str,
        params: Mapping[str, str] | None,
        headers: Mapping[str, str],
    ) -> httpx.Response:
        import httpx

        async for attempt in async_retrying(
            f"GET {url}", deadline_s=self.rcfg.give_up_s, first_wait_s=0.2, max_wait_s=10.0
        ):
            with attempt:
                try:
                    response = await client.get(url, params=params, headers=dict(headers))
                except httpx.TransportError as exc:  # connect, read, write, pool, timeouts
                    raise RestUnavailableError(f"GET {url}: {type(exc).__name__}: {exc}") from exc
                status = response.status_code
                if status in (408, 429) or status >= 500:
                    raise RestUnavailableError(f"GET {url}: HTTP {status}")
                if status >= 400:
                    raise RestSourceError(f"GET {url}: HTTP {status}: {response.text[:200]!r}")
                return response
        raise AssertionError("unreachable: tenacity either returns or raises")

    def _first_params(self, state: RestState) -> dict[str, str]:
        rcfg = self.rcfg
        params = dict(rcfg.params)
        if state.cursor is not None:
            params[rcfg.cursor_param] = state.cursor
        if rcfg.pagination != "none" and rcfg.limit_param:
            params[rcfg.limit_param] = str(rcfg.limit)
        if rcfg.pagination == "page":
            params[rcfg.page_param] = str(rcfg.first_page)
        return params

    def _records(self, body: Any, url: str) -> list[dict[str, Any]]:
        records = dig(body, self.rcfg.records_path)
        if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
            where = self.rcfg.records_path or "the body"
            raise RestSourceError(f"GET {url}: {where} is not a list of objects")
        return records

    def _next_url(self, body: Any, response: httpx.Response) -> str | None:
        link = dig(body, self.rcfg.next_field) if self.rcfg.next_field else None
        if not (isinstance(link, str) and link):
            link = response.links.get("next", {}).get("url")
        return urljoin(str(response.url), link) if link else None

    async def fetch(self, client: httpx.AsyncClient, state: RestState) -> list[dict[str, Any]]:
        """Every record of one poll, all pages; ``[]`` on a 304."""
        rcfg = self.rcfg
        params = self._first_params(state)
        first_url = str(client.build_request("GET", rcfg.url or "", params=params).url)
        headers: dict[str, str] = {}
        if self._etag is not None and self._etag[0] == first_url:
            headers["If-None-Match"] = self._etag[1]
        out: list[dict[str, Any]] = []
        url: str = rcfg.url or ""
        query: dict[str, str] | None = params
        page = rcfg.first_page
        for number in range(1, rcfg.max_pages + 1):
            response = await self._get(client, url, query, headers)
            self.stats.pages += 1
            if response.status_code == 304:
                self.stats.not_modified += 1
                return []
            body = parse_body(response.content)
            records = self._records(body, str(response.url))
            out.extend(records)
            if number == 1:
                etag = response.headers.get("ETag")
                self._etag = (first_url, etag) if etag else None
            headers = {}
            if rcfg.pagination == "none":
                return out
            if rcfg.pagination == "page":
                if not records or (rcfg.limit_param and len(records) < rcfg.limit):
                    break
                page += 1
                query = {**params, rcfg.page_param: str(page)}
            else:
                nxt = self._next_url(body, response)
                if nxt is None:
                    break
                url, query = nxt, None
            # More than one page: the first one's ETag cannot vouch for the rest.
            self._etag = None
        else:
            raise RestSourceError(
                f"GET {rcfg.url}: more than {rcfg.max_pages} pages in one poll "
                f"({self.where}.max_pages; does the API ignore the page parameter?)"
            )
        return out

    # -- polls ----------------------------------------------------------------------------------

    def on_acked(self, acked: Acked) -> None:
        """The publisher's callback: one message stored in the bus."""
        self.stats.published += 1
        self.stats.duplicates += int(acked.duplicate)

    async def poll(self, client: httpx.AsyncClient, publisher: Any) -> int:
        """One poll: fetch, publish in order, wait for every PubAck, then save the cursor.
        Returns how many record versions were published."""
        state = self.load_state()
        records = await self.fetch(client, state)
        self.stats.polls += 1
        self.stats.last_poll_ms = int(time.time() * 1000)
        self.stats.records += len(records)
        planned = plan(records, self.rcfg, state, self.where)
        self.stats.seen += planned.seen
        self.stats.stale += planned.stale
        if planned.stale:
            log.warning(
                "rest: records older than the saved cursor skipped",
                count=planned.stale,
                cursor=state.cursor,
            )
        for change in planned.changes:
            out = encode(change, self.rcfg, self._encoder)
            await publisher.publish(out.subject, out.payload, out.msg_id, tag=change)
        await publisher.durable()
        if not planned.changes:
            return 0
        _crash_point("after_publish")
        new = next_state(state, planned.changes)
        self.store.save(new.to_dict())
        self.stats.saves += 1
        self.stats.position = new.position
        log.info(
            "rest poll",
            source=self.name or "capture.rest",
            table=self.table_id,
            published=len(planned.changes),
            cursor=new.cursor,
            pages=self.stats.pages,
        )
        return len(planned.changes)

    async def ensure_bus(self) -> None:
        """The streams (or topics) the source publishes to exist."""
        if self.cfg.bus.kind == "kafka":
            from tidelake.bus.kafka import ensure_topics

            await ensure_topics(self.cfg.bus)
            return
        from tidelake.bus.connection import connect
        from tidelake.bus.provision import ensure_streams

        nc = await connect(self.cfg.bus, self.bus_url)
        try:
            await ensure_streams(nc.jetstream(), self.cfg.bus)
        finally:
            await nc.close()

    async def run(self, *, once: bool = False) -> RestSourceStats:
        """Poll every ``interval_s`` until stopped (``once``: one poll)."""
        self.load_state()  # a wrong state file stops it before anything is published
        await self.ensure_bus()
        publisher = await open_publisher(self.cfg.bus, self.bus_url, on_acked=self.on_acked)
        try:
            async with self.client() as client:
                while not self._stop.is_set():
                    started = time.monotonic()
                    if not await until_stopped(self.poll(client, publisher), self._stop):
                        break
                    if once:
                        break
                    pause = self.rcfg.interval_s - (time.monotonic() - started)
                    if pause > 0:
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(self._stop.wait(), pause)
        finally:
            await publisher.close()
        return self.stats


async def until_stopped(work: Awaitable[Any], stop: asyncio.Event) -> bool:
    """Run ``work`` (one poll) until it ends or ``stop`` is set; True when it ended (its
    error raised). A stop cancels it — a poll retrying an unreachable API for up to
    ``give_up_s`` must not outlast a supervisor's stop grace — and that is safe: the cursor is
    saved only once every message of the poll is acknowledged, so the next start polls the
    same records again and the bus drops what comes again under the same ``Nats-Msg-Id``."""
    task = asyncio.ensure_future(work)
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if task.done():
        task.result()
        return True
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return False


def run_rest_source(cfg: Config, *, once: bool = False) -> RestSourceStats:
    """Run until SIGTERM or SIGINT (or one poll); the cursor is saved after each acked poll."""
    from tidelake.runtime.live_metrics import watch_poller

    source = RestSource(cfg)
    watch_poller("capture.rest", source.stats)  # /metrics of `capture rest` (metrics.port)

    async def main() -> RestSourceStats:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, source.request_stop)
        return await source.run(once=once)

    return asyncio.run(main())


def state_file(cfg: Config) -> Path:
    """Where ``capture rest`` saves its cursor."""
    return cfg.capture.rest.state_path(cfg.home)
