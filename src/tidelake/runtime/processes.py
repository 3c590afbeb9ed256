"""Child processes: the one class for every process tidelake or its tests start.

The embedded servers (nats-server, MariaDB, PostgreSQL, MinIO, Debezium Server), the stage
processes of ``run``/``demo``/``chaos`` and the test fixtures all start a child the same way,
through :class:`ChildProcess`. Its contract:

* **Own session.** The child is the leader of a new session and process group, so a Ctrl-C in
  the terminal reaches only the parent; a pause (SIGSTOP) and a kill reach the whole group —
  the ingest's JVM included.
* **Readiness.** :meth:`ChildProcess.start` returns once ``ready(process)`` is true: a TCP port
  that accepts (:func:`tcp_port`), an HTTP URL that answers (:func:`http_ok`), a line in the
  log written since this start (:func:`log_line`), or any callable. A child that exits before
  it is ready, or is not ready within ``startup_timeout_s``, raises :class:`ProcessError` with
  the end of its log, and nothing of it is left running.
* **Stop.** :meth:`ChildProcess.stop` sends the stop signal (SIGTERM by default; PostgreSQL
  wants SIGINT, its "fast" shutdown) to the leader only — after a SIGCONT to the group, so a
  group the chaos harness paused can act on it. The leader owns its children and stops them
  in its order: the ingest finishes its running commit before its JVM goes, ``tidelake run``
  stops its stages one after the other; a signal to the whole group would hit the JVM in
  the middle of that commit. Then it waits ``stop_timeout_s`` for the leader, SIGKILLs the
  group and every descendant still alive, and returns the leader's exit status.
* **Kill.** :meth:`ChildProcess.kill` is SIGKILL of the group and every descendant at any
  instant, as a crash would; :meth:`ChildProcess.restart` is stop (or kill) then start.
* **Log.** stdout and stderr go to ``log_path`` (appended across restarts);
  :meth:`ChildProcess.log_tail` gives its last lines for error messages.
* **Dying with the parent** (``die_with_parent``, Linux). A child in a session of its own
  outlives a parent killed with ``kill -9``. ``tidelake run`` asks the kernel to send its
  stages and its nats-server SIGTERM when it dies (``PR_SET_PDEATHSIG``), so a killed ``run``
  leaves no unsupervised stager, ingest or server behind to fight the next ``run`` over the
  home. The signal follows the *thread* that started the child: such children are started
  from the main thread.

Built on `mirakuru <https://github.com/dbfixtures/mirakuru>`_ (3.x): its ``Executor`` starts
the child with ``setsid``, polls a readiness check while watching the child's exit status,
kills on a start timeout, and marks the child with an environment variable
(``mirakuru_uuid``) so that :meth:`kill` also reaches descendants that left the group (a
daemonised grandchild, or the children of a nested tidelake process such as ``tidelake run``
under a test: the mark is extended, not replaced, at each level); its ``atexit`` hook
SIGKILLs any marked process still alive when the parent interpreter exits, so a test run
that dies leaves no server behind. Two parts of
mirakuru are not used: its ``stop()`` shares one timeout between start and stop and raises
on any exit status other than 0 or ``-signal`` — a stage's own exit status is what callers
want to see — so the graceful stop is a ``killpg`` + ``Popen.wait`` here, finished by
mirakuru's kill; and its ``OutputExecutor`` reads a pipe, while every child here logs to a
file, so :func:`log_line` reads the file.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, Self

import structlog
from mirakuru import Executor, SimpleExecutor
from mirakuru.base import ENV_UUID
from mirakuru.exceptions import ProcessExitedWithError, TimeoutExpired

from tidelake.errors import TidelakeError, Transient

log = structlog.get_logger(__name__)

#: ``ready(process)``: true once the child serves what it was started for.
Readiness = Callable[["ChildProcess"], bool]


class ProcessError(TidelakeError, Transient):
    """A child process exited on start, or was not ready in time."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (bind port 0, read it back, release it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def tidelake_argv(*args: str) -> list[str]:
    """The command line of a tidelake verb run by this interpreter."""
    return [sys.executable, "-m", "tidelake.cli", *args]


# --- readiness ---------------------------------------------------------------------------------


def tcp_port(host: str, port: int) -> Readiness:
    """Ready once ``host:port`` accepts a TCP connection."""

    def ready(_process: ChildProcess) -> bool:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return True
        except OSError:
            return False

    return ready


def http_ok(url: str, status: int = 200) -> Readiness:
    """Ready once a GET of ``url`` answers ``status``."""

    def ready(_process: ChildProcess) -> bool:
        try:
            with urllib.request.urlopen(url, timeout=1.0) as resp:
                return int(resp.status) == status
        except (urllib.error.URLError, OSError):
            return False

    return ready


def log_line(text: str) -> Readiness:
    """Ready once ``text`` appears in the log written since the latest start."""

    def ready(process: ChildProcess) -> bool:
        return text in process.log_since_start()

    return ready


