"""Logging setup (runtime/logs.py): JSON lines or console lines on stderr, one handler."""

from __future__ import annotations

import logging

import orjson
import pytest
import structlog

from tidelake.runtime.logs import configure_logging


def test_json_format_writes_one_json_object_per_event_for_structlog_and_stdlib(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``log_format: json``: a structlog event and a stdlib record (uvicorn's, say) are each
    one JSON object with event, level and an ISO 8601 UTC timestamp; stdout stays empty."""
    configure_logging("info", "json")
    structlog.get_logger("tidelake.test").info("batch staged", events=3)
    logging.getLogger("uvicorn.error").warning("port %d busy", 8000)
    structlog.get_logger("tidelake.test").debug("below the level")
    captured = capsys.readouterr()
    records = [orjson.loads(line) for line in captured.err.splitlines()]
    expected = [
        {"event": "batch staged", "level": "info", "events": 3},
        {"event": "port 8000 busy", "level": "warning", "logger": "uvicorn.error"},
    ]
    assert expected == [{k: v for k, v in r.items() if k != "timestamp"} for r in records]
    assert [True, True] == [r["timestamp"].endswith("Z") for r in records]
    assert "" == captured.out


def test_configuring_twice_keeps_one_stdlib_handler(capsys: pytest.CaptureFixture[str]) -> None:
    """A verb reconfigures after loading its config: a stdlib record is written once, in the
    last format chosen."""
    configure_logging("info", "json")
    configure_logging("warning", "console")
    logging.getLogger("py4j").error("gateway gone")
    lines = capsys.readouterr().err.splitlines()
    assert 1 == len(lines)
    assert "gateway gone" in lines[0]
    assert not lines[0].startswith("{")
