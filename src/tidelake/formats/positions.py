"""Is a decoded event's position one its producer can actually emit? (issue 23, deliver 4)

A table's position watermark only moves up (docs/architecture.md §3 rule 2): one event whose
position lies beyond anything the stream will later carry (a canal-json ``commitTs`` of
2^64-1) would make every later real event of its table "stale" and drop it. So the stager
checks each event against the ranges its producer can emit, read from the producers' code,
and dead-letters one that is out of them with reason ``implausible_position: …`` on its
first delivery, before it can reach a watermark:

* **TiDB TSO** (``_tidb.commitTs``, the first component of a TiDB position). TiCDC writes the
  transaction's commit TSO as is (tiflow ``pkg/sink/codec/canal/canal_json_row_event_encoder.go``,
  ``newJSONMessageForDML``: ``"commitTs": e.CommitTs``) and ``es`` as its physical part
  (``canal_entry.go`` ``convertToCanalTs``: ``commitTs >> 18``). A TSO is
  ``physical_ms << 18 | logical`` (tikv/client-go ``oracle/oracle.go`` ``ComposeTS``,
  ``ExtractPhysical``, ``physicalShiftBits = 18``), with the physical part PD's clock. It
  is refused when it is not below 2^63 (client-go composes it from an ``int64``) or its
  physical time lies more than :data:`MAX_FUTURE_MS` after the message reached the stream.
* **Commit times** (canal-json ``es``, tidelake's ``commit_ts_ms``, Debezium ``source.ts_ms``
  / ``__source_ts_ms``: milliseconds since the epoch). Refused beyond the same bound, or
  beyond 9999-12-31 (the last instant a timestamp column holds: an ``es`` of 10^15 made the
  ingest's commit raise, every round).
* **MySQL / MariaDB binlog** (Debezium ``source.file``/``pos``, tidelake's own capture): the
  file number is the binlog name's numeric extension, at most ``0x7FFFFFFF`` (MySQL
  ``sql/binlog.cc`` ``MAX_LOG_UNIQUE_FN_EXT``); ``pos`` is the 4-byte ``log_pos`` of the v4
  event header (mysql-binlog-connector-java ``EventHeaderV4.nextPosition``), below 2^32.
  After a failover tidelake's capture leads its positions with a server epoch
  ``EPOCH_BASE + e`` (``capture/gtid.py``: 2^32 + e, above every file number, so they sort
  after every earlier position); the file number and offset then follow it.
* **PostgreSQL LSN** (Debezium ``source.lsn``/``sequence``, tidelake's own capture): a
  ``long`` in Debezium (``io.debezium.connector.postgresql.connection.Lsn``, ``valueOf(Long)``),
  so below 2^63 (an LSN there would be 8 EiB of WAL).

The arrival time is the stream's own timestamp of the message (the JetStream ack subject),
not the stager's clock, so a backlog staged hours later is judged by when it was published.
Positions in the past are never refused: old events are what replays and snapshots carry.
"""

from __future__ import annotations

from tidelake.capture.gtid import EPOCH_BASE
from tidelake.errors import DecodeError
from tidelake.events import ChangeEvent
from tidelake.formats._common import Decoded

#: Bucket (the text before ``:``) of every reason given here.
REASON = "implausible_position"

#: How far after its arrival in the stream an event's commit time may lie: the producer's
#: clock (PD's for a TSO, the database server's for ``ts_ms``) may run ahead of the NATS
#: server's by this much. A position further ahead would hold its table's watermark beyond
#: every real event for that long.
MAX_FUTURE_MS = 15 * 60 * 1000

#: The last millisecond a timestamp holds (9999-12-31T23:59:59.999Z).
MAX_TIMESTAMP_MS = 253_402_300_799_999

#: TSO layout: physical milliseconds above 18 logical bits (client-go ``physicalShiftBits``).
TSO_LOGICAL_BITS = 18
#: A TSO is composed in an ``int64``.
MAX_TSO = 2**63 - 1
#: MySQL's largest binlog file extension (``MAX_LOG_UNIQUE_FN_EXT``).
MAX_BINLOG_FILE = 0x7FFFFFFF
#: ``log_pos`` is a 4-byte field of the binlog event header.
MAX_BINLOG_POS = 2**32 - 1
#: Debezium carries an LSN in a Java ``long``.
MAX_LSN = 2**63 - 1

_BINLOG_SOURCES = frozenset({"mysql", "mariadb", "debezium-mysql", "debezium-mariadb"})
_LSN_SOURCES = frozenset({"postgres", "debezium-postgresql"})


def check_positions(decoded: Decoded, *, arrived_ms: int) -> None:
    """Raise :class:`DecodeError` (reason ``implausible_position: …``) when an event of
    ``decoded`` carries a position or commit time its producer cannot emit, judged against
    ``arrived_ms``, when the message reached the stream (module docstring)."""
    for event in decoded.events:
        reason = implausible(event, arrived_ms=arrived_ms)
        if reason is not None:
            raise DecodeError(f"{REASON}: {event.table_id}: {reason}")


def implausible(event: ChangeEvent, *, arrived_ms: int) -> str | None:
    """Why ``event``'s position or commit time is out of its producer's range, or None."""
    latest_ms = arrived_ms + MAX_FUTURE_MS
    parts = event.position.parts
    if event.source == "tidb" and parts[0]:
        tso = parts[0]
        if tso > MAX_TSO:
            return f"commitTs {tso} is not a TSO (at most 2^63-1)"
        physical = tso >> TSO_LOGICAL_BITS
        if physical > latest_ms:
            return (
                f"commitTs {tso} has a physical time of {physical} ms, "
                f"{_ahead(physical, arrived_ms)} after the message's arrival"
            )
    elif event.source in _BINLOG_SOURCES and len(parts) >= 2:
        if event.source == "mysql" and parts[0] >= EPOCH_BASE and len(parts) >= 3:
            parts = parts[1:]  # our capture after a failover: (epoch, file, offset, row)
        if parts[0] > MAX_BINLOG_FILE:
            return f"binlog file number {parts[0]} is above MySQL's largest ({MAX_BINLOG_FILE})"
        if parts[1] > MAX_BINLOG_POS:
            return f"binlog position {parts[1]} does not fit the 4-byte log_pos"
    elif event.source in _LSN_SOURCES and max(parts) > MAX_LSN:
        return f"LSN {max(parts)} is above 2^63-1"
    # After the TSO: TiDB's commit time is derived from it, whose reason says more.
    ms = event.commit_ts_ms
    if ms is not None and (ms > MAX_TIMESTAMP_MS or ms > latest_ms):
        return f"commit time {ms} ms is {_ahead(ms, arrived_ms)} after the message's arrival"
    return None


def _ahead(ms: int, arrived_ms: int) -> str:
    """``ms - arrived_ms`` for a reason's text, in a unit a reader takes in at once."""
    delta_s = (ms - arrived_ms) / 1000
    if delta_s >= 86_400 * 365:
        return f"{delta_s / (86_400 * 365.25):.3g} years"
    if delta_s >= 3600:
        return f"{delta_s / 3600:.3g} hours"
    return f"{delta_s:.0f} s"
