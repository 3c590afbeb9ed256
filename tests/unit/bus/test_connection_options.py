"""Connection options: credentials reach the client, never the logs; TLS is validated."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelake.bus.connection import connect_options, redact_url, tls_context
from tidelake.bus.dlq import HEADER_REASON, HEADER_STREAM_SEQ, dlq_headers, dlq_subject
from tidelake.config import BusConfig, TlsConfig, load_config
from tidelake.errors import BusError


def test_redact_url_removes_user_and_password() -> None:
    """A URL with credentials is logged without them; one without is unchanged."""
    assert redact_url("nats://u:p4ss@host:4222") == "nats://host:4222"
    assert redact_url("tls://host:4222") == "tls://host:4222"


def test_token_and_files_become_client_options(tmp_path: Path) -> None:
    """The token comes from the environment; creds and nkey seed files are passed as paths."""
    creds = tmp_path / "user.creds"
    seed = tmp_path / "user.nk"
    cfg = load_config(
        None,
        environ={
            "TIDELAKE_BUS__AUTH__TOKEN": "tok-123",
            "TIDELAKE_BUS__AUTH__CREDS_FILE": str(creds),
            "TIDELAKE_BUS__AUTH__NKEY_SEED_FILE": str(seed),
        },
    )
    opts = connect_options(cfg.bus, "nats://h:1")
    assert opts["token"] == "tok-123"
    assert opts["user_credentials"] == str(creds)
    assert opts["nkeys_seed"] == str(seed)
    assert opts["max_reconnect_attempts"] == -1
    assert "user" not in opts


def test_password_file_is_read_and_needs_a_user(tmp_path: Path) -> None:
    """A password from a file is used with its user; a password without a user is refused."""
    pw = tmp_path / "pw"
    pw.write_text("from-file\n")
    cfg = BusConfig.model_validate({"auth": {"user": "u", "password_file": str(pw)}})
    opts = connect_options(cfg, "nats://h:1")
    assert (opts["user"], opts["password"]) == ("u", "from-file")
    lonely = BusConfig.model_validate({"auth": {"password_file": str(pw)}})
    with pytest.raises(BusError, match="user and password"):
        connect_options(lonely, "nats://h:1")


def test_tls_key_without_certificate_is_refused(tmp_path: Path) -> None:
    """A client key alone cannot be used: say so instead of failing inside ssl."""
    with pytest.raises(BusError, match="cert_file"):
        tls_context(TlsConfig(key_file=tmp_path / "k.pem"))
    assert tls_context(TlsConfig()).verify_mode.name == "CERT_REQUIRED"


def test_dlq_subject_and_headers() -> None:
    """The DLQ copy goes to <prefix>.<original subject>; the reason is one clean line."""
    assert dlq_subject("dlq", "cdc.shop.orders") == "dlq.cdc.shop.orders"
    h = dlq_headers("not JSON:\n  line 1", "cdc.shop.orders", 42, 1)
    assert h[HEADER_REASON] == "not JSON: line 1"
    assert h[HEADER_STREAM_SEQ] == "42"


def test_a_comma_separated_url_names_every_node_of_a_cluster() -> None:
    """bus.url may list a cluster's nodes (issue 23): the client gets all of them, in order,
    and the logged form drops every node's credentials."""
    url = "nats://a:4222, nats://u:p4ss@b:4223,nats://c:4224"
    opts = connect_options(BusConfig(url=url), url)
    assert ["nats://a:4222", "nats://u:p4ss@b:4223", "nats://c:4224"] == opts["servers"]
    assert "nats://a:4222,nats://b:4223,nats://c:4224" == redact_url(url)


def test_a_url_of_commas_only_is_refused() -> None:
    """A list with no server in it is a configuration error, not an empty pool."""
    with pytest.raises(BusError, match="names no server"):
        connect_options(BusConfig(url=" , "), " , ")
