"""lake/round_trace.py: the ingest round's span links its manifests' stage spans; each
table's commit is a child span with the Hudi instant and the rows; off, plain calls."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tidelake.config import TracingConfig
from tidelake.events import ChangeEvent
from tidelake.lake.apply import TableResult
from tidelake.lake.round_trace import RoundTrace
from tidelake.lake.source import Round
from tidelake.runtime import tracing
from tidelake.stage.manifest import Manifest


@dataclass
class _Result:
    interrupted: bool = False
    failed: dict[str, str] = field(default_factory=dict)


def _apply(
    table_id: str, events: Sequence[ChangeEvent], seq_last: int, stop: threading.Event | None
) -> TableResult:
    line = {"table": table_id, "instant": "20261128010203456", "seq": seq_last, "events": 2}
    return TableResult(table_id, commits=[{**line, "upserts": 1, "deletes": 1}])


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    spans = InMemorySpanExporter()
    tracing.setup(TracingConfig(enabled=True), "ingest", exporter=spans)
    try:
        yield spans
    finally:
        tracing.shutdown()


def test_off_is_a_plain_call() -> None:
    trace = RoundTrace(_apply)
    staged = Round([Manifest("b", 1, 2, 0, ())], {})
    with trace.round(staged, _Result()):
        result = trace.apply("db.t", [], 2, None)
    assert result is not None
    assert "db.t" == result.table


def test_round_links_stage_spans_and_commits_are_children(
    exporter: InMemorySpanExporter,
) -> None:
    tr = tracing.active()
    assert tr is not None
    stage = tr.start_stage([], [], stream="CDC", messages=0)
    kept: dict[str, str] = {}
    tr.inject(stage, kept)
    stage.end()
    staged = Round([Manifest("b1", 1, 2, 0, (), trace=kept), Manifest("b2", 3, 4, 0, ())], {})
    trace = RoundTrace(_apply)
    with trace.round(staged, _Result()), ThreadPoolExecutor(2) as pool:  # commit threads
        list(pool.map(lambda t: trace.apply(t, [], 4, None), ["db.a", "db.b"]))
    assert tr.force_flush()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    round_span = spans["ingest round"]
    assert [stage.get_span_context().span_id] == [link.context.span_id for link in round_span.links]
    assert (1, 4) == (
        (round_span.attributes or {})["tidelake.seq_first"],
        (round_span.attributes or {})["tidelake.seq_last"],
    )
    for table in ("db.a", "db.b"):
        commit = spans[f"commit {table}"]
        assert commit.parent is not None
        assert round_span.context.span_id == commit.parent.span_id
        attrs = commit.attributes or {}
        assert "20261128010203456" == attrs["hudi.instant"]
        assert 2 == attrs["tidelake.rows"]
        assert table == attrs["tidelake.table"]
