"""The pipeline as ``tidelake serve`` sees it: one snapshot from the durable record, the
heartbeat files and JetStream, behind both ``/metrics`` and ``/api/status``.

A snapshot is rebuilt at most once per :data:`MIN_REFRESH_S` (a dashboard poll and a
Prometheus scrape at the same moment share one), and each rebuild reads only what was
appended since the last (:mod:`tidelake.api.records`).

States, per table: ``paused`` (the ingest holds it), ``fresh`` (its checkpoint covers the last
message of its subject; or it keeps pace: its newest applied change is at most
:data:`FRESH_WITHIN_S` old, or its last commit is that recent and landed its newest change
within that time — the steady state of a busy table, whose newest messages are always on
their way), ``stale`` (messages for it are in the stream beyond its checkpoint and its
freshness is past ``stale_after_s``), ``catching_up`` (behind, neither), ``unknown`` (the bus
is unreachable), ``skipped`` (our capture does not take it, for the reason its heartbeat
gives: capture/keys.py; it never makes the pipeline stale). The pipeline is ``down`` when
the ingest or the stager is down, ``stale`` when a table is stale or paused or messages wait
on subjects no stager takes (bus/coverage.py: they expire without reaching the lake),
``degraded`` when the bus is unreachable, dead letters wait or the ingest's state is
unreadable, ``healthy`` otherwise.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from tidelake.api.jetstream import JetStream, is_bus_error
from tidelake.api.kafka_view import KafkaView
from tidelake.api.records import (
    DurabilityCheck,
    Histogram,
    LakeRecord,
    StageRecord,
    TableTotals,
)
from tidelake.config import Config
from tidelake.lake.ledger import LedgerError
from tidelake.runtime.heartbeat import HEARTBEAT_DIR, heartbeat_age_s, is_up, read_heartbeat
from tidelake.runtime.storage import open_storage

log = structlog.get_logger(__name__)

#: Two requests within this many seconds share one snapshot.
MIN_REFRESH_S = 0.5
#: After the bus failed to answer, seconds before it is asked again (answers stay fast).
BUS_RETRY_S = 5.0
#: Default: a table with unapplied messages whose freshness passes this is stale.
STALE_AFTER_S = 60.0
#: A table behind the stream that keeps pace within this many seconds is ``fresh`` (see
#: :func:`table_states`): under steady load the last messages are always in flight.
FRESH_WITHIN_S = 15.0


def _keeps_pace(t: TableTotals, now_ms: int) -> bool:
    """Whether a table behind the stream is only as far behind as a busy table always is:
    its newest applied change is recent, or its last commit is recent and had a short lag."""
    if t.max_commit_ts_ms is None:
        return False  # never committed: catching up until it is
    if now_ms - t.max_commit_ts_ms <= FRESH_WITHIN_S * 1000:
        return True
    recent = t.last_commit_ms is not None and now_ms - t.last_commit_ms <= FRESH_WITHIN_S * 1000
    return recent and t.lag_s is not None and t.lag_s <= FRESH_WITHIN_S


#: New manifests whose batch latency is measured per refresh (one message read each).
LATENCY_SAMPLES_PER_REFRESH = 200


def lake_state_dir(cfg: Config) -> Path:
    """The ingest's local state (``Config.lake_state_dir``: also for object-store lakes)."""
    return cfg.lake_state_dir


@dataclass
class Snapshot:
    """Everything one refresh learned; the status JSON and the metrics render it."""

    now_ms: int
    stage: StageRecord
    lake: LakeRecord
    stager: dict[str, Any] | None
    ingest: dict[str, Any] | None
    bus: dict[str, Any] | None
    bus_error: str | None
    stale_after_s: float
    capture_lag_s: dict[str, float] = field(default_factory=dict)
    #: tidelake's own capture, when one runs here (TiCDC or Debezium producers write none).
    capture: dict[str, Any] | None = None
    #: The ingest's state could not be read (``lake/ledger.py``: a malformed file, named).
    lake_error: str | None = None
    #: What the bus server's own settings put at risk (``bus/durability.py``: no fsync per
    #: write, a cluster without replicas); shown, not a state: the operator may have chosen it.
    warnings: list[str] = field(default_factory=list)


