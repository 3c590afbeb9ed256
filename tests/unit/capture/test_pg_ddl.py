"""The DDL log's rows → DDL events (capture/pg_ddl.py), without a server: which event each log
row becomes, how the capture's known relations follow, what the lake's parser reads of the
statements, and when confirmed log rows are deleted."""

from __future__ import annotations

from typing import Any

from tidelake.capture import pg_ddl
from tidelake.capture.pgoutput import RelationInfo
from tidelake.capture.tables import TableFilter
from tidelake.lake import ddl

NAMES = [
    "id", "action", "command_tag", "relid", "schema_name", "table_name", "old_schema",
    "old_table", "columns", "primary_key", "statement", "txid", "created_at",
]  # fmt: skip
COLUMNS = '[["k", "text", 25, -1], ["n", "numeric(12,2)", 1700, 786438]]'


def _row(action: str, relid: int, schema: str, table: str, **kw: Any) -> pg_ddl.LogRow:
    values: dict[str, Any] = {
        "id": str(kw.get("id", 1)), "action": action, "command_tag": "X", "relid": str(relid),
        "schema_name": schema, "table_name": table, "old_schema": kw.get("old_schema"),
        "old_table": kw.get("old_table"), "columns": kw.get("columns"),
        "primary_key": kw.get("pk"), "statement": "...", "txid": "7", "created_at": "now",
    }  # fmt: skip
    return pg_ddl.LogRow.from_values(NAMES, [values[n] for n in NAMES])


def _captured(patterns: list[str]) -> Any:
    matches = TableFilter(patterns)
    return lambda rel: bool(rel.pk) and matches(rel.namespace, rel.name)


def _known(relid: int, schema: str, table: str) -> RelationInfo:
    return RelationInfo(relid, schema, table, [("id", 23, -1)], {"id": "integer"}, ("id",))


def test_create_is_a_create_table_the_lake_reads_and_registers_the_relation() -> None:
    """A logged CREATE TABLE of a captured table becomes a CREATE TABLE event with the
    ``format_type`` types and the key, which the lake parses into the same columns; the
    relation is registered with the OIDs and modifiers a later Relation message carries."""
    relations: dict[int, RelationInfo] = {}
    row = _row("create", 42, "shop", "New T", columns=COLUMNS, pk='["k"]')
    events = pg_ddl.DdlLog().events(row, relations, _captured(["shop.*"]), 100)
    assert [("CREATE", 'CREATE TABLE shop."New T" (k text, n numeric(12,2), PRIMARY KEY (k))')] == [
        (e.ddl_type, e.sql) for e in events
    ]
    assert [("k", 25, -1), ("n", 1700, 786438)] == relations[42].columns
    (op,) = ddl.parse_ddl(events[0].sql, "postgres", "shop")
    assert isinstance(op, ddl.CreateTable)
    assert ("shop.New T", ("k",)) == (op.table.table_id, op.primary_key)
    assert ["text", "decimal(12,2)"] == [c.source_type for c in op.columns]


def test_create_of_a_table_not_captured_registers_it_but_emits_nothing() -> None:
    """Tables outside ``capture.tables`` (or without a key) produce no event."""
    relations: dict[int, RelationInfo] = {}
    log = pg_ddl.DdlLog()
    assert [] == log.events(
        _row("create", 1, "other", "t", columns=COLUMNS, pk='["k"]'),
        relations,
        _captured(["shop.*"]),
        1,
    )
    assert [] == log.events(
        _row("create", 2, "shop", "keyless", columns=COLUMNS, pk="[]"),
        relations,
        _captured(["shop.*"]),
        1,
    )
    assert {1, 2} == set(relations)


