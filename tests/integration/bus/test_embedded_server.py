"""The embedded nats-server: starts with JetStream, restarts on the same port and store."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from pathlib import Path

import nats
import pytest

from tidelake.api.records import DurabilityCheck
from tidelake.bus.connection import connect
from tidelake.bus.durability import durability_warnings, fetch_varz, sync_policy
from tidelake.bus.server import EmbeddedNats, nats_server_binary
from tidelake.config import BusConfig, load_config
from tidelake.errors import BusError

pytestmark = pytest.mark.integration


async def _publish_and_count(url: str, *, publish: bool) -> int:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        if publish:
            await js.add_stream(name="KEEP", subjects=["keep.>"])
            for i in range(10):
                await js.publish("keep.x", str(i).encode())
        info = await js.stream_info("KEEP")
        return int(info.state.messages)
    finally:
        await nc.close()


def test_messages_survive_kill_9_and_restart_on_the_same_url(tmp_path: Path) -> None:
    """A kill -9 and a restart keep the port, the store directory and the messages."""
    server = EmbeddedNats(tmp_path / "nats")
    with server:
        url = server.url
        assert asyncio.run(_publish_and_count(url, publish=True)) == 10
        pid = server.pid
        server.restart(hard=True)
        assert server.url == url
        assert server.pid != pid
        assert asyncio.run(_publish_and_count(url, publish=False)) == 10
    assert not server.running
    assert server.log_path.is_file()
    assert "Starting nats-server" in server.log_path.read_text()


def test_a_busy_port_fails_to_start_with_a_clear_error(tmp_path: Path) -> None:
    """A second server on a taken port raises BusError naming the log, not a hang."""
    with EmbeddedNats(tmp_path / "a") as first:
        second = EmbeddedNats(tmp_path / "b", port=first.port, startup_timeout_s=5)
        with pytest.raises(BusError, match="nats-server"):
            second.start()
        assert not second.running


def test_connect_with_user_and_password_from_the_environment(tmp_path: Path) -> None:
    """connect() passes user/password (from the environment) and is refused without them."""
    server = EmbeddedNats(tmp_path / "auth", extra_args=["--user", "tl", "--pass", "s3cret-pass"])
    with server:
        good = load_config(
            None,
            environ={
                "TIDELAKE_BUS__AUTH__USER": "tl",
                "TIDELAKE_BUS__AUTH__PASSWORD": "s3cret-pass",
                "TIDELAKE_BUS__CONNECT_TIMEOUT_S": "1",
            },
        ).bus

        async def round_trip() -> bytes:
            nc = await connect(good, server.url)
            try:
                sub = await nc.subscribe("ping")
                await nc.publish("ping", b"pong")
                msg = await sub.next_msg(timeout=2)
                return bytes(msg.data)
            finally:
                await nc.close()

        assert asyncio.run(round_trip()) == b"pong"
        bad = BusConfig.model_validate({"connect_timeout_s": 0.5})
        with pytest.raises(BusError) as err:
            asyncio.run(connect(bad, server.url))
        assert "s3cret" not in str(err.value)


def test_the_embedded_server_is_a_current_release_from_the_project_cache(tmp_path: Path) -> None:
    """Issue 23 deliver 2: the embedded and tested default is nats-server >= 2.12 (built by
    scripts/gotools into .cache/bin), not Debian's 2.9.10."""
    with EmbeddedNats(tmp_path / "nats") as server:
        varz = fetch_varz(server.monitor_url)
    major, minor = (int(p) for p in str(varz["version"]).split(".")[:2])
    assert (major, minor) >= (2, 12), varz["version"]
    assert nats_server_binary() == str(Path(server.process.argv[0]))


def test_the_embedded_server_fsyncs_before_it_acknowledges(tmp_path: Path) -> None:
    """Issue 23 deliver 1 (probe: 0 fsyncs over 200 acked publishes on 2.9.10): the server
    accepts `sync_interval: always`, /varz reports it, and strace counts at least one fsync
    per acknowledged publish."""
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace is not installed (scripts/setup installs it)")
    publishes = 100
    with EmbeddedNats(tmp_path / "nats") as server:
        policy = sync_policy(fetch_varz(server.monitor_url))
        assert (True, []) == (policy.sync_always, durability_warnings(policy, replicas=1))
        out = tmp_path / "strace.txt"
        tracer = subprocess.Popen(
            [strace, "-f", "-qq", "-e", "trace=fsync,fdatasync", "-o", str(out),
             "-p", str(server.pid)],
            stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            time.sleep(1.0)  # strace attaches to every thread before the first publish
            asyncio.run(_publish_n(server.url, publishes))
        finally:
            tracer.terminate()
            tracer.wait(10)
    syncs = sum(
        1 for line in out.read_text().splitlines() if "fsync(" in line or "fdatasync(" in line
    )
    assert syncs >= publishes, f"{syncs} fsyncs for {publishes} acknowledged publishes"


async def _publish_n(url: str, n: int) -> None:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await js.add_stream(name="SYNCED", subjects=["synced.>"])
        for i in range(n):
            await js.publish("synced.x", str(i).encode())
    finally:
        await nc.close()


def test_status_warns_about_a_server_that_does_not_fsync_per_write(tmp_path: Path) -> None:
    """Issue 23 deliver 1: a server on JetStream's default policy, seen through its real
    monitoring port (bus.monitor_url), gets the sync warning in status; the same server
    with `sync_interval: always` gets none."""
    warnings: dict[bool, list[str]] = {}
    for always in (False, True):
        with EmbeddedNats(tmp_path / f"nats-{always}", sync_always=always) as server:
            bus = BusConfig(url=server.url, monitor_url=server.monitor_url)
            warnings[always] = DurabilityCheck(bus).warnings()
    assert [] == warnings[True]
    assert 1 == len(warnings[False])
    assert "not on every write" in warnings[False][0]
    assert "sync_interval: always" in warnings[False][0]
