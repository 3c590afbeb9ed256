"""REST sources managed at run time, as ``tidelake run`` supervises them (pipeline/stack.py
``sync_sources`` and ``restart_exited``, capture/source_registry.py, capture/source_runner.py),
against an HTTP API this test runs and a real nats-server.

* added through the API, the supervisor starts its process; every record lands in the stream
  with its ``Nats-Msg-Id``, and ``GET /api/sources`` shows its cursor and totals;
* paused with ``tidelake source pause``, it sends the API not one request while the records
  change; resumed with ``tidelake source resume``, exactly the versions changed meanwhile
  arrive, once each;
* killed with SIGKILL, the supervisor starts it again and it goes on; killed between the
  bus's acknowledgements and the cursor's save (the test hook), the restart republishes the
  same versions under the same ids and JetStream drops every copy;
* its own ``/metrics`` has every ``tidelake_poller_*`` metric docs/metrics.md names;
* removed through the API, its process exits by itself; the supervisor lets it go.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx
import orjson
import pytest
from stagekit import REPO, StageEnv, run, wait_for

from support.scrape import get as scrape
from tidelake.api.server import create_app
from tidelake.capture.rest import CRASH_HOOK_ENV, message_id
from tidelake.config import Config
from tidelake.formats import decode
from tidelake.pipeline.processes import run_env
from tidelake.pipeline.stack import PORT_ENV, LocalStack
from tidelake.runtime.processes import free_port, tidelake_argv

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def ts(second: int) -> str:
    return f"2024-06-01T10:{second // 60:02d}:{second % 60:02d}.000001Z"


class FakeApi:
    """Records filtered by an inclusive ``updated_since``, in (updated_at, id) order, by
    page/limit, with an ETag; every request logged."""

    def __init__(self) -> None:
        self.records: dict[int, dict[str, Any]] = {}
        self.lock = threading.Lock()
        self.requests: list[str] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, headers, body = api.answer(self.path, self.headers.get("If-None-Match"))
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/items"

    def put(self, rid: int, second: int) -> None:
        with self.lock:
            self.records[rid] = {"id": rid, "updated_at": ts(second), "version": second}

    def answer(self, path: str, etag_seen: str | None) -> tuple[int, dict[str, str], bytes]:
        query = {k: v[-1] for k, v in parse_qs(urlparse(path).query).items()}
        since, limit = query.get("updated_since", ""), int(query.get("limit", "100"))
        page = int(query.get("page", "1"))
        with self.lock:
            self.requests.append(path)
            rows = sorted(
                (r for r in self.records.values() if r["updated_at"] >= since),
                key=lambda r: (r["updated_at"], r["id"]),
            )
        body = json.dumps({"data": rows[(page - 1) * limit : page * limit]}).encode()
        etag = '"' + hashlib.sha1(body).hexdigest() + '"'
        if etag_seen == etag:
            return 304, {"ETag": etag}, b""
        return 200, {"Content-Type": "application/json", "ETag": etag}, body

    def __enter__(self) -> FakeApi:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def rest_api() -> Iterator[FakeApi]:
    with FakeApi() as api:
        yield api


class Api:
    """tidelake's API application, called in this process."""

    def __init__(self, cfg: Config) -> None:
        self.app = create_app(cfg)

    def call(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
                return await c.request(method, path, json=body or {}, timeout=60)

        response = asyncio.run(go())
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        return answer


def _prefix(env: StageEnv) -> str:
    return env.cfg.bus.stream.subjects[0].removesuffix(".>")


async def _stream(env: StageEnv) -> list[tuple[str, str, bytes, int]]:
    """``(Nats-Msg-Id, subject, payload, seq)`` of every message of the CDC stream."""
    nc = await env.client()
    try:
        js = nc.jetstream()
        info = await js.stream_info(env.cfg.bus.stream.name)
        out = []
        for seq in range(1, info.state.last_seq + 1):
            msg = await js.get_msg(env.cfg.bus.stream.name, seq)
            out.append(((msg.headers or {}).get("Nats-Msg-Id", ""), msg.subject, msg.data, seq))
        return out
    finally:
        await nc.close()


def versions(env: StageEnv) -> list[tuple[int, int]]:
    """(id, version) of each message in stream order; each checked for its subject and id,
    and no id twice."""
    out = []
    messages = run(_stream(env))
    ids = [m[0] for m in messages]
    assert len(ids) == len(set(ids)), "a record version stored twice"
    for msg_id, subject, payload, seq in messages:
        assert f"{_prefix(env)}.crm.items" == subject
        (event,) = decode(payload, seq=seq).events
        assert event.row is not None
        assert event.key is not None
        assert message_id("crm.items", (event.key["id"],), event.position.parts[0]) == msg_id
        out.append((int(event.row["id"]), int(event.row["version"])))
    return out


def _cli(env: StageEnv, *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        tidelake_argv("source", *args),
        env={"PATH": "/usr/bin:/bin", "TIDELAKE_CONFIG": str(env.config_path)},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert 0 == proc.returncode, proc.stderr + proc.stdout
    return proc


def _until_logged(child: Any, text: str, timeout_s: float = 30) -> None:
    wait_for(lambda: text in child.log_since_start(), timeout_s, f"{text!r} in {child.name}")


def test_add_pause_resume_kill_and_remove_a_source_under_the_supervisor(
    stage_env_factory: Callable[..., StageEnv], rest_api: FakeApi, tmp_path: Path
) -> None:
    api_server = rest_api
    for rid in range(1, 6):
        api_server.put(rid, rid)
    metrics_port = free_port()
    env = stage_env_factory(metrics={"port": metrics_port})
    home = env.cfg.home
    stack = LocalStack(home, cfg=env.cfg, config_path=env.config_path)
    stack.url = env.server.url
    stack.env = run_env(env.config_path, home.resolve(), env.server.url)
    api = Api(env.cfg)
    source = {
        "url": api_server.url,
        "database": "crm",
        "table": "items",
        "column_types": {"id": "bigint", "version": "bigint"},
        "limit": 3,
        "interval_s": 0.2,
        "subject_prefix": _prefix(env),
    }
    restarts: dict[str, int] = {}
    try:
        # Added at run time through the API: the supervisor starts its process.
        assert api.call("POST", "/api/sources", {"name": "crm", "source": source})["added"]
        assert ["+crm"] == stack.sync_sources()
        assert [] == stack.sync_sources()
        child = stack.child("source-crm")
        wait_for(lambda: len(run(_stream(env))) == 5, 60, "the first five records")
        assert [(i, i) for i in range(1, 6)] == versions(env)
        wait_for(
            lambda: api.call("GET", "/api/sources")["sources"][0]["published"] == 5,
            30,
            "the status of the first poll",
        )
        (status,) = api.call("GET", "/api/sources")["sources"]
        assert ("crm", "crm.items", "polling") == (status["name"], status["table"], status["state"])
        assert ts(5) == status["cursor"]
        assert status["cursor_time"].startswith("2024-06-01T10:00:05.000001")
        assert 0 == status["errors"]
        assert status["last_success_ms"]

        # Its own /metrics: every tidelake_poller_* metric docs/metrics.md names.
        port = int(child.env[PORT_ENV])
        code, text = scrape(f"http://127.0.0.1:{port}/metrics")
        assert 200 == code
        sampled = {
            line.split("{")[0].split(" ")[0]
            for line in text.decode().splitlines()
            if not line.startswith("#")
        }
        doc = (REPO / "docs" / "metrics.md").read_text()
        named = sorted(set(re.findall(r"`(tidelake_poller_[a-z_]+)`", doc)))
        assert len(named) >= 8
        # The cursor is a time here: its integer gauge is the one left empty.
        assert ["tidelake_poller_cursor_value"] == [n for n in named if n not in sampled]
        assert 'tidelake_poller_records_published_total{source="crm"} 5.0' in text.decode()

        # Paused (the command line): not one request while the API changes.
        _cli(env, "pause", "crm")
        _until_logged(child, "source paused")
        asked = len(api_server.requests)
        api_server.put(2, 20)
        api_server.put(6, 21)
        api_server.put(4, 22)
        time.sleep(4)
        assert asked == len(api_server.requests)
        assert 5 == len(run(_stream(env)))
        assert "paused" == api.call("GET", "/api/sources")["sources"][0]["state"]

        # Resumed: what changed meanwhile arrives, once.
        _cli(env, "resume", "crm")
        wait_for(lambda: len(run(_stream(env))) == 8, 60, "the versions changed while paused")
        assert [(2, 20), (6, 21), (4, 22)] == versions(env)[5:]

        # kill -9 at an arbitrary instant: the supervisor starts it again; it goes on.
        child.kill()
        api_server.put(7, 30)
        assert ["source-crm"] == stack.restart_exited(restarts)
        wait_for(lambda: len(run(_stream(env))) == 9, 60, "a record after the restart")
        assert (7, 30) == versions(env)[-1]

        # kill -9 between the acknowledgements and the cursor's save (the test hook): the
        # restart publishes the same versions again; JetStream drops every copy.
        cursor_file = home.resolve() / "capture" / "sources" / "crm.cursor.json"
        wait_for(lambda: ts(30) == _cursor(cursor_file), 30, "the cursor of the restart")
        child.env[CRASH_HOOK_ENV] = "after_publish"
        child.kill()
        api_server.put(1, 40)
        api_server.put(8, 40)
        assert ["source-crm"] == stack.restart_exited(restarts)
        assert -9 == child.wait(60), child.log_tail()
        assert [(1, 40), (8, 40)] == versions(env)[9:]
        assert ts(30) == _cursor(cursor_file)  # published, not saved
        del child.env[CRASH_HOOK_ENV]
        duplicates_before = api.call("GET", "/api/sources")["sources"][0]["duplicates"]
        assert ["source-crm"] == stack.restart_exited(restarts)
        wait_for(lambda: ts(40) == _cursor(cursor_file), 60, "the cursor after the republish")
        wait_for(
            lambda: (
                api.call("GET", "/api/sources")["sources"][0]["duplicates"] >= duplicates_before + 2
            ),
            30,
            "the republished copies counted as duplicates",
        )
        time.sleep(1)
        assert 11 == len(versions(env))  # every copy dropped: nothing stored twice

        # Removed: its process exits by itself; the supervisor does not start it again.
        assert api.call("DELETE", "/api/sources/crm")["removed"]
        assert 0 == child.wait(30), child.log_tail()
        assert [] == stack.restart_exited(restarts)
        assert ["-crm"] == stack.sync_sources()
        assert [] == stack.sync_sources()
        assert [] == api.call("GET", "/api/sources")["sources"]
        asked = len(api_server.requests)
        time.sleep(1)
        assert asked == len(api_server.requests)
    finally:
        stack.stop_stages(20)

    # Every version the API ever showed a poll is in the stream exactly once, in order per key.
    final = versions(env)
    assert len(final) == len(set(final)) == 11
    per_key: dict[int, list[int]] = {}
    for rid, version in final:
        per_key.setdefault(rid, []).append(version)
    assert all(v == sorted(v) for v in per_key.values())
    assert {rid: r["version"] for rid, r in api_server.records.items()} == {
        rid: v[-1] for rid, v in per_key.items()
    }


def _cursor(path: Path) -> str | None:
    try:
        return orjson.loads(path.read_bytes()).get("cursor")  # type: ignore[no-any-return]
    except (OSError, orjson.JSONDecodeError):
        return None
