"""load_config: defaults, env overrides, clear errors, secrets kept out of files and logs."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tidelake.config import Config, load_config
from tidelake.errors import ConfigError


def test_no_file_gives_the_defaults() -> None:
    """With no file and no environment every field keeps its default."""
    expected = Config().model_dump()
    actual = load_config(None, environ={}).model_dump()
    assert expected == actual


def test_environment_overrides_a_nested_field() -> None:
    """TIDELAKE_STAGE__MAX_EVENTS=5 sets stage.max_events, parsed as a number."""
    expected = 5
    actual = load_config(None, environ={"TIDELAKE_STAGE__MAX_EVENTS": "5"}).stage.max_events
    assert expected == actual


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    """An environment override wins over the same field in the file."""
    path = tmp_path / "tidelake.yaml"
    path.write_text("stage:\n  max_events: 100\n  max_age_s: 2.5\n")
    config = load_config(path, environ={"TIDELAKE_STAGE__MAX_EVENTS": "7"})
    expected = (7, 2.5)
    actual = (config.stage.max_events, config.stage.max_age_s)
    assert expected == actual


def test_invalid_field_error_names_its_dotted_path(tmp_path: Path) -> None:
    """A bad value raises ConfigError naming stage.max_events."""
    path = tmp_path / "tidelake.yaml"
    path.write_text("stage:\n  max_events: lots\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    expected = True
    actual = str(info.value).startswith("stage.max_events: ")
    assert expected == actual, str(info.value)


def test_unknown_field_is_refused(tmp_path: Path) -> None:
    """A misspelt key is an error naming it, not silently ignored."""
    path = tmp_path / "tidelake.yaml"
    path.write_text("stage:\n  max_event: 5\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    expected = True
    actual = "stage.max_event" in str(info.value)
    assert expected == actual, str(info.value)


def test_file_that_is_not_yaml_is_refused(tmp_path: Path) -> None:
    """Broken YAML raises ConfigError naming the file."""
    path = tmp_path / "tidelake.yaml"
    path.write_text("stage: [unclosed\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    expected = True
    actual = str(info.value).startswith(f"{path}: not valid YAML")
    assert expected == actual, str(info.value)


def test_secret_in_the_file_is_refused(tmp_path: Path) -> None:
    """bus.auth.password in the YAML is rejected, pointing at the environment variable."""
    path = tmp_path / "tidelake.yaml"
    path.write_text("bus:\n  auth:\n    user: ada\n    password: hunter2\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    expected = (True, True, False)
    message = str(info.value)
    actual = (
        message.startswith("bus.auth.password: "),
        "TIDELAKE_BUS__AUTH__PASSWORD" in message,
        "hunter2" in message,
    )
    assert expected == actual, message


def test_secret_from_environment_is_masked() -> None:
    """A password from the environment is usable but masked in Config.masked()."""
    config = load_config(None, environ={"TIDELAKE_BUS__AUTH__PASSWORD": "s3cr3t-value"})
    dumped = orjson.dumps(config.masked()).decode()
    expected = ("s3cr3t-value", True, False)
    actual = (config.bus.auth.resolved_password(), "**********" in dumped, "s3cr3t-value" in dumped)
    assert expected == actual


def test_environment_variables_of_other_tools_are_not_settings() -> None:
    """TIDELAKE_SETUP_* (scripts/setup) and TIDELAKE_JAR_CACHE are ignored; a nested
    override of a real section still applies."""
    env = {
        "TIDELAKE_SETUP_BROWSER": "1",
        "TIDELAKE_JAR_CACHE": "/tmp/jars",
        "TIDELAKE_CONFIG_UNUSED": "x",
        "TIDELAKE_INGEST__INTERVAL_S": "2.5",
    }
    assert 2.5 == load_config(None, environ=env).ingest.interval_s


def test_a_config_that_serves_off_loopback_loads_without_the_token(tmp_path: Path) -> None:
    """One config file for every process of a deployment names `api.host: 0.0.0.0`; the
    processes that never listen (stage, capture, ingest) load it without TIDELAKE_API__TOKEN,
    and the token is demanded only of the one that listens (require_token_to_listen)."""
    path = tmp_path / "tidelake.yaml"
    path.write_text("api:\n  host: 0.0.0.0\n")
    without = load_config(path, environ={})
    with pytest.raises(ConfigError, match=r"bearer token is required to serve on 0\.0\.0\.0"):
        without.api.require_token_to_listen()
    with_token = load_config(path, environ={"TIDELAKE_API__TOKEN": "t0ken"})
    with_token.api.require_token_to_listen()
    expected = ("0.0.0.0", None, "t0ken")
    actual = (
        without.api.host,
        without.api.token,
        with_token.api.token.get_secret_value() if with_token.api.token else None,
    )
    assert expected == actual


def test_an_empty_token_is_refused_whoever_loads_the_config(tmp_path: Path) -> None:
    """An empty TIDELAKE_API__TOKEN is a mistake on any bind address, so it stays a load
    error for every verb (not only the one that listens)."""
    path = tmp_path / "tidelake.yaml"
    path.write_text("api:\n  host: 127.0.0.1\n")
    with pytest.raises(ConfigError, match="TIDELAKE_API__TOKEN is empty"):
        load_config(path, environ={"TIDELAKE_API__TOKEN": " "})


def test_the_default_home_is_absolute_and_follows_xdg(tmp_path: Path) -> None:
    """No home anywhere: $XDG_DATA_HOME/tidelake, else ~/.local/share/tidelake (a relative
    XDG_DATA_HOME is invalid per the spec and ignored); TIDELAKE_HOME wins over both and a
    leading ~ is expanded. Never the relative .tidelake of the directory a verb runs in."""
    homes = [
        load_config(environ=env).home
        for env in (
            {"XDG_DATA_HOME": str(tmp_path / "xdg"), "HOME": "/h"},
            {"HOME": "/h"},
            {"XDG_DATA_HOME": "relative", "HOME": "/h"},
            {"TIDELAKE_HOME": str(tmp_path / "mine"), "XDG_DATA_HOME": "/x", "HOME": "/h"},
        )
    ]
    assert [
        tmp_path / "xdg" / "tidelake",
        Path("/h/.local/share/tidelake"),
        Path("/h/.local/share/tidelake"),
        tmp_path / "mine",
    ] == homes
    assert Path.home() / "pipelines" == load_config(environ={"TIDELAKE_HOME": "~/pipelines"}).home


def test_a_config_files_home_beats_the_default_and_tidelake_home_beats_the_file(
    tmp_path: Path,
) -> None:
    """home: in the file is used over the XDG default; TIDELAKE_HOME (what --home sets)
    overrides the file like every TIDELAKE_ variable."""
    path = tmp_path / "c.yaml"
    path.write_text(f"home: {tmp_path / 'from-file'}\n")
    assert tmp_path / "from-file" == load_config(path, environ={"HOME": "/h"}).home
    assert (
        tmp_path / "env" == load_config(path, environ={"TIDELAKE_HOME": str(tmp_path / "env")}).home
    )


def test_a_text_setting_from_the_environment_is_taken_as_written() -> None:
    """``TIDELAKE_API__HOST=::`` (every IPv6 address) is an address, not the YAML mapping
    ``{None: None}`` it parses to; numbers still parse and an empty value still unsets."""
    cfg = load_config(
        None,
        environ={
            "TIDELAKE_API__HOST": "::",
            "TIDELAKE_API__TOKEN": "t",
            "TIDELAKE_API__PORT": "9000",
            "TIDELAKE_BUS__URL": "",
            "TIDELAKE_STAGE__ROOT": "0123",
            "TIDELAKE_LAKE__SPARK__CONF": '{"spark.x": "1"}',
            "TIDELAKE_API__ALLOWED_HOSTS": "[a.example]",
        },
    )
    assert ("::", 9000, None, "0123") == (cfg.api.host, cfg.api.port, cfg.bus.url, cfg.stage.root)
    # A mapping or list of strings is still YAML.
    assert ({"spark.x": "1"}, ["a.example"]) == (cfg.lake.spark.conf, cfg.api.allowed_hosts)