def _capture_lag_s(data: bytes | None, seq: int, stored_ms: int | None) -> float | None:
    """Seconds from the source commit of a message to JetStream storing it."""
    if not data or stored_ms is None:
        return None
    from tidelake.formats import decode

    try:
        decoded = decode(data, seq=seq)
    except Exception:
        return None
    times = [e.commit_ts_ms for e in decoded.events if e.commit_ts_ms is not None]
    return max(0.0, (stored_ms - max(times)) / 1000) if times else None


class Monitor:
    """Owns the readers and the bus connection of one ``tidelake serve``."""

    def __init__(
        self, cfg: Config, *, stale_after_s: float = STALE_AFTER_S, bus: JetStream | None = None
    ) -> None:
        self.cfg = cfg
        self.stale_after_s = stale_after_s
        self.bus = bus or JetStream(cfg.bus, home=cfg.home)
        #: On a Kafka bus, where the bus's state is read instead (the dead-letter pages of
        #: ``serve`` are JetStream's only: docs/kafka.md).
        self.kafka = KafkaView(cfg.bus) if cfg.bus.kind == "kafka" else None
        self.stage = StageRecord(open_storage(cfg.stage_root, cfg.storage.s3, create=False))
        self.lake = LakeRecord(lake_state_dir(cfg))
        self._snapshot: Snapshot | None = None
        self._lock = asyncio.Lock()
        self._latency_todo: list[tuple[int, int]] = []
        self._bus_retry_at = 0.0
        self._bus_error: str | None = None
        self._durability = DurabilityCheck(cfg.bus)

    def _capture_heartbeat(self) -> dict[str, Any] | None:
        """The capture's record: in the staging store, else (an older capture's) beside its
        position file."""
        return self.stage.heartbeat("capture") or read_heartbeat(
            self.cfg.capture_position_file.parent / HEARTBEAT_DIR, "capture"
        )

    async def snapshot(self) -> Snapshot:
        async with self._lock:
            now = time.time()
            held = self._snapshot
            if held is not None and now * 1000 - held.now_ms < MIN_REFRESH_S * 1000:
                return held
            self._snapshot = await self._refresh()
            return self._snapshot

    async def _refresh(self) -> Snapshot:
        new = await asyncio.to_thread(self.stage.refresh)
        lake_error = None
        try:
            await asyncio.to_thread(self.lake.refresh)
        except LedgerError as exc:
            # The ingest stops on it too; status shows the last counts and names the file.
            lake_error = str(exc)
        self._latency_todo.extend((m.seq_first, m.created_at_ms) for m in new)
        # Only the newest manifests are measured: a first scan of a long history must not
        # read a message per batch ever staged.
        self._latency_todo = self._latency_todo[-LATENCY_SAMPLES_PER_REFRESH:]
        snap = Snapshot(
            now_ms=int(time.time() * 1000),
            stage=self.stage,
            lake=self.lake,
            stager=await asyncio.to_thread(self.stage.heartbeat),
            ingest=self.lake.heartbeat(),
            capture=await asyncio.to_thread(self._capture_heartbeat),
            bus=None,
            bus_error=None,
            stale_after_s=self.stale_after_s,
            lake_error=lake_error,
            warnings=await asyncio.to_thread(self._durability.warnings),
        )
        tables = sorted(set(self.lake.tables) | set(self.stage.totals.events_by_table))
        try:
            if time.monotonic() < self._bus_retry_at:
                raise ConnectionError(self._bus_error or "unreachable")
            source: JetStream | KafkaView = self.kafka or self.bus
            snap.bus = await asyncio.wait_for(source.state(tables), timeout=10)
            todo, self._latency_todo = self._latency_todo, []
            for seq_first, created_ms in todo:
                stored = await source.message_time_ms(seq_first)
                if stored is not None:
                    self.stage.totals.batch_latency.observe(max(0.0, (created_ms - stored) / 1000))
            for table, last in snap.bus["last_by_table"].items():
                lag = _capture_lag_s(last.pop("data", None), last["seq"], last["time_ms"])
                if lag is not None:
                    snap.capture_lag_s[table] = lag
        except Exception as exc:
            if not is_bus_error(exc) and not isinstance(exc, TimeoutError):
                log.exception("bus state failed")
            if time.monotonic() >= self._bus_retry_at:
                self._bus_error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                self._bus_retry_at = time.monotonic() + BUS_RETRY_S
                await self.bus.close()
            snap.bus_error = self._bus_error
        else:
            self._bus_error = None
        return snap

    async def close(self) -> None:
        await self.bus.close()
        if self.kafka is not None:
            await self.kafka.close()


