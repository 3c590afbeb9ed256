"""Incremental readers of the durable record: what every count of ``tidelake serve`` comes from.

* the staging root's manifests (one per batch: received / staged / dead-lettered / skipped,
  events per table): :class:`StageRecord`;
* the ingest's state (``lake/ledger.py``): the commit log (one :class:`CommitRecord` per
  Hudi commit: upserts, deletes, duration, commit time, newest source commit time), the skip
  log (duplicates and stale events), the paused tables, the operator's requests and the
  ingest heartbeat: :class:`LakeRecord`.

Both remember what they have read (file offsets, manifest names), so a refresh costs what was
appended since the last one, and both are correct after any crash of any stage: they hold
no state of their own that the files do not.
"""

from __future__ import annotations

import bisect
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from tidelake.bus.durability import durability_warnings, fetch_varz, sync_policy
from tidelake.config import BusConfig
from tidelake.errors import BusError, TidelakeError
from tidelake.lake.ledger import CommitRecord, Ledger, TableRequest
from tidelake.runtime.heartbeat import HEARTBEAT_DIR, heartbeat_name, parse_heartbeat
from tidelake.runtime.storage import Storage
from tidelake.stage.manifest import (
    MANIFEST_DIR,
    Manifest,
    RetiredTotals,
    manifest_range,
    read_manifest,
    read_retired,
)

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


# --- staging ---------------------------------------------------------------------------------


@dataclass
class StageTotals:
    """Sums over every batch ever staged: the retired totals plus the manifests still staged
    (a restaged batch counts again)."""

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
    """The staging root's counts: the retired batches' totals plus the manifests still there.

    Retention (``lake/retention.py``) deletes the batches every table has passed, after adding
    their counts to ``retired/``; a manifest ending at or below those totals' ``through_seq``
    is in them already and is not counted again. Manifests are listed incrementally (after
    the highest name seen; names sort by last sequence) and each is read once.
    """

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.totals = StageTotals()
        self._retired_path: str | None = None
        self._retired = RetiredTotals()
        self._counted: dict[str, Manifest] = {}
        self._seen: set[str] = set()
        self._high = ""
        self._listed = False

    def refresh(self) -> list[Manifest]:
        """Read the manifests written since the last call; returns them in stream order."""
        path, retired = read_retired(self.storage)
        if path != self._retired_path:
            self._retired_path, self._retired = path, retired
            through = retired.through_seq
            self._counted = {p: m for p, m in self._counted.items() if m.seq_last > through}
            self._seen = {p for p in self._seen if (r := manifest_range(p)) and r[1] > through}
        paths = self.storage.list(MANIFEST_DIR, start_after=self._high if self._listed else "")
        self._listed = True
        new: list[Manifest] = []
        for path in paths:
            seq_range = manifest_range(path)
            if seq_range is None or path in self._seen:
                continue
            self._seen.add(path)
            self._high = max(self._high, path)
            if seq_range[1] <= self._retired.through_seq:
                continue  # in the retired totals
            try:
                manifest = read_manifest(self.storage, path)
            except TidelakeError as exc:  # retired between the listing and the read, or bad
                log.warning("unreadable manifest skipped", path=path, error=str(exc))
                continue
            self._counted[path] = manifest
            new.append(manifest)
        self._sum()
        return sorted(new, key=lambda m: (m.seq_first, m.seq_last))

    def _sum(self) -> None:
        r, t = self._retired, self.totals
        t.batches, t.received, t.staged = r.batches, r.received, r.staged
        t.dead_lettered, t.skipped = r.dead_lettered, r.skipped
        t.events_by_table = Counter(r.events_by_table)
        t.by_reason = Counter(r.counts_by_reason)
        t.last_seq = r.through_seq
        t.last_manifest_ms = r.last_manifest_ms
        for m in self._counted.values():
            t.batches += 1
            t.received += m.received
            t.staged += m.staged
            t.dead_lettered += m.dead_lettered
            t.skipped += m.skipped
            t.events_by_table.update({tf.table_id: tf.events for tf in m.tables})
            t.by_reason.update(m.counts_by_reason)
            t.last_seq = max(t.last_seq, m.seq_last)
            t.last_manifest_ms = max(t.last_manifest_ms or 0, m.created_at_ms)

    def heartbeat(self, stage: str = "stager") -> dict[str, Any] | None:
        """The last record of ``stage`` in the staging store (the stager's, or the
        capture's), or None."""
        try:
            return parse_heartbeat(self.storage.get(f"{HEARTBEAT_DIR}/{heartbeat_name(stage)}"))
        except TidelakeError:
            return None


