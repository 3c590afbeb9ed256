"""The bus server's sync policy as status reads it from /varz (issue 23, deliver 1: `status`
warns when an external server does not fsync acknowledged messages)."""

from __future__ import annotations

from typing import Any

import pytest

from tidelake.api.records import DurabilityCheck
from tidelake.bus.durability import (
    DEFAULT_SYNC_INTERVAL_S,
    SyncPolicy,
    durability_warnings,
    fetch_varz,
    sync_policy,
)
from tidelake.bus.server import EmbeddedNats, embedded_config_text
from tidelake.config import BusConfig, EmbeddedNatsConfig
from tidelake.errors import BusError

#: The parts of /varz that matter, as nats-server 2.15.2 answers with `sync_interval: always`.
VARZ_ALWAYS: dict[str, Any] = {
    "version": "2.15.2",
    "jetstream": {
        "config": {"max_storage": 1, "sync_interval": 120_000_000_000, "sync_always": True}
    },
}
#: ... with its default (sync_always is omitted when false).
VARZ_DEFAULT: dict[str, Any] = {
    "version": "2.15.2",
    "jetstream": {"config": {"max_storage": 1, "sync_interval": 120_000_000_000}},
}
#: 2.9.10 reports no sync setting at all (it rejects `sync_interval` in its config).
VARZ_29: dict[str, Any] = {"version": "2.9.10", "jetstream": {"config": {"max_storage": 1}}}


def test_sync_always_is_read_from_varz() -> None:
    """`sync_interval: always` shows as sync_always; no warning for a standalone server."""
    policy = sync_policy(VARZ_ALWAYS)
    assert SyncPolicy("2.15.2", True, True, 120.0, None) == policy
    assert [] == durability_warnings(policy, replicas=1)


@pytest.mark.parametrize("varz", [VARZ_DEFAULT, VARZ_29], ids=["2.15-default", "2.9"])
def test_a_server_syncing_every_two_minutes_is_warned_about(varz: dict[str, Any]) -> None:
    """The default policy (and a server too old to report one) gets one warning naming the fix."""
    policy = sync_policy(varz)
    assert (False, DEFAULT_SYNC_INTERVAL_S) == (policy.sync_always, policy.sync_interval_s)
    warnings = durability_warnings(policy, replicas=1)
    assert 1 == len(warnings)
    assert "sync_interval: always" in warnings[0]
    assert "every 120 s" in warnings[0]


def test_a_cluster_node_with_single_replica_streams_is_warned_about() -> None:
    """A clustered server and bus.stream.replicas < 3: one node's disk holds the only copy."""
    policy = sync_policy({**VARZ_ALWAYS, "cluster": {"name": "tl", "urls": ["a:1"]}})
    assert "tl" == policy.cluster
    warnings = durability_warnings(policy, replicas=1)
    assert 1 == len(warnings)
    assert "bus.stream.replicas is 1" in warnings[0]
    assert [] == durability_warnings(policy, replicas=3)


def test_a_server_without_jetstream_is_warned_about() -> None:
    """A monitor_url pointing at a server without JetStream is named, not taken as safe."""
    assert ["nats-server 2.15.2 at bus.monitor_url reports no JetStream"] == (
        durability_warnings(sync_policy({"version": "2.15.2"}), replicas=1)
    )


def test_the_embedded_server_is_not_checked() -> None:
    """No bus.url: the embedded server is tidelake's own, started with sync always."""
    assert [] == DurabilityCheck(BusConfig()).warnings()


def test_an_embedded_server_without_sync_always_is_warned_about() -> None:
    """``bus.embedded.sync_always: false`` (measurements: ``demo --no-fsync``) is said."""
    bus = BusConfig.model_validate({"embedded": {"sync_always": False}})
    [warning] = DurabilityCheck(bus).warnings()
    assert "bus.embedded.sync_always is false" in warning


def test_the_embedded_server_takes_its_sync_policy_from_the_config(tmp_path: Any) -> None:
    """``EmbeddedNats.from_config`` starts the server with ``bus.embedded.sync_always``."""
    policies = [
        EmbeddedNats.from_config(EmbeddedNatsConfig(sync_always=always), tmp_path).sync_always
        for always in (True, False)
    ]
    assert [True, False] == policies


def test_an_external_server_without_monitor_url_says_it_cannot_see() -> None:
    """An external server and no bus.monitor_url: status says the policy is unchecked."""
    warnings = DurabilityCheck(BusConfig(url="nats://h:4222")).warnings()
    assert 1 == len(warnings)
    assert "bus.monitor_url is not set" in warnings[0]


def test_an_unreachable_monitor_url_is_a_warning_not_an_error() -> None:
    """A monitoring port that does not answer makes the policy unknown, said as a warning."""
    cfg = BusConfig(url="nats://h:4222", monitor_url="http://127.0.0.1:9")
    warnings = DurabilityCheck(cfg).warnings()
    assert 1 == len(warnings)
    assert warnings[0].startswith("the nats-server's sync policy is unknown: cannot read")


def test_monitor_url_must_be_http() -> None:
    """A file:// or bare URL is refused before anything is opened."""
    with pytest.raises(BusError, match="not an http"):
        fetch_varz("file:///etc/passwd")


def test_the_embedded_config_syncs_always_and_includes_a_callers_file_last(tmp_path: Any) -> None:
    """The embedded server's config: sync always, then a caller's -c file (relative, so
    nats-server finds it; last, so the caller's settings win)."""
    text = embedded_config_text(tmp_path / "store", [tmp_path / "auth.conf"], sync_always=True)
    body = [line for line in text.splitlines() if not line.startswith("#")]
    assert ["jetstream {", "  sync_interval: always", "}", 'include "../auth.conf"'] == body
    off = embedded_config_text(tmp_path, [], sync_always=False)
    assert "sync_interval" not in off
