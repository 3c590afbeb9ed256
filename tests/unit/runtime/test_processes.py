"""The child-process class with real tiny children (``python -c …``): start and readiness,
stop with the right signal to the whole group, kill, restart, the log and its tail."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest

from tidelake.runtime.processes import (
    ChildProcess,
    ProcessError,
    free_port,
    http_ok,
    log_line,
    tcp_port,
)


def _py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


#: Prints "ready", then sleeps; on SIGTERM prints the signal's name and exits 3.
TERM_AWARE = """
import signal, sys, time
def on(sig, _f):
    print("got", signal.Signals(sig).name, flush=True)
    sys.exit(3)
signal.signal(signal.SIGTERM, on)
signal.signal(signal.SIGINT, on)
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""

#: Starts a grandchild (same group) that ignores SIGTERM, prints both pids, then waits.
WITH_STUBBORN_GRANDCHILD = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
print("pids", child.pid, flush=True)
time.sleep(600)
"""


def _grandchild_pid(proc: ChildProcess) -> int:
    for line in proc.log_since_start().splitlines():
        if line.startswith("pids "):
            return int(line.split()[1])
    raise AssertionError(proc.log_tail())


def test_start_waits_for_a_log_line_and_stop_sends_sigterm(tmp_path: Path) -> None:
    """start() returns once the log line is there; stop() sends SIGTERM and returns the exit
    status the child chose (3), which the log confirms."""
    proc = ChildProcess(
        "term", _py(TERM_AWARE), log_path=tmp_path / "term.log", ready=log_line("ready")
    )
    proc.start()
    assert proc.alive()
    assert "ready" in proc.log_tail()
    assert 3 == proc.stop()
    assert "got SIGTERM" in proc.log_tail()
    assert not proc.alive()


def test_a_configured_stop_signal_is_sent_instead(tmp_path: Path) -> None:
    """With stop_signal=SIGINT (PostgreSQL's fast shutdown) the child receives SIGINT."""
    proc = ChildProcess(
        "int",
        _py(TERM_AWARE),
        log_path=tmp_path / "int.log",
        ready=log_line("ready"),
        stop_signal=signal.SIGINT,
    )
    with proc:
        pass
    assert "got SIGINT" in proc.log_tail()
    assert 3 == proc.returncode()


def test_stop_escalates_to_sigkill_of_the_whole_group(tmp_path: Path) -> None:
    """A child ignoring SIGTERM, with a grandchild ignoring it too: after the grace period
    both are SIGKILLed and no process of the group is left."""
    code = "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n" + (
        WITH_STUBBORN_GRANDCHILD
    )
    proc = ChildProcess(
        "stubborn", _py(code), log_path=tmp_path / "s.log", ready=log_line("pids ")
    ).start()
    grandchild = _grandchild_pid(proc)
    started = time.monotonic()
    assert -signal.SIGKILL == proc.stop(timeout_s=0.5)
    assert time.monotonic() - started < 10
    # The group's SIGKILL is sent; the grandchild dies once the kernel schedules it (on a
    # loaded machine it was seen still "running" the instant stop returned).
    deadline = time.monotonic() + 5
    while not _gone(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(grandchild)


def _gone(pid: int) -> bool:
    """No such process, or only its zombie is left."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


#: A leader whose grandchild notes any SIGTERM in a file; the leader exits 0 on SIGTERM once
#: it has "finished its work" (as the ingest finishes its commit before its JVM stops).
LEADER_OWNS_ITS_CHILD = """
import signal, subprocess, sys, time
marker = sys.argv[1]
child = subprocess.Popen([sys.executable, "-c",
    "import signal, sys, time\\n"
    "def on(s, f):\\n"
    f"    open({marker!r}, 'w').write('grandchild got SIGTERM')\\n"
    "    sys.exit(0)\\n"
    "signal.signal(signal.SIGTERM, on)\\n"
    "print('child up', flush=True)\\n"
    "time.sleep(600)\\n"])
def on(sig, _f):
    time.sleep(0.5)  # the running work finishes
    sys.exit(0)
signal.signal(signal.SIGTERM, on)
time.sleep(1)
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""


def test_the_stop_signal_reaches_the_leader_only(tmp_path: Path) -> None:
    """stop() signals the leader, which decides for its children; they are not hit by the
    stop signal in the middle of their work, and none is left after the leader exits."""
    marker = tmp_path / "grandchild-signalled"
    proc = ChildProcess(
        "leader",
        [*_py(LEADER_OWNS_ITS_CHILD), str(marker)],
        log_path=tmp_path / "l.log",
        ready=log_line("ready"),
    ).start()
    assert 0 == proc.stop(timeout_s=10)
    assert not marker.exists()
    assert "child up" in proc.log_tail()


def test_kill_takes_the_group_at_any_instant(tmp_path: Path) -> None:
    """kill() SIGKILLs the leader and its grandchild; the leader's status is -SIGKILL."""
    proc = ChildProcess(
        "victim", _py(WITH_STUBBORN_GRANDCHILD), log_path=tmp_path / "v.log", ready=log_line("pids")
    ).start()
    grandchild = _grandchild_pid(proc)
    proc.kill()
    assert -signal.SIGKILL == proc.returncode()
    _wait_gone(grandchild)


def _wait_gone(pid: int) -> None:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} still alive")


def test_a_child_that_exits_before_ready_raises_with_its_log(tmp_path: Path) -> None:
    """Exit status 7 before the readiness check holds: ProcessError naming the status and
    carrying the child's last log lines; nothing keeps running."""
    proc = ChildProcess(
        "broken",
        _py("print('cannot bind: address in use', flush=True); raise SystemExit(7)"),
        log_path=tmp_path / "b.log",
        ready=log_line("never"),
    )
    with pytest.raises(ProcessError) as info:
        proc.start()
    assert "status 7" in str(info.value)
    assert "cannot bind: address in use" in str(info.value)
    assert not proc.alive()


def test_a_zero_exit_before_ready_is_a_failure_too(tmp_path: Path) -> None:
    """A child that exits 0 without ever being ready fails the start at once, not after the
    timeout."""
    proc = ChildProcess(
        "quits", _py("pass"), log_path=tmp_path / "q.log", ready=log_line("x"), startup_timeout_s=30
    )
    started = time.monotonic()
    with pytest.raises(ProcessError, match="status 0"):
        proc.start()
    assert time.monotonic() - started < 10


def test_not_ready_in_time_raises_and_kills(tmp_path: Path) -> None:
    """A child that never becomes ready: ProcessError after startup_timeout_s, and the child
    is killed."""
    proc = ChildProcess(
        "slow",
        _py("import time; time.sleep(600)"),
        log_path=tmp_path / "slow.log",
        ready=lambda _p: False,
        startup_timeout_s=0.5,
    )
    with pytest.raises(ProcessError, match="not ready after"):
        proc.start()
    assert not proc.alive()


def test_tcp_and_http_readiness(tmp_path: Path) -> None:
    """An HTTP server child is ready once its port accepts and its URL answers 200."""
    port = free_port()
    proc = ChildProcess(
        "http",
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        log_path=tmp_path / "http.log",
        cwd=tmp_path,
        ready=lambda p: tcp_port("127.0.0.1", port)(p) and http_ok(f"http://127.0.0.1:{port}/")(p),
    )
    with proc:
        assert http_ok(f"http://127.0.0.1:{port}/")(proc)
    assert not tcp_port("127.0.0.1", port)(proc)


def test_restart_appends_to_the_log_and_counts_starts(tmp_path: Path) -> None:
    """restart(hard=True) kills and starts again: a new pid, two starts, both runs' lines in
    the log, and log_since_start holds only the second run's."""
    proc = ChildProcess(
        "again", _py(TERM_AWARE), log_path=tmp_path / "a.log", ready=log_line("ready")
    ).start()
    first = proc.pid
    proc.restart(hard=True)
    assert first != proc.pid
    assert 2 == proc.starts
    assert 2 == proc.log_tail().count("ready")
    assert "ready\n" == proc.log_since_start()
    proc.stop()


def test_a_child_that_died_on_its_own_can_be_started_again(tmp_path: Path) -> None:
    """After an exit of its own (status 5), start() starts a new child."""
    proc = ChildProcess("once", _py("raise SystemExit(5)"), log_path=tmp_path / "o.log").start()
    assert 5 == proc.wait(10)
    proc.start()
    assert 2 == proc.starts
    assert 5 == proc.wait(10)


def test_pause_and_resume_signal_the_group(tmp_path: Path) -> None:
    """pause() stops the leader (status 'stopped'); resume() continues it; stop() of a paused
    child still stops it cleanly (SIGCONT goes first)."""
    proc = ChildProcess(
        "paused", _py(TERM_AWARE), log_path=tmp_path / "p.log", ready=log_line("ready")
    ).start()
    assert proc.pid is not None
    proc.pause()
    time.sleep(0.2)
    assert psutil.STATUS_STOPPED == psutil.Process(proc.pid).status()
    proc.resume()
    time.sleep(0.2)
    assert psutil.STATUS_STOPPED != psutil.Process(proc.pid).status()
    proc.pause()
    assert 3 == proc.stop(timeout_s=10)


def test_environment_is_added_or_replaced(tmp_path: Path) -> None:
    """env adds to os.environ; base_env replaces it (a TIDELAKE_ variable of the parent does
    not reach the child)."""
    code = "import os; print(os.environ.get('A'), os.environ.get('TIDELAKE_LEAK'), flush=True)"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TIDELAKE_LEAK", "yes")
        added = ChildProcess("added", _py(code), log_path=tmp_path / "e1.log", env={"A": "1"})
        assert 0 == added.start().wait(10)
        replaced = ChildProcess(
            "replaced",
            _py(code),
            log_path=tmp_path / "e2.log",
            env={"A": "2"},
            base_env={"PATH": "/usr/bin:/bin"},
        )
        assert 0 == replaced.start().wait(10)
    assert "1 yes" == added.log_tail(1)
    assert "2 None" == replaced.log_tail(1)


def test_wait_until_raises_with_the_log_when_the_child_exits(tmp_path: Path) -> None:
    """wait_until on a child that exits: ProcessError with its log."""
    proc = ChildProcess(
        "dies", _py("print('boom', flush=True)"), log_path=tmp_path / "d.log"
    ).start()
    with pytest.raises(ProcessError, match="boom"):
        proc.wait_until(lambda _p: False, 10, "healthy")


#: Starts its own ChildProcess (a grandchild in a session of its own), prints its pid, waits.
NESTED = """
import sys, time
from pathlib import Path
from tidelake.runtime.processes import ChildProcess
inner = ChildProcess("inner", [sys.executable, "-c", "import time; time.sleep(600)"],
                     log_path=Path(sys.argv[1]))
inner.start()
print("pids", inner.pid, flush=True)
time.sleep(600)
"""


def test_kill_reaches_the_children_of_a_nested_child_process(tmp_path: Path) -> None:
    """A child that starts its own ChildProcess (own session, as `tidelake run` does with
    its stages) is SIGKILLed: its grandchild, in another session and not in the child's
    group, is killed too (the start's mark is extended at each level, not replaced)."""
    proc = ChildProcess(
        "outer",
        [*_py(NESTED), str(tmp_path / "inner.log")],
        log_path=tmp_path / "outer.log",
        ready=log_line("pids "),
    ).start()
    grandchild = _grandchild_pid(proc)
    assert grandchild != proc.pid
    assert os.getpgid(grandchild) != os.getpgid(proc.pid or 0)
    proc.kill()
    _wait_gone(grandchild)


#: Starts a TERM-aware grandchild in a session of its own; ``argv[2]`` says die_with_parent.
NESTED_DYING = """
import sys, time
from pathlib import Path
from tidelake.runtime.processes import ChildProcess, log_line
inner = ChildProcess("inner", [sys.executable, "-c", sys.argv[3]], log_path=Path(sys.argv[1]),
                     die_with_parent=sys.argv[2] == "yes", ready=log_line("ready"))
inner.start()
print("pids", inner.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("dies", [True, False])
def test_die_with_parent_sends_sigterm_when_the_starter_is_killed(
    tmp_path: Path, dies: bool
) -> None:
    """A grandchild started with die_with_parent gets SIGTERM (its log says so) when the
    process that started it is killed with SIGKILL alone, as `kill -9 <run>` does; without
    it, the grandchild in its own session lives on (until this test's sweep)."""
    inner_log = tmp_path / "inner.log"
    proc = ChildProcess(
        "outer",
        [*_py(NESTED_DYING), str(inner_log), "yes" if dies else "no", TERM_AWARE],
        log_path=tmp_path / "outer.log",
        ready=log_line("pids "),
    ).start()
    try:
        grandchild = _grandchild_pid(proc)
        assert proc.pid is not None
        os.kill(proc.pid, signal.SIGKILL)  # the leader only: no group signal, no sweep
        if dies:
            _wait_gone(grandchild)
            assert "got SIGTERM" in inner_log.read_text()
        else:
            time.sleep(1.0)
            assert psutil.Process(grandchild).is_running()
    finally:
        proc.kill()
