"""One way to connect to NATS: credentials, TLS and reconnects from :class:`BusConfig`.

Secrets come from :meth:`AuthConfig.resolved_password` / :meth:`AuthConfig.resolved_token`
(environment or files) and are handed to the client only; nothing here logs them, and URLs
are logged with any ``user:password@`` part removed.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import nats
import nats.errors
import structlog
from nats.aio.client import Client

from tidelake.config import BusConfig, TlsConfig
from tidelake.errors import BusError, BusRefused

log = structlog.get_logger(__name__)

#: Seconds between reconnect attempts to the same server.
RECONNECT_WAIT_S = 0.5


def server_urls(url: str) -> list[str]:
    """The servers of ``bus.url``: one URL, or several separated by commas (a cluster's nodes;
    the client connects to any and fails over to the others)."""
    urls = [u.strip() for u in url.split(",") if u.strip()]
    if not urls:
        raise BusError(f"bus.url {url!r} names no server")
    return urls


def redact_url(url: str) -> str:
    """``url`` (or a comma-separated list of URLs) without credentials, safe to log."""
    if "," in url:
        return ",".join(redact_url(u.strip()) for u in url.split(","))
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def tls_context(tls: TlsConfig) -> ssl.SSLContext:
    """A client TLS context: verify the server against ``ca_file`` (or the system CAs),
    present ``cert_file``/``key_file`` when given (mutual TLS)."""
    ctx = ssl.create_default_context(
        ssl.Purpose.SERVER_AUTH, cafile=str(tls.ca_file) if tls.ca_file else None
    )
    if tls.cert_file is not None:
        ctx.load_cert_chain(str(tls.cert_file), str(tls.key_file) if tls.key_file else None)
    elif tls.key_file is not None:
        raise BusError("bus.tls.key_file is set without bus.tls.cert_file")
    return ctx


def connect_options(cfg: BusConfig, url: str) -> dict[str, Any]:
    """Keyword arguments for :meth:`nats.aio.client.Client.connect` (holds secrets: never log)."""
    opts: dict[str, Any] = {
        "servers": server_urls(url),
        "name": "tidelake",
        "connect_timeout": cfg.connect_timeout_s,
        "allow_reconnect": True,
        "max_reconnect_attempts": -1,  # a stage outlives server restarts; it never gives up
        "reconnect_time_wait": RECONNECT_WAIT_S,
    }
    auth = cfg.auth
    password = auth.resolved_password()
    token = auth.resolved_token()
    if auth.user is not None or password is not None:
        if auth.user is None or password is None:
            raise BusError("bus.auth: user and password go together")
        opts["user"] = auth.user
        opts["password"] = password
    if token is not None:
        opts["token"] = token
    if auth.creds_file is not None:
        opts["user_credentials"] = str(auth.creds_file)
    if auth.nkey_seed_file is not None:
        opts["nkeys_seed"] = str(auth.nkey_seed_file)
    if cfg.tls is not None:
        opts["tls"] = tls_context(cfg.tls)
    return opts


async def _log_error(exc: Exception) -> None:
    log.warning("nats connection error", error=type(exc).__name__, detail=str(exc))


def _is_refusal(exc: BaseException) -> bool:
    """The server refused who we are (credentials, TLS identity), not an outage."""
    if isinstance(exc, nats.errors.AuthorizationError | ssl.SSLError):
        return True
    text = str(exc).lower()
    return any(
        word in text for word in ("authorization violation", "authentication", "certificate")
    )


async def _log_reconnected() -> None:
    log.info("nats reconnected")


async def connect(cfg: BusConfig, url: str | None = None, *, reconnect: bool = True) -> Client:
    """Connect to ``url`` (default ``cfg.url``); reconnects forever once connected, unless
    ``reconnect`` is false (the connection then closes on the first error: the ordered
    publisher re-opens its own, capture/publisher.py).

    The first connection must succeed within ``3 * connect_timeout_s`` or :class:`BusError`
    is raised (a retry may help: the error is transient).
    """
    target = url or cfg.url
    if not target:
        raise BusError("no NATS url: set bus.url (TIDELAKE_BUS__URL) or start the embedded server")
    opts = connect_options(cfg, target)
    opts["allow_reconnect"] = reconnect
    nc = Client()

    # nats-py reports an authorization violation only to the error callback and then raises
    # NoServersError, which reads like an outage; kept here, it makes the failure terminal.
    refusals: list[str] = []

    async def on_error(exc: Exception) -> None:
        if _is_refusal(exc):
            refusals.append(str(exc))
        await _log_error(exc)

    async def log_disconnected() -> None:
        if not nc.is_closed:  # closing on purpose also fires this callback
            log.warning("nats disconnected; reconnecting", url=redact_url(target))

    try:
        await asyncio.wait_for(
            nc.connect(
                **opts,
                error_cb=on_error,
                disconnected_cb=log_disconnected,
                reconnected_cb=_log_reconnected,
            ),
            timeout=3 * cfg.connect_timeout_s,
        )
    except (OSError, TimeoutError, nats.errors.Error) as exc:
        await nc.close()
        if refusals or _is_refusal(exc):
            why = refusals[-1] if refusals else str(exc)
            raise BusError(
                f"NATS at {redact_url(target)} refused the connection: {why}"
            ) from BusRefused(why)
        raise BusError(
            f"cannot connect to NATS at {redact_url(target)}: {type(exc).__name__}"
        ) from exc
    log.debug("nats connected", url=redact_url(target))
    return nc


_T = TypeVar("_T")


async def on_jetstream(cfg: BusConfig, work: Callable[[Any], Awaitable[_T]]) -> _T:
    """``work(js)`` on a connection of its own (no reconnect: an operator's one-off call),
    closed afterwards."""
    nc = await connect(cfg, reconnect=False)
    try:
        return await work(nc.jetstream())
    finally:
        await nc.close()
