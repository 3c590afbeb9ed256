"""Pausing and resuming a table: the ingest's side of the operator's requests.

An operator asks (``tidelake table pause|resume|skip-ddl``, ``POST /api/tables/{table}/pause|
resume``); the request lands in ``control.json`` through :meth:`Ledger.request
<tidelake.lake.ledger.Ledger.request>`, one entry per table, the last one winning. The ingest
calls :meth:`TableControl.apply` at the start of every round; it re-reads the file only when
it changed, and applies each entry once (by its ``at_ms``):

* ``pause``: the ingest pauses the table with the reason ``paused by operator: …``; its
  events are left for later and the saved cursor hint stays behind them, exactly like a
  table the ingest paused itself. The pause survives a restart of the ingest, since the
  entry stays in the file (a new process applies it again).
* ``resume``: the ingest resumes the table, whether an operator, the ingest itself or an
  earlier ingest process paused it; its failure count is reset and the cursor goes back to
  the table's checkpoint so the events it skipped while paused are read again (the other
  tables skip them by their own checkpoints, docs/architecture.md §3 rule 1).
* ``skip_ddl`` (with ``seq``, the stream sequence of the DDL the table is paused on, from
  ``ddl_blocked.json``): a resume that also tells the ingest to record that one DDL as
  applied without changing the table (``lake/evolve.py`` asks
  :meth:`Ledger.skipped_ddl_seq <tidelake.lake.ledger.Ledger.skipped_ddl_seq>`). The entry
  stays in the file, so a restart before the skip is committed still skips it, until the
  table's checkpoint has moved past the DDL: then the entry and the table's
  ``ddl_blocked.json`` entry are cleared (:meth:`TableControl.apply`, every round).

``paused.json`` says what the ingest *did*; ``control.json`` what was *asked*.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import structlog

from tidelake.lake.ledger import OPERATOR_PREFIX, Ledger, TableRequest

log = structlog.get_logger(__name__)


class Controlled(Protocol):
    """What :class:`TableControl` needs of the ingest (``lake.ingest.Ingestor``)."""

    def pause(self, table_id: str, reason: str) -> None:
        """Pause ``table_id`` with ``reason`` (recorded in ``paused.json``)."""

    def resume(self, table_id: str) -> bool:
        """Resume ``table_id``, whether this process or an earlier one paused it: reset its
        failures and move the cursor back to its checkpoint. False when it is not paused."""

    def checkpoint_seq(self, table_id: str) -> int | None:
        """The stream sequence of the table's checkpoint (None: never committed)."""


class TableControl:
    """Applies new requests of ``control.json`` to the ingest, at the start of each round."""

    def __init__(self, ledger: Ledger | Path) -> None:
        self.ledger = ledger if isinstance(ledger, Ledger) else Ledger(ledger)
        self._seen_version: int | None = None
        self._applied: dict[str, int] = {}
        #: skip_ddl requests whose DDL the table's checkpoint has not passed yet.
        self._skips: dict[str, TableRequest] = {}

    def _changed(self) -> bool:
        version = self.ledger.control_version()
        if version is None or version == self._seen_version:
            return False
        self._seen_version = version
        return True

    def apply(self, ingest: Controlled) -> list[TableRequest]:
        """Apply the requests not applied yet; returns them (usually none, cheaply). Then
        clear the skips whose DDL the table's checkpoint has passed."""
        done = self._apply_new(ingest) if self._changed() else []
        self._settle(ingest)
        return done

    def _apply_new(self, ingest: Controlled) -> list[TableRequest]:
        done: list[TableRequest] = []
        for table, req in self.ledger.requests().items():
            if req.action == "skip_ddl":
                self._skips[table] = req
            else:
                self._skips.pop(table, None)
            if self._applied.get(table, 0) >= req.at_ms:
                continue
            self._applied[table] = req.at_ms
            if req.action == "pause":
                reason = f"{OPERATOR_PREFIX}: {req.reason}" if req.reason else OPERATOR_PREFIX
                ingest.pause(table, reason)
            elif not ingest.resume(table):  # resume and skip_ddl
                continue
            done.append(req)
            log.info("table control applied", table=table, action=req.action)
        return done

    def _settle(self, ingest: Controlled) -> None:
        """A skip whose DDL is behind the table's checkpoint has done its work: forget it
        (``control.json``) and the DDL it was for (``ddl_blocked.json``)."""
        for table, req in list(self._skips.items()):
            passed = ingest.checkpoint_seq(table)
            if req.seq is None or passed is None or passed < req.seq:
                continue
            del self._skips[table]
            self.ledger.forget_request(req)
            # A later DDL the table paused on since then keeps its entry (and its pause).
            self._clear_blocked(table, passed)
            log.info("ddl skip settled", table=table, seq=req.seq, checkpoint_seq=passed)

    def _clear_blocked(self, table: str, passed: int) -> None:
        self.ledger.clear_blocked(table, seq_at_most=passed)
