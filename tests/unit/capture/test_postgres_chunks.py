"""PostgreSQL chunk watermarks: which streamed transactions a chunk's snapshot saw."""

from __future__ import annotations

from tidelake.capture.postgres_chunks import PgWatermark


def test_visibility_follows_the_snapshot_xmin_xmax_and_in_progress_list() -> None:
    """``pg_current_snapshot()`` text ``xmin:xmax:xip``: below xmin visible, from xmax on
    not, in between visible unless in progress at the snapshot."""
    wm = PgWatermark.parse("100:110:103,107", "t")
    assert [x for x in (99, 100, 103, 104, 107, 110, 200) if wm.visible(x)] == [99, 100, 104]


def test_a_32_bit_xid_is_widened_with_the_epoch_of_the_snapshot() -> None:
    """pgoutput's BEGIN carries a 32-bit xid, the snapshot 64-bit ones: an xid just below
    the wrap belongs to the previous epoch when the snapshot is just past it."""
    epoch = 1 << 32
    wm = PgWatermark.parse(f"{epoch + 5}:{epoch + 9}:{epoch + 6}", "t")
    assert wm.visible(0xFFFFFFF0)  # epoch 0, long finished
    assert wm.visible(7)  # epoch 1, committed before the snapshot
    assert not wm.visible(6)  # in progress at the snapshot
    assert not wm.visible(9)  # started after it
