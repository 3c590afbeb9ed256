"""``tidelake table skip-ddl``: it names the DDL the table is paused on, or refuses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson

from tidelake.lake.ledger import Ledger


def _tidelake(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TIDELAKE_HOME": str(home)}
    env.pop("TIDELAKE_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "tidelake.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


def _lake_table(home: Path, database: str = "shop", table: str = "orders") -> None:
    """A table the lake holds (what ``discover_tables`` finds), so the verbs know it."""
    hoodie = home / "lake" / database / table / ".hoodie"
    hoodie.mkdir(parents=True)
    (hoodie / "hoodie.properties").write_text("hoodie.table.name=shop_orders\n")


def test_skip_ddl_writes_a_skip_request_for_the_blocked_ddls_sequence(tmp_path: Path) -> None:
    """With the table in ddl_blocked.json, control.json gets skip_ddl with that DDL's stream
    sequence (which the ingest matches against the DDL before skipping it)."""
    state = tmp_path / "lake" / "_tidelake"
    state.mkdir(parents=True)
    blocked = {"shop.orders": {"seq": 42, "position": "x", "ddl": "ALTER …", "reason": "r"}}
    (state / "ddl_blocked.json").write_bytes(orjson.dumps(blocked))
    proc = _tidelake(tmp_path, "table", "skip-ddl", "shop.orders")
    assert 0 == proc.returncode, proc.stderr
    assert "stream sequence 42" in proc.stdout
    assert 42 == Ledger(state).skipped_ddl_seq("shop.orders")
    assert "skip_ddl" == Ledger(state).requests()["shop.orders"].action


def test_skip_ddl_refuses_a_table_not_paused_on_a_ddl(tmp_path: Path) -> None:
    """Nothing to skip: exit 2 with the reason, and no request is written."""
    _lake_table(tmp_path)
    proc = _tidelake(tmp_path, "table", "skip-ddl", "shop.orders")
    assert 2 == proc.returncode
    assert "not paused on a DDL" in proc.stderr
    assert {} == Ledger(tmp_path / "lake" / "_tidelake").requests()


def test_pause_and_resume_record_their_requests_and_a_bare_name_exits_2(tmp_path: Path) -> None:
    """``table pause`` then ``table resume`` leave the last request in control.json; a table
    named without its database is refused with exit 2 and nothing written."""
    state = tmp_path / "lake" / "_tidelake"
    _lake_table(tmp_path)
    refused = _tidelake(tmp_path, "table", "pause", "orders")
    assert 2 == refused.returncode
    assert {} == Ledger(state).requests()
    paused = _tidelake(tmp_path, "table", "pause", "shop.orders", "--reason", "backfill")
    assert 0 == paused.returncode, paused.stderr
    assert "pause of shop.orders requested at" in paused.stdout
    assert ("pause", "backfill") == (
        Ledger(state).requests()["shop.orders"].action,
        Ledger(state).requests()["shop.orders"].reason,
    )
    resumed = _tidelake(tmp_path, "table", "resume", "shop.orders")
    assert 0 == resumed.returncode, resumed.stderr
    assert "resume of shop.orders requested at" in resumed.stdout
    assert "resume" == Ledger(state).requests()["shop.orders"].action


def test_table_verbs_refuse_an_unknown_table_naming_the_known_ones(tmp_path: Path) -> None:
    """``table pause|resume|skip-ddl shop.nosuch`` exit 2 with "unknown table shop.nosuch;
    known: …" (the lake's tables and those paused or blocked), and write no request."""
    _lake_table(tmp_path)
    state = tmp_path / "lake" / "_tidelake"
    state.mkdir(parents=True)
    blocked = {"shop.items": {"seq": 7, "position": "x", "ddl": "ALTER …", "reason": "r"}}
    (state / "ddl_blocked.json").write_bytes(orjson.dumps(blocked))
    expected = [(2, "unknown table shop.nosuch; known: shop.items, shop.orders")] * 3
    actual = []
    for verb in ("pause", "resume", "skip-ddl"):
        proc = _tidelake(tmp_path, "table", verb, "shop.nosuch")
        actual.append((proc.returncode, proc.stderr.strip()))
    assert expected == actual
    assert {} == Ledger(state).requests()
