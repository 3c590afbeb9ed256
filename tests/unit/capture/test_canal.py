"""tidelake capture output: canal-json with the ``_tidelake`` position, decoded by our decoder."""

import orjson
import pytest

from tidelake.capture.canal import CanalEncoder, classify_ddl, subject_for
from tidelake.events import Op, Position
from tidelake.formats.canal_json import decode_object

TYPES = {"id": "bigint", "v": "varchar(8)", "d": "decimal(8,2)"}


def _decode(payload: bytes) -> list:
    return decode_object(orjson.loads(payload), seq=7).events


def test_insert_round_trips_with_its_position_and_types() -> None:
    """An INSERT carries the row, the SQL types, and its position as the event position."""
    enc = CanalEncoder("mysql")
    msg = enc.row(database="shop", table="t", pk=("id",), kind="INSERT",
                  data={"id": "1", "v": "a", "d": "1.50"}, old=None, types=TYPES,
                  position=Position((3, 120, 0)), commit_ts_ms=1000)  # fmt: skip
    (event,) = _decode(msg.payload)
    assert (Op.INSERT, Position((3, 120, 0)), "mysql") == (event.op, event.position, event.source)
    assert event.after == {"id": "1", "v": "a", "d": "1.50"}
    assert event.column_types == TYPES
    assert event.commit_ts_ms == 1000
    assert msg.subject == "cdc.shop.t"
    assert msg.msg_id == "mysql:3:120:0"


def test_update_old_holds_only_changed_columns() -> None:
    """Like canal, ``old`` names only the columns an UPDATE changed."""
    enc = CanalEncoder("postgres")
    msg = enc.row(database="shop", table="t", pk=("id",), kind="UPDATE",
                  data={"id": "1", "v": "b", "d": "1.50"},
                  old={"id": "1", "v": "a", "d": "1.50"}, types=TYPES,
                  position=Position((99, 2)), commit_ts_ms=5)  # fmt: skip
    body = orjson.loads(msg.payload)
    assert body["old"] == [{"v": "a"}]
    (event,) = _decode(msg.payload)
    assert event.before == {"id": "1", "v": "a", "d": "1.50"}


def test_primary_key_update_becomes_delete_then_upsert() -> None:
    """A key change decodes to the old key's DELETE, then the new row right after it."""
    enc = CanalEncoder("mysql")
    msg = enc.row(database="shop", table="t", pk=("id",), kind="UPDATE",
                  data={"id": "2", "v": "a", "d": "1.00"},
                  old={"id": "1", "v": "a", "d": "1.00"}, types=TYPES,
                  position=Position((1, 50, 4)), commit_ts_ms=5)  # fmt: skip
    delete, upsert = _decode(msg.payload)
    assert (delete.op, delete.key) == (Op.DELETE, {"id": "1"})
    assert (upsert.op, upsert.key) == (Op.UPDATE, {"id": "2"})
    assert delete.position < upsert.position < Position((1, 50, 5))


def test_ddl_message_decodes_to_a_ddl_event() -> None:
    """A DDL message carries the statement, its canal type and its position."""
    enc = CanalEncoder("mysql")
    msg = enc.ddl(database="shop", table="t", sql="ALTER TABLE t ADD c int", ddl_type="ALTER",
                  position=Position((1, 9, 0)), commit_ts_ms=1)  # fmt: skip
    (event,) = _decode(msg.payload)
    assert (event.op, event.ddl_type, event.ddl) == (Op.DDL, "ALTER", "ALTER TABLE t ADD c int")


def test_subject_replaces_reserved_characters() -> None:
    """Dots and spaces in names cannot split a NATS subject."""
    assert subject_for("my.db", "a b") == "cdc.my_db.a_b"


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("ALTER TABLE t ADD COLUMN c int", [("ALTER", "shop", "t")]),
        ("alter table `other`.`t2` drop c", [("ALTER", "other", "t2")]),
        ("CREATE TABLE IF NOT EXISTS shop.n (id int primary key)", [("CREATE", "shop", "n")]),
        ("DROP TABLE IF EXISTS a, b.c", [("ERASE", "shop", "a"), ("ERASE", "b", "c")]),
        ("TRUNCATE TABLE t", [("TRUNCATE", "shop", "t")]),
        ("RENAME TABLE t TO u", [("RENAME", "shop", "t")]),
        ("CREATE UNIQUE INDEX i ON t (a)", [("CINDEX", "shop", "t")]),
        ("DROP INDEX i ON shop.t", [("DINDEX", "shop", "t")]),
        ("/* hint */ ALTER TABLE t ADD x int", [("ALTER", "shop", "t")]),
        ("CREATE DATABASE x", []),
        ("GRANT ALL ON *.* TO u", []),
    ],
)
def test_classify_ddl_names_type_and_tables(sql: str, expected: list) -> None:
    """MySQL DDL statements map to canal DDL types and the tables they touch."""
    assert expected == classify_ddl(sql, "shop")
