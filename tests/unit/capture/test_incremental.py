"""The incremental-snapshot engine's window logic, with a fake chunk source of our own.

The fake source holds a table in memory and a log of "transactions" (integers, like binlog
points): a chunk read at log point ``w`` holds the table as of ``w``; a streamed change with
mark ``m`` is seen by it when ``m < w``; the stream has passed it at point ``>= w``.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import orjson

from tidelake.capture.canal import CanalEncoder
from tidelake.capture.incremental import (
    MAX_READ_FAILURES,
    MESSAGE_BYTES,
    MESSAGE_ROWS,
    REQUESTS_PREFIX,
    RESTART_GAP,
    ChunkResult,
    ChunkSpec,
    IncrementalSnapshots,
    Plan,
    message_batches,
    range_plan,
    request_path,
    request_record,
    snapshotted_at_start,
)
from tidelake.events import Op, Position
from tidelake.formats.canal_json import decode_object
from tidelake.runtime.storage import LocalStorage


class FakeSource:
    """An in-memory table ``id -> value`` and a log point; reads happen at ``self.point``."""

    def __init__(self, rows: dict[int, str], *, keyset: bool = False) -> None:
        self.rows = dict(rows)
        self.point = 100
        self.keyset = keyset
        self.reads: list[ChunkSpec] = []
        self.lock = threading.Lock()
        #: A read point to return once instead of the current one (to make a read invalid).
        self.stale_point: int | None = None

    def plan_table(self, table: str, chunk_rows: int) -> Plan:
        if self.keyset:
            return Plan("keyset", rows_total=len(self.rows))
        return range_plan(min(self.rows), max(self.rows), len(self.rows), chunk_rows)

    def read_chunk(self, spec: ChunkSpec, chunk_rows: int) -> ChunkResult:
        with self.lock:
            self.reads.append(spec)
            point = self.point
            if self.stale_point is not None:
                point, self.stale_point = self.stale_point, None
            if spec.keyset:
                after = int(spec.after[0]) if spec.after else None
                ids = sorted(i for i in self.rows if after is None or i > after)[:chunk_rows]
            else:
                ids = sorted(
                    i
                    for i in self.rows
                    if (spec.lo is None or i >= spec.lo) and (spec.hi is None or i < spec.hi)
                )
            rows = [((str(i),), {"id": str(i), "v": self.rows[i]}) for i in ids]
        last = [rows[-1][0][0]] if rows else None
        return ChunkResult(
            spec, rows, point, last=last, final=spec.keyset and len(rows) < chunk_rows
        )

    def sees(self, watermark: Any, mark: Any) -> bool:
        return bool(mark < watermark)

    def passed(self, watermark: Any, point: Any) -> bool:
        return bool(point >= watermark)

    def valid(self, watermark: Any, floor: Any) -> bool:
        return floor is None or bool(watermark >= floor)

    def close_worker(self) -> None:
        """Nothing to release."""


def _engine(source: FakeSource, **kw: Any) -> IncrementalSnapshots:
    opts: dict[str, Any] = {"workers": 2, "chunk_rows": 10, "captured": lambda t: t == "db.t"}
    opts.update(kw)
    return IncrementalSnapshots(source, **opts)


def _emit_all(engine: IncrementalSnapshots, point: int, timeout_s: float = 10) -> list[Any]:
    """Tick at ``point`` until nothing is queued; every emitted (seq, key, value)."""
    out = []
    deadline = time.monotonic() + timeout_s
    while engine.queue and time.monotonic() < deadline:
        for result in engine.tick(point):
            out += [(engine.next_seq(), key, data["v"]) for key, data in result.rows]
            engine.emitted(result)
        time.sleep(0.005)
    assert not engine.queue, engine.snapshot_status()
    return out


def test_range_plan_covers_the_key_span_in_chunks_of_about_chunk_rows() -> None:
    """95 keys in [1, 95] with 10 rows a chunk: 10 ranges of width 10; no estimate (0)
    counts the span as dense; an empty table is one chunk."""
    plan = range_plan(1, 95, 95, 10)
    assert (plan.count, plan.lo, plan.step) == (10, 1, 10)
    assert range_plan(1, 1000, 0, 100).count == 10
    assert range_plan(None, None, 0, 100).count == 1


def test_a_new_table_is_read_in_chunks_and_every_row_emitted_once() -> None:
    """A table not in the saved list is queued at start, read by range chunks (first and last
    open-ended) and emitted whole; then it counts as snapshotted and the status says done."""
    source = FakeSource({i: f"v{i}" for i in range(1, 96)})
    engine = _engine(source)
    engine.load({"seq": 5, "snapshotted": ["db.a"]}, ["db.a", "db.t"], fresh=False)
    assert engine.queue == ["db.t"]
    rows = _emit_all(engine, point=100)
    assert sorted(int(k[0]) for _, k, _ in rows) == list(range(1, 96))
    assert [s for s, _, _ in rows] == sorted(s for s, _, _ in rows)
    assert rows[0][0] > 5 + RESTART_GAP  # the restart gap: never an id emitted before
    assert {r.lo for r in source.reads if r.chunk == 0} == {None}
    assert {r.hi for r in source.reads if r.chunk == 9} == {None}
    status = engine.snapshot_status()["tables"]["db.t"]
    assert (status["state"], status["rows_done"], status["chunks_done"]) == ("done", 95, 10)
    assert "db.t" in engine.state()["snapshotted"]
    engine.close()


def test_which_starts_count_the_captured_tables_as_snapshotted() -> None:
    """A first start snapshots its tables itself (initial) or not at all (never); with
    ``incremental`` it queues them all; a resumed initial snapshot and a state saved before
    incremental snapshots count them as done; a streaming state keeps its own list."""
    assert snapshotted_at_start(None, "initial") is True
    assert snapshotted_at_start(None, "never") is True
    assert snapshotted_at_start(None, "incremental") is False
    for mode in ("initial", "incremental", "never"):
        assert snapshotted_at_start({"phase": "snapshot"}, mode) is True
        assert snapshotted_at_start({"phase": "streaming"}, mode) is True
        assert snapshotted_at_start({"phase": "streaming", "incremental": {}}, mode) is False
    engine = _engine(FakeSource({1: "v1"}))
    engine.load(None, ["db.a", "db.t"], fresh=snapshotted_at_start(None, "incremental"))
    assert engine.queue == ["db.a", "db.t"]
    engine.close()


def test_keys_changed_by_unseen_transactions_are_dropped_seen_ones_kept() -> None:
    """A chunk read at point 10 waits until the stream passes 10; of the keys the stream
    changed meanwhile, those changed by a transaction before 10 (seen by the read) stay, those
    changed at or after 10 (not seen: the stream holds a newer state) are dropped."""
    source = FakeSource({i: f"v{i}" for i in range(1, 6)})
    source.point = 10
    engine = _engine(source, workers=1, chunk_rows=100)
    engine.load(None, [], fresh=True)
    assert engine.request("db.t")
    deadline = time.monotonic() + 5
    while not source.reads and time.monotonic() < deadline:
        assert engine.tick(5) == []  # plan, then dispatch; nothing passes at 5
        time.sleep(0.005)
    assert "db.t" in engine.active  # the stream records the table's changes from now on
    engine.changed("db.t", ("2",), 7)  # committed before the read's point: in the chunk
    engine.changed("db.t", ("3",), 12)  # after it: the stream's row is newer
    engine.changed("db.t", ("4",), 15)
    emitted: list[Any] = []
    while not emitted and time.monotonic() < deadline:
        assert engine.tick(9) == []  # not passed yet
        time.sleep(0.005)
        emitted = engine.tick(10)
    assert [k for k, _ in emitted[0].rows] == [("1",), ("2",), ("5",)]
    engine.emitted(emitted[0])
    assert engine.snapshot_status()["tables"]["db.t"]["state"] == "done"
    assert "db.t" not in engine.active
    engine.close()


def test_a_read_that_missed_a_change_streamed_before_dispatch_is_read_again() -> None:
    """A read whose point lies below the stream's point at dispatch (a transaction already
    streamed but not visible to it) is not emitted: the chunk is read again."""
    source = FakeSource({1: "a", 2: "b"})
    source.point = 50
    source.stale_point = 40  # the first read sees less than the stream already had
    engine = _engine(source, workers=1, chunk_rows=100)
    engine.load(None, [], fresh=True)
    engine.request("db.t")
    rows = _emit_all(engine, point=50)
    assert len(source.reads) == 2
    assert sorted(v for _, _, v in rows) == ["a", "b"]
    engine.close()


def test_progress_survives_a_restart_and_only_unsaved_chunks_are_read_again() -> None:
    """The saved state holds the plan and the chunks emitted; a restart from it reads only
    the other chunks, and its sequence numbers start a RESTART_GAP above the saved one."""
    source = FakeSource({i: f"v{i}" for i in range(1, 41)})
    engine = _engine(source, workers=1)
    engine.load(None, [], fresh=True)
    engine.request("db.t")
    deadline = time.monotonic() + 5
    saved = None
    while saved is None and time.monotonic() < deadline:
        for result in engine.tick(100):
            engine.emitted(result)
            if result.spec.chunk == 1:
                saved = orjson.loads(orjson.dumps(engine.state()))  # as the file holds it
        time.sleep(0.005)
    engine.close()
    assert saved is not None
    done = saved["tables"]["db.t"]
    again = FakeSource(source.rows)
    restarted = _engine(again, workers=1)
    restarted.load(saved, ["db.t"], fresh=False)
    assert restarted.seq == saved["seq"] + RESTART_GAP
    _emit_all(restarted, point=100)
    reread = {s.chunk for s in again.reads}
    emitted_before = set(range(done["done_next"])) | set(done["done_extra"])
    assert reread == set(range(4)) - emitted_before
    assert restarted.snapshot_status()["tables"]["db.t"]["state"] == "done"
    restarted.close()


def test_keyset_tables_are_read_chunk_after_chunk() -> None:
    """A table without an integer first key column goes by keyset chunks, each after the
    last key of the one before, until a short chunk ends it."""
    source = FakeSource({i: f"v{i}" for i in range(1, 26)}, keyset=True)
    engine = _engine(source)
    engine.load(None, [], fresh=True)
    engine.request("db.t")
    rows = _emit_all(engine, point=100)
    assert sorted(int(k[0]) for _, k, _ in rows) == list(range(1, 26))
    assert [s.after for s in source.reads] == [None, ["10"], ["20"]]
    engine.close()


def test_a_request_record_is_queued_then_deleted_once_a_saved_state_holds_it(
    tmp_path: Path,
) -> None:
    """The capture picks up ``<staging>/_tidelake/capture/snapshot-requests/db.t.json``,
    queues the table, and deletes the record only when a saved state holds that request;
    a request for a table not captured is reported as failed."""
    storage = LocalStorage(tmp_path)
    storage.put(request_path("db.t"), request_record("db.t"))
    storage.put(request_path("db.x"), request_record("db.x"))
    engine = _engine(FakeSource({1: "a"}))
    engine.storage = storage
    engine.load(None, ["db.t"], fresh=True)
    assert engine.queue == []
    engine.tick(1)
    assert engine.queue == ["db.t"]
    assert engine.snapshot_status()["tables"]["db.x"]["state"] == "failed"
    engine.confirmed({"tables": {}})
    assert storage.exists(request_path("db.t"))
    engine.confirmed(engine.state())
    assert storage.list(REQUESTS_PREFIX) == []
    engine.close()


def test_a_chunk_goes_out_in_few_messages_each_row_at_its_own_position() -> None:
    """``message_batches`` groups a chunk's rows (MESSAGE_ROWS a message, a large row
    alone); a message of several rows decodes to one INSERT per row at ``position + (i,)``,
    all between the position before and the one after."""
    rows = [((str(i),), {"id": str(i), "v": "x"}) for i in range(MESSAGE_ROWS + 3)]
    rows.append((("big",), {"id": "big", "v": "y" * MESSAGE_BYTES}))
    sizes = [len(b) for b in message_batches(rows)]
    assert sizes == [MESSAGE_ROWS, 3, 1]
    out = CanalEncoder("mysql", "t").inserts(
        database="db", table="t", pk=["id"], rows=[{"id": "1", "v": "a"}, {"id": "2", "v": "b"}],
        types={"id": "int", "v": "text"}, position=Position((1, 99, 7)), commit_ts_ms=0,
    )  # fmt: skip
    events = decode_object(orjson.loads(out.payload), seq=1).events
    assert [(e.op, e.key, e.position.parts) for e in events] == [
        (Op.INSERT, {"id": "1"}, (1, 99, 7, 0)),
        (Op.INSERT, {"id": "2"}, (1, 99, 7, 1)),
    ]
    assert Position((1, 99, 6, 999)) < events[0].position < Position((1, 99, 8))


class FlakySource(FakeSource):
    """Fails its first ``failures`` reads (a server gone, a dropped connection)."""

    def __init__(self, rows: dict[int, str], failures: int) -> None:
        super().__init__(rows)
        self.failures = failures
        self.closed = 0

    def read_chunk(self, spec: ChunkSpec, chunk_rows: int) -> ChunkResult:
        with self.lock:
            if self.failures > 0:
                self.failures -= 1
                raise ConnectionError("server gone")
        return super().read_chunk(spec, chunk_rows)

    def close_worker(self) -> None:
        self.closed += 1


def test_a_failed_read_is_retried_on_a_new_connection_then_the_table_fails() -> None:
    """A read that raises drops the worker's connection and is read again; a chunk that
    fails MAX_READ_FAILURES times fails its table (state failed, with the error)."""
    source = FlakySource({1: "a", 2: "b"}, failures=2)
    engine = _engine(source, workers=1, chunk_rows=100)
    engine.load(None, [], fresh=True)
    engine.request("db.t")
    assert sorted(v for _, _, v in _emit_all(engine, point=100)) == ["a", "b"]
    assert source.closed >= 2
    engine.close()
    broken = FlakySource({1: "a"}, failures=MAX_READ_FAILURES)
    failing = _engine(broken, workers=1, chunk_rows=100)
    failing.load(None, [], fresh=True)
    failing.request("db.t")
    _emit_all(failing, point=100)
    status = failing.snapshot_status()["tables"]["db.t"]
    assert status["state"] == "failed"
    assert "server gone" in status["error"]
    failing.close()


def test_reread_all_drops_reads_not_emitted_and_reads_them_again() -> None:
    """After a switch of server (failover), chunks read but not emitted are read again:
    their watermarks belong to the old server's log."""
    source = FakeSource({i: f"v{i}" for i in range(1, 31)})
    source.point = 10
    engine = _engine(source, workers=1)
    engine.load(None, [], fresh=True)
    engine.request("db.t")
    deadline = time.monotonic() + 5
    while len(source.reads) < 3 and time.monotonic() < deadline:
        assert engine.tick(5) == []  # never passed: everything waits
        time.sleep(0.005)
    time.sleep(0.05)
    engine.tick(5)
    first_reads = len(source.reads)
    engine.reread_all()
    rows = _emit_all(engine, point=10)
    assert sorted(int(k[0]) for _, k, _ in rows) == list(range(1, 31))
    assert len(source.reads) >= first_reads + 3
    engine.close()
