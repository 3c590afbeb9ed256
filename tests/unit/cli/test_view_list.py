"""``tidelake view list``: each view's tables, join and key as the operator wrote them, and
exit 1 with the reason for a definition that cannot be kept (cli/view.py)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from tidelake.cli import app

CONFIG = """
views:
  customer_activity:
    sql: >
      SELECT c.id AS customer_id, c.name, COUNT(o.id) AS orders FROM shop.customers c
      LEFT JOIN shop.orders o ON o.customer_id = c.id GROUP BY c.id, c.name
  per_status:
    sql: SELECT status, COUNT(*) AS n FROM shop.orders GROUP BY status
  everything:
    sql: SELECT o.status, COUNT(*) AS n FROM shop.orders o FULL JOIN shop.items i
      ON o.id = i.order_id GROUP BY o.status
"""


def test_view_list_names_tables_join_and_key(tmp_path: Path) -> None:
    config = tmp_path / "tidelake.yaml"
    config.write_text(CONFIG)
    result = CliRunner().invoke(app, ["view", "list", "--config", str(config), "--json"])
    assert result.exit_code == 1, result.output
    rows = {r["view"]: r for r in json.loads(result.output)}
    joined = rows["customer_activity"]
    assert joined["tables"] == ["shop.customers", "shop.orders"]
    assert joined["join"] == "left"
    assert joined["key"] == ["customer_id", "name"]
    assert rows["per_status"]["tables"] == ["shop.orders"]
    assert rows["per_status"]["join"] is None
    assert "FULL join is not maintained" in rows["everything"]["error"]