def every(*checks: Readiness) -> Readiness:
    """Ready once every check is (checked in order, the next only when the previous holds)."""

    def ready(process: ChildProcess) -> bool:
        return all(check(process) for check in checks)

    return ready


# --- the process -------------------------------------------------------------------------------


#: prctl(2) option: the signal this process gets when its parent (thread) exits.
_PR_SET_PDEATHSIG = 1


def _session_dying_with(parent: int) -> Callable[[], None]:
    """A ``preexec_fn``: a session of its own (as mirakuru's), and SIGTERM when ``parent``
    dies; a parent already gone by then gets it at once."""

    def preexec() -> None:
        os.setsid()
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


class _Executor(Executor):
    """mirakuru's executor with the readiness of a :class:`ChildProcess` and, optionally, an
    environment that does not start from ``os.environ``."""

    def __init__(
        self,
        owner: ChildProcess,
        argv: Sequence[str],
        *,
        base_env: Mapping[str, str] | None,
        env: Mapping[str, str],
        **kwargs: Any,
    ) -> None:
        super().__init__(list(argv), envvars=dict(env), **kwargs)
        inherited = os.environ.get(ENV_UUID)
        if inherited:
            # mirakuru finds a start's descendants by a substring of this mark: extending the
            # mark this process inherited (instead of replacing it) lets the process that
            # started *us* reach our children too, even after we were SIGKILLed.
            self._uuid = f"{inherited};{self._uuid}"
        self._owner = owner
        self._base_env = None if base_env is None else dict(base_env)

    @property
    def _popen_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = super()._popen_kwargs
        if self._owner.die_with_parent and sys.platform == "linux":
            kwargs["preexec_fn"] = _session_dying_with(os.getpid())
        return kwargs

    @property
    def envvars(self) -> dict[str, str]:
        marked = super().envvars
        if self._base_env is None:
            return marked
        return {**self._base_env, **self._envvars, ENV_UUID: marked[ENV_UUID]}

    def start(self) -> Self:
        if self._owner.ready is None:
            # No readiness check: spawned is started; an early exit shows in alive().
            return SimpleExecutor.start(self)
        return super().start()

    def pre_start_check(self) -> bool:
        return False  # a port or a data directory in use fails the start itself

    def after_start_check(self) -> bool:
        return self._owner._is_ready()