# --- the lake --------------------------------------------------------------------------------


@dataclass
class TableTotals:
    """One table's commits, as the commit and skip logs tell them."""

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
    recent: deque[CommitRecord] = field(default_factory=lambda: deque(maxlen=RECENT_COMMITS))

    def add_commit(self, c: CommitRecord) -> None:
        self.commits += 1
        self.events += c.events
        self.upserts += c.upserts
        self.deletes += c.deletes
        self.ddl += c.ddl
        self.checkpoint_seq = max(self.checkpoint_seq, c.seq)
        self.schema_version = max(self.schema_version, c.schema_version)
        self.last_commit_ms = max(self.last_commit_ms or 0, c.committed_at_ms)
        if c.max_commit_ts_ms is not None:
            self.max_commit_ts_ms = max(self.max_commit_ts_ms or 0, c.max_commit_ts_ms)
            self.lag_s = max(0.0, (c.committed_at_ms - c.max_commit_ts_ms) / 1000)
        if c.duration_ms is not None:
            self.last_duration_ms = c.duration_ms
            self.commit_duration.observe(c.duration_ms / 1000)
        self.recent.append(c)


class LakeRecord:
    """The ingest's state directory (``Config.lake_state_dir``), read through its ledger."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.ledger = Ledger(state_dir)
        self.tables: dict[str, TableTotals] = {}
        self.recent: deque[CommitRecord] = deque(maxlen=RECENT_COMMITS * 2)
        self.paused: dict[str, str] = {}
        self.requests: dict[str, TableRequest] = {}
        self._commits = self.ledger.commit_tail()
        self._skipped = self.ledger.skipped_tail()

    def table(self, table_id: str) -> TableTotals:
        if table_id not in self.tables:
            self.tables[table_id] = TableTotals(table_id)
        return self.tables[table_id]

    def refresh(self) -> None:
        commits = self._commits.read_new()
        if self._commits.reset:  # rewritten from scratch: start over
            self.tables.clear()
            self.recent.clear()
            self._skipped = self.ledger.skipped_tail()
        for c in commits:
            self.table(c.table).add_commit(c)
            self.recent.append(c)
        for s in self._skipped.read_new():
            t = self.table(s.table)
            t.skipped_duplicates += s.duplicates
            t.skipped_stale += s.stale
        self.paused = self.ledger.paused()
        self.requests = self.ledger.requests()
        for name in (*self.paused, *self.requests):
            self.table(name)

    def heartbeat(self) -> dict[str, Any] | None:
        return self.ledger.heartbeat()


#: Seconds a durability verdict of the bus server is kept (a setting changes with a restart).
DURABILITY_RECHECK_S = 60.0


class DurabilityCheck:
    """The bus server's sync policy as ``status`` reports it (``bus/durability.py``).

    The embedded server (no ``bus.url``) is tidelake's own and runs with ``sync_interval:
    always`` unless ``bus.embedded.sync_always`` is false, which is warned about. An external
    server is asked through ``bus.monitor_url``; with none set, status says it cannot see,
    once, as a warning of its own.
    """

    def __init__(self, bus: BusConfig) -> None:
        self.bus = bus
        self._checked_at = -DURABILITY_RECHECK_S
        self._warnings: list[str] = []

    def warnings(self) -> list[str]:
        if self.bus.url is None:
            if self.bus.embedded.sync_always:
                return []
            return [
                "bus.embedded.sync_always is false: the embedded nats-server fsyncs every 2 "
                "minutes, and an OS crash loses what it acknowledged since (docs/nats.md)"
            ]
        if self.bus.monitor_url is None:
            return [
                "bus.monitor_url is not set: whether the external nats-server fsyncs acknowledged "
                "messages (sync_interval: always) cannot be checked (docs/nats.md)"
            ]
        now = time.monotonic()
        if now - self._checked_at >= DURABILITY_RECHECK_S:
            try:
                policy = sync_policy(fetch_varz(self.bus.monitor_url))
                self._warnings = durability_warnings(policy, replicas=self.bus.stream.replicas)
            except BusError as exc:
                self._warnings = [f"the nats-server's sync policy is unknown: {exc}"]
            self._checked_at = now
        return list(self._warnings)
