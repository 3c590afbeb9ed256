"""OpenTelemetry traces from publish to staging to the Hudi commit (docs/tracing.md).

One tracer provider per process, set up by :func:`setup` (or :func:`process_tracing`) from
``tracing`` in the config, exporting by OTLP/HTTP (protobuf) as the service
``<tracing.service_name>-<component>`` (``capture``, ``stager``, ``ingest``, ``route``). The trace
context crosses the bus as W3C Trace Context headers (``traceparent``, ``tracestate``) on
each message, and crosses staging storage in the manifest (``Manifest.trace``):

* publish: one PRODUCER span per message (:meth:`Tracing.start_publish`), ended at its
  PubAck; its context is injected into the message's headers, never into the payload or
  ``Nats-Msg-Id``;
* stage: one CONSUMER span per staged batch (:meth:`Tracing.start_stage`), a new trace with
  a span LINK to each message's context (a batch has many parents), at most ``max_links``;
  its own context goes into the batch's manifest;
* ingest: one span per round linked to the stage spans of the manifests it commits
  (:meth:`Tracing.start_round`), one child span per table commit, and one child span per
  view the round updates (:meth:`Tracing.start_view`: the round's span is the current
  context while its views run, :meth:`Tracing.current`);
* route: one CONSUMER span per batch a route applies to its sink
  (:meth:`Tracing.start_route`), a new trace linked to its messages' contexts as a stage
  span is.

Disabled (the default), :func:`active` is None, callers test that one value, and nothing of
the OpenTelemetry SDK (or API) is imported: the hot paths pay one ``is None`` per message.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any

import structlog

from tidelake.config import TracingConfig

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Link, Span, SpanContext

log = structlog.get_logger(__name__)

#: The W3C Trace Context headers carried on each message and in each manifest.
TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
#: The processes that trace; each is the service ``<service_name>-<component>``.
COMPONENTS = ("capture", "stager", "ingest", "route")
#: Most distinct subjects named on a stage span (``tidelake.subjects``).
MAX_SUBJECTS = 16

_active: Tracing | None = None


def active() -> Tracing | None:
    """This process's tracing, or None when tracing is off (the common case)."""
    return _active


def setup(
    cfg: TracingConfig, component: str, *, exporter: SpanExporter | None = None
) -> Tracing | None:
    """Set up this process's tracer provider when ``cfg.enabled``; None when disabled (and
    nothing imported). A second call keeps the first set-up. ``exporter`` replaces the OTLP
    exporter (tests)."""
    global _active
    if not cfg.enabled:
        return None
    if component not in COMPONENTS:
        raise ValueError(f"unknown tracing component {component!r}")
    if _active is None:
        from tidelake.runtime.extras import require

        require("tracing", "tracing.enabled")
        _active = Tracing(cfg, component, exporter=exporter)
        log.info(
            "tracing on",
            service=_active.service_name,
            endpoint=cfg.otlp_endpoint,
            sample_ratio=cfg.sample_ratio,
        )
    return _active


def shutdown() -> None:
    """Export what is left and stop this process's tracing (no-op when off)."""
    global _active
    tracing, _active = _active, None
    if tracing is not None:
        tracing.shutdown()


@contextlib.contextmanager
def process_tracing(cfg: TracingConfig, component: str) -> Iterator[Tracing | None]:
    """:func:`setup` for the life of a process's main function, then :func:`shutdown`."""
    tracing = setup(cfg, component)
    try:
        yield tracing
    finally:
        if tracing is not None:
            shutdown()


