"""Incremental readers of the durable record: what every count of ``tidelake serve`` comes from.

* the staging root's manifests (one per batch: received / staged / dead-lettered / skipped,
  events per table): :class:`StageRecord`;
* the lake's ``_tidelake/commits.jsonl`` (one line per Hudi commit: upserts, deletes,
  duration, commit time, newest source commit time), ``skipped.jsonl`` (duplicates and stale
  events), ``paused.json``, ``control.json`` and the ingest heartbeat: :class:`LakeRecord`.

Both remember what they have read (file offsets, manifest names), so a refresh costs what was
appended since the last one, and both are correct after any crash of any stage: they hold
no state of their own that the files do not.
"""

from __future__ import annotations

import bisect
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import structlog

from tidelake.api.control import TableRequest, read_paused, read_requests
from tidelake.errors import TidelakeError
from tidelake.runtime.heartbeat import (
    HEARTBEAT_DIR,
    heartbeat_name,
    parse_heartbeat,
    read_heartbeat,
)
from tidelake.runtime.storage import Storage
from tidelake.stage.manifest import MANIFEST_DIR, Manifest, read_manifest

log = structlog.get_logger(__name__)

#: Upper bounds (seconds) of the latency and duration histograms.
LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
#: Commits kept per table, and overall, for "last commits".
RECENT_COMMITS = 20


class Histogram:
    """Cumulative-bucket histogram of observations (Prometheus semantics)."""

    def __init__(self, buckets: tuple[float, ...] = LATENCY_BUCKETS) -> None:
        self.buckets = buckets
        self.counts = [0] * len(buckets)
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        i = bisect.bisect_left(self.buckets, value)
        if i < len(self.counts):
            self.counts[i] += 1
        self.count += 1
        self.sum += value

    def cumulative(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        running = 0
        for bound, n in zip(self.buckets, self.counts, strict=True):
            running += n
            out.append((repr(bound), float(running)))
        out.append(("+Inf", float(self.count)))
        return out


class JsonlTail:
    """The complete lines appended to a JSON Lines file since the last call.

    A line without its newline yet (a writer mid-append) is left for the next call. A file
    that shrank or was replaced is read again from the start (``reset`` is then True).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self._inode: int | None = None
        self.reset = False

    def read_new(self) -> list[dict[str, Any]]:
        self.reset = False
        try:
            st = self.path.stat()
        except OSError:
            if self.offset:
                self.offset, self._inode, self.reset = 0, None, True
            return []
        if st.st_ino != self._inode or st.st_size < self.offset:
            self.reset = self._inode is not None
            self.offset, self._inode = 0, st.st_ino
        if st.st_size == self.offset:
            return []
        with self.path.open("rb") as f:
            f.seek(self.offset)
            data = f.read(st.st_size - self.offset)
        end = data.rfind(b"\n")
        if end < 0:
            return []
        self.offset += end + 1
        out: list[dict[str, Any]] = []
        for line in data[:end].split(b"\n"):
            if not line.strip():
                continue
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError:
                log.warning("unreadable line skipped", path=str(self.path), line=line[:200])
                continue
            if isinstance(record, dict):
                out.append(record)
        return out


# --- staging ---------------------------------------------------------------------------------


@dataclass
class StageTotals:
    """Sums over every manifest of the staging root (a restaged batch counts again)."""

    batches: int = 0
    received: int = 0
    staged: int = 0
    dead_lettered: int = 0
    skipped: int = 0
    events_by_table: Counter[str] = field(default_factory=Counter)
    by_reason: Counter[str] = field(default_factory=Counter)
    last_seq: int = 0
    last_manifest_ms: int | None = None
    batch_latency: Histogram = field(default_factory=Histogram)


class StageRecord:
    """The manifests of one staging root, read once each."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.totals = StageTotals()
        self._seen: set[str] = set()

    def refresh(self) -> list[Manifest]:
        """Read the manifests written since the last call; returns them in stream order."""
        new: list[Manifest] = []
        for path in self.storage.list(MANIFEST_DIR):
            if path in self._seen or not path.endswith(".json"):
                continue
            try:
                manifest = read_manifest(self.storage, path)
            except TidelakeError as exc:
                log.warning("unreadable manifest skipped", path=path, error=str(exc))
                self._seen.add(path)
                continue
            self._seen.add(path)
            new.append(manifest)
        t = self.totals
        for m in new:
            t.batches += 1
            t.received += m.received
            t.staged += m.staged
            t.dead_lettered += m.dead_lettered
            t.skipped += m.skipped
            t.events_by_table.update({tf.table_id: tf.events for tf in m.tables})
            t.by_reason.update(m.counts_by_reason)
            t.last_seq = max(t.last_seq, m.seq_last)
            t.last_manifest_ms = max(t.last_manifest_ms or 0, m.created_at_ms)
        return new

    def heartbeat(self) -> dict[str, Any] | None:
        try:
            return parse_heartbeat(self.storage.get(f"{HEARTBEAT_DIR}/{heartbeat_name('stager')}"))
        except TidelakeError:
            return None


# --- the lake --------------------------------------------------------------------------------


@dataclass
class TableTotals:
    """One table's commits, as ``commits.jsonl`` and ``skipped.jsonl`` tell them."""

    table: str
    commits: int = 0
    events: int = 0
    upserts: int = 0
    deletes: int = 0
    ddl: int = 0
    skipped_duplicates: int = 0
    skipped_stale: int = 0
    checkpoint_seq: int = 0
    schema_version: int = 0
    last_commit_ms: int | None = None
    #: Newest source commit time applied (the freshness reference).
    max_commit_ts_ms: int | None = None
    #: Seconds from the newest source commit of the last commit carrying rows to that commit.
    lag_s: float | None = None
    last_duration_ms: int | None = None
    commit_duration: Histogram = field(default_factory=Histogram)
    recent: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=RECENT_COMMITS))

    def add_commit(self, c: dict[str, Any]) -> None:
        self.commits += 1
        self.events += int(c.get("events") or 0)
        self.upserts += int(c.get("upserts") or 0)
        self.deletes += int(c.get("deletes") or 0)
        self.ddl += int(c.get("ddl") or 0)
        self.checkpoint_seq = max(self.checkpoint_seq, int(c.get("seq") or 0))
        self.schema_version = max(self.schema_version, int(c.get("schema_version") or 0))
        committed = c.get("committed_at_ms")
        if committed is not None:
            self.last_commit_ms = max(self.last_commit_ms or 0, int(committed))
        newest = c.get("max_commit_ts_ms")
        if newest is not None:
            self.max_commit_ts_ms = max(self.max_commit_ts_ms or 0, int(newest))
            if committed is not None:
                self.lag_s = max(0.0, (int(committed) - int(newest)) / 1000)
        duration = c.get("duration_ms")
        if duration is not None:
            self.last_duration_ms = int(duration)
            self.commit_duration.observe(int(duration) / 1000)
        self.recent.append(c)


