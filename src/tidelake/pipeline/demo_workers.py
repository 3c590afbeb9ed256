"""``tidelake demo --workers N``: what each worker did, and the fault of one worker's ingest.

The workers themselves (what each owns, how tables are shared) are ``pipeline/workers.py``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tidelake.lake.ledger import CommitRecord
from tidelake.pipeline.stack import LocalStack
from tidelake.pipeline.workers import WorkerShare


def worker_summaries(
    shares: Sequence[WorkerShare], commits: Sequence[CommitRecord], stack: LocalStack
) -> list[dict[str, Any]]:
    """Per worker: its tables, its Hudi commits, its ingest's rounds of rows (the commits
    of rows of one round all carry the sequence the round read through, ``lake/rules.py``
    ``rows_seq_last``) and the pids of its processes now."""
    out = []
    for share in shares:
        own = set(share.tables)
        mine = [c for c in commits if c.table in own]
        rounds = {c.seq for c in mine if not c.ddl and c.duration_ms is not None}
        out.append(
            {
                "worker": share.name,
                "tables": len(share.tables),
                "commits": len(mine),
                "rounds": len(rounds),
                "stager_pid": stack.child(f"stager-{share.name}").pid,
                "ingest_pid": stack.child(f"ingest-{share.name}").pid,
                "stager_peak_rss_mib": peak_rss_mib(stack.child(f"stager-{share.name}").pid),
                "ingest_peak_rss_mib": peak_rss_mib(stack.child(f"ingest-{share.name}").pid),
            }
        )
    return out


def peak_rss_mib(pid: int | None, proc: Path = Path("/proc")) -> float | None:
    """The kernel's high-water mark of resident memory (``VmHWM``) of ``pid`` and of every
    process under it (the ingest's Spark JVM), summed: at most the sum their peaks could
    reach together. None once it is gone (Linux only)."""
    if pid is None:
        return None
    total_kib, todo, seen = 0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            status = (proc / str(p) / "status").read_text()
            tasks = list((proc / str(p) / "task").iterdir())
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                total_kib += int(line.split()[1])
        for task in tasks:
            try:
                todo.extend(int(c) for c in (task / "children").read_text().split())
            except OSError:
                continue
    return round(total_kib / 1024, 1) if total_kib else None


class WorkerFaults:
    """``kill -9`` of the first worker's ingest while a round of it commits, started again
    at once (as ``tidelake run`` would); the other workers' processes must stay the same."""

    def __init__(self, stack: LocalStack) -> None:
        self.stack = stack
        self.faults: list[str] = []
        #: Set while the killed ingest is down: the demo's wait does not count it as dead.
        self.restarting = threading.Event()
        self._thread: threading.Thread | None = None

    def kill_first_ingest_once(self, timeout_s: float = 600) -> None:
        """In a thread: wait for the first worker's ingest to commit, kill it, restart it."""
        victim = self.stack.workers[0].name
        others = {
            c.name: c.pid
            for c in self.stack.children
            if c.name != f"ingest-{victim}" and c.pid is not None
        }

        def committing() -> bool:
            beat = self.stack.ingest_heartbeat(victim) or {}
            phase = (beat.get("round") or {}).get("phase")
            return beat.get("state") == "applying" and phase == "committing"

        def run() -> None:
            deadline = time.monotonic() + timeout_s
            while not committing():
                if time.monotonic() > deadline:
                    self.faults.append(f"ingest-{victim} not killed (no commit in {timeout_s} s)")
                    return
                time.sleep(0.05)
            child = self.stack.child(f"ingest-{victim}")
            self.restarting.set()
            child.kill()
            self.faults.append(f"kill -9 ingest-{victim} while a round commits")
            child.start()
            try:
                deadline = time.monotonic() + 300
                while not self.stack.ingest_up(victim) and time.monotonic() < deadline:
                    time.sleep(0.2)
            finally:
                self.restarting.clear()
            moved = sorted(
                c.name for c in self.stack.children if c.name in others and c.pid != others[c.name]
            )
            if moved:
                self.faults.append(f"other workers' processes restarted: {', '.join(moved)}")

        self._thread = threading.Thread(target=run, daemon=True, name="worker-faults")
        self._thread.start()

    def wait(self, timeout_s: float = 600) -> None:
        if self._thread is not None:
            self._thread.join(timeout_s)
