"""Issue 23, deliver 7, against a real ``tidelake serve`` on loopback without a token (the
default the probe found open) and a real nats-server holding a real dead letter: the requests
a hostile page can send are refused and the dead letter survives them; the dashboard's own
request (same origin, JSON) still discards it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from apikit import Pipeline, canal_row, start_pipeline

from tidelake.bus import dlq

pytestmark = [pytest.mark.integration]

EVIL = "http://evil.example"


@pytest.fixture
def pipeline(tmp_path: Path) -> Iterator[Pipeline]:
    """nats-server, the stager and serve (no ingest: nothing here needs the lake)."""
    p = start_pipeline(tmp_path, ingest=False)
    yield p
    p.stop()


def _dead_letters(p: Pipeline) -> list[int]:
    return [m["dlq_seq"] for m in p.get("/api/dlq").json()["messages"]]


def test_a_hostile_page_cannot_discard_a_dead_letter_of_a_real_server(pipeline: Pipeline) -> None:
    """Probes "any web page can discard dead letters" and "a DNS-rebinding page can read
    /api/status": form POST, text/plain and no-cors fetches, a null or foreign Origin and a
    rebinding Host all fail and the dead letter is still there; the dashboard's request then
    discards it."""
    p = pipeline
    subject = p.subject_prefix + "shop.orders"
    dlq_subject = dlq.dlq_subject(p.cfg.bus.dlq.subject_prefix, subject)
    row = canal_row("shop.orders", 1, int(time.time() * 1000))
    p.publish([(dlq_subject, row)], headers=dlq.dlq_headers("max_deliver", subject, 41, 6))
    [seq] = _dead_letters(p)
    port = p.url.rsplit(":", 1)[1]
    discard = f"{p.url}/api/dlq/{seq}/discard"
    hostile = {
        "form POST": ({"Origin": EVIL, "Sec-Fetch-Site": "cross-site"}, {"data": {"a": "1"}}),
        "text/plain fetch": (
            {"Origin": EVIL, "Sec-Fetch-Site": "cross-site", "Content-Type": "text/plain"},
            {"content": b"{}"},
        ),
        "no-cors fetch": ({"Origin": EVIL, "Sec-Fetch-Mode": "no-cors"}, {}),
        "null Origin": ({"Origin": "null", "Content-Type": "application/json"}, {"content": b"{}"}),
        "rebinding Host": (
            {
                "Host": f"evil.example:{port}",
                "Origin": f"http://evil.example:{port}",
                "Sec-Fetch-Site": "same-origin",
                "Content-Type": "application/json",
            },
            {"content": b"{}"},
        ),
        "no JSON type": ({}, {}),
    }
    answers = {
        kind: httpx.post(discard, headers=headers, timeout=30, **body).status_code  # type: ignore[arg-type]
        for kind, (headers, body) in hostile.items()
    }
    expected = {
        "form POST": 403,
        "text/plain fetch": 403,
        "no-cors fetch": 403,
        "null Origin": 403,
        "rebinding Host": 400,
        "no JSON type": 415,
    }
    assert expected == answers
    assert [seq] == _dead_letters(p)
    rebound = httpx.get(p.url + "/api/status", headers={"Host": f"evil.example:{port}"}, timeout=30)
    assert 400 == rebound.status_code
    page = {"Origin": p.url, "Sec-Fetch-Site": "same-origin", "Content-Type": "application/json"}
    assert 200 == httpx.post(discard, headers=page, content=b"{}", timeout=30).status_code
    assert [] == _dead_letters(p)
