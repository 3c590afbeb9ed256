"""The pipeline's history for the dashboard's charts, from the durable record (``GET
/api/history``, ``GET /api/tables/{table}/history``), so a chart survives a reload of the page
and a restart of ``tidelake serve``.

Two sources:

* the ingest's commit log (``commits.jsonl``, :mod:`tidelake.lake.ledger`): one line per Hudi
  commit with its time, table, events, duration and the newest source commit time it applied.
  It gives the committed rate, the commit lag (source commit → Hudi commit) and the commit
  duration over time, for any window the log covers, whenever ``serve`` was running;
* a small ring of samples that ``serve`` itself writes every :data:`SAMPLE_EVERY_S` seconds
  to ``<home>/serve/history.jsonl`` (:class:`SampleRing`): the stager's cumulative counts
  (staged batches are retired soon after the ingest passed them, so their manifests cannot
  tell a rate later), the dead-letter depth and the stager consumer's backlog. These
  series start when ``serve`` first ran and have gaps while it was stopped.

Bounded cost: the commit log is entered at the first line of the longest window
(:data:`MAX_WINDOW_S`) by a binary search over the file's offsets and then read
incrementally; the ring holds at most :data:`RING_SAMPLES` samples; an answer has at most
:data:`MAX_POINTS` points per series and is cached for :data:`CACHE_S`.

Rates are smoothed: events per bucket of ``step`` seconds, divided by the bucket's length, then
a trailing moving average over ``smooth`` seconds, so one large commit does not draw a spike and
a quiet bucket does not draw a hole. Lag and duration are per-bucket percentiles (nearest
rank) of the commits in the bucket; a bucket without commits is a gap (``null``).
"""

from __future__ import annotations

import asyncio
import bisect
import math
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson
import structlog

from tidelake.config import Config
from tidelake.lake.ledger import COMMITS_FILE, CommitRecord, LedgerError, decode
from tidelake.runtime.durable import append_line, make_dirs, write_atomic

log = structlog.get_logger(__name__)

#: The longest window a chart may ask for, and how much history is kept in memory.
MAX_WINDOW_S = 24 * 3600
#: The shortest window.
MIN_WINDOW_S = 60
#: The finest bucket: a sample is taken every SAMPLE_EVERY_S, so a bucket holds two.
MIN_STEP_S = 10
#: Points per series at most (the step grows to keep a window under it).
MAX_POINTS = 720
#: Steps a default chooses from (seconds): round numbers on a time axis.
NICE_STEPS = (10, 15, 20, 30, 60, 120, 300, 600, 900, 1800, 3600)
#: Seconds between two samples of the ring.
SAMPLE_EVERY_S = 5.0
#: Samples the ring keeps (a day at SAMPLE_EVERY_S); rewritten once a quarter more is appended.
RING_SAMPLES = int(MAX_WINDOW_S / SAMPLE_EVERY_S)
RING_FILE = "history.jsonl"
#: A sample further than this before a bucket boundary does not tell the value at it.
SAMPLE_REACH_MS = int(3 * SAMPLE_EVERY_S * 1000)
#: Two equal requests within this many seconds share one answer.
CACHE_S = 1.0
#: DDL commits remembered per table (the table page's DDL history).
DDL_KEPT = 50
#: Commits held in memory at most (~100 bytes each): a lake committing faster than this many
#: a day shows the newest ones of the longest window.
COMMITS_KEPT = 500_000


# --- the pure part: buckets, rates, smoothing, percentiles ------------------------------------


def default_step(window_s: int) -> int:
    """The smallest nice step that keeps ``window_s`` within about 360 points."""
    for step in NICE_STEPS:
        if window_s / step <= 360:
            return step
    return NICE_STEPS[-1]


def clamp_step(window_s: int, step_s: int | None) -> int:
    """``step_s`` (or the default) raised to :data:`MIN_STEP_S` and to what keeps the window
    within :data:`MAX_POINTS` buckets."""
    step = default_step(window_s) if step_s is None else step_s
    return max(step, MIN_STEP_S, math.ceil(window_s / MAX_POINTS))


