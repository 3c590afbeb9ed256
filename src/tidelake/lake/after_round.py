"""The contract of what the ingest runs after each round (the views: ``view/keeper.py``).

The ingest does not import what sits above it: the ``ingest`` command hands it a
:data:`Hook`, which makes an :class:`AfterRound` from the ingest's Spark session. The ingest
asks it after every round whether it ``wants`` to run (a round that committed, a rebuild
asked for, the first round of the process), and runs it inside the round's heartbeat, before
the cursor moves: a round killed before it finished is read again.

What it is handed is the round as staged: every event, also those a table did not apply.
What each table did with them is in the lake, not here: a table's checkpoint says how far it
has committed (a table that failed, or was paused or held back, has not moved), and each
commit of rows says which of the events it covers it applied (``lake/checkpoint.py``
``AppliedRows``: not the dead-lettered, not the stale). Both are in the commit itself, so they
hold as well when a crash makes the round be read again: the ingest then finds every event a
duplicate and decides nothing anew.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from tidelake.events import ChangeEvent

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True, slots=True)
class RoundEvents:
    """One round as staged: its events per table (stream order), and the stream sequence it
    reads through. A table's commit in the round covers the stream up to ``seq_last`` at
    most; one that covers more (committed before a crash, the round read again shorter) gets
    the rest of its events in the next rounds."""

    events: Mapping[str, Sequence[ChangeEvent]]
    seq_last: int


class AfterRound(Protocol):
    def wants(self, staged: RoundEvents | None) -> bool: ...

    def __call__(self, staged: RoundEvents | None) -> object: ...


Hook = Callable[["SparkSession"], AfterRound]
