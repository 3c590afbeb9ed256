"""A private Hive Metastore: the catalog that Trino (and Spark, Hive, Presto) read the lake from,
for ``demo --trino`` and the query-engine tests.

``scripts/setup`` resolves the standalone metastore and its Hadoop class path from Maven
Central into ``.cache/hive-metastore/lib`` (``scripts/hive-metastore/pom.xml`` pins the
versions). The metastore keeps its tables in an embedded Derby database in its own folder,
listens on 127.0.0.1 on a free port, and is stopped with SIGTERM.

Why 3.1.3 and not 4.x: Spark 3.5's built-in Hive client (2.3.9, the one tidelake's ingest
uses to register tables) calls the Thrift method ``get_table``, which Hive Metastore 4.0
removed ("Invalid method name: 'get_table'", measured); 3.1.3 serves both the old methods and
the ones Trino's client calls (docs/query-engines.md).
"""

from __future__ import annotations

import os
from pathlib import Path
from xml.sax.saxutils import escape

import structlog

from tidelake.errors import TidelakeError, Transient
from tidelake.runtime.processes import (
    ChildProcess,
    ProcessError,
    ServedProcess,
    free_port,
    tcp_port,
)

log = structlog.get_logger(__name__)

#: Where ``scripts/setup`` puts the metastore's class path, relative to the project root.
LIB_SUBDIR = Path(".cache") / "hive-metastore" / "lib"
_PROJECT_ROOT = Path(__file__).resolve().parents[3]
#: The metastore release ``scripts/hive-metastore/pom.xml`` pins.
VERSION = "3.1.3"


class MetastoreError(TidelakeError, Transient):
    """The private Hive Metastore could not be found, started or stopped."""


def lib_dir() -> Path:
    """The metastore's jars (``TIDELAKE_HIVE_METASTORE_LIB`` overrides)."""
    env = os.environ.get("TIDELAKE_HIVE_METASTORE_LIB")
    return Path(env) if env else _PROJECT_ROOT / LIB_SUBDIR


def available() -> bool:
    """True when ``scripts/setup`` has fetched the metastore's class path."""
    return any(lib_dir().glob(f"hive-standalone-metastore-{VERSION}.jar"))


def site_xml(settings: dict[str, str]) -> str:
    """``metastore-site.xml`` holding ``settings``, one ``<property>`` each."""
    props = "".join(
        f"  <property><name>{escape(k)}</name><value>{escape(v)}</value></property>\n"
        for k, v in settings.items()
    )
    return f"<configuration>\n{props}</configuration>\n"


class HiveMetastore(ServedProcess):
    """``HiveMetaStore`` as a child process with an embedded Derby database in ``workdir``."""

    def __init__(self, workdir: Path, startup_timeout_s: float = 120.0) -> None:
        self.workdir = workdir.resolve()
        self.startup_timeout_s = startup_timeout_s
        self._port: int | None = None
        self._process: ChildProcess | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise MetastoreError("the Hive Metastore has not been started")
        return self._port

    @property
    def uri(self) -> str:
        """``thrift://127.0.0.1:<port>``: ``lake.catalog.hive_metastore_uri`` of a config."""
        return f"thrift://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "metastore.log"

    def settings(self) -> dict[str, str]:
        """The metastore's own configuration (its ``metastore-site.xml``)."""
        return {
            "metastore.thrift.port": str(self.port),
            "javax.jdo.option.ConnectionURL": f"jdbc:derby:{self.workdir / 'db'};create=true",
            "javax.jdo.option.ConnectionDriverName": "org.apache.derby.jdbc.EmbeddedDriver",
            # A new database gets the metastore's schema at the first start.
            "datanucleus.schema.autoCreateAll": "true",
            "metastore.schema.verification": "false",
            "metastore.warehouse.dir": (self.workdir / "warehouse").as_uri(),
            # The standalone jar lacks Hive's query-side classes these default to.
            "metastore.expression.proxy": (
                "org.apache.hadoop.hive.metastore.DefaultPartitionExpressionProxy"
            ),
            "metastore.task.threads.always": (
                "org.apache.hadoop.hive.metastore.events.EventCleanerTask"
            ),
        }

    def start(self) -> HiveMetastore:
        if not available():
            raise MetastoreError(
                f"the Hive Metastore {VERSION} is not in {lib_dir()}: run scripts/setup "
                "(TIDELAKE_SETUP_TESTS=1)"
            )
        if self._process is not None and self._process.alive():
            return self
        (self.workdir / "conf").mkdir(parents=True, exist_ok=True)
        self._port = self._port or free_port()
        (self.workdir / "conf" / "metastore-site.xml").write_text(site_xml(self.settings()))
        classpath = os.pathsep.join([str(self.workdir / "conf"), f"{lib_dir()}/*"])
        argv = [
            "java",
            "-Xmx512m",
            f"-Dderby.system.home={self.workdir}",
            "-cp",
            classpath,
            "org.apache.hadoop.hive.metastore.HiveMetaStore",
        ]
        if self._process is None:
            self._process = ChildProcess(
                "hive-metastore",
                argv,
                log_path=self.log_path,
                cwd=self.workdir,
                ready=tcp_port("127.0.0.1", self.port),
                startup_timeout_s=self.startup_timeout_s,
                stop_timeout_s=20.0,
            )
        try:
            self._process.start()
        except ProcessError as exc:
            raise MetastoreError(f"{exc}\n{self.log_tail()}") from None
        log.info("hive metastore started", uri=self.uri, pid=self._process.pid)
        return self
