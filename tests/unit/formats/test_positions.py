"""Positions validated against their producers' ranges (``formats/positions.py``; issue 23,
deliver 4): no single event can move a table's watermark beyond what the stream can later
reach, or carry a commit time no timestamp holds."""

from __future__ import annotations

import orjson
import pytest

from tidelake.errors import DecodeError
from tidelake.formats import decode
from tidelake.formats.positions import MAX_FUTURE_MS, check_positions

#: 2024-01-01T00:00:00Z: the message's arrival in the stream, in these tests.
ARRIVED_MS = 1_704_067_200_000


def _canal(commit_ts: int | None = None, es: int = ARRIVED_MS, **ours: object) -> bytes:
    body: dict[str, object] = {
        "database": "shop",
        "table": "orders",
        "pkNames": ["id"],
        "isDdl": False,
        "type": "INSERT",
        "es": es,
        "ts": ARRIVED_MS,
        "data": [{"id": "1"}],
    }
    if commit_ts is not None:
        body["_tidb"] = {"commitTs": commit_ts}
    if ours:
        body["_tidelake"] = ours
    return orjson.dumps(body)


def _reason(payload: bytes) -> str | None:
    decoded = decode(payload, seq=7)
    try:
        check_positions(decoded, arrived_ms=ARRIVED_MS)
    except DecodeError as exc:
        return exc.reason
    return None


def test_a_commit_ts_of_2_to_the_64_minus_1_is_refused_with_its_reason() -> None:
    """Probe: ``_tidb.commitTs`` = 2^64-1 moved the watermark past every later real event.
    It is not a TSO (client-go composes one in an int64): dead-lettered on arrival."""
    expected = (
        "implausible_position: shop.orders: commitTs 18446744073709551615 is not a TSO "
        "(at most 2^63-1)"
    )
    assert expected == _reason(_canal(2**64 - 1, es=ARRIVED_MS))


def test_a_tso_whose_physical_time_is_far_ahead_of_its_arrival_is_refused() -> None:
    """A TSO below 2^63 but whose physical part (ts >> 18) is a year after the message
    reached the stream would hold the watermark a year ahead: refused."""
    year_ahead = (ARRIVED_MS + 366 * 86_400_000) << 18
    reason = _reason(_canal(year_ahead, es=ARRIVED_MS))
    assert reason is not None
    assert reason.startswith("implausible_position: shop.orders: commitTs ")
    assert "1 years after the message's arrival" in reason


def test_a_real_tso_and_one_within_the_clock_skew_pass() -> None:
    """The TSO of the arrival instant, and one ahead by less than MAX_FUTURE_MS (PD's clock
    may run ahead of the NATS server's), are accepted; so is an old one (a replay)."""
    now = (ARRIVED_MS << 18) | 5
    ahead = ((ARRIVED_MS + MAX_FUTURE_MS - 1000) << 18) | 1
    old = (1_500_000_000_000 << 18) | 1
    expected = [None, None, None]
    assert expected == [_reason(_canal(ts, es=ts >> 18)) for ts in (now, ahead, old)]


def test_an_es_of_10_to_the_15_is_refused_not_left_to_crash_the_ingest() -> None:
    """Probe: an ``es`` of 10^15 ms (year ~33658) raised an uncaught error in the ingest,
    every round. Plain canal-json's ``es`` is the commit time: refused on arrival."""
    reason = _reason(_canal(None, es=10**15))
    assert reason is not None
    assert reason.startswith(
        "implausible_position: shop.orders: commit time 1000000000000000 ms is "
    )


def test_debezium_binlog_and_lsn_positions_beyond_their_fields_are_refused() -> None:
    """A binlog ``pos`` is the 4-byte ``log_pos``; a Debezium LSN is a Java long."""

    def envelope(connector: str, source: dict[str, object]) -> bytes:
        base = {"connector": connector, "db": "shop", "schema": "shop", "table": "orders"}
        return orjson.dumps(
            {
                "op": "c",
                "before": None,
                "after": {"id": 1},
                "source": {**base, "ts_ms": ARRIVED_MS, **source},
                "ts_ms": ARRIVED_MS,
            }
        )

    actual = [
        _reason(envelope("mysql", {"file": "binlog.000003", "pos": 2**32})),
        _reason(envelope("mysql", {"file": "binlog.000003", "pos": 2**32 - 1})),
        _reason(envelope("postgresql", {"lsn": 2**63})),
        _reason(envelope("postgresql", {"lsn": 2**40})),
    ]
    expected = [
        "implausible_position: shop.orders: binlog position 4294967296 does not fit the "
        "4-byte log_pos",
        None,
        "implausible_position: shop.orders: LSN 9223372036854775808 is above 2^63-1",
        None,
    ]
    assert expected == actual


@pytest.mark.parametrize("field", ["es", "commit_ts_ms"])
def test_commit_time_ahead_of_arrival_from_our_capture_is_refused(field: str) -> None:
    """tidelake's own capture carries ``_tidelake.commit_ts_ms``; plain canal-json ``es``:
    either one an hour ahead of its arrival is refused."""
    hour_ahead = ARRIVED_MS + 3_600_000
    payload = (
        _canal(None, es=hour_ahead)
        if field == "es"
        else _canal(None, position="00000000000000000001", commit_ts_ms=hour_ahead)
    )
    expected = (
        f"implausible_position: shop.orders: commit time {hour_ahead} ms is 1 hours after "
        "the message's arrival"
    )
    assert expected == _reason(payload)


def test_our_capture_positions_after_a_failover_pass_and_are_checked_past_the_epoch() -> None:
    """After a failover the capture leads positions with ``EPOCH_BASE + epoch``
    (``capture/gtid.py``): accepted, and the binlog file and offset after it still checked."""
    from tidelake.capture.gtid import EPOCH_BASE
    from tidelake.events import Position

    def ours(*parts: int) -> bytes:
        return _canal(None, position=Position(parts).encode(), source="mysql")

    assert _reason(ours(EPOCH_BASE + 1, 3, 4096, 0)) is None
    assert _reason(ours(EPOCH_BASE + 2, 3, 4096, 0, 1)) is None  # a key change's UPDATE half
    assert _reason(ours(EPOCH_BASE + 1, 3, 2**32, 0)) == (
        "implausible_position: shop.orders: binlog position 4294967296 does not fit the "
        "4-byte log_pos"
    )