def errors_of(snap: Snapshot) -> list[dict[str, Any]]:
    """What an operator must look at: bus failures, paused tables, stage errors, dead letters."""
    out: list[dict[str, Any]] = []
    if snap.bus_error:
        out.append({"source": "bus", "message": snap.bus_error})
    if snap.lake_error:
        out.append({"source": "ingest", "message": f"unreadable state: {snap.lake_error}"})
    for table, reason in snap.lake.paused.items():
        out.append({"source": "ingest", "table": table, "message": f"paused: {reason}"})
    # A table held back by a transient cause (disk full, object store down) is not paused:
    # it retries on its own, and its cause is shown until it lands (lake/failures.py).
    retrying = (snap.ingest or {}).get("retrying") or {}
    if isinstance(retrying, dict):
        for table, cause in sorted(retrying.items()):
            out.append({"source": "ingest", "table": table, "message": f"retrying: {cause}"})
    for name, record in (
        ("ingest", snap.ingest),
        ("stager", snap.stager),
        ("capture", snap.capture),
    ):
        if record and record.get("last_error"):
            out.append({"source": name, "message": str(record["last_error"])})
    dlq = (snap.bus or {}).get("dlq") or {}
    if dlq.get("messages"):
        out.append(
            {
                "source": "stager",
                "message": f"{dlq['messages']} message(s) in the dead-letter queue",
            }
        )
    return out


# --- rendering: the status JSON -------------------------------------------------------------


def activity(record: dict[str, Any] | None, now_ms: int) -> str | None:
    """What a process is busy with, for a person: the ingest's round under way
    (``committing shop.orders for 42 s``) or its warm-up (``warming up for 12 s``), from the
    heartbeat's ``round`` that the ingest rewrites meanwhile (lake/round_beat.py), else None."""
    if not record or record.get("state") not in ("applying", "warming up"):
        return None
    round_ = record.get("round")
    if not isinstance(round_, dict) or not round_.get("started_ms"):
        return None
    committing = round_.get("committing")
    if isinstance(committing, dict) and committing:
        table, since = min(committing.items(), key=lambda kv: int(kv[1]))
        more = f" (+{len(committing) - 1} more)" if len(committing) > 1 else ""
        return f"committing {table} for {max(0, now_ms - int(since)) // 1000} s{more}"
    doing = "warming up" if record["state"] == "warming up" else "applying a round"
    return f"{doing} for {max(0, now_ms - int(round_['started_ms'])) // 1000} s"


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def capture_status(record: dict[str, Any] | None) -> dict[str, Any] | None:
    """tidelake's own capture as its heartbeat tells it (``capture/runner.py`` info): the
    source, its phase, its lag (``capture/lag.py``: bytes, retained WAL, seconds, GTIDs
    behind), snapshot progress per table and the tables it skips with the reason; None when
    no capture of ours runs here."""
    if record is None:
        return None
    lag = _dict(record.get("lag"))
    tables = _dict(_dict(record.get("snapshot")).get("tables"))
    skipped = _dict(record.get("skipped"))
    return {
        "source": record.get("source"),
        "phase": record.get("phase"),
        "lag": {
            "bytes": lag.get("bytes"),
            "retained_wal_bytes": lag.get("retained_wal_bytes"),
            "seconds": lag.get("seconds"),
            "gtid_behind": lag.get("gtid_behind"),
            "wal_status": lag.get("wal_status"),
            "safe_wal_size": lag.get("safe_wal_size"),
            "at_ms": lag.get("at_ms"),
            "error": lag.get("error"),
        },
        "snapshot": {"tables": tables},
        "skipped": skipped,
    }


