"""Private database servers for the demo and the tests: MariaDB and PostgreSQL child processes.

Each server gets its own data directory, listens on 127.0.0.1 only, on a port of its own
(0 = a free one, chosen once and kept across :meth:`restart`), and is configured for capture:
MariaDB with ``binlog_format=ROW``, ``binlog_row_image=FULL``, ``binlog_row_metadata=FULL``;
PostgreSQL with ``wal_level=logical``. The system services are never touched.

Both are throwaway servers: durability settings are relaxed (``fsync`` off) because nothing
here outlives the run. Running as root: MariaDB is told ``--user=root``; PostgreSQL refuses
root, so ``initdb`` and ``postgres`` run as the ``postgres`` system user (the Debian package
creates it), with the data directory created under the system temporary directory (a
root-only test directory could not be traversed by that user).
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

import structlog

from tidelake.errors import TidelakeError, Transient
from tidelake.runtime.processes import ChildProcess, ProcessError, free_port

log = structlog.get_logger(__name__)


# The longest Unix socket path Linux accepts: sizeof(sockaddr_un.sun_path) less its final NUL.
_SUN_PATH_MAX = 107


class ServerError(TidelakeError, Transient):
    """A private database server could not be started or reached."""


def _find(candidates: list[str], name: str) -> str:
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return c
    found = shutil.which(name)
    if found is None:
        raise ServerError(f"{name} not found: run scripts/setup (it installs the server)")
    return found


class _ChildServer:
    """A server process with a data directory, a port and a log file."""

    name = "server"
    #: The signal asking for a clean, prompt shutdown.
    stop_signal = signal.SIGTERM

    def __init__(self, data_dir: Path, port: int = 0, startup_timeout_s: float = 60.0) -> None:
        self.data_dir = data_dir
        self.host = "127.0.0.1"
        self._requested_port = port
        self._port: int | None = None
        self.startup_timeout_s = startup_timeout_s
        self._process: ChildProcess | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise ServerError(f"the {self.name} server has not been started")
        return self._port

    @property
    def log_path(self) -> Path:
        return self.data_dir / "server.log"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.alive()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self.running and self._process is not None else None

    def _argv(self) -> list[str]:
        raise NotImplementedError

    def _initialise(self) -> None:
        raise NotImplementedError

    def _ready(self) -> bool:
        raise NotImplementedError

    def _popen_kwargs(self) -> dict[str, Any]:
        return {}

    def start(self) -> _ChildServer:
        """Initialise the data directory on first use, start, wait until it accepts clients."""
        if self.running:
            return self
        if self._port is None:
            self._port = self._requested_port or free_port(self.host)
        self._initialise()
        self._process = ChildProcess(
            self.name,
            self._argv(),
            log_path=self.log_path,
            ready=lambda _p: self._ready(),
            startup_timeout_s=self.startup_timeout_s,
            stop_signal=self.stop_signal,
            popen_kwargs=self._popen_kwargs(),
        )
        try:
            self._process.start()
        except ProcessError as exc:
            raise ServerError(str(exc)) from None
        log.info(f"{self.name} started", port=self._port, data=str(self.data_dir))
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        if self._process is not None:
            self._process.stop(timeout_s)

    def kill(self) -> None:
        if self._process is not None:
            self._process.kill()

    def log_tail(self, lines: int = 25) -> str:
        return self._process.log_tail(lines) if self._process is not None else ""

    def __enter__(self) -> _ChildServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class MariaDBServer(_ChildServer):
    """A private ``mariadbd`` with the binlog configured for capture.

    User ``tidelake`` (password :attr:`password`) may connect from 127.0.0.1 with every
    privilege, replication included.
    """

    name = "mariadb"
    user = "tidelake"
    password = "tidelake"

    def __init__(self, data_dir: str | Path, port: int = 0, server_id: int = 1) -> None:
        super().__init__(Path(data_dir).resolve(), port)
        self.server_id = server_id

    @property
    def socket(self) -> Path:
        """The server's Unix socket: in the data directory, or in the temporary directory when
        that path would pass the kernel's 107-byte limit for a socket address (``sun_path``),
        named after the data directory so that two servers never share one."""
        inside = self.data_dir / "mysqld.sock"
        if len(os.fsencode(inside)) <= _SUN_PATH_MAX:
            return inside
        digest = hashlib.sha256(os.fsencode(self.data_dir)).hexdigest()[:16]
        return Path(tempfile.gettempdir()) / f"tidelake-mariadb-{digest}.sock"

    @property
    def dsn(self) -> str:
        return f"mysql://{self.user}:{self.password}@{self.host}:{self.port}/"

    def _initialise(self) -> None:
        if (self.data_dir / "db" / "mysql").is_dir():
            return
        (self.data_dir / "db").mkdir(parents=True, exist_ok=True)
        install = _find(["/usr/bin/mariadb-install-db"], "mariadb-install-db")
        res = subprocess.run(
            [
                install,
                "--no-defaults",
                "--user=root",
                f"--datadir={self.data_dir / 'db'}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ],
            capture_output=True,
            check=False,
        )
        if res.returncode != 0:
            raise ServerError(f"mariadb-install-db failed: {res.stderr.decode()[-2000:]}")
        self._first_start = True

    def _argv(self) -> list[str]:
        binary = _find(["/usr/sbin/mariadbd", "/usr/sbin/mysqld"], "mariadbd")
        d = self.data_dir
        return [
            binary,
            "--no-defaults",
            "--user=root",
            f"--datadir={d / 'db'}",
            f"--socket={self.socket}",
            f"--pid-file={d / 'mariadbd.pid'}",
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            "--skip-name-resolve",
            f"--server-id={self.server_id}",
            f"--log-bin={d / 'db' / 'binlog'}",
            "--binlog-format=ROW",
            "--binlog-row-image=FULL",
            "--binlog-row-metadata=FULL",
            # A replica writes what it applies to its own binlog too, so a capture can read it
            # after a failover (https://mariadb.com/kb/en/replication-and-binary-log-system-variables/#log_slave_updates).
            "--log-slave-updates=ON",
            "--innodb-buffer-pool-size=128M",
            "--innodb-flush-log-at-trx-commit=2",
            "--sync-binlog=0",
            "--max-connections=200",
            "--character-set-server=utf8mb4",
            "--collation-server=utf8mb4_unicode_ci",
            "--default-time-zone=+00:00",
        ]

    def _ready(self) -> bool:
        import pymysql

        try:
            conn = pymysql.connect(unix_socket=str(self.socket), user="root", connect_timeout=2)
        except pymysql.err.OperationalError:
            return False
        try:
            with conn.cursor() as cur:
                # Local set-up, kept out of the binlog: a replica creates its own user, and its
                # binlog then holds only GTIDs of its primary (one history per domain).
                cur.execute("SET SESSION sql_log_bin = 0")
                cur.execute(f"CREATE USER IF NOT EXISTS '{self.user}'@'127.0.0.1' "
                            f"IDENTIFIED BY '{self.password}'")  # fmt: skip
                cur.execute(f"GRANT ALL PRIVILEGES ON *.* TO '{self.user}'@'127.0.0.1' "
                            "WITH GRANT OPTION")  # fmt: skip
        finally:
            conn.close()
        return True

    def connect(self, **kwargs: Any) -> Any:
        """A PyMySQL connection as ``tidelake`` over TCP (autocommit on)."""
        import pymysql

        opts: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": self.password,
            "autocommit": True,
            "charset": "utf8mb4",
        }
        opts.update(kwargs)
        return pymysql.connect(**opts)

    # -- replication (GTID failover tests, capture/gtid.py) ------------------------------------

    def _query(self, sql: str, args: Any = None) -> Any:
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(sql, args)
                return cur.fetchone() if cur.description else None
        finally:
            conn.close()

    def gtid_binlog_pos(self) -> str:
        """``@@gtid_binlog_pos``: the last GTID per domain in this server's binlog."""
        return str(self._query("SELECT @@GLOBAL.gtid_binlog_pos")[0] or "")

    def replicate_from(self, primary: MariaDBServer) -> None:
        """Become a read-only replica of ``primary`` by GTID
        (https://mariadb.com/kb/en/change-master-to/, ``MASTER_USE_GTID=slave_pos``: start after
        the last GTID this server applied, here from the start of the primary's binlog)."""
        if primary.server_id == self.server_id:
            raise ServerError("a replica needs a server_id of its own")
        self._query(
            "CHANGE MASTER TO MASTER_HOST = %s, MASTER_PORT = %s, MASTER_USER = %s, "
            "MASTER_PASSWORD = %s, MASTER_USE_GTID = slave_pos",
            (primary.host, primary.port, primary.user, primary.password),
        )
        self._query("SET GLOBAL read_only = ON")
        self._query("START SLAVE")

    def wait_for_gtid(self, pos: str, timeout_s: float = 30.0) -> None:
        """Until this replica has applied up to the GTID position ``pos``
        (https://mariadb.com/kb/en/master_gtid_wait/: 0 once reached, -1 on timeout)."""
        res = self._query("SELECT MASTER_GTID_WAIT(%s, %s)", (pos, timeout_s))
        if res is None or int(res[0]) != 0:
            raise ServerError(f"the replica did not reach GTID {pos} in {timeout_s}s")

    def pause_replication(self) -> None:
        """Stop applying the primary's transactions (``STOP SLAVE``): the replica falls behind."""
        self._query("STOP SLAVE")

    def promote(self) -> None:
        """Make this replica a primary: stop replicating, forget the old primary, accept
        writes (https://mariadb.com/kb/en/reset-slave/)."""
        self._query("STOP SLAVE")
        self._query("RESET SLAVE ALL")
        self._query("SET GLOBAL read_only = OFF")


