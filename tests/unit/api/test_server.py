"""The HTTP server without a pipeline: bearer token, health, the dashboard, time parsing."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tidelake.api.server import create_app, parse_time_ms
from tidelake.config import ApiConfig, Config, load_config
from tidelake.errors import ConfigError


def _config(tmp_path: Path, **env: str) -> Config:
    return load_config(None, environ={"TIDELAKE_HOME": str(tmp_path), **env})


def _get(app: Any, path: str, headers: dict[str, str] | None = None) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://127.0.0.1:8321"
        ) as client:
            return await client.get(path, headers=headers or {})

    return asyncio.run(go())


def test_with_a_token_every_route_but_health_and_the_page_needs_it(tmp_path: Path) -> None:
    """401 without or with a wrong bearer token, 200 with the right one; /api/health and
    the dashboard's page answer without."""
    app = create_app(_config(tmp_path, TIDELAKE_API__TOKEN="s3cret"))
    for path in ("/metrics", "/api/status", "/api/dlq", "/api/tables"):
        assert _get(app, path).status_code == 401, path
        assert _get(app, path, {"Authorization": "Bearer nope"}).status_code == 401, path
    assert _get(app, "/metrics", {"Authorization": "Bearer s3cret"}).status_code == 200
    ok = _get(app, "/api/status", {"Authorization": "Bearer s3cret"})
    assert ok.status_code == 200
    assert ok.json()["bus"]["up"] is False
    assert _get(app, "/api/health").json() == {"ok": True, "version": "0.1.0", "auth": True}
    assert _get(app, "/").status_code == 200


def test_without_a_token_on_loopback_everything_is_open(tmp_path: Path) -> None:
    """The default: bound to 127.0.0.1, no token, no 401."""
    app = create_app(_config(tmp_path))
    assert _get(app, "/api/status").status_code == 200
    assert "tidelake_bus_up 0.0" in _get(app, "/metrics").text


def test_off_loopback_without_a_token_is_refused(tmp_path: Path) -> None:
    """The API settings, the application and `tidelake serve --host 0.0.0.0` all refuse to
    serve off loopback without a token (a config that only names the bind address loads: the
    verbs that do not listen never get the token)."""
    with pytest.raises(ConfigError, match="TIDELAKE_API__TOKEN"):
        ApiConfig(host="0.0.0.0").require_token_to_listen()
    cfg = _config(tmp_path, TIDELAKE_API__HOST="0.0.0.0")
    with pytest.raises(ConfigError, match=r"bearer token is required to serve on 0\.0\.0\.0"):
        create_app(cfg)
    proc = subprocess.run(
        [sys.executable, "-m", "tidelake.cli", "serve", "--host", "0.0.0.0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"},
    )
    assert proc.returncode == 2, proc.stderr
    assert "token" in proc.stderr


def test_the_page_says_how_to_build_a_missing_dashboard(tmp_path: Path) -> None:
    """Without built static files / explains `make dashboard`; the API still answers."""
    app = create_app(_config(tmp_path), static_dir=tmp_path / "nothing")
    page = _get(app, "/")
    assert page.status_code == 200
    assert "make dashboard" in page.text


def test_openapi_documents_the_management_routes(tmp_path: Path) -> None:
    """The OpenAPI document lists status, explorer, DLQ, replay and table control routes."""
    paths = set(_get(create_app(_config(tmp_path)), "/openapi.json").json()["paths"])
    expected = {
        "/api/status",
        "/api/messages",
        "/api/dlq/{seq}/replay",
        "/api/dlq/{seq}/discard",
        "/api/replay",
        "/api/tables/{table}/pause",
        "/api/tables/{table}/resume",
    }
    assert expected <= paths


def test_times_are_unix_seconds_or_iso_8601_in_utc() -> None:
    """Both spellings of one instant give the same milliseconds; nonsense is refused."""
    assert parse_time_ms("1714929186.5") == 1_714_929_186_500
    assert parse_time_ms("2024-05-05T17:13:06Z") == 1_714_929_186_000
    assert parse_time_ms("2024-05-05T17:13:06") == 1_714_929_186_000
    with pytest.raises(ValueError, match="ISO"):
        parse_time_ms("yesterday")


def test_a_malformed_state_file_is_named_in_the_status_not_a_server_error(
    tmp_path: Path,
) -> None:
    """paused.json that is not JSON: /api/status still answers, and its errors and problems
    name the file (the ingest stops on the same terminal error)."""
    cfg = _config(tmp_path)
    cfg.lake_state_dir.mkdir(parents=True)
    (cfg.lake_state_dir / "paused.json").write_bytes(b"{torn")
    response = _get(create_app(cfg), "/api/status")
    assert 200 == response.status_code
    status = response.json()
    assert [True, True] == [
        any("paused.json" in e["message"] for e in status["errors"]),
        any("paused.json" in p for p in status["problems"]),
    ]


def test_capture_snapshot_route_writes_the_request_record_behind_the_token(
    tmp_path: Path,
) -> None:
    """``POST /api/capture/snapshot`` needs the token like the other POST routes, refuses a
    name that is no ``db.table``, and writes the request record the capture polls
    (``_tidelake/capture/snapshot-requests/<db.table>.json`` in the staging store)."""
    cfg = _config(tmp_path, TIDELAKE_API__TOKEN="s3cret")
    app = create_app(cfg)

    async def post(body: dict[str, Any], token: str | None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://127.0.0.1:8321"
        ) as client:
            return await client.post("/api/capture/snapshot", json=body, headers=headers)

    assert asyncio.run(post({"table": "shop.orders"}, None)).status_code == 401
    assert asyncio.run(post({"table": "orders"}, "s3cret")).status_code == 422
    done = asyncio.run(post({"table": "shop.orders"}, "s3cret"))
    assert done.status_code == 200, done.text
    record = Path(cfg.stage_root) / "_tidelake/capture/snapshot-requests/shop.orders.json"
    assert orjson.loads(record.read_bytes())["table"] == "shop.orders"
