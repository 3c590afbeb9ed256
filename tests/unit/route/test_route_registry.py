"""Routes changed at run time (route/registry.py): kept in the home, merged over the config."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelake.config import Config
from tidelake.errors import ConfigError
from tidelake.route.registry import RouteRegistry

REDIS = {"sink": {"kind": "redis"}}


def config(home: Path) -> Config:
    return Config.model_validate(
        {
            "home": str(home),
            "routes": {
                "cache": {"tables": ["shop.*"], **REDIS},
                "frozen": {"paused": True, **REDIS},
            },
        }
    )


def test_the_config_routes_are_in_effect_until_changed(tmp_path: Path) -> None:
    registry = RouteRegistry(config(tmp_path))
    routes = registry.routes()
    assert ["cache", "frozen"] == sorted(routes)
    assert routes["frozen"].paused
    assert not routes["cache"].paused


def test_add_pause_resume_remove_are_kept_in_the_home(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    RouteRegistry(cfg).add("hook", {"sink": {"kind": "webhook", "url": "http://h/x"}})
    RouteRegistry(cfg).pause("cache")
    # Another process (a running route, the supervisor) reads the same file.
    routes = RouteRegistry(cfg).routes()
    assert ["cache", "frozen", "hook"] == sorted(routes)
    assert routes["cache"].paused
    assert routes["hook"].sink.kind == "webhook"
    RouteRegistry(cfg).resume("cache")
    RouteRegistry(cfg).remove("hook")
    RouteRegistry(cfg).remove("cache")  # a config route: recorded as removed
    assert ["frozen"] == sorted(RouteRegistry(cfg).routes())
    assert (tmp_path / "routes.yaml").exists()
    # Added again: the name is free once removed.
    RouteRegistry(cfg).add("cache", REDIS)
    assert not RouteRegistry(cfg).routes()["cache"].paused


def test_refusals(tmp_path: Path) -> None:
    registry = RouteRegistry(config(tmp_path))
    with pytest.raises(ConfigError, match="exists already"):
        registry.add("cache", REDIS)
    with pytest.raises(ConfigError, match="route name"):
        registry.add("Bad Name", REDIS)
    with pytest.raises(ConfigError, match="password_file"):
        registry.add("pg", {"sink": {"kind": "postgres", "dsn": "x", "password": "s3cret"}})
    with pytest.raises(ConfigError, match=r"routes\.pg"):
        registry.add("pg", {"sink": {"kind": "postgres"}})  # no dsn
    with pytest.raises(ConfigError, match="no route named 'nope'"):
        registry.pause("nope")
    with pytest.raises(ConfigError, match="paused in the config file"):
        registry.resume("frozen")
    assert not (tmp_path / "routes.yaml").exists()  # nothing refused was written


def test_a_registry_written_badly_by_hand_is_named(tmp_path: Path) -> None:
    (tmp_path / "routes.yaml").write_text("added: {hook: {sink: {kind: nope}}}\n")
    with pytest.raises(ConfigError, match="route hook"):
        RouteRegistry(config(tmp_path)).routes()
    (tmp_path / "routes.yaml").write_text("added: [\n")
    with pytest.raises(ConfigError, match="cannot read the route registry"):
        RouteRegistry(config(tmp_path)).routes()