class LakeRecord:
    """The ingest's files under ``<lake_root>/_tidelake/``."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.tables: dict[str, TableTotals] = {}
        self.recent: deque[dict[str, Any]] = deque(maxlen=RECENT_COMMITS * 2)
        self.paused: dict[str, str] = {}
        self.requests: dict[str, TableRequest] = {}
        self._commits = JsonlTail(state_dir / "commits.jsonl")
        self._skipped = JsonlTail(state_dir / "skipped.jsonl")

    def table(self, table_id: str) -> TableTotals:
        if table_id not in self.tables:
            self.tables[table_id] = TableTotals(table_id)
        return self.tables[table_id]

    def refresh(self) -> None:
        commits = self._commits.read_new()
        if self._commits.reset:  # rewritten from scratch: start over
            self.tables.clear()
            self.recent.clear()
            self._skipped = JsonlTail(self.state_dir / "skipped.jsonl")
        for c in commits:
            if "table" in c:
                self.table(str(c["table"])).add_commit(c)
                self.recent.append(c)
        for s in self._skipped.read_new():
            if "table" in s:
                t = self.table(str(s["table"]))
                t.skipped_duplicates += int(s.get("duplicates") or 0)
                t.skipped_stale += int(s.get("stale") or 0)
        self.paused = read_paused(self.state_dir)
        self.requests = read_requests(self.state_dir)
        for name in (*self.paused, *self.requests):
            self.table(name)

    def heartbeat(self) -> dict[str, Any] | None:
        return read_heartbeat(self.state_dir, "ingest")
