"""A private Kafka broker: one KRaft node (broker and controller in one JVM) on 127.0.0.1, for
the Kafka tests and hand runs.

``scripts/setup`` resolves Kafka's class path from Maven Central into ``.cache/kafka/lib``
(``scripts/kafka/pom.xml`` pins the release). The first start formats the data folder with a
new cluster id (``kafka.tools.StorageTool format``); later starts reuse it, so a stop and a
start (or a kill and a start) keep every message the broker had acknowledged, as a real
broker restart does. Ports are free ports of 127.0.0.1 chosen once per broker and kept across
restarts, so clients reconnect to the same address.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

import structlog

from tidelake.errors import TidelakeError, Transient
from tidelake.runtime.processes import (
    ChildProcess,
    ProcessError,
    ServedProcess,
    every,
    free_port,
    tcp_port,
)

log = structlog.get_logger(__name__)

#: Where ``scripts/setup`` puts Kafka's class path, relative to the project root.
LIB_SUBDIR = Path(".cache") / "kafka" / "lib"
_PROJECT_ROOT = Path(__file__).resolve().parents[3]
#: The release ``scripts/kafka/pom.xml`` pins.
VERSION = "4.1.1"

#: Log4j 2 configuration of the broker: INFO and above to standard output (the log file).
_LOG4J2 = """\
status = error
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = %d{ISO8601} %-5p [%c{1}] %m%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = out
logger.kafka.name = kafka
logger.kafka.level = warn
logger.apache.name = org.apache.kafka
logger.apache.level = warn
"""


class KafkaError(TidelakeError, Transient):
    """The private Kafka broker could not be found, formatted, started or stopped."""


def lib_dir() -> Path:
    """Kafka's jars (``TIDELAKE_KAFKA_LIB`` overrides)."""
    env = os.environ.get("TIDELAKE_KAFKA_LIB")
    return Path(env) if env else _PROJECT_ROOT / LIB_SUBDIR


def available() -> bool:
    """True when ``scripts/setup`` has fetched Kafka's class path."""
    return (lib_dir() / f"kafka_2.13-{VERSION}.jar").is_file()


class KafkaBroker(ServedProcess):
    """One KRaft broker+controller as a child process with its data in ``workdir``."""

    def __init__(
        self,
        workdir: Path,
        *,
        partitions: int = 3,
        startup_timeout_s: float = 90.0,
        sasl_users: Mapping[str, str] | None = None,
    ) -> None:
        self.workdir = workdir.resolve()
        self.partitions = partitions
        self.startup_timeout_s = startup_timeout_s
        #: With users: clients must authenticate (SASL PLAIN) on the port clients use; the
        #: broker talks to itself on a plain port of its own.
        self.sasl_users = dict(sasl_users or {})
        self._port: int | None = None
        self._internal_port: int | None = None
        self._controller_port: int | None = None
        self._process: ChildProcess | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise KafkaError("the Kafka broker has not been started")
        return self._port

    @property
    def bootstrap_servers(self) -> str:
        """``127.0.0.1:<port>``: what a client connects to."""
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "kafka.log"

    def _listeners(self) -> dict[str, str]:
        port, controller = self.port, self._controller_port
        if not self.sasl_users:
            return {
                "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
                "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            }
        internal = self._internal_port
        users = " ".join(f'user_{name}="{secret}"' for name, secret in self.sasl_users.items())
        return {
            "listeners": f"INTERNAL://127.0.0.1:{internal},SASL_PLAINTEXT://127.0.0.1:{port},"
            f"CONTROLLER://127.0.0.1:{controller}",
            "advertised.listeners": f"INTERNAL://127.0.0.1:{internal},"
            f"SASL_PLAINTEXT://127.0.0.1:{port}",
            "listener.security.protocol.map": "INTERNAL:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,"
            "CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
                f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};"
            ),
        }

    def server_properties(self) -> dict[str, str]:
        controller = self._controller_port
        return {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{controller}",
            **self._listeners(),
            "controller.listener.names": "CONTROLLER",
            "log.dirs": str(self.workdir / "data"),
            "num.partitions": str(self.partitions),
            # One node: every internal topic has one replica.
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            # Tests join and leave consumer groups often: no wait before the first rebalance.
            "group.initial.rebalance.delay.ms": "0",
            # A message is on disk before the broker acknowledges it: a kill -9 of the broker
            # loses nothing acknowledged (one node has no replica to take its place).
            "log.flush.interval.messages": "1",
        }

    def _java(self) -> str:
        home = os.environ.get("JAVA_HOME")
        return str(Path(home) / "bin" / "java") if home else "java"

    def _classpath(self) -> str:
        return os.pathsep.join([str(self.workdir / "conf"), f"{lib_dir()}/*"])

    def _format(self, properties: Path) -> None:
        """Give a new data folder a cluster id; a formatted one is left as it is."""
        if (self.workdir / "data" / "meta.properties").is_file():
            return
        cluster = subprocess.run(
            [self._java(), "-cp", self._classpath(), "kafka.tools.StorageTool", "random-uuid"],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        cluster_id = cluster.stdout.strip().splitlines()[-1] if cluster.stdout.strip() else ""
        argv = [self._java(), "-cp", self._classpath(), "kafka.tools.StorageTool", "format"]
        done = subprocess.run(
            [*argv, "-t", cluster_id, "-c", str(properties)],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        if cluster.returncode != 0 or done.returncode != 0:
            raise KafkaError(f"formatting {self.workdir / 'data'} failed: {done.stderr[-2000:]}")

    def start(self) -> KafkaBroker:
        if not available():
            raise KafkaError(
                f"Kafka {VERSION} is not in {lib_dir()}: run scripts/setup (TIDELAKE_SETUP_TESTS=1)"
            )
        if self.running:
            return self
        conf = self.workdir / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        self._port = self._port or free_port()
        self._controller_port = self._controller_port or free_port()
        self._internal_port = self._internal_port or free_port()
        properties = conf / "server.properties"
        properties.write_text("".join(f"{k}={v}\n" for k, v in self.server_properties().items()))
        (conf / "log4j2.properties").write_text(_LOG4J2)
        self._format(properties)
        if self._process is None:
            argv = [
                self._java(),
                "-Xmx512m",
                f"-Dlog4j2.configurationFile={conf / 'log4j2.properties'}",
                "-cp",
                self._classpath(),
                "kafka.Kafka",
                str(properties),
            ]
            self._process = ChildProcess(
                "kafka",
                argv,
                log_path=self.log_path,
                cwd=self.workdir,
                ready=every(
                    tcp_port("127.0.0.1", self._port), tcp_port("127.0.0.1", self._controller_port)
                ),
                startup_timeout_s=self.startup_timeout_s,
                stop_timeout_s=30.0,
            )
        try:
            self._process.start()
        except ProcessError as exc:
            raise KafkaError(f"{exc}\n{self.log_tail()}") from None
        log.info("kafka started", bootstrap=self.bootstrap_servers, pid=self.pid)
        return self
