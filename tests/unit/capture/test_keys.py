"""Key resolution of captured tables: configured keys, primary keys, full-row identity, and
the reasons a table is skipped (capture/keys.py)."""

from __future__ import annotations

from tidelake.capture.keys import TableShape, resolve_key
from tidelake.config import CaptureConfig


def _shape(**kw: object) -> TableShape:
    base: dict[str, object] = {
        "table_id": "shop.log",
        "columns": ("a", "b", "c"),
        "primary_key": (),
        "not_null": frozenset({"a", "b", "c"}),
    }
    base.update(kw)
    return TableShape(**base)  # type: ignore[arg-type]


def test_primary_key_is_the_key_by_default() -> None:
    """A table with a primary key is captured by it, whatever capture.keyless says."""
    choice = resolve_key(CaptureConfig(), _shape(primary_key=("a",)))
    assert (choice.key, choice.how, choice.skipped) == (("a",), "primary", None)


def test_keyless_table_is_skipped_with_a_reason_naming_the_fix() -> None:
    """keyless: skip (the default) skips a table without a primary key, saying what to set."""
    choice = resolve_key(CaptureConfig(), _shape())
    assert choice.key == ()
    assert choice.skipped is not None
    assert 'capture.keys["shop.log"]' in choice.skipped
    assert "full_row" in choice.skipped


def test_configured_key_wins_over_the_primary_key_in_its_order() -> None:
    """capture.keys names the key columns in the order given, also over a primary key."""
    cfg = CaptureConfig(keys={"shop.log": ["c", "b"]})
    assert resolve_key(cfg, _shape(primary_key=("a",))).key == ("c", "b")
    assert resolve_key(cfg, _shape()).how == "configured"


def test_configured_key_naming_a_missing_column_skips_the_table() -> None:
    """A typo in capture.keys is a skip naming the column and the table's columns."""
    choice = resolve_key(CaptureConfig(keys={"shop.log": ["x"]}), _shape())
    assert choice.skipped is not None
    assert "x" in choice.skipped
    assert "a, b, c" in choice.skipped


def test_a_nullable_key_column_is_refused_before_the_lake_would_dead_letter_it() -> None:
    """The lake refuses NULL key values, so a configured or full-row key must be NOT NULL;
    the reason names the ALTER that forbids NULLs (PostgreSQL and MySQL spellings)."""
    shape = _shape(not_null=frozenset({"a"}))
    mysql = resolve_key(CaptureConfig(keys={"shop.log": ["a", "b"]}), shape)
    assert mysql.skipped is not None
    assert "MODIFY b" in mysql.skipped
    pg = resolve_key(
        CaptureConfig(keyless="full_row"),
        _shape(not_null=frozenset({"a"}), identity="f", identity_columns=("a", "b", "c"),
               sql_name='"shop"."log"'),
    )  # fmt: skip
    assert pg.skipped is not None
    assert 'ALTER TABLE "shop"."log" ALTER COLUMN b SET NOT NULL' in (pg.skipped)


def test_full_row_keys_by_every_column_on_mysql() -> None:
    """keyless: full_row keys a keyless MySQL table by all its columns (binlog_row_image=FULL
    sends them all in every before image)."""
    choice = resolve_key(CaptureConfig(keyless="full_row"), _shape())
    assert (choice.key, choice.how) == (("a", "b", "c"), "full_row")


def test_postgres_needs_the_key_in_the_replica_identity() -> None:
    """PostgreSQL sends only the replica identity's columns in an UPDATE/DELETE old tuple:
    a configured key outside it, or no identity at all, skips the table with the exact
    ALTER TABLE ... REPLICA IDENTITY FULL to run; FULL or a covering index captures it."""
    cfg = CaptureConfig(keys={"shop.log": ["b"]})
    default = resolve_key(cfg, _shape(identity="d", sql_name="shop.log"))
    assert default.skipped is not None
    assert "ALTER TABLE shop.log REPLICA IDENTITY FULL" in default.skipped
    assert "DEFAULT without a primary key" in default.skipped
    assert resolve_key(cfg, _shape(identity="f", identity_columns=("a", "b", "c"))).key == ("b",)
    assert resolve_key(cfg, _shape(identity="i", identity_columns=("b",))).key == ("b",)
    nothing = resolve_key(CaptureConfig(), _shape(primary_key=("a",), identity="n"))
    assert nothing.skipped is not None
    assert "NOTHING" in nothing.skipped
    keyed = resolve_key(CaptureConfig(), _shape(primary_key=("a",), identity="d",
                                                identity_columns=("a",)))  # fmt: skip
    assert keyed.key == ("a",)
    full_row_default = resolve_key(CaptureConfig(keyless="full_row"), _shape(identity="d"))
    assert full_row_default.skipped is not None
    assert "REPLICA IDENTITY" in full_row_default.skipped
