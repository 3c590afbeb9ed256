"""lake/round_trace.py: the ingest round's span links its manifests' stage spans; each
table's commit is a child span with the Hudi instant and the rows; what runs after the
commits (the views) runs inside the round's span, its current context; an interrupted round
runs no views; off, plain calls."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from support.rounds import insert_event
from tidelake.config import TracingConfig, load_config
from tidelake.events import ChangeEvent
from tidelake.lake.after_round import RoundEvents
from tidelake.lake.apply import TableResult
from tidelake.lake.ingest import Ingestor
from tidelake.lake.round_trace import RoundTrace
from tidelake.lake.source import Round
from tidelake.runtime import tracing
from tidelake.runtime.storage import LocalStorage
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


class _Source:
    """One round of shop.orders, offered while the cursor is behind it."""

    def __init__(self) -> None:
        self.round = Round([Manifest("b1", 1, 1, 0, ())], {"shop.orders": [insert_event(1)]})

    def next_round(self, cursor: int) -> Round | None:
        return self.round if cursor < 1 else None


class _Tables:
    def apply(self, table_id: str, events: Sequence[ChangeEvent], seq_last: int) -> TableResult:
        result = _apply(table_id, events, seq_last, None)
        result.commits[0]["committed_at_ms"] = 1
        return result


class _Views:
    """An after-round that makes one span, as the views do (``view/keeper.py``)."""

    def __init__(self) -> None:
        self.runs: list[tuple[RoundEvents, bool]] = []

    def wants(self, events: RoundEvents) -> bool:
        return True

    def __call__(self, events: RoundEvents) -> None:
        tr = tracing.active()
        assert tr is not None
        self.runs.append((events, tr.in_span()))
        tr.start_view("v", kind="aggregate").end()


def _ingestor(tmp_path: Path) -> tuple[Ingestor, _Views]:
    config = load_config(None, environ={"TIDELAKE_HOME": str(tmp_path)})
    ingestor = Ingestor(config, cast(Any, None), LocalStorage(config.stage_root))
    ingestor.source = cast(Any, _Source())
    ingestor.tables = cast(Any, _Tables())
    views = _Views()
    ingestor.after_round = views
    return ingestor, views


def test_the_views_run_inside_the_round_span(
    tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    """The views run after the commits with the round's span current: their span is its
    child, and the round span ends after them (its time covers the whole round)."""
    ingestor, views = _ingestor(tmp_path)
    result = ingestor.step()
    assert 1 == result.manifests
    assert [True] == [inside for _, inside in views.runs]
    tr = tracing.active()
    assert tr is not None
    assert tr.force_flush()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    round_span, commit, view = spans["ingest round"], spans["commit shop.orders"], spans["view v"]
    for child in (commit, view):
        assert child.parent is not None
        assert round_span.context.span_id == child.parent.span_id
    assert commit.end_time is not None
    assert view.start_time is not None
    assert view.end_time is not None
    assert round_span.end_time is not None
    assert commit.end_time <= view.start_time <= view.end_time <= round_span.end_time
    assert not (round_span.attributes or {})["tidelake.interrupted"]
    assert not tr.in_span()  # the round's context is gone with it

    # Idle (nothing staged): the views run with no round span current.
    ingestor.step()
    assert [True, False] == [inside for _, inside in views.runs]
    assert views.runs[-1][0] is None


def test_an_interrupted_round_runs_no_views(tmp_path: Path, exporter: InMemorySpanExporter) -> None:
    """A stop before the commits: the round is interrupted, its span says so, no view runs."""
    ingestor, views = _ingestor(tmp_path)
    stop = threading.Event()
    stop.set()
    result = ingestor.step(stop)
    assert result.interrupted
    assert [] == views.runs
    tr = tracing.active()
    assert tr is not None
    assert tr.force_flush()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert "view v" not in spans
    assert (spans["ingest round"].attributes or {})["tidelake.interrupted"]