def capture_problems(capture: dict[str, Any] | None) -> list[str]:
    """What the capture's health puts at risk: a slot whose WAL the server may remove (or
    removed: ``wal_status`` ``unreserved``/``lost``, pg_replication_slots, PostgreSQL 13+)
    and a snapshot that failed."""
    if capture is None:
        return []
    out: list[str] = []
    wal_status = capture["lag"].get("wal_status")
    if wal_status == "lost":
        out.append("the capture's replication slot lost WAL it needs (wal_status lost)")
    elif wal_status == "unreserved":
        out.append("the server will remove WAL the capture's slot needs (wal_status unreserved)")
    for table, t in sorted(capture["snapshot"]["tables"].items()):
        if isinstance(t, dict) and t.get("state") == "failed":
            out.append(f"the snapshot of {table} failed")
    return out


def _process(
    record: dict[str, Any] | None, now_ms: int, last_activity_ms: int = 0
) -> dict[str, Any]:
    return {
        "up": is_up(record, now_ms, last_activity_ms=last_activity_ms),
        "state": (record or {}).get("state", "unknown"),
        "activity": activity(record, now_ms),
        "heartbeat_age_s": heartbeat_age_s(record, now_ms),
        "pid": (record or {}).get("pid"),
        "host": (record or {}).get("host"),
        "record": record,
    }


def table_states(snap: Snapshot) -> list[dict[str, Any]]:
    """One entry per table known to the lake, the staging root or the control file."""
    now = snap.now_ms
    last_by_table = (snap.bus or {}).get("last_by_table", {})
    # Tables the capture does not take (capture/keys.py), listed as ``skipped`` with the
    # reason, never stale: nothing will come for them, and that is the configuration.
    skipped = _dict((snap.capture or {}).get("skipped"))
    names = sorted(set(snap.lake.tables) | set(snap.stage.totals.events_by_table) | set(skipped))
    out = []
    for name in names:
        t = snap.lake.table(name)
        freshness = (
            None if t.max_commit_ts_ms is None else max(0.0, (now - t.max_commit_ts_ms) / 1000)
        )
        last = last_by_table.get(name)
        stream_last = last["seq"] if last else None
        request = snap.lake.requests.get(name)
        paused = snap.lake.paused.get(name)
        if paused is not None:
            state = "paused"
        elif name in skipped:
            state = "skipped"
        elif snap.bus is None:
            state = "unknown"
        elif stream_last is None or t.checkpoint_seq >= stream_last:
            state = "fresh"
        else:
            # Behind the stream: stale once the newest applied change (or, for a table never
            # committed, the newest message waiting for it) is older than the threshold.
            since = t.max_commit_ts_ms if t.max_commit_ts_ms is not None else last["time_ms"]
            behind_s = (now - (since or now)) / 1000
            if behind_s > snap.stale_after_s:
                state = "stale"
            elif _keeps_pace(t, now):
                state = "fresh"
            else:
                state = "catching_up"
        out.append(
            {
                "table": name,
                "state": state,
                "freshness_s": freshness,
                "lag_s": t.lag_s,
                "capture_lag_s": snap.capture_lag_s.get(name),
                "last_commit_ms": t.last_commit_ms,
                "max_commit_ts_ms": t.max_commit_ts_ms,
                "checkpoint_seq": t.checkpoint_seq,
                "stream_last_seq": stream_last,
                "schema_version": t.schema_version,
                "commits": t.commits,
                "events": t.events,
                "upserts": t.upserts,
                "deletes": t.deletes,
                "staged_events": snap.stage.totals.events_by_table.get(name, 0),
                "skipped_duplicates": t.skipped_duplicates,
                "skipped_stale": t.skipped_stale,
                "last_commit_duration_ms": t.last_duration_ms,
                "paused": paused,
                "skipped_reason": skipped.get(name),
                "control": request.to_dict() if request else None,
                "recent_commits": [c.model_dump(mode="json") for c in list(t.recent)[-5:][::-1]],
            }
        )
    return out


#: Unstaged subjects a problem names; the rest are counted (``tidelake status --json`` lists
#: up to 20).
UNSTAGED_NAMED = 3


