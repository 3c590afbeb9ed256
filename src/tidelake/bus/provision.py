"""Create-or-update the CDC stream, the dead-letter stream and the stager's durable consumer.

Every function here is idempotent: it reads what exists, compares the fields tidelake owns
and only then creates or updates; running it twice changes nothing.

MaxDeliver. The consumer is created with the server's ``max_deliver`` unlimited (-1) on
purpose. With a server-side limit, JetStream stops delivering a message after its last
delivery whether or not it was acked: a stager killed while holding that delivery (a crash
loop, a "poison batch") would lose the message silently. Instead the stager enforces
``bus.consumer.max_deliver`` itself: a message delivered that many times is sent to the DLQ
(reason ``max_deliver``) without being decoded, durably, before it is acked. A crash at any
point leads to one more delivery, never to a loss.

Role marker. The stager's consumer carries :data:`STAGER_METADATA` in its JetStream metadata
(NATS 2.10+): :mod:`tidelake.bus.coverage` tells a stager's consumer from a route's or a
view's by it. Metadata is a mutable field, so a consumer made before the marker existed gets
it on the next provisioning. Only tidelake's own keys (``tidelake.``) are compared: nats-server
2.11+ adds keys of its own (``_nats.req.level``, ``_nats.ver``, ``_nats.level``).

Leader elections. In a cluster, a stream whose leader died answers nothing until its peers
elect another (nats-server 2.15 took ~6 s in tests/integration/bus/test_cluster.py): its API
requests time out or find no responder. Provisioning waits through that
(:data:`ELECTION_WAIT_S`) instead of failing the process that is starting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import nats.errors
import nats.js.errors
import structlog
import tenacity
from nats.js import JetStreamContext, api

from tidelake.bus.connection import connect
from tidelake.config import BusConfig
from tidelake.errors import BusError

log = structlog.get_logger(__name__)

#: Server-side MaxDeliver of the stager's consumer: unlimited (see the module docstring).
SERVER_MAX_DELIVER = -1
#: The metadata key naming what a tidelake consumer is for.
ROLE_KEY = "tidelake.role"
#: The metadata of every stager's consumer (bus/coverage.py finds the stagers by it).
STAGER_METADATA = {ROLE_KEY: "stager"}
#: Metadata keys tidelake owns start with this; the server's own start with ``_nats.``.
_OWN_METADATA_PREFIX = "tidelake."
#: Seconds; durations are compared with this tolerance (the server keeps nanoseconds).
_DURATION_TOLERANCE_S = 1e-3
#: Seconds provisioning keeps asking while JetStream does not answer (a leader election).
ELECTION_WAIT_S = 60.0
#: What an unanswered JetStream API request raises while no leader is elected.
_NO_LEADER = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.js.errors.ServiceUnavailableError,
)


@dataclass(frozen=True)
class Provisioned:
    """What provisioning did to one stream or consumer (``tidelake bus init`` prints it)."""

    kind: Literal["stream", "consumer"]
    name: str
    action: Literal["created", "updated", "unchanged"]
    #: The fields an update changed; empty otherwise.
    fields: tuple[str, ...] = ()
    #: Messages held (streams) or waiting to be delivered (the consumer).
    messages: int = 0


def _through_elections(what: str) -> tenacity.AsyncRetrying:
    """Retry ``what`` on an unanswered request only (a refused config is not retried)."""

    def log_retry(state: tenacity.RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        log.warning("jetstream did not answer; retrying", what=what, error=type(exc).__name__)

    return tenacity.AsyncRetrying(
        retry=tenacity.retry_if_exception_type(_NO_LEADER),
        stop=tenacity.stop_after_delay(ELECTION_WAIT_S),
        wait=tenacity.wait_exponential(multiplier=0.2, max=2.0),
        before_sleep=log_retry,
        reraise=True,
    )


def cdc_stream_config(cfg: BusConfig) -> api.StreamConfig:
    s = cfg.stream
    return api.StreamConfig(
        name=s.name,
        subjects=list(s.subjects),
        retention=api.RetentionPolicy.LIMITS,
        storage=api.StorageType.FILE,
        discard=api.DiscardPolicy.OLD,
        max_age=s.max_age_s,
        max_bytes=s.max_bytes,
        duplicate_window=s.duplicate_window_s,
        num_replicas=s.replicas,
    )


def dlq_stream_config(cfg: BusConfig) -> api.StreamConfig:
    d = cfg.dlq
    return api.StreamConfig(
        name=d.name,
        subjects=[f"{d.subject_prefix}.>"],
        retention=api.RetentionPolicy.LIMITS,
        storage=api.StorageType.FILE,
        discard=api.DiscardPolicy.OLD,
        max_age=d.max_age_s,
        max_bytes=-1,
        duplicate_window=cfg.stream.duplicate_window_s,
        num_replicas=cfg.stream.replicas,
    )


def consumer_config(cfg: BusConfig) -> api.ConsumerConfig:
    c = cfg.consumer
    return api.ConsumerConfig(
        name=c.durable,
        durable_name=c.durable,
        deliver_policy=api.DeliverPolicy.ALL,
        ack_policy=api.AckPolicy.EXPLICIT,
        ack_wait=c.ack_wait_s,
        max_deliver=SERVER_MAX_DELIVER,
        max_ack_pending=c.max_ack_pending,
        # One filter as filter_subject (as before), several as filter_subjects (NATS 2.10+).
        filter_subject=c.filter_subject,
        filter_subjects=list(c.filter_subjects) or None,
        replay_policy=api.ReplayPolicy.INSTANT,
        metadata=dict(STAGER_METADATA),
    )


def own_metadata(metadata: dict[str, str] | None) -> dict[str, str]:
    """The keys of a consumer's metadata that tidelake wrote (not the server's ``_nats.*``)."""
    return {k: v for k, v in (metadata or {}).items() if k.startswith(_OWN_METADATA_PREFIX)}


def _differences(want: Any, have: Any, fields: tuple[str, ...]) -> list[str]:
    out = []
    for f in fields:
        w, h = getattr(want, f), getattr(have, f)
        if f == "metadata":
            if own_metadata(w) != own_metadata(h):
                out.append(f)
        elif isinstance(w, float | int) and isinstance(h, float | int) and not isinstance(w, bool):
            if abs(float(w) - float(h)) > _DURATION_TOLERANCE_S:
                out.append(f)
        elif isinstance(w, list) and isinstance(h, list):
            if sorted(w) != sorted(h):  # a set of subjects: the server may reorder it
                out.append(f)
        elif (w or None) != (h or None):  # unset and empty are one: no filter
            out.append(f)
    return out


_STREAM_FIELDS = (
    "subjects",
    "retention",
    "storage",
    "discard",
    "max_age",
    "max_bytes",
    "duplicate_window",
    "num_replicas",
)
#: Changing these needs the stream to be recreated; tidelake refuses rather than lose data.
_STREAM_FIXED = frozenset({"retention", "storage"})

_CONSUMER_FIELDS = (
    "deliver_policy",
    "ack_policy",
    "ack_wait",
    "max_deliver",
    "max_ack_pending",
    "filter_subject",
    "filter_subjects",
    "metadata",
)
#: A consumer's filters are fixed: a changed set would skip or re-deliver a worker's share.
_CONSUMER_FIXED = frozenset({"deliver_policy", "ack_policy", "filter_subject", "filter_subjects"})


def _stream_messages(info: api.StreamInfo) -> int:
    return int(info.state.messages) if info.state is not None else 0


async def ensure_stream(
    js: JetStreamContext, want: api.StreamConfig, report: list[Provisioned] | None = None
) -> api.StreamInfo:
    """Create the stream, or update the fields that differ; nothing when it already matches.
    What it did is appended to ``report`` when given."""
    assert want.name is not None
    done = report if report is not None else []
    try:
        info = await js.stream_info(want.name)
    except nats.js.errors.NotFoundError:
        info = await js.add_stream(want)
        log.info("stream created", stream=want.name, subjects=want.subjects)
        done.append(Provisioned("stream", want.name, "created"))
        return info
    diff = _differences(want, info.config, _STREAM_FIELDS)
    if not diff:
        done.append(Provisioned("stream", want.name, "unchanged", (), _stream_messages(info)))
        return info
    fixed = sorted(_STREAM_FIXED.intersection(diff))
    if fixed:
        raise BusError(
            f"stream {want.name}: {', '.join(fixed)} differ from the config and cannot be "
            "changed in place; recreate the stream on purpose"
        )
    info = await js.update_stream(want)
    log.info("stream updated", stream=want.name, fields=diff)
    done.append(Provisioned("stream", want.name, "updated", tuple(diff), _stream_messages(info)))
    return info


async def ensure_streams(
    js: JetStreamContext, cfg: BusConfig, report: list[Provisioned] | None = None
) -> tuple[api.StreamInfo, ...]:
    """The CDC stream and the dead-letter stream, as configured (what was done: ``report``)."""
    try:
        async for attempt in _through_elections("provision streams"):
            with attempt:
                # Only the last attempt's account counts: an unanswered one did nothing.
                steps: list[Provisioned] = []
                cdc = await ensure_stream(js, cdc_stream_config(cfg), steps)
                dlq = await ensure_stream(js, dlq_stream_config(cfg), steps)
    except nats.js.errors.Error as exc:
        raise BusError(f"cannot provision streams: {exc}") from exc
    except nats.errors.Error as exc:
        raise BusError(f"cannot provision streams: {type(exc).__name__}") from exc
    if report is not None:
        report.extend(steps)
    return cdc, dlq


async def ensure_consumer(
    js: JetStreamContext, cfg: BusConfig, report: list[Provisioned] | None = None
) -> api.ConsumerInfo:
    """The stager's durable pull consumer on the CDC stream (explicit ack); what was done is
    appended to ``report`` when given."""
    try:
        async for attempt in _through_elections("provision the consumer"):
            with attempt:
                steps: list[Provisioned] = []
                info = await _ensure_consumer(js, cfg, steps)
    except nats.errors.Error as exc:
        raise BusError(f"cannot provision the consumer: {type(exc).__name__}") from exc
    if report is not None:
        report.extend(steps)
    return info


def _pending(info: api.ConsumerInfo) -> int:
    return int(info.num_pending or 0)


async def _ensure_consumer(
    js: JetStreamContext, cfg: BusConfig, report: list[Provisioned]
) -> api.ConsumerInfo:
    want = consumer_config(cfg)
    stream = cfg.stream.name
    assert want.durable_name is not None
    info: api.ConsumerInfo
    try:
        try:
            info = await js.consumer_info(stream, want.durable_name)
        except nats.js.errors.NotFoundError:
            info = await js.add_consumer(stream, want)
            log.info("consumer created", stream=stream, durable=want.durable_name)
            report.append(Provisioned("consumer", want.durable_name, "created", (), _pending(info)))
            return info
        diff = _differences(want, info.config, _CONSUMER_FIELDS)
        if not diff:
            report.append(
                Provisioned("consumer", want.durable_name, "unchanged", (), _pending(info))
            )
            return info
        fixed = sorted(_CONSUMER_FIXED.intersection(diff))
        if fixed:
            raise BusError(
                f"consumer {want.durable_name}: {', '.join(fixed)} differ from the config and "
                "cannot be changed in place; delete the consumer on purpose"
            )
        info = await js.add_consumer(stream, want)  # 2.9+: same name = update
        log.info("consumer updated", durable=want.durable_name, fields=diff)
        report.append(
            Provisioned("consumer", want.durable_name, "updated", tuple(diff), _pending(info))
        )
        return info
    except _NO_LEADER:
        raise  # retried by ensure_consumer
    except nats.js.errors.Error as exc:
        raise BusError(f"cannot provision consumer {want.durable_name}: {exc}") from exc


async def provision(cfg: BusConfig, url: str | None = None) -> list[Provisioned]:
    """Connect to ``url`` (default ``cfg.url``), make the streams and the stager's consumer
    as configured, and close: what every process that starts a pipeline does first, and
    ``tidelake bus init``. Returns what it did, stream by stream, then the consumer."""
    report: list[Provisioned] = []
    nc = await connect(cfg, url)
    try:
        js = nc.jetstream()
        await ensure_streams(js, cfg, report)
        await ensure_consumer(js, cfg, report)
    finally:
        await nc.close()
    return report
