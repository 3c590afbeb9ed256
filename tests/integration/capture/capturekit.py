"""Capture integration helpers: the capture as a child process, the stream read back and folded.

The fold applies the decoded events of the CDC stream in position order, the way the lake's
ingest does (``formats/canal_json.py`` already splits a primary-key UPDATE into the old key's
DELETE and the new row), so "the stream folds to the source" means every change arrived, in
order, exactly once in effect.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml

from tidelake.bus.connection import connect
from tidelake.bus.scan import scan_stream
from tidelake.capture.mysql import point_key
from tidelake.capture.mysql_values import render
from tidelake.capture.position import PositionStore
from tidelake.config import load_config
from tidelake.events import ChangeEvent, Op
from tidelake.formats.canal_json import decode_object
from tidelake.pipeline.processes import StageProcess, tidelake_argv


@dataclass
class CaptureRun:
    """``tidelake capture`` as a child process with its own home and config."""

    home: Path
    nats_url: str
    source: str
    tables: list[str]
    password: str | None = None
    capture: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        self.config_path = self.home / "config.yaml"
        doc = {
            "home": str(self.home),
            "bus": {"url": self.nats_url},
            "capture": {"source": self.source, "tables": self.tables, **self.capture},
        }
        self.config_path.write_text(yaml.safe_dump(doc))
        env = {"TIDELAKE_CONFIG": str(self.config_path)}
        if self.password:
            env["TIDELAKE_CAPTURE__PASSWORD"] = self.password
        self.process = StageProcess(
            "capture", tidelake_argv("capture"), env, self.home / "capture.log"
        )

    @property
    def config(self) -> Any:
        return load_config(self.config_path, environ={})

    def position(self) -> dict[str, Any] | None:
        return PositionStore(self.config.capture_position_file).load()

    def start(self) -> CaptureRun:
        self.process.start()
        return self

    def wait_until(self, predicate: Callable[[dict[str, Any]], bool], timeout_s: float) -> None:
        """Until the saved position satisfies ``predicate``; the log on failure."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = self.position()
            if state is not None and predicate(state):
                return
            if not self.process.alive():
                raise AssertionError(f"capture exited:\n{self.process.log_tail(60)}")
            time.sleep(0.1)
        raise AssertionError(
            f"capture position {self.position()} not reached in {timeout_s}s:\n"
            + self.process.log_tail(40)
        )


def mariadb_caught_up(server: Any, run: CaptureRun, timeout_s: float = 60) -> None:
    """Until ``run`` streams and its saved binlog point reaches ``server``'s end as of the
    call (``SHOW MASTER STATUS``)."""
    conn = server.connect()
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
    conn.close()
    run.wait_until(
        lambda s: (
            s["phase"] == "streaming"
            and point_key((s["binlog"]["file"], s["binlog"]["pos"])) >= point_key((file, pos))
        ),
        timeout_s,
    )


async def _read_stream(url: str) -> list[tuple[int, str, bytes]]:
    cfg = load_config(None, environ={})
    nc = await connect(cfg.bus, url)
    try:
        js = nc.jetstream()
        info = await js.stream_info(cfg.bus.stream.name)
        return [
            (int(m.metadata.sequence.stream), m.headers["Nats-Msg-Id"], m.data)
            for m in await scan_stream(js, "cdc.>", int(info.state.messages))
        ]
    finally:
        await nc.close()


async def _count(url: str) -> int:
    cfg = load_config(None, environ={})
    nc = await connect(cfg.bus, url)
    try:
        info = await nc.jetstream().stream_info(cfg.bus.stream.name)
        return int(info.state.messages)
    finally:
        await nc.close()


def stream_count(url: str) -> int:
    """How many messages the CDC stream holds."""
    return asyncio.run(_count(url))


def stream_messages(url: str) -> list[tuple[int, str, bytes]]:
    """Every message of the CDC stream: (stream sequence, Nats-Msg-Id, payload)."""
    return asyncio.run(_read_stream(url))


def decoded(messages: list[tuple[int, str, bytes]]) -> list[ChangeEvent]:
    events: list[ChangeEvent] = []
    for seq, _, payload in messages:
        events.extend(decode_object(orjson.loads(payload), seq=seq).events)
    return events


Key = tuple[str | None, ...]


