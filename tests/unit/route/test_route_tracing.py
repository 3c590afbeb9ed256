"""A route's span per applied batch (route/runner.py, docs/tracing.md): a CONSUMER span, a new
trace linked to the contexts its messages carry (capped by tracing.max_links), with the
route, the sink, the sequence range and what became of the batch."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, SpanKind

from tidelake.config import Config, TracingConfig
from tidelake.route.change import RowChange, SinkUnavailable
from tidelake.route.runner import RouteRunner
from tidelake.runtime import tracing


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    """Tracing on in this process as a route's, spans kept in memory; off afterwards."""
    spans = InMemorySpanExporter()
    tracing.setup(TracingConfig(enabled=True, max_links=3), "route", exporter=spans)
    try:
        yield spans
    finally:
        tracing.shutdown()


def _canal(database: str, table: str, row_id: int) -> bytes:
    return orjson.dumps(
        {
            "id": 0,
            "database": database,
            "table": table,
            "pkNames": ["id"],
            "isDdl": False,
            "type": "INSERT",
            "es": 1_700_000_000_000 + row_id,
            "ts": 1_700_000_000_100 + row_id,
            "sql": "",
            "sqlType": {"id": -5, "name": 12},
            "mysqlType": {"id": "bigint", "name": "varchar(64)"},
            "data": [{"id": str(row_id), "name": f"n{row_id}"}],
            "old": None,
            "_tidb": {"commitTs": 1000 + row_id},
        }
    )


@dataclass
class _Seq:
    stream: int


@dataclass
class _Meta:
    sequence: _Seq
    num_delivered: int = 1


@dataclass
class _Msg:
    """What the runner reads of a JetStream message."""

    subject: str
    data: bytes
    seq: int
    headers: dict[str, str] | None
    acked: bool = False

    @property
    def metadata(self) -> _Meta:
        return _Meta(_Seq(self.seq))

    async def ack(self) -> None:
        self.acked = True

    async def in_progress(self) -> None:
        pass


@dataclass
class _Js:
    """The dead-letter publishes."""

    published: list[str] = field(default_factory=list)

    async def publish(self, subject: str, payload: bytes, **kwargs: Any) -> None:
        self.published.append(subject)


@dataclass
class _Sink:
    kind: str = "redis"
    down: bool = False
    applied: list[RowChange] = field(default_factory=list)

    def apply(self, changes: Sequence[RowChange]) -> None:
        if self.down:
            raise SinkUnavailable("down")
        self.applied.extend(changes)

    def close(self) -> None:
        pass


def _runner(tmp_path: Path, sink: _Sink) -> RouteRunner:
    cfg = Config.model_validate(
        {
            "home": str(tmp_path),
            "routes": {"cache": {"tables": ["shop.orders"], "sink": {"kind": "redis"}}},
        }
    )
    return RouteRunner(cfg, "cache", sink=sink)


def _batch(tr: tracing.Tracing) -> tuple[list[_Msg], list[SpanContext]]:
    """Four rows of shop.orders, one of shop.items (filtered out), one that does not decode
    (dead-lettered): each published with its own context but the last, which has none."""
    payloads = [
        ("shop", "orders", _canal("shop", "orders", 1)),
        ("shop", "items", _canal("shop", "items", 2)),
        ("shop", "orders", _canal("shop", "orders", 3)),
        ("shop", "orders", b"not json"),
        ("shop", "orders", _canal("shop", "orders", 4)),
        ("shop", "orders", _canal("shop", "orders", 5)),
    ]
    msgs, contexts = [], []
    for i, (database, table, data) in enumerate(payloads):
        subject = f"cdc.{database}.{table}"
        headers: dict[str, str] | None = {"Nats-Msg-Id": f"m-{i}"}
        if i < len(payloads) - 1:
            span = tr.start_publish(subject, f"m-{i}", headers or {})
            span.end()
            contexts.append(span.get_span_context())
        else:
            headers = None
        msgs.append(_Msg(subject, data, 10 + i, headers))
    return msgs, contexts


def _route_spans(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    active = tracing.active()
    assert active is not None
    assert active.force_flush()
    return [s for s in exporter.get_finished_spans() if s.name.startswith("route ")]


def test_a_span_per_applied_batch_linked_to_its_messages(
    exporter: InMemorySpanExporter, tmp_path: Path
) -> None:
    active = tracing.active()
    assert active is not None
    msgs, contexts = _batch(active)
    sink, js = _Sink(), _Js()
    runner = _runner(tmp_path, sink)
    assert asyncio.run(runner.handle(js, msgs, asyncio.Event()))
    assert all(m.acked for m in msgs)
    assert 4 == len(sink.applied)
    assert 1 == len(js.published)

    (span,) = _route_spans(exporter)
    assert "route cache" == span.name
    assert SpanKind.CONSUMER == span.kind
    assert span.parent is None  # a new trace: the batch has many parents
    assert "tidelake-route" == span.resource.attributes["service.name"]
    # max_links 3: the first three messages are looked at, the three others counted.
    assert [(c.trace_id, c.span_id) for c in contexts[:3]] == [
        (link.context.trace_id, link.context.span_id) for link in span.links
    ]
    attrs = dict(span.attributes or {})
    expected = {
        "messaging.system": "nats",
        "messaging.operation.type": "process",
        "messaging.consumer.group.name": "route-cache",
        "messaging.batch.message_count": 6,
        "tidelake.route": "cache",
        "tidelake.sink": "redis",
        "tidelake.links": 3,
        "tidelake.links.unlinked": 3,
        "tidelake.seq_first": 10,
        "tidelake.seq_last": 15,
        "tidelake.changes": 4,
        "tidelake.filtered": 1,
        "tidelake.dead_lettered": 1,
        "tidelake.sink_retries": 0,
        "tidelake.tables": ("shop.orders",),
        "tidelake.stopped": False,
    }
    assert expected == attrs


def test_a_batch_stopped_before_the_sink_took_it_says_so(
    exporter: InMemorySpanExporter, tmp_path: Path
) -> None:
    """The sink is down and the route is stopped: nothing applied nor acked, the span ended
    with the retry and ``tidelake.stopped``."""
    active = tracing.active()
    assert active is not None
    msgs, _ = _batch(active)
    runner = _runner(tmp_path, _Sink(down=True))
    stop = asyncio.Event()
    stop.set()
    assert not asyncio.run(runner.handle(_Js(), msgs, stop))
    assert not any(m.acked for m in msgs)
    (span,) = _route_spans(exporter)
    attrs = dict(span.attributes or {})
    assert (True, 1, 0) == (
        attrs["tidelake.stopped"],
        attrs["tidelake.sink_retries"],
        attrs["tidelake.changes"],
    )


def test_an_empty_fetch_makes_no_span(exporter: InMemorySpanExporter, tmp_path: Path) -> None:
    runner = _runner(tmp_path, _Sink())
    assert asyncio.run(runner.handle(_Js(), [], asyncio.Event()))
    assert [] == _route_spans(exporter)
