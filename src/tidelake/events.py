"""The one internal model: a committed change of one source table, with its ordering position.

Every wire format decodes into :class:`ChangeEvent`; every later stage (staging, ingest,
verification) works on it and nothing else. See docs/architecture.md §1 and §2.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import orjson

from tidelake.names import table_id

#: Width of one encoded position component: 20 digits hold any unsigned 64-bit integer.
_PART_WIDTH = 20
_PART_LIMIT = 10**_PART_WIDTH
#: ``%``-formats of an encoded position by its number of components (the hot path encodes
#: every staged event's position; one format call beats a join over a generator).
_ENCODINGS = tuple(".".join([f"%0{_PART_WIDTH}d"] * n) for n in range(8))


class Op(enum.StrEnum):
    """What a change event does to its table."""

    INSERT = "insert"
    UPDATE = "update"
    DELETE = "delete"
    DDL = "ddl"

    @property
    def is_row_change(self) -> bool:
        return self is not Op.DDL


@dataclass(frozen=True, order=True, slots=True)
class Position:
    """Total order of the changes of one source, in commit order (docs/architecture.md §2).

    A tuple of unsigned integers compared left to right: for TiDB ``(commitTs, stream
    sequence, row index)``, for MySQL ``(binlog file number, transaction offset, row index)``,
    for PostgreSQL ``(commit LSN, index in transaction)``. One source always produces
    positions of the same shape, so the fixed-width string encoding (:meth:`encode`) sorts
    exactly like the tuple; Hudi merges on that string.
    """

    parts: tuple[int, ...]

    def __post_init__(self) -> None:
        parts = self.parts
        if not parts:
            raise ValueError("a position needs at least one component")
        # The common case checked at C speed: plain ints, all in range.
        if {*map(type, parts)} == {int} and min(parts) >= 0 and max(parts) < _PART_LIMIT:
            return
        for p in parts:
            if not isinstance(p, int) or isinstance(p, bool) or p < 0 or p >= _PART_LIMIT:
                raise ValueError(f"position component out of range: {p!r}")

    def encode(self) -> str:
        """Fixed-width decimal text whose string order equals the tuple order."""
        parts = self.parts
        if len(parts) < len(_ENCODINGS):
            return _ENCODINGS[len(parts)] % parts
        return ".".join(f"{p:0{_PART_WIDTH}d}" for p in parts)

    @classmethod
    def decode(cls, text: str) -> Position:
        try:
            return cls(tuple(int(p) for p in text.split(".")))
        except ValueError as exc:
            raise ValueError(f"not an encoded position: {text!r}") from exc

    def __str__(self) -> str:
        return ":".join(str(p) for p in self.parts)


@dataclass(frozen=True, slots=True)
class ChangeEvent:
    """One committed change of one row (or one DDL statement) of a source table.

    ``key`` holds the primary-key values of the row the event applies to: for an INSERT or
    UPDATE the new row, for a DELETE the deleted row. A producer that names no key (Debezium
    Server) gives ``pk=()`` and ``key=None``: the lake takes the table's key from config, the
    existing table or the source catalog. Values are kept as the wire format
    carried them (canal-json carries text); ``column_types`` holds the source SQL type of each
    column (``"decimal(38,10)"``, ``"bigint unsigned"``, ...) so the lake can type them.
    """

    source: str
    database: str
    table: str
    op: Op
    position: Position
    pk: tuple[str, ...] = ()
    key: dict[str, Any] | None = None
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    commit_ts_ms: int | None = None
    column_types: dict[str, str] = field(default_factory=dict)
    ddl: str | None = None
    ddl_type: str | None = None
    #: JetStream stream sequence of the message that carried the event (set by the stager).
    seq: int = 0
    #: How the row values are written: ``""`` canal-json text (every format converts to it
    #: where it can); ``"debezium-json"`` the raw values of a Debezium JsonConverter message
    #: without schema, turned into text by ``formats.debezium.value_text`` once the lake knows
    #: each column's source type.
    encoding: str = ""
    #: Columns the producer did not send (Debezium's unavailable-value placeholder, pgoutput's
    #: unchanged TOAST): absent from the row image; the lake keeps their stored values.
    unchanged: tuple[str, ...] = ()

    @property
    def table_id(self) -> str:
        """``database.table``: the name of the source table, and of its Hudi table; a part
        holding a dot or a backtick is backtick-quoted (``names.table_id``), so the text
        names one table and ``names.split_table_id`` gives the parts back."""
        return table_id(self.database, self.table)

    @property
    def row(self) -> dict[str, Any] | None:
        """The row image the lake keeps: ``after`` for an upsert, ``before`` for a delete."""
        return self.before if self.op is Op.DELETE else self.after

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; the staged-file line format (see ``stage/batch.py``)."""
        return {
            "source": self.source,
            "database": self.database,
            "table": self.table,
            # ``_value_``, not the ``value`` property: this runs once per staged event.
            "op": self.op._value_,
            "position": self.position.encode(),
            "pk": list(self.pk),
            "key": self.key,
            "before": self.before,
            "after": self.after,
            "commit_ts_ms": self.commit_ts_ms,
            "column_types": self.column_types,
            "ddl": self.ddl,
            "ddl_type": self.ddl_type,
            "seq": self.seq,
            "encoding": self.encoding,
            "unchanged": list(self.unchanged),
        }

    def to_json(self) -> bytes:
        return orjson.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ChangeEvent:
        return cls(
            source=d["source"],
            database=d["database"],
            table=d["table"],
            op=Op(d["op"]),
            position=Position.decode(d["position"]),
            pk=tuple(d.get("pk") or ()),
            key=d.get("key"),
            before=d.get("before"),
            after=d.get("after"),
            commit_ts_ms=d.get("commit_ts_ms"),
            column_types=d.get("column_types") or {},
            ddl=d.get("ddl"),
            ddl_type=d.get("ddl_type"),
            seq=int(d.get("seq") or 0),
            encoding=d.get("encoding") or "",
            unchanged=tuple(d.get("unchanged") or ()),
        )

    @classmethod
    def from_json(cls, data: bytes | str) -> ChangeEvent:
        return cls.from_dict(orjson.loads(data))
