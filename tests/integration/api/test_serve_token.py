"""`tidelake serve` bound off loopback with a token asks for it (without one it does not start:
tests/unit/api/test_server.py)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from apikit import start_serve, write_config

from tidelake.bus.server import free_port

pytestmark = [pytest.mark.integration]


def test_serve_on_all_addresses_requires_the_bearer_token(tmp_path: Path) -> None:
    """Bound to 0.0.0.0 with TIDELAKE_API__TOKEN: /metrics and /api/status answer 401
    without the token or with a wrong one and 200 with it; /api/health answers anyone."""
    port = free_port()
    config = write_config(tmp_path, "nats://127.0.0.1:1", port)
    env = {"TIDELAKE_CONFIG": str(config), "TIDELAKE_API__TOKEN": "t0ken"}
    serve = start_serve(config, tmp_path, port, env, "--host", "0.0.0.0")
    try:
        url = f"http://127.0.0.1:{port}"
        for path in ("/metrics", "/api/status"):
            assert httpx.get(url + path, timeout=30).status_code == 401
            wrong = {"Authorization": "Bearer nope"}
            assert httpx.get(url + path, headers=wrong, timeout=30).status_code == 401
            right = {"Authorization": "Bearer t0ken"}
            assert httpx.get(url + path, headers=right, timeout=30).status_code == 200
        assert httpx.get(url + "/api/health", timeout=30).json()["auth"] is True
    finally:
        serve.stop(timeout_s=10)
