"""Secrets given to the pipeline through the environment never reach a file or an output.

The stager and the ingest run as processes against a nats-server that requires a password,
with every kind of secret tidelake takes set in their environment (NATS password, PII
hashing key, API token, capture password). Afterwards every file under the pipeline's home
(staging files and manifests, the Hudi tables with their commit metadata, logs, heartbeats,
cursor, the NATS store) and everything the processes and the operator verbs (``status
--json``, ``config check``, ``dlq list``) printed is searched for each secret. The PII rule is
checked on the way: no clear e-mail address of the hashed column is staged or in the lake.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tidelake.bus.connection import connect
from tidelake.bus.server import EmbeddedNats
from tidelake.config import Config, load_config
from tidelake.pipeline.demo import publish_workload
from tidelake.pipeline.processes import StageProcess, tidelake_argv
from tidelake.workload.orders import OrderWorkload, WorkloadSpec

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


async def _drained(cfg: Config) -> bool:
    nc = await connect(cfg.bus)
    try:
        info = await nc.jetstream().consumer_info(cfg.bus.stream.name, cfg.bus.consumer.durable)
        return not info.num_pending and not info.num_ack_pending
    finally:
        await nc.close()


def _run(argv: list[str], env: dict[str, str]) -> str:
    proc = subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=600, check=False, cwd=REPO
    )
    return f"{argv}\nexit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"


def test_no_secret_in_any_file_log_status_or_commit_metadata(tmp_path: Path) -> None:
    """Four env secrets, a full stage + ingest run and the operator verbs: none of the
    secrets appears in any file under home or in any output; hashed e-mails never land clear."""
    secret = {
        "TIDELAKE_BUS__AUTH__PASSWORD": "nats-" + secrets.token_hex(16),
        "TIDELAKE_STAGE__PII_KEY": "pii-" + secrets.token_hex(16),
        "TIDELAKE_API__TOKEN": "api-" + secrets.token_hex(16),
        "TIDELAKE_CAPTURE__PASSWORD": "db-" + secrets.token_hex(16),
    }
    conf = tmp_path / "server" / "nats.conf"
    conf.parent.mkdir()
    password = secret["TIDELAKE_BUS__AUTH__PASSWORD"]
    conf.write_text(f'authorization {{ user: tidelake, password: "{password}" }}\n')
    home = tmp_path / "home"
    server = EmbeddedNats(home / "nats", extra_args=["-c", str(conf)]).start()
    children: list[StageProcess] = []
    outputs: list[str] = []
    try:
        config_path = home / "config.yaml"
        config_path.write_text(
            yaml.safe_dump(
                {
                    "home": str(home),
                    "bus": {"url": server.url, "auth": {"user": "tidelake"}},
                    "stage": {"max_age_s": 0.3, "pii": {"shop.customers": {"email": "hash"}}},
                    "ingest": {"warm_up": False},
                    "lake": {"spark": {"master": "local[2]", "driver_memory": "1g"}},
                }
            )
        )
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("TIDELAKE_")},
            "TIDELAKE_CONFIG": str(config_path),
            **secret,
        }
        cfg = load_config(config_path, environ=env)
        stager = StageProcess("stager", tidelake_argv("stage"), env, home / "logs" / "stage.log")
        stager.start()
        children.append(stager)
        workload = OrderWorkload(WorkloadSpec(events=400, seed=5))
        asyncio.run(publish_workload(cfg, server.url, workload, rate=2_000))
        deadline = time.monotonic() + 120
        while not asyncio.run(_drained(cfg)):
            assert stager.alive(), stager.log_tail()
            assert time.monotonic() < deadline, "the stager did not drain the stream"
            time.sleep(0.5)
        stager.stop()
        python = [sys.executable, "-m", "tidelake.cli"]
        outputs.append(_run([*python, "ingest", "--once"], env))
        for verb in (["status", "--json"], ["config", "check"], ["dlq", "list"]):
            outputs.append(_run([*python, *verb], env))
    finally:
        for child in children:
            child.stop(timeout_s=30)
        server.stop()

    assert "exit 0" in outputs[0], outputs[0][-3000:]
    assert (home / "lake" / "shop" / "customers" / ".hoodie").is_dir()
    files = [p for p in home.rglob("*") if p.is_file()]
    assert len(files) > 20
    leaks = [
        f"{name} in {where}"
        for name, value in secret.items()
        for where, data in [(str(p), p.read_bytes()) for p in files]
        + [(f"output #{i}", o.encode()) for i, o in enumerate(outputs)]
        if value.encode() in data
    ]
    assert [] == leaks
    clear_emails = {
        str(row["email"]).encode()
        for row in workload.expected_rows()["shop.customers"]
        if row.get("email")
    }
    assert clear_emails
    kept = [home / "staging", home / "lake"]
    clear = [
        str(p)
        for base in kept
        for p in base.rglob("*")
        if p.is_file() and any(e in p.read_bytes() for e in clear_emails)
    ]
    assert [] == clear
