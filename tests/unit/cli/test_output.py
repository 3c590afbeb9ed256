"""How the CLI prints for a terminal, a pipe and a machine (cli/output.py, render_status)."""

from __future__ import annotations

import datetime as dt
import decimal
import io
from typing import Any

import orjson
import pytest
from rich.console import Console

from tidelake.cli.operate import render_status
from tidelake.cli.output import Column, abbreviate, print_csv, print_json, print_table

LONG = "refused:" + " the column amount of shop.orders does not fit DECIMAL(10,2)" * 3


def _console(*, terminal: bool, width: int = 80) -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, force_terminal=terminal, width=width, color_system=None), buf


def _status(table: str = "shop.orders") -> dict[str, Any]:
    """A ``/api/status`` document with one table, one error and one process."""
    return {
        "state": "healthy",
        "now_ms": 1_795_542_957_298,
        "problems": [],
        "warnings": [],
        "processes": {
            "stager": {
                "up": True,
                "state": "running",
                "heartbeat_age_s": 0.4,
                "pid": 4091,
                "host": "vm",
            },
        },
        "bus": {
            "up": True,
            "stream": {"name": "TIDELAKE", "messages": 50_000, "last_seq": 50_000},
            "consumer": {"pending": 0, "ack_pending": 0},
            "dlq": {"messages": 0},
        },
        "stage": {
            "batches": 26,
            "received": 50_000,
            "staged": 50_000,
            "dead_lettered": 0,
            "skipped": 0,
        },
        "tables": [
            {
                "table": table,
                "state": "fresh",
                "freshness_s": 1.25,
                "lag_s": 0.5,
                "checkpoint_seq": 50_000,
                "stream_last_seq": 50_000,
                "commits": 12,
                "upserts": 3_670,
                "deletes": 2_876,
                "skipped_duplicates": 1,
                "skipped_stale": 2,
                "last_commit_ms": 1_795_542_958_955,
            },
        ],
        "errors": [{"source": "ingest", "table": table, "message": LONG}],
    }


def test_a_pipe_gets_plain_aligned_text_with_every_value_whole() -> None:
    """Not a terminal: no box drawing, a header line, values padded, nothing cut or wrapped
    although the lines are wider than the console's 80 columns."""
    out, buf = _console(terminal=False)
    rows = [["1", "short"], ["22", LONG]]
    print_table(out, [Column("seq", "right"), Column("reason")], rows)
    expected = ["seq  reason", "  1  short", f" 22  {LONG}"]
    assert expected == buf.getvalue().splitlines()


def test_a_narrow_terminal_gets_one_block_per_row_with_nothing_cut() -> None:
    """A table wider than the terminal becomes blocks: the first cell, then name-value pairs
    filled into 80 columns; no line is wider and no value loses characters."""
    out, buf = _console(terminal=True)
    columns = [Column("id", ident=True), *(Column(f"column_{i}") for i in range(8))]
    rows = [["7", *(f"value_{i}_0123456789" for i in range(8))]]
    print_table(out, columns, rows)
    lines = buf.getvalue().splitlines()
    assert "id 7" == lines[0]
    assert [] == [line for line in lines if len(line) > 80]
    text = " ".join(lines)
    assert [] == [i for i in range(8) if f"column_{i} value_{i}_0123456789" not in text]
    assert "…" not in text


def test_a_table_that_fits_stays_a_table_and_wide_folds_instead_of_cutting() -> None:
    """On a terminal a table that fits is drawn as one; ``wide`` draws it even when it does
    not fit, folding cells: every character of a long cell is still there."""
    out, buf = _console(terminal=True, width=40)
    print_table(out, [Column("seq"), Column("reason")], [["1", LONG]], wide=True)
    drawn = buf.getvalue()
    assert "┃" in drawn
    cells = "".join(line.strip("│ ").split("│")[-1].strip() for line in drawn.splitlines())
    assert LONG.replace(" ", "") in cells.replace(" ", "")


@pytest.mark.parametrize("terminal", [True, False])
def test_status_at_80_columns_cuts_nothing(terminal: bool) -> None:
    """``tidelake status`` at 80 columns, on a terminal or piped: no ``…``, the long table
    name and the whole error reason are there; on a terminal no line passes 80 columns."""
    table = "inventory_database.warehouse_stock_movements"
    out, buf = _console(terminal=terminal)
    render_status(_status(table), out)
    text = buf.getvalue()
    assert "…" not in text
    assert table in text
    assert LONG in " ".join(text.split())
    if terminal:
        assert [] == [line for line in text.splitlines() if len(line) > 80]


def test_status_piped_has_one_line_per_table_with_every_field() -> None:
    """Piped, the tables table is one plain line per table: grep-able, values whole."""
    out, buf = _console(terminal=False)
    render_status(_status(), out)
    line = next(x for x in buf.getvalue().splitlines() if x.startswith("shop.orders"))
    expected = ["shop.orders", "fresh", "1.2", "s", "0.5", "s", "50,000", "50,000", "12",
                "3,670", "2,876", "3", "2026-11-24", "17:55:58"]  # fmt: skip
    assert expected == line.split()


def test_abbreviate_keeps_short_text_and_cuts_long_text_with_an_ellipsis() -> None:
    """A reason on one line, cut to the width with a trailing ``…`` only when longer."""
    expected = ("short reason", "a" * 9 + "…")
    assert expected == (abbreviate("short\n reason"), abbreviate("a" * 20, 10))


def test_json_keeps_decimals_exact_and_bytes_as_hex(capsys: pytest.CaptureFixture[str]) -> None:
    """A DECIMAL prints as its exact text, bytes as ``0x…``, a datetime in ISO 8601."""
    when = dt.datetime(2026, 11, 24, 17, 55, 21, tzinfo=dt.UTC)
    print_json({"amount": decimal.Decimal("12345678901234567890.12"), "b": b"\x01\xff",
                "at": when})  # fmt: skip
    expected = {"amount": "12345678901234567890.12", "b": "0x01ff",
                "at": "2026-11-24T17:55:21+00:00"}  # fmt: skip
    assert expected == orjson.loads(capsys.readouterr().out)


def test_csv_has_a_header_and_null_as_an_empty_field(capsys: pytest.CaptureFixture[str]) -> None:
    """RFC 4180: a comma or quote in a value is quoted; NULL is an empty field."""
    print_csv(["id", "note", "amount"], [(1, 'a, "b"', None), (2, "x", decimal.Decimal("1.50"))])
    expected = 'id,note,amount\n1,"a, ""b""",\n2,x,1.50\n'
    assert expected == capsys.readouterr().out