def unstaged_problem(unstaged: dict[str, Any] | None) -> str | None:
    """What to say of messages on subjects no stager takes (the bus state's ``unstaged``:
    api/jetstream.py); None when there are none or coverage is unknown."""
    if not unstaged or not unstaged.get("subject_count"):
        return None
    count = int(unstaged["subject_count"])
    named = list(unstaged.get("subjects") or {})[:UNSTAGED_NAMED]
    more = f" (+{count - len(named)} more)" if count > len(named) else ""
    return (
        f"{unstaged.get('messages', 0)} message(s) on {count} subject(s) no stager takes: "
        f"{', '.join(named)}{more}; they expire from the stream without reaching the lake. "
        "Add each subject to a worker's bus.consumer.filter_subjects and its table to that "
        'worker\'s ingest.tables (docs/operations.md, "Messages no stager takes")'
    )


def pipeline_state(snap: Snapshot, tables: list[dict[str, Any]]) -> tuple[str, list[str]]:
    problems: list[str] = []
    ingest_up = is_up(snap.ingest, snap.now_ms, last_activity_ms=_last_commit_ms(snap))
    stager_up = is_up(snap.stager, snap.now_ms)
    if not ingest_up:
        problems.append("the ingest is down")
    if not stager_up:
        problems.append("the stager is down")
    capture_down = snap.capture is not None and not is_up(snap.capture, snap.now_ms)
    if capture_down:
        problems.append("the capture is down")
    for t in tables:
        if t["state"] in ("stale", "paused"):
            problems.append(f"{t['table']} is {t['state']}")
    unstaged = unstaged_problem((snap.bus or {}).get("unstaged"))
    if unstaged is not None:
        problems.append(unstaged)
    problems.extend(capture_problems(capture_status(snap.capture)))
    if snap.bus_error:
        problems.append(f"the bus is unreachable: {snap.bus_error}")
    if snap.lake_error:
        problems.append(f"the ingest's state is unreadable: {snap.lake_error}")
    dlq = ((snap.bus or {}).get("dlq") or {}).get("messages", 0)
    if dlq:
        problems.append(f"{dlq} dead letter(s)")
    if not ingest_up or not stager_up or capture_down:
        return "down", problems
    if unstaged is not None or any(t["state"] in ("stale", "paused") for t in tables):
        return "stale", problems
    if problems:
        return "degraded", problems
    return "healthy", problems


def _last_commit_ms(snap: Snapshot) -> int:
    return max((t.last_commit_ms or 0 for t in snap.lake.tables.values()), default=0)


def status_json(snap: Snapshot) -> dict[str, Any]:
    """``GET /api/status``: the whole pipeline in one document (docs/operations.md)."""
    tables = table_states(snap)
    state, problems = pipeline_state(snap, tables)
    totals = snap.stage.totals
    freshness = [t["freshness_s"] for t in tables if t["freshness_s"] is not None]
    bus = dict(snap.bus or {})
    bus.pop("last_by_table", None)
    return {
        "now_ms": snap.now_ms,
        "state": state,
        "problems": problems,
        "stale_after_s": snap.stale_after_s,
        "freshness_s": max(freshness) if freshness else None,
        "processes": {
            "stager": _process(snap.stager, snap.now_ms),
            "ingest": _process(snap.ingest, snap.now_ms, _last_commit_ms(snap)),
            **({"capture": _process(snap.capture, snap.now_ms)} if snap.capture else {}),
        },
        "capture": capture_status(snap.capture),
        "bus": {"up": snap.bus is not None, "error": snap.bus_error, **bus},
        "stage": {
            "batches": totals.batches,
            "received": totals.received,
            "staged": totals.staged,
            "dead_lettered": totals.dead_lettered,
            "skipped": totals.skipped,
            "last_seq": totals.last_seq,
            "last_manifest_ms": totals.last_manifest_ms,
            "by_reason": dict(totals.by_reason),
        },
        "tables": tables,
        "recent_commits": [c.model_dump(mode="json") for c in list(snap.lake.recent)[-20:][::-1]],
        "errors": errors_of(snap),
        "warnings": list(snap.warnings),
    }


def histogram_json(h: Histogram) -> dict[str, Any]:
    return {"count": h.count, "sum": h.sum, "buckets": dict(h.cumulative())}
