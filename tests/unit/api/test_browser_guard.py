"""Issue 23, deliver 7: the management API is safe by default against the requests a page the
operator has open can send (form POST, text/plain POST, no-cors fetch, a foreign or ``null``
Origin, a DNS-rebinding Host), while the dashboard's own requests and the CLI's still work.

Every hostile request is sent to a loopback server without a token (the default that the
probe found open), and the proof that it did not pass is both its status and the state it
would have changed: no table request in the ledger, no call reaching the bus.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tidelake.api.browser_guard import allowed_hosts
from tidelake.api.monitor import Monitor
from tidelake.api.server import create_app
from tidelake.config import ApiConfig, load_config
from tidelake.errors import ConfigError
from tidelake.lake.ledger import Ledger

SERVED = "http://127.0.0.1:8321"
EVIL = "http://evil.example"


class Served:
    """A loopback app without a token whose bus's DLQ calls are recorded, not sent."""

    def __init__(self, tmp_path: Path, **env: str) -> None:
        self.cfg = load_config(None, environ={"TIDELAKE_HOME": str(tmp_path), **env})
        self.monitor = Monitor(self.cfg)
        self.bus_calls: list[tuple[str, int]] = []

        def recorder(op: str) -> Any:
            async def call(seq: int) -> dict[str, Any]:
                self.bus_calls.append((op, seq))
                return {"dlq_seq": seq, "op": op}

            return call

        self.monitor.bus.dlq_replay = recorder("replay")  # type: ignore[method-assign]
        self.monitor.bus.dlq_discard = recorder("discard")  # type: ignore[method-assign]
        self.app = create_app(self.cfg, monitor=self.monitor)

    def send(
        self, method: str, path: str, headers: dict[str, str], content: bytes = b""
    ) -> httpx.Response:
        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url=SERVED) as client:
                return await client.request(method, path, headers=headers, content=content)

        return asyncio.run(go())

    def table_requests(self) -> dict[str, str]:
        return {t: r.action for t, r in Ledger(self.cfg.lake_state_dir).requests().items()}


# The exact headers a browser puts on each request a hostile page can make without a preflight.
FORM_POST = {
    "Origin": EVIL,
    "Sec-Fetch-Site": "cross-site",
    "Sec-Fetch-Mode": "navigate",
    "Content-Type": "application/x-www-form-urlencoded",
}
TEXT_PLAIN_FETCH = {
    "Origin": EVIL,
    "Sec-Fetch-Site": "cross-site",
    "Sec-Fetch-Mode": "cors",
    "Content-Type": "text/plain;charset=UTF-8",
}
NO_CORS_FETCH = {"Origin": EVIL, "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"}
# A sandboxed iframe or a data: page sends Origin: null.
NULL_ORIGIN_FORM = {"Origin": "null", "Content-Type": "application/x-www-form-urlencoded"}
# An older browser without Sec-Fetch-* headers, a JSON body type it could only send after a
# preflight, which is not answered anyway.
EVIL_ORIGIN_JSON = {"Origin": EVIL, "Content-Type": "application/json"}
# Another local web app (another port of localhost) is same-site but not same-origin.
SAME_SITE = {
    "Origin": "http://127.0.0.1:3000",
    "Sec-Fetch-Site": "same-site",
    "Content-Type": "application/json",
}
HOSTILE = {
    "form POST": (FORM_POST, b"reason=x", 403),
    "text/plain fetch": (TEXT_PLAIN_FETCH, b'{"reason": "x"}', 403),
    "no-cors fetch": (NO_CORS_FETCH, b"", 403),
    "null Origin": (NULL_ORIGIN_FORM, b"", 403),
    "evil Origin with JSON": (EVIL_ORIGIN_JSON, b"{}", 403),
    "same-site page": (SAME_SITE, b"{}", 403),
    # No browser header at all but no JSON type: what an old browser's form sends.
    "form POST without Origin": ({"Content-Type": "application/x-www-form-urlencoded"}, b"", 415),
    "text/plain without Origin": ({"Content-Type": "text/plain"}, b"{}", 415),
    "no Content-Type": ({}, b"", 415),
}
STATE_CHANGING = (
    "/api/dlq/7/discard",
    "/api/dlq/7/replay",
    "/api/tables/shop.orders/pause",
    "/api/tables/shop.orders/resume",
    "/api/replay",
)


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_hostile_page_requests_change_nothing(tmp_path: Path, kind: str) -> None:
    """Probe "any web page can discard dead letters": each request a page can send without a
    preflight is refused on every state-changing route, and nothing reaches the bus or the
    ledger."""
    served = Served(tmp_path)
    headers, body, status = HOSTILE[kind]
    answers = {p: served.send("POST", p, headers, body).status_code for p in STATE_CHANGING}
    assert dict.fromkeys(STATE_CHANGING, status) == answers
    assert [] == served.bus_calls
    assert {} == served.table_requests()


