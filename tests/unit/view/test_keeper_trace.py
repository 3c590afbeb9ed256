"""view/keeper.py + view/trace.py: each view the keeper runs after a round is a ``view <name>``
span, a child of that round's ``ingest round`` span (lake/round_trace.py makes it the current
context), with the outcome, what it read and wrote and the base commit it includes; outside a
round only work makes a span; off, plain calls. No Spark: the updates are fakes."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tidelake.config import Config, TracingConfig, load_config
from tidelake.events import ChangeEvent
from tidelake.lake.after_round import RoundEvents
from tidelake.lake.apply import TableResult
from tidelake.lake.round_trace import RoundTrace
from tidelake.lake.source import Round
from tidelake.runtime import tracing
from tidelake.stage.manifest import Manifest
from tidelake.view import keeper as keeper_module
from tidelake.view.keeper import ViewKeeper, request_path, request_rebuild
from tidelake.view.maintain import StepResult
from tidelake.view.table import ViewCheckpoint

#: The base commit of the round: requested time (the commit span's ``hudi.instant``) and
#: completion time (what an aggregate view's checkpoint records).
REQUESTED = "20261128010203456"
COMPLETED = "20261128010204001"


@dataclass
class _Result:
    interrupted: bool = False
    failed: dict[str, str] = field(default_factory=dict)


def _config(tmp_path: Path) -> Config:
    (tmp_path / "tidelake.yaml").write_text(
        "views:\n"
        "  totals:\n"
        "    sql: SELECT customer, COUNT(*) AS n FROM shop.orders GROUP BY customer\n"
        "  states:\n"
        "    kind: lifecycle\n"
        "    table: shop.orders\n"
        "    state_column: status\n"
    )
    return load_config(tmp_path / "tidelake.yaml", environ={"TIDELAKE_HOME": str(tmp_path)})


def _stepped(name: str) -> StepResult:
    if name == "totals":
        checkpoint = ViewCheckpoint("f", {"shop.orders": COMPLETED}, 1, "step")
        return StepResult(
            name,
            "step",
            records=7,
            groups=3,
            recomputed=1,
            checkpoint=checkpoint,
            instants={"shop.orders": REQUESTED},
        )
    checkpoint = ViewCheckpoint("f", {"shop.orders": "42"}, 1, "step")
    return StepResult(
        name,
        "step",
        records=5,
        groups=4,
        checkpoint=checkpoint,
        instants={"shop.orders": REQUESTED},
    )


def _keeper(
    config: Config,
    monkeypatch: pytest.MonkeyPatch,
    step: Callable[[str], StepResult] = _stepped,
) -> ViewKeeper:
    keeper = ViewKeeper(config, cast(Any, None))
    keeper._caught_up = True

    def fake_step(name: str, staged: RoundEvents | None = None) -> StepResult:
        return step(name)

    def fake_rebuild(name: str) -> StepResult:
        checkpoint = ViewCheckpoint("f", {"shop.orders": COMPLETED}, 1, "rebuild")
        return StepResult(
            name,
            "rebuild",
            reason="asked for (tidelake view rebuild)",
            groups=9,
            rows=9,
            checkpoint=checkpoint,
            instants={"shop.orders": REQUESTED},
        )

    monkeypatch.setattr(keeper, "step", fake_step)
    monkeypatch.setattr(keeper, "rebuild", fake_rebuild)
    return keeper


def _commit(table_id: str, events: Sequence[ChangeEvent], seq_last: int, stop: Any) -> TableResult:
    line = {"table": table_id, "instant": REQUESTED, "seq": seq_last, "events": 1}
    return TableResult(table_id, commits=[line])


ROUND = Round([Manifest("b1", 1, 42, 0, ())], {"shop.orders": []})
STAGED = RoundEvents(ROUND.events, ROUND.seq_last)  # what the ingest hands the keeper


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    spans = InMemorySpanExporter()
    tracing.setup(TracingConfig(enabled=True), "ingest", exporter=spans)
    try:
        yield spans
    finally:
        tracing.shutdown()


def _spans(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    tr = tracing.active()
    assert tr is not None
    assert tr.force_flush()
    return {s.name: s for s in exporter.get_finished_spans()}


def test_each_view_is_a_child_of_its_round_span(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exporter: InMemorySpanExporter
) -> None:
    """Both views' spans are children of the round span, inside its time, with the outcome,
    the counts and the base commit: the same ``hudi.instant`` as the round's commit span."""
    keeper = _keeper(_config(tmp_path), monkeypatch)
    trace = RoundTrace(_commit)
    with trace.round(ROUND, _Result()):
        trace.apply("shop.orders", [], 42, None)
        results = keeper(STAGED)
    assert ["step", "step"] == [r.outcome for r in results]

    spans = _spans(exporter)
    round_span = spans["ingest round"]
    commit = spans["commit shop.orders"]
    for name in ("totals", "states"):
        view = spans[f"view {name}"]
        assert view.parent is not None
        assert round_span.context.span_id == view.parent.span_id
        assert round_span.context.trace_id == view.context.trace_id
        assert round_span.start_time is not None
        assert view.start_time is not None
        assert round_span.end_time is not None
        assert view.end_time is not None
        assert round_span.start_time <= view.start_time <= view.end_time <= round_span.end_time
        attrs = view.attributes or {}
        assert name == attrs["tidelake.view"]
        assert "step" == attrs["tidelake.view.outcome"]
        assert "shop.orders" == attrs["tidelake.view.base_table"]
        assert (commit.attributes or {})["hudi.instant"] == attrs["hudi.instant"]
        assert "error.type" not in attrs

    totals = spans["view totals"].attributes or {}
    assert "aggregate" == totals["tidelake.view.kind"]
    assert (7, 3, 1) == (
        totals["tidelake.view.records"],
        totals["tidelake.view.groups"],
        totals["tidelake.view.recomputed"],
    )
    assert COMPLETED == totals["hudi.completion_time"]
    states = spans["view states"].attributes or {}
    assert "lifecycle" == states["tidelake.view.kind"]
    assert (5, 4) == (states["tidelake.view.records"], states["tidelake.view.groups"])
    assert 42 == states["tidelake.checkpoint_seq"]
    assert "hudi.completion_time" not in states
    assert not (round_span.attributes or {})["tidelake.interrupted"]


