"""How CLI verbs print: for a person at a terminal, for a pipe, for a machine.

- A terminal gets rich tables sized to its width: cells fold (wrap inside the cell) rather
  than being cut with ``…``, and only identifier columns (sequences, ids) never wrap.
- A pipe or a file (stdout not a terminal) gets plain text: no box drawing, no colour, no
  line broken at 80 columns, no cell cut, columns separated by two spaces, so ``grep``,
  ``awk`` and ``cut`` see every value whole.
- ``--json`` writes one JSON document per line, ``--csv`` RFC 4180 CSV with a header row.
"""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

#: What a cell shows for SQL NULL / a missing value.
NULL = "NULL"
#: At most this many characters of a free-text cell (a reason) in the default terminal view.
SHORT_TEXT = 60


def make_console(*, stderr: bool = False) -> Console:
    """A console that, when not writing to a terminal, never breaks a line by itself."""
    console = Console(stderr=stderr)
    if not console.is_terminal:
        console.soft_wrap = True
    return console


def is_plain(out: Console) -> bool:
    """True when ``out`` is not a terminal: print plain, whole lines."""
    return not out.is_terminal


def _json_default(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):
        return str(value)  # exact: a float would round a DECIMAL(38, 18)
    if isinstance(value, bytes | bytearray | memoryview):
        return "0x" + bytes(value).hex()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)


def to_json(data: Any) -> str:
    """``data`` as one line of JSON; DECIMAL as an exact string, bytes as ``0x…`` hex."""
    return orjson.dumps(data, default=_json_default, option=orjson.OPT_NON_STR_KEYS).decode()


def print_json(data: Any) -> None:
    """Write ``data`` as one JSON line and flush, so a pipe sees it at once."""
    sys.stdout.write(to_json(data) + "\n")
    sys.stdout.flush()


def cell(value: Any) -> str:
    """A value as text: NULL for None, ``0x…`` for bytes, ISO 8601 for times."""
    if value is None:
        return NULL
    if isinstance(value, bytes | bytearray | memoryview):
        return "0x" + bytes(value).hex()
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat(sep=" ") if isinstance(value, dt.datetime) else value.isoformat()
    if isinstance(value, dict | list):
        return to_json(value)
    return str(value)


def _csv_cell(value: Any) -> str:
    return "" if value is None else cell(value)


def print_csv(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """CSV with a header row on stdout; NULL is an empty field."""
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_csv_cell(v) for v in row])
    sys.stdout.flush()


def print_csv_records(records: Sequence[dict[str, Any]], columns: Sequence[str] = ()) -> None:
    """CSV of dicts: ``columns`` first, then every other key in the order first seen."""
    names = list(columns)
    for record in records:
        names.extend(k for k in record if k not in names)
    print_csv(names, ([r.get(n) for n in names] for r in records))


def abbreviate(text: str, width: int = SHORT_TEXT) -> str:
    """``text`` on one line, cut to ``width`` characters with ``…`` when longer."""
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= width else one_line[: width - 1] + "…"


@dataclass(frozen=True)
class Column:
    """A column of :func:`print_table`: ``ident`` columns never wrap (ids, sequences)."""

    name: str
    justify: str = "left"
    ident: bool = False


def print_table(
    out: Console,
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    title: str | None = None,
    *,
    wide: bool = False,
    label_first: bool = True,
) -> None:
    """A table: aligned plain text when ``out`` is not a terminal; on a terminal a rich table
    when it fits the width (or ``wide``: cells then fold, never cut), else one block per row
    (:func:`_stacked`) rather than columns a few characters wide.

    Cells may hold rich markup (``[red]down[/]``); the plain forms print their text."""
    if is_plain(out):
        _plain_table(out, columns, rows, title)
        return
    if not wide and _natural_width(columns, rows) > out.width:
        _stacked(out, columns, rows, title, label_first)
        return
    table = Table(title=title, title_justify="left")
    for col in columns:
        table.add_column(
            col.name,
            justify=col.justify,  # type: ignore[arg-type]
            no_wrap=col.ident,
            overflow="fold",
            min_width=len(col.name) if col.ident else None,
        )
    for row in rows:
        table.add_row(*row)
    out.print(table)


def _plain(markup: str) -> str:
    from rich.text import Text

    return Text.from_markup(markup).plain


def _natural_width(columns: Sequence[Column], rows: Sequence[Sequence[str]]) -> int:
    """Characters of a rich table whose every cell is on one line (borders, padding)."""
    widths = [len(c.name) for c in columns]
    for row in rows:
        for i, value in enumerate(row):
            widths[i] = max(widths[i], len(_plain(value)))
    return sum(widths) + 3 * len(columns) + 1


def _stacked(
    out: Console,
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    title: str | None,
    label_first: bool,
) -> None:
    """Each row as a block: its first cell as a heading (after its column's name when
    ``label_first``), then ``name value`` pairs filled
    into lines of the console's width (a pair longer than a line folds on its own line)."""
    from rich.text import Text

    if title:
        out.print(Text(title, style="italic"))
    for row in rows:
        heading = Text.from_markup(row[0], style="bold")
        if label_first:
            heading = Text.assemble((columns[0].name, "dim"), " ", heading)
        out.print(heading, overflow="fold")
        line = Text("  ")
        for col, value in zip(columns[1:], row[1:], strict=True):
            pair = Text.assemble((col.name, "dim"), " ", Text.from_markup(value))
            if len(line) > 2 and len(line) + 2 + len(pair) > out.width:
                out.print(line, overflow="fold")
                line = Text("  ")
            if len(line) > 2:
                line.append("  ")
            line.append_text(pair)
        if len(line) > 2:
            out.print(line, overflow="fold")


def _plain_table(
    out: Console, columns: Sequence[Column], rows: Sequence[Sequence[str]], title: str | None
) -> None:
    texts = [[_plain(c) for c in row] for row in rows]
    header = [c.name for c in columns]
    widths = [max([len(header[i]), *(len(r[i]) for r in texts)]) for i in range(len(columns))]

    def line(cells: Sequence[str]) -> str:
        parts = [
            c.rjust(w) if col.justify == "right" else c.ljust(w)
            for c, w, col in zip(cells, widths, columns, strict=True)
        ]
        return "  ".join(parts).rstrip()

    lines = ([f"{title}:"] if title else []) + [line(header)] + [line(r) for r in texts]
    for text in lines:
        out.print(text, markup=False, highlight=False, soft_wrap=True, emoji=False)
