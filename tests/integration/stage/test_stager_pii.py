"""PII masking in the running stager: clear values never reach a staged file; a rule on a
primary key dead-letters the message with a reason naming the fix."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from stagekit import StageEnv, run

from tidelake.bus import dlq

pytestmark = pytest.mark.integration

KEY = "pii-key-from-env-only"
EMAIL = "ada.lovelace@example.com"
SSN = "123-45-6789"


def _customer(row_id: int, commit_ts: int, table: str = "customers") -> bytes:
    return orjson.dumps(
        {
            "id": 0,
            "database": "shop",
            "table": table,
            "pkNames": ["id"],
            "isDdl": False,
            "type": "INSERT",
            "es": 1,
            "ts": 2,
            "sql": "",
            "sqlType": {},
            "mysqlType": {"id": "bigint", "email": "varchar(64)", "ssn": "char(11)"},
            "data": [{"id": str(row_id), "email": EMAIL, "ssn": SSN}],
            "old": None,
            "_tidb": {"commitTs": commit_ts},
        }
    )


def test_stager_hashes_and_masks_before_writing_and_refuses_a_masked_key(
    stage_env_factory: Callable[..., StageEnv],
) -> None:
    """shop.customers email is the keyed HMAC and ssn keeps its last four in the staged
    file; no staged byte holds the clear values; shop.accounts (which masks its key id)
    goes to the DLQ with the pii reason."""
    env = stage_env_factory(
        stage={
            "max_age_s": 0.3,
            "pii": {
                "shop.customers": {"email": "hash", "ssn": "mask"},
                "shop.accounts": {"id": "mask"},
            },
        }
    )
    run(
        env.publish(
            [
                (env.subject("shop", "customers"), _customer(1, 100 << 18)),
                (env.subject("shop", "accounts"), _customer(2, 101 << 18, table="accounts")),
            ]
        )
    )
    proc = env.spawn_stager(once=True, extra_env={"TIDELAKE_STAGE__PII_KEY": KEY})
    assert 0 == proc.wait(120), env.log_text()

    staged = env.staged()
    assert {"shop.customers": 1} == dict(staged.rows_by_table)
    (manifest,) = staged.manifests
    (table_file,) = manifest.tables
    event = orjson.loads(env.storage.get(table_file.path))
    digest = hmac.new(KEY.encode(), EMAIL.encode(), hashlib.sha256).hexdigest()
    assert {"id": "1", "email": digest, "ssn": "*******6789"} == event["after"]
    root = Path(env.cfg.stage_root)
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert EMAIL.encode() not in data, path
            assert SSN.encode() not in data, path
            assert KEY.encode() not in data, path
    assert KEY not in env.log_text()

    (letter,) = run(env.dlq_messages())
    assert (letter.headers or {})[dlq.HEADER_REASON].startswith(
        "pii: stage.pii masks id of shop.accounts, its primary key"
    )
