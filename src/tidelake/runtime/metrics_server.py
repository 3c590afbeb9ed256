"""A long-running process's own ``GET /metrics`` and ``GET /healthz`` (config ``metrics:``).

``stage``, ``ingest --continuous``, ``capture`` and ``run`` call :func:`serving` around their
main loop. With ``metrics.port`` unset it does nothing; with a port it binds
``metrics.host:metrics.port`` before the loop starts (a port already taken fails the start
at once with :class:`MetricsPortError`, never later) and serves from a daemon thread:

* ``GET /metrics``: this process's registry in the Prometheus text format: its live
  counters (``runtime/live_metrics.py``: what this process did since it started),
  ``tidelake_build_info``, the process, platform and garbage-collector collectors of
  prometheus_client, and the age of the main loop's last turn;
* ``GET /healthz``: ``200 {"status": "ok", ...}`` while the main loop turned within
  ``metrics.healthy_within_s`` seconds, else ``503 {"status": "stalled", ...}``. The loops
  call :func:`beat` once per turn and from the natural points of their long waits (each
  table's commit of an ingest round, each retry of a back-off), so a long but legitimate
  step only needs the bound to exceed it, and a wedged loop (a hung JVM call, a deadlock) is
  reported after at most that long. A liveness probe restarts the process on 503.

One registry per process (not prometheus_client's multiprocess mode): the stages are
separate processes anyway, each scraped on its own port; ``run`` serves its own endpoint on
``metrics.port`` and gives its stage children ``port + 1``, ``port + 2``, ... (docs/metrics.md).

The server is prometheus_client's threading WSGI server with a small dispatcher in front of
its WSGI app, so ``/metrics`` is exactly the library's exposition (content negotiation,
``?name[]=`` filters, gzip) and ``/healthz`` sits beside it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import platform
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import Any, Protocol, Self
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import orjson
import structlog
from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    make_wsgi_app,
)
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.registry import Collector

import tidelake
from tidelake.config import MetricsConfig
from tidelake.errors import ConfigError

log = structlog.get_logger(__name__)

#: A WSGI start_response / application, as wsgiref calls them.
StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

#: ``run`` gives its stage children these offsets from ``metrics.port``, in this order.
CHILD_PORT_OFFSETS = {"capture": 1, "stager": 2, "ingest": 3}


class MetricsPortError(ConfigError):
    """``metrics.port`` cannot be bound (taken by another process, or not allowed)."""


class Liveness:
    """When the process's main loop last turned; read by ``/healthz`` from another thread.

    A float assignment is atomic under the GIL, so :meth:`beat` takes no lock: it is called
    from the hot loops (once per fetch of the stager)."""

    def __init__(self) -> None:
        self._last = time.monotonic()

    def beat(self) -> None:
        self._last = time.monotonic()

    def age_s(self) -> float:
        return max(0.0, time.monotonic() - self._last)


#: The process's one liveness record: the loops beat it whether or not a server runs.
LIVENESS = Liveness()


def beat() -> None:
    """The main loop turned (or a long step made progress): ``/healthz`` stays 200."""
    LIVENESS.beat()


def build_info() -> dict[str, str]:
    """The labels of ``tidelake_build_info``: what runs here."""
    return {
        "version": tidelake.__version__,
        "python": platform.python_version(),
        "implementation": platform.python_implementation().lower(),
        "platform": f"{platform.system().lower()}_{platform.machine().lower()}",
    }


class BuildInfoCollector(Collector):
    """``tidelake_build_info{version,python,implementation,platform} 1``."""

    def collect(self) -> Iterator[Metric]:
        info = InfoMetricFamily("tidelake_build", "The tidelake build of this process")
        info.add_metric([], build_info())
        yield info


class LoopCollector(Collector):
    """The main loop's last turn and the bound ``/healthz`` holds it to."""

    def __init__(self, process: str, healthy_within_s: float, liveness: Liveness) -> None:
        self.process = process
        self.healthy_within_s = healthy_within_s
        self.liveness = liveness

    def collect(self) -> Iterator[Metric]:
        age = GaugeMetricFamily(
            "tidelake_main_loop_age_seconds",
            "Seconds since this process's main loop last turned (healthz fails past the bound)",
            labels=["process"],
        )
        age.add_metric([self.process], self.liveness.age_s())
        yield age
        bound = GaugeMetricFamily(
            "tidelake_main_loop_healthy_within_seconds",
            "metrics.healthy_within_s: /healthz answers 503 once the loop age exceeds it",
            labels=["process"],
        )
        bound.add_metric([self.process], self.healthy_within_s)
        yield bound


def process_registry(
    process: str,
    healthy_within_s: float,
    collectors: Iterable[Collector] = (),
    liveness: Liveness = LIVENESS,
) -> CollectorRegistry:
    """This process's registry: build info, process/platform/GC collectors, the loop's age
    and ``collectors`` (the process's live metrics)."""
    registry = CollectorRegistry(auto_describe=True)
    for collector in (
        BuildInfoCollector(),
        PROCESS_COLLECTOR,
        PLATFORM_COLLECTOR,
        GC_COLLECTOR,
        LoopCollector(process, healthy_within_s, liveness),
        *collectors,
    ):
        registry.register(collector)
    return registry


