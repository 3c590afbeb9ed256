"""A bench job: one child run to completion under a time limit, the peak memory of its
process tree sampled while it runs.

The child is started by tidelake's one child-process class
(:class:`tidelake.runtime.processes.ChildProcess`): a process group of its own, its output in a
log file, and at the time limit SIGKILL of the group and every descendant, so that a
``spark-submit`` or a Hudi 0.14 worker that hangs leaves no JVM behind.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tidelake.runtime.processes import ChildProcess, ProcessError
from tidelake_bench.memory import PeakRss, process_tree

#: Exit status recorded for a job killed at its time limit (as ``subprocess`` reports SIGKILL).
KILLED_AT_LIMIT = -9
#: Exit status recorded for a job that could not be executed or exited before it was watched.
EXITED_ON_START = -1


@dataclass
class JobRun:
    """How a job ended."""

    code: int
    peak_rss_mib: float | None
    #: The last lines of its log, for the reason of a failure.
    tail: list[str]


def run_job(
    name: str,
    argv: Sequence[str],
    log_file: Path,
    timeout_s: float,
    *,
    env: Mapping[str, str] | None = None,
    tail_lines: int = 15,
) -> JobRun:
    """Run ``argv`` (environment ``env``, default this process's) with its output appended to
    ``log_file``, for at most ``timeout_s`` seconds."""
    child = ChildProcess(name, argv, log_path=log_file, base_env=env)
    try:
        child.start()
    except (ProcessError, OSError) as exc:
        # A job that failed at once (or could not be executed): the error names its exit
        # status, its log says why.
        first = str(exc).splitlines()[:1]
        return JobRun(EXITED_ON_START, None, first + child.log_tail(tail_lines).splitlines())
    pid = child.pid
    sampler = PeakRss(lambda: process_tree(pid) if pid is not None else []).start()
    try:
        code = child.wait(timeout_s)
    except subprocess.TimeoutExpired:
        code = KILLED_AT_LIMIT
    finally:
        child.kill()  # the group and its descendants; nothing left once it exited itself
        sampler.stop()
    return JobRun(code, sampler.peak_mib, child.log_tail(tail_lines).splitlines())
