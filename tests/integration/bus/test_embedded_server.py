"""The embedded nats-server: starts with JetStream, restarts on the same port and store."""

from __future__ import annotations

import asyncio
from pathlib import Path

import nats
import pytest

from tidelake.bus.connection import connect
from tidelake.bus.server import EmbeddedNats
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