def test_drop_of_a_captured_table_is_a_drop_and_forgets_the_relation() -> None:
    """DROP TABLE of a known captured table → ``DROP TABLE`` for the lake; the OID is
    forgotten (a CREATE of the same name later is another relation). A drop of a table the
    capture never took emits nothing."""
    relations = {5: _known(5, "shop", "orders"), 6: _known(6, "other", "x")}
    log = pg_ddl.DdlLog()
    (event,) = log.events(_row("drop", 5, "shop", "orders"), relations, _captured(["shop.*"]), 1)
    assert ("ERASE", "DROP TABLE shop.orders") == (event.ddl_type, event.sql)
    assert [ddl.DropTable(ddl.TableName("shop", "orders"))] == ddl.parse_ddl(
        event.sql, "postgres", "shop"
    )
    assert [] == log.events(_row("drop", 6, "other", "x"), relations, _captured(["shop.*"]), 1)
    assert [] == log.events(_row("drop", 9, "shop", "never"), relations, _captured(["shop.*"]), 1)
    assert {} == relations


def test_rename_inside_across_out_of_and_into_the_captured_tables() -> None:
    """Within the filter: a RENAME the lake reads as the same move (also across schemas);
    out of it: a DROP of the old name; into it: a CREATE of the new name. The known relation
    takes the new name, so the next Relation message finds nothing to derive."""
    captured = _captured(["shop.*", "archive.*"])
    relations = {5: _known(5, "shop", "orders")}
    log = pg_ddl.DdlLog()
    cols = '[["id", "integer", 23, -1]]'
    (same,) = log.events(
        _row("rename", 5, "shop", "orders2", old_schema="shop", old_table="orders",
             columns=cols, pk='["id"]'),
        relations, captured, 1,
    )  # fmt: skip
    assert "ALTER TABLE shop.orders RENAME TO orders2" == same.sql
    (across,) = log.events(
        _row("rename", 5, "archive", "orders2", old_schema="shop", old_table="orders2",
             columns=cols, pk='["id"]'),
        relations, captured, 2,
    )  # fmt: skip
    assert "ALTER TABLE shop.orders2 RENAME TO archive.orders2" == across.sql
    assert [ddl.RenameTable(ddl.TableName("shop", "orders2"), ddl.TableName("archive", "orders2"))
            ] == ddl.parse_ddl(across.sql, "postgres", "shop")  # fmt: skip
    assert ("archive", "orders2") == (relations[5].namespace, relations[5].name)
    (out,) = log.events(
        _row("rename", 5, "tmp", "orders2", old_schema="archive", old_table="orders2",
             columns=cols, pk='["id"]'),
        relations, captured, 3,
    )  # fmt: skip
    assert ("ERASE", "DROP TABLE archive.orders2") == (out.ddl_type, out.sql)
    (back,) = log.events(
        _row("rename", 5, "shop", "orders", old_schema="tmp", old_table="orders2",
             columns=cols, pk='["id"]'),
        relations, captured, 4,
    )  # fmt: skip
    assert ("CREATE", "CREATE TABLE shop.orders (id integer, PRIMARY KEY (id))") == (
        back.ddl_type,
        back.sql,
    )
    # Its rows were never streamed: the capture asks for a snapshot of it.
    assert (True, False, False) == (back.needs_snapshot, same.needs_snapshot, out.needs_snapshot)


def test_relation_path_rename_across_schemas_names_the_new_schema() -> None:
    """A rename derived from a Relation message (no DDL log) qualifies the new name when the
    schema changed: ``RENAME TO b`` alone would move the lake table within the old schema."""
    from tidelake.capture.postgres import relation_ddl

    old = _known(5, "shop", "a")
    new = _known(5, "archive", "a")
    assert [("RENAME", "ALTER TABLE shop.a RENAME TO archive.a")] == relation_ddl(old, new)


