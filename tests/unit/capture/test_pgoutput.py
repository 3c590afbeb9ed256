"""pgoutput messages decoded from their binary form; relation changes turned into DDL."""

import struct

from tidelake.capture import pgoutput
from tidelake.capture.pgoutput import RelationInfo
from tidelake.capture.postgres import relation_ddl


def _s(text: str) -> bytes:
    return text.encode() + b"\0"


def _tuple(*values: str | None) -> bytes:
    out = struct.pack(">h", len(values))
    for v in values:
        if v is None:
            out += b"n"
        else:
            out += b"t" + struct.pack(">i", len(v.encode())) + v.encode()
    return out


def test_begin_and_commit() -> None:
    """BEGIN gives the commit LSN up front; COMMIT its end LSN."""
    begin = pgoutput.decode(b"B" + struct.pack(">qqI", 0x16B3748, 0, 42))
    assert pgoutput.Begin(final_lsn=0x16B3748, commit_ts_ms=946684800000, xid=42) == begin
    commit = pgoutput.decode(b"C" + struct.pack(">bqqq", 0, 100, 180, 1_000_000))
    assert pgoutput.Commit(commit_lsn=100, end_lsn=180, commit_ts_ms=946684801000) == commit


def test_relation_insert_update_delete() -> None:
    """Relation columns with key flags; tuples with text, NULL and unchanged TOAST values."""
    rel = pgoutput.decode(
        b"R" + struct.pack(">I", 16385) + _s("shop") + _s("t") + b"d" + struct.pack(">h", 2)
        + b"\x01" + _s("id") + struct.pack(">Ii", 23, -1)
        + b"\x00" + _s("v") + struct.pack(">Ii", 1043, 14)
    )  # fmt: skip
    assert isinstance(rel, pgoutput.Relation)
    assert (
        rel.namespace, rel.name, [c.name for c in rel.columns], [c.key for c in rel.columns],
    ) == ("shop", "t", ["id", "v"], [True, False])  # fmt: skip
    ins = pgoutput.decode(b"I" + struct.pack(">I", 16385) + b"N" + _tuple("1", None))
    assert pgoutput.Insert(16385, ["1", None]) == ins
    upd = pgoutput.decode(
        b"U" + struct.pack(">I", 16385) + b"K" + _tuple("1", None) + b"N" + _tuple("2", "x")
    )
    assert pgoutput.Update(16385, ["2", "x"], ["1", None], "K") == upd
    unchanged = pgoutput.decode(
        b"U" + struct.pack(">I", 16385) + b"N" + struct.pack(">h", 2) + b"t"
        + struct.pack(">i", 1) + b"3u"
    )  # fmt: skip
    assert isinstance(unchanged, pgoutput.Update)
    assert pgoutput.UNCHANGED is unchanged.new[1]
    dele = pgoutput.decode(b"D" + struct.pack(">I", 16385) + b"K" + _tuple("2", None))
    assert pgoutput.Delete(16385, ["2", None], "K") == dele


def test_truncate_and_logical_message() -> None:
    """TRUNCATE names its relations; a logical message keeps prefix and content."""
    trunc = pgoutput.decode(b"T" + struct.pack(">Ib", 2, 1) + struct.pack(">II", 7, 8))
    assert pgoutput.Truncate((7, 8), cascade=True, restart_identity=False) == trunc
    msg = pgoutput.decode(b"M" + struct.pack(">bq", 1, 77) + _s("tidelake.heartbeat")
                          + struct.pack(">I", 2) + b"hi")  # fmt: skip
    assert pgoutput.LogicalMessage(True, 77, "tidelake.heartbeat", b"hi") == msg


def test_lsn_text_round_trip() -> None:
    """LSNs print as PostgreSQL does and parse back."""
    assert pgoutput.lsn_text((1 << 32) | 0x16B3748) == "1/16B3748"
    assert pgoutput.parse_lsn("1/16B3748") == (1 << 32) | 0x16B3748


def _rel(columns: list[tuple[str, int, int]], name: str = "t") -> RelationInfo:
    types = {c[0]: {23: "integer", 25: "text", 20: "bigint"}[c[1]] for c in columns}
    return RelationInfo(1, "shop", name, columns, types, ("id",))


def test_added_column_becomes_add_column() -> None:
    """A new column in the Relation message is an ADD COLUMN with its SQL type."""
    old = _rel([("id", 23, -1), ("v", 25, -1)])
    new = _rel([("id", 23, -1), ("v", 25, -1), ("note", 25, -1)])
    assert relation_ddl(old, new) == [("ALTER", "ALTER TABLE shop.t ADD COLUMN note text")]
    with_default = relation_ddl(old, new, {"note": "'n/a'::text"})
    assert with_default == [
        ("ALTER", "ALTER TABLE shop.t ADD COLUMN note text DEFAULT 'n/a'::text")
    ]


def test_dropped_renamed_and_retyped_columns() -> None:
    """A drop, a rename in place and a type change each become their ALTER statement."""
    old = _rel([("id", 23, -1), ("v", 25, -1), ("w", 23, -1)])
    renamed = _rel([("id", 23, -1), ("label", 25, -1), ("w", 23, -1)])
    assert relation_ddl(old, renamed) == [("ALTER", "ALTER TABLE shop.t RENAME COLUMN v TO label")]
    dropped = _rel([("id", 23, -1), ("v", 25, -1)])
    assert relation_ddl(old, dropped) == [("ALTER", "ALTER TABLE shop.t DROP COLUMN w")]
    retyped = _rel([("id", 23, -1), ("v", 25, -1), ("w", 20, -1)])
    assert relation_ddl(old, retyped) == [
        ("ALTER", "ALTER TABLE shop.t ALTER COLUMN w TYPE bigint")
    ]
    moved = _rel([("id", 23, -1), ("v", 25, -1), ("w", 23, -1)], name="u")
    assert relation_ddl(old, moved) == [("RENAME", "ALTER TABLE shop.t RENAME TO u")]
