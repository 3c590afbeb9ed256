"""The capture loop's liveness and heartbeat keep turning while a publish waits for slow
PubAcks (``capture/runner.py``), on a real nats-server."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from tidelake.bus.server import EmbeddedNats
from tidelake.capture.canal import Outgoing
from tidelake.capture.publisher import Publisher
from tidelake.capture.runner import Sink, capture_loop
from tidelake.config import load_config
from tidelake.runtime.metrics_server import LIVENESS

pytestmark = pytest.mark.integration

MESSAGES = 12
#: Each PubAck is held this long: the durable wait lasts MESSAGES x ACK_DELAY_S = 3 s.
ACK_DELAY_S = 0.25


class _Source:
    """Emits MESSAGES messages and one resume point, then waits to be stopped."""

    kind = "fake"

    def check(self) -> None:
        pass

    def run(self, state: dict[str, Any] | None, sink: Sink, stop: threading.Event) -> None:
        now = int(time.time() * 1000)
        for i in range(MESSAGES):
            sink.put(Outgoing("cdc.hb.t", f"hb:{i}", b"{}", "hb.t", now))
        sink.resume({"phase": "streaming", "n": MESSAGES}, flush_after_s=0)
        stop.wait()

    def confirm(self, state: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


def test_liveness_and_heartbeat_turn_while_pubacks_are_slow(
    tmp_path: Path, nats: EmbeddedNats, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With every PubAck held 0.25 s (3 s until the resume point is durable), ``/healthz``'s
    loop age stays under a second and the heartbeat file is rewritten during the wait; the
    position is saved once everything is acknowledged."""
    wait_ack = Publisher._wait_ack

    async def slow_wait_ack(self: Publisher, entry: Any) -> Any:
        await asyncio.sleep(ACK_DELAY_S)
        return await wait_ack(self, entry)

    monkeypatch.setattr(Publisher, "_wait_ack", slow_wait_ack)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"home": str(tmp_path), "bus": {"url": nats.url}}))
    cfg = load_config(config, environ={})
    beat_file = Path(cfg.stage_root) / "_tidelake" / "capture.heartbeat.json"
    stop = threading.Event()
    ages: list[float] = []
    updates: set[int] = set()
    saved: list[dict[str, Any]] = []

    def watch() -> None:
        while not stop.is_set():
            ages.append(LIVENESS.age_s())
            if beat_file.is_file():
                updates.add(int(orjson.loads(beat_file.read_bytes())["updated_at_ms"]))
            time.sleep(0.05)

    def on_saved(state: dict[str, Any]) -> None:
        saved.append(state)
        stop.set()

    # LIVENESS is the process's one clock: an earlier test of this session last turned it.
    # A capture process starts with it fresh, as here.
    LIVENESS.beat()
    watcher = threading.Thread(target=watch)
    watcher.start()
    started = time.monotonic()
    try:
        stats = asyncio.run(capture_loop(cfg, _Source(), stop=stop, on_saved=on_saved))
    finally:
        stop.set()
        watcher.join()
    assert time.monotonic() - started >= MESSAGES * ACK_DELAY_S
    assert stats.published == MESSAGES
    assert saved == [{"phase": "streaming", "n": MESSAGES}]
    assert max(ages) < 1.0
    assert len(updates) >= 2