class ChildProcess:
    """One child process with its own session, log file, readiness check and stop signal.

    ``env`` is added to this process's environment (or to ``base_env`` when given, which then
    replaces ``os.environ``). ``popen_kwargs`` go to :class:`subprocess.Popen` (``user=``,
    ``group=``…). The object may be started again after a stop, a kill or an exit of its own;
    :attr:`starts` counts the starts.
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        base_env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        ready: Readiness | None = None,
        startup_timeout_s: float = 60.0,
        stop_signal: signal.Signals = signal.SIGTERM,
        stop_timeout_s: float = 30.0,
        popen_kwargs: Mapping[str, Any] | None = None,
        die_with_parent: bool = False,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = dict(env or {})
        self.base_env = None if base_env is None else dict(base_env)
        self.cwd = cwd
        self.ready = ready
        self.startup_timeout_s = startup_timeout_s
        self.stop_signal = stop_signal
        self.stop_timeout_s = stop_timeout_s
        self.popen_kwargs = dict(popen_kwargs or {})
        #: SIGTERM to the child when this process dies (module doc; Linux only).
        self.die_with_parent = die_with_parent
        self.starts = 0
        self._executor: _Executor | None = None
        self._proc: subprocess.Popen[Any] | None = None
        self._log_offset = 0

    # -- state ---------------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """The leader's pid (also the group's id); None before the first start."""
        return self._proc.pid if self._proc is not None else None

    def alive(self) -> bool:
        """The leader is running (a SIGSTOPped leader is alive)."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def running(self) -> bool:
        return self.alive()

    def returncode(self) -> int | None:
        """The leader's exit status; None while it runs or before the first start."""
        return None if self._proc is None else self._proc.poll()

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> Self:
        """Start the child (unless it runs) and wait until it is ready; see the module doc."""
        if self.alive():
            return self
        self._sweep()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            self._log_offset = self.log_path.stat().st_size
        # The log is opened per start (it may have been rotated away); the child keeps its
        # own descriptor, so this one is closed once the child has it.
        with self.log_path.open("ab") as logf:
            executor = _Executor(
                self,
                self.argv,
                base_env=self.base_env,
                env=self.env,
                cwd=None if self.cwd is None else str(self.cwd),
                timeout=self.startup_timeout_s,
                sleep=0.05,
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                popen_kwargs=self.popen_kwargs,
            )
            self._executor = executor
            try:
                executor.start()
            except BaseException as exc:
                with contextlib.suppress(Exception):
                    executor.kill()  # the group and every marked descendant
                self._executor = None
                self._proc = None
                if isinstance(exc, ProcessExitedWithError):
                    raise ProcessError(
                        f"{self.name} exited with status {exc.exit_code} on start; "
                        f"{self.log_path}:\n{self.log_tail()}"
                    ) from None
                if isinstance(exc, TimeoutExpired):
                    raise ProcessError(
                        f"{self.name} not ready after {self.startup_timeout_s:.0f} s; "
                        f"{self.log_path}:\n{self.log_tail()}"
                    ) from None
                raise
            self._proc = executor.process
        self.starts += 1
        log.debug("child started", name=self.name, pid=self.pid, log=str(self.log_path))
        return self

    def _is_ready(self) -> bool:
        executor = self._executor
        proc = executor.process if executor is not None else None
        if proc is not None and proc.poll() is not None:
            # mirakuru reports a non-zero exit itself; a zero exit before ready is a failure too
            raise ProcessExitedWithError(executor, proc.returncode)  # type: ignore[arg-type]
        return self.ready is None or self.ready(self)

    def wait_until(self, ready: Readiness, timeout_s: float, what: str = "") -> None:
        """Poll ``ready(self)`` until true; raise :class:`ProcessError` (with the log's tail)
        when the child exits first or ``timeout_s`` passes."""
        deadline = time.monotonic() + timeout_s
        while not ready(self):
            if not self.alive():
                raise ProcessError(
                    f"{self.name} exited ({self.returncode()}) before {what or 'ready'}:\n"
                    + self.log_tail()
                )
            if time.monotonic() > deadline:
                raise ProcessError(
                    f"{self.name}: not {what or 'ready'} after {timeout_s:.0f} s:\n"
                    + self.log_tail()
                )
            time.sleep(0.1)

    def stop(self, timeout_s: float | None = None, sig: signal.Signals | None = None) -> int | None:
        """The stop signal to the group, ``timeout_s`` (default ``stop_timeout_s``) for the
        leader to exit, then SIGKILL of whatever is left; the leader's exit status."""
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            self.signal_group(signal.SIGCONT)
            self.send_signal(sig or self.stop_signal)
            try:
                proc.wait(self.stop_timeout_s if timeout_s is None else timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("child did not stop; killing it", name=self.name, pid=proc.pid)
        self._sweep()
        return proc.wait()

    def kill(self) -> None:
        """SIGKILL of the group and every descendant, now; the leader is reaped."""
        self._sweep()

    def restart(self, *, hard: bool = False) -> Self:
        """Stop (``kill`` when ``hard``) and start again."""
        if hard:
            self.kill()
        else:
            self.stop()
        return self.start()

    def _sweep(self) -> None:
        """SIGKILL the group and every process marked as this start's descendant."""
        if self._executor is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                self._executor.kill()
            self._executor = None
        if self._proc is not None:
            self._proc.wait()

    # -- signals -------------------------------------------------------------------------------

    def send_signal(self, sig: signal.Signals) -> None:
        """``sig`` to the leader (nothing when it is not running): it decides for its children."""
        if self.alive() and self._proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.send_signal(sig)

    def signal_group(self, sig: signal.Signals) -> None:
        """``sig`` to the child's whole process group (nothing when it is not running)."""
        if self.alive() and self._proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, sig)

    def pause(self) -> None:
        """SIGSTOP the group (a stall, as a long GC pause or a frozen VM would)."""
        self.signal_group(signal.SIGSTOP)

    def resume(self) -> None:
        self.signal_group(signal.SIGCONT)

    def wait(self, timeout_s: float | None = None) -> int:
        """Until the leader exits; its status. Raises :class:`subprocess.TimeoutExpired`."""
        if self._proc is None:
            raise ProcessError(f"{self.name} was never started")
        status = self._proc.wait(timeout_s)
        self._sweep()
        return status

    # -- log -----------------------------------------------------------------------------------

    def log_tail(self, lines: int = 30) -> str:
        """The last ``lines`` lines of the log ("" when there is none)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def log_since_start(self) -> str:
        """What the child logged since its latest start."""
        try:
            with self.log_path.open("rb") as f:
                f.seek(self._log_offset)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    # -- context manager -----------------------------------------------------------------------

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"ChildProcess({self.name!r}, pid={self.pid}, alive={self.alive()})"


class ServedProcess:
    """A server run as one :class:`ChildProcess` (a subclass starts it in :meth:`start` and
    keeps it in ``_process``): its pid, stop, kill, log tail and ``with`` block."""

    _process: ChildProcess | None = None

    def start(self) -> Self:
        raise NotImplementedError

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.alive()

    def stop(self, timeout_s: float = 30.0) -> None:
        """The process's stop signal, then SIGKILL after ``timeout_s``."""
        if self._process is not None:
            self._process.stop(timeout_s)

    def kill(self) -> None:
        """SIGKILL, as a crash."""
        if self._process is not None:
            self._process.kill()

    def log_tail(self, lines: int = 20) -> str:
        return self._process.log_tail(lines) if self._process is not None else ""

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@contextlib.contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """An event set by SIGTERM / SIGINT: a long-running loop finishes its unit of work (the
    ingest its commit) and returns."""
    stop = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        log.info("stopping after the current unit of work", signal=signal.Signals(signum).name)
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
