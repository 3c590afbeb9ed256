"""Whether a nats-server fsyncs acknowledged messages, read from its monitoring ``/varz``.

JetStream acknowledges a publish once the message is written to the OS; by default it fsyncs
its files every two minutes (``sync_interval``), so an OS crash or a power loss can lose
messages that were already acknowledged, and tidelake's capture has by then moved its source
position past them. ``sync_interval: always`` fsyncs every write before the acknowledgement.
The embedded server runs with it (``bus/server.py``); an external server is the operator's,
so ``tidelake status`` reads its ``/varz`` (``bus.monitor_url``) and warns (docs/nats.md).

``/varz`` reports ``jetstream.config.sync_always`` (true with ``always``) and
``sync_interval`` in nanoseconds since nats-server 2.10; a server that reports neither predates
the setting and syncs every two minutes.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

import orjson

from tidelake.errors import BusError

#: nats-server's default ``sync_interval`` (server/filestore.go ``defaultSyncInterval``).
DEFAULT_SYNC_INTERVAL_S = 120.0


@dataclass(frozen=True)
class SyncPolicy:
    """What one server said about its JetStream store."""

    version: str
    jetstream: bool
    sync_always: bool
    #: Seconds between background fsyncs (meaningless when ``sync_always``).
    sync_interval_s: float
    #: The cluster's name when the server is one of a cluster's nodes.
    cluster: str | None

    def as_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "jetstream": self.jetstream,
            "sync_always": self.sync_always,
            "sync_interval_s": self.sync_interval_s,
            "cluster": self.cluster,
        }


def sync_policy(varz: dict[str, Any]) -> SyncPolicy:
    """The sync policy in a ``/varz`` document."""
    js = varz.get("jetstream") or {}
    config = js.get("config") or {}
    interval_ns = config.get("sync_interval")
    cluster = (varz.get("cluster") or {}).get("name") or None
    return SyncPolicy(
        version=str(varz.get("version", "unknown")),
        jetstream=bool(config),
        sync_always=bool(config.get("sync_always", False)),
        sync_interval_s=DEFAULT_SYNC_INTERVAL_S if interval_ns is None else interval_ns / 1e9,
        cluster=cluster,
    )


def durability_warnings(policy: SyncPolicy, *, replicas: int) -> list[str]:
    """What an operator should hear about ``policy`` for streams of ``replicas`` replicas."""
    if not policy.jetstream:
        return [f"nats-server {policy.version} at bus.monitor_url reports no JetStream"]
    out: list[str] = []
    if not policy.sync_always:
        out.append(
            f"nats-server {policy.version} fsyncs JetStream every {policy.sync_interval_s:g} s, "
            "not on every write: an OS crash or power loss can lose acknowledged changes; set "
            "jetstream { sync_interval: always } (docs/nats.md)"
        )
    if policy.cluster is not None and replicas < 3:
        out.append(
            f"nats-server is in cluster {policy.cluster!r} but bus.stream.replicas is {replicas}: "
            "a stream on one node is lost with that node's disk; use 3 (docs/nats.md)"
        )
    return out


def fetch_varz(monitor_url: str, timeout_s: float = 3.0) -> dict[str, Any]:
    """``GET <monitor_url>/varz``; :class:`BusError` when it cannot be read."""
    url = monitor_url.rstrip("/") + "/varz"
    if not url.startswith(("http://", "https://")):
        raise BusError(f"bus.monitor_url {monitor_url!r} is not an http(s) URL")
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            doc = orjson.loads(resp.read())
    except (urllib.error.URLError, OSError, orjson.JSONDecodeError) as exc:
        raise BusError(f"cannot read {url}: {type(exc).__name__}: {exc}") from None
    if not isinstance(doc, dict):
        raise BusError(f"{url} is not a JSON object")
    return doc
