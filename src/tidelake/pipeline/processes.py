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


def child_environ(env: dict[str, str], *, inherit_settings: bool) -> dict[str, str]:
    """The environment of a child stage: ours, then ``env``.

    ``TIDELAKE_…`` variables override a config file's settings. A self-contained run (the
    demo, the chaos harness, tests) writes the config its children must use, so the caller's
    own ``TIDELAKE_…`` variables are left out unless ``inherit_settings`` (``tidelake run``,
    whose children share the operator's configuration and secrets).
    """
    base = {
        k: v for k, v in os.environ.items() if inherit_settings or not k.startswith("TIDELAKE_")
    }
    return {**base, **env}


class StageProcess:
    """One stage running as a child process, logging to ``log_path``."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        env: dict[str, str],
        log_path: Path,
        *,
        inherit_settings: bool = False,
    ) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.inherit_settings = inherit_settings
        self.log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        try:
            self._proc = subprocess.Popen(
                self.argv,
                env=child_environ(self.env, inherit_settings=self.inherit_settings),
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
