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
    # A group: bare `tidelake capture` runs the capture (its callback), `snapshot` is a leaf.
    "tidelake capture snapshot",
    "tidelake capture kafka",
    "tidelake capture lag",
    "tidelake capture rest",
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
    "tidelake route add",
    "tidelake route list",
    "tidelake route pause",
    "tidelake route remove",
    "tidelake route replay",
    "tidelake route reprocess",
    "tidelake route resume",
    "tidelake route run",
    "tidelake run",
    "tidelake serve",
    "tidelake setup",
    "tidelake source add",
    "tidelake source list",
    "tidelake source pause",
    "tidelake source remove",
    "tidelake source resume",
    "tidelake source run",
    "tidelake stage",
    "tidelake status",
    "tidelake submit",
    "tidelake table pause",
    "tidelake table resume",
    "tidelake table skip-ddl",
    "tidelake verify",
    "tidelake view list",
    "tidelake view rebuild",
    "tidelake view run",
    "tidelake view status",
    "tidelake view verify",
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


def _help(words: str) -> str:
    """``tidelake <words> --help`` at 80 columns, in this process."""
    from typer.testing import CliRunner

    args = [*words.split()[1:], "--help"]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "80"}, terminal_width=80)
    assert 0 == result.exit_code, result.output
    return result.output


def test_help_of_every_verb_shows_flags_without_a_metavar_in_80_columns() -> None:
    """No `--json <bool>`: a flag takes no value, so its help shows none; every line of
    every verb's help fits 80 columns."""
    offenders = {}
    for words in sorted(EXPECTED_COMMANDS | {"tidelake"}):
        text = _help(words)
        bad = [line for line in text.splitlines() if "<bool>" in line or len(line) > 80]
        if bad:
            offenders[words] = bad
    assert {} == offenders


def test_version_prints_the_installed_version() -> None:
    """`tidelake --version` prints the version of the installed distribution and exits 0."""
    from importlib.metadata import version

    proc = _tidelake("--version")
    assert (0, f"tidelake {version('tidelake')}\n") == (proc.returncode, proc.stdout)


def test_shell_completion_is_offered(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--show-completion bash` prints a bash completion script for `tidelake`.

    Typer takes the shell from the command line only with its shell detection off; with it on,
    it asks shellingham for the parent shell, which a run without one (under setsid, say) lacks.
    """
    from typer.testing import CliRunner

    monkeypatch.setenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", "1")
    result = CliRunner().invoke(app, ["--show-completion", "bash"], prog_name="tidelake")
    assert 0 == result.exit_code, result.output
    assert "_TIDELAKE_COMPLETE=complete_bash" in result.output


@pytest.mark.parametrize("verb", ["discard", "replay"])
def test_dlq_discard_or_replay_without_sequences_is_a_usage_error(verb: str) -> None:
    """No sequence and no --all: exit 2 with a usage message, asking nothing (discard used to
    ask whether to discard 0 dead letters)."""
    from typer.testing import CliRunner

    result = CliRunner().invoke(app, ["dlq", verb], input="y\n")
    assert 2 == result.exit_code
    assert "name DLQ sequences, or --all" in result.output
    assert "for good?" not in result.output


def test_json_and_csv_exclude_each_other() -> None:
    """`--json --csv` is a usage error (exit 2) for the verbs that take both."""
    from typer.testing import CliRunner

    runner = CliRunner()
    codes = [
        runner.invoke(app, args).exit_code
        for args in (
            ["query", "SELECT 1", "--json", "--csv"],
            ["status", "--json", "--csv"],
            ["dlq", "list", "--json", "--csv"],
        )
    ]
    assert [2, 2, 2] == codes


def test_log_format_json_makes_every_log_line_json(tmp_path: Path) -> None:
    """`log_format: json` (here TIDELAKE_LOG_FORMAT): the info line `table pause` logs is one
    JSON object on stderr; stdout keeps the verb's own message."""
    import orjson

    hoodie = tmp_path / "lake" / "shop" / "orders" / ".hoodie"
    hoodie.mkdir(parents=True)
    (hoodie / "hoodie.properties").write_text("hoodie.table.name=shop_orders\n")
    env = {"PATH": "/usr/bin:/bin", "TIDELAKE_HOME": str(tmp_path), "TIDELAKE_LOG_FORMAT": "json"}
    proc = _tidelake("table", "pause", "shop.orders", env=env)
    assert 0 == proc.returncode, proc.stderr
    records = [orjson.loads(line) for line in proc.stderr.splitlines()]
    expected = [("table control requested", "info", "pause", "shop.orders")]
    assert expected == [(r["event"], r["level"], r["action"], r["table"]) for r in records]
    assert proc.stdout.startswith("pause of shop.orders requested at")


def test_demo_without_fsync_is_for_the_nats_bus_only() -> None:
    """`demo --no-fsync` changes the embedded nats-server's sync policy: with a database
    source or Kafka in front it is a usage error (exit 2)."""
    from typer.testing import CliRunner

    runner = CliRunner()
    results = [
        runner.invoke(app, ["demo", "--no-fsync", *extra])
        for extra in (["--kafka"], ["--bus", "kafka"], ["--source", "mariadb"])
    ]
    assert [(2, True)] * 3 == [
        (r.exit_code, "--no-fsync runs with the workload on a NATS bus only" in r.output)
        for r in results
    ]