@pytest.mark.parametrize("path", ["/api/status", "/api/tables", "/metrics", "/", "/openapi.json"])
def test_a_rebinding_host_reads_nothing(tmp_path: Path, path: str) -> None:
    """Probe "a DNS-rebinding page can read /api/status": a Host naming another server gets
    400 on every route (reads included), while the served name answers."""
    served = Served(tmp_path)
    rebound = served.send("GET", path, {"Host": "evil.example:8321"})
    assert (400, "Invalid host header") == (rebound.status_code, rebound.text)
    assert 200 == served.send("GET", path, {}).status_code


def test_a_rebinding_host_cannot_post_either(tmp_path: Path) -> None:
    """A rebinding page is same-origin to itself: it passes the Origin check, so the Host
    check alone must stop its discard."""
    served = Served(tmp_path)
    headers = {
        "Host": "evil.example:8321",
        "Origin": "http://evil.example:8321",
        "Sec-Fetch-Site": "same-origin",
        "Content-Type": "application/json",
    }
    assert 400 == served.send("POST", "/api/dlq/7/discard", headers, b"{}").status_code
    assert [] == served.bus_calls


def test_the_dashboards_own_requests_still_work(tmp_path: Path) -> None:
    """What dashboard.ts sends (same origin, Sec-Fetch-Site: same-origin, JSON) reaches the
    routes: a pause and a resume are recorded, a discard and a replay reach the bus."""
    served = Served(tmp_path)
    page = {"Origin": SERVED, "Sec-Fetch-Site": "same-origin", "Content-Type": "application/json"}
    pause = served.send("POST", "/api/tables/shop.orders/pause", page, b'{"reason": "dash"}')
    assert (200, "pause") == (pause.status_code, pause.json()["action"])
    assert {"shop.orders": "pause"} == served.table_requests()
    assert 200 == served.send("POST", "/api/tables/shop.orders/resume", page).status_code
    assert {"shop.orders": "resume"} == served.table_requests()
    assert 200 == served.send("POST", "/api/dlq/7/discard", page).status_code
    assert 200 == served.send("POST", "/api/dlq/8/replay", page).status_code
    assert [("discard", 7), ("replay", 8)] == served.bus_calls
    polled = served.send("GET", "/api/status", {"Sec-Fetch-Site": "same-origin"})
    assert 200 == polled.status_code


def test_non_browser_clients_with_json_still_work(tmp_path: Path) -> None:
    """curl or a script (no Origin, no Sec-Fetch-*) with Content-Type: application/json passes,
    charset parameter included; so does the page reached as localhost or [::1]."""
    served = Served(tmp_path)
    json_utf8 = {"Content-Type": "application/json; charset=utf-8"}
    assert 200 == served.send("POST", "/api/dlq/3/discard", json_utf8).status_code
    for host in ("localhost:8321", "[::1]:8321"):
        page = {
            "Host": host,
            "Origin": f"http://{host}",
            "Sec-Fetch-Site": "same-origin",
            "Content-Type": "application/json",
        }
        assert 200 == served.send("POST", "/api/dlq/4/discard", page).status_code
    assert [("discard", 3), ("discard", 4), ("discard", 4)] == served.bus_calls


