"""What ``tidelake run`` tells the operator: the dashboard's URL for each kind of bind."""

from __future__ import annotations

import pytest

from tidelake.config import load_config
from tidelake.pipeline.run import dashboard_url


@pytest.mark.parametrize(
    ("host", "port", "url"),
    [
        ("127.0.0.1", 8321, "http://127.0.0.1:8321/"),
        ("0.0.0.0", 9000, "http://127.0.0.1:9000/"),  # a wildcard bind: this machine
        ("::", 8321, "http://127.0.0.1:8321/"),
        ("::1", 8321, "http://[::1]:8321/"),
        ("api.example.com", 443, "http://api.example.com:443/"),
    ],
)
def test_the_dashboard_url_is_one_a_browser_on_this_machine_opens(
    host: str, port: int, url: str
) -> None:
    """Wildcards become loopback, IPv6 literals get brackets, names stay."""
    cfg = load_config(environ={})
    cfg = cfg.model_copy(update={"api": cfg.api.model_copy(update={"host": host, "port": port})})
    assert url == dashboard_url(cfg)
