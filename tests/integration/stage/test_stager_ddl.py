"""A DDL message cuts the batch in the running stager; ``stage`` without a bus URL refuses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from stagekit import StageEnv, canal_json, run

from tidelake.runtime.storage import LocalStorage
from tidelake.stage.consumer import Stager

pytestmark = pytest.mark.integration


def _ddl_message(commit_ts: int) -> bytes:
    return orjson.dumps(
        {"id": 0, "database": "shop", "table": "orders", "pkNames": None, "isDdl": True,
         "type": "ALTER", "es": 1, "ts": 2, "sql": "ALTER TABLE orders ADD COLUMN note TEXT",
         "sqlType": None, "mysqlType": None, "data": None, "old": None,
         "_tidb": {"commitTs": commit_ts}}
    )  # fmt: skip


async def _stage_once(env: StageEnv) -> None:
    nc = await env.client()
    try:
        await Stager(nc, env.cfg.bus, env.cfg.stage, LocalStorage(env.cfg.stage_root)).run(
            once=True
        )
    finally:
        await nc.close()


def test_ddl_is_the_last_event_of_its_batch(stage_env: StageEnv) -> None:
    """Rows before the ALTER and rows after it land in different manifests; the first one
    ends with the DDL and lists it."""
    subject = stage_env.subject("shop", "orders")
    messages = [(subject, canal_json("shop", "orders", i, 100 + i)) for i in range(5)]
    messages.append((subject, _ddl_message(200)))
    messages += [(subject, canal_json("shop", "orders", i, 300 + i)) for i in range(5, 8)]
    run(stage_env.publish(messages))

    run(_stage_once(stage_env))

    staged = stage_env.staged()
    first, second = staged.manifests
    assert (first.seq_first, first.seq_last, second.seq_first, second.seq_last) == (1, 6, 7, 9)
    assert [d["ddl_type"] for d in first.ddl] == ["ALTER"]
    assert second.ddl == ()
    lines = stage_env.storage.get(first.tables[0].path).splitlines()
    assert orjson.loads(lines[-1])["op"] == "ddl"
    assert orjson.loads(lines[-1])["seq"] == 6


def test_stage_without_a_bus_url_runs_on_the_homes_embedded_bus(tmp_path: Path) -> None:
    """``tidelake stage --once`` with no bus.url and no recorded bus starts the home's embedded
    nats-server itself (as ``run`` would), stages what is there (nothing), and on its clean
    exit stops that server and removes its record (tests/integration/bus/test_second_shell.py
    covers the record while it runs)."""
    home = tmp_path / "home"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TIDELAKE_HOME": str(home)}
    proc = subprocess.run(
        [sys.executable, "-m", "tidelake.cli", "stage", "--once"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert 0 == proc.returncode, proc.stderr[-2000:]
    assert (True, False) == ((home / "staging").is_dir(), (home / "bus.json").exists())
