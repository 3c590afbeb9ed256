"""The lag arithmetic of the bench's capture part (``tidelake_bench/capture.py``)."""

from __future__ import annotations

import pytest

from tidelake_bench.capture import lag_samples

#: The writer's commits: (wall time, changes committed so far).
COMMITS = [(10.0, 2), (11.0, 5), (12.0, 6)]


def test_lag_is_time_since_the_commit_holding_the_last_acknowledged_change() -> None:
    """At 11.5 s with 3 changes acknowledged, the 3rd change was committed at 11.0: 0.5 s
    behind; with 2 acknowledged, the commit at 10.0 holds it: 1.5 s behind."""
    assert [0.5, 1.5] == pytest.approx(lag_samples([(11.5, 3), (11.5, 2)], COMMITS))


def test_nothing_acknowledged_counts_from_the_first_commit() -> None:
    """A capture that has published nothing yet is behind since the first commit."""
    assert [2.0] == pytest.approx(lag_samples([(12.0, 0)], COMMITS))


def test_samples_outside_the_writers_run_are_left_out() -> None:
    """Before the first commit nothing can lag; once everything is acknowledged the capture
    is caught up and idle, which is not a lag measurement."""
    assert [] == lag_samples([(9.0, 0), (13.0, 6), (14.0, 7)], COMMITS)
    assert [] == lag_samples([(11.0, 1)], [])
