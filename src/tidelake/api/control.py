"""Transitional: the table-control names the ingest imported from ``api/`` before the ledger.

The operator's requests now go through the ledger (:meth:`tidelake.lake.ledger.Ledger.request`:
``POST /api/tables/{table}/pause|resume`` and ``tidelake table …`` call it directly), and the
ingest's side is :class:`tidelake.lake.control.TableControl`, which documents each action.
What is left here keeps ``lake/ingest.py`` (``TableControl``), ``lake/apply.py``
(``skipped_ddl_seq``) and their tests working until they import the ledger and
``lake.control`` themselves; then this module goes (the stages must not import ``api/``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from tidelake.lake import control as lake_control
from tidelake.lake.ledger import BLOCKED_FILE, Action, Ledger, TableRequest, durable_write

__all__ = [
    "Action",
    "TableControl",
    "TableRequest",
    "read_paused",
    "read_requests",
    "request",
    "skipped_ddl_seq",
]


def request(
    state_dir: Path, table: str, action: Action, reason: str = "", seq: int | None = None
) -> TableRequest:
    """Record a pause, resume or skip-ddl of ``table`` for the ingest's next round; raises
    ValueError for a table name without its database, or a ``seq`` on another action."""
    return Ledger(state_dir).request(table, action, reason, seq)


def read_requests(state_dir: Path) -> dict[str, TableRequest]:
    """Every table's last request (empty when the file is missing or unreadable)."""
    return Ledger(state_dir).requests()


def read_paused(state_dir: Path) -> dict[str, str]:
    """The tables the ingest holds paused, with the reason."""
    return Ledger(state_dir).paused()


def skipped_ddl_seq(state_dir: Path, table: str) -> int | None:
    """The stream sequence of the DDL an operator asked to skip for ``table``, if any."""
    return Ledger(state_dir).skipped_ddl_seq(table)


class _IngestFields:
    """The ``Controlled`` protocol over an ingest that predates it (it exposes ``paused``,
    ``failures``, ``cursor``, ``writer`` and ``_write_paused`` instead)."""

    def __init__(self, ingest: Any, ledger: Ledger) -> None:
        self.ingest = ingest
        self.ledger = ledger

    def pause(self, table_id: str, reason: str) -> None:
        self.ingest.paused[table_id] = reason
        self.ingest._write_paused()

    def resume(self, table_id: str) -> bool:
        # In paused.json but not in this process's paused tables: an earlier ingest process
        # paused it, and status shows it paused until the file says not.
        if table_id not in self.ingest.paused and table_id not in self.ledger.paused():
            return False
        self.ingest.paused.pop(table_id, None)
        self.ingest.failures.pop(table_id, None)
        self.ingest.cursor = min(self.ingest.cursor, self.checkpoint_seq(table_id) or 0)
        self.ingest._write_paused()
        return True

    def checkpoint_seq(self, table_id: str) -> int | None:
        checkpoint = self.ingest.writer.checkpoint(table_id)
        return int(checkpoint.seq) if checkpoint is not None else None


class TableControl(lake_control.TableControl):
    """Transitional: :class:`tidelake.lake.control.TableControl` for an ingest that does not
    implement ``Controlled`` yet (``lake/ingest.py`` imports this name). It goes once the
    ingest implements the protocol and imports ``tidelake.lake.control``."""

    def apply(self, ingest: Any) -> list[TableRequest]:
        if all(hasattr(ingest, m) for m in ("pause", "resume", "checkpoint_seq")):
            return super().apply(ingest)
        return super().apply(_IngestFields(ingest, self.ledger))

    def _clear_blocked(self, table: str, passed: int) -> None:
        # Until lake/evolve.py writes ddl_blocked.json through the ledger it reads the bare
        # mapping: keep that shape while the file has it.
        path = self.ledger.path(BLOCKED_FILE)
        try:
            data = orjson.loads(path.read_bytes())
        except (OSError, ValueError):
            return
        if not isinstance(data, dict) or "v" in data:
            super()._clear_blocked(table, passed)
            return
        entry = data.get(table)
        if entry is None or (isinstance(entry, dict) and int(entry.get("seq") or 0) > passed):
            return
        del data[table]
        durable_write(path, orjson.dumps(data, option=orjson.OPT_INDENT_2))
