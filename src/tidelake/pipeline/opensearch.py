"""A private single-node OpenSearch on 127.0.0.1, for the OpenSearch sink's tests and hand runs.

OpenSearch 2.19.6 (the newest on Java 17) is not installed as a distribution: ``scripts/setup``
(``TIDELAKE_SETUP_TESTS=1``) lays out its home in ``.cache/opensearch/home`` from Maven
Central — the server's class path in ``lib/``, the ``transport-netty4`` (HTTP),
``lang-painless`` (the sink's scripted upserts) and ``analysis-common`` modules in
``modules/``, with the descriptors and security policies kept in ``scripts/opensearch``. No
security plugin: plain HTTP, no users. The node runs as a :class:`ChildProcess` of
``org.opensearch.bootstrap.OpenSearch`` with ``discovery.type: single-node``, its own
``config/`` (``opensearch.yml``, a console-only ``log4j2.properties``, the keystore it creates),
data and temporary directory, a 512 MiB heap and the serial collector (a test node on a small
machine). The HTTP port is chosen on the first start and kept across restarts, so a stop and
a start — or a :meth:`~OpenSearchServer.kill` and a start — serve the same data at the same
address. A stop is SIGTERM, then SIGKILL after 10 s: 2.19's transport waits up to 30 s on
close with no connection open, and nothing is lost by the kill — an acknowledged write is in
the fsynced translog.

**Root.** OpenSearch refuses to run as root (``can not run opensearch as root``, a check no
setting turns off). Started by root (CI), the node runs as ``nobody`` (``setpriv``), and its
writable directories are then in a fresh directory under the system's temporary directory
owned by ``nobody`` (a pytest ``tmp_path`` is ``0700`` root's, which ``nobody`` cannot enter),
removed when this process exits; the log stays in ``workdir``. The node gets its own copy of
the jars there (46 MB), so a checkout inside a ``0700`` home (root's) works too.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile
from pathlib import Path

import structlog

from tidelake.errors import TidelakeError, Transient
from tidelake.runtime.processes import ChildProcess, ProcessError, ServedProcess, free_port, http_ok

log = structlog.get_logger(__name__)

VERSION = "2.19.6"
#: Where ``scripts/setup`` lays out the home, relative to the project root.
HOME_SUBDIR = Path(".cache") / "opensearch" / "home"
_PROJECT_ROOT = Path(__file__).resolve().parents[3]
#: The unprivileged user the node runs as when this process is root.
_NOBODY = 65534

_LOG4J2 = """\
status = error
appender.console.type = Console
appender.console.name = console
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d{ISO8601}][%-5p][%-25c{1.}] [%node_name]%marker %m%n
rootLogger.level = info
rootLogger.appenderRef.console.ref = console
"""


class OpenSearchServerError(TidelakeError, Transient):
    """The private OpenSearch node could not be found or started."""


def home() -> Path:
    """The node's home (``TIDELAKE_OPENSEARCH_HOME`` overrides the project's cache)."""
    env = os.environ.get("TIDELAKE_OPENSEARCH_HOME")
    return Path(env) if env else _PROJECT_ROOT / HOME_SUBDIR


def java() -> str | None:
    """The ``java`` to run the node with: ``TIDELAKE_OPENSEARCH_JAVA``, else ``JAVA_HOME``'s,
    else the one on the PATH (17 to 21: 2.19 needs a security manager, gone in Java 24)."""
    env = os.environ.get("TIDELAKE_OPENSEARCH_JAVA")
    if env:
        return env if os.access(env, os.X_OK) else None
    java_home = os.environ.get("JAVA_HOME")
    if java_home and os.access(Path(java_home) / "bin" / "java", os.X_OK):
        return str(Path(java_home) / "bin" / "java")
    return shutil.which("java")


def available() -> bool:
    """True when the home is laid out and a ``java`` (and, for root, ``setpriv``) is there."""
    if not (home() / "lib" / f"opensearch-{VERSION}.jar").is_file() or java() is None:
        return False
    return os.geteuid() != 0 or shutil.which("setpriv") is not None


class OpenSearchServer(ServedProcess):
    """One single-node OpenSearch as a child process with its data in ``workdir`` (module doc)."""

    def __init__(
        self,
        workdir: Path,
        *,
        heap: str = "512m",
        startup_timeout_s: float = 120.0,
    ) -> None:
        self.workdir = workdir.resolve()
        self.heap = heap
        self.startup_timeout_s = startup_timeout_s
        self._port: int | None = None
        self._transport_port: int | None = None
        self._state: Path | None = None
        self._process: ChildProcess | None = None

    @property
    def port(self) -> int:
        """The HTTP port on 127.0.0.1 (chosen on the first start)."""
        if self._port is None:
            raise OpenSearchServerError("the OpenSearch node has not been started")
        return self._port

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``: what a client connects to."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "opensearch.log"

    def _state_dir(self) -> Path:
        """The node's writable directories' parent (module doc: root)."""
        if self._state is None:
            if os.geteuid() == 0:
                state = Path(tempfile.mkdtemp(prefix="tidelake-opensearch-"))
                atexit.register(functools.partial(shutil.rmtree, state, ignore_errors=True))
            else:
                state = self.workdir / "node"
            for sub in ("config", "data", "tmp"):
                (state / sub).mkdir(parents=True, exist_ok=True)
            if os.geteuid() == 0:
                # The node's own copy of the jars (46 MB): whatever the permissions of the
                # checkout's directories, nobody can read them there.
                shutil.copytree(home(), state / "home", symlinks=True)
                for directory, _, files in os.walk(state):
                    os.chown(directory, _NOBODY, _NOBODY)
                    for name in files:
                        os.chown(os.path.join(directory, name), _NOBODY, _NOBODY)
            self._state = state
        return self._state

    def argv(self, exe: str) -> list[str]:
        """The node's command line (after ``setpriv`` when root)."""
        state = self._state_dir()
        root = state / "home" if os.geteuid() == 0 else home()
        argv = [
            exe,
            f"-Xms{self.heap}",
            f"-Xmx{self.heap}",
            "-XX:+UseSerialGC",
            "-Xss1m",
            "-Dfile.encoding=UTF-8",
            "-Djava.awt.headless=true",
            "-Djava.security.manager=allow",
            "-Dlog4j2.formatMsgNoLookups=true",
            f"-Djava.io.tmpdir={state / 'tmp'}",
            f"-Dopensearch.path.home={root}",
            f"-Dopensearch.path.conf={state / 'config'}",
            "-Dopensearch.distribution.type=tar",
            "-Dopensearch.bundled_jdk=false",
            "-cp",
            str(root / "lib" / "*"),
            "org.opensearch.bootstrap.OpenSearch",
            "-Ediscovery.type=single-node",
            "-Enetwork.host=127.0.0.1",
            f"-Ehttp.port={self.port}",
            f"-Etransport.port={self._transport_port}",
            f"-Epath.data={state / 'data'}",
            f"-Epath.logs={state / 'tmp'}",
            "-Enode.name=tidelake",
            "-Ecluster.name=tidelake",
            # A test node: no disk watermarks (a nearly full /tmp must not make it read-only).
            "-Ecluster.routing.allocation.disk.threshold_enabled=false",
        ]
        if os.geteuid() == 0:
            argv = ["setpriv", f"--reuid={_NOBODY}", f"--regid={_NOBODY}", "--clear-groups", *argv]
        return argv

    def start(self) -> OpenSearchServer:
        """Start the node (unless it runs) and wait until its cluster is at least yellow."""
        exe = java()
        if not available() or exe is None:
            raise OpenSearchServerError(
                f"OpenSearch {VERSION} is not laid out in {home()} (or no java/setpriv): "
                "run scripts/setup (TIDELAKE_SETUP_TESTS=1)"
            )
        if self.running:
            return self
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._port = self._port or free_port()
        self._transport_port = self._transport_port or free_port()
        config = self._state_dir() / "config"
        (config / "opensearch.yml").write_text("# settings are on the command line\n")
        (config / "log4j2.properties").write_text(_LOG4J2)
        if self._process is None:
            health = f"{self.url}/_cluster/health?wait_for_status=yellow&timeout=1s"
            self._process = ChildProcess(
                "opensearch",
                self.argv(exe),
                log_path=self.log_path,
                cwd=self.workdir,
                ready=http_ok(health),
                startup_timeout_s=self.startup_timeout_s,
                stop_timeout_s=60.0,
            )
        try:
            self._process.start()
        except ProcessError as exc:
            raise OpenSearchServerError(str(exc)) from None
        log.info("opensearch started", url=self.url, pid=self.pid)
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout_s`` (module doc)."""
        super().stop(timeout_s)
