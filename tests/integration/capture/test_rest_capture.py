"""``tidelake capture rest`` against a local HTTP API this test runs, into a real nats-server.

The API (``http.server.ThreadingHTTPServer``) serves a changing set of records filtered by an
inclusive ``updated_since``, in (updated_at, id) order, by page/limit or by ``Link: rel=next``,
with an ETag (304 on ``If-None-Match``). The poller runs as a child process:

* a first poll publishes every record, in cursor order, each a tidelake canal-json INSERT that
  decodes with its exact values;
* records changed (a newer ``updated_at``), soft-deleted, and one new at the saved cursor
  itself: the next poll publishes exactly those, and nothing already published;
* killed with SIGKILL after JetStream acknowledged a poll and before its cursor was saved,
  the restart publishes the same versions under the same ``Nats-Msg-Id``: JetStream drops
  every copy, nothing is lost;
* run until SIGTERM, an idle API answers 304 and a change arrives within a few polls.

The server behaves as the standards the poller relies on say (capture/rest.py, "What the rules
rest on"): numbers as JSON literals of any length (RFC 8259 §6), ``Link: <…>; rel="next"``
(RFC 8288 §3), ``ETag``/``If-None-Match``/``304`` (RFC 9110 §13.1.2, §15.4.5).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse

import orjson
import pytest
from stagekit import REPO, StageEnv, run, wait_for

from tidelake.capture.rest import CRASH_HOOK_ENV, message_id, timestamp_ns
from tidelake.events import ChangeEvent, Op
from tidelake.formats import decode
from tidelake.runtime.processes import ChildProcess, tidelake_argv

pytestmark = pytest.mark.integration

#: A JSON number written as its literal text (json.dumps would round a float).
_NUM = re.compile(r'"@num:([-0-9.eE+]+)"')


def ts(second: int) -> str:
    return f"2024-06-01T10:00:{second:02d}.000001Z"


class FakeApi:
    """The records, the requests seen, and the HTTP server serving them."""

    def __init__(self, mode: str, cursor: str = "updated_at") -> None:
        self.mode = mode
        self.cursor = cursor
        self.records: dict[int, dict[str, Any]] = {}
        self.lock = threading.Lock()
        self.log: list[tuple[str, int]] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, headers, body = api.answer(self.path, dict(self.headers.items()))
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

    def put(self, rid: int, second: int, **fields: Any) -> None:
        with self.lock:
            self.records[rid] = {"id": rid, "updated_at": ts(second), "version": second, **fields}

    def _at_or_after(self, record: dict[str, Any], since: str) -> bool:
        value = record[self.cursor]
        return bool(value >= int(since)) if isinstance(value, int) else bool(value >= since)

    def answer(self, path: str, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        url = urlparse(path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        since = query.get("updated_since")
        limit = int(query.get("limit", "100"))
        with self.lock:
            rows = sorted(
                (r for r in self.records.values() if since is None or self._at_or_after(r, since)),
                key=lambda r: (r[self.cursor], r["id"]),
            )
        out: dict[str, Any] = {}
        if self.mode == "page":
            page = int(query.get("page", "1"))
            out["data"] = rows[(page - 1) * limit : page * limit]
        else:
            offset = int(query.get("offset", "0"))
            out["data"] = rows[offset : offset + limit]
            if offset + limit < len(rows):
                nxt = urlencode({**query, "offset": str(offset + limit)})
                out["link"] = f'</items?{nxt}>; rel="next"'
        link = out.pop("link", None)
        body = _NUM.sub(r"\1", json.dumps(out)).encode()
        etag = '"' + hashlib.sha1(body).hexdigest() + '"'
        if headers.get("If-None-Match") == etag:
            self.log.append((path, 304))
            return 304, {"ETag": etag}, b""
        self.log.append((path, 200))
        extra = {"Link": link} if link else {}
        return 200, {"Content-Type": "application/json", "ETag": etag, **extra}, body

    def __enter__(self) -> FakeApi:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def page_api() -> Iterator[FakeApi]:
    with FakeApi("page") as api:
        yield api


@pytest.fixture
def link_api() -> Iterator[FakeApi]:
    with FakeApi("link", cursor="version") as api:
        yield api


def _env(factory: Callable[..., StageEnv], api: FakeApi, **rest: Any) -> StageEnv:
    return factory(
        capture={
            "rest": {
                "url": api.url,
                "database": "crm",
                "table": "items",
                "deleted_field": "deleted",
                "column_types": {"id": "bigint", "amount": "decimal(30,9)"},
                "interval_s": 0.2,
                **rest,
            }
        }
    )


def _prefix(env: StageEnv) -> str:
    """This test's own stream's subjects (make_stage_env numbers each env's)."""
    return env.cfg.bus.stream.subjects[0].removesuffix(".>")


def _child_env(env: StageEnv, crash: str | None = None) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith("TIDELAKE_")}
    out["TIDELAKE_CONFIG"] = str(env.config_path)
    out["TIDELAKE_CAPTURE__REST__SUBJECT_PREFIX"] = _prefix(env)
    out.pop(CRASH_HOOK_ENV, None)
    if crash:
        out[CRASH_HOOK_ENV] = crash
    return out


