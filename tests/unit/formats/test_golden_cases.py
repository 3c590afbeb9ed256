"""Every golden case decodes, and its expected rows are what the naive fold makes of it."""

from __future__ import annotations

import pytest

from golden import Case, fold_events, load_cases, sorted_expected
from tidelake.events import ChangeEvent
from tidelake.formats import decode

CASES = load_cases()
#: Cases whose expected rows the decode-only fold reaches (the others need the lake).
FOLDABLE = [c for c in CASES if not c.lake_only]


def _decode_all(case: Case) -> list[ChangeEvent]:
    events: list[ChangeEvent] = []
    for seq, (message, key) in enumerate(zip(case.messages, case.keys, strict=True), start=1):
        events.extend(decode(message, seq=seq, key_json=key).events)
    return events


def test_every_behaviour_has_a_case() -> None:
    """The behaviours the pipeline promises each have a golden case directory."""
    expected = {
        "composite_key",
        "ddl_mid_stream",
        "debezium_envelope",
        "debezium_flattened",
        "delete_then_reinsert",
        "insert_update_delete",
        "no_tidb_extension",
        "pk_change",
        "redelivered_batch",
        "republished_after_delete",
        "two_updates_one_txn",
        "two_updates_same_millisecond",
        "types",
        "watermark_skipped",
    }
    assert expected <= {case.name for case in CASES}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case_messages_decode_with_their_sequence(case: Case) -> None:
    """Every message of the case decodes (events or a skip reason) and carries its sequence."""
    for seq, (message, key) in enumerate(zip(case.messages, case.keys, strict=True), start=1):
        decoded = decode(message, seq=seq, key_json=key)
        expected = (True, {seq})
        actual = (
            bool(decoded.events) or decoded.skipped is not None,
            {e.seq for e in decoded.events} or {seq},
        )
        assert expected == actual


@pytest.mark.parametrize("case", FOLDABLE, ids=[c.name for c in FOLDABLE])
def test_case_expected_rows_equal_fold_by_position(case: Case) -> None:
    """The last event per key by position, over all decoded events, gives expected.json
    (cases whose truth needs the table's definition are proven through the lake only)."""
    expected = sorted_expected(case.expected)
    actual = fold_events(_decode_all(case))
    assert expected == actual


def test_same_millisecond_case_would_fail_ordered_by_es() -> None:
    """The case is built so that ordering by ``es`` (ties by arrival) picks the wrong row."""
    case = next(c for c in CASES if c.name == "two_updates_same_millisecond")
    events = [e for e in _decode_all(case) if e.op.value == "update"]
    by_es_then_arrival = sorted(events, key=lambda e: (e.commit_ts_ms, e.seq))[-1]
    by_position = max(events, key=lambda e: e.position)
    expected = ("paid", "shipped")
    actual = (by_es_then_arrival.after["status"], by_position.after["status"])  # type: ignore[index]
    assert expected == actual
