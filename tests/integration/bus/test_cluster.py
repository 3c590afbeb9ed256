"""Issue 23 deliver 2: a 3-node NATS cluster with R3 streams, a node ``kill -9``-ed and
restarted and a stream leader change forced mid-stream, while tidelake's own ordered
publisher publishes and the real stager (``tidelake stage``, connected with all three URLs)
stages: every acknowledged publish is staged exactly once, none twice, none lost.

Why a retried publish is not stored twice: the publisher (capture/publisher.py) republishes a
message whose PubAck it did not get with the same ``Nats-Msg-Id``, and the stream's duplicate
window (``bus.stream.duplicate_window_s``, 120 s here, far longer than the test) makes JetStream
answer a republished id with the first copy's sequence instead of storing it again. In a
cluster the window is part of the replicated stream state: the new leader after a kill or a
stepdown knows the ids the old one stored, so the guarantee holds across a leader change.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from pathlib import Path

import orjson
import pytest
from clusterkit import NatsCluster, step_down_stream_leader, stream_leader
from stagekit import StageEnv, canal_json, make_stage_env, stop_process, wait_for

from tidelake.bus.connection import connect
from tidelake.capture.publisher import Acked, Publisher
from tidelake.config import Config
from tidelake.events import ChangeEvent
from tidelake.stage.manifest import list_manifests, read_manifest

pytestmark = pytest.mark.integration

MESSAGES = 3_000
TABLES = 4
#: The publisher waits here until the faults are over (none may land after the last publish).
GATE = MESSAGES * 9 // 10


def _faults(
    cluster: NatsCluster, env: StageEnv, sent: list[int], log: list[tuple[str, int]]
) -> None:
    """Mid-stream, with the stager staging: kill -9 the stream's leader and restart it, then
    force a leader change. ``sent[0]`` counts publish calls (PubAcks are reported in batches,
    so they cannot pace this)."""
    stream = env.cfg.bus.stream.name
    wait_for(lambda: sent[0] >= MESSAGES // 5, 60, "a fifth published")
    wait_for(lambda: sum(env.staged().rows_by_table.values()) > 0, 60, "a first staged batch")
    victim = stream_leader(cluster.url, stream)
    cluster.kill(victim)
    log.append((f"killed {victim}", sent[0]))
    time.sleep(1.5)
    cluster.restart(victim)
    log.append((f"restarted {victim}", sent[0]))
    # Some more publishes through the restarted node, short of where the publisher waits.
    more = min(sent[0] + 200, GATE)
    wait_for(lambda: sent[0] >= more, 60, f"{more} published")
    old, new = step_down_stream_leader(cluster.url, stream)
    log.append((f"leader {old} stepped down for {new}", sent[0]))


async def _publish(
    url: str, env_cfg: Config, acked: list[Acked], sent: list[int], faults_done: threading.Event
) -> int:
    """Publish MESSAGES rows over TABLES tables as the capture does (ordered, Nats-Msg-Id =
    table and row), paced (~200/s) so that the faults land mid-stream; the last tenth waits
    for the faults to be over, so none lands after the end. The publisher's reconnect count."""
    prefix = env_cfg.bus.stream.subjects[0].removesuffix(">")
    pub = await Publisher.open(env_cfg.bus, url, on_acked=acked.append)
    try:
        for i in range(MESSAGES):
            if i == GATE:
                await asyncio.to_thread(faults_done.wait, 180)
            table = f"t{i % TABLES}"
            body = canal_json("shop", table, i, (i + 1) << 18)
            await pub.publish(f"{prefix}shop.{table}", body, f"shop.{table}:{i}", i)
            sent[0] = i + 1
            if i % 10 == 0:
                await asyncio.sleep(0.05)
        await pub.durable()
        return pub.reconnects
    finally:
        await pub.close()


def test_r3_stream_through_a_node_kill_and_a_leader_change_loses_and_duplicates_nothing(
    tmp_path: Path,
) -> None:
    """0 lost, 0 duplicated: the set of staged row ids equals the set of acknowledged ones,
    each staged once, each stream sequence staged once, across a SIGKILL + restart of the
    stream leader and a forced stepdown, with publisher and stager on the cluster URL list."""
    with NatsCluster(tmp_path / "cluster") as cluster:
        env = make_stage_env(
            cluster.nodes[0],
            tmp_path / "home",
            {"bus": {"url": cluster.url, "stream": {"replicas": 3}}},
        )
        assert 3 == len(asyncio.run(_stream_replicas(env))), "the stream is not R3"
        stager = env.spawn_stager(once=False)
        acked: list[Acked] = []
        sent = [0]
        faults: list[tuple[str, int]] = []
        errors: list[BaseException] = []

        faults_done = threading.Event()

        def run_faults() -> None:
            try:
                _faults(cluster, env, sent, faults)
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)
            finally:
                faults_done.set()

        injector = threading.Thread(target=run_faults)
        injector.start()
        try:
            reconnects = asyncio.run(_publish(cluster.url, env.cfg, acked, sent, faults_done))
        finally:
            injector.join()
        if errors:
            raise errors[0]
        assert 3 == len(faults), faults
        assert all(at < MESSAGES for _, at in faults), f"a fault after the last publish: {faults}"
        try:
            wait_for(
                lambda: sum(env.staged().rows_by_table.values()) >= MESSAGES,
                120,
                f"{MESSAGES} rows staged",
            )
            time.sleep(1.0)  # a late duplicate batch would show up here
            staged = env.staged()
        finally:
            stop_process(stager)
    rows = _staged_row_ids(env)
    assert list(range(MESSAGES)) == sorted({a.tag for a in acked})
    assert MESSAGES == len(acked)
    assert set(range(MESSAGES)) == set(rows), "lost"
    assert [] == [r for r, n in rows.items() if n > 1], "duplicated rows"
    assert [] == [s for s, n in staged.seq_counts.items() if n > 1], "duplicated sequences"
    # Each acknowledged row sits at the stream sequence its PubAck named.
    assert {a.tag: a.seq for a in acked} == _row_seq(env)
    print(f"faults: {faults}; publisher reconnects: {reconnects}")


async def _stream_replicas(env: StageEnv) -> list[str]:
    """The stream's leader and followers, asked through the cluster URL list."""
    nc = await connect(env.cfg.bus)
    try:
        info = await nc.jetstream().stream_info(env.cfg.bus.stream.name)
        assert info.cluster is not None
        return [info.cluster.leader or "", *(r.name or "" for r in info.cluster.replicas or [])]
    finally:
        await nc.close()


def _staged_events(env: StageEnv) -> list[ChangeEvent]:
    """Every staged event line of every manifest, in manifest order."""
    out: list[ChangeEvent] = []
    for path in list_manifests(env.storage):
        for tf in read_manifest(env.storage, path).tables:
            out.extend(
                ChangeEvent.from_dict(orjson.loads(line))
                for line in env.storage.get(tf.path).splitlines()
            )
    return out


def _staged_row_ids(env: StageEnv) -> Counter[int]:
    return Counter(int(str((ev.after or {})["id"])) for ev in _staged_events(env))


def _row_seq(env: StageEnv) -> dict[int, int]:
    return {int(str((ev.after or {})["id"])): ev.seq for ev in _staged_events(env)}