def bucket_starts(now_ms: int, window_s: int, step_s: int) -> list[int]:
    """Starts (ms) of the buckets covering ``[now - window, now]``, aligned to ``step`` so a
    refresh a moment later keeps the same buckets; the last one holds ``now``."""
    step_ms = step_s * 1000
    last = now_ms // step_ms * step_ms
    first = (now_ms - window_s * 1000) // step_ms * step_ms
    return list(range(first, last + 1, step_ms))


def bucket_index(starts: Sequence[int], step_ms: int, t_ms: int) -> int | None:
    """The bucket holding ``t_ms``, or None outside them all."""
    if not starts or t_ms < starts[0] or t_ms >= starts[-1] + step_ms:
        return None
    return (t_ms - starts[0]) // step_ms


def bucket_seconds(starts: Sequence[int], step_s: int, now_ms: int) -> list[float]:
    """Each bucket's elapsed length: ``step``, but the current one only up to now."""
    return [max(0.001, min(step_s, (now_ms - s) / 1000)) for s in starts]


def moving_average(values: Sequence[float | None], width: int) -> list[float | None]:
    """Trailing mean over ``width`` buckets, ignoring gaps; a gap stays a gap."""
    out: list[float | None] = []
    for i, v in enumerate(values):
        if v is None:
            out.append(None)
            continue
        known = [x for x in values[max(0, i - width + 1) : i + 1] if x is not None]
        out.append(sum(known) / len(known))
    return out


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


# --- the commit log ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CommitPoint:
    """What a chart needs of one commit."""

    t_ms: int
    table: str
    events: int
    duration_ms: int | None
    #: Source commit of the newest change → this Hudi commit.
    lag_ms: int | None


def _point(c: CommitRecord) -> CommitPoint:
    lag = None if c.max_commit_ts_ms is None else max(0, c.committed_at_ms - c.max_commit_ts_ms)
    # One string per table name, not one per commit.
    return CommitPoint(c.committed_at_ms, sys.intern(c.table), c.events, c.duration_ms, lag)


def _line_time_ms(line: bytes) -> int | None:
    try:
        data = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    t = data.get("committed_at_ms") if isinstance(data, dict) else None
    return t if isinstance(t, int) else None


def offset_at(path: Path, since_ms: int) -> int:
    """The offset of the first line of the JSON Lines ``path`` committed at or after
    ``since_ms`` (or near it: the log is appended in time order, so a binary search over
    byte offsets finds it reading a few dozen lines, whatever the file's size)."""
    try:
        size = path.stat().st_size
    except OSError:
        return 0
    lo, hi = 0, size
    with path.open("rb") as f:
        # Invariant: every line starting before lo is older than since_ms.
        while hi - lo > 4096:
            mid = (lo + hi) // 2
            f.seek(mid)
            f.readline()  # to the start of the next line
            start = f.tell()
            t = None
            while t is None and f.tell() < size:
                t = _line_time_ms(f.readline())
            if t is None or t >= since_ms:
                hi = mid
            else:
                lo = start
    # lo is a line start (0 or just after a newline); the caller skips the few old lines.
    return lo


