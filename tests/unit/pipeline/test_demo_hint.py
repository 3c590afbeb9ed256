"""The demo's closing "Query it" hint can be copied whole at any terminal width."""

from __future__ import annotations

import io

from rich.console import Console

from tidelake.pipeline.demo import DemoResult, render_summary

SQL = "'SELECT status, count(*) FROM shop.orders GROUP BY status'"


def test_query_hint_is_never_broken_inside_the_sql() -> None:
    """At 40 columns the SQL still sits whole on a line of its own, after the command line
    (which ends in a shell continuation) naming the demo's config."""
    buf = io.StringIO()
    out = Console(file=buf, width=40, force_terminal=True, color_system=None)
    result = DemoResult(tables=1, lake="/tmp/a demo/lake", per_table={})
    render_summary(result, out)
    lines = buf.getvalue().splitlines()
    sql_at = lines.index(f"    {SQL}")
    expected = "  tidelake query --config '/tmp/a demo/config.yaml' \\"
    assert expected == lines[sql_at - 1]