def fold(events: list[ChangeEvent], table_id: str) -> dict[Key, dict[str, Any]]:
    """The rows a table ends with after applying its events in position order."""
    rows: dict[Key, dict[str, Any]] = {}
    mine = [e for e in events if e.table_id == table_id and e.op is not Op.DDL]
    for e in sorted(mine, key=lambda e: e.position):
        key = tuple((e.key or {}).values())
        if e.op is Op.DELETE:
            rows.pop(key, None)
        else:
            rows[key] = dict(e.after or {})
    return rows


def row_differences(
    expected: dict[Key, dict[str, Any]], actual: dict[Key, dict[str, Any]], show: int = 5
) -> str:
    """Empty when both tables hold the same rows, else a short account of how they differ
    (a plain ``==`` on 100,000 rows makes pytest diff them for many minutes)."""
    missing = [k for k in expected if k not in actual]
    extra = [k for k in actual if k not in expected]
    changed = [k for k in expected if k in actual and expected[k] != actual[k]]
    if not (missing or extra or changed):
        return ""
    lines = [f"{len(missing)} missing, {len(extra)} extra, {len(changed)} differing rows"]
    lines += [f"missing {k}: {expected[k]}" for k in sorted(missing)[:show]]
    lines += [f"extra {k}: {actual[k]}" for k in sorted(extra)[:show]]
    lines += [
        f"differs {k}: expected {expected[k]} got {actual[k]}" for k in sorted(changed)[:show]
    ]
    return "\n".join(lines)


def mysql_rows(conn: Any, table_id: str) -> dict[Key, dict[str, Any]]:
    """The live MySQL table as canal text, keyed by primary key."""
    database, table = table_id.split(".")
    with conn.cursor() as cur:
        cur.execute(
            "SELECT COLUMN_NAME, COLUMN_TYPE, COLUMN_KEY FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
            (database, table),
        )
        cols = cur.fetchall()
        cur.execute(f"SELECT * FROM {database}.{table}")
        data = cur.fetchall()
    pk = [c[0] for c in cols if c[2] == "PRI"]
    out = {}
    for values in data:
        row = {c[0]: render(v, c[1]) for c, v in zip(cols, values, strict=True)}
        out[tuple(row[c] for c in pk)] = row
    return out


def postgres_rows(conn: Any, table_id: str, pk: list[str]) -> dict[Key, dict[str, Any]]:
    """The live PostgreSQL table as pgoutput text, keyed by primary key."""
    with conn.cursor() as cur:
        cur.execute(f"SELECT * FROM {table_id} LIMIT 0")
        names = [d[0] for d in cur.description]
        cur.execute(f"SELECT {', '.join(f'{n}::text' for n in names)} FROM {table_id}")
        data = cur.fetchall()
    out = {}
    for values in data:
        row = dict(zip(names, values, strict=True))
        out[tuple(row[c] for c in pk)] = row
    return out


class Writer(threading.Thread):
    """Random single-row transactions against ``table`` (id, v, n) until stopped.

    Updates, deletes, inserts of new ids and primary-key changes, on ids in ``[1, id_space]``;
    every statement's errors (a key taken meanwhile) roll the transaction back.
    """

    def __init__(
        self,
        connect: Callable[[], Any],
        table: str,
        id_space: int,
        seed: int,
        limit: int = 1_000_000,
        pause_s: float = 0.002,
    ) -> None:
        super().__init__(daemon=True)
        self.limit = limit
        self.pause_s = pause_s
        self.connect = connect
        self.table = table
        self.rng = random.Random(seed)
        self.id_space = id_space
        self.next_id = id_space + 1
        self.stop = threading.Event()
        self.committed = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        conn = self.connect()
        try:
            cur = conn.cursor()
            while not self.stop.is_set() and self.committed < self.limit:
                r = self.rng.random()
                target = self.rng.randint(1, self.id_space)
                try:
                    if r < 0.5:
                        cur.execute(
                            f"UPDATE {self.table} SET n = n + 1, v = %s WHERE id = %s",
                            (f"u{self.committed}", target),
                        )
                    elif r < 0.7:
                        cur.execute(f"DELETE FROM {self.table} WHERE id = %s", (target,))
                    elif r < 0.9:
                        cur.execute(
                            f"INSERT INTO {self.table} (id, v, n) VALUES (%s, %s, 0)",
                            (self.next_id, "new"),
                        )
                        self.next_id += 1
                    else:
                        cur.execute(
                            f"UPDATE {self.table} SET id = %s WHERE id = %s",
                            (self.next_id, target),
                        )
                        self.next_id += 1
                    conn.commit()
                    self.committed += 1
                except Exception:
                    conn.rollback()
                time.sleep(self.pause_s)
        except BaseException as exc:
            self.error = exc
        finally:
            conn.close()
