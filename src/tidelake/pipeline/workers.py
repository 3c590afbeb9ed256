"""Several workers on one bus and one lake: each a stager and an ingest owning its tables.

A **worker** is one stager and one ingest that own a disjoint set of source tables
(docs/deployment.md, "Several workers"). What each worker has of its own:

* its durable consumer (``bus.consumer.durable``) taking only its tables' subjects
  (``bus.consumer.filter_subjects``): every message reaches exactly the workers whose
  filters match its subject;
* its staging root (``stage.root``): manifests, retention and the stager's heartbeat;
* its ingest state directory (``lake.state_dir``): the writer lock, cursor, commit log,
  delete logs, tombstones, heartbeat;
* its tables (``ingest.tables``): the ingest writes, drops and renames no other table, and
  pauses a table of another worker whose events reach it (its filters and its tables
  disagree) instead of writing it.

What they share: the bus (one stream), the lake root (every table in one place, read by
``query``, ``verify`` and the views), the dead-letter stream.

The assignment rule used here (``tidelake demo --workers N``, the ``workers`` bench part):
the tables sorted by id and dealt round-robin, worker ``i`` taking tables ``i, i+N, …``; each
table's subject is the one tidelake's capture and the demo's workloads publish it on,
``cdc.<database>.<table>`` (:func:`tidelake.capture.canal.subject_for`). A deployment may
assign tables any other way (by database, ``cdc.crm.>``), as long as every table's subject
matches exactly one worker's filters and that worker's ``ingest.tables``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidelake.capture.canal import subject_for
from tidelake.names import split_table_id

if TYPE_CHECKING:
    from tidelake.lake.ledger import CommitRecord
    from tidelake.pipeline.stack import LocalStack

#: The default durable consumer name; a worker's is ``<this>-<worker name>``.
STAGER_DURABLE = "tidelake-stager"


@dataclass(frozen=True)
class WorkerShare:
    """One worker: its name (``w1``, …) and the ``db.table`` ids it owns."""

    name: str
    tables: tuple[str, ...]

    @property
    def subjects(self) -> list[str]:
        """The subjects of its tables, as the demo's workloads publish them."""
        return [subject_for(*split_table_id(t)) for t in self.tables]

    def home(self, home: Path) -> Path:
        """Where its own staging and state live under the pipeline's home."""
        return home / "workers" / self.name

    def settings(self, home: Path) -> dict[str, Any]:
        """The settings that make a config this worker's (merged over the shared ones)."""
        own = self.home(home)
        return {
            "bus": {
                "consumer": {
                    "durable": f"{STAGER_DURABLE}-{self.name}",
                    "filter_subjects": self.subjects,
                }
            },
            "stage": {"root": str(own / "staging")},
            "lake": {"state_dir": str(own / "state")},
            "ingest": {"tables": list(self.tables)},
        }


def split_tables(tables: Iterable[str], workers: int) -> list[WorkerShare]:
    """``tables`` (``db.table`` ids) dealt round-robin in sorted order over ``workers``
    workers ``w1`` … ``wN``; every worker gets at least one table."""
    ordered = sorted(set(tables))
    if workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    if workers > len(ordered):
        raise ValueError(f"{workers} workers need at least {workers} tables, not {len(ordered)}")
    return [WorkerShare(f"w{i + 1}", tuple(ordered[i::workers])) for i in range(workers)]


def owner_of(shares: Sequence[WorkerShare], table_id: str) -> WorkerShare | None:
    """The worker owning ``table_id``, if any."""
    return next((s for s in shares if table_id in s.tables), None)


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
            }
        )
    return out


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
