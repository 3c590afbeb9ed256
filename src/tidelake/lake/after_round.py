"""The contract of what the ingest runs after each round (the views: ``view/keeper.py``).

The ingest does not import what sits above it: the ``ingest`` command hands it a
:data:`Hook`, which makes an :class:`AfterRound` from the ingest's Spark session. The ingest
asks it after every round whether it ``wants`` to run (a round that committed, a rebuild
asked for, the first round of the process), and runs it inside the round's heartbeat, before
the cursor moves: a round killed before it finished is read again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from tidelake.events import ChangeEvent

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: A round's events per table; None when nothing was staged.
RoundEvents = Mapping[str, Sequence[ChangeEvent]] | None


class AfterRound(Protocol):
    def wants(self, events: RoundEvents) -> bool: ...

    def __call__(self, events: RoundEvents) -> object: ...


Hook = Callable[["SparkSession"], AfterRound]
