"""One message into a batch: decode, check, mask, admit — the part of staging that does not
depend on the bus.

Both stagers use it: the JetStream one (``stage/consumer.py``) and the Kafka one
(``stage/kafka_consumer.py``). What comes back is either nothing (the message is in the
batch: staged or counted as skipped) or the reason it must be dead-lettered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog

from tidelake.config import StageConfig
from tidelake.errors import DecodeError
from tidelake.formats import Decoded
from tidelake.formats.positions import check_positions
from tidelake.runtime.storage import Storage
from tidelake.stage.admission import TableAdmission
from tidelake.stage.batch import Batch
from tidelake.stage.pii import PiiMasker

log = structlog.get_logger(__name__)

#: ``decode(payload, *, seq=...)``: the wire-format entry point (``tidelake.formats.decode``).
DecodeFn = Callable[..., Decoded]


def _default_decoder() -> DecodeFn:
    from tidelake import formats

    fn: DecodeFn = formats.decode
    return fn


class Intake:
    """The decoder, the personal-data mask and the table admission of one stager."""

    def __init__(self, stage: StageConfig, storage: Storage | None, decode: DecodeFn | None = None):
        self.decode = decode or _default_decoder()
        self.pii = PiiMasker.from_config(stage)
        self.admission = TableAdmission(stage.tables, storage)

    def take(
        self,
        batch: Batch[Any],
        msg: Any,
        *,
        seq: int,
        data: bytes,
        key: bytes | None,
        subject: str | None,
        arrived_ms: int,
    ) -> str | None:
        """Decode ``data`` into ``batch`` (as ``msg``); or return why it must be
        dead-lettered. May raise a storage error (a new table's admission record)."""
        decoded = self.read(seq=seq, data=data, key=key, subject=subject, arrived_ms=arrived_ms)
        if isinstance(decoded, str):
            return decoded
        events = decoded.events
        refused = self.admission.refusal(events)  # names and table limits (stage/admission.py)
        if refused is not None:
            return refused
        if events:
            batch.add_events(msg, seq, len(data), events)
        else:
            batch.add_skipped(msg, seq, len(data), decoded.skipped or "empty")
        return None

    def read(
        self, *, seq: int, data: bytes, key: bytes | None, subject: str | None, arrived_ms: int
    ) -> Decoded | str:
        """The message's events as they are staged (decoded, positions checked, personal
        data masked), or why it must be dead-lettered; the table admission aside. A replay of
        the stream (``view/replay.py``) reads messages through this too."""
        try:
            decoded = self.decode(data, seq=seq, key_json=key, subject=subject)
            # A position its producer cannot emit would move the table's watermark past
            # every later real event (formats/positions.py): refused before staging.
            check_positions(decoded, arrived_ms=arrived_ms)
            if self.pii:  # personal data is masked before anything is written (stage/pii.py)
                decoded = Decoded(self.pii.apply(decoded.events), decoded.skipped, decoded.format)
        except DecodeError as exc:
            return exc.reason
        except Exception as exc:  # a decoder bug: isolate the message, do not crash-loop
            log.exception("decoder failed unexpectedly", seq=seq, subject=subject)
            return f"decoder_error: {type(exc).__name__}: {exc}"
        return decoded
