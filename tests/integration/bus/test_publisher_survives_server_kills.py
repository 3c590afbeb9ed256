"""The ordered publisher through ``kill -9`` of nats-server: nothing lost, no duplicate, and
stream order = call order (the ingest's position watermark depends on it)."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from tidelake.bus.connection import connect
from tidelake.bus.provision import ensure_streams
from tidelake.bus.server import EmbeddedNats
from tidelake.capture.publisher import Acked, Publisher
from tidelake.config import load_config

pytestmark = pytest.mark.integration

MESSAGES = 12_000


def _kill_and_restart(server: EmbeddedNats, times: int, stop: threading.Event) -> None:
    for _ in range(times):
        if stop.wait(0.8):
            return
        server.kill()
        time.sleep(0.3)
        server.start()


async def _publish_through_kills(server: EmbeddedNats, home: Path) -> tuple[list[int], list[Acked]]:
    cfg = load_config(None, environ={"TIDELAKE_HOME": str(home)})
    nc = await connect(cfg.bus, server.url)
    await ensure_streams(nc.jetstream(), cfg.bus)
    await nc.close()
    acked: list[Acked] = []
    stop = threading.Event()
    killer = threading.Thread(target=_kill_and_restart, args=(server, 3, stop))
    pub = await Publisher.open(cfg.bus, server.url, on_acked=acked.append)
    killer.start()
    try:
        for i in range(MESSAGES):
            await pub.publish("cdc.shop.orders", str(i).encode(), f"msg-{i}", i)
            if i % 40 == 0:
                await asyncio.sleep(0.01)  # ~4 s of publishing: the kills land mid-stream
        await pub.durable()
    finally:
        stop.set()
        killer.join()
        await pub.close()
    assert pub.reconnects >= 1, "no kill happened while publishing"
    # Read the stream back in stream order.
    nc = await connect(cfg.bus, server.url)
    try:
        js = nc.jetstream()
        stored = (await js.stream_info(cfg.bus.stream.name)).state.messages
        sub = await js.pull_subscribe("cdc.>", stream=cfg.bus.stream.name)
        order: list[int] = []
        while len(order) < stored:
            try:
                msgs = await sub.fetch(1000, timeout=2)
            except Exception:  # a fetch that expires empty while the server settles
                continue
            order.extend(int(m.data) for m in msgs)
            for m in msgs:
                await m.ack()
        return order, acked
    finally:
        await nc.close()


def test_publisher_keeps_call_order_through_server_kills(tmp_path: Path) -> None:
    """Three kill -9 + restarts of nats-server mid-stream: every message is stored exactly
    once, in call order, and the PubAcks are reported in call order with rising sequences."""
    server = EmbeddedNats(tmp_path / "nats")
    with server:
        order, acked = asyncio.run(_publish_through_kills(server, tmp_path / "home"))
    assert list(range(MESSAGES)) == order
    assert list(range(MESSAGES)) == [a.tag for a in acked]
    seqs = [a.seq for a in acked]
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == MESSAGES
