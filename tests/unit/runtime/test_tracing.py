"""runtime/tracing.py: W3C context in and out of message headers, links with their cap, the
``tracing`` config section, and nothing of the SDK imported while tracing is off."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanKind, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from tidelake.config import TracingConfig, load_config
from tidelake.errors import ConfigError
from tidelake.runtime import tracing
from tidelake.stage.manifest import Manifest, TableFile

SRC = Path(__file__).resolve().parents[3] / "src"


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    """Tracing on in this process, its spans kept in memory; off again afterwards."""
    spans = InMemorySpanExporter()
    tracing.setup(TracingConfig(enabled=True, max_links=3), "stager", exporter=spans)
    try:
        yield spans
    finally:
        tracing.shutdown()


def _tracing() -> tracing.Tracing:
    active = tracing.active()
    assert active is not None
    return active


def _finished(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    """The ended spans, once the batch processor has handed them over."""
    assert _tracing().force_flush()
    return list(exporter.get_finished_spans())


def test_disabled_sets_nothing_up() -> None:
    """Off (the default): no tracing object, the callers' one test is ``is None``."""
    assert tracing.setup(TracingConfig(), "capture") is None
    assert tracing.active() is None


def test_disabled_imports_no_opentelemetry() -> None:
    """The publisher, the stager, the ingest, the views and the routes import no
    OpenTelemetry module while off."""
    code = (
        "import sys\n"
        "from tidelake.config import TracingConfig\n"
        "import tidelake.capture.publisher, tidelake.stage.consumer, tidelake.runtime.tracing\n"
        "import tidelake.route.runner, tidelake.lake.round_trace, tidelake.lake.ingest\n"
        "import tidelake.view.keeper, tidelake.view.trace\n"
        "from tidelake.runtime import tracing\n"
        "assert tracing.setup(TracingConfig(), 'stager') is None\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry.sdk')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert "[]" == out.strip()


def test_publish_span_injects_its_context(exporter: InMemorySpanExporter) -> None:
    """traceparent names the publish span; the headers the caller gave are kept."""
    headers = {"Nats-Msg-Id": "m-1", "Tidelake-Key": "k"}
    span = _tracing().start_publish("cdc.db.t", "m-1", headers)
    span.end()
    ctx = span.get_span_context()
    assert (
        f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}" == headers["traceparent"]
    )
    assert "m-1" == headers["Nats-Msg-Id"]
    assert "k" == headers["Tidelake-Key"]
    (finished,) = _finished(exporter)
    assert SpanKind.PRODUCER == finished.kind
    assert "cdc.db.t" == (finished.attributes or {})["messaging.destination.name"]
    assert "tidelake-stager" == finished.resource.attributes["service.name"]


def test_extract_reads_what_the_w3c_propagator_writes() -> None:
    """The official propagator's headers, tracestate too, give back the same context."""
    carrier = {
        "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "tracestate": "vendor=abc,other=1",
    }
    ctx = tracing.extract(carrier)
    assert ctx is not None
    assert 0x4BF92F3577B34DA6A3CE929D0E0E4736 == ctx.trace_id
    assert 0x00F067AA0BA902B7 == ctx.span_id
    assert ctx.is_remote
    assert "abc" == ctx.trace_state.get("vendor")
    again: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(
        again, context=set_span_in_context(NonRecordingSpan(ctx))
    )
    assert carrier == again


@pytest.mark.parametrize(
    "carrier",
    [
        None,
        {},
        {"Nats-Msg-Id": "x"},
        {"traceparent": "garbage"},
        {"traceparent": "00-00000000000000000000000000000000-00f067aa0ba902b7-01"},
    ],
)
def test_extract_without_a_valid_context_is_none(carrier: dict[str, str] | None) -> None:
    assert tracing.extract(carrier) is None


def test_context_headers_keep_only_the_w3c_ones() -> None:
    headers = {"traceparent": "a", "tracestate": "b", "Nats-Msg-Id": "c"}
    assert {"traceparent": "a", "tracestate": "b"} == tracing.context_headers(headers)
    assert {} == tracing.context_headers(None)


