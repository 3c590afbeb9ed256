"""``tidelake source add|list|pause|resume|remove`` and ``/api/sources``: the same registry
(``<home>/sources.yaml``) through the command line and the API, without a bus."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from tidelake.api.server import create_app
from tidelake.capture.source_registry import SourceRegistry
from tidelake.cli import app
from tidelake.config import load_config


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TIDELAKE_HOME", str(tmp_path))
    monkeypatch.delenv("TIDELAKE_CONFIG", raising=False)
    return tmp_path


def _cli(*args: str) -> Any:
    return CliRunner().invoke(app, ["source", *args])


def test_add_from_a_file_and_options_then_pause_resume_remove(home: Path) -> None:
    settings = home / "tickets.yaml"
    settings.write_text("url: http://api.test/tickets\ndatabase: helpdesk\ntable: x\n")
    added = _cli(
        "add", "tickets", "-f", str(settings), "--table", "tickets", "--primary-key", "ticket_id",
        "--interval", "30", "--set", "params={state: open}", "--set", "limit=50",
    )  # fmt: skip
    assert 0 == added.exit_code, added.output
    assert "helpdesk.tickets" in added.output
    cfg = load_config(None, environ={"TIDELAKE_HOME": str(home)})
    source = SourceRegistry(cfg).get("tickets")
    assert (["ticket_id"], 30.0, {"state": "open"}, 50) == (
        source.primary_key, source.interval_s, source.params, source.limit
    )  # fmt: skip

    listed = _cli("list", "--json")
    assert 0 == listed.exit_code, listed.output
    (row,) = json.loads(listed.output)["sources"]
    assert ("tickets", "helpdesk.tickets", "not started") == (
        row["name"],
        row["table"],
        row["state"],
    )

    assert 0 == _cli("pause", "tickets").exit_code
    assert SourceRegistry(cfg).get("tickets").paused
    assert "paused" in _cli("list").output
    assert 0 == _cli("resume", "tickets").exit_code
    assert not SourceRegistry(cfg).get("tickets").paused
    assert 0 == _cli("remove", "tickets").exit_code
    assert {} == SourceRegistry(cfg).sources()


def test_refusals_exit_2_and_write_nothing(home: Path) -> None:
    assert 2 == _cli("add", "x", "--url", "http://a").exit_code  # no database, no table
    secret = _cli(
        "add", "x", "--url", "http://a", "--database", "d", "--table", "t", "--set", "token=abc"
    )
    assert 2 == secret.exit_code
    assert "token_file" in secret.output
    assert 2 == _cli("pause", "nope").exit_code
    assert not (home / "sources.yaml").exists()
    (home / "sources.yaml").write_text("added: [\n")
    assert 2 == _cli("list").exit_code


def _call(app_: Any, method: str, path: str, body: Any = None) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app_)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            return await c.request(method, path, json=body or {})

    return asyncio.run(go())


def test_the_api_adds_lists_pauses_resumes_and_removes(home: Path) -> None:
    cfg = load_config(None, environ={"TIDELAKE_HOME": str(home)})
    api = create_app(cfg)
    body = {
        "name": "crm",
        "source": {"url": "http://api.test/c", "database": "crm", "table": "customers"},
    }
    added = _call(api, "POST", "/api/sources", body)
    assert 200 == added.status_code, added.text
    assert {"source": "crm", "kind": "rest", "table": "crm.customers", "added": True} == (
        added.json()
    )
    assert 422 == _call(api, "POST", "/api/sources", body).status_code  # exists already
    bad = {"name": "x", "source": {**body["source"], "token": "s3cret"}}
    assert 422 == _call(api, "POST", "/api/sources", bad).status_code
    (row,) = _call(api, "GET", "/api/sources").json()["sources"]
    assert ("crm", "not started", None, 0) == (
        row["name"],
        row["state"],
        row["cursor"],
        row["errors"],
    )
    assert _call(api, "POST", "/api/sources/crm/pause").json()["paused"]
    assert "paused" == _call(api, "GET", "/api/sources").json()["sources"][0]["state"]
    assert not _call(api, "POST", "/api/sources/crm/resume").json()["paused"]
    assert 404 == _call(api, "POST", "/api/sources/nope/pause").status_code
    assert _call(api, "DELETE", "/api/sources/crm").json()["removed"]
    assert 404 == _call(api, "DELETE", "/api/sources/crm").status_code
    assert [] == _call(api, "GET", "/api/sources").json()["sources"]