class CommitLog:
    """The commits of the last :data:`MAX_WINDOW_S`, read incrementally from the ledger's
    ``commits.jsonl``; a file that shrank or was replaced is read again."""

    def __init__(self, state_dir: Path, max_window_s: int = MAX_WINDOW_S) -> None:
        self.path = state_dir / COMMITS_FILE
        self.max_window_ms = max_window_s * 1000
        self.points: deque[CommitPoint] = deque(maxlen=COMMITS_KEPT)
        self.ddl: dict[str, deque[dict[str, Any]]] = {}
        self.version = 0
        self._offset: int | None = None
        self._inode: int | None = None

    def refresh(self, now_ms: int) -> None:
        try:
            st = self.path.stat()
        except OSError:
            if self._offset:
                self._restart()
            return
        if self._offset is None or st.st_ino != self._inode or st.st_size < self._offset:
            self._restart()
            self._inode = st.st_ino
            self._offset = offset_at(self.path, now_ms - self.max_window_ms)
        if st.st_size > self._offset:
            self._read(st.st_size)
        floor = now_ms - self.max_window_ms
        while self.points and self.points[0].t_ms < floor:
            self.points.popleft()

    def _restart(self) -> None:
        self.points.clear()
        self.ddl.clear()
        self._offset = None
        self.version += 1

    def _read(self, size: int) -> None:
        assert self._offset is not None
        with self.path.open("rb") as f:
            f.seek(self._offset)
            data = f.read(size - self._offset)
        end = data.rfind(b"\n")
        if end < 0:
            return  # a writer mid-append: the line is read once complete
        for line in data[:end].split(b"\n"):
            if not line.strip():
                continue
            try:
                record = decode(CommitRecord, orjson.loads(line), self.path)
            except (orjson.JSONDecodeError, LedgerError) as exc:
                # The status shows an unreadable ledger; a chart just misses that point.
                log.warning("commit line skipped by the history", error=str(exc))
                continue
            self.points.append(_point(record))
            if record.ddl:
                kept = self.ddl.setdefault(record.table, deque(maxlen=DDL_KEPT))
                kept.append(record.model_dump(mode="json"))
        self._offset += end + 1
        self.version += 1

    def since(self, t_ms: int) -> list[CommitPoint]:
        """The commits at or after ``t_ms``, oldest first."""
        times = [p.t_ms for p in self.points]
        return list(self.points)[bisect.bisect_left(times, t_ms) :]


# --- the sample ring --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sample:
    """What ``serve`` saw at one moment: cumulative stager counts and gauges of the bus
    (None when the bus did not answer)."""

    t_ms: int
    received: int
    staged: int
    dead_lettered: int
    dlq: int | None = None
    pending: int | None = None
    ack_pending: int | None = None

    def dumps(self) -> bytes:
        return orjson.dumps({k: v for k, v in asdict(self).items() if v is not None})

    @classmethod
    def loads(cls, line: bytes) -> Sample | None:
        try:
            data = orjson.loads(line)
            return cls(**data) if isinstance(data, dict) else None
        except (orjson.JSONDecodeError, TypeError):
            return None


class SampleRing:
    """At most ``capacity`` samples in a JSON Lines file, appended durably one by one and
    rewritten (atomically) to the newest ``capacity`` once a quarter more has piled up."""

    def __init__(self, directory: Path, capacity: int = RING_SAMPLES) -> None:
        self.path = directory / RING_FILE
        self.capacity = capacity
        self.samples: deque[Sample] = deque(maxlen=capacity)
        self._lines = 0
        self.version = 0
        try:
            lines = self.path.read_bytes().split(b"\n")
        except FileNotFoundError:
            return
        except OSError as exc:
            log.warning("history samples unreadable, starting afresh", error=str(exc))
            return
        loaded = [s for s in map(Sample.loads, lines) if s is not None]
        self.samples.extend(sorted(loaded, key=lambda s: s.t_ms))
        self._lines = len(loaded)

    def add(self, sample: Sample) -> None:
        if self.samples and sample.t_ms <= self.samples[-1].t_ms:
            return  # a clock step back: keep the times ordered
        self.samples.append(sample)
        self.version += 1
        try:
            if self._lines >= self.capacity * 5 // 4:
                write_atomic(self.path, b"".join(s.dumps() + b"\n" for s in self.samples))
                self._lines = len(self.samples)
            else:
                make_dirs(self.path.parent)
                append_line(self.path, sample.dumps())
                self._lines += 1
        except OSError as exc:
            # The charts lose a point on disk; serve itself must go on.
            log.warning("history sample not saved", path=str(self.path), error=str(exc))

    def since(self, t_ms: int) -> list[Sample]:
        times = [s.t_ms for s in self.samples]
        return list(self.samples)[bisect.bisect_left(times, t_ms) :]


