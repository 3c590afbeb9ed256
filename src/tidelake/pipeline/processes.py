"""The stages as child processes, the way production runs them: one process per stage.

Each child is ``python -m tidelake.cli <verb>`` with its own log file, so a crash of one
stage never takes another with it, and tests can ``kill -9`` any of them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def tidelake_argv(*args: str) -> list[str]:
    """The command line of a tidelake verb run by this interpreter."""
    return [sys.executable, "-m", "tidelake.cli", *args]


def run_env(config_path: Path, home: Path, bus_url: str) -> dict[str, str]:
    """The environment that points a self-contained run's children (demo, chaos) at the
    config it wrote. ``TIDELAKE_…`` variables override a config file, so the home and the bus
    are pinned here too: a ``TIDELAKE_HOME`` left in the caller's shell would otherwise send
    the children to another directory than the one the run watches. Other ``TIDELAKE_…``
    settings (a Spark master, say) still reach them."""
    return {
        "TIDELAKE_CONFIG": str(config_path),
        "TIDELAKE_HOME": str(home),
        "TIDELAKE_BUS__URL": bus_url,
    }


class StageProcess:
    """One stage running as a child process, logging to ``log_path``."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_path: Path) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        try:
            self._proc = subprocess.Popen(
                self.argv,
                env={**os.environ, **self.env},
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C in the terminal reaches only the parent
            )
        finally:
            log.close()
        self.starts += 1

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def returncode(self) -> int | None:
        return None if self._proc is None else self._proc.poll()

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.alive() and self._proc is not None:
            self._proc.kill()
            self._proc.wait()

    def stop(self, timeout_s: float = 60.0) -> int | None:
        """SIGTERM (the stage finishes its current batch), SIGKILL after ``timeout_s``."""
        if self._proc is None:
            return None
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        return self._proc.returncode

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def wait_until(predicate: object, timeout_s: float, interval_s: float = 0.2) -> bool:
    """Poll ``predicate()`` until true or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if callable(predicate) and predicate():
            return True
        time.sleep(interval_s)
    return False
