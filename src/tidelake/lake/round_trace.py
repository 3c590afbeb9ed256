"""The ingest's spans (docs/tracing.md): one per round, linked to the stage spans of its
manifests (``Manifest.trace``, at most ``tracing.max_links``), and one per table commit, a
child of its round made in the commit's own thread, with the table, the Hudi instant and the
rows. With tracing off (``tracing.active()`` is None) both are plain calls.

The round's span is the current context of the ingest's thread while the round runs: what
runs after the commits inside the round (the views, ``view/keeper.py``) makes its spans its
children without the ingest handing the span over (lake/ does not import view/)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from tidelake.events import ChangeEvent
from tidelake.lake.apply import TableResult
from tidelake.lake.source import Round
from tidelake.runtime import tracing

#: One table's share of a round: ``Ingestor._apply_table(table_id, events, seq_last, stop)``.
ApplyTable = Callable[[str, Sequence[ChangeEvent], int, threading.Event | None], TableResult | None]


class RoundTrace:
    """The spans of one ingest process around its rounds and its table commits."""

    def __init__(self, apply_table: ApplyTable) -> None:
        self.tracing = tracing.active()
        self._apply_table = apply_table
        #: The span of the round whose tables are committing (their threads read it).
        self._round: Any = None

    @contextlib.contextmanager
    def round(self, staged: Round, result: Any) -> Iterator[None]:
        """The round's span around its commits and what follows them in the round (the
        views), the current context meanwhile; ``result`` (the ``RoundResult``) says at the
        end whether it was interrupted and which tables failed."""
        if self.tracing is None:
            yield
            return
        manifests = staged.manifests
        span = self.tracing.start_round(
            (m.trace for m in manifests),
            manifests=len(manifests),
            seq_first=min(m.seq_first for m in manifests),
            seq_last=staged.seq_last,
            tables=len(staged.events),
        )
        self._round = span
        try:
            with self.tracing.current(span):
                yield
        finally:
            self._round = None
            span.set_attribute("tidelake.interrupted", bool(result.interrupted))
            span.set_attribute("tidelake.failed_tables", sorted(result.failed))
            span.end()

    def apply(
        self,
        table_id: str,
        events: Sequence[ChangeEvent],
        seq_last: int,
        stop: threading.Event | None,
    ) -> TableResult | None:
        """One table's share of the round, inside its commit span (in the commit's thread)."""
        parent = self._round
        if self.tracing is None or parent is None:
            return self._apply_table(table_id, events, seq_last, stop)
        span = self.tracing.start_child(
            f"commit {table_id}", parent, table=table_id, events=len(events)
        )
        try:
            table_result = self._apply_table(table_id, events, seq_last, stop)
            if table_result is not None:
                describe_commit(span, table_result)
            return table_result
        finally:
            span.end()


def describe_commit(span: Any, table_result: TableResult) -> None:
    """The commit's attributes on its span: Hudi instant(s), rows, or why nothing."""
    commits = table_result.commits
    span.set_attribute("tidelake.commits", len(commits))
    if commits:
        instants = [str(c["instant"]) for c in commits if c.get("instant")]
        if instants:
            span.set_attribute("hudi.instant", instants[-1])
            span.set_attribute("hudi.instants", instants)
        span.set_attribute("tidelake.rows", sum(int(c.get("events") or 0) for c in commits))
        span.set_attribute("tidelake.upserts", sum(int(c.get("upserts") or 0) for c in commits))
        span.set_attribute("tidelake.deletes", sum(int(c.get("deletes") or 0) for c in commits))
        span.set_attribute("tidelake.checkpoint_seq", int(commits[-1].get("seq") or 0))
    span.set_attribute("tidelake.duplicates", table_result.duplicates)
    span.set_attribute("tidelake.stale", table_result.stale)
    if table_result.refused:
        span.set_attribute("tidelake.refused", table_result.refused[:500])
    if table_result.failed:
        span.set_attribute("error.type", "table_failed")
        span.set_attribute("tidelake.failed", table_result.failed[:500])
