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

Leader elections. In a cluster, a stream whose leader died answers nothing until its peers
elect another (nats-server 2.15 took ~6 s in tests/integration/bus/test_cluster.py): its API
requests time out or find no responder. Provisioning waits through that
(:data:`ELECTION_WAIT_S`) instead of failing the process that is starting.
"""

from __future__ import annotations

from typing import Any

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
        filter_subject=c.filter_subject,
        replay_policy=api.ReplayPolicy.INSTANT,
    )


def _differences(want: Any, have: Any, fields: tuple[str, ...]) -> list[str]:
    out = []
    for f in fields:
        w, h = getattr(want, f), getattr(have, f)
        if isinstance(w, float | int) and isinstance(h, float | int) and not isinstance(w, bool):
            if abs(float(w) - float(h)) > _DURATION_TOLERANCE_S:
                out.append(f)
        elif w != h:
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
)
_CONSUMER_FIXED = frozenset({"deliver_policy", "ack_policy", "filter_subject"})


async def ensure_stream(js: JetStreamContext, want: api.StreamConfig) -> api.StreamInfo:
    """Create the stream, or update the fields that differ; nothing when it already matches."""
    assert want.name is not None
    try:
        info = await js.stream_info(want.name)
    except nats.js.errors.NotFoundError:
        info = await js.add_stream(want)
        log.info("stream created", stream=want.name, subjects=want.subjects)
        return info
    diff = _differences(want, info.config, _STREAM_FIELDS)
    if not diff:
        return info
    fixed = sorted(_STREAM_FIXED.intersection(diff))
    if fixed:
        raise BusError(
            f"stream {want.name}: {', '.join(fixed)} differ from the config and cannot be "
            "changed in place; recreate the stream on purpose"
        )
    info = await js.update_stream(want)
    log.info("stream updated", stream=want.name, fields=diff)
    return info


async def ensure_streams(js: JetStreamContext, cfg: BusConfig) -> tuple[api.StreamInfo, ...]:
    """The CDC stream and the dead-letter stream, as configured."""
    try:
        async for attempt in _through_elections("provision streams"):
            with attempt:
                cdc = await ensure_stream(js, cdc_stream_config(cfg))
                dlq = await ensure_stream(js, dlq_stream_config(cfg))
    except nats.js.errors.Error as exc:
        raise BusError(f"cannot provision streams: {exc}") from exc
    except nats.errors.Error as exc:
        raise BusError(f"cannot provision streams: {type(exc).__name__}") from exc
    return cdc, dlq


async def ensure_consumer(js: JetStreamContext, cfg: BusConfig) -> api.ConsumerInfo:
    """The stager's durable pull consumer on the CDC stream (explicit ack)."""
    try:
        async for attempt in _through_elections("provision the consumer"):
            with attempt:
                info = await _ensure_consumer(js, cfg)
    except nats.errors.Error as exc:
        raise BusError(f"cannot provision the consumer: {type(exc).__name__}") from exc
    return info


async def _ensure_consumer(js: JetStreamContext, cfg: BusConfig) -> api.ConsumerInfo:
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
            return info
        diff = _differences(want, info.config, _CONSUMER_FIELDS)
        if not diff:
            return info
        fixed = sorted(_CONSUMER_FIXED.intersection(diff))
        if fixed:
            raise BusError(
                f"consumer {want.durable_name}: {', '.join(fixed)} differ from the config and "
                "cannot be changed in place; delete the consumer on purpose"
            )
        info = await js.add_consumer(stream, want)  # 2.9+: same name = update
        log.info("consumer updated", durable=want.durable_name, fields=diff)
        return info
    except _NO_LEADER:
        raise  # retried by ensure_consumer
    except nats.js.errors.Error as exc:
        raise BusError(f"cannot provision consumer {want.durable_name}: {exc}") from exc


async def provision(cfg: BusConfig, url: str | None = None) -> None:
    """Connect to ``url`` (default ``cfg.url``), make the streams and the stager's consumer
    as configured, and close: what every process that starts a pipeline does first."""
    nc = await connect(cfg, url)
    try:
        js = nc.jetstream()
        await ensure_streams(js, cfg)
        await ensure_consumer(js, cfg)
    finally:
        await nc.close()
