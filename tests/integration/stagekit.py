"""Helpers of the stage/bus integration tests (fixtures are in ``conftest.py``).

Every test gets its own CDC stream, DLQ stream, consumer and staging root on the module's
server (names suffixed with a counter), so tests never see each other's messages.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import orjson
import yaml
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import api

from tidelake.bus.connection import connect
from tidelake.bus.provision import provision
from tidelake.bus.server import EmbeddedNats
from tidelake.config import Config, load_config
from tidelake.runtime.processes import ChildProcess, tidelake_argv
from tidelake.runtime.storage import LocalStorage
from tidelake.stage.manifest import Manifest, list_manifests, read_manifest

T = TypeVar("T")
_ids = itertools.count(1)
REPO = Path(__file__).resolve().parents[2]


def canal_json(
    database: str,
    table: str,
    row_id: int,
    commit_ts: int,
    *,
    kind: str = "INSERT",
    pk: list[str] | None = None,
) -> bytes:
    """One TiCDC canal-json row message (with the TiDB extension ``_tidb.commitTs``)."""
    row = {"id": str(row_id), "name": f"name-{row_id}", "amount": f"{row_id}.50"}
    return orjson.dumps(
        {
            "id": 0,
            "database": database,
            "table": table,
            "pkNames": ["id"] if pk is None else pk,
            "isDdl": False,
            "type": kind,
            "es": 1_700_000_000_000 + row_id,
            "ts": 1_700_000_000_100 + row_id,
            "sql": "",
            "sqlType": {"id": -5, "name": 12, "amount": 3},
            "mysqlType": {"id": "bigint", "name": "varchar(64)", "amount": "decimal(10,2)"},
            "data": [row],
            "old": None,
            "_tidb": {"commitTs": commit_ts},
        }
    )


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@dataclass
class StagedLines:
    """Everything the manifests of a staging root name: lines per table and their seqs."""

    manifests: list[Manifest] = field(default_factory=list)
    rows_by_table: Counter[str] = field(default_factory=Counter)
    seq_counts: Counter[int] = field(default_factory=Counter)


@dataclass
class StageEnv:
    """One test's bus + staging: its config, helpers to publish, stage and inspect."""

    cfg: Config
    server: EmbeddedNats
    config_path: Path
    log_dir: Path

    @property
    def storage(self) -> LocalStorage:
        return LocalStorage(self.cfg.stage_root)

    async def client(self) -> Client:
        return await connect(self.cfg.bus, self.server.url)

    async def provision(self) -> None:
        await provision(self.cfg.bus, self.server.url)

    def subject(self, database: str, table: str) -> str:
        prefix = self.cfg.bus.stream.subjects[0].removesuffix(">")
        return f"{prefix}{database}.{table}"

    async def publish(self, messages: list[tuple[str, bytes]]) -> None:
        """Publish (pipelined) and wait for every PubAck."""
        nc = await self.client()
        try:
            js = nc.jetstream(publish_async_max_pending=20_000)
            futs = [await js.publish_async(subj, data) for subj, data in messages]
            acks = await asyncio.gather(*futs)
            assert all(a.stream == self.cfg.bus.stream.name for a in acks)
        finally:
            await nc.close()

    async def consumer_info(self) -> api.ConsumerInfo:
        nc = await self.client()
        try:
            info: api.ConsumerInfo = await nc.jetstream().consumer_info(
                self.cfg.bus.stream.name, self.cfg.bus.consumer.durable
            )
            return info
        finally:
            await nc.close()

    async def dlq_messages(self) -> list[Msg]:
        """Every message of the DLQ stream, in order (read with an ephemeral consumer)."""
        nc = await self.client()
        try:
            js = nc.jetstream()
            info = await js.stream_info(self.cfg.bus.dlq.name)
            if info.state.messages == 0:
                return []
            psub = await js.pull_subscribe(
                f"{self.cfg.bus.dlq.subject_prefix}.>", stream=self.cfg.bus.dlq.name
            )
            out: list[Msg] = []
            while len(out) < info.state.messages:
                out.extend(await psub.fetch(info.state.messages - len(out), timeout=5))
            return out
        finally:
            await nc.close()

    def run_cli(
        self, *args: str, env: Mapping[str, str] | None = None, timeout_s: float = 600
    ) -> subprocess.CompletedProcess[str]:
        """``tidelake <args>`` as a child process with this test's config (``env`` on top of
        this process's environment), its output captured."""
        return subprocess.run(
            tidelake_argv(*args),
            env={**os.environ, **(env or {}), "TIDELAKE_CONFIG": str(self.config_path)},
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )

    def staged(self) -> StagedLines:
        """Read every manifest and the files it names; check each line against its manifest."""
        out = StagedLines()
        storage = self.storage
        for path in list_manifests(storage):
            m = read_manifest(storage, path)
            out.manifests.append(m)
            assert m.received == m.staged + m.dead_lettered + m.skipped, m
            for tf in m.tables:
                lines = storage.get(tf.path).splitlines()
                assert len(lines) == tf.events, tf
                for line in lines:
                    ev = orjson.loads(line)
                    assert m.seq_first <= ev["seq"] <= m.seq_last, (ev["seq"], m.name)
                    out.seq_counts[ev["seq"]] += 1
                out.rows_by_table[tf.table_id] += tf.events
        return out

    def spawn_stager(
        self,
        *,
        once: bool,
        crash_at: str | None = None,
        name: str = "stager",
        extra_env: dict[str, str] | None = None,
    ) -> ChildProcess:
        """``python -m tidelake.cli stage [--once]`` as a child process, logging to a file;
        no ``TIDELAKE_…`` variable of the test's environment reaches it."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("TIDELAKE_")}
        env["TIDELAKE_CONFIG"] = str(self.config_path)
        if crash_at is not None:
            env["TEST_TIDELAKE_CRASH_AT"] = crash_at
        env.update(extra_env or {})
        argv = tidelake_argv("stage", *(["--once"] if once else []))
        proc = ChildProcess(
            name, argv, log_path=self.log_dir / f"{name}.log", base_env=env, cwd=REPO
        )
        return proc.start()

    def log_text(self, name: str = "stager") -> str:
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""


def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def stop_process(proc: ChildProcess, timeout_s: float = 20) -> int | None:
    """SIGTERM (after SIGCONT, for a paused one), then SIGKILL; the exit status."""
    return proc.stop(timeout_s)


def make_stage_env(
    server: EmbeddedNats, home: Path, overrides: dict[str, Any] | None = None
) -> StageEnv:
    n = next(_ids)
    data: dict[str, Any] = {
        "home": str(home),
        "bus": {
            "url": server.url,
            "stream": {"name": f"CDC_T{n}", "subjects": [f"cdc{n}.>"]},
            "dlq": {"name": f"DLQ_T{n}", "subject_prefix": f"dlq{n}"},
            "consumer": {"durable": f"stager-t{n}", "ack_wait_s": 30},
        },
        "stage": {"max_age_s": 0.5},
    }
    for section, values in (overrides or {}).items():
        if isinstance(values, dict) and isinstance(data.get(section), dict):
            for k, v in values.items():
                if isinstance(v, dict) and isinstance(data[section].get(k), dict):
                    data[section][k].update(v)
                else:
                    data[section][k] = v
        else:
            data[section] = values
    home.mkdir(parents=True, exist_ok=True)
    config_path = home / "config.yaml"
    config_path.write_text(yaml.safe_dump(data))
    cfg = load_config(config_path, environ={})
    log_dir = home / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    env = StageEnv(cfg=cfg, server=server, config_path=config_path, log_dir=log_dir)
    run(env.provision())
    return env