# --- the series -------------------------------------------------------------------------------


def _value_at(times: Sequence[int], values: Sequence[int], t_ms: int) -> tuple[int, int] | None:
    """The last (time, value) sampled at or before ``t_ms``, when it is recent enough."""
    i = bisect.bisect_right(times, t_ms) - 1
    if i < 0 or t_ms - times[i] > SAMPLE_REACH_MS:
        return None
    return times[i], values[i]


def counter_rate(
    samples: Sequence[Sample], field: str, starts: Sequence[int], step_ms: int, now_ms: int
) -> list[float | None]:
    """Per bucket, the increase per second of the cumulative ``field`` between the samples at
    its two ends (the value at its start, else the first sample inside it; the last sample by
    its end); a gap where there is no such pair or the counter went back (a reset)."""
    times = [s.t_ms for s in samples]
    values = [int(getattr(s, field)) for s in samples]
    out: list[float | None] = []
    for start in starts:
        end = min(start + step_ms, now_ms)
        a = _value_at(times, values, start)
        if a is None:
            first = bisect.bisect_left(times, start)
            a = (times[first], values[first]) if first < len(times) else None
        b = _value_at(times, values, end)
        if a is None or b is None or b[0] <= a[0] or b[1] < a[1]:
            out.append(None)
        else:
            out.append((b[1] - a[1]) / ((b[0] - a[0]) / 1000))
    return out


def gauge_max(
    samples: Sequence[Sample], field: str, starts: Sequence[int], step_ms: int
) -> list[float | None]:
    """Per bucket, the largest value of ``field`` sampled in it (a gap where none was)."""
    out: list[float | None] = [None] * len(starts)
    for s in samples:
        i = bucket_index(starts, step_ms, s.t_ms)
        value = getattr(s, field)
        if i is not None and value is not None:
            held = out[i]
            out[i] = value if held is None else max(held, value)
    return out


def commit_series(
    commits: Iterable[CommitPoint],
    starts: Sequence[int],
    step_s: int,
    now_ms: int,
    smooth_buckets: int,
) -> dict[str, list[float | None]]:
    """Committed events per second (smoothed), commit lag p50/p99 and commit duration
    p50/max per bucket, in seconds."""
    step_ms = step_s * 1000
    events = [0.0] * len(starts)
    lags: list[list[float]] = [[] for _ in starts]
    durations: list[list[float]] = [[] for _ in starts]
    counts = [0] * len(starts)
    for c in commits:
        i = bucket_index(starts, step_ms, c.t_ms)
        if i is None:
            continue
        counts[i] += 1
        events[i] += c.events
        if c.lag_ms is not None and c.events:
            lags[i].append(c.lag_ms / 1000)
        if c.duration_ms is not None:
            durations[i].append(c.duration_ms / 1000)
    seconds = bucket_seconds(starts, step_s, now_ms)
    rate: list[float | None] = [e / s for e, s in zip(events, seconds, strict=True)]
    return {
        "committed_per_s": moving_average(rate, smooth_buckets),
        "commits": [float(n) for n in counts],
        "lag_p50_s": [percentile(v, 50) for v in lags],
        "lag_p99_s": [percentile(v, 99) for v in lags],
        "duration_p50_s": [percentile(v, 50) for v in durations],
        "duration_max_s": [max(v) if v else None for v in durations],
    }


# --- what serve holds -------------------------------------------------------------------------


def history_dir(cfg: Config) -> Path:
    """Where ``serve`` keeps its samples: ``<home>/serve``."""
    return (cfg.home / "serve").resolve()


