"""The spans of the views' updates (docs/tracing.md): one ``view <name>`` span per view the
keeper runs after an ingest round, a child of that round's span (``lake/round_trace.py``
makes it the current context while the round's views run), with the outcome, what the update
read and wrote, and the base commit the view now includes: the same ``hudi.instant`` as the
``commit <table>`` span of the round that committed it.

Outside a round (the ingest idle: its first run catching up, a rebuild asked for meanwhile)
a view gets a span, the root of a trace of its own, only when it did or tried work (outcome
``step``, ``rebuild`` or ``failed``): an idle run of a view that is ``current``, ``waiting``
or ``paused`` makes none. The span is made once the update's outcome is known, starting when
the update started. With tracing off (``tracing.active()`` is None) the update is a plain
call."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tidelake.view.maintain import StepResult

if TYPE_CHECKING:
    from tidelake.runtime.tracing import Tracing

#: The outcomes that did (or tried) work: outside a round only these make a span.
WORK = frozenset({"step", "rebuild", "failed"})
#: Most characters of a reason kept on a span.
MAX_REASON = 500


def traced(tr: Tracing, name: str, kind: str, update: Callable[[], StepResult]) -> StepResult:
    """``update()`` of view ``name`` (``kind``: aggregate, lifecycle), and its span."""
    started = time.time_ns()
    try:
        result = update()
    except Exception as exc:  # not the view's own failure (those are results): the caller's
        span = tr.start_view(name, start_time=started, kind=kind, outcome="failed")
        span.set_attribute("error.type", type(exc).__name__)
        span.set_attribute("tidelake.view.reason", str(exc)[:MAX_REASON])
        span.end()
        raise
    if result.outcome in WORK or tr.in_span():
        span = tr.start_view(name, start_time=started, kind=kind)
        describe_view(span, result, kind)
        span.end()
    return result


def describe_view(span: Any, result: StepResult, kind: str) -> None:
    """The update's attributes on its span: outcome, records read, groups written and
    recomputed, the base commit the view includes, or why it failed. The checkpoint's base
    is a completion time for an aggregate view, a stream sequence for a lifecycle one."""
    span.set_attribute("tidelake.view.outcome", result.outcome)
    span.set_attribute("tidelake.view.records", result.records)
    span.set_attribute("tidelake.view.groups", result.groups)
    span.set_attribute("tidelake.view.recomputed", result.recomputed)
    if result.rows is not None:
        span.set_attribute("tidelake.view.rows", result.rows)
    if result.reason:
        span.set_attribute("tidelake.view.reason", result.reason[:MAX_REASON])
    if result.outcome == "failed":
        span.set_attribute("error.type", "view_failed")
    # A view reads one base table, or two (a join): one value each, a list for two.
    base = dict(result.checkpoint.base) if result.checkpoint is not None else {}
    tables = sorted(base.keys() | result.instants.keys())
    if not tables:
        return
    span.set_attribute("tidelake.view.base_table", _one(tables))
    instants = [result.instants[t] for t in tables if t in result.instants]
    if instants:
        span.set_attribute("hudi.instant", _one(instants))
    if base and kind == "lifecycle":
        span.set_attribute("tidelake.checkpoint_seq", _one([int(base[t]) for t in sorted(base)]))
    elif base:
        span.set_attribute("hudi.completion_time", _one([base[t] for t in sorted(base)]))


def _one(values: list[Any]) -> Any:
    return values[0] if len(values) == 1 else values
