"""The demo publisher's pacing: a sleep only once a slice ahead, the rate kept on average."""

from __future__ import annotations

import pytest

from tidelake.pipeline.pacing import Pacer


class FakeClock:
    """A monotonic clock moved by hand (and by the sleeps the pacer asks for)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_no_sleep_until_a_slice_ahead() -> None:
    """At 10,000 events/s a 10 ms slice is 100 events: 99 events published at once ask for
    no sleep, the 100th for the whole slice."""
    clock = FakeClock()
    pacer = Pacer(10_000, slice_s=0.01, clock=clock)
    assert (0.0, pytest.approx(0.01)) == (pacer.pause_s(99), pacer.pause_s(100))


def test_the_rate_holds_over_many_slices() -> None:
    """Transactions of 3 events published instantly, each pause slept: 30,000 events take
    3 s at 10,000 events/s, with at most one slice (and one transaction) of lead."""
    clock = FakeClock()
    pacer = Pacer(10_000, slice_s=0.01, clock=clock)
    sleeps = 0
    for sent in range(3, 30_001, 3):
        pause = pacer.pause_s(sent)
        assert pause < 0.01 + 3 / 10_000
        if pause:
            sleeps += 1
            clock.now += pause
    assert (pytest.approx(3.0, abs=0.011), True) == (pacer.elapsed_s(), 290 <= sleeps <= 300)


def test_behind_the_rate_it_never_sleeps() -> None:
    """A publisher slower than its rate runs on: no pause however far it falls behind."""
    clock = FakeClock()
    pacer = Pacer(10_000, clock=clock)
    clock.now += 5.0
    assert 0.0 == pacer.pause_s(1_000)


def test_a_rate_must_be_positive() -> None:
    """Zero events/s has no pace."""
    with pytest.raises(ValueError, match="positive"):
        Pacer(0)
