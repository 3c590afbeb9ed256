"""The command line: every verb registered, verbs listed, config check exit codes."""

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer.main
from typer.core import TyperGroup

from tidelake.cli import app

# Every command path of the ``tidelake`` command line. A verb removed, renamed or left
# unregistered (``cli/operate.py`` adds the operator verbs) fails the test; a verb added
# must be added here, on purpose.
EXPECTED_COMMANDS = {
    "tidelake bench",
    "tidelake bus init",
    "tidelake capture",
    "tidelake chaos",
    "tidelake config check",
    "tidelake demo",
    "tidelake dlq discard",
    "tidelake dlq list",
    "tidelake dlq replay",
    "tidelake dlq show",
    "tidelake ingest",
    "tidelake query",
    "tidelake replay",
    "tidelake run",
    "tidelake serve",
    "tidelake stage",
    "tidelake status",
    "tidelake submit",
    "tidelake table pause",
    "tidelake table resume",
    "tidelake table skip-ddl",
    "tidelake verify",
}


def _command_paths(command: object, path: tuple[str, ...]) -> Iterator[str]:
    """Every leaf command under ``command``, as the words a user types."""
    if isinstance(command, TyperGroup):
        for name, sub in command.commands.items():
            yield from _command_paths(sub, (*path, name))
    else:
        yield " ".join(path)


def _tidelake(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tidelake.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


def test_every_verb_is_registered() -> None:
    """The Typer app, walked through its groups, holds exactly the expected command paths."""
    actual = set(_command_paths(typer.main.get_command(app), ("tidelake",)))
    assert EXPECTED_COMMANDS == actual


def test_help_lists_the_verbs() -> None:
    """`tidelake --help` names every verb a user needs."""
    out = _tidelake("--help").stdout
    expected = {"config", "demo", "run", "stage", "ingest", "query"}
    assert expected == {verb for verb in expected if verb in out}


def test_config_check_on_a_broken_file_exits_2_naming_the_field(tmp_path: Path) -> None:
    """A bad value exits with status 2 and the dotted path of the field."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("stage:\n  max_events: -3\n")
    proc = _tidelake("config", "check", str(bad))
    assert 2 == proc.returncode
    assert "stage.max_events" in proc.stderr + proc.stdout


def test_config_check_masks_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The effective config prints, with a password from the environment masked."""
    good = tmp_path / "good.yaml"
    good.write_text("bus:\n  url: nats://127.0.0.1:4222\n  auth:\n    user: app\n")
    env = {"PATH": "/usr/bin:/bin", "TIDELAKE_BUS__AUTH__PASSWORD": "hunter2-secret"}
    proc = _tidelake("config", "check", str(good), env=env)
    assert 0 == proc.returncode, proc.stderr
    assert "hunter2-secret" not in proc.stdout + proc.stderr
    assert "**********" in proc.stdout