class History:
    """The commit log and the sample ring of one ``tidelake serve``, and the answers built
    from them (cached briefly: a dashboard poll and a second tab share one)."""

    def __init__(self, lake_state_dir: Path, directory: Path) -> None:
        self.commits = CommitLog(lake_state_dir)
        self.ring = SampleRing(directory)
        self._cache: dict[tuple[Any, ...], tuple[float, dict[str, Any]]] = {}
        # The sampler runs on the event loop, a query in a worker thread: one at a time.
        self._lock = threading.Lock()

    @classmethod
    def of(cls, cfg: Config) -> History:
        return cls(cfg.lake_state_dir, history_dir(cfg))

    def record(self, snap: Any) -> None:
        """Add a sample of a monitor snapshot (:class:`tidelake.api.monitor.Snapshot`)."""
        totals = snap.stage.totals
        bus = snap.bus or {}
        consumer = bus.get("consumer") or {}
        up = snap.bus is not None
        with self._lock:
            self._add(
                Sample(
                    t_ms=snap.now_ms,
                    received=totals.received,
                    staged=totals.staged,
                    dead_lettered=totals.dead_lettered,
                    dlq=((bus.get("dlq") or {}).get("messages", 0)) if up else None,
                    pending=consumer.get("pending") if up and consumer else None,
                    ack_pending=consumer.get("ack_pending") if up and consumer else None,
                )
            )

    def _add(self, sample: Sample) -> None:
        self.ring.add(sample)

    def refresh_commits(self) -> None:
        with self._lock:
            self.commits.refresh(int(time.time() * 1000))

    async def sample_forever(self, snapshot: Any, every_s: float = SAMPLE_EVERY_S) -> None:
        """Take a sample every ``every_s`` (``snapshot`` is ``Monitor.snapshot``) until
        cancelled, and read the commit log's new lines meanwhile (so the first page load after
        a start does not wait for a long log); a failed sample is logged and the next taken."""
        while True:
            try:
                self.record(await snapshot())
                await asyncio.to_thread(self.refresh_commits)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("history sample failed")
            await asyncio.sleep(every_s)

    def query(
        self,
        window_s: int,
        step_s: int | None = None,
        smooth_s: int | None = None,
        table: str | None = None,
        now_ms: int | None = None,
    ) -> dict[str, Any]:
        """The series of the last ``window_s`` seconds (of ``table`` only, when given)."""
        with self._lock:
            return self._query(window_s, step_s, smooth_s, table, now_ms)

    def _query(
        self,
        window_s: int,
        step_s: int | None,
        smooth_s: int | None,
        table: str | None,
        now_ms: int | None,
    ) -> dict[str, Any]:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        window = min(max(window_s, MIN_WINDOW_S), MAX_WINDOW_S)
        step = clamp_step(window, step_s)
        key = (window, step, smooth_s, table)
        held = self._cache.get(key)
        if now_ms is None and held is not None and time.monotonic() - held[0] < CACHE_S:
            return held[1]
        self.commits.refresh(now)
        starts = bucket_starts(now, window, step)
        smooth = max(step, smooth_s if smooth_s is not None else 3 * step)
        width = max(1, round(smooth / step))
        commits = self.commits.since(starts[0])
        if table is not None:
            commits = [c for c in commits if c.table == table]
        series = commit_series(commits, starts, step, now, width)
        out: dict[str, Any] = {
            "now_ms": now,
            "window_s": window,
            "step_s": step,
            "smooth_s": width * step,
            "table": table,
            # uPlot's x values: Unix seconds of each bucket's start.
            "t": [s / 1000 for s in starts],
            "series": series,
            "commits_in_window": len(commits),
        }
        if table is None:
            step_ms = step * 1000
            samples = self.ring.since(starts[0] - SAMPLE_REACH_MS)
            staged = counter_rate(samples, "staged", starts, step_ms, now)
            series["staged_per_s"] = moving_average(staged, width)
            series["dlq_messages"] = gauge_max(samples, "dlq", starts, step_ms)
            series["consumer_pending"] = gauge_max(samples, "pending", starts, step_ms)
            out["sampled_since_ms"] = self.ring.samples[0].t_ms if self.ring.samples else None
        else:
            out["ddl"] = list(self.commits.ddl.get(table, ()))[::-1]
        if now_ms is None:
            self._cache = {k: v for k, v in self._cache.items() if k != key}
            self._cache[key] = (time.monotonic(), out)
        return out
