"""The pgoutput logical replication protocol (version 1), decoded from its binary messages.

Message layout as documented in "Logical Replication Message Formats" of the PostgreSQL
manual: a one-byte tag, then big-endian integers and NUL-terminated strings. Column values
arrive as text (the type's output function): ``n`` NULL, ``u`` an unchanged TOASTed value
that was not sent, ``t`` text.
"""

from __future__ import annotations

import datetime as dt
import struct
from dataclasses import dataclass, field
from typing import Any

#: pgoutput timestamps count microseconds from 2000-01-01 UTC.
PG_EPOCH = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
#: A value pgoutput did not send: an unchanged TOASTed column of an UPDATE.
UNCHANGED = object()


@dataclass(frozen=True, slots=True)
class Column:
    """A relation column: name, type oid and modifier, and whether it is part of the key."""

    name: str
    type_oid: int
    type_modifier: int
    key: bool


@dataclass(frozen=True, slots=True)
class Relation:
    relid: int
    namespace: str
    name: str
    replica_identity: str
    columns: tuple[Column, ...]


@dataclass(frozen=True, slots=True)
class Begin:
    final_lsn: int
    commit_ts_ms: int
    xid: int


@dataclass(frozen=True, slots=True)
class Commit:
    commit_lsn: int
    end_lsn: int
    commit_ts_ms: int


Tuple = list[object]  # str | None | UNCHANGED per column


@dataclass(frozen=True, slots=True)
class Insert:
    relid: int
    new: Tuple


@dataclass(frozen=True, slots=True)
class Update:
    relid: int
    new: Tuple
    old: Tuple | None = None
    #: ``K``: only the key columns of ``old`` are sent; ``O``: the whole old row.
    old_kind: str | None = None


@dataclass(frozen=True, slots=True)
class Delete:
    relid: int
    old: Tuple
    old_kind: str


@dataclass(frozen=True, slots=True)
class Truncate:
    relids: tuple[int, ...]
    cascade: bool
    restart_identity: bool


@dataclass(frozen=True, slots=True)
class LogicalMessage:
    transactional: bool
    lsn: int
    prefix: str
    content: bytes


@dataclass(frozen=True, slots=True)
class Other:
    """Origin, Type and any tag this decoder does not need."""

    tag: str
    fields: dict[str, object] = field(default_factory=dict)


Message = Begin | Commit | Relation | Insert | Update | Delete | Truncate | LogicalMessage | Other


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def byte(self) -> str:
        b = self.data[self.at : self.at + 1].decode("ascii")
        self.at += 1
        return b

    def int8(self) -> int:
        v: int = self.data[self.at]
        self.at += 1
        return v

    def int16(self) -> int:
        (v,) = struct.unpack_from(">h", self.data, self.at)
        self.at += 2
        return int(v)

    def int32(self) -> int:
        (v,) = struct.unpack_from(">i", self.data, self.at)
        self.at += 4
        return int(v)

    def uint32(self) -> int:
        (v,) = struct.unpack_from(">I", self.data, self.at)
        self.at += 4
        return int(v)

    def int64(self) -> int:
        (v,) = struct.unpack_from(">q", self.data, self.at)
        self.at += 8
        return int(v)

    def string(self) -> str:
        end = self.data.index(b"\0", self.at)
        s = self.data[self.at : end].decode("utf-8")
        self.at = end + 1
        return s

    def raw(self, n: int) -> bytes:
        b = self.data[self.at : self.at + n]
        self.at += n
        return b

    def tuple(self) -> Tuple:
        n = self.int16()
        values: Tuple = []
        for _ in range(n):
            kind = self.byte()
            if kind == "n":
                values.append(None)
            elif kind == "u":
                values.append(UNCHANGED)
            elif kind in ("t", "b"):
                values.append(self.raw(self.int32()).decode("utf-8"))
            else:
                raise ValueError(f"pgoutput: unknown tuple value kind {kind!r}")
        return values


def _ts_ms(micros: int) -> int:
    return int((PG_EPOCH + dt.timedelta(microseconds=micros)).timestamp() * 1000)


def decode(data: bytes) -> Message:
    """One pgoutput message."""
    r = _Reader(data)
    tag = r.byte()
    if tag == "B":
        return Begin(final_lsn=r.int64(), commit_ts_ms=_ts_ms(r.int64()), xid=r.uint32())
    if tag == "C":
        r.int8()
        return Commit(commit_lsn=r.int64(), end_lsn=r.int64(), commit_ts_ms=_ts_ms(r.int64()))
    if tag == "R":
        relid = r.uint32()
        namespace = r.string()
        name = r.string()
        identity = chr(r.int8())
        cols = []
        for _ in range(r.int16()):
            flags = r.int8()
            col_name = r.string()
            cols.append(Column(col_name, r.uint32(), r.int32(), bool(flags & 1)))
        return Relation(relid, namespace or "public", name, identity, tuple(cols))
    if tag == "I":
        relid = r.uint32()
        r.byte()  # 'N'
        return Insert(relid, r.tuple())
    if tag == "U":
        relid = r.uint32()
        kind = r.byte()
        old = None
        old_kind = None
        if kind in ("K", "O"):
            old_kind = kind
            old = r.tuple()
            kind = r.byte()
        return Update(relid, r.tuple(), old, old_kind)
    if tag == "D":
        relid = r.uint32()
        kind = r.byte()
        return Delete(relid, r.tuple(), kind)
    if tag == "T":
        n = r.uint32()
        options = r.int8()
        relids = tuple(r.uint32() for _ in range(n))
        return Truncate(relids, bool(options & 1), bool(options & 2))
    if tag == "M":
        flags = r.int8()
        lsn = r.int64()
        prefix = r.string()
        content = r.raw(r.uint32())
        return LogicalMessage(bool(flags & 1), lsn, prefix, content)
    if tag == "O":
        return Other("O", {"lsn": r.int64(), "name": r.string()})
    if tag == "Y":
        return Other("Y", {"oid": r.uint32(), "namespace": r.string(), "name": r.string()})
    return Other(tag)


def lsn_text(lsn: int) -> str:
    """``0/16B3748`` form."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)


@dataclass
class RelationInfo:
    """What the capture knows of one relation: names, SQL types and primary key."""

    relid: int
    namespace: str
    name: str
    columns: list[tuple[str, int, int]]  # name, type oid, type modifier
    types: dict[str, str]
    pk: tuple[str, ...]

    @property
    def table_id(self) -> str:
        return f"{self.namespace}.{self.name}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "columns": [list(c) for c in self.columns],
            "types": self.types,
            "pk": list(self.pk),
        }

    @classmethod
    def from_dict(cls, relid: int, d: dict[str, Any]) -> RelationInfo:
        return cls(
            relid,
            d["namespace"],
            d["name"],
            [(str(c[0]), int(c[1]), int(c[2])) for c in d["columns"]],
            dict(d["types"]),
            tuple(d["pk"]),
        )
