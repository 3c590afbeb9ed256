"""The embedded ``nats-server``: a JetStream child process with its own store directory.

Used when ``bus.url`` is unset (DESIGN.md §6) and by the test fixtures. The server listens on
127.0.0.1 only. A port of 0 means "pick a free one", chosen once and then kept, so that
:meth:`EmbeddedNats.restart` (the chaos tests kill the server) comes back on the same URL
with the same store directory and therefore the same streams, consumers and messages.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

import orjson
import structlog

from tidelake.config import EmbeddedNatsConfig
from tidelake.errors import BusError

log = structlog.get_logger(__name__)

LOG_FILE = "nats-server.log"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (bind port 0, read it back, release it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


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
        self._proc: subprocess.Popen[bytes] | None = None

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
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> EmbeddedNats:
        """Start the server and wait until it accepts clients and JetStream is up."""
        if self.running:
            return self
        exe = shutil.which(self.binary)
        if exe is None:
            raise BusError(f"{self.binary!r} not found on PATH: install nats-server or set bus.url")
        if self._port is None:
            self._port = self._requested_port or free_port(self.host)
        if self._monitor_port is None:
            self._monitor_port = free_port(self.host)
        self.store_dir.mkdir(parents=True, exist_ok=True)
        args = [
            exe,
            "-a", self.host,
            "-p", str(self._port),
            "-m", str(self._monitor_port),
            "-js",
            "-sd", str(self.store_dir),
            *self.extra_args,
        ]  # fmt: skip
        with self.log_path.open("ab") as logf:
            self._proc = subprocess.Popen(
                args, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        try:
            self._wait_ready()
        except BaseException:
            self.kill()
            raise
        log.info("nats-server started", url=self.url, pid=self._proc.pid, store=str(self.store_dir))
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM (JetStream flushes its store), then SIGKILL if it does not exit in time."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._proc = None

    def kill(self) -> None:
        """``kill -9`` the server (chaos tests); :meth:`start` brings it back on the same port."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        self._proc = None

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

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise BusError(
                    f"nats-server exited with status {self._proc.returncode} on start; "
                    f"see {self.log_path}"
                )
            if self._client_port_has_jetstream() and self._healthz_ok():
                return
            time.sleep(0.05)
        raise BusError(
            f"nats-server not ready after {self.startup_timeout_s}s; see {self.log_path}"
        )

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


def server_log_tail(server: EmbeddedNats, lines: int = 40) -> str:
    """The last lines of the server log, for error messages and test failures."""
    try:
        text = server.log_path.read_text(errors="replace")
    except OSError:
        return ""
    return os.linesep.join(text.splitlines()[-lines:])
