"""Holding a generated workload to a rate, in slices rather than per transaction.

The demo's publisher (``demo.publish_workload``) once slept after every transaction that put
it ahead of the rate: at 10,000 events/s about 6,000 sleeps a second, each a pass of the event
loop, a socket write of one or two messages and a read of their PubAcks. Paced that way it
used about twice the CPU of publishing flat out, and nats-server 2.5 to 3.5 times as much;
slices took a third of the publisher's CPU off and half of nats-server's (docs/benchmarks.md,
optimisation 9). :class:`Pacer` lets it run until it is a slice (:data:`SLICE_S`) ahead of
the rate, then sleeps that off: the same average rate, bursts of rate x slice events (100 at
10,000 events/s), far below a freshness of seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: How far ahead of the rate the publisher runs before it sleeps.
SLICE_S = 0.01


class Pacer:
    """Seconds to sleep so that ``sent`` events since its making keep to ``rate``/s."""

    def __init__(
        self,
        rate: float,
        slice_s: float = SLICE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if rate <= 0:
            raise ValueError(f"the rate must be positive, not {rate}")
        self.rate = rate
        self.slice_s = slice_s
        self._clock = clock
        self.started = clock()

    def pause_s(self, sent: int) -> float:
        """How long to sleep after ``sent`` events: how far ahead of the rate they are once
        that is a slice or more, else 0 (run on)."""
        ahead = self.started + sent / self.rate - self._clock()
        return ahead if ahead >= self.slice_s else 0.0

    def elapsed_s(self) -> float:
        return self._clock() - self.started
