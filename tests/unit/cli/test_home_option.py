"""``--home`` is honoured by every verb, typed before the verb or after it, and reaches the
config as ``TIDELAKE_HOME`` (cli/__init__.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tidelake.cli import _hoist_home


@pytest.mark.parametrize(
    ("typed", "parsed"),
    [
        (["status", "--home", "/h", "--json"], ["--home", "/h", "status", "--json"]),
        (["dlq", "list", "--home=/h"], ["--home", "/h", "dlq", "list"]),
        (["--home", "/h", "status"], ["--home", "/h", "status"]),
        (["table", "pause", "db.t", "--home", "/h"], ["--home", "/h", "table", "pause", "db.t"]),
        # the verbs whose own --home is their data directory keep it
        (["demo", "--home", "/d"], ["demo", "--home", "/d"]),
        (["bench", "--home=/b"], ["bench", "--home=/b"]),
        # submit's job arguments after -- are not tidelake's
        (["submit", "--", "ingest", "--home", "/x"], ["submit", "--", "ingest", "--home", "/x"]),
        ([], []),
        (["--version"], ["--version"]),
    ],
)
def test_a_home_typed_after_the_verb_is_parsed_as_the_global_option(
    typed: list[str], parsed: list[str]
) -> None:
    """The argument list click sees: --home moved before the verb where it is global."""
    assert parsed == _hoist_home(typed)


def test_home_after_the_verb_reaches_the_config(tmp_path: Path) -> None:
    """``tidelake config check --home DIR`` prints DIR as the effective home, over a
    TIDELAKE_HOME in the environment; nothing is created there."""
    env = {**os.environ, "TIDELAKE_HOME": str(tmp_path / "env")}
    env.pop("TIDELAKE_CONFIG", None)
    out = subprocess.run(
        [sys.executable, "-m", "tidelake.cli", "config", "check", "--home", str(tmp_path / "flag")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    assert f'"home": "{tmp_path / "flag"}"' in out.stdout
    assert [] == list(tmp_path.iterdir())
