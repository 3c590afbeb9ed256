"""Sources in the config (``sources.<name>``) and changed at run time
(capture/source_registry.py): kept in the home, merged over the config; the cursor file of
each source its own, ``capture.rest``'s where it always was."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tidelake.capture.rest import RestSource, RestState
from tidelake.capture.source_registry import SourceRegistry
from tidelake.config import Config, load_config
from tidelake.errors import ConfigError

API = {"url": "http://api.test/items", "database": "crm", "table": "items"}


def config(home: Path, **extra: Any) -> Config:
    return Config.model_validate(
        {
            "home": str(home),
            "sources": {
                "crm": {**API, "interval_s": 5},
                "frozen": {**API, "table": "frozen", "paused": True},
            },
            **extra,
        }
    )


# -- config ------------------------------------------------------------------------------------


def test_a_source_is_a_rest_source_with_a_kind_a_name_and_its_api_and_table(
    tmp_path: Path,
) -> None:
    cfg = config(tmp_path)
    crm = cfg.sources["crm"]
    assert ("rest", False, 5.0) == (crm.kind, crm.paused, crm.interval_s)
    assert cfg.sources["frozen"].paused
    with pytest.raises(ValueError, match="source name"):
        Config.model_validate({"sources": {"Bad Name": API}})
    with pytest.raises(ValueError, match=r"sources\.x\.table"):
        Config.model_validate({"sources": {"x": {"url": "http://a", "database": "d"}}})
    with pytest.raises(ValueError, match="http"):
        Config.model_validate({"sources": {"x": {**API, "url": "ftp://a"}}})
    with pytest.raises(ValueError, match="kind"):
        Config.model_validate({"sources": {"x": {**API, "kind": "soap"}}})


def test_a_source_token_comes_from_the_environment_or_a_file(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("sources:\n  crm:\n    url: http://x\n    database: d\n    table: t\n")
    cfg = load_config(path, environ={"TIDELAKE_SOURCES__CRM__TOKEN": "s3cret"})
    assert "s3cret" == cfg.sources["crm"].resolved_token()
    assert "s3cret" not in str(cfg.masked())
    path.write_text(path.read_text() + "    token: abc\n")
    with pytest.raises(ConfigError, match="TIDELAKE_SOURCES__CRM__TOKEN"):
        load_config(path, environ={})


def test_each_source_keeps_its_own_cursor_and_capture_rest_keeps_its_file(
    tmp_path: Path,
) -> None:
    cfg = config(tmp_path, capture={"rest": API})
    single = RestSource(cfg)
    crm = RestSource(cfg, name="crm", rcfg=cfg.sources["crm"])
    # capture.rest's cursor file is where it always was: one per table.
    assert tmp_path.resolve() / "capture" / "rest-crm.items.json" == single.store.path
    assert tmp_path.resolve() / "capture" / "sources" / "crm.cursor.json" == crm.store.path
    single.store.save(RestState(table="crm.items", cursor="a", position=1).to_dict())
    assert crm.load_state().cursor is None  # the same table, another source: its own cursor
    crm.store.save(RestState(table="crm.items", cursor="b", position=2).to_dict())
    assert ("a", "b") == (single.load_state().cursor, crm.load_state().cursor)
    with pytest.raises(ValueError, match="rcfg"):
        RestSource(cfg, name="crm")


# -- the registry --------------------------------------------------------------------------------


def test_the_config_sources_are_in_effect_until_changed(tmp_path: Path) -> None:
    sources = SourceRegistry(config(tmp_path)).sources()
    assert ["crm", "frozen"] == sorted(sources)
    assert sources["frozen"].paused
    assert not sources["crm"].paused


def test_add_pause_resume_remove_are_kept_in_the_home(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    (tmp_path / "token").write_text("t0k3n\n")
    added = SourceRegistry(cfg).add(
        "tickets", {**API, "table": "tickets", "token_file": str(tmp_path / "token")}
    )
    assert "t0k3n" == added.resolved_token()
    SourceRegistry(cfg).pause("crm")
    # Another process (a running source, the supervisor) reads the same file.
    sources = SourceRegistry(cfg).sources()
    assert ["crm", "frozen", "tickets"] == sorted(sources)
    assert sources["crm"].paused
    assert "t0k3n" == sources["tickets"].resolved_token()
    SourceRegistry(cfg).resume("crm")
    assert not SourceRegistry(cfg).get("crm").paused
    SourceRegistry(cfg).remove("tickets")
    SourceRegistry(cfg).remove("crm")  # a config source: recorded as removed
    assert ["frozen"] == sorted(SourceRegistry(cfg).sources())
    assert (tmp_path / "sources.yaml").exists()
    # Added again: the name is free once removed.
    SourceRegistry(cfg).add("crm", {**API, "table": "again"})
    assert "again" == SourceRegistry(cfg).get("crm").table


def test_refusals(tmp_path: Path) -> None:
    registry = SourceRegistry(config(tmp_path))
    with pytest.raises(ConfigError, match="exists already"):
        registry.add("crm", API)
    with pytest.raises(ConfigError, match="source name"):
        registry.add("Bad Name", API)
    with pytest.raises(ConfigError, match="token_file"):
        registry.add("api", {**API, "token": "s3cret"})
    with pytest.raises(ConfigError, match=r"sources\.api"):
        registry.add("api", {"url": "http://a"})  # no database, no table
    with pytest.raises(ConfigError, match="no source named 'nope'"):
        registry.pause("nope")
    with pytest.raises(ConfigError, match="paused in the config file"):
        registry.resume("frozen")
    assert not (tmp_path / "sources.yaml").exists()  # nothing refused was written


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("added: {api: {url: http://a}}\n", "source api"),
        ("added: [\n", "cannot read the source registry"),
        ("- a list\n", "not a mapping"),
        ("added: [a, b]\n", "added must map"),
        ("paused: crm\n", "paused must be a list"),
        ("added: {Bad: {}}\n", "not a source name"),
    ],
)
def test_a_registry_written_badly_by_hand_is_named(tmp_path: Path, text: str, match: str) -> None:
    (tmp_path / "sources.yaml").write_text(text)
    with pytest.raises(ConfigError, match=match):
        SourceRegistry(config(tmp_path)).sources()
