"""A real OTLP receiver for the tracing tests: Jaeger v2 (an OpenTelemetry Collector build)
with in-memory storage, on free ports of 127.0.0.1.

``scripts/gotools`` builds ``jaeger`` v1.76.0 into ``<repo>/.cache/bin`` (as a tool of the
pinned module ``scripts/jaeger/``: Jaeger's own go.mod has replace directives, which
``go install pkg@version`` refuses). The configuration below is Jaeger's ``cmd/jaeger/config.yaml``
cut down to what the tests read: the OTLP/HTTP receiver, the storage exporter, one memory
backend, and the query extension whose HTTP API (``/api/traces``, ``/api/v3/traces``) reads
the spans back. No metrics endpoint, no sampling, no UI.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import orjson

from tidelake.runtime.processes import free_port

REPO = Path(__file__).resolve().parents[2]
JAEGER_BIN_ENV = "TIDELAKE_JAEGER_BIN"

CONFIG = """\
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: []
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: info

extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 10000
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:{query_port}
    grpc:
      endpoint: 127.0.0.1:{query_grpc_port}

receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{otlp_port}

exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
"""


def jaeger_binary() -> str | None:
    """``$TIDELAKE_JAEGER_BIN``, ``<repo>/.cache/bin/jaeger``, or ``jaeger`` on the PATH."""
    for candidate in (os.environ.get(JAEGER_BIN_ENV, ""), str(REPO / ".cache" / "bin" / "jaeger")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("jaeger")


class Jaeger:
    """``jaeger --config <file>`` as a child process; :attr:`otlp_endpoint` takes OTLP/HTTP,
    :meth:`traces` reads what it stored."""

    def __init__(self, binary: str, workdir: Path) -> None:
        self.binary = binary
        self.workdir = workdir
        self.otlp_port = free_port()
        self.query_port = free_port()
        self.query_grpc_port = free_port()
        self.config_path = workdir / "jaeger.yaml"
        self.log_path = workdir / "jaeger.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def otlp_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.otlp_port}"

    @property
    def query_url(self) -> str:
        return f"http://127.0.0.1:{self.query_port}"

    def start(self, timeout_s: float = 60.0) -> Jaeger:
        self.config_path.write_text(
            CONFIG.format(
                otlp_port=self.otlp_port,
                query_port=self.query_port,
                query_grpc_port=self.query_grpc_port,
            )
        )
        log = self.log_path.open("wb")
        # Jaeger's own telemetry would dial an OTLP/gRPC collector on 127.0.0.1:4317: off.
        env = {**os.environ, "OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "none"}
        self._proc = subprocess.Popen(
            [self.binary, "--config", str(self.config_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.workdir,
            env=env,
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"jaeger exited {self._proc.returncode}: {self.log_text()}")
            if self._ready():
                return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"jaeger not ready after {timeout_s} s: {self.log_text()}")

    def _ready(self) -> bool:
        try:
            self.services()
            # The receiver too: an empty OTLP/HTTP request is answered once it listens.
            req = urllib.request.Request(
                f"{self.otlp_endpoint}/v1/traces",
                data=b"",
                headers={"Content-Type": "application/x-protobuf"},
            )
            with urllib.request.urlopen(req, timeout=2):
                return True
        except (OSError, urllib.error.URLError):
            return False

    def stop(self, timeout_s: float = 2.0) -> None:
        """SIGTERM, then SIGKILL: its in-memory spans are the tests' and read by then (Jaeger
        took the whole 10 s it was once given to stop, three times a suite run)."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def __enter__(self) -> Jaeger:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    # -- the query API ----------------------------------------------------------------------

    def _get(self, path: str, **params: Any) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.query_url}{path}{query}", timeout=10) as resp:
            return orjson.loads(resp.read())

    def services(self) -> list[str]:
        return list(self._get("/api/services").get("data") or [])

    def traces(self, service: str, limit: int = 1000) -> list[dict[str, Any]]:
        """The traces holding spans of ``service`` (Jaeger's JSON model: ``spans`` with
        ``references``, ``processes``)."""
        return list(self._get("/api/traces", service=service, limit=limit).get("data") or [])

    def spans(self, service: str) -> list[dict[str, Any]]:
        """Every span of ``service``, each with its ``serviceName`` filled in."""
        out = []
        for trace in self.traces(service):
            processes = trace.get("processes") or {}
            for span in trace["spans"]:
                name = (processes.get(span.get("processID")) or {}).get("serviceName")
                if name == service:
                    out.append({**span, "serviceName": name})
        return out

    def wait_spans(self, service: str, want: int, timeout_s: float = 30.0) -> list[dict[str, Any]]:
        """:meth:`spans` of ``service`` once there are at least ``want`` (the SDK exports in
        the background); AssertionError with what came after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = self.spans(service)
            if len(found) >= want or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert len(found) >= want, f"{len(found)} of {want} spans of {service} in jaeger"
        return found


def tags(span: dict[str, Any]) -> dict[str, Any]:
    """A Jaeger JSON span's tags as a mapping."""
    return {t["key"]: t["value"] for t in span.get("tags") or []}


def span_ctx(span: dict[str, Any]) -> tuple[int, int]:
    """A Jaeger JSON span's (trace id, span id) as integers (as the SDK's SpanContext)."""
    return int(span["traceID"], 16), int(span["spanID"], 16)


def refs(span: dict[str, Any], kind: str) -> set[tuple[int, int]]:
    """The (trace id, span id) of ``span``'s references of ``kind``: ``FOLLOWS_FROM`` (the
    OTLP span links) or ``CHILD_OF`` (its parent)."""
    return {
        (int(r["traceID"], 16), int(r["spanID"], 16))
        for r in span.get("references") or []
        if r.get("refType") == kind
    }
