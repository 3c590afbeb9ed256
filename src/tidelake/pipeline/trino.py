"""A private Trino server over the Hive Metastore: a reader of the lake that analysts already
run, for ``demo --trino`` and the query-engine tests.

``scripts/setup`` unpacks Trino's server distribution from Maven Central into
``.cache/trino/trino-server`` and keeps only the Hive and Hudi connectors. Trino 476 (the
newest release Maven Central serves) needs Java 24 or newer: the JVM is chosen here
(``TIDELAKE_TRINO_JAVA_HOME``, else the newest JDK 24+ found), never made the default.

Two catalogs over one metastore: ``hudi`` (the Hudi connector: copy-on-write tables as of
their latest commit, merge-on-read tables read-optimized, i.e. as of their latest compaction)
and ``hive``, whose Hudi tables redirect to ``hudi`` (``hive.hudi-catalog-name``), so a query
naming either reads the same snapshot. docs/query-engines.md has what was measured.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import structlog

from tidelake.config import S3Config
from tidelake.errors import TidelakeError, Transient
from tidelake.runtime.java import java_at_least
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

#: Where ``scripts/setup`` unpacks the server, relative to the project root.
DIST_SUBDIR = Path(".cache") / "trino" / "trino-server"
_PROJECT_ROOT = Path(__file__).resolve().parents[3]
#: The release ``scripts/setup`` fetches.
VERSION = "476"
_MIN_JAVA = 24


class TrinoError(TidelakeError, Transient):
    """The private Trino server could not be found, started, stopped or queried."""


def dist_dir() -> Path:
    """The unpacked server (``TIDELAKE_TRINO_HOME`` overrides)."""
    env = os.environ.get("TIDELAKE_TRINO_HOME")
    return Path(env) if env else _PROJECT_ROOT / DIST_SUBDIR


def java_binary() -> Path:
    try:
        return java_at_least(_MIN_JAVA, "TIDELAKE_TRINO_JAVA_HOME")
    except LookupError as exc:
        raise TrinoError(f"{exc}; Trino {VERSION} needs it") from None


def available() -> bool:
    """True when the server is unpacked and a Java 24+ exists."""
    if not (dist_dir() / "lib").is_dir() or not (dist_dir() / "plugin" / "hudi").is_dir():
        return False
    try:
        java_binary()
    except TrinoError:
        return False
    return True


def properties(settings: Mapping[str, object]) -> str:
    """A Java properties file, one ``key=value`` a line, in the given order."""
    return "".join(f"{k}={v}\n" for k, v in settings.items())


def s3_catalog_settings(s3: S3Config | None) -> dict[str, str]:
    """What a catalog needs to read a lake on S3-compatible storage (Trino's own S3 client)."""
    if s3 is None or s3.endpoint is None:
        return {}
    settings = {
        "fs.native-s3.enabled": "true",
        "s3.endpoint": s3.endpoint,
        "s3.region": s3.region or "us-east-1",
        "s3.path-style-access": str(bool(s3.path_style)).lower(),
    }
    if s3.access_key is not None and s3.secret_key is not None:
        settings["s3.aws-access-key"] = s3.access_key.get_secret_value()
        settings["s3.aws-secret-key"] = s3.secret_key.get_secret_value()
    return settings


class TrinoServer(ServedProcess):
    """One Trino coordinator (which is its own worker) on 127.0.0.1 with ``workdir`` as home."""

    def __init__(
        self,
        workdir: Path,
        metastore_uri: str,
        *,
        s3: S3Config | None = None,
        heap: str = "1536m",
        startup_timeout_s: float = 180.0,
    ) -> None:
        self.workdir = workdir.resolve()
        self.metastore_uri = metastore_uri
        self.s3 = s3
        self.heap = heap
        self.startup_timeout_s = startup_timeout_s
        self._port: int | None = None
        self._process: ChildProcess | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise TrinoError("the Trino server has not been started")
        return self._port

    @property
    def log_path(self) -> Path:
        return self.workdir / "trino.log"

    def catalogs(self) -> dict[str, dict[str, str]]:
        """``etc/catalog/<name>.properties`` of each catalog."""
        common = {
            "hive.metastore.uri": self.metastore_uri,
            # file: lakes (the demo's, the tests') go through Trino's Hadoop file system.
            "fs.hadoop.enabled": "true",
        } | s3_catalog_settings(self.s3)
        return {
            "hudi": {"connector.name": "hudi"} | common,
            "hive": {"connector.name": "hive", "hive.hudi-catalog-name": "hudi"} | common,
        }

    def _write_etc(self) -> Path:
        etc = self.workdir / "etc"
        (etc / "catalog").mkdir(parents=True, exist_ok=True)
        (etc / "config.properties").write_text(
            properties(
                {
                    "coordinator": "true",
                    "node-scheduler.include-coordinator": "true",
                    "http-server.http.port": self.port,
                    "discovery.uri": f"http://127.0.0.1:{self.port}",
                    "query.max-memory": "512MB",
                    "query.max-memory-per-node": "512MB",
                }
            )
        )
        for name, settings in self.catalogs().items():
            path = etc / "catalog" / f"{name}.properties"
            path.write_text(properties(settings))
            path.chmod(0o600)  # may hold the S3 secret
        return etc

    def argv(self) -> list[str]:
        etc = self.workdir / "etc"
        return [
            str(java_binary()),
            f"-Xmx{self.heap}",
            "-XX:+UseG1GC",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djdk.attach.allowAttachSelf=true",
            "-Dnode.environment=tidelake",
            "-Dnode.id=tidelake-trino",
            f"-Dnode.data-dir={self.workdir / 'data'}",
            f"-Dconfig={etc / 'config.properties'}",
            f"-Dcatalog.config-dir={etc / 'catalog'}",
            "-Dlog.levels-file=/dev/null",
            "-cp",
            f"{dist_dir()}/lib/*",
            "io.trino.server.TrinoServer",
        ]

    def start(self) -> TrinoServer:
        if not available():
            raise TrinoError(
                f"Trino {VERSION} is not unpacked in {dist_dir()} (or no Java {_MIN_JAVA}+): "
                "run scripts/setup (TIDELAKE_SETUP_TESTS=1)"
            )
        if self._process is not None and self._process.alive():
            return self
        self._port = self._port or free_port()
        self._write_etc()
        if self._process is None:
            self._process = ChildProcess(
                "trino",
                self.argv(),
                log_path=self.log_path,
                # Trino loads plugins relative to its installation's folder.
                cwd=dist_dir(),
                ready=every(tcp_port("127.0.0.1", self.port), log_line("SERVER STARTED")),
                startup_timeout_s=self.startup_timeout_s,
                stop_timeout_s=30.0,
            )
        try:
            self._process.start()
        except ProcessError as exc:
            raise TrinoError(f"{exc}\n{self.log_tail()}") from None
        log.info("trino started", port=self.port, pid=self._process.pid)
        return self

    def query(
        self, sql: str, catalog: str = "hudi", *, settle_s: float = 60.0
    ) -> tuple[list[str], list[list[Any]]]:
        """Run ``sql`` through the Trino client; ``(column names, rows)``.

        For ``settle_s`` after a start Trino may answer "No nodes available to run query":
        "SERVER STARTED" is logged before the coordinator has announced itself (and its
        catalogs) as a worker. Such a query is asked again; any other error is raised."""
        try:
            import trino  # the extra tidelake[trino]
        except ImportError:
            raise TrinoError("Trino's client is missing: pip install 'tidelake[trino]'") from None

        deadline = time.monotonic() + settle_s
        while True:
            conn = trino.dbapi.connect(  # type: ignore[no-untyped-call]
                host="127.0.0.1", port=self.port, user="tidelake", catalog=catalog
            )
            try:
                cur = conn.cursor()
                cur.execute(sql)
                rows = cur.fetchall()
                return [d[0] for d in cur.description or []], rows
            except trino.exceptions.TrinoQueryError as exc:
                if "No nodes available" not in exc.message or time.monotonic() > deadline:
                    raise TrinoError(f"Trino: {exc.message} ({sql})") from None
            finally:
                conn.close()
            time.sleep(0.5)


def rows_as_dicts(names: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[dict[str, Any]]:
    """Trino's rows as ``{column: value}``."""
    return [dict(zip(names, row, strict=True)) for row in rows]
