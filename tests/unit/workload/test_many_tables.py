"""The many-tables workload: TiCDC canal-json over N tables, each its share, exact state."""

import itertools
from collections import Counter

import orjson
import pytest

from tidelake.events import ChangeEvent, Op
from tidelake.formats.canal_json import decode_object
from tidelake.workload.many_tables import ManyTablesSpec, ManyTablesWorkload, table_name
from tidelake.workload.ticdc import Message


def _run(tables: int, events: int, *, create: bool = False, seed: int = 3) -> tuple[
    ManyTablesWorkload, list[list[Message]]
]:  # fmt: skip
    w = ManyTablesWorkload(
        ManyTablesSpec(tables=tables, events=events, seed=seed, create_tables=create)
    )
    return w, list(w.transactions())


def _decoded(txns: list[list[Message]]) -> list[ChangeEvent]:
    """Every message through the canal-json decoder, stream sequences in publishing order."""
    out: list[ChangeEvent] = []
    for seq, msg in enumerate(itertools.chain.from_iterable(txns), start=1):
        out += decode_object(orjson.loads(msg.payload), seq=seq).events
    return out


def _fold(events: list[ChangeEvent]) -> dict[str, list[dict[str, str | None]]]:
    """The rows a table holds after ``events``: the last row event per key by position (DDL
    left out), deleted keys gone, sorted by key."""
    last: dict[tuple[str, tuple[str, ...]], ChangeEvent] = {}
    for ev in events:
        if not ev.op.is_row_change:
            continue
        key = (ev.table_id, tuple(str(v) for v in (ev.key or {}).values()))
        if key not in last or last[key].position < ev.position:
            last[key] = ev
    folded: dict[str, list[dict[str, str | None]]] = {}
    for (table, _key), ev in sorted(last.items(), key=lambda kv: (kv[0][0], int(kv[0][1][0]))):
        rows = folded.setdefault(table, [])
        if ev.op is not Op.DELETE:
            rows.append(ev.after)  # type: ignore[arg-type]
    return folded


def test_expected_rows_equal_the_fold_of_the_decoded_stream() -> None:
    """Keeping the last event per key by position of the decoded stream gives exactly the
    workload's expected rows, table by table: the generator's books and its messages agree."""
    w, txns = _run(12, 6_000)
    assert w.expected_rows() == _fold(_decoded(txns))


def test_every_table_receives_its_share() -> None:
    """Round-robin transactions: every table gets events/N row messages up to a few, and
    every run of N consecutive transactions touches each table once."""
    w, txns = _run(20, 20_000)
    share = w.emitted / 20
    assert set(w.tables) == set(w.received)
    assert all(abs(n - share) <= 0.03 * share for n in w.received.values()), w.received
    assert sum(w.received.values()) == w.emitted >= 20_000
    for turn in range(0, len(txns) - 20, 20):
        assert set(w.tables) == {t[0].table for t in txns[turn : turn + 20]}


def test_the_mix_has_inserts_updates_deletes_and_two_changes_in_one_transaction() -> None:
    """Each kind of change is there on every table, and some transactions hold two changes
    of one table under one commitTs (one row updated twice, or two inserts)."""
    _, txns = _run(5, 3_000)
    kinds = Counter((m.table, orjson.loads(m.payload)["type"]) for txn in txns for m in txn)
    for table in (table_name(i, 5) for i in range(1, 6)):
        assert all(kinds[(table, k)] > 0 for k in ("INSERT", "UPDATE", "DELETE")), kinds
    pairs = [t for t in txns if len(t) == 2]
    assert pairs
    for txn in pairs:
        commit_ts = {orjson.loads(m.payload)["_tidb"]["commitTs"] for m in txn}
        assert 1 == len(commit_ts)
        assert 1 == len({m.table for m in txn})


def test_messages_are_ticdc_canal_json_as_the_order_workload_writes_them() -> None:
    """Subjects ``cdc.shop.<table>``, unique message ids (positions), ``mysqlType`` without
    parameters (``decimal``), and no DDL when the tables are declared instead."""
    w, txns = _run(3, 600)
    msgs = list(itertools.chain.from_iterable(txns))
    bodies = [orjson.loads(m.payload) for m in msgs]
    assert len(msgs) == len({m.msg_id for m in msgs})
    assert {f"cdc.shop.{t}" for t in w.tables} == {m.subject for m in msgs}
    assert not any(b["isDdl"] for b in bodies)
    assert {"decimal"} == {b["mysqlType"]["amount"] for b in bodies}
    assert {"id"} == {name for b in bodies for name in b["pkNames"]}
    definition = w.table_definitions()["shop.store_0002"]
    assert {"primary_key": ["id"], "columns": w.schemas["store_0002"]} == definition
    assert "decimal(12,2)" == definition["columns"]["amount"]  # type: ignore[index]


def test_create_tables_opens_the_stream_with_each_tables_create_table() -> None:
    """With ``create_tables`` the first N messages are the tables' CREATE TABLEs, decoded as
    DDL with the declared precision; rows follow."""
    _, txns = _run(4, 400, create=True)
    events = _decoded(txns)
    ddl = events[:4]
    assert [Op.DDL] * 4 == [e.op for e in ddl]
    assert [f"shop.store_000{i}" for i in range(1, 5)] == [e.table_id for e in ddl]
    assert all("`amount` DECIMAL(12,2)" in (e.ddl or "") for e in ddl)
    assert all(e.op.is_row_change for e in events[4:])


def test_a_table_no_message_reached_is_not_expected_in_the_lake() -> None:
    """Fewer events than tables: only the tables that were written are expected (a table the
    stream never named does not exist in the lake)."""
    w, _ = _run(10, 4)
    assert ["shop.store_0001", "shop.store_0002", "shop.store_0003", "shop.store_0004"] == sorted(
        w.expected_rows()
    )


def test_table_names_sort_in_table_order() -> None:
    """Names are zero-padded to the widest index, so text order is table order."""
    assert ["store_0001", "store_0999", "store_1000"] == [
        table_name(i, 1000) for i in (1, 999, 1000)
    ]
    assert "store_00042" == table_name(42, 10_000)


def test_no_tables_is_refused() -> None:
    """A workload over zero tables is a mistake, said at once."""
    with pytest.raises(ValueError, match="at least 1"):
        ManyTablesSpec(tables=0)


def test_the_opening_gives_each_table_its_first_row_before_the_stream() -> None:
    """``opening()``: each table's CREATE TABLE (when asked) then one insert per table, a
    transaction each; ``transactions()`` then adds ``spec.events`` more messages, without
    the CREATE TABLEs again, and the expected rows still fold from the whole stream."""
    w = ManyTablesWorkload(ManyTablesSpec(tables=6, events=300, seed=1, create_tables=True))
    opening = list(w.opening())
    kinds = [orjson.loads(txn[0].payload)["type"] for txn in opening]
    assert ["CREATE"] * 6 + ["INSERT"] * 6 == kinds
    assert [1] * 12 == [len(txn) for txn in opening]
    assert w.tables == [txn[0].table for txn in opening[6:]]
    rest = list(w.transactions())
    assert 300 <= sum(len(txn) for txn in rest) <= 301  # the last transaction may hold two
    assert not any(orjson.loads(m.payload)["isDdl"] for txn in rest for m in txn)
    first_rows = [(ev.table_id, (ev.key or {}).get("id")) for ev in _decoded(opening)[6:]]
    assert [(f"shop.{t}", "1") for t in w.tables] == first_rows
    assert w.expected_rows() == _fold(_decoded(opening + rest))