def health(
    process: str, healthy_within_s: float, liveness: Liveness = LIVENESS
) -> tuple[int, dict[str, Any]]:
    """``(HTTP status, body)`` of ``/healthz``."""
    age = liveness.age_s()
    ok = age <= healthy_within_s
    return (200 if ok else 503), {
        "status": "ok" if ok else "stalled",
        "process": process,
        "pid": os.getpid(),
        "version": tidelake.__version__,
        "loop_age_s": round(age, 3),
        "healthy_within_s": healthy_within_s,
    }


def make_app(
    process: str,
    registry: CollectorRegistry,
    healthy_within_s: float,
    liveness: Liveness = LIVENESS,
) -> WsgiApp:
    """The WSGI app: ``/healthz`` here, ``/metrics`` by prometheus_client, 404 otherwise."""
    metrics_app: WsgiApp = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO") or "/"
        if path == "/metrics":
            return metrics_app(environ, start_response)
        if path == "/healthz":
            status, body = health(process, healthy_within_s, liveness)
            reason = "OK" if status == 200 else "Service Unavailable"
            data = orjson.dumps(body)
            start_response(
                f"{status} {reason}",
                [("Content-Type", "application/json"), ("Content-Length", str(len(data)))],
            )
            return [data]
        data = b"tidelake " + process.encode() + b": GET /metrics, GET /healthz\n"
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [data]

    return app


class _QuietHandler(WSGIRequestHandler):
    """No access log line per scrape on stderr (the stage logs are structlog's)."""

    def log_message(self, format: str, *args: Any) -> None:
        return None


class MetricsServer:
    """The endpoint of one process; :meth:`start` binds (or raises), :meth:`stop` closes."""

    def __init__(
        self,
        cfg: MetricsConfig,
        process: str,
        collectors: Iterable[Collector] = (),
        liveness: Liveness = LIVENESS,
    ) -> None:
        if cfg.port is None:
            raise ValueError("metrics.port is not set")
        self.host = cfg.host
        self.port = cfg.port
        self.process = process
        self.registry = process_registry(process, cfg.healthy_within_s, collectors, liveness)
        self.app = make_app(process, self.registry, cfg.healthy_within_s, liveness)
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> Self:
        class Server(ThreadingWSGIServer):
            address_family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
            # The default (SO_REUSEADDR) lets a restarted process bind at once after a
            # crash; a port another process listens on is still refused.
            allow_reuse_address = True

        try:
            server = make_server(
                self.host, self.port, self.app, server_class=Server, handler_class=_QuietHandler
            )
        except OSError as exc:
            why = (
                "the port is taken (another process listens there: a second copy of this "
                "verb, or another stage with the same metrics.port; give each its own port)"
                if exc.errno == errno.EADDRINUSE
                else exc.strerror or str(exc)
            )
            raise MetricsPortError(
                f"metrics.port: cannot serve /metrics and /healthz on "
                f"{self.host}:{self.port}: {why}"
            ) from exc
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, name=f"metrics-{self.port}", daemon=True
        )
        self._thread.start()
        log.info("metrics and health endpoint", process=self.process, url=self.url)
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@contextlib.contextmanager
def serving(
    cfg: MetricsConfig, process: str, collectors: Iterable[Collector] = ()
) -> Iterator[MetricsServer | None]:
    """Serve this process's endpoint while the block runs; nothing when ``metrics.port`` is
    unset. The loop's liveness starts fresh here (start-up counts as a turn)."""
    beat()
    if cfg.port is None:
        yield None
        return
    with MetricsServer(cfg, process, collectors) as server:
        yield server


class _Child(Protocol):
    """A child process of ``run`` as :func:`assign_child_ports` sees it."""

    name: str
    env: dict[str, str]


def child_port(cfg: MetricsConfig, stage: str) -> int | None:
    """The port ``run`` gives its child ``stage`` (``capture``, ``stager``, ``ingest``):
    ``metrics.port`` + its offset, or None when metrics are off."""
    if cfg.port is None:
        return None
    return cfg.port + CHILD_PORT_OFFSETS[stage]


def child_env(cfg: MetricsConfig, stage: str) -> dict[str, str]:
    """The environment that moves child ``stage`` of ``run`` to its own metrics port (the
    children inherit the parent's config, whose port ``run`` itself binds)."""
    port = child_port(cfg, stage)
    return {} if port is None else {"TIDELAKE_METRICS__PORT": str(port)}


def assign_child_ports(children: Iterable[_Child], cfg: MetricsConfig) -> None:
    """Give each stage child of ``run`` its own metrics port (in its ``env``): the known
    stages their fixed offsets (:data:`CHILD_PORT_OFFSETS`), any other (a second stager of a
    fault run) the next ports after them, in order; ``serve`` binds no metrics port."""
    if cfg.port is None:
        return
    extra = max(CHILD_PORT_OFFSETS.values())
    for child in children:
        if child.name == "serve":
            continue
        if child.name in CHILD_PORT_OFFSETS:
            offset = CHILD_PORT_OFFSETS[child.name]
        else:
            extra += 1
            offset = extra
        child.env["TIDELAKE_METRICS__PORT"] = str(cfg.port + offset)