def _postgres_bindir() -> Path:
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4])
    )
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb is None:
        raise ServerError("PostgreSQL server binaries not found: run scripts/setup")
    return Path(initdb).resolve().parent


class PostgresServer(_ChildServer):
    """A private ``postgres`` with ``wal_level=logical`` and trust auth on 127.0.0.1.

    ``data_dir`` is where the caller wants it; when running as root the cluster itself lives
    in a fresh directory under the system temporary directory, owned by ``postgres``, and
    ``data_dir/cluster`` points at it. :meth:`remove` deletes it.
    """

    name = "postgres"
    user = "postgres"
    #: Fast shutdown: SIGTERM would wait for every client to disconnect.
    stop_signal = signal.SIGINT

    def __init__(self, data_dir: str | Path, port: int = 0) -> None:
        super().__init__(Path(data_dir).resolve(), port)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._run_as: pwd.struct_passwd | None = None
        if os.geteuid() == 0:
            try:
                self._run_as = pwd.getpwnam("postgres")
            except KeyError as exc:
                raise ServerError(
                    "PostgreSQL refuses to run as root and there is no 'postgres' system user: "
                    "install the postgresql package (scripts/setup does) or run as non-root"
                ) from exc
        link = self.data_dir / "cluster"
        if link.is_symlink() or link.exists():
            self.cluster = link.resolve()
        elif self._run_as is not None:
            self.cluster = Path(tempfile.mkdtemp(prefix="tidelake-pg-"))
            os.chown(self.cluster, self._run_as.pw_uid, self._run_as.pw_gid)
            link.symlink_to(self.cluster)
        else:
            self.cluster = link
        self._bindir = _postgres_bindir()

    @property
    def log_path(self) -> Path:
        return self.data_dir / "server.log"

    @property
    def dsn(self) -> str:
        return f"postgresql://{self.user}@{self.host}:{self.port}/postgres"

    def _popen_kwargs(self) -> dict[str, Any]:
        if self._run_as is None:
            return {}
        return {"user": self._run_as.pw_uid, "group": self._run_as.pw_gid, "extra_groups": []}

    def _initialise(self) -> None:
        if (self.cluster / "PG_VERSION").exists():
            return
        res = subprocess.run(
            [
                str(self._bindir / "initdb"),
                "-D",
                str(self.cluster / "data"),
                "-U",
                self.user,
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-locale",
                "--no-sync",
            ],
            capture_output=True,
            check=False,
            cwd="/",
            **self._popen_kwargs(),
        )
        if res.returncode != 0:
            raise ServerError(f"initdb failed: {res.stderr.decode()[-2000:]}")
        (self.cluster / "PG_VERSION").write_text("initialised\n")

    def _argv(self) -> list[str]:
        return [
            str(self._bindir / "postgres"),
            "-D", str(self.cluster / "data"),
            "-p", str(self.port),
            "-c", "listen_addresses=127.0.0.1",
            "-c", f"unix_socket_directories={self.cluster}",
            "-c", "wal_level=logical",
            "-c", "max_replication_slots=20",
            "-c", "max_wal_senders=20",
            "-c", "max_connections=100",
            "-c", "shared_buffers=128MB",
            "-c", "fsync=off",
            "-c", "full_page_writes=off",
            "-c", "synchronous_commit=off",
            "-c", "timezone=UTC",
            "-c", "datestyle=ISO, YMD",
        ]  # fmt: skip

    def start(self) -> PostgresServer:
        # The log is written by this (root) process: the server itself writes to stdout.
        super().start()
        return self

    def _ready(self) -> bool:
        import psycopg2

        try:
            conn = psycopg2.connect(self.dsn, connect_timeout=2)
        except psycopg2.OperationalError:
            return False
        conn.close()
        return True

    def connect(self, dbname: str = "postgres", **kwargs: Any) -> Any:
        """A psycopg2 connection as ``postgres`` (autocommit on)."""
        import psycopg2

        conn = psycopg2.connect(
            host=self.host, port=self.port, user=self.user, dbname=dbname, **kwargs
        )
        conn.autocommit = True
        return conn

    def remove(self) -> None:
        """Stop and delete the cluster directory (it may live outside ``data_dir``)."""
        self.stop()
        with contextlib.suppress(OSError):
            shutil.rmtree(self.cluster)
        with contextlib.suppress(OSError):
            (self.data_dir / "cluster").unlink()
