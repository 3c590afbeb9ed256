"""Children of a self-contained run use the config written for them, not the caller's
TIDELAKE_… overrides; `tidelake run` passes the operator's settings and secrets on."""

from __future__ import annotations

import pytest

from tidelake.pipeline.processes import child_environ


def test_a_self_contained_run_drops_the_callers_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDELAKE_HOME", "/elsewhere")
    monkeypatch.setenv("PATH_FOR_TEST", "kept")
    env = child_environ({"TIDELAKE_CONFIG": "/demo/config.yaml"}, inherit_settings=False)
    assert "TIDELAKE_HOME" not in env
    assert "/demo/config.yaml" == env["TIDELAKE_CONFIG"]
    assert "kept" == env["PATH_FOR_TEST"]


def test_tidelake_run_passes_settings_on_and_its_own_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDELAKE_BUS__PASSWORD", "from-the-operator")
    monkeypatch.setenv("TIDELAKE_HOME", "/elsewhere")
    env = child_environ({"TIDELAKE_HOME": "/resolved"}, inherit_settings=True)
    assert "from-the-operator" == env["TIDELAKE_BUS__PASSWORD"]
    assert "/resolved" == env["TIDELAKE_HOME"]