def test_housekeeping_deletes_only_confirmed_rows_at_most_once_a_minute() -> None:
    """Log rows are deleted once the transactions holding them are confirmed, in one
    ``DELETE ... WHERE id <= n``, and not more often than HOUSEKEEPING_S."""
    log = pg_ddl.DdlLog()
    relations: dict[int, RelationInfo] = {}
    for i, lsn in ((1, 100), (2, 200), (3, 300)):
        log.events(_row("drop", 90 + i, "x", "y", id=i), relations, _captured(["shop.*"]), lsn)
    calls: list[tuple[str, tuple[int, ...]]] = []

    def query(text: str, params: tuple[int, ...]) -> None:
        calls.append((text, params))

    start = 10_000.0
    assert log.housekeeping(query, now=start) is None  # nothing confirmed yet
    log.confirmed(200)
    assert 2 == log.housekeeping(query, now=start + 1)
    assert [("DELETE FROM tidelake.ddl_log WHERE id <= %s", (2,))] == calls
    log.confirmed(300)
    assert log.housekeeping(query, now=start + 2) is None  # too soon after the last one
    assert 3 == log.housekeeping(query, now=start + pg_ddl.HOUSEKEEPING_S + 2)
    assert log.housekeeping(query, now=start + 3 * pg_ddl.HOUSEKEEPING_S) is None  # all done


def test_glob_regex_matches_what_the_table_filter_matches() -> None:
    """The triggers match new tables against ``capture.tables`` with a regular expression made
    from each fnmatch pattern: it takes the same names as the capture's own filter (the
    constructs used are the same in Python and PostgreSQL regular expressions)."""
    import re

    patterns = ["shop.*", "crm.acc?unts", "x.[ab]_t", "y.[!ab]_t", "dots.a.b", "us$r.t+1"]
    names = [
        "shop.orders", "shopx.orders", "crm.accounts", "crm.acc_unts", "crm.accxunts!",
        "x.a_t", "x.c_t", "y.a_t", "y.c_t", "dots.a.b", "dots.aXb", "us$r.t+1", "us$r.tt1",
    ]  # fmt: skip
    for pattern in patterns:
        regex = re.compile(pg_ddl.glob_regex(pattern))
        matches = TableFilter([pattern])
        for name in names:
            schema, table = name.split(".", 1)
            assert matches(schema, table) == bool(regex.search(name)), (pattern, name)


def test_the_removal_documented_is_the_one_the_code_knows() -> None:
    """docs/capture.md "PostgreSQL DDL" shows the statements that remove every object the
    capture installs (kept equal to UNINSTALL_SQL, which names them all)."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[3] / "docs" / "capture.md").read_text()
    assert pg_ddl.UNINSTALL_SQL in doc
    for name in ("ddl_log_end()", "ddl_log_drop()", "ddl_table_shape(oid)", "ddl_publish(oid"):
        assert f"tidelake.{name}" in pg_ddl.UNINSTALL_SQL
    for table in (pg_ddl.LOG_TABLE, pg_ddl.NAMES_TABLE, pg_ddl.PUBLICATIONS_TABLE):
        assert f"tidelake.{table}" in pg_ddl.UNINSTALL_SQL


def test_the_logs_own_tables_are_internal_the_outbox_is_not() -> None:
    """``tidelake.ddl_log``, ``ddl_names`` and ``ddl_publications`` are never captured as
    tables, whatever ``capture.tables`` says; the outbox table in the same schema is not
    one of them."""
    for table in ("ddl_log", "ddl_names", "ddl_publications"):
        assert pg_ddl.is_internal("tidelake", table)
    assert not pg_ddl.is_internal("tidelake", "outbox")
    assert not pg_ddl.is_internal("shop", "ddl_log")


def test_a_rename_keeps_the_columns_the_capture_knew() -> None:
    """A column added in the rename's transaction before it is in the log row already; the
    relation keeps the columns the capture knew, so the next Relation message still yields
    the ADD COLUMN (with its default) instead of the lake never hearing of it."""
    relations = {5: _known(5, "shop", "a")}
    cols = '[["id", "integer", 23, -1], ["c", "integer", 23, -1]]'
    pg_ddl.DdlLog().events(
        _row("rename", 5, "shop", "b", old_schema="shop", old_table="a", columns=cols,
             pk='["id"]'),
        relations, _captured(["shop.*"]), 1,
    )  # fmt: skip
    assert ("shop", "b", [("id", 23, -1)]) == (
        relations[5].namespace,
        relations[5].name,
        relations[5].columns,
    )
