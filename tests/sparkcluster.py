"""A local Spark standalone cluster from the installed PySpark: one master, one worker.

Started with ``bin/spark-class`` (the pip PySpark ships no ``sbin/start-master.sh``), bound to
127.0.0.1, sized for a 2-core machine: one worker with 1 core and 1 GB for executors, daemons
with 256 MB heaps. Its master's JSON page tells which applications ran on it.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import pyspark

from tidelake.runtime.processes import ChildProcess, free_port, tcp_port

SPARK_HOME = Path(pyspark.__file__).parent


@dataclass
class SparkCluster:
    """``with SparkCluster(dir) as cluster:`` → ``cluster.master_url`` is ``spark://…``."""

    work_dir: Path
    worker_cores: int = 1
    worker_memory: str = "1g"
    startup_timeout_s: float = 120.0
    port: int = field(default_factory=free_port)
    webui_port: int = field(default_factory=free_port)
    _procs: list[ChildProcess] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _env(self) -> dict[str, str]:
        return {
            "SPARK_HOME": str(SPARK_HOME),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": "256m",
            "SPARK_LOG_DIR": str(self.work_dir / "logs"),
            "SPARK_WORKER_DIR": str(self.work_dir / "worker"),
        }

    def _spawn(self, name: str, *args: str, ready: Any) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        proc = ChildProcess(
            name,
            [str(SPARK_HOME / "bin" / "spark-class"), *args],
            log_path=self.work_dir / f"{name}.log",
            env=self._env(),
            ready=ready,
            startup_timeout_s=self.startup_timeout_s,
            stop_timeout_s=20,
        )
        self._procs.append(proc)
        proc.start()

    def _worker_alive(self, _proc: ChildProcess) -> bool:
        try:
            return any(w.get("state") == "ALIVE" for w in self.state().get("workers", []))
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def state(self) -> dict[str, Any]:
        """The master's ``/json/`` page: workers, active and completed applications."""
        url = f"http://127.0.0.1:{self.webui_port}/json/"
        with urllib.request.urlopen(url, timeout=5) as resp:
            data: dict[str, Any] = json.loads(resp.read())
        return data

    def start(self) -> SparkCluster:
        try:
            self._spawn(
                "master",
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--webui-port",
                str(self.webui_port),
                ready=tcp_port("127.0.0.1", self.webui_port),
            )
            self._spawn(
                "worker",
                "org.apache.spark.deploy.worker.Worker",
                "--host",
                "127.0.0.1",
                "--webui-port",
                str(free_port()),
                "--cores",
                str(self.worker_cores),
                "--memory",
                self.worker_memory,
                self.master_url,
                ready=self._worker_alive,
            )
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for proc in reversed(self._procs):
            proc.stop()
        self._procs.clear()

    def log_tail(self, lines: int = 20) -> str:
        out = []
        for name in ("master", "worker"):
            path = self.work_dir / f"{name}.log"
            if path.exists():
                out.append(f"--- {name}\n" + "\n".join(path.read_text().splitlines()[-lines:]))
        return "\n".join(out)

    def __enter__(self) -> SparkCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
