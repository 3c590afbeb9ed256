"""The chaos schedule: a pure function of the seed, spread over every victim."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelake.pipeline import chaos
from tidelake.pipeline.chaos import ChaosOptions, ChaosResult, ChaosSchedule, Victim


class FakeVictim:
    """Records what the harness does to it; always up and ready."""

    def __init__(self, name: str, can_pause: bool) -> None:
        self.name = name
        self.can_pause = can_pause
        self.up = True
        self.log: list[str] = []

    def kill(self) -> None:
        self.up = False
        self.log.append("kill")

    def start(self) -> None:
        self.up = True
        self.log.append("start")

    def pause(self) -> None:
        self.log.append("pause")

    def resume(self) -> None:
        self.log.append("resume")

    def alive(self) -> bool:
        return self.up

    def ready(self) -> bool:
        return self.up


def _schedule(seed: int, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], ChaosResult]:
    monkeypatch.setattr(chaos.time, "sleep", lambda _s: None)
    victims: list[Victim] = [
        FakeVictim("nats", False),
        FakeVictim("stager", True),
        FakeVictim("ingest", True),
        FakeVictim("capture", True),
    ]
    opts = ChaosOptions(
        seed=seed, min_kills=40, min_kills_each=8, gap_s=(0.0, 0.0), home=Path("unused")
    )
    result = ChaosResult(seed=seed)
    run = ChaosSchedule(opts, victims, result)
    run.run(lambda: True)
    return [line.split("s ", 1)[1] for line in result.actions], result


def test_same_seed_same_schedule_other_seed_other_schedule(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two runs with seed 5 take the same actions in the same order; seed 6 does not."""
    first, _ = _schedule(5, monkeypatch)
    again, _ = _schedule(5, monkeypatch)
    other, _ = _schedule(6, monkeypatch)
    assert first == again
    assert first != other


def test_kills_spread_over_every_victim_and_pauses_only_pausable_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The run stops only once every victim was killed min_kills_each times; nats-server is
    never paused; every kill is followed by a start and every pause by a resume."""
    actions, _ = _schedule(5, monkeypatch)
    kills = {
        name: actions.count(f"SIGKILL {name}") for name in ("nats", "stager", "ingest", "capture")
    }
    assert all(n >= 8 for n in kills.values()), kills
    assert sum(kills.values()) >= 40
    assert "SIGSTOP nats" not in actions
    assert any(a.startswith("SIGSTOP") for a in actions)
    for i, action in enumerate(actions):
        verb, name = action.split()
        if verb == "SIGKILL":
            assert f"start {name}" == actions[i + 1]
        if verb == "SIGSTOP":
            assert f"SIGCONT {name}" == actions[i + 1]
