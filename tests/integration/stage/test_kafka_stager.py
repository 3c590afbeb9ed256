"""The stager on a Kafka bus (``bus.kind: kafka``; stage/kafka_consumer.py, bus/kafka.py) on a
real broker (Kafka 4.1.1, KRaft) with real stager processes:

* killed -9 between a manifest and its offset commit, then two stagers in one group while
  messages keep coming (a rebalance), the one holding the partition killed -9: every message
  is staged or dead-lettered, a message staged twice only in two manifests whose ranges
  overlap, each manifest's counts reconcile, the committed offset ends at the topic's end;
* undecodable messages land in the dead-letter topic with their reason and sequence;
* records deleted by retention before they were staged stop the stager with an error naming
  them, instead of a silent skip;
* ``tidelake status`` reads the topic, the group's offset and the dead-letter topic;
* ``tidelake replay --from-seq`` moves the group back and the stager stages from there again.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from stagekit import REPO, StagedLines, canal_json, run, stop_process, wait_for

from tidelake.bus import dlq
from tidelake.bus import kafka as kbus
from tidelake.capture.kafka_publisher import KafkaPublisher
from tidelake.config import Config, load_config
from tidelake.pipeline import kafka
from tidelake.pipeline.kafka import KafkaBroker
from tidelake.runtime.processes import ChildProcess, tidelake_argv
from tidelake.runtime.storage import LocalStorage
from tidelake.stage.manifest import list_manifests, read_manifest

aiokafka = pytest.importorskip("aiokafka")

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not kafka.available(),
        reason="Kafka is installed by scripts/setup with TIDELAKE_SETUP_TESTS=1 (make test)",
    ),
]

TABLES = ("orders", "customers", "payments")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path_factory.mktemp("kafka")) as server:
        yield server


class KafkaStageEnv:
    """One test's CDC topic, dead-letter topic, group and staging root on the broker."""

    def __init__(self, broker: KafkaBroker, home: Path, name: str) -> None:
        data: dict[str, Any] = {
            "home": str(home),
            "bus": {
                "kind": "kafka",
                "kafka": {
                    "bootstrap_servers": broker.bootstrap_servers,
                    "topic": f"{name}.cdc",
                    "dlq_topic": f"{name}.dlq",
                    "group_id": f"{name}-stagers",
                },
            },
            "stage": {"max_events": 400, "max_age_s": 0.3},
        }
        home.mkdir(parents=True, exist_ok=True)
        self.config_path = home / "config.yaml"
        self.config_path.write_text(yaml.safe_dump(data))
        self.cfg: Config = load_config(self.config_path, environ={})
        self.log_dir = home / "logs"
        self.sent = 0

    def publish(self, payloads: list[tuple[str, bytes]]) -> None:
        async def go() -> None:
            async with await KafkaPublisher.open(self.cfg.bus) as pub:
                for subject, payload in payloads:
                    self.sent += 1
                    await pub.publish(subject, payload, f"test-{self.sent}")
                await pub.durable()

        run(go())

    def rows(self, first: int, n: int) -> list[tuple[str, bytes]]:
        return [
            (f"cdc.shop.{TABLES[i % 3]}", canal_json("shop", TABLES[i % 3], i, 440 * 10**15 + i))
            for i in range(first, first + n)
        ]

    def state(self) -> kbus.TopicState:
        return run(kbus.topic_state(self.cfg.bus))

    def env(self) -> dict[str, str]:
        """This process's environment without ``TIDELAKE_…`` settings, pointed at the config."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("TIDELAKE_")}
        env["TIDELAKE_CONFIG"] = str(self.config_path)
        return env

    def stager(
        self,
        name: str,
        *,
        once: bool = False,
        crash_at: str | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> ChildProcess:
        env = self.env() | (extra_env or {})
        if crash_at is not None:
            env["TEST_TIDELAKE_CRASH_AT"] = crash_at
        argv = tidelake_argv("stage", *(["--once"] if once else []))
        return ChildProcess(
            name, argv, log_path=self.log_dir / f"{name}.log", base_env=env, cwd=REPO
        ).start()

    def log(self, name: str) -> str:
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def staged(self) -> StagedLines:
        out = StagedLines()
        storage = LocalStorage(self.cfg.stage_root)
        for path in list_manifests(storage):
            m = read_manifest(storage, path)
            out.manifests.append(m)
            assert m.received == m.staged + m.dead_lettered + m.skipped, m
            for tf in m.tables:
                for line in storage.get(tf.path).splitlines():
                    seq = orjson.loads(line)["seq"]
                    assert m.seq_first <= seq <= m.seq_last, (seq, m.name)
                    out.seq_counts[seq] += 1
                out.rows_by_table[tf.table_id] += tf.events
        return out

    def dead_letters(self) -> list[kbus.Record]:
        return run(kbus.scan_topic(self.cfg.bus, self.cfg.bus.kafka.dlq_topic))


@pytest.fixture
def kenv(broker: KafkaBroker, tmp_path: Path, request: pytest.FixtureRequest) -> KafkaStageEnv:
    name = request.node.name.replace("[", "-").replace("]", "").replace("_", "-")[:60]
    return KafkaStageEnv(broker, tmp_path / "home", name)


def _exit_status(proc: ChildProcess, timeout_s: float = 90) -> int | None:
    """Wait for a ``--once`` stager to finish by itself; its exit status."""
    wait_for(lambda: not proc.alive(), timeout_s, f"{proc.name} to finish")
    return proc.returncode()


def _holder(kenv: KafkaStageEnv, names: tuple[str, ...]) -> str | None:
    for name in names:
        events = [
            line
            for line in kenv.log(name).splitlines()
            if "kafka partition assigned" in line or "kafka partition revoked" in line
        ]
        if events and "assigned" in events[-1]:
            return name
    return None


def test_kills_and_a_rebalance_lose_nothing_and_duplicate_only_across_manifests(
    kenv: KafkaStageEnv,
) -> None:
    # Sequences 700 and 1501 (1,001 messages come before the second lot).
    bad = {700: b"{not json", 1501: b'{"type": "INSERT"}'}
    first = kenv.rows(0, 1000)
    first.insert(699, ("cdc.shop.orders", bad[700]))
    kenv.publish(first)
    # Killed -9 after its first manifest, before the offset commit: staged again later.
    crashed = kenv.stager("crashed", crash_at="after_manifest")
    wait_for(lambda: not crashed.alive(), 120, "the stager killed by its crash hook")
    assert crashed.returncode() == -9
    assert len(list_manifests(LocalStorage(kenv.cfg.stage_root))) >= 1

    a = kenv.stager("a")
    wait_for(lambda: _holder(kenv, ("a",)) == "a", 60, "stager a holding the partition")
    b = kenv.stager("b")  # joins the group: a rebalance while messages keep coming
    second = kenv.rows(1000, 1000)
    second.insert(499, ("cdc.shop.orders", bad[1501]))
    kenv.publish(second)
    wait_for(lambda: "kafka partition revoked" in kenv.log("a"), 60, "the rebalance")
    holder = None
    wait_for(lambda: _holder(kenv, ("a", "b")) is not None, 60, "a stager holding it again")
    holder = _holder(kenv, ("a", "b"))
    victim = a if holder == "a" else b
    victim.kill()  # the holder dies: the group gives the partition to the other one
    survivor = b if victim is a else a
    kenv.publish(kenv.rows(2000, 500))
    total = kenv.sent
    wait_for(lambda: kenv.state().committed == total, 120, "every message staged")
    for proc in (survivor,):
        assert stop_process(proc) == 0

    staged = kenv.staged()
    dead = {int(r.headers[dlq.HEADER_STREAM_SEQ]) for r in kenv.dead_letters()}
    assert dead == set(bad), "each undecodable message is in the dead-letter topic"
    assert set(staged.seq_counts) == set(range(1, total + 1)) - set(bad), "a message was lost"
    for seq, count in staged.seq_counts.items():
        if count > 1:
            holders = [m for m in staged.manifests if m.seq_first <= seq <= m.seq_last]
            assert len(holders) >= count, f"seq {seq} duplicated inside one manifest"
    assert sum(staged.rows_by_table.values()) >= total - len(bad)
    reasons = {r.headers[dlq.HEADER_REASON] for r in kenv.dead_letters()}
    assert any("not JSON" in reason for reason in reasons), reasons


def test_records_deleted_before_staging_stop_the_stager_naming_them(
    kenv: KafkaStageEnv,
) -> None:
    kenv.publish(kenv.rows(0, 10))
    assert _exit_status(kenv.stager("first", once=True)) == 0
    assert kenv.state().committed == 10
    kenv.publish(kenv.rows(10, 10))

    async def delete_below(offset: int) -> None:
        from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete

        admin = AIOKafkaAdminClient(bootstrap_servers=kenv.cfg.bus.kafka.bootstrap_servers)
        await admin.start()
        try:
            tp = aiokafka.TopicPartition(kenv.cfg.bus.kafka.topic, 0)
            await admin.delete_records({tp: RecordsToDelete(offset)})
        finally:
            await admin.close()

    run(delete_below(15))  # sequences 11..15 go before any stager saw them
    assert _exit_status(kenv.stager("late", once=True)) != 0
    assert "sequences 11..15" in kenv.log("late")
    assert kenv.state().committed == 10, "nothing was skipped past the lost records"


def test_replay_from_a_sequence_stages_from_there_again(kenv: KafkaStageEnv) -> None:
    kenv.publish(kenv.rows(0, 50))
    assert _exit_status(kenv.stager("first", once=True)) == 0
    before = kenv.staged()
    assert set(before.seq_counts) == set(range(1, 51))
    status = subprocess.run(
        [sys.executable, "-m", "tidelake.cli", "status", "--json"],
        env=kenv.env(),
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    bus = orjson.loads(status.stdout)["bus"]
    assert (True, 50, 50, 0, 0) == (
        bus["up"],
        bus["stream"]["last_seq"],
        bus["consumer"]["ack_floor_seq"],
        bus["consumer"]["pending"],
        bus["dlq"]["messages"],
    ), bus

    out = subprocess.run(
        [sys.executable, "-m", "tidelake.cli", "replay", "--from-seq", "31", "--json"],
        env=kenv.env(),
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    )
    summary = orjson.loads(out.stdout.strip().splitlines()[-1])
    assert (summary["from_seq"], summary["to_seq"], summary["messages"]) == (31, 50, 20)
    assert kenv.state().committed == 30
    assert _exit_status(kenv.stager("again", once=True)) == 0
    after = kenv.staged()
    assert {s for s, c in after.seq_counts.items() if c == 2} == set(range(31, 51))


def test_a_broker_that_wants_sasl_gets_it_and_refuses_a_wrong_password(
    tmp_path: Path,
) -> None:
    """``bus.kafka.sasl``: every client (topics, publisher, stager, status) authenticates; the
    password comes from the environment, a wrong one stops the stager with Kafka's refusal,
    and the password is written nowhere."""
    secret = "s3cret-for-the-test"
    with KafkaBroker(tmp_path / "kafka", sasl_users={"tidelake": secret}) as broker:
        kenv = KafkaStageEnv(broker, tmp_path / "home", "sasl")
        doc = yaml.safe_load(kenv.config_path.read_text())
        doc["bus"]["kafka"]["sasl"] = {"mechanism": "PLAIN", "username": "tidelake"}
        kenv.config_path.write_text(yaml.safe_dump(doc))
        env = {"TIDELAKE_BUS__KAFKA__SASL__PASSWORD": secret}
        kenv.cfg = load_config(kenv.config_path, environ=env)
        kenv.publish(kenv.rows(0, 30))
        assert 0 == _exit_status(kenv.stager("right", once=True, extra_env=env))
        wrong = {"TIDELAKE_BUS__KAFKA__SASL__PASSWORD": "wrong"}
        assert 0 != _exit_status(kenv.stager("wrong", once=True, extra_env=wrong))
        assert set(kenv.staged().seq_counts) == set(range(1, 31))
        assert "refused the SASL credentials of user 'tidelake'" in kenv.log("wrong")
        for name in ("right", "wrong"):
            assert secret not in kenv.log(name)