def test_stage_span_links_each_message_up_to_the_cap(exporter: InMemorySpanExporter) -> None:
    """A batch span looks at the first max_links (3 here) messages only, links their
    distinct contexts and counts the messages past the cap; a message without a context
    adds no link."""
    tr = _tracing()
    carriers: list[dict[str, str] | None] = []
    publishes = []
    for i in range(5):
        headers: dict[str, str] = {}
        span = tr.start_publish("cdc.db.t", f"m-{i}", headers)
        span.end()
        publishes.append(span.get_span_context())
        carriers.append(headers)
        if i == 0:
            carriers.append(dict(headers))  # a duplicate: one link
            carriers.append(None)  # no headers at all
    stage = tr.start_stage(carriers, ["cdc.db.t"], stream="CDC", messages=len(carriers))
    stage.end()
    bigger = tr.start_stage(carriers[3:], ["cdc.db.t"], stream="CDC2", messages=4)
    bigger.end()
    links = [
        link.context.span_id
        for link in {s.name: s for s in _finished(exporter)}["stage CDC2"].links
    ]
    assert [c.span_id for c in publishes[1:4]] == links
    finished = {s.name: s for s in _finished(exporter)}["stage CDC"]
    linked = [(link.context.trace_id, link.context.span_id) for link in finished.links]
    # Looked at: m-0, its duplicate, the message without headers; the 4 others are counted.
    assert [(c.trace_id, c.span_id) for c in publishes[:1]] == linked
    attrs = finished.attributes or {}
    assert 1 == attrs["tidelake.links"]
    assert 4 == attrs["tidelake.links.unlinked"]
    assert 7 == attrs["messaging.batch.message_count"]
    assert SpanKind.CONSUMER == finished.kind
    # A new trace: the batch has many parents, none of them its own.
    assert finished.parent is None
    assert finished.context.trace_id not in {c.trace_id for c in publishes}


def test_round_span_links_the_manifests_stage_spans(exporter: InMemorySpanExporter) -> None:
    """The ingest's round links the stage spans kept in manifests; table spans are its
    children, from another thread too."""
    tr = _tracing()
    stage = tr.start_stage([], [], stream="CDC", messages=0)
    kept: dict[str, str] = {}
    tr.inject(stage, kept)
    stage.end()
    manifest = Manifest("b1", 1, 2, 0, (TableFile("db", "t", "p", 2),), trace=kept)
    back = Manifest.from_json(manifest.to_json())
    assert kept == back.trace
    round_span = tr.start_round([back.trace, {}], manifests=1, seq_last=2)
    child = tr.start_child("commit db.t", round_span, table="db.t")
    child.end()
    round_span.end()
    spans = {s.name: s for s in _finished(exporter)}
    (link,) = spans["ingest round"].links
    assert stage.get_span_context().span_id == link.context.span_id
    commit = spans["commit db.t"]
    assert commit.parent is not None
    assert round_span.get_span_context().span_id == commit.parent.span_id
    assert "db.t" == (commit.attributes or {})["tidelake.table"]


def test_manifest_without_trace_is_written_as_before() -> None:
    manifest = Manifest("b1", 1, 2, 0, ())
    assert b'"trace"' not in manifest.to_json()
    assert {} == Manifest.from_json(manifest.to_json()).trace


# -- the config section -------------------------------------------------------------------


def test_tracing_config_defaults_off() -> None:
    cfg = load_config(None, environ={}).tracing
    assert not cfg.enabled
    assert "http://127.0.0.1:4318" == cfg.otlp_endpoint
    assert 1.0 == cfg.sample_ratio
    assert {} == cfg.resolved_headers()


def test_tracing_config_from_the_environment() -> None:
    cfg = load_config(
        None,
        environ={
            "TIDELAKE_TRACING__ENABLED": "true",
            "TIDELAKE_TRACING__OTLP_ENDPOINT": "https://collector:4318/",
            "TIDELAKE_TRACING__SAMPLE_RATIO": "0.25",
            "TIDELAKE_TRACING__OTLP_HEADERS": "authorization=Bearer a=b, x-tenant = t1",
        },
    ).tracing
    assert cfg.enabled
    assert "https://collector:4318" == cfg.otlp_endpoint
    assert 0.25 == cfg.sample_ratio
    assert {"authorization": "Bearer a=b", "x-tenant": "t1"} == cfg.resolved_headers()


def test_tracing_headers_are_a_secret_not_read_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("tracing:\n  otlp_headers: authorization=Bearer x\n")
    with pytest.raises(ConfigError, match="TIDELAKE_TRACING__OTLP_HEADERS"):
        load_config(path, environ={})
    secret = tmp_path / "headers"
    secret.write_text("authorization=Bearer y\n")
    path.write_text(f"tracing:\n  otlp_headers_file: {secret}\n")
    assert {"authorization": "Bearer y"} == load_config(path, environ={}).tracing.resolved_headers()
    assert "Bearer" not in repr(load_config(path, environ={}).masked())


@pytest.mark.parametrize(
    ("field", "value"),
    [("otlp_endpoint", "127.0.0.1:4318"), ("sample_ratio", 1.5), ("max_links", -1)],
)
def test_tracing_config_refuses(field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=f"tracing.{field}"):
        load_config(None, environ={f"TIDELAKE_TRACING__{field.upper()}": str(value)})


def test_malformed_headers_are_refused() -> None:
    cfg = TracingConfig(otlp_headers="no-equals-sign")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="key=value"):
        cfg.resolved_headers()


def test_unknown_component_is_refused() -> None:
    with pytest.raises(ValueError, match="component"):
        tracing.setup(TracingConfig(enabled=True), "router")
