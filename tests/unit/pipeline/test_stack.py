"""The local stack's pure parts: which stage processes, in which order, and the home of a
self-contained run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelake.pipeline.processes import STAGE_STOP_TIMEOUT_S, stage_children, stager_and_ingest
from tidelake.pipeline.stack import HOME_MARKER, LocalStack, prepare_home


def test_stage_children_start_the_producer_first_and_stop_with_a_grace() -> None:
    """With a capture source: capture, stager, ingest (the stack stops them in this order);
    the ingest gets the interval; every stage has the stage grace period after SIGTERM."""
    children = stage_children({"A": "1"}, Path("/logs"), capture=True, ingest_interval_s=0.3)
    assert ["capture", "stager", "ingest"] == [c.name for c in children]
    assert ["capture"] == children[0].argv[-1:]
    assert ["ingest", "--continuous", "--interval", "0.3"] == children[2].argv[-4:]
    assert [Path("/logs/capture.log"), Path("/logs/stage.log"), Path("/logs/ingest.log")] == [
        c.log_path for c in children
    ]
    assert {STAGE_STOP_TIMEOUT_S} == {c.stop_timeout_s for c in children}
    assert [{"A": "1"}] * 3 == [c.env for c in children]


def test_without_a_capture_source_there_is_no_capture_process() -> None:
    """No capture.source: the stager and the ingest only."""
    children = stage_children({}, Path("/logs"), capture=False, ingest_interval_s=1.0)
    assert ["stager", "ingest"] == [c.name for c in children]


def test_prepare_home_wipes_its_own_directory_and_refuses_any_other(tmp_path: Path) -> None:
    """A home the demo made is wiped and marked again; a directory without the marker is
    refused and left as it was."""
    home = tmp_path / "demo"
    prepare_home(home)
    (home / "old").write_text("x")
    prepare_home(home)
    assert [HOME_MARKER] == [p.name for p in home.iterdir()]
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "keep").write_text("x")
    with pytest.raises(SystemExit, match="refusing to wipe"):
        prepare_home(foreign)
    assert ["keep"] == [p.name for p in foreign.iterdir()]


def test_a_stack_takes_a_config_or_settings_not_both(tmp_path: Path) -> None:
    """Neither or both of cfg and settings is a programming error."""
    with pytest.raises(ValueError, match="either cfg or settings"):
        LocalStack(tmp_path)


def test_each_source_is_a_producer_started_before_the_stager() -> None:
    """One ``source run NAME`` per source, after the capture and before the stager (stopped
    early: nothing new arrives while the rest stop); the routes last."""
    children = stage_children(
        {}, Path("/logs"), capture=True, ingest_interval_s=1.0, routes=["cache"], sources=["crm"]
    )
    assert ["capture", "source-crm", "stager", "ingest", "route-cache"] == [
        c.name for c in children
    ]
    assert ["source", "run", "crm"] == children[1].argv[-3:]
    assert Path("/logs/source-crm.log") == children[1].log_path


class _Child:
    """A stage process as restart_exited sees it."""

    def __init__(self, name: str, alive: bool) -> None:
        self.name = name
        self.running = alive
        self.starts = 0

    def alive(self) -> bool:
        return self.running

    def start(self) -> None:
        self.starts += 1
        self.running = True

    def returncode(self) -> int | None:
        return None if self.running else 0

    def log_tail(self, lines: int = 20) -> str:
        return ""


def test_restart_exited_restarts_the_dead_but_not_a_removed_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child that exited is started again (counted); a source's process that exited because
    the source was removed is left for sync_sources; nothing once the supervisor stops."""
    from tidelake.config import Config
    from tidelake.pipeline import stack as stack_module

    monkeypatch.setattr(stack_module, "backoff_s", lambda attempt, max_wait_s: 0.0)
    api = {"url": "http://api.test/x", "database": "d", "table": "t"}
    cfg = Config.model_validate({"home": str(tmp_path), "sources": {"crm": api}})
    stack = LocalStack(tmp_path, cfg=cfg)
    stager, crm, gone = (
        _Child("stager", False),
        _Child("source-crm", False),
        _Child("source-x", False),
    )
    stack.children = [crm, gone, stager]  # type: ignore[list-item]
    restarts: dict[str, int] = {}
    assert [] == stack.restart_exited(restarts, stopping=lambda: True)
    assert ["source-crm", "stager"] == stack.restart_exited(restarts)
    assert {"source-crm": 1, "stager": 1} == restarts
    assert (1, 0, 1) == (crm.starts, gone.starts, stager.starts)


def test_the_embedded_bus_fsyncs_unless_the_settings_say_otherwise(tmp_path: Path) -> None:
    """Settings mode starts the bus before the config is written: ``bus.embedded.sync_always``
    is read from the settings (``tidelake demo --no-fsync``), true when absent."""
    off = {"bus": {"embedded": {"sync_always": False}}}
    assert [True, True, False] == [
        LocalStack(tmp_path, settings=s)._sync_always() for s in ({}, {"bus": {}}, off)
    ]


def test_a_worker_gets_a_stager_and_an_ingest_of_its_own_name() -> None:
    """With a worker's name the pair is ``stager-<w>`` and ``ingest-<w>``, each its own log."""
    pair = stager_and_ingest({}, Path("/logs"), ingest_interval_s=0.5, worker="w2")
    assert ["stager-w2", "ingest-w2"] == [c.name for c in pair]
    assert [Path("/logs/stage-w2.log"), Path("/logs/ingest-w2.log")] == [c.log_path for c in pair]


def test_a_stack_of_workers_refuses_a_capture_source_or_route(tmp_path: Path) -> None:
    """A stack of workers runs only their stagers and ingests: a configured route (or capture,
    or source) would belong to no worker, so it is refused rather than left unstarted."""
    from tidelake.config import Config
    from tidelake.errors import ConfigError
    from tidelake.pipeline.workers import split_tables

    route = {"sink": {"kind": "webhook", "url": "http://127.0.0.1:9/x"}}
    stack = LocalStack(tmp_path, settings={}, workers=split_tables(["shop.a", "shop.b"], 2))
    stack._cfg = Config.model_validate({"home": str(tmp_path), "routes": {"hook": route}})
    with pytest.raises(ConfigError, match="several workers"):
        stack.start_stages()
    assert [] == stack.children
