"""Debezium Server as a child process: a real Debezium producer for tests and hand runs.

``scripts/setup`` unpacks the Debezium Server distribution from Maven Central into
``.cache/debezium-server/debezium-server`` (docs/debezium-server.md says which version and
why). Debezium Server 3.x needs Java 21 or newer while Spark stays on the machine's default
Java 17, so the JVM is chosen here and never made the default: ``TIDELAKE_DEBEZIUM_JAVA_HOME``,
else the first JDK 21+ found under ``/usr/lib/jvm``.

Each server gets a working directory of its own: Quarkus reads ``config/application.properties``
relative to the working directory, and the offsets / schema-history files named in the
properties live there too, so a stop and a start resume from the saved offsets.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from tidelake.errors import TidelakeError
from tidelake.runtime.java import java_at_least
from tidelake.runtime.processes import ChildProcess, ProcessError, log_line

#: Where ``scripts/setup`` unpacks the distribution, relative to the project root.
DIST_SUBDIR = Path(".cache") / "debezium-server" / "debezium-server"
_PROJECT_ROOT = Path(__file__).resolve().parents[3]
_MIN_JAVA = 21


class DebeziumServerError(TidelakeError):
    """Debezium Server could not be found, started or stopped."""


def dist_dir() -> Path:
    """The unpacked distribution (``TIDELAKE_DEBEZIUM_SERVER_HOME`` overrides)."""
    env = os.environ.get("TIDELAKE_DEBEZIUM_SERVER_HOME")
    return Path(env) if env else _PROJECT_ROOT / DIST_SUBDIR


def java_binary() -> Path:
    """A ``java`` of version 21 or newer (Debezium Server 3.x is built for Java 21)."""
    try:
        return java_at_least(_MIN_JAVA, "TIDELAKE_DEBEZIUM_JAVA_HOME")
    except LookupError as exc:
        raise DebeziumServerError(f"{exc}; Debezium Server 3.x needs it") from None


def available() -> bool:
    """True when the distribution is unpacked and a suitable JVM exists."""
    if not any(dist_dir().glob("debezium-server-*runner.jar")):
        return False
    try:
        java_binary()
    except DebeziumServerError:
        return False
    return True


def render_properties(props: Mapping[str, object]) -> str:
    """``application.properties`` text, one ``key=value`` a line, in the given order."""
    lines = []
    for key, value in props.items():
        text = str(value).lower() if isinstance(value, bool) else str(value)
        lines.append(f"{key}={text}")
    return "\n".join(lines) + "\n"


class DebeziumServer:
    """One Debezium Server JVM with its own working directory and properties."""

    def __init__(self, workdir: Path, properties: Mapping[str, object]) -> None:
        self.workdir = workdir.resolve()
        self.properties = dict(properties)
        self.log_path = self.workdir / "debezium-server.log"
        self._process: ChildProcess | None = None

    @property
    def properties_path(self) -> Path:
        return self.workdir / "config" / "application.properties"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.alive()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def starts(self) -> int:
        return self._process.starts if self._process is not None else 0

    def argv(self) -> list[str]:
        dist = dist_dir()
        runners = sorted(dist.glob("debezium-server-*runner.jar"))
        if not runners:
            raise DebeziumServerError(
                f"Debezium Server is not unpacked in {dist}: run scripts/setup"
            )
        classpath = os.pathsep.join(
            [str(runners[0]), str(dist / "config" / "lib"), f"{dist}/lib/*"]
        )
        return [str(java_binary()), "-Xmx512m", "-cp", classpath, "io.debezium.server.Main"]

    def start(self) -> DebeziumServer:
        """Write the properties and start the JVM (it connects and begins in the background)."""
        if self.running:
            return self
        self.properties_path.parent.mkdir(parents=True, exist_ok=True)
        self.properties_path.write_text(render_properties(self.properties))
        # Kafka's FileOffsetBackingStore and Debezium's FileSchemaHistory do not create the
        # directory of their file: without it every offset flush fails (NoSuchFileException)
        # and a restart snapshots again from scratch.
        for key, value in self.properties.items():
            if key.endswith(".filename"):
                (self.workdir / str(value)).parent.mkdir(parents=True, exist_ok=True)
        if self._process is None:
            # SIGTERM: the engine commits its offsets before the JVM exits.
            self._process = ChildProcess(
                "debezium-server",
                self.argv(),
                log_path=self.log_path,
                cwd=self.workdir,
                stop_timeout_s=60.0,
            )
        self._process.start()
        return self

    def stop(self, timeout_s: float = 60.0) -> int | None:
        """A clean stop (SIGTERM: the engine commits its offsets), then SIGKILL if it hangs."""
        return self._process.stop(timeout_s) if self._process is not None else None

    def kill(self) -> None:
        if self._process is not None:
            self._process.kill()

    def log_tail(self, lines: int = 40) -> str:
        return self._process.log_tail(lines) if self._process is not None else ""

    def wait_for_log(self, text: str, timeout_s: float = 120.0) -> None:
        """Wait until ``text`` is in what the JVM logged since its latest start (the log is
        appended across restarts); fail early, with the log's tail, when the JVM exits."""
        if self._process is None:
            raise DebeziumServerError("Debezium Server was never started")
        try:
            self._process.wait_until(log_line(text), timeout_s, repr(text))
        except ProcessError as exc:
            raise DebeziumServerError(f"Debezium Server: {exc}") from None

    def __enter__(self) -> DebeziumServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
