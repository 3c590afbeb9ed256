"""Issue 23, deliver 1: an acknowledged publish survives an OS crash, not only ``kill -9``.

The JetStream store lives on the lossy filesystem (tests/support/lossyfs.py): at a crash it
drops every byte and name that was not fsync-ed, as a power loss does. The stream is created
and made durable first (``sync_all``, as if the machine had been up for a while), then N
publishes are acknowledged one by one, nats-server is killed with SIGKILL, the unsynced state
is dropped, and a new server starts on the same directory.

* negative control: with JetStream's default ``sync_interval`` (2 minutes) acknowledged
  messages are lost — the layer bites, and an acked publish is not yet durable;
* positive: with ``sync_interval: always`` (the embedded configuration, bus/server.py) all N
  acknowledged messages are in the stream, exactly.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import nats
import pytest

from support.lossyfs import LossyMount
from tidelake.bus.server import EmbeddedNats

pytestmark = pytest.mark.integration

STREAM = "CRASH"
ACKED = 200


def _server(store: Path, binary: str, config: Path) -> EmbeddedNats:
    # The sync policy comes from our own -c file, so the test decides it whatever the
    # embedded default is (bus/server.py includes a caller's -c file after its own).
    return EmbeddedNats(store, binary=binary, extra_args=["-c", str(config)])


async def _publish(url: str, first: int, count: int, *, create: bool = False) -> list[int]:
    """Publish ``count`` messages ``m<first>..``, each awaited for its PubAck; the sequences."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        if create:
            await js.add_stream(name=STREAM, subjects=["crash.>"])
        seqs = []
        for i in range(first, first + count):
            ack = await js.publish("crash.x", f"m{i}".encode(), headers={"Nats-Msg-Id": str(i)})
            seqs.append(ack.seq)
        return seqs
    finally:
        await nc.close()


async def _stored(url: str) -> list[str]:
    """Every payload in the stream, in order (an empty list when the stream is gone)."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        try:
            info = await js.stream_info(STREAM)
        except nats.js.errors.NotFoundError:
            return []
        out = []
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            try:
                msg = await js.get_msg(STREAM, seq)
            except nats.js.errors.NotFoundError:
                continue
            out.append((msg.data or b"").decode())
        return out
    finally:
        await nc.close()


def _crash_after_acks(lossy: LossyMount, binary: str, config: Path) -> tuple[list[str], dict]:
    """Stream made durable with one message, ACKED acked publishes, SIGKILL + drop unsynced,
    restart: what the stream holds, and what the crash dropped."""
    store = lossy.mountpoint / "nats"
    server = _server(store, binary, config).start()
    asyncio.run(_publish(server.url, 0, 1, create=True))
    server.stop()
    lossy.sync_all()
    server = _server(store, binary, config).start()
    seqs = asyncio.run(_publish(server.url, 1, ACKED))
    assert list(range(2, ACKED + 2)) == seqs
    server.kill()
    dropped = lossy.crash()
    # A new process, as after a reboot (the old one's config file may be gone too).
    server = _server(store, binary, config).start()
    try:
        return asyncio.run(_stored(server.url)), dropped
    finally:
        server.stop()


def test_default_sync_interval_loses_acknowledged_publishes_at_an_os_crash(
    lossy: LossyMount, nats_binary: str, tmp_path: Path
) -> None:
    """Negative control (the Jepsen NATS 2.12.1 finding): with the default 2-minute
    sync_interval, acknowledged publishes are gone after an OS crash — proves the lossy
    layer bites; kill -9 alone would have lost nothing."""
    config = tmp_path / "default-sync.conf"
    config.write_text("jetstream {\n  sync_interval: 2m\n}\n")
    stored, dropped = _crash_after_acks(lossy, nats_binary, config)
    lost = [f"m{i}" for i in range(ACKED + 1) if f"m{i}" not in stored]
    print(f"default sync_interval: {len(lost)} of {ACKED + 1} acked lost; dropped {dropped}")
    assert dropped["bytes_dropped"] > 0
    assert len(lost) >= ACKED // 2, f"only {len(lost)} of {ACKED} acked publishes lost"


def test_sync_interval_always_keeps_every_acknowledged_publish_at_an_os_crash(
    lossy: LossyMount, nats_binary: str, tmp_path: Path
) -> None:
    """Positive (issue 23 deliver 1): with ``sync_interval: always`` — the embedded
    configuration — all acknowledged publishes are in the stream after the OS crash, each
    once, in order."""
    config = tmp_path / "sync-always.conf"
    config.write_text("jetstream {\n  sync_interval: always\n}\n")
    stored, dropped = _crash_after_acks(lossy, nats_binary, config)
    print(f"sync_interval always: {len(stored)} of {ACKED + 1} kept; dropped {dropped}")
    assert [f"m{i}" for i in range(ACKED + 1)] == stored
    assert dropped["fsync"] >= ACKED
