"""A managed source's loop (capture/source_runner.py) against an API in this process and a
publisher that stores what it is given: it follows the registry (paused: no request at all,
resumed: polls from the saved cursor; removed: it returns), a failing poll is counted and
tried again, its status and its metrics say so."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tidelake.capture import source_runner
from tidelake.capture.publisher import Acked
from tidelake.capture.rest import RestSource
from tidelake.capture.source_registry import SourceRegistry
from tidelake.capture.source_runner import SourceRunner, source_status, source_statuses
from tidelake.config import Config
from tidelake.runtime.live_metrics import PollerCollector


class Api:
    """Records filtered by an inclusive ``updated_since``; a status to answer instead."""

    def __init__(self) -> None:
        self.records: dict[int, dict[str, Any]] = {}
        self.requests = 0
        self.fail_with: int | None = None

    def put(self, rid: int, second: int) -> None:
        self.records[rid] = {"id": rid, "updated_at": f"2024-06-01T10:00:{second:02d}Z"}

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        if self.fail_with is not None:
            return httpx.Response(self.fail_with, text="no")
        since = request.url.params.get("updated_since", "")
        rows = sorted(
            (r for r in self.records.values() if r["updated_at"] >= since),
            key=lambda r: (r["updated_at"], r["id"]),
        )
        return httpx.Response(200, json={"data": rows})


class Publisher:
    """Stores each message, acknowledges it at once (a known id: a duplicate)."""

    def __init__(self, on_acked: Callable[[Acked], None]) -> None:
        self.on_acked = on_acked
        self.ids: list[str] = []

    async def publish(self, subject: str, payload: bytes, msg_id: str, tag: Any = None) -> None:
        duplicate = msg_id in self.ids
        if not duplicate:
            self.ids.append(msg_id)
        self.on_acked(Acked(tag, len(self.ids), duplicate))

    async def durable(self) -> None:
        pass

    async def close(self) -> None:
        pass


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Api:
    fake = Api()
    monkeypatch.setattr(source_runner, "REGISTRY_EVERY_S", 0.05)

    async def no_bus(self: RestSource) -> None:
        pass

    def client(self: RestSource) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.MockTransport(fake.handler))

    monkeypatch.setattr(RestSource, "ensure_bus", no_bus)
    monkeypatch.setattr(RestSource, "client", client)
    return fake


@pytest.fixture
def publisher(monkeypatch: pytest.MonkeyPatch) -> list[Publisher]:
    made: list[Publisher] = []

    async def open_publisher(bus: Any, url: Any, *, on_acked: Callable[[Acked], None]) -> Any:
        made.append(Publisher(on_acked))
        return made[-1]

    monkeypatch.setattr(source_runner, "open_publisher", open_publisher)
    return made


def _config(home: Path, **extra: Any) -> Config:
    source = {
        "url": "http://api.test/items",
        "database": "crm",
        "table": "items",
        "records_path": "data",
        "pagination": "none",
        "interval_s": 0.05,
        "give_up_s": 0.3,
        **extra,
    }
    return Config.model_validate({"home": str(home), "sources": {"crm": source}})


async def _until(what: str, predicate: Callable[[], bool], timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.02)


def _run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(main())


def test_paused_it_asks_nothing_resumed_it_catches_up_removed_it_returns(
    tmp_path: Path, api: Api, publisher: list[Publisher]
) -> None:
    cfg = _config(tmp_path)
    api.put(1, 1)
    api.put(2, 2)
    runner = SourceRunner(cfg, "crm")

    async def main() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(runner.run(stop))
        await _until("the first records", lambda: bool(publisher) and len(publisher[0].ids) == 2)
        SourceRegistry(cfg).pause("crm")
        await _until("paused", lambda: runner.stats.paused)
        await asyncio.sleep(0.1)  # a poll under way when the pause was seen has ended
        asked = api.requests
        api.put(3, 3)
        api.put(1, 4)
        await asyncio.sleep(0.4)
        assert asked == api.requests  # paused: not one request
        assert "paused" == source_status(cfg, "crm", SourceRegistry(cfg).get("crm")).state
        SourceRegistry(cfg).resume("crm")
        await _until("caught up", lambda: len(publisher[0].ids) == 4)
        await asyncio.sleep(0.3)
        SourceRegistry(cfg).remove("crm")
        await asyncio.wait_for(task, 10)  # removed: it returns by itself
        assert not stop.is_set()

    _run(main)
    ids = publisher[0].ids
    assert len(ids) == len(set(ids)) == 4  # nothing twice
    assert 0 == runner.stats.duplicates
    record = source_runner._read_json(source_runner.status_path(cfg, "crm"))
    assert record is not None
    assert "removed" == record["state"]
    assert 4 == record["totals"]["published"]


def test_a_failing_poll_is_counted_and_tried_again(
    tmp_path: Path, api: Api, publisher: list[Publisher]
) -> None:
    cfg = _config(tmp_path)
    api.put(1, 7)
    api.fail_with = 503
    runner = SourceRunner(cfg, "crm")

    async def main() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(runner.run(stop))
        await _until("an unavailable API", lambda: runner.stats.errors.get("unavailable", 0) >= 1)
        api.fail_with = 401
        await _until("a refusal", lambda: runner.stats.errors.get("refused", 0) >= 1)
        (status,) = source_statuses(cfg)
        assert "failing" == status.state
        assert status.last_error is not None
        assert "401" in status.last_error
        assert status.cursor is None
        api.fail_with = None
        await _until("the record", lambda: len(publisher[0].ids) == 1)
        await _until("the status", lambda: source_statuses(cfg)[0].state == "polling")
        stop.set()
        await asyncio.wait_for(task, 10)

    _run(main)
    (status,) = source_statuses(cfg)
    assert "stopped" == status.state
    assert ("2024-06-01T10:00:07Z", "2024-06-01T10:00:07Z") == (status.cursor, status.cursor_time)
    assert status.errors >= 2
    assert status.published == 1
    assert status.last_success_ms is not None

    # The metrics of the source, as its /metrics shows them.
    registry = CollectorRegistry()
    registry.register(PollerCollector(lambda: {"crm": runner.stats}))
    got = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(generate_latest(registry).decode())
        for s in f.samples
    }
    crm = (("source", "crm"),)
    assert 1 == got[("tidelake_poller_records_published_total", crm)]
    assert 1 == got[("tidelake_poller_records_read_total", crm)]
    assert got[("tidelake_poller_polls_total", crm)] >= 1
    assert got[("tidelake_poller_errors_total", (("kind", "refused"), *crm))] >= 1
    assert got[("tidelake_poller_errors_total", (("kind", "unavailable"), *crm))] >= 1
    assert 1717236007 == got[("tidelake_poller_cursor_timestamp_seconds", crm)]
    assert got[("tidelake_poller_last_success_timestamp_seconds", crm)] > 1.7e9
    assert 0 == got[("tidelake_poller_paused", crm)]


def test_totals_carry_over_a_restart_and_once_polls_once(
    tmp_path: Path, api: Api, publisher: list[Publisher]
) -> None:
    cfg = _config(tmp_path, cursor_type="timestamp")
    api.put(1, 1)
    asyncio.run(SourceRunner(cfg, "crm").run(asyncio.Event(), once=True))
    api.put(2, 2)
    again = SourceRunner(cfg, "crm")
    asyncio.run(again.run(asyncio.Event(), once=True))
    assert 1 == again.stats.published  # this process: the new record only
    (status,) = source_statuses(cfg)
    assert (2, 2) == (status.polls, status.published)
    SourceRegistry(cfg).pause("crm")
    asked = api.requests
    asyncio.run(SourceRunner(cfg, "crm").run(asyncio.Event(), once=True))
    assert asked == api.requests  # paused: --once polls nothing


def test_removed_and_added_again_with_other_settings_it_returns_for_a_restart(
    tmp_path: Path, api: Api, publisher: list[Publisher]
) -> None:
    """The supervisor starts it again with the new settings (it is still in the registry)."""
    cfg = _config(tmp_path)
    SourceRegistry(cfg).remove("crm")
    SourceRegistry(cfg).add("crm", {**cfg.sources["crm"].model_dump(mode="json")})
    runner = SourceRunner(cfg, "crm")

    async def main() -> None:
        task = asyncio.create_task(runner.run(asyncio.Event()))
        await asyncio.sleep(0.2)
        assert not task.done()  # the same settings: it goes on
        settings = SourceRegistry(cfg).get("crm").model_dump(mode="json")
        SourceRegistry(cfg).remove("crm")
        SourceRegistry(cfg).add("crm", {**settings, "limit": 7})
        await asyncio.wait_for(task, 10)

    _run(main)
    (status,) = source_statuses(cfg)
    assert "stopped" == status.state
