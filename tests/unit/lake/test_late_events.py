"""Late events (a dead letter replayed on purpose) judged by the delete log
(``lake/deletes.py``, ``lake/rules.py``; issue 23, deliver 4): applied when that is correct,
never resurrecting a row deleted later, never crossing a DDL of the table."""

from __future__ import annotations

from pathlib import Path

from tidelake.events import ChangeEvent, Op, Position
from tidelake.lake.checkpoint import TableCheckpoint
from tidelake.lake.deletes import ALL_KEYS, DeleteLog, deleted_keys, judge_late, key_text
from tidelake.lake.rules import filter_events

PK = ("id",)


def _ev(op: Op, key: int, position: int, seq: int, before: int | None = None) -> ChangeEvent:
    row = {"id": str(key), "v": f"v{position}"}
    return ChangeEvent(
        source="test",
        database="shop",
        table="orders",
        op=op,
        position=Position((position, 0)),
        pk=PK,
        key={"id": str(key)},
        before=row if op is Op.DELETE else ({"id": str(before)} if before else None),
        after=None if op is Op.DELETE else row,
        seq=seq,
    )


def _pos(position: int) -> str:
    return Position((position, 0)).encode()


def test_below_the_watermark_but_above_the_logs_start_is_late_not_stale() -> None:
    """With a delete log complete since position 5, a replayed event at 7 under a watermark
    of 30 is handed to the judge; one at 3 (before the log) stays stale, as before."""
    checkpoint = TableCheckpoint(seq=100, position=_pos(30))
    events = [_ev(Op.INSERT, 1, 7, 101), _ev(Op.INSERT, 2, 3, 102), _ev(Op.INSERT, 3, 40, 103)]
    out = filter_events(events, checkpoint, late_since=_pos(5))
    expected = ([101], 1, [103])
    assert expected == ([e.seq for e in out.late], out.stale, [e.seq for e in out.kept])
    legacy = filter_events(events, checkpoint)
    assert (2, []) == (legacy.stale, legacy.late)


def test_a_late_insert_of_a_key_deleted_later_is_stale_and_one_never_deleted_lands() -> None:
    """Key 1 was deleted at 20 (after the late INSERT at 10): applying it would resurrect
    the row, so it is stale. Key 2 was never deleted: its late INSERT is applied (Hudi's
    event-time ordering keeps a newer stored row, if any). A late DELETE is applied too."""
    deleted = {key_text({"id": "1"}, PK) or "": _pos(20)}
    late = [_ev(Op.INSERT, 1, 10, 50), _ev(Op.INSERT, 2, 11, 51), _ev(Op.DELETE, 1, 12, 52)]
    keep, stale = judge_late(late, PK, "", deleted)
    assert ([51, 52], 1) == ([e.seq for e in keep], stale)


def test_no_late_row_crosses_a_ddl_and_no_log_means_stale() -> None:
    """A DDL of the table at 15 is a delete of every key: a late row from before it is
    stale. Without a log (a table written before the log existed) every late row is."""
    late = [_ev(Op.INSERT, 2, 11, 51), _ev(Op.INSERT, 3, 16, 52)]
    keep, stale = judge_late(late, PK, "", {ALL_KEYS: _pos(15)})
    assert ([52], 1) == ([e.seq for e in keep], stale)
    assert ([], 2) == judge_late(late, PK, None, {})


def test_the_log_keeps_each_keys_latest_delete_and_survives_a_torn_line(tmp_path: Path) -> None:
    """Deletes (and the old key of a key-changing UPDATE) are logged durably; the latest
    position per key wins; a line torn by a crash is ignored, the next append still counts."""
    log = DeleteLog(tmp_path)
    log.start("shop.orders", _pos(4))
    log.start("shop.orders", _pos(9))  # once: the first start holds
    events = [_ev(Op.DELETE, 1, 6, 1), _ev(Op.UPDATE, 3, 7, 2, before=2), _ev(Op.DELETE, 1, 8, 3)]
    log.record("shop.orders", deleted_keys(events, PK))
    with log.path("shop.orders").open("ab") as f:
        f.write(b'{"d": [["[\\"9\\"]", "0')  # torn
    log.record("shop.orders", [(key_text({"id": "4"}, PK) or "", _pos(9))])
    expected = (
        _pos(4),
        {'["1"]': _pos(8), '["2"]': _pos(7), '["4"]': _pos(9)},
    )
    assert expected == (log.since("shop.orders"), log.latest("shop.orders"))
    assert (None, {}) == (log.since("shop.items"), log.latest("shop.items"))


def test_a_composite_key_is_one_key_whatever_the_order_of_its_columns() -> None:
    """The events may name a composite key ``(b, a)`` and the lake ``(a, b)``: the delete
    log must see one key, or a late insert could slip past a later delete."""
    image = {"a": 1, "b": "x", "v": "y"}
    assert key_text(image, ("a", "b")) == key_text(image, ("b", "a"))
    assert key_text(image, ("a", "b")) == key_text({"a": "1", "b": "x"}, ("a", "b"))
    assert None is key_text({"a": 1}, ("a", "b"))
