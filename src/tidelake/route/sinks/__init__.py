"""One module per destination a route writes to; :func:`open_sink` picks one from config."""

from __future__ import annotations

from tidelake.config import (
    OpenSearchSinkConfig,
    PostgresSinkConfig,
    RedisSinkConfig,
    SinkConfig,
    WebhookSinkConfig,
)
from tidelake.route.change import Sink


def open_sink(route: str, config: SinkConfig, *, source_timezone: str = "UTC") -> Sink:
    """The sink ``config`` describes, for the route named ``route`` (imported on use: each
    destination's client library is needed only by the routes that write to it).
    ``source_timezone`` (``lake.source_timezone``): the zone of the source's zone-less
    timestamps, for the value a column added with ``DEFAULT CURRENT_TIMESTAMP`` gives rows."""
    if isinstance(config, PostgresSinkConfig):
        from tidelake.route.sinks.postgres import PostgresSink

        return PostgresSink(config, source_timezone=source_timezone)
    if isinstance(config, RedisSinkConfig):
        from tidelake.route.sinks.redis import RedisSink

        return RedisSink(config, source_timezone=source_timezone)
    if isinstance(config, WebhookSinkConfig):
        from tidelake.route.sinks.webhook import WebhookSink

        return WebhookSink(route, config)
    if isinstance(config, OpenSearchSinkConfig):
        from tidelake.route.sinks.opensearch import OpenSearchSink

        return OpenSearchSink(config, source_timezone=source_timezone)
    raise AssertionError(f"unknown sink {config!r}")  # the config's union is closed
