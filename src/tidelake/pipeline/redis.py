"""A private Redis server on 127.0.0.1, for the Redis sink's tests and hand runs.

Debian's ``redis-server`` (installed by ``scripts/setup`` with ``TIDELAKE_SETUP_TESTS=1``; the
packaged service is disabled) runs as a :class:`ChildProcess` with a ``redis.conf`` of its own
in ``workdir``: its data there, the append-only file on with ``appendfsync always`` (a write is
on disk before Redis answers it), no RDB snapshots, the log on standard output (the
child's log file). The port is a free port chosen on the first start and kept across restarts,
so a stop and a start — or a :meth:`~RedisServer.kill` and a start — serve the same data at
the same address, as a real server restart does.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import structlog

from tidelake.errors import TidelakeError, Transient
from tidelake.runtime.processes import (
    ChildProcess,
    ProcessError,
    ServedProcess,
    every,
    free_port,
    log_line,
    tcp_port,
)

log = structlog.get_logger(__name__)

#: What Redis logs once it has loaded its data and serves commands.
_READY_LINE = "Ready to accept connections"


class RedisServerError(TidelakeError, Transient):
    """The private Redis server could not be found or started."""


def binary() -> str | None:
    """The ``redis-server`` executable (``TIDELAKE_REDIS_SERVER`` overrides); None if absent."""
    env = os.environ.get("TIDELAKE_REDIS_SERVER")
    if env:
        return env if os.access(env, os.X_OK) else None
    return shutil.which("redis-server") or (
        "/usr/bin/redis-server" if os.access("/usr/bin/redis-server", os.X_OK) else None
    )


def available() -> bool:
    """True when ``redis-server`` is installed."""
    return binary() is not None


class RedisServer(ServedProcess):
    """One ``redis-server`` as a child process with its data in ``workdir``."""

    def __init__(
        self,
        workdir: Path,
        *,
        password: str | None = None,
        appendfsync: str = "always",
        startup_timeout_s: float = 30.0,
    ) -> None:
        self.workdir = workdir.resolve()
        #: With a password: clients must AUTH (``requirepass``).
        self.password = password
        self.appendfsync = appendfsync
        self.startup_timeout_s = startup_timeout_s
        self._port: int | None = None
        self._process: ChildProcess | None = None

    @property
    def port(self) -> int:
        """The TCP port on 127.0.0.1 (chosen on the first start)."""
        if self._port is None:
            raise RedisServerError("the Redis server has not been started")
        return self._port

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``: what a client connects to (without the password)."""
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def log_path(self) -> Path:
        return self.workdir / "redis.log"

    def config_lines(self) -> list[str]:
        """The lines of the server's ``redis.conf``."""
        lines = [
            "bind 127.0.0.1",
            f"port {self.port}",
            "protected-mode yes",
            "daemonize no",
            'logfile ""',
            f'dir "{self.workdir / "data"}"',
            "appendonly yes",
            f"appendfsync {self.appendfsync}",
            'save ""',
        ]
        if self.password is not None:
            lines.append(f'requirepass "{self.password}"')
        return lines

    def start(self) -> RedisServer:
        """Start the server (unless it runs) and wait until it serves its loaded data."""
        exe = binary()
        if exe is None:
            raise RedisServerError(
                "redis-server is not installed: run scripts/setup (TIDELAKE_SETUP_TESTS=1)"
            )
        if self.running:
            return self
        (self.workdir / "data").mkdir(parents=True, exist_ok=True)
        self._port = self._port or free_port()
        conf = self.workdir / "redis.conf"
        conf.write_text("".join(f"{line}\n" for line in self.config_lines()))
        conf.chmod(0o600)  # it may hold the password
        if self._process is None:
            self._process = ChildProcess(
                "redis-server",
                [exe, str(conf)],
                log_path=self.log_path,
                cwd=self.workdir,
                ready=every(log_line(_READY_LINE), tcp_port("127.0.0.1", self._port)),
                startup_timeout_s=self.startup_timeout_s,
                stop_timeout_s=30.0,
            )
        try:
            self._process.start()
        except ProcessError as exc:
            raise RedisServerError(str(exc)) from None
        log.info("redis-server started", url=self.url, pid=self.pid)
        return self