def test_health_answers_any_host_for_probes(tmp_path: Path) -> None:
    """Kubernetes probes /api/health by the pod's address: it answers any Host (it holds no
    data), while /api/status by the same address is refused."""
    served = Served(tmp_path)
    probe = {"Host": "10.1.2.3:8321"}
    assert (200, True) == (
        served.send("GET", "/api/health", probe).status_code,
        served.send("GET", "/api/health", probe).json()["ok"],
    )
    assert 400 == served.send("GET", "/api/status", probe).status_code


def test_configured_extra_host_names_are_answered(tmp_path: Path) -> None:
    """api.allowed_hosts adds names ('*.domain' wildcards included); others stay refused."""
    served = Served(tmp_path, TIDELAKE_API__ALLOWED_HOSTS="[tidelake.internal, '*.svc.local']")
    answers = {
        host: served.send("GET", "/api/status", {"Host": host}).status_code
        for host in ("tidelake.internal", "api.svc.local:8321", "svc.local.evil.example")
    }
    expected = {"tidelake.internal": 200, "api.svc.local:8321": 200, "svc.local.evil.example": 400}
    assert expected == answers


def test_allowed_hosts_name_the_bind_address_and_loopback() -> None:
    """Without a token (loopback) api.allowed_hosts joins loopback's names; with a
    token every route needs it, which no rebinding page can send, so any Host is answered
    (Prometheus and probes reach a pod by an address no config can list)."""
    assert ["localhost", "127.0.0.1", "[::1]"] == allowed_hosts(ApiConfig())
    assert ["localhost", "127.0.0.1", "[::1]", "a.example"] == allowed_hosts(
        ApiConfig(allowed_hosts=["A.example"])
    )
    with_token: dict[str, Any] = {"token": "t"}
    assert [["*"], ["*"]] == [
        allowed_hosts(ApiConfig(host="10.0.0.5", **with_token)),
        allowed_hosts(ApiConfig(host="0.0.0.0", allowed_hosts=["A.example"], **with_token)),
    ]


def test_an_empty_token_is_refused_at_config_load() -> None:
    """Probe "an empty TIDELAKE_API__TOKEN with --host 0.0.0.0 serves the API to anyone": an
    empty or blank token is a config error on any bind address."""
    for env in (
        {"TIDELAKE_API__TOKEN": ""},
        {"TIDELAKE_API__TOKEN": "  "},
        {"TIDELAKE_API__TOKEN": "", "TIDELAKE_API__HOST": "0.0.0.0"},
    ):
        with pytest.raises(ConfigError, match="TIDELAKE_API__TOKEN is empty"):
            load_config(None, environ=env)
    proc = subprocess.run(
        [sys.executable, "-m", "tidelake.cli", "serve", "--host", "0.0.0.0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": "/tmp", "TIDELAKE_API__TOKEN": ""},
    )
    assert (2, True) == (proc.returncode, "TIDELAKE_API__TOKEN is empty" in proc.stderr)


def test_a_malformed_host_pattern_is_a_config_error() -> None:
    """A wildcard Starlette cannot match ('api.*') is refused at load, not at the first request."""
    with pytest.raises(ConfigError, match="allowed_hosts"):
        load_config(None, environ={"TIDELAKE_API__ALLOWED_HOSTS": "['api.*']"})


def test_a_token_does_not_replace_the_browser_checks(tmp_path: Path) -> None:
    """With a token set, a cross-origin request carrying it (a page that learnt it) is still
    refused: the checks do not depend on the token."""
    served = Served(tmp_path, TIDELAKE_API__TOKEN="s3cret")
    headers = {**TEXT_PLAIN_FETCH, "Authorization": "Bearer s3cret"}
    assert 403 == served.send("POST", "/api/dlq/1/discard", headers, b"{}").status_code
    assert [] == served.bus_calls
