"""The exactly-once rules (``lake/rules.py``): checkpoint filtering, collapsing by position,
the next checkpoint and its watermark, DDL routing; pure, no Spark."""

from __future__ import annotations

from order_events import ev, key_of

from tidelake.events import ChangeEvent, Op, Position
from tidelake.lake.checkpoint import TableCheckpoint
from tidelake.lake.rules import (
    collapse,
    ddl_checkpoint,
    filter_events,
    route,
    rows_checkpoint,
    rows_seq_last,
    watermark,
)


def test_filter_drops_what_the_checkpoint_covers_by_sequence_and_by_position() -> None:
    """seq <= checkpoint seq: duplicate; row position < watermark: stale; a position equal
    to the watermark is kept (it may be a new event sharing it); DDL is not stale."""
    checkpoint = TableCheckpoint(seq=5, position=Position((50, 0)).encode())
    events = [
        ev("insert", 1, (40, 0), 4),  # redelivered
        ev("update", 1, (45, 0), 6),  # republished, older than the watermark
        ev("update", 2, (50, 0), 7),  # equal to the watermark: a snapshot row sharing it
        ev("update", 1, (51, 0), 8),  # new
        ev("update", 1, (51, 0), 8),  # the same message twice in one round
    ]
    ddl = ChangeEvent("test", "shop", "orders", Op.DDL, Position((49, 0)), ddl="x", seq=9)
    out = filter_events([*events, ddl], checkpoint)
    expected = ([7, 8, 9], 2, 1)
    assert expected == ([e.seq for e in out.kept], out.duplicates, out.stale)


def test_filter_without_checkpoint_keeps_everything_once() -> None:
    """A table never written keeps every event (only exact copies are dropped)."""
    events = [ev("insert", 1, (1, 0), 1), ev("insert", 2, (2, 0), 2), ev("insert", 2, (2, 0), 2)]
    out = filter_events(events, None)
    expected = ([1, 2], 1, 0)
    assert expected == ([e.seq for e in out.kept], out.duplicates, out.stale)


def test_collapse_keeps_the_last_change_by_position_not_by_file_order() -> None:
    """Two updates in one transaction (same commit, same millisecond): the row index decides."""
    events = [
        ev("insert", 1, (10, 0), 1, "new"),
        ev("update", 1, (11, 1), 3, "second"),
        ev("update", 1, (11, 0), 2, "first"),
    ]
    changes = collapse(events, key_of)
    expected = [((1,), False, "second")]
    assert expected == [(c.key, c.delete, c.row["status"]) for c in changes]


def test_collapse_last_delete_wins_and_delete_then_reinsert_is_an_upsert() -> None:
    """A key whose last event is a DELETE is deleted; DELETE then INSERT is an upsert."""
    events = [
        ev("insert", 1, (1, 0), 1, "a"),
        ev("delete", 1, (2, 0), 2, "a"),
        ev("insert", 2, (3, 0), 3, "b"),
        ev("delete", 2, (4, 0), 4, "b"),
        ev("insert", 2, (5, 0), 5, "b2"),
    ]
    expected = [((1,), True), ((2,), False)]
    assert expected == [(c.key, c.delete) for c in collapse(events, key_of)]


def test_collapse_a_key_changing_update_deletes_the_old_key() -> None:
    """A binlog UPDATE whose ``before`` holds another key: old key deleted, new key upserted."""
    events = [ev("update", 20, (7, 0), 1, "x", before={"id": "2", "status": "x"})]
    expected = [((2,), True), ((20,), False)]
    assert expected == sorted((c.key, c.delete) for c in collapse(events, key_of))


def _lake_after(batches: list[list[ChangeEvent]]) -> dict[int, str | None]:
    """The lake a sequence of ingest rounds leaves: filter by the checkpoint, collapse, merge
    each key by position as Hudi's event-time ordering does (ties: the incoming record), and
    take the next checkpoint by the rule a commit writes."""
    lake: dict[int, tuple[Position, str | None, bool]] = {}
    checkpoint: TableCheckpoint | None = None
    for batch in batches:
        kept = filter_events(batch, checkpoint).kept
        for change in collapse(kept, key_of):
            held = lake.get(change.key[0])
            if held is None or held[0] <= change.event.position:
                lake[change.key[0]] = (
                    change.event.position,
                    change.row.get("status"),
                    change.delete,
                )
        checkpoint = rows_checkpoint(checkpoint, max(e.seq for e in batch), batch, {})
    return {k: v[1] for k, v in sorted(lake.items()) if not v[2]}