def poll_once(env: StageEnv, crash: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        tidelake_argv("capture", "rest", "--once"),
        env=_child_env(env, crash),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def _stream(env: StageEnv) -> list[tuple[int, str, str, bytes]]:
    """``(seq, Nats-Msg-Id, subject, payload)`` of every message of the CDC stream."""
    nc = await env.client()
    try:
        js = nc.jetstream()
        info = await js.stream_info(env.cfg.bus.stream.name)
        out = []
        for seq in range(1, info.state.last_seq + 1):
            msg = await js.get_msg(env.cfg.bus.stream.name, seq)
            headers = msg.headers or {}
            out.append((seq, headers.get("Nats-Msg-Id", ""), msg.subject, msg.data or b""))
        return out
    finally:
        await nc.close()


def events(env: StageEnv) -> list[ChangeEvent]:
    messages = run(_stream(env))
    ids = [m[1] for m in messages]
    assert len(ids) == len(set(ids)), "a record version stored twice"
    out: list[ChangeEvent] = []
    for seq, msg_id, subject, payload in messages:
        assert subject == f"{_prefix(env)}.crm.items"
        (event,) = decode(payload, seq=seq).events
        assert event.key is not None
        assert msg_id == message_id("crm.items", (event.key["id"],), event.position.parts[0])
        out.append(event)
    return out


def summary(evs: list[ChangeEvent]) -> list[tuple[str, Op, int]]:
    """(id, op, updated_at second) of each event, in stream order."""
    out = []
    for e in evs:
        assert e.row is not None
        out.append((e.row["id"], e.op, int(e.row["version"])))
    return out


def _state(env: StageEnv) -> dict[str, Any]:
    path = env.cfg.capture.rest.state_path(env.cfg.home)
    return orjson.loads(path.read_bytes())  # type: ignore[no-any-return]


def test_page_polls_publish_changes_once_through_a_kill_before_the_cursor_is_saved(
    stage_env_factory: Callable[..., StageEnv], page_api: FakeApi
) -> None:
    api = page_api
    api.put(1, 1, name="a", amount="@num:12345678901234567890.123456789")
    api.put(2, 1, name="b", amount="@num:0.10", tags=["x", {"y": 1}])
    api.put(3, 2, name="c", amount=None, active=True)
    api.put(4, 3, name="d", deleted=False)
    api.put(5, 3, name="e")
    env = _env(stage_env_factory, api, limit=3)

    first = poll_once(env)
    assert 0 == first.returncode, first.stderr
    evs = events(env)
    expected = [("1", 1), ("2", 1), ("3", 2), ("4", 3), ("5", 3)]
    assert [(rid, Op.INSERT, second) for rid, second in expected] == summary(evs)
    assert [e.position.parts for e in evs] == sorted(e.position.parts for e in evs)
    assert (timestamp_ns(ts(3)),) == evs[-1].position.parts
    one, two, three = (e.after or {} for e in evs[:3])
    assert "12345678901234567890.123456789" == one["amount"]
    assert "decimal(30,9)" == evs[0].column_types["amount"]
    assert ("0.10", '["x",{"y":1}]') == (two["amount"], two["tags"])
    assert (None, "true") == (three["amount"], three["active"])
    assert ts(3) == _state(env)["cursor"]
    assert ["1", "2"] == [parse_qs(urlparse(p).query)["page"][0] for p, _ in api.log]

    # Nothing new: the inclusive re-poll returns 4 and 5 again, and they are skipped.
    assert 0 == poll_once(env).returncode
    assert 5 == len(events(env))

    # A change, a soft delete, and a new record at the saved cursor whose key sorts first.
    api.put(2, 4, name="b2", amount="@num:0.20")
    api.put(4, 4, name="d", deleted=True)
    api.put(0, 3, name="z")
    saved = _state(env)
    crashed = poll_once(env, crash="after_publish")
    assert -9 == crashed.returncode, crashed.stderr
    assert 8 == len(events(env))
    assert saved == _state(env)  # stored in JetStream, cursor not saved

    again = poll_once(env)
    assert 0 == again.returncode, again.stderr
    assert "3 stored in the bus (3 duplicates)" in again.stderr
    evs = events(env)
    assert [("0", Op.INSERT, 3), ("2", Op.INSERT, 4), ("4", Op.DELETE, 4)] == summary(evs[5:])
    assert ts(4) == _state(env)["cursor"]
    # Per key, each version at a greater position; the new key shares the saved position.
    by_key: dict[str, list[tuple[int, ...]]] = {}
    for e in evs:
        by_key.setdefault(e.row["id"] if e.row else "", []).append(e.position.parts)
    assert all(p == sorted(set(p)) for p in by_key.values())
    assert evs[5].position == evs[4].position
    assert {"id": "4"} == evs[-1].key

    assert 0 == poll_once(env).returncode
    assert 8 == len(events(env))


def test_polling_until_sigterm_with_link_headers_and_etags(
    stage_env_factory: Callable[..., StageEnv], link_api: FakeApi
) -> None:
    api = link_api
    for rid in range(1, 6):
        api.put(rid, rid, name=f"n{rid}")
    env = _env(
        stage_env_factory,
        api,
        pagination="next_link",
        next_field=None,
        limit=2,
        cursor_field="version",
        cursor_type="integer",
    )
    poller = ChildProcess(
        "rest",
        tidelake_argv("capture", "rest"),
        log_path=env.log_dir / "rest.log",
        base_env=_child_env(env),
        cwd=REPO,
    ).start()
    try:
        wait_for(lambda: len(run(_stream(env))) == 5, 60, "the first poll's five records")
        assert [(str(i), Op.INSERT, i) for i in range(1, 6)] == summary(events(env))
        assert [(i,) for i in range(1, 6)] == [e.position.parts for e in events(env)]
        # Idle: the same request answered 304 (one page: its ETag vouches for the poll).
        wait_for(lambda: sum(s == 304 for _, s in api.log) >= 2, 30, "304 answers")
        api.put(3, 7, name="n3b")
        api.put(9, 6, name="n9")
        wait_for(lambda: len(run(_stream(env))) == 7, 30, "the changed records")
        assert [("9", Op.INSERT, 6), ("3", Op.INSERT, 7)] == summary(events(env)[5:])
        assert "7" == str(_state(env)["cursor"])
    finally:
        code = poller.stop(20)
    assert 0 == code, poller.log_tail()
    assert 7 == len(events(env))
