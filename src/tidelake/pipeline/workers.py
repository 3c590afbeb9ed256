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

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidelake.capture.canal import subject_for
from tidelake.config import ConsumerConfig
from tidelake.names import split_table_id

#: The default durable consumer name (``bus.consumer.durable``); a worker's is
#: ``<this>-<worker name>``.
STAGER_DURABLE: str = ConsumerConfig.model_fields["durable"].default


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
