"""Bench jobs: a child run to completion, killed with its descendants at its time limit."""

import os
import sys
import time
from pathlib import Path

from tidelake_bench.jobs import EXITED_ON_START, KILLED_AT_LIMIT, run_job
from tidelake_bench.memory import command_name


def test_a_job_reports_its_exit_status_and_the_end_of_its_log(tmp_path: Path) -> None:
    """Its own status, and the last lines it wrote (stdout and stderr in one log)."""
    script = (
        "import sys, time; time.sleep(0.5); "
        "print('one'); print('two', file=sys.stderr); sys.exit(3)"
    )
    run = run_job("job", [sys.executable, "-c", script], tmp_path / "job.log", 30)
    assert 3 == run.code
    assert ["one", "two"] == sorted(run.tail)
    assert run.peak_rss_mib is None or run.peak_rss_mib > 0


def test_a_job_over_its_limit_is_killed_with_its_children(tmp_path: Path) -> None:
    """At the limit the job and the child it started (here a grandchild sleep) are gone."""
    pid_file = tmp_path / "grandchild.pid"
    script = (
        "import subprocess, sys, time; "
        "p = subprocess.Popen(['sleep', '60']); "
        f"open({str(pid_file)!r}, 'w').write(str(p.pid)); "
        "time.sleep(60)"
    )
    run = run_job("job", [sys.executable, "-c", script], tmp_path / "job.log", 2)
    assert KILLED_AT_LIMIT == run.code
    grandchild = int(pid_file.read_text())
    assert _gone_within(grandchild, 5.0)  # killed with the job, not orphaned


def _gone_within(pid: int, seconds: float) -> bool:
    """The process ended (exited or a zombie waiting for its reaper) within ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return True
        if "\nState:\tZ" in status:
            return True
        time.sleep(0.05)
    return False


def test_a_job_that_cannot_run_is_a_status_and_a_reason(tmp_path: Path) -> None:
    """A job whose program does not exist is recorded, not raised: the bench reports the
    contender as unavailable with the reason."""
    missing = tmp_path / "no-such-program"
    run = run_job("job", [str(missing)], tmp_path / "job.log", 30)
    assert EXITED_ON_START == run.code
    assert str(missing) in run.tail[0]


def test_command_name_is_the_executable_name_or_none_once_gone() -> None:
    """``/proc/<pid>/comm`` of this interpreter, and None for a pid that does not exist."""
    assert command_name(os.getpid()) is not None
    assert command_name(2**22 + 1) is None
