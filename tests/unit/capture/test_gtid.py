"""GTID parsing, comparison and the failover-safe position shape (``capture/gtid.py``)."""

from __future__ import annotations

import pytest

from tidelake.capture.gtid import (
    EPOCH_BASE,
    GtidError,
    MariaGtid,
    MariaPos,
    MySQLExecuted,
    epoch_of,
    mysql_added,
    mysql_contains,
    mysql_count,
    mysql_missing_on,
    txn_prefix,
)
from tidelake.events import Position

U1 = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
U2 = "4e11fa47-71ca-11e1-9e33-c80aa9429562"


def test_mariadb_gtid_and_position_text_round_trip() -> None:
    """``domain-server_id-seq`` and a ``gtid_binlog_pos`` list parse and print back as given
    (domains sorted); malformed text and a domain listed twice are refused."""
    assert MariaGtid(0, 1, 100) == MariaGtid.parse("0-1-100")
    assert "0-1-100,1-2-7" == str(MariaPos.parse("1-2-7, 0-1-100"))
    assert "" == str(MariaPos.parse(""))
    with pytest.raises(GtidError):
        MariaGtid.parse("0-1")
    with pytest.raises(GtidError):
        MariaPos.parse("0-1-5,0-2-6")


def test_mariadb_position_advances_per_domain() -> None:
    """A new event group replaces its domain's entry, whichever server wrote it (after a
    failover the new primary's server_id appears in the same domain)."""
    pos = MariaPos.parse("0-1-100,1-2-7")
    assert "0-3-101,1-2-7" == str(pos.advanced(MariaGtid.parse("0-3-101")))
    assert "0-1-100,1-2-7,5-1-1" == str(pos.advanced(MariaGtid.parse("5-1-1")))


def test_mariadb_missing_names_every_domain_a_server_lacks() -> None:
    """A server behind in a domain, or without the domain, lacks what we published; one at
    or past us in every domain lacks nothing (what failover checks)."""
    ours = MariaPos.parse("0-1-100,1-2-7")
    assert [] == ours.missing_on(MariaPos.parse("0-1-100,1-2-9"))
    assert [] == ours.missing_on(MariaPos.parse("0-2-150,1-2-7,3-1-1"))
    assert [
        "domain 0: we have 0-1-100, the server only 0-1-99",
        "domain 1: we have 1-2-7, the server has none",
    ] == ours.missing_on(MariaPos.parse("0-1-99"))


def test_mariadb_behind_counts_event_groups() -> None:
    """How many event groups a server has beyond our position, over all its domains."""
    ours = MariaPos.parse("0-1-100,1-2-7")
    assert 0 == ours.behind(MariaPos.parse("0-1-100,1-2-7"))
    assert 13 == ours.behind(MariaPos.parse("0-1-110,1-2-7,2-1-3"))


def test_mysql_set_add_contains_missing_count() -> None:
    """MySQL executed sets: adding a transaction merges intervals; containment is per
    transaction (not the library's member equality); the missing part is a set's text."""
    executed = mysql_added(f"{U1}:1-5", f"{U1}:6")
    assert f"{U1}:1-6" == executed
    assert f"{U1}:1-6,{U2}:1" == mysql_added(executed, f"{U2}:1")
    assert mysql_contains(f"{U1}:1-10,{U2}:1-3", executed)
    assert not mysql_contains(f"{U1}:1-4", executed)
    assert mysql_contains(f"{U1}:1-4", "")
    assert f"{U1}:4-6,{U2}:1-2" == mysql_missing_on(f"{U1}:1-6,{U2}:1-2", f"{U1}:1-3")
    assert "" == mysql_missing_on(f"{U1}:1-3", f"{U1}:1-3:7")
    assert 9 == mysql_count(f"{U1}:1-6,{U2}:1-3")
    # @@gtid_executed breaks long sets over lines.
    assert mysql_contains(f"{U1}:1-6,\n{U2}:1-3", f"{U2}:2")
    with pytest.raises(GtidError):
        mysql_added(executed, "not-a-gtid")


def test_epoch_positions_sort_after_every_earlier_position() -> None:
    """Epoch 0 keeps the original (file, offset, row) shape; epoch e >= 1 leads with
    EPOCH_BASE + e, above any binlog file number (at most 2^31-1): every position of a later
    epoch sorts after every earlier one, as tuples and as encoded text (Hudi's order)."""
    assert (3, 400) == txn_prefix(0, 3, 400)
    old_max = Position((*txn_prefix(0, 0x7FFFFFFF, 2**32 - 1), 10**6, 1))
    first_new = Position((*txn_prefix(1, 1, 4), 0))
    later = Position((*txn_prefix(2, 1, 4), 0))
    assert old_max < first_new < later
    assert old_max.encode() < first_new.encode() < later.encode()
    assert [0, 1, 2] == [epoch_of(p.parts) for p in (old_max, first_new, later)]
    assert EPOCH_BASE + 1 == first_new.parts[0]


def test_mysql_executed_set_grown_in_place_matches_the_library() -> None:
    """The capture's per-commit tracker gives the same text as python-mysql-replication's
    ``GtidSet + Gtid`` for transactions in order, out of order and of new servers; one
    already in the set leaves it unchanged."""
    from pymysqlreplication.gtid import Gtid, GtidSet

    tracker = MySQLExecuted(f"{U1}:1-3:7")
    reference = GtidSet(f"{U1}:1-3:7")
    for gtid in [f"{U1}:4", f"{U1}:5", f"{U1}:6", f"{U2}:2", f"{U2}:1", f"{U1}:20"]:
        tracker.add(gtid)
        reference = reference + Gtid(gtid)
        assert str(reference) == str(tracker)
    tracker.add(f"{U1}:6")  # already in: the library raises, the set is unchanged
    assert f"{U1}:1-7:20,{U2}:1-2" == str(tracker)
    for bad in ["", f"{U1}:0", f"{U1}:x"]:
        with pytest.raises(GtidError):
            tracker.add(bad)
    with pytest.raises(GtidError):
        MySQLExecuted(f"{U1}:5-3")
