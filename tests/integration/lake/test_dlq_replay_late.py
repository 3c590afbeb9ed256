"""A dead letter replayed on purpose is applied, not skipped as stale; it never moves a row
back and never resurrects a row deleted later (issue 23, deliver 4; ``lake/deletes.py``).

Probe, in small: valid events were dead-lettered (``max_deliver`` while the stage root was
full), later events of the same table landed and moved its watermark past them, and ``dlq
replay`` then skipped every replayed event as stale: 2,731 rows lost for good. Here 6 events
are "dead-lettered" (left out of staging) while the table goes on, then replayed with new
stream sequences and their old positions, as ``tidelake dlq replay`` republishes them, and
the lake must end equal to the source. Real Spark and Hudi.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from lakekit import Lake, ddl_event, event

from tidelake.events import ChangeEvent

pytestmark = pytest.mark.integration


def _row(op: str, key: int, position: int | tuple[int, int], seq: int) -> ChangeEvent:
    pos = position if isinstance(position, int) else position[0]
    return event(op, key, position, seq, values={"status": f"s{pos}", "amount": "1.00"})


def test_replayed_dead_letters_land_without_moving_rows_back_or_resurrecting(lake: Lake) -> None:
    """Source history (position: change): 1-10 insert ids 1-10; 11-15 insert ids 11-15 and
    (10,1) update id 1 — these six are dead-lettered; 30 update id 1, 31 delete id 5,
    33 delete id 14, 40 insert id 21 land. The replay of the six: ids 11, 12, 13, 15 land;
    id 14 stays deleted (deleted at 33, after its insert at 14); id 1 keeps its image of
    position 30 (the replayed update at (10,1) is older)."""
    lake.stage([_row("insert", i, i, i) for i in range(1, 11)])
    lake.stage(
        [
            _row("update", 1, 30, 30),
            _row("delete", 5, 31, 31),
            _row("delete", 14, 33, 33),
            _row("insert", 21, 40, 40),
        ]
    )
    lake.ingest()
    dead_letters = [_row("insert", i, i, 0) for i in (11, 12, 13, 14, 15)]
    dead_letters.append(_row("update", 1, (10, 1), 0))
    replayed = [
        event_with_seq(e, 100 + n) for n, e in enumerate(dead_letters)
    ]  # new sequences, old positions: what a republish gets
    lake.stage(replayed)
    stats = lake.ingest()

    expected = {str(i): (f"s{i}",) for i in (2, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13, 15)}
    expected |= {"1": ("s30",), "21": ("s40",)}
    assert expected == lake.state()
    assert 1 == stats.stale  # the replayed insert of id 14 (deleted later)


def test_a_replayed_row_never_crosses_a_later_ddl_of_its_table(lake: Lake) -> None:
    """A TRUNCATE at 20 removed every row: a dead letter from before it (insert id 3 at 3)
    replayed afterwards stays out; one from after it (insert id 4 at 22) lands."""
    lake.stage([_row("insert", 1, 1, 1), _row("insert", 2, 2, 2)])
    lake.stage([ddl_event("shop.orders", "TRUNCATE TABLE orders", "TRUNCATE", 20, 20)])
    lake.stage([_row("insert", 5, 25, 25)])
    lake.ingest()
    lake.stage([event_with_seq(_row("insert", 3, 3, 0), 50)])
    lake.stage([event_with_seq(_row("insert", 4, 22, 0), 51)])
    lake.ingest()
    assert {"4": ("s22",), "5": ("s25",)} == lake.state()


def event_with_seq(e: ChangeEvent, seq: int) -> ChangeEvent:
    """``e`` republished: a new stream sequence, everything else as it was."""
    return replace(e, seq=seq)