def test_a_snapshot_sharing_one_position_lands_whole_wherever_batches_are_cut() -> None:
    """Debezium gives every snapshot row of a table one source position: cut into any number
    of batches, every row lands (none is taken for a republished copy), and so does a change
    streamed after it."""
    snapshot = [ev("insert", k, (7, 0), k, f"s{k}") for k in range(1, 41)]
    stream = [ev("update", 3, (9, 0), 41, "u3"), ev("delete", 5, (9, 1), 42)]
    events = snapshot + stream
    whole = _lake_after([events])
    assert 39 == len(whole)
    assert "u3" == whole[3]
    for size in (1, 2, 3, 7, 13, 40):
        batches = [events[i : i + size] for i in range(0, len(events), size)]
        assert whole == _lake_after(batches), f"batches of {size}"


def test_a_key_change_split_by_a_batch_cut_lands_whole() -> None:
    """A primary-key change that Debezium sends as a delete of the old key and a create of the
    new one at the same source position: a cut between the two changes nothing."""
    events = [
        ev("insert", 1, (5, 0), 1, "a"),
        ev("delete", 1, (8, 0), 2),
        ev("insert", 2, (8, 0), 3, "a"),
        ev("update", 2, (9, 0), 4, "b"),
    ]
    whole = _lake_after([events])
    assert {2: "b"} == whole
    for cut in range(1, len(events)):
        assert whole == _lake_after([events[:cut], events[cut:]]), f"cut at {cut}"


def test_a_group_redelivered_after_a_cut_changes_nothing() -> None:
    """Republishing a whole equal-position group after part of it was applied (a producer
    restarted mid-snapshot) leaves the same lake: the copies at the watermark re-apply the
    same images; those below it are dropped."""
    group = [ev("insert", k, (7, 0), k, f"s{k}") for k in range(1, 6)]
    again = [ev("insert", k, (7, 0), 10 + k, f"s{k}") for k in range(1, 6)]
    whole = _lake_after([group])
    for cut in range(1, len(group) + 1):
        assert whole == _lake_after([group[:cut], again])


def test_the_watermark_is_the_highest_position_seen_and_never_moves_back() -> None:
    """Rule 2's watermark: the highest position among the batch and the previous checkpoint."""
    previous = TableCheckpoint(seq=5, position="0009")
    expected = ("0012", "0009", "0003", None)
    actual = (
        watermark(previous, ["0004", "0012"]),
        watermark(previous, ["0002"]),
        watermark(None, ["0003", "0001"]),
        watermark(None, []),
    )
    assert expected == actual


def test_a_rows_commit_checkpoint_covers_the_round_and_keeps_the_schema_version() -> None:
    """The sequence is the round's last (never lower than before), the watermark the highest
    position, the schema version unchanged, declared column types join the table's."""
    previous = TableCheckpoint(
        seq=10, position=Position((50, 0)).encode(), schema_version=2, columns={"id": "bigint"}
    )
    events = [ev("insert", 1, (40, 0), 11), ev("update", 1, (60, 0), 12)]
    expected = TableCheckpoint(
        seq=14,
        position=Position((60, 0)).encode(),
        schema_version=2,
        columns={"id": "bigint", "status": "varchar(8)"},
    )
    assert expected == rows_checkpoint(previous, 14, events, {"status": "varchar(8)"})
    assert 10 == rows_checkpoint(previous, 9, events, {}).seq, "the sequence never moves back"
    first = rows_checkpoint(None, 3, events[:1], {})
    assert TableCheckpoint(3, Position((40, 0)).encode(), 0, {}) == first


def test_a_ddl_checkpoint_bumps_the_schema_version_once() -> None:
    """A DDL moves the table to its sequence with schema version + 1; a checkpoint that covers
    it already means the DDL is applied (None: do nothing)."""
    ddl = ChangeEvent("test", "shop", "orders", Op.DDL, Position((30, 0)), ddl="x", seq=9)
    previous = TableCheckpoint(
        seq=8, position=Position((35, 0)).encode(), schema_version=1, columns={"id": "bigint"}
    )
    expected = TableCheckpoint(9, Position((35, 0)).encode(), 2, {"id": "bigint"})
    assert expected == ddl_checkpoint(previous, ddl)
    assert None is ddl_checkpoint(TableCheckpoint(seq=9, position=None), ddl)
    assert TableCheckpoint(9, Position((30, 0)).encode(), 1, {}) == ddl_checkpoint(None, ddl)


def test_a_rename_is_decided_by_the_table_it_drops_last() -> None:
    """``RENAME TABLE a TO b`` ends by dropping ``a``: ``a``'s checkpoint decides the event."""
    event = ChangeEvent(
        "mysql", "shop", "b", Op.DDL, Position((1, 0)), ddl="RENAME TABLE a TO b", seq=3
    )
    assert "shop.a" == route(event)


def test_rows_of_a_round_with_ddl_stop_just_below_it() -> None:
    """A DDL may change tables it is not routed to (DROP DATABASE, RENAME's target): rows of
    other tables in its round must leave it uncovered; without DDL, the round's last."""
    assert 41 == rows_seq_last(50, [42])
    assert 50 == rows_seq_last(50, [])
