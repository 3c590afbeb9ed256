"""A lifecycle view takes exactly the events its base table applied (view/lifecycle.py
``applied_events``), as each commit records them (lake/checkpoint.py ``AppliedRows``): not a
dead-lettered event, not a stale one, not one of a table that has not committed it yet, each
event once, also when a crash makes the round be read again."""

from __future__ import annotations

import pytest

from tidelake.errors import IngestError
from tidelake.events import ChangeEvent, Op, Position
from tidelake.lake.checkpoint import NO_ROWS, AppliedRows, event_id
from tidelake.view.lifecycle import applied_events


def _ev(seq: int, position: int, op: Op = Op.UPDATE, row: int = 0) -> ChangeEvent:
    values = {"id": "1", "status": f"s{position}"}
    return ChangeEvent(
        source="test",
        database="shop",
        table="orders",
        op=op,
        position=Position((position, row)),
        pk=("id",),
        key={"id": "1"},
        before=values if op is Op.DELETE else None,
        after=None if op is Op.DELETE else values,
        seq=seq,
    )


def _pos(position: int) -> str:
    return Position((position, 0)).encode()


def _seqs(events: list[ChangeEvent]) -> list[int]:
    return [e.seq for e in events]


def test_a_dead_lettered_event_is_not_taken() -> None:
    """A round of 11-13 committed through 13: 12 was dead-lettered (a value the table
    cannot store exactly), so the view takes 11 and 13 only."""
    events = [_ev(11, 11), _ev(12, 12), _ev(13, 13)]
    commit = AppliedRows(floor=_pos(10), dead=frozenset({event_id(events[1])}))
    assert [11, 13] == _seqs(applied_events(events, 10, 13, [(13, commit), (10, None)]))


def test_one_of_two_rows_of_a_message_dead_lettered() -> None:
    """Two events of one message share a stream sequence: only the one dead-lettered (by
    its position) is left out."""
    events = [_ev(20, 20, row=0), _ev(20, 20, row=1)]
    commit = AppliedRows(floor=None, dead=frozenset({event_id(events[1])}))
    assert [events[0]] == applied_events(events, 0, 20, [(20, commit)])


def test_stale_events_are_left_out_and_late_ones_taken() -> None:
    """Below the watermark the commit started from (30): 14 was republished (stale), 15 a
    replayed dead letter the delete log let land (late); 16 was late and then dead-lettered
    again. An event at the watermark is new (lake/rules.py)."""
    events = [_ev(14, 5), _ev(15, 6), _ev(16, 7), _ev(17, 30), _ev(18, 31)]
    commit = AppliedRows(
        floor=_pos(30),
        late=frozenset({event_id(events[1]), event_id(events[2])}),
        dead=frozenset({event_id(events[2])}),
    )
    assert [15, 17, 18] == _seqs(applied_events(events, 13, 18, [(18, commit)]))


def test_events_of_a_table_that_did_not_commit_wait_for_its_commit() -> None:
    """The table failed (or was paused, or held back) in the round of 21-22: its checkpoint
    is still 20, so nothing is taken; when it commits them later, they are, once."""
    events = [_ev(21, 21), _ev(22, 22)]
    before = [(20, AppliedRows(floor=_pos(19)))]
    assert [] == applied_events(events, 20, 20, before)
    after = [(22, AppliedRows(floor=_pos(20))), *before]
    assert [21, 22] == _seqs(applied_events(events, 20, 22, after))
    assert [] == applied_events(events, 22, 22, after)  # the view's checkpoint moved on


def test_a_round_read_again_after_a_crash_takes_what_the_commits_say() -> None:
    """The ingest committed 31-33 (32 dead-lettered) and was killed before the view's
    commit. Read again, every event is a duplicate for the ingest, which decides nothing
    anew: the commit's own record still leaves 32 out. A second copy of one event in the
    round is taken once, and events at or below the view's checkpoint not at all."""
    events = [_ev(30, 30), _ev(31, 31), _ev(32, 32), _ev(33, 33), _ev(31, 31)]
    commits = [(33, AppliedRows(floor=_pos(30), dead=frozenset({event_id(events[2])})))]
    assert [31, 33] == _seqs(applied_events(events, 30, 33, commits))


def test_each_event_belongs_to_the_commit_that_covers_it() -> None:
    """Rows before a DDL land in one commit (through 40), the DDL in another (41) that
    applies no rows; the next round's rows in a third. A row event covered by the DDL's
    commit alone was not applied by it (it was stale: no rows commit came before it)."""
    events = [_ev(39, 39), _ev(40, 40), _ev(41, 2), _ev(50, 50), _ev(51, 1)]
    dead = frozenset({event_id(events[0])})
    commits = [
        (52, AppliedRows(floor=_pos(41))),
        (41, NO_ROWS),
        (40, AppliedRows(floor=_pos(38), dead=dead)),
    ]
    assert [40, 50] == _seqs(applied_events(events, 38, 52, commits))


def test_a_commit_from_before_the_record_applied_all_it_covers() -> None:
    events = [_ev(5, 1), _ev(6, 2)]
    assert [5, 6] == _seqs(applied_events(events, 0, 6, [(6, None)]))


def test_only_the_range_asked_for_and_no_ddl() -> None:
    """A round read again shorter than the commit (killed after it): the view goes as far
    as the round reads (upto), the rest comes with the next round."""
    events = [_ev(60, 60), _ev(61, 61, Op.DDL), _ev(62, 62), _ev(63, 63, Op.DELETE)]
    commits = [(70, AppliedRows(floor=_pos(59)))]
    assert [60] == _seqs(applied_events(events, 59, 61, commits))
    assert [62, 63] == _seqs(applied_events(events, 61, 70, commits))


@pytest.mark.parametrize(
    "record",
    [
        NO_ROWS,
        AppliedRows(),
        AppliedRows(
            floor=_pos(9),
            late=frozenset({(3, _pos(4))}),
            dead=frozenset({(7, _pos(8)), (3, _pos(4))}),
        ),
    ],
)
def test_the_record_round_trips_through_the_commit_metadata(record: AppliedRows) -> None:
    assert record == AppliedRows.from_json(record.to_json())


def test_a_malformed_record_is_an_error() -> None:
    with pytest.raises(IngestError, match="applied-rows"):
        AppliedRows.from_json('{"version": 7, "rows": true}')
    with pytest.raises(IngestError, match="applied-rows"):
        AppliedRows.from_json("not json")
