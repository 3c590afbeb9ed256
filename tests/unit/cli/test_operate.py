"""Operator verbs' printing: ``dlq list`` reasons (cut with a note, --wide, piped, --csv) and
``status --csv``, with the bus and the monitor replaced by fixed documents."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from tidelake.cli import app, operate

REASON = "decode_error: " + "the payload is not canal-json: unexpected token at offset 4711 " * 2
PAGE = {
    "messages": [
        {"dlq_seq": 7, "time_ms": 1_795_542_957_298, "original_subject": "tidelake.cdc.shop.orders",
         "original_seq": 4711, "deliveries": 1, "reason": REASON.strip()},
    ],
    "next_seq": None,
}  # fmt: skip


@pytest.fixture
def dlq_page(monkeypatch: pytest.MonkeyPatch) -> None:
    """``dlq list`` answers ``PAGE`` without a bus."""
    monkeypatch.setattr(operate, "_bus_call", lambda cfg, fn: PAGE)


def _terminal(monkeypatch: pytest.MonkeyPatch, width: int = 100) -> io.StringIO:
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=width, color_system=None)
    monkeypatch.setattr(operate, "console", console)
    return buf


def test_dlq_list_on_a_terminal_cuts_reasons_and_says_wide_shows_them(
    dlq_page: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Default terminal view: the reason's first 60 characters end in ``…`` and a line says
    how to see it whole."""
    buf = _terminal(monkeypatch)
    result = CliRunner().invoke(app, ["dlq", "list"])
    assert 0 == result.exit_code, result.output
    text = buf.getvalue()
    assert REASON.strip()[:59] + "…" in text
    assert "reasons cut to their start: --wide (or --json) shows them whole" in text


def test_dlq_list_wide_shows_the_whole_reason(
    dlq_page: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--wide``: every character of the reason is in the table (folded over lines)."""
    buf = _terminal(monkeypatch)
    result = CliRunner().invoke(app, ["dlq", "list", "--wide"])
    assert 0 == result.exit_code, result.output
    cells = "".join(line.split("│")[-2] for line in buf.getvalue().splitlines() if "│" in line)
    assert REASON.strip().replace(" ", "") in cells.replace(" ", "")
    assert "…" not in buf.getvalue()


def test_dlq_list_piped_and_csv_print_the_whole_reason(dlq_page: None) -> None:
    """Piped: one plain line per dead letter with the whole reason; ``--csv``: the same
    fields under a header row."""
    runner = CliRunner()
    piped = runner.invoke(app, ["dlq", "list"]).output
    line = next(x for x in piped.splitlines() if x.lstrip().startswith("7 "))
    assert line.endswith(REASON.strip())
    as_csv = runner.invoke(app, ["dlq", "list", "--csv"]).output.splitlines()
    expected = [
        "dlq_seq,time_ms,original_subject,original_seq,deliveries,reason",
        f"7,1795542957298,tidelake.cdc.shop.orders,4711,1,{REASON.strip()}",
    ]
    assert expected == as_csv


def test_status_csv_has_one_row_per_table_with_its_scalar_fields(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``status --csv``: a header of the tables' fields, one row per table; the recent
    commits (a list) are left to ``--json``."""
    import tidelake.api.monitor as monitor

    class FixedMonitor:
        def __init__(self, cfg: Any, stale_after_s: float) -> None:
            pass

        async def snapshot(self) -> None:
            return None

        async def close(self) -> None:
            return None

    tables = [
        {"table": "shop.orders", "state": "fresh", "lag_s": 0.5, "recent_commits": [{"x": 1}]},
        {"table": "shop.items", "state": "stale", "lag_s": None, "recent_commits": []},
    ]
    monkeypatch.setattr(monitor, "Monitor", FixedMonitor)
    monkeypatch.setattr(monitor, "status_json", lambda snap: {"state": "x", "tables": tables})
    result = CliRunner().invoke(app, ["status", "--csv"])
    assert 0 == result.exit_code, result.output
    expected = ["table,state,lag_s", "shop.orders,fresh,0.5", "shop.items,stale,"]
    assert expected == result.output.splitlines()
