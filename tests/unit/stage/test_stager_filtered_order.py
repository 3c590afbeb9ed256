"""A worker's stager on a filtered consumer (``bus.consumer.filter_subjects``).

Its deliveries skip the stream sequences of other workers' subjects. The consumer sequence
proves each such skip empty at once (a first delivery right after the last one taken); the
gap check proves a gap empty only when no message of *any* of its filters lies in it.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import nats.js.errors

from tidelake.bus.coverage import subject_matches
from tidelake.config import load_config
from tidelake.runtime.storage import LocalStorage
from tidelake.stage.batch import Batch
from tidelake.stage.consumer import Stager, consumer_seq


def _msg(seq: int, cseq: int, delivered: int = 1) -> Any:
    """A delivery as the stager sees it: only its ack subject matters here."""
    return SimpleNamespace(reply=f"$JS.ACK.TIDELAKE_CDC.w1.{delivered}.{seq}.{cseq}.1.0")


class StreamJs:
    """JetStream's ``get_msg(next=True)`` over a fixed stream: sequence → subject."""

    def __init__(self, subjects: dict[int, str]) -> None:
        self.subjects = subjects
        self.lookups: list[str] = []

    async def get_msg(self, stream: str, *, seq: int, subject: str, next: bool) -> Any:
        self.lookups.append(subject)
        for s in sorted(self.subjects):
            if s >= seq and subject_matches(subject, self.subjects[s]):
                return SimpleNamespace(seq=s)
        raise nats.js.errors.NotFoundError

    async def consumer_info(self, stream: str, durable: str) -> Any:
        return SimpleNamespace(
            ack_floor=SimpleNamespace(stream_seq=0), num_pending=5, num_ack_pending=9
        )


def _stager(tmp_path: Path, js: Any, filters: list[str]) -> Stager:
    cfg = load_config(
        None,
        environ={
            "TIDELAKE_HOME": str(tmp_path),
            "TIDELAKE_BUS__CONSUMER__FILTER_SUBJECTS": str(filters),
            "TIDELAKE_INGEST__TABLES": '["shop.*"]',
        },
    )
    nc = SimpleNamespace(jetstream=lambda: js)
    stager = Stager(nc, cfg.bus, cfg.stage, LocalStorage(str(tmp_path / "staging")))  # type: ignore[arg-type]
    stager._flushed_floor = 0
    stager._next_seq = 1
    stager._held = {}
    stager._gap_checked_at = 0.0
    stager._held_touched_at = time.monotonic()
    return stager


def _seqs(msgs: list[Any]) -> list[int]:
    return [int(m.reply.split(".")[5]) for m in msgs]


def test_consumer_seq_is_read_from_the_ack_subject() -> None:
    """The seventh token of ``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>...``."""
    assert 42 == consumer_seq(_msg(seq=100, cseq=42))


def test_first_deliveries_in_consumer_order_pass_the_other_subjects_sequences(
    tmp_path: Path,
) -> None:
    """After one message taken in order, first deliveries with the next consumer sequences
    are taken at once although their stream sequences skip other workers' messages."""
    stager = _stager(tmp_path, StreamJs({}), ["cdc.shop.a"])
    ready = asyncio.run(
        stager._sort([_msg(1, 1), _msg(4, 2), _msg(9, 3), _msg(10, 4)], Batch(stager.limits))
    )
    assert [1, 4, 9, 10] == _seqs(ready)
    assert (11, {}) == (stager._next_seq, stager._held)


def test_a_redelivery_breaks_the_chain_and_holds_what_follows(tmp_path: Path) -> None:
    """A redelivery (delivery count 2) ahead of the next sequence proves nothing about the
    gap before it: it is held, and so is the first delivery after it."""
    stager = _stager(tmp_path, StreamJs({}), ["cdc.shop.a"])
    asyncio.run(stager._sort([_msg(1, 1)], Batch(stager.limits)))
    ready = asyncio.run(stager._sort([_msg(7, 2, delivered=2), _msg(9, 3)], Batch(stager.limits)))
    assert [] == ready
    assert [7, 9] == sorted(stager._held)


def test_a_consumer_sequence_going_back_forgets_the_chain(tmp_path: Path) -> None:
    """A consumer sequence at or below the last one taken (the server lost consumer state)
    proves nothing: the message after a gap is held for the gap check."""
    stager = _stager(tmp_path, StreamJs({}), ["cdc.shop.a"])
    asyncio.run(stager._sort([_msg(1, 5)], Batch(stager.limits)))
    assert [] == asyncio.run(stager._sort([_msg(6, 5)], Batch(stager.limits)))
    assert [6] == sorted(stager._held)


def test_a_gap_is_empty_only_when_no_filter_has_a_message_in_it(tmp_path: Path) -> None:
    """Stream 1..6: sequence 3 is on the second filter's subject. Holding 5 (the chain
    unknown, as after a restart), the gap from 1 is not empty: the check waits for 3
    (and skips 1..2, which hold other workers' subjects only)."""
    stream = {1: "cdc.x.o", 2: "cdc.x.o", 3: "cdc.crm.b", 4: "cdc.x.o", 5: "cdc.shop.a"}
    js = StreamJs(stream)
    stager = _stager(tmp_path, js, ["cdc.shop.a", "cdc.crm.>"])
    stager._held = {5: _msg(5, 9)}
    asyncio.run(stager._check_gap())
    assert 3 == stager._next_seq
    assert {"cdc.shop.a", "cdc.crm.>"} <= set(js.lookups)


def test_a_gap_holding_only_other_subjects_is_skipped_and_the_chain_resumes(
    tmp_path: Path,
) -> None:
    """Nothing of either filter before the held 5 and 7: the gap check moves to 5, and the
    held first deliveries follow by their consumer sequences."""
    stream = {1: "cdc.x.o", 2: "cdc.x.o", 5: "cdc.shop.a", 6: "cdc.x.o", 7: "cdc.crm.b"}
    stager = _stager(tmp_path, StreamJs(stream), ["cdc.shop.a", "cdc.crm.>"])
    stager._held = {5: _msg(5, 3), 7: _msg(7, 4)}
    asyncio.run(stager._check_gap())
    assert [5, 7] == _seqs(stager._take_ready())
    assert 8 == stager._next_seq
