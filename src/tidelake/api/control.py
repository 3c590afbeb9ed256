"""Table requests by state directory: pause, resume and skip-ddl, as the operator asks them.

Each function is one call of the ledger (:class:`tidelake.lake.ledger.Ledger`), which owns
``control.json``; the HTTP handlers and ``tidelake table …`` call the ledger directly, and
the ingest applies the requests through :class:`tidelake.lake.control.TableControl` (which
documents what each action does). Transitional: kept while tests/integration/lake/test_ddl.py
and tests/unit/lake/test_skip_ddl_cli.py import it; once they call the ledger, it goes.
"""

from __future__ import annotations

from pathlib import Path

from tidelake.lake.ledger import Action, Ledger, TableRequest

__all__ = [
    "Action",
    "TableRequest",
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


def skipped_ddl_seq(state_dir: Path, table: str) -> int | None:
    """The stream sequence of the DDL an operator asked to skip for ``table``, if any."""
    return Ledger(state_dir).skipped_ddl_seq(table)
