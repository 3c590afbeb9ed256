"""``tidelake source run NAME``: one managed source (``sources.<name>``), polled into the bus.

A source is a REST API polled as ``capture/rest.py`` describes (the same cursor, positions,
message ids and saving rule), with what a process that ``tidelake run`` supervises needs
around it:

* **Its own cursor.** ``<home>/capture/sources/<name>.cursor.json`` unless ``state_file`` says
  otherwise (``capture.rest`` keeps its per-table file); saved only once the bus acknowledged
  every message of the poll, so a ``kill -9`` anywhere re-polls from it and republishes the
  same versions under the same ``Nats-Msg-Id``, which JetStream drops.
* **The registry, every** :data:`REGISTRY_EVERY_S` **seconds** (``capture/source_registry.py``):
  paused, it stops polling (the cursor stays where it is, and resuming polls from it, so
  what changed meanwhile arrives once); removed, it exits; its settings changed (removed and
  added again), it exits too, for the supervisor to start it with the new ones. A registry
  written badly by hand is logged and the source goes on as it was.
* **A failing poll does not stop it.** The API unreachable past ``give_up_s``, a 4xx or a body
  of the wrong shape is counted (``tidelake_poller_errors_total``), logged and shown in the
  status, and the source polls again at its next interval; nothing is saved, so nothing is
  skipped. A bus failure or a cursor file of another table ends the process (the supervisor
  restarts it).
* **Its status**, ``<home>/capture/sources/<name>.status.json``, rewritten at each poll and
  each look at the registry: state, last poll, last success, last error, totals since the
  source's first run. ``tidelake source list`` and ``GET /api/sources`` read it with the
  cursor file (:func:`source_status`); a status not rewritten for :data:`DOWN_AFTER_S` while
  the source should run says it is down.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import structlog

from tidelake.capture.bus_publisher import open_publisher
from tidelake.capture.position import PositionStore
from tidelake.capture.rest import (
    RestSource,
    RestSourceError,
    RestSourceStats,
    RestState,
    RestUnavailableError,
    until_stopped,
)
from tidelake.capture.source_registry import SourceRegistry
from tidelake.config import Config, SourceConfig
from tidelake.errors import ConfigError
from tidelake.runtime import live_metrics as live
from tidelake.runtime.durable import write_atomic
from tidelake.runtime.metrics_server import beat

log = structlog.get_logger(__name__)

#: How often a running source reads the registry (paused? removed?) and rewrites its status.
REGISTRY_EVERY_S = 2.0
#: A status not rewritten for this long, while the source should run: its process is gone.
DOWN_AFTER_S = 15.0
STATUS_VERSION = 1
#: The totals a status carries across the source's restarts.
TOTALS = ("polls", "records", "published", "duplicates", "errors")


def status_path(cfg: Config, name: str) -> Path:
    """Where the source ``name`` writes its status."""
    return (cfg.home / "capture" / "sources" / f"{name}.status.json").resolve()


def _now_ms() -> int:
    return int(time.time() * 1000)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


class SourceRunner:
    """Polls the source ``name`` until stopped, removed, or (``once``) after one poll."""

    def __init__(self, cfg: Config, name: str, bus_url: str | None = None) -> None:
        self.cfg = cfg
        self.name = name
        self.settings = SourceRegistry(cfg).get(name)
        self.source = RestSource(cfg, bus_url, name=name, rcfg=self.settings)
        self.stats = self.source.stats
        self.stats.paused = self.settings.paused
        self.status_file = status_path(cfg, name)
        previous = _read_json(self.status_file) or {}
        carried = previous.get("totals") if previous.get("source") == name else None
        self._base = {k: int((carried or {}).get(k, 0)) for k in TOTALS}
        self._started_ms = _now_ms()
        self._last_error: tuple[int, str] | None = None
        live.watch_poller(name, self.stats)

    # -- status

    def _totals(self) -> dict[str, int]:
        s = self.stats
        now = {
            "polls": s.polls,
            "records": s.records,
            "published": s.published,
            "duplicates": s.duplicates,
            "errors": sum(s.errors.values()),
        }
        return {k: self._base[k] + now[k] for k in TOTALS}

    def write_status(self, state: str) -> None:
        """Rewrite the status file (a hint for operators: a failure is only logged)."""
        s = self.stats
        record = {
            "v": STATUS_VERSION,
            "source": self.name,
            "kind": self.settings.kind,
            "table": self.source.table_id,
            "pid": os.getpid(),
            "state": state,
            "started_at_ms": self._started_ms,
            "updated_at_ms": _now_ms(),
            "last_poll_ms": s.last_poll_ms or None,
            "last_success_ms": s.last_success_ms or None,
            "last_error": self._last_error[1] if self._last_error else None,
            "last_error_ms": self._last_error[0] if self._last_error else None,
            "totals": self._totals(),
        }
        try:
            write_atomic(self.status_file, orjson.dumps(record, option=orjson.OPT_INDENT_2))
        except OSError as exc:
            log.warning("source status not written", source=self.name, error=str(exc))

    def _state(self) -> str:
        if self.stats.paused:
            return "paused"
        if self._last_error and self._last_error[0] > self.stats.last_success_ms:
            return "failing"
        return "polling"

    # -- the registry

    def _look(self) -> str | None:
        """``removed``, ``changed``, or None (the paused state follows the registry)."""
        try:
            now = SourceRegistry(self.cfg).sources().get(self.name)
        except ConfigError as exc:  # written badly by hand: go on as before
            log.warning("source registry unreadable", source=self.name, error=str(exc))
            return None
        if now is None:
            return "removed"
        if now.model_copy(update={"paused": False}) != self.settings.model_copy(
            update={"paused": False}
        ):
            return "changed"
        if now.paused != self.stats.paused:
            self.stats.paused = now.paused
            log.info("source paused" if now.paused else "source resumed", source=self.name)
        return None

    # -- the loop

    async def _poll(self, client: Any, publisher: Any, *, once: bool) -> None:
        try:
            await self.source.poll(client, publisher)
        except (RestSourceError, RestUnavailableError) as exc:
            kind = "unavailable" if isinstance(exc, RestUnavailableError) else "refused"
            self.stats.errors[kind] = self.stats.errors.get(kind, 0) + 1
            self._last_error = (_now_ms(), str(exc)[:500])
            if once:
                raise
            log.warning(
                "source poll failed; polling again at the next interval",
                source=self.name,
                error=str(exc)[:500],
                kind=kind,
            )
        else:
            self.stats.last_success_ms = _now_ms()

    async def run(self, stop: asyncio.Event, *, once: bool = False) -> RestSourceStats:
        """Poll every ``interval_s`` (paused: not at all) until ``stop`` is set or the source
        is removed; ``once``: one poll (none when paused), then return."""
        self.source.load_state()  # a cursor file of another table stops it before anything
        await self.source.ensure_bus()
        publisher = await open_publisher(
            self.cfg.bus, self.source.bus_url, on_acked=self.source.on_acked
        )
        end = "stopped"
        log.info("source started", source=self.name, table=self.source.table_id)
        try:
            async with self.source.client() as client:
                next_poll = time.monotonic()
                looked = time.monotonic()
                self.write_status(self._state())
                while not stop.is_set():
                    beat()  # /healthz: the loop turns at least every REGISTRY_EVERY_S
                    if time.monotonic() - looked >= REGISTRY_EVERY_S:
                        looked = time.monotonic()
                        change = self._look()
                        if change is not None:
                            log.info(f"source {change}; stopping", source=self.name)
                            end = "removed" if change == "removed" else "stopped"
                            break
                        self.write_status(self._state())
                    if once and self.stats.paused:
                        break
                    if not self.stats.paused and time.monotonic() >= next_poll:
                        started = time.monotonic()
                        if not await until_stopped(self._poll(client, publisher, once=once), stop):
                            break  # stopped mid-poll (rest.until_stopped)
                        next_poll = started + self.settings.interval_s
                        self.write_status(self._state())
                        if once:
                            break
                    wait = REGISTRY_EVERY_S - (time.monotonic() - looked)
                    if not self.stats.paused:
                        wait = min(wait, next_poll - time.monotonic())
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), max(wait, 0.01))
        finally:
            with contextlib.suppress(Exception):
                await publisher.close()
            self.write_status(end)
        log.info("source stopped", source=self.name, state=end, **self._totals())
        return self.stats


# -- what operators see: list, API -------------------------------------------------------------


@dataclass
class SourceStatus:
    """One source as ``tidelake source list`` and ``GET /api/sources`` show it."""

    name: str
    kind: str
    url: str
    table: str
    paused: bool
    #: ``not started``, ``polling``, ``failing``, ``paused``, ``stopped``, ``removed``, ``down``
    state: str
    cursor: str | None = None
    position: int | None = None
    #: The cursor as an ISO-8601 time (a timestamp cursor).
    cursor_time: str | None = None
    last_poll_ms: int | None = None
    last_success_ms: int | None = None
    last_error: str | None = None
    last_error_ms: int | None = None
    polls: int = 0
    records: int = 0
    published: int = 0
    duplicates: int = 0
    errors: int = 0
    pid: int | None = None
    updated_at_ms: int | None = None


def source_status(cfg: Config, name: str, source: SourceConfig) -> SourceStatus:
    """The source's settings in effect, its saved cursor and what its process last wrote."""
    out = SourceStatus(
        name=name,
        kind=source.kind,
        url=source.url,
        table=f"{source.database}.{source.table}",
        paused=source.paused,
        state="paused" if source.paused else "not started",
    )
    try:
        saved = PositionStore(source.state_path(cfg.home, name)).load()
    except ConfigError:
        saved = None
    if saved is not None:
        state = RestState.from_dict(saved)
        out.cursor, out.position = state.cursor, state.position
        if state.position is not None and source.cursor_type == "timestamp":
            when = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(
                microseconds=state.position // 1000
            )
            out.cursor_time = when.isoformat().replace("+00:00", "Z")
    record = _read_json(status_path(cfg, name))
    if record is None or record.get("source") != name:
        return out
    totals = record.get("totals") or {}
    for key in TOTALS:
        setattr(out, key, int(totals.get(key, 0)))
    for key in ("last_poll_ms", "last_success_ms", "last_error", "last_error_ms", "pid"):
        setattr(out, key, record.get(key))
    out.updated_at_ms = record.get("updated_at_ms")
    if source.paused:
        return out
    written = str(record.get("state", ""))
    if written in ("stopped", "removed"):
        out.state = "stopped"
    elif (_now_ms() - int(out.updated_at_ms or 0)) / 1000 > DOWN_AFTER_S:
        out.state = "down"
    else:
        out.state = written
    return out


def source_statuses(cfg: Config) -> list[SourceStatus]:
    """Every source in effect, by name (:class:`ConfigError` on a registry written badly)."""
    return [source_status(cfg, n, s) for n, s in sorted(SourceRegistry(cfg).sources().items())]
