"""The embedded ``nats-server``: a JetStream child process with its own store directory.

Used when ``bus.url`` is unset (docs/architecture.md §6) and by the test fixtures. The server
listens on 127.0.0.1 only. A port of 0 means "pick a free one", chosen once and then kept, so that
:meth:`EmbeddedNats.restart` (the chaos tests kill the server) comes back on the same URL
with the same store directory and therefore the same streams, consumers and messages. The
process itself is a :class:`tidelake.runtime.processes.ChildProcess`.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

import orjson
import structlog

from tidelake.config import EmbeddedNatsConfig
from tidelake.errors import BusError
from tidelake.runtime.processes import ChildProcess, ProcessError, free_port

log = structlog.get_logger(__name__)

LOG_FILE = "nats-server.log"

__all__ = ["LOG_FILE", "EmbeddedNats", "free_port"]


class EmbeddedNats:
    """A ``nats-server -js`` child process; a context manager that starts and stops it."""

    def __init__(
        self,
        store_dir: str | Path,
        *,
        port: int = 0,
        binary: str = "nats-server",
        host: str = "127.0.0.1",
        startup_timeout_s: float = 15.0,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.store_dir = Path(store_dir).resolve()
        self.host = host
        self.binary = binary
        self.startup_timeout_s = startup_timeout_s
        #: More ``nats-server`` flags (``--user``/``--pass``, ``--tls…``); tests use them.
        self.extra_args = tuple(extra_args)
        self._requested_port = port
        self._port: int | None = None
        self._monitor_port: int | None = None
        self._process: ChildProcess | None = None

    @classmethod
    def from_config(cls, cfg: EmbeddedNatsConfig, store_dir: Path) -> EmbeddedNats:
        return cls(store_dir, port=cfg.port, binary=cfg.binary, host=cfg.host)

    # -- what callers use -------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None:
            raise BusError("the embedded nats-server has not been started")
        return self._port

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.store_dir / LOG_FILE

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None and self.running else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.alive()

    @property
    def process(self) -> ChildProcess:
        """The server's child process (pause/resume for the chaos harness)."""
        if self._process is None:
            raise BusError("the embedded nats-server has not been started")
        return self._process

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the server log, for error messages and test failures."""
        return self._process.log_tail(lines) if self._process is not None else ""

    def start(self) -> EmbeddedNats:
        """Start the server and wait until it accepts clients and JetStream is up."""
        if self.running:
            return self
        if self._process is None:
            exe = shutil.which(self.binary)
            if exe is None:
                raise BusError(
                    f"{self.binary!r} not found on PATH: install nats-server or set bus.url"
                )
            self._port = self._requested_port or free_port(self.host)
            self._monitor_port = free_port(self.host)
            self.store_dir.mkdir(parents=True, exist_ok=True)
            argv = [
                exe,
                "-a", self.host,
                "-p", str(self._port),
                "-m", str(self._monitor_port),
                "-js",
                "-sd", str(self.store_dir),
                *self.extra_args,
            ]  # fmt: skip
            # SIGTERM: JetStream flushes its store before it exits.
            self._process = ChildProcess(
                "nats-server",
                argv,
                log_path=self.log_path,
                ready=lambda _p: self._client_port_has_jetstream() and self._healthz_ok(),
                startup_timeout_s=self.startup_timeout_s,
                stop_timeout_s=10.0,
            )
        try:
            self._process.start()
        except ProcessError as exc:
            raise BusError(f"nats-server: {exc}") from None
        log.info("nats-server started", url=self.url, pid=self.pid, store=str(self.store_dir))
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM (JetStream flushes its store), then SIGKILL if it does not exit in time."""
        if self._process is not None:
            self._process.stop(timeout_s)

    def kill(self) -> None:
        """``kill -9`` the server (chaos tests); :meth:`start` brings it back on the same port."""
        if self._process is not None:
            self._process.kill()

    def restart(self, *, hard: bool = False) -> EmbeddedNats:
        """Stop (or ``kill -9`` when ``hard``) and start again on the same port and store."""
        if hard:
            self.kill()
        else:
            self.stop()
        return self.start()

    def __enter__(self) -> EmbeddedNats:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- readiness --------------------------------------------------------------------------

    def _client_port_has_jetstream(self) -> bool:
        """The server greets every client with ``INFO {...}``; it says whether JetStream is on."""
        try:
            with socket.create_connection((self.host, self.port), timeout=1.0) as s:
                buf = b""
                while b"\r\n" not in buf and len(buf) < 65536:
                    chunk = s.recv(4096)
                    if not chunk:
                        return False
                    buf += chunk
        except OSError:
            return False
        line = buf.split(b"\r\n", 1)[0]
        if not line.startswith(b"INFO "):
            return False
        with contextlib.suppress(orjson.JSONDecodeError):
            return bool(orjson.loads(line[5:]).get("jetstream"))
        return False

    def _healthz_ok(self) -> bool:
        """The monitoring ``/healthz`` answers 200 once JetStream has recovered its store."""
        url = f"http://{self.host}:{self._monitor_port}/healthz"
        try:
            with urllib.request.urlopen(url, timeout=1.0) as resp:
                return int(resp.status) == 200
        except (urllib.error.URLError, OSError):
            return False
