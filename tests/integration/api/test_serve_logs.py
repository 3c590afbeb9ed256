"""`tidelake serve` with ``log_format: json`` writes uvicorn's own lines as JSON too (uvicorn
keeps its loggers to itself unless it is told not to configure logging)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import orjson
import pytest
from apikit import start_serve, write_config

from tidelake.bus.server import free_port
from tidelake.runtime.processes import tidelake_argv

pytestmark = [pytest.mark.integration]


def test_uvicorns_lines_follow_log_format_json(tmp_path: Path) -> None:
    """A second serve on a taken port fails in uvicorn's bind (logger ``uvicorn.error``): with
    ``TIDELAKE_LOG_FORMAT=json`` that line is one JSON object, like tidelake's own."""
    port = free_port()
    config = write_config(tmp_path, "nats://127.0.0.1:1", port)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("TIDELAKE_")},
        "TIDELAKE_CONFIG": str(config),
    }
    first = start_serve(config, tmp_path, port, env)
    try:
        second = subprocess.run(
            tidelake_argv("serve", "--config", str(config)),
            env={**env, "TIDELAKE_LOG_FORMAT": "json"},
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        first.stop(timeout_s=10)
    records = [orjson.loads(line) for line in second.stderr.splitlines() if line.startswith("{")]
    bind = [r for r in records if r.get("logger") == "uvicorn.error"]
    assert bind, second.stderr
    assert ("error", True) == (bind[0]["level"], "address already in use" in bind[0]["event"])
    assert 0 != second.returncode
