"""GTID positions of MySQL and MariaDB, and the capture position shape that survives a failover.

**MariaDB** (https://mariadb.com/kb/en/gtid/): a GTID is ``domain-server_id-seq``; within one
replication domain ``seq`` grows with every event group, and every server of the topology
gives an event group the GTID it got on the server that first wrote it, so "the last GTID
per domain" names one point of the history on every server. ``@@gtid_binlog_pos`` is the
last GTID written to the server's binlog per domain, ``@@gtid_current_pos`` that or the last
one applied by replication (``gtid_slave_pos``), whichever is newer;
``BINLOG_GTID_POS(file, pos)`` turns a binlog file/offset into the GTID position there;
``MASTER_GTID_WAIT(pos)`` waits until a replica has applied up to ``pos``. A replica (or our
capture) asks to start after a position by ``SET @slave_connect_state = '<pos>'`` before
``COM_BINLOG_DUMP`` (python-mysql-replication ``BinLogStreamReader.__set_mariadb_settings``
with ``is_mariadb=True, auto_position=<pos>``; it also sets ``@slave_gtid_strict_mode=1``,
so a server whose binlog lacks that GTID refuses with error 1236 instead of starting
elsewhere: MariaDB ``sql/sql_repl.cc`` ``check_slave_start_position``).

**MySQL** (https://dev.mysql.com/doc/refman/8.0/en/replication-gtids-concepts.html): a GTID
is ``server_uuid:transaction_id``; ``@@gtid_executed`` is the *set* of every GTID the server
committed (``uuid:1-100:105,uuid2:1-7``), ``@@gtid_purged`` the subset no longer in its binlog.
A replica sends its executed set in ``COM_BINLOG_DUMP_GTID`` and receives every transaction
outside it (python-mysql-replication ``auto_position=<set>`` without ``is_mariadb``). The set
arithmetic here uses the library's :class:`pymysqlreplication.gtid.GtidSet`; its
``GtidSet in GtidSet`` compares members with ``==`` rather than by containment (library
source), so :func:`mysql_contains` checks member by member.

**Position shape across servers.** A binlog position ``(file number, transaction offset,
row index)`` means something on one server only. The capture keeps a *server epoch* in its
saved state: 0 for the server it started on, one more at each switch to another server.
Epoch 0 keeps the original three-part shape, so positions published before this module
existed and after it compare as they always did. Epoch ``e >= 1`` positions lead with
``EPOCH_BASE + e``: :data:`EPOCH_BASE` is 2^32, above every binlog file number (MySQL
``sql/binlog.cc`` ``MAX_LOG_UNIQUE_FN_EXT`` = 0x7FFFFFFF), so every position of a later
epoch sorts after every position of an earlier one — tuple order and the fixed-width text
encoding alike (``events.Position``) — and the ingest's per-table watermark, which drops an
event below a committed position, never drops a change read from the new server. A
transaction published before the switch but not yet acknowledged in the saved state is read
again from the new server under a new position; it carries the same row images in the same
order, so applying it again leaves every row as the source has it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pymysqlreplication.gtid import GtidSet

#: First component of a position read in server epoch 1; epoch e leads with EPOCH_BASE + e.
EPOCH_BASE = 1 << 32

_MARIA_GTID = re.compile(r"^(\d+)-(\d+)-(\d+)$")


class GtidError(ValueError):
    """A GTID or GTID position that cannot be parsed."""


def txn_prefix(epoch: int, file_no: int, offset: int) -> tuple[int, ...]:
    """The position prefix of a transaction at ``file_no``/``offset`` in server ``epoch``."""
    if epoch <= 0:
        return (file_no, offset)
    return (EPOCH_BASE + epoch, file_no, offset)


def epoch_of(parts: tuple[int, ...]) -> int:
    """The server epoch a capture position was read in (0 for the original shape)."""
    return parts[0] - EPOCH_BASE if parts and parts[0] >= EPOCH_BASE else 0


# -- MariaDB ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MariaGtid:
    """One MariaDB GTID ``domain-server_id-seq``."""

    domain: int
    server_id: int
    seq: int

    @classmethod
    def parse(cls, text: str) -> MariaGtid:
        match = _MARIA_GTID.match(text.strip())
        if not match:
            raise GtidError(f"not a MariaDB GTID (domain-server_id-seq): {text!r}")
        return cls(int(match[1]), int(match[2]), int(match[3]))

    def __str__(self) -> str:
        return f"{self.domain}-{self.server_id}-{self.seq}"


@dataclass(frozen=True, slots=True)
class MariaPos:
    """A MariaDB GTID position: the last GTID per replication domain (``gtid_binlog_pos``
    form, ``0-1-100,1-2-7``)."""

    last: tuple[MariaGtid, ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> MariaPos:
        out: dict[int, MariaGtid] = {}
        for item in (text or "").split(","):
            if item.strip():
                gtid = MariaGtid.parse(item)
                if gtid.domain in out:
                    raise GtidError(f"domain {gtid.domain} twice in GTID position {text!r}")
                out[gtid.domain] = gtid
        return cls(tuple(sorted(out.values(), key=lambda g: g.domain)))

    def domains(self) -> dict[int, MariaGtid]:
        return {g.domain: g for g in self.last}

    def advanced(self, gtid: MariaGtid) -> MariaPos:
        """This position after the event group ``gtid`` (it replaces its domain's entry)."""
        domains = self.domains()
        domains[gtid.domain] = gtid
        return MariaPos(tuple(sorted(domains.values(), key=lambda g: g.domain)))

    def missing_on(self, server: MariaPos) -> list[str]:
        """What a server at ``server`` (its ``gtid_binlog_pos``) lacks of this position: one
        text per domain where it is behind or absent (empty: it has everything we have)."""
        theirs = server.domains()
        out = []
        for ours in self.last:
            have = theirs.get(ours.domain)
            if have is None:
                out.append(f"domain {ours.domain}: we have {ours}, the server has none")
            elif have.seq < ours.seq:
                out.append(f"domain {ours.domain}: we have {ours}, the server only {have}")
        return out

    def behind(self, server: MariaPos) -> int:
        """How many event groups ``server`` has that this position does not (per-domain
        sequence difference; seq grows by one per event group in a domain)."""
        ours = self.domains()
        total = 0
        for have in server.last:
            mine = ours.get(have.domain)
            total += max(0, have.seq - (mine.seq if mine else 0))
        return total

    def __str__(self) -> str:
        return ",".join(str(g) for g in self.last)


# -- MySQL --------------------------------------------------------------------------------------


def mysql_set(text: str | None) -> GtidSet:
    """A MySQL GTID set from its text (``@@gtid_executed`` form; newlines allowed)."""
    # Imported here: the stager checks positions with EPOCH_BASE and the base install has
    # no MySQL client library (the [mysql] extra).
    from pymysqlreplication.gtid import GtidSet

    try:
        return GtidSet(" ".join((text or "").split()).replace(" ", "") or None)
    except Exception as exc:  # the library raises bare Exception / ValueError
        raise GtidError(f"not a MySQL GTID set: {text!r}: {exc}") from exc


class MySQLExecuted:
    """A MySQL executed GTID set grown one transaction at a time: the capture adds the GTID
    of every committed transaction, so this keeps closed intervals per ``server_uuid`` and
    extends the last one in place (the library's ``GtidSet + Gtid`` deep-copies the set:
    about 170 us a transaction, measured here). Text as MySQL prints it: ``uuid:1-5:7``."""

    def __init__(self, text: str | None = None) -> None:
        self._sets: dict[str, list[list[int]]] = {}
        self._text: str | None = None
        for item in "".join((text or "").split()).split(","):
            if not item:
                continue
            sid, *ranges = item.split(":")
            if not ranges:
                raise GtidError(f"not a MySQL GTID set: {text!r}")
            for r in ranges:
                first, _, last = r.partition("-")
                try:
                    a, b = int(first), int(last or first)
                except ValueError as exc:
                    raise GtidError(f"not a MySQL GTID set: {text!r}") from exc
                if not sid or not 1 <= a <= b:
                    raise GtidError(f"not a MySQL GTID set: {text!r}")
                self._insert(sid.lower(), a, b)

    def add(self, gtid: str) -> None:
        """Add the transaction ``uuid:n``."""
        sid, _, gno = gtid.rpartition(":")
        try:
            number = int(gno)
        except ValueError as exc:
            raise GtidError(f"not a MySQL GTID: {gtid!r}") from exc
        if not sid or number < 1:
            raise GtidError(f"not a MySQL GTID: {gtid!r}")
        self.add_gno(sid, number)

    def add_gno(self, sid: str, gno: int) -> None:
        intervals = self._sets.get(sid)
        if intervals is None:
            sid = sid.lower()
            intervals = self._sets.setdefault(sid, [])
        self._text = None
        if intervals and intervals[-1][1] + 1 == gno:
            intervals[-1][1] = gno  # the common case: the next transaction of that server
        elif not (intervals and intervals[-1][0] <= gno <= intervals[-1][1]):
            self._insert(sid, gno, gno)

    def _insert(self, sid: str, a: int, b: int) -> None:
        merged: list[list[int]] = []
        for lo, hi in sorted([*self._sets.get(sid, []), [a, b]]):
            if merged and lo <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        self._sets[sid] = merged
        self._text = None

    def __str__(self) -> str:
        if self._text is None:
            self._text = ",".join(
                sid + "".join(f":{a}" if a == b else f":{a}-{b}" for a, b in intervals)
                for sid, intervals in sorted(self._sets.items())
                if intervals
            )
        return self._text


def mysql_added(executed: str | None, gtid: str) -> str:
    """``executed`` with the transaction ``uuid:n`` added, as text."""
    out = MySQLExecuted(executed)
    out.add(gtid)
    return str(out)


def mysql_contains(outer: str | None, inner: str | None) -> bool:
    """Every transaction of the set ``inner`` is in the set ``outer``."""
    big = mysql_set(outer)
    return all(any(g in mine for mine in big.gtids) for g in mysql_set(inner).gtids)


def mysql_missing_on(ours: str | None, server_executed: str | None) -> str:
    """The part of our executed set the server has not executed (empty text: none)."""
    server = mysql_set(server_executed)
    rest = []
    for g in mysql_set(ours).gtids:
        left = g
        for theirs in server.gtids:
            left = left - theirs
        if left.intervals:
            rest.append(str(left))
    return ",".join(rest)


def mysql_count(text: str | None) -> int:
    """How many transactions a set names."""
    return sum(b - a for g in mysql_set(text).gtids for a, b in g.intervals)
