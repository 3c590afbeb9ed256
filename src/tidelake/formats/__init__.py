"""Wire formats: each decodes one message into ChangeEvents (``canal_json``, ``debezium``).

:func:`decode` detects the format per message and is the one entry point the stager uses.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tidelake.events import ChangeEvent


@dataclass(frozen=True, slots=True)
class Decoded:
    """What one message holds: its change events, or nothing (``skipped`` names why).

    A message that carries no row (a TiCDC ``TIDB_WATERMARK``, a Debezium tombstone) has no
    events and a ``skipped`` reason: it is counted, never staged and never dead-lettered.
    """

    events: list[ChangeEvent] = field(default_factory=list)
    skipped: str | None = None
    format: str = ""
