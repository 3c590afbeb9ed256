"""The REST poller's pure rules (capture/rest.py): cursor → position, message ids, what a poll
publishes and saves, the values' text, and the HTTP side (pages, next links, ETag, retries)
on httpx's mock transport."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tidelake.capture.canal import CanalEncoder
from tidelake.capture.rest import (
    RestSource,
    RestSourceError,
    RestState,
    cursor_position,
    encode,
    message_id,
    next_state,
    parse_body,
    plan,
    timestamp_ns,
    until_stopped,
    value_text,
)
from tidelake.config import Config, RestSourceConfig, load_config
from tidelake.errors import ConfigError
from tidelake.events import Op, Position
from tidelake.formats import decode


def _rcfg(**over: Any) -> RestSourceConfig:
    base: dict[str, Any] = {
        "url": "http://api.test/items",
        "database": "crm",
        "table": "items",
        "deleted_field": "deleted",
    }
    return RestSourceConfig.model_validate({**base, **over})


def _state(**over: Any) -> RestState:
    return RestState(table="crm.items", **over)


def _rec(rid: int, ts: str, **fields: Any) -> dict[str, Any]:
    return parse_body(orjson.dumps({"id": rid, "updated_at": ts, **fields}))  # type: ignore[no-any-return]


# -- cursor → position ----------------------------------------------------------------------------


def test_timestamp_positions_are_nanoseconds_since_1970_utc() -> None:
    assert 0 == timestamp_ns("1970-01-01T00:00:00Z")
    assert 1_000_000_001 == timestamp_ns("1970-01-01T00:00:01.000000001Z")
    # No zone is UTC; an offset is converted; a space works like a T.
    assert timestamp_ns("2024-05-05T12:00:00") == timestamp_ns("2024-05-05 14:00:00+02:00")
    # Nanoseconds are kept (Python's own parser keeps six digits).
    assert (
        timestamp_ns("2024-05-05T12:00:00.123456789Z") - timestamp_ns("2024-05-05T12:00:00.123456Z")
        == 789
    )
    assert timestamp_ns("2024-05-05T12:00:00.5Z") > timestamp_ns("2024-05-05T12:00:00.49Z")


def test_cursor_positions_by_type() -> None:
    assert 42 == cursor_position(parse_body("42"), "integer")
    assert 42 == cursor_position("42", "integer")
    for bad in ("-1", "1.5", "x", True, None):
        with pytest.raises(RestSourceError):
            cursor_position(bad, "integer")
    with pytest.raises(RestSourceError):
        cursor_position(str(10**20), "integer")
    with pytest.raises(RestSourceError, match="ISO-8601"):
        cursor_position("yesterday", "timestamp")
    with pytest.raises(RestSourceError, match="out of range"):
        cursor_position("1969-12-31T23:59:59Z", "timestamp")


def test_message_id_is_stable_per_record_version() -> None:
    one = message_id("crm.items", ("1",), 5)
    assert one == message_id("crm.items", ("1",), 5)
    assert one.startswith("rest:5:")
    others = {
        message_id("crm.items", ("2",), 5),
        message_id("crm.items", ("1",), 6),
        message_id("crm.other", ("1",), 5),
    }
    assert one not in others
    assert 3 == len(others)


# -- values ---------------------------------------------------------------------------------------


def test_numbers_keep_every_digit_and_values_become_canal_text() -> None:
    body = parse_body(
        b'{"big": 123456789012345678901234567890.000000000000000000001, "f": 0.1, '
        b'"e": 1E-7, "i": 18446744073709551616, "b": true, "n": null, "s": "Zo\\u00eb", '
        b'"o": {"a": [1, 2.50, "x", false, null], "\\u00e9": {}}}'
    )
    text = {k: value_text(v) for k, v in body.items()}
    assert {
        "big": "123456789012345678901234567890.000000000000000000001",
        "f": "0.1",
        "e": "1E-7",
        "i": "18446744073709551616",
        "b": "true",
        "n": None,
        "s": "Zoë",
        "o": '{"a":[1,2.50,"x",false,null],"é":{}}',
    } == text
    assert all(type(v) in (str, type(None)) for v in text.values())
    with pytest.raises(RestSourceError, match="not JSON"):
        parse_body(b'{"x": NaN}')
    with pytest.raises(RestSourceError, match="not JSON"):
        parse_body(b"<html>")


# -- what a poll publishes and saves ---------------------------------------------------------------


def test_a_poll_goes_out_in_cursor_then_key_order_one_position_per_cursor() -> None:
    records = [
        _rec(3, "2024-01-01T00:00:02Z"),
        _rec(2, "2024-01-01T00:00:01Z"),
        _rec(1, "2024-01-01T00:00:02Z"),
        _rec(2, "2024-01-01T00:00:01Z", name="read twice"),  # the same version again
    ]
    planned = plan(records, _rcfg(), _state())
    assert [("2",), ("1",), ("3",)] == [c.key for c in planned.changes]
    t1, t2 = timestamp_ns("2024-01-01T00:00:01Z"), timestamp_ns("2024-01-01T00:00:02Z")
    assert [t1, t2, t2] == [c.position for c in planned.changes]
    assert "read twice" == planned.changes[0].row["name"]  # the last copy wins

    saved = next_state(_state(), planned.changes)
    assert "2024-01-01T00:00:02Z" == saved.cursor
    assert t2 == saved.position
    assert {'["1"]', '["3"]'} == saved.keys
    assert saved == RestState.from_dict(orjson.loads(orjson.dumps(saved.to_dict())))


def test_the_inclusive_re_poll_skips_what_was_published_and_keeps_what_is_new() -> None:
    t2 = timestamp_ns("2024-01-01T00:00:02Z")
    state = _state(cursor="2024-01-01T00:00:02Z", position=t2, keys=frozenset({'["3"]'}))
    records = [
        _rec(1, "2024-01-01T00:00:01Z"),  # older than the cursor: an API that ignores it
        _rec(3, "2024-01-01T00:00:02Z"),  # published by the last poll
        _rec(0, "2024-01-01T00:00:02Z"),  # new at the same cursor, key sorting first
        _rec(3, "2024-01-01T00:00:03Z", deleted=True),  # a newer version: soft-deleted
    ]
    planned = plan(records, _rcfg(), state)
    assert (1, 1) == (planned.stale, planned.seen)
    assert [(("0",), t2, False), (("3",), t2 + 10**9, True)] == [
        (c.key, c.position, c.deleted) for c in planned.changes
    ]
    # The new key at the saved position keeps that position: the ingest drops only what is
    # strictly below its watermark, so it still lands.
    after = next_state(state, planned.changes[:1])
    assert {'["0"]', '["3"]'} == after.keys
    assert t2 == after.position
    assert state == next_state(state, [])


def test_a_record_without_its_cursor_stops_the_poll() -> None:
    with pytest.raises(RestSourceError, match="updated_at"):
        plan([{"id": 1}], _rcfg(), _state())


def test_the_message_decodes_as_tidelake_canal_json() -> None:
    rcfg = _rcfg(column_types={"id": "bigint", "price": "decimal(12,2)"}, subject_prefix="cdc7")
    records = [
        _rec(7, "2024-01-01T00:00:01.5Z", price=parse_body("12.50"), tags=["a"]),
        _rec(8, "2024-01-01T00:00:02Z", deleted=True),
    ]
    encoder = CanalEncoder("rest")
    out = [encode(c, rcfg, encoder) for c in plan(records, rcfg, _state()).changes]
    assert ["cdc7.crm.items", "cdc7.crm.items"] == [o.subject for o in out]
    events = [e for i, o in enumerate(out) for e in decode(o.payload, seq=i + 1).events]
    upsert, delete = events
    assert (Op.INSERT, Op.DELETE) == (upsert.op, delete.op)
    assert "rest" == upsert.source
    assert "crm.items" == upsert.table_id
    assert Position((timestamp_ns("2024-01-01T00:00:01.5Z"),)) == upsert.position
    assert upsert.position < delete.position
    assert {"id": "7"} == upsert.key
    assert upsert.after is not None
    assert "12.50" == upsert.after["price"]
    assert '["a"]' == upsert.after["tags"]
    assert "decimal(12,2)" == upsert.column_types["price"]
    assert "longtext" == upsert.column_types["tags"]
    assert {"id": "8"} == delete.key
    assert 1_704_067_201_500 == upsert.commit_ts_ms
    assert out[0].msg_id == message_id("crm.items", ("7",), upsert.position.parts[0])


# -- config ----------------------------------------------------------------------------------------


def test_the_token_comes_from_the_environment_or_a_file_never_the_config_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("capture:\n  rest:\n    url: http://x\n    token: abc\n")
    with pytest.raises(ConfigError, match="TIDELAKE_CAPTURE__REST__TOKEN"):
        load_config(path, environ={})
    path.write_text("capture:\n  rest:\n    url: http://x\n")
    cfg = load_config(path, environ={"TIDELAKE_CAPTURE__REST__TOKEN": "s3cret"})
    assert "s3cret" == cfg.capture.rest.resolved_token()
    assert "s3cret" not in str(cfg.masked())
    (tmp_path / "tok").write_text("from-file\n")
    cfg = load_config(path, environ={"TIDELAKE_CAPTURE__REST__TOKEN_FILE": str(tmp_path / "tok")})
    assert "from-file" == cfg.capture.rest.resolved_token()


def test_a_state_file_of_another_table_is_refused(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    source = RestSource(cfg)
    source.store.save(RestState(table="crm.other", cursor="1").to_dict())
    with pytest.raises(ConfigError, match=r"crm\.other"):
        source.load_state()
    with pytest.raises(ConfigError, match="url"):
        RestSource(Config.model_validate({"home": str(tmp_path)}))


# -- HTTP: pages, next links, ETag, retries --------------------------------------------------------


def _config(tmp_path: Path, **rest: Any) -> Config:
    base = {"url": "http://api.test/items", "database": "crm", "table": "items", "limit": 2}
    return Config.model_validate({"home": str(tmp_path), "capture": {"rest": {**base, **rest}}})


def _fetch(source: RestSource, handler: Any, state: RestState) -> list[dict[str, Any]]:
    async def go() -> list[dict[str, Any]]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return await source.fetch(client, state)

    return asyncio.run(go())


def test_page_pagination_until_a_short_page_and_etag_when_one_page(tmp_path: Path) -> None:
    rows = [{"id": i, "updated_at": f"2024-01-01T00:00:0{i}Z"} for i in range(5)]
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        params = request.url.params
        since = params.get("updated_since", "")
        matching = [r for r in rows if str(r["updated_at"]) >= since]
        page, limit = int(params["page"]), int(params["limit"])
        body = {"data": matching[(page - 1) * limit : page * limit]}
        etag = f'"{since}:{page}"'
        if request.headers.get("If-None-Match") == etag:
            return httpx.Response(304)
        return httpx.Response(200, json=body, headers={"ETag": etag})

    source = RestSource(_config(tmp_path))
    got = _fetch(source, handler, _state())
    assert list(range(5)) == [int(r["id"]) for r in got]
    assert ["1", "2", "3"] == [r.url.params["page"] for r in seen]
    assert source._etag is None  # three pages: page 1's ETag vouches for nothing

    state = _state(cursor="2024-01-01T00:00:04Z")
    seen.clear()
    assert 1 == len(_fetch(source, handler, state))
    assert "If-None-Match" not in seen[0].headers
    assert [] == _fetch(source, handler, state)  # the same request again: 304
    assert '"2024-01-01T00:00:04Z:1"' == seen[-1].headers["If-None-Match"]
    assert 1 == source.stats.not_modified


def test_next_links_in_the_body_or_the_link_header(tmp_path: Path) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        cursor = request.url.params.get("after")
        if cursor is None:
            return httpx.Response(
                200, json={"data": [{"id": 1, "updated_at": "5"}], "next": "?after=1"}
            )
        if cursor == "1":
            link = '<http://api.test/items?after=2>; rel="next"'
            return httpx.Response(
                200, json={"data": [{"id": 2, "updated_at": "6"}]}, headers={"Link": link}
            )
        return httpx.Response(200, json={"data": []})

    source = RestSource(_config(tmp_path, pagination="next_link", cursor_type="integer"))
    assert [1, 2] == [int(r["id"]) for r in _fetch(source, handler, _state())]
    assert 3 == source.stats.pages


def test_server_errors_are_retried_client_errors_are_not(tmp_path: Path) -> None:
    calls: list[int] = []

    def flaky(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        if len(calls) == 1:
            raise httpx.ConnectError("refused", request=request)
        if len(calls) in (2, 3):
            return httpx.Response(503 if len(calls) == 2 else 429)
        return httpx.Response(200, json={"data": []})

    source = RestSource(_config(tmp_path, pagination="none"))
    assert [] == _fetch(source, flaky, _state())
    assert 4 == len(calls)

    def refused(request: httpx.Request) -> httpx.Response:
        return httpx.Response(401, text="no token")

    with pytest.raises(RestSourceError, match="401"):
        _fetch(source, refused, _state())

    def wrong_shape(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"items": []})

    with pytest.raises(RestSourceError, match="data is not a list"):
        _fetch(source, wrong_shape, _state())


def test_a_stop_ends_a_poll_that_retries_an_unreachable_api() -> None:
    """A poll retrying a dead API for up to give_up_s is cancelled by a stop (no cursor is
    saved midway: the next start polls the same records again); a poll that ends is
    awaited, its error raised."""

    async def main() -> None:
        stop = asyncio.Event()
        cancelled = asyncio.Event()

        async def retrying() -> None:
            try:
                await asyncio.sleep(300)
            except asyncio.CancelledError:
                cancelled.set()
                raise

        asyncio.get_running_loop().call_later(0.05, stop.set)
        assert await asyncio.wait_for(until_stopped(retrying(), stop), 5) is False
        assert cancelled.is_set()

        async def done() -> None:
            await asyncio.sleep(0)

        async def fails() -> None:
            raise RestSourceError("HTTP 400")

        assert await until_stopped(done(), asyncio.Event()) is True
        with pytest.raises(RestSourceError, match="HTTP 400"):
            await until_stopped(fails(), asyncio.Event())

    asyncio.run(main())
