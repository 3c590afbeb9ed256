"""What keeps a web page the operator has open from driving or reading the management API.

A browser sends requests on behalf of any page it shows, to any address, loopback included;
the bearer token does not help when none is set (loopback's default), and a page can send a
form POST, a ``text/plain`` fetch or a ``no-cors`` fetch without any preflight. So, on every
request (the checks are the contract; :class:`BrowserGuard` applies them):

* the ``Host`` header must name this server: the bind address, ``localhost``,
  ``127.0.0.1``, ``[::1]`` or an ``api.allowed_hosts`` entry — a DNS-rebinding page sends its
  own name and gets 400 (Starlette's :class:`TrustedHostMiddleware` does the matching).
  ``GET /api/health`` is exempt: it says only that the server is up (version, whether a token
  is set), and Kubernetes probes it by the pod's address. With a token set the check is off:
  a browser never attaches the bearer token on its own, so a rebinding page reads nothing,
  while Prometheus and probes reach a pod by its address, a name no config can list;
* a request that can change state (any method but GET, HEAD, OPTIONS) must come from this
  server's own origin when a browser sent it: ``Sec-Fetch-Site`` other than ``same-origin``,
  or an ``Origin`` (``null`` included) other than ``<scheme>://<Host>``, gets 403. Clients
  that send neither (the CLI, curl, Prometheus) are not browsers and pass;
* and it must say ``Content-Type: application/json``, else 415: a page can only send that
  cross-origin after a CORS preflight, which this server never answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from tidelake.config import ApiConfig

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
# Binding every address names no host a client would send.
WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::", "[::]"})
OPEN_PATHS = frozenset({"/api/health"})
DEFAULT_PORTS = {"http": "80", "https": "443", "ws": "80", "wss": "443"}


def allowed_hosts(api: ApiConfig) -> list[str]:
    """The ``Host`` names (no port) the API answers, in TrustedHostMiddleware's patterns:
    any (``*``) when a bearer token guards every route (see the module's docstring)."""
    if api.token is not None:
        return ["*"]
    hosts = list(LOOPBACK_NAMES)
    bind = api.host.strip().lower()
    if bind not in WILDCARD_BINDS:
        # An IPv6 literal travels in brackets in the Host header.
        hosts.append(f"[{bind.strip('[]')}]" if ":" in bind else bind)
    hosts.extend(h.strip().lower() for h in api.allowed_hosts)
    return list(dict.fromkeys(hosts))


def _netloc(scheme: str, netloc: str) -> str:
    """``host[:port]`` lower-cased, without the scheme's default port."""
    netloc = netloc.lower()
    default = DEFAULT_PORTS.get(scheme.lower())
    if default and netloc.endswith(f":{default}"):
        return netloc[: -len(default) - 1]
    return netloc


def cross_origin_reason(headers: Headers, scheme: str) -> str | None:
    """Why a state-changing request is not from this server's own origin, or None.

    ``scheme`` is the request's (``http`` unless a TLS proxy says otherwise); the Host has been
    checked already, so the origin is compared with it by host and port.
    """
    site = headers.get("sec-fetch-site")
    if site is not None and site.strip().lower() != "same-origin":
        return f"a {site.strip()} request (Sec-Fetch-Site) may not change state"
    origin = headers.get("origin")
    if origin is None:
        return None
    parts = urlsplit(origin.strip())
    host = headers.get("host", "")
    if (
        parts.scheme.lower() not in ("http", "https")
        or not parts.netloc
        or _netloc(parts.scheme, parts.netloc) != _netloc(scheme, host)
    ):
        return f"Origin {origin!r} is not this server's origin; state may not be changed from it"
    return None


def content_type_reason(headers: Headers) -> str | None:
    """Why a state-changing request's body type is refused, or None for JSON."""
    given = headers.get("content-type")
    media = (given or "").split(";", 1)[0].strip().lower()
    if media == "application/json":
        return None
    what = f"Content-Type {given!r}" if given else "no Content-Type"
    return f"{what}: requests that change state must send Content-Type: application/json"


class BrowserGuard:
    """ASGI middleware applying the module's checks in front of ``app``."""

    def __init__(self, app: ASGIApp, *, hosts: Sequence[str]) -> None:
        self.app = app
        self.trusted = TrustedHostMiddleware(self._same_origin_json, hosts, www_redirect=False)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        exempt = scope["type"] == "http" and scope["path"] in OPEN_PATHS
        if scope["type"] != "http" or (exempt and scope["method"] in SAFE_METHODS):
            await self.app(scope, receive, send)
        else:
            await self.trusted(scope, receive, send)

    async def _same_origin_json(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] not in SAFE_METHODS:
            headers = Headers(scope=scope)
            refusal = cross_origin_reason(headers, scope.get("scheme", "http"))
            status = 403
            if refusal is None:
                refusal, status = content_type_reason(headers), 415
            if refusal is not None:
                await JSONResponse({"detail": refusal}, status_code=status)(scope, receive, send)
                return
        await self.app(scope, receive, send)