def test_a_view_with_nothing_new_still_has_its_span_in_a_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exporter: InMemorySpanExporter
) -> None:
    """In a round every view the keeper runs shows, ``current`` ones too (with the base
    commit they include), and a failed one says why."""

    def step(name: str) -> StepResult:
        if name == "states":
            return StepResult(name, "failed", reason="boom: " + "x" * 900)
        checkpoint = ViewCheckpoint("f", {"shop.orders": COMPLETED}, 1, "step")
        return StepResult(name, "current", checkpoint=checkpoint)

    keeper = _keeper(_config(tmp_path), monkeypatch, step)
    with RoundTrace(_commit).round(ROUND, _Result()):
        keeper(STAGED)

    spans = _spans(exporter)
    current = spans["view totals"].attributes or {}
    assert "current" == current["tidelake.view.outcome"]
    assert COMPLETED == current["hudi.completion_time"]
    assert "hudi.instant" not in current  # not known: not made up
    failed = spans["view states"].attributes or {}
    assert "failed" == failed["tidelake.view.outcome"]
    assert "view_failed" == failed["error.type"]
    assert str(failed["tidelake.view.reason"]).startswith("boom: ")
    assert 500 == len(str(failed["tidelake.view.reason"]))
    assert "tidelake.view.base_table" not in failed


def test_outside_a_round_only_work_makes_a_span(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exporter: InMemorySpanExporter
) -> None:
    """The idle ingest's run (a rebuild asked for): the rebuild is the root of its own trace;
    the view with nothing new makes no span."""
    config = _config(tmp_path)

    def step(name: str) -> StepResult:
        return StepResult(name, "current")

    keeper = _keeper(config, monkeypatch, step)
    request_rebuild(config, "totals")
    results = keeper(None)
    assert ["rebuild", "current"] == [r.outcome for r in results]
    assert not request_path(config, "totals").exists()

    spans = _spans(exporter)
    assert ["view totals"] == list(spans)
    rebuild = spans["view totals"]
    assert rebuild.parent is None
    attrs = rebuild.attributes or {}
    assert "rebuild" == attrs["tidelake.view.outcome"]
    assert 9 == attrs["tidelake.view.rows"]
    assert "asked for (tidelake view rebuild)" == attrs["tidelake.view.reason"]
    assert REQUESTED == attrs["hudi.instant"]


def test_an_update_that_raises_ends_its_span_as_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exporter: InMemorySpanExporter
) -> None:
    def step(name: str) -> StepResult:
        raise OSError("views.json: no space left on device")

    keeper = _keeper(_config(tmp_path), monkeypatch, step)
    with pytest.raises(OSError, match="no space left"), RoundTrace(_commit).round(ROUND, _Result()):
        keeper(STAGED)

    spans = _spans(exporter)
    view = spans["view totals"]
    assert view.parent is not None
    assert spans["ingest round"].context.span_id == view.parent.span_id
    attrs = view.attributes or {}
    assert ("failed", "OSError") == (attrs["tidelake.view.outcome"], attrs["error.type"])
    assert "view states" not in spans  # the keeper's run stopped there
    events = [e.name for e in spans["ingest round"].events]
    assert ["exception"] == events  # the round's span records what left it


def test_off_the_updates_are_plain_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tracing off: no span is made, the span helper is never reached."""
    assert tracing.active() is None

    def never(*args: object) -> StepResult:
        raise AssertionError("traced with tracing off")

    monkeypatch.setattr(keeper_module, "traced", never)
    keeper = _keeper(_config(tmp_path), monkeypatch)
    with RoundTrace(_commit).round(ROUND, _Result()):
        results = keeper(STAGED)
    assert ["step", "step"] == [r.outcome for r in results]