class Tracing:
    """A tracer provider with its OTLP exporter, and the spans tidelake makes."""

    def __init__(
        self, cfg: TracingConfig, component: str, *, exporter: SpanExporter | None = None
    ) -> None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        from tidelake import __version__

        if exporter is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter(
                endpoint=f"{cfg.otlp_endpoint}/v1/traces",
                headers=cfg.resolved_headers() or None,
                timeout=cfg.timeout_s,
            )
        self.component = component
        self.service_name = f"{cfg.service_name}-{component}"
        self.max_links = cfg.max_links
        resource = Resource.create(
            {"service.name": self.service_name, "service.version": __version__}
        )
        self.provider: TracerProvider = TracerProvider(
            resource=resource, sampler=ParentBased(TraceIdRatioBased(cfg.sample_ratio))
        )
        self.provider.add_span_processor(BatchSpanProcessor(exporter))
        self.tracer = self.provider.get_tracer("tidelake", __version__)
        self._propagator = TraceContextTextMapPropagator()

    def shutdown(self) -> None:
        self.provider.shutdown()  # flushes the batch processor first

    def force_flush(self, timeout_s: float = 10.0) -> bool:
        return bool(self.provider.force_flush(int(timeout_s * 1000)))

    # -- context on the wire ----------------------------------------------------------------

    def inject(self, span: Span, carrier: MutableMapping[str, str]) -> None:
        """Write ``span``'s context into ``carrier`` as ``traceparent`` (+ ``tracestate``)."""
        inject(span, carrier, self._propagator)

    def extract(self, carrier: Mapping[str, str] | None) -> SpanContext | None:
        """The remote span context ``carrier``'s headers hold; None without a valid one."""
        return extract(carrier, self._propagator)

    def links(self, carriers: Iterable[Mapping[str, str] | None]) -> tuple[list[Link], int]:
        """Links to the distinct contexts among the first :attr:`max_links` of ``carriers``,
        and how many carriers past the cap were not looked at (docs/tracing.md): at most
        ``max_links`` headers are parsed, whatever the batch holds."""
        from opentelemetry.trace import Link

        out: list[Link] = []
        seen: set[tuple[int, int]] = set()
        looked = left = 0
        for carrier in carriers:
            if looked >= self.max_links:
                left += 1
                continue
            looked += 1
            ctx = self.extract(carrier)
            if ctx is None or (ctx.trace_id, ctx.span_id) in seen:
                continue
            seen.add((ctx.trace_id, ctx.span_id))
            out.append(Link(ctx))
        return out, left

    # -- the spans --------------------------------------------------------------------------

    def start_publish(self, subject: str, msg_id: str, headers: dict[str, str]) -> Span:
        """A PRODUCER span for one message (child of the current context), its context
        injected into ``headers``; the caller ends it at the PubAck."""
        from opentelemetry.trace import SpanKind

        span = self.tracer.start_span(
            f"publish {subject}",
            kind=SpanKind.PRODUCER,
            attributes={
                "messaging.system": "nats",
                "messaging.operation.type": "send",
                "messaging.destination.name": subject,
                "messaging.message.id": msg_id,
            },
        )
        self.inject(span, headers)
        return span

    def start_stage(
        self,
        carriers: Iterable[Mapping[str, str] | None],
        subjects: Iterable[str],
        *,
        stream: str,
        messages: int,
    ) -> Span:
        """A CONSUMER span for one staged batch, the root of its own trace, linked to the
        contexts its messages carry (at most :attr:`max_links`)."""
        from opentelemetry.trace import SpanKind

        links, unlinked = self.links(carriers)
        names = sorted(set(subjects))
        attributes: dict[str, Any] = {
            "messaging.system": "nats",
            "messaging.operation.type": "process",
            "messaging.destination.name": names[0] if len(names) == 1 else stream,
            "messaging.batch.message_count": messages,
            "tidelake.stream": stream,
            "tidelake.subjects": names[:MAX_SUBJECTS],
            "tidelake.links": len(links),
            "tidelake.links.unlinked": unlinked,
        }
        return self.tracer.start_span(
            f"stage {stream}", kind=SpanKind.CONSUMER, links=links, attributes=attributes
        )

    def start_route(
        self,
        carriers: Iterable[Mapping[str, str] | None],
        *,
        route: str,
        sink: str,
        consumer: str,
        messages: int,
    ) -> Span:
        """A CONSUMER span for one batch a route applies to its sink, the root of its own
        trace, linked to the contexts its messages carry (at most :attr:`max_links`)."""
        from opentelemetry.trace import SpanKind

        links, unlinked = self.links(carriers)
        attributes: dict[str, Any] = {
            "messaging.system": "nats",
            "messaging.operation.type": "process",
            "messaging.consumer.group.name": consumer,
            "messaging.batch.message_count": messages,
            "tidelake.route": route,
            "tidelake.sink": sink,
            "tidelake.links": len(links),
            "tidelake.links.unlinked": unlinked,
        }
        return self.tracer.start_span(
            f"route {route}", kind=SpanKind.CONSUMER, links=links, attributes=attributes
        )

    def start_round(self, carriers: Iterable[Mapping[str, str] | None], **attrs: Any) -> Span:
        """One ingest round's span, linked to the stage spans of its manifests."""
        links, unlinked = self.links(carriers)
        attributes = {f"tidelake.{k}": v for k, v in attrs.items()}
        attributes["tidelake.links"] = len(links)
        attributes["tidelake.links.unlinked"] = unlinked
        return self.tracer.start_span("ingest round", links=links, attributes=attributes)

    def start_view(self, name: str, *, start_time: int | None = None, **attrs: Any) -> Span:
        """The span of one view's update (``view <name>``): a child of the current context,
        the round's span while the ingest's views run after its round (:meth:`current`), or
        the root of its own trace outside a round. ``start_time`` (ns since the epoch): when
        the update began, for a span made once its outcome is known."""
        return self.tracer.start_span(
            f"view {name}",
            start_time=start_time,
            attributes={
                "tidelake.view": name,
                **{f"tidelake.view.{k}": v for k, v in attrs.items()},
            },
        )

    def current(self, span: Span) -> contextlib.AbstractContextManager[Span]:
        """``span`` as the current context of this thread for the block (not ended at its
        end; an exception leaving the block is recorded on it)."""
        from opentelemetry.trace import use_span

        return use_span(span, end_on_exit=False)

    def in_span(self) -> bool:
        """Whether this thread's current context holds a span (the round's, by :meth:`current`)."""
        from opentelemetry.trace import get_current_span

        return bool(get_current_span().get_span_context().is_valid)

    def start_child(self, name: str, parent: Span, **attrs: Any) -> Span:
        """A child span of ``parent`` (which may live in another thread)."""
        from opentelemetry.trace import set_span_in_context

        return self.tracer.start_span(
            name,
            context=set_span_in_context(parent),
            attributes={f"tidelake.{k}": v for k, v in attrs.items()},
        )


def inject(span: Span, carrier: MutableMapping[str, str], propagator: Any = None) -> None:
    """Write ``span``'s W3C context into ``carrier`` (``traceparent``, ``tracestate``)."""
    from opentelemetry.trace import set_span_in_context

    if propagator is None:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        propagator = TraceContextTextMapPropagator()
    propagator.inject(carrier, context=set_span_in_context(span))


def extract(carrier: Mapping[str, str] | None, propagator: Any = None) -> SpanContext | None:
    """The remote span context of ``carrier``'s W3C headers; None without a valid one."""
    if not carrier or TRACEPARENT not in carrier:
        return None
    from opentelemetry.trace import get_current_span

    if propagator is None:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        propagator = TraceContextTextMapPropagator()
    ctx = get_current_span(propagator.extract(dict(carrier))).get_span_context()
    return ctx if ctx.is_valid else None


def context_headers(carrier: Mapping[str, str] | None) -> dict[str, str]:
    """Only the W3C Trace Context headers of ``carrier`` (what a manifest keeps)."""
    if not carrier:
        return {}
    return {k: carrier[k] for k in (TRACEPARENT, TRACESTATE) if k in carrier}
