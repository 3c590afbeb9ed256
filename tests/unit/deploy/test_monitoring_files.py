"""deploy/monitoring/: the Prometheus rules, their unit tests, the scrape config and the
Grafana dashboard are valid for promtool, every alert fires in a test, every runbook link
lands on a section of docs/operations.md, and every metric they name is one tidelake exports
(docs/metrics.md).

promtool is built from the Go module proxy into .cache/bin by scripts/gotools (scripts/setup).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
MONITORING = REPO / "deploy" / "monitoring"
RULES = MONITORING / "rules.yml"
RULE_TESTS = MONITORING / "rules.test.yml"
DASHBOARD = MONITORING / "grafana-dashboard.json"
PROMETHEUS = MONITORING / "prometheus.yml"
METRICS_DOC = REPO / "docs" / "metrics.md"
OPERATIONS_DOC = REPO / "docs" / "operations.md"

#: PromQL words that are not metric names.
KEYWORDS = frozenset(
    {"and", "or", "unless", "by", "without", "on", "ignoring", "bool", "offset", "inf", "nan"}
)
#: Metrics Prometheus itself attaches to every scrape.
PROMETHEUS_OWN = frozenset({"up", "scrape_duration_seconds", "scrape_samples_scraped"})
#: Grafana's variables, replaced by what they expand to before promtool parses a query.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$table": ".*"}


def promtool() -> Path:
    """The promtool scripts/gotools builds; a clear failure when it was not built."""
    path = Path(os.environ.get("TIDELAKE_GO_BIN", REPO / ".cache" / "bin")) / "promtool"
    if not os.access(path, os.X_OK):
        pytest.fail(
            f"{path} is missing: run scripts/gotools (builds promtool from the Go module "
            "proxy: github.com/prometheus/prometheus/cmd/promtool)"
        )
    return path


def run_promtool(*args: str, cwd: Path = MONITORING) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(promtool()), *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def rules() -> list[dict[str, Any]]:
    data = yaml.safe_load(RULES.read_text())
    return [rule for group in data["groups"] for rule in group["rules"]]


def dashboard_queries() -> list[tuple[str, str]]:
    """``(panel title, expr)`` of every query of the dashboard."""
    board = json.loads(DASHBOARD.read_text())
    return [
        (panel["title"], target["expr"])
        for panel in board["panels"]
        for target in panel.get("targets", [])
    ]


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (it parsed already: promtool)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for m in re.finditer(r"(?<![\w:.$])([a-zA-Z_:][\w:]*)(?![\w:])(?!\s*\()", text):
        if m.group(1).lower() not in KEYWORDS:
            names.add(m.group(1))
    return names


def documented_names() -> set[str]:
    """Every metric name docs/metrics.md shows in backticks."""
    return set(re.findall(r"`((?:tidelake|process|python)_[a-z_]+)`", METRICS_DOC.read_text()))


def exported(name: str, documented: set[str], recorded: set[str]) -> bool:
    base = re.sub(r"_(bucket|count|sum)$", "", name)
    return bool({name, base} & (documented | recorded | PROMETHEUS_OWN))


def anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    out = set()
    for heading in re.findall(r"^#+\s+(.+)$", markdown, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        out.add(slug)
    return out


def test_rules_pass_promtool_check() -> None:
    """`promtool check rules` accepts rules.yml (syntax, PromQL, templates)."""
    result = run_promtool("check", "rules", str(RULES))
    assert 0 == result.returncode, result.stdout + result.stderr


def test_every_alert_fires_in_promtool_rule_tests() -> None:
    """`promtool test rules` passes, and it fires every alert of rules.yml at least once."""
    result = run_promtool("test", "rules", RULE_TESTS.name)
    assert 0 == result.returncode, result.stdout + result.stderr
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fired = {
        case["alertname"]
        for test in tests
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert {r["alert"] for r in rules() if "alert" in r} == fired


def test_every_alert_has_a_runbook_section_in_operations() -> None:
    """Each alert says what it means and links to a section of docs/operations.md that exists."""
    sections = anchors(OPERATIONS_DOC.read_text())
    broken = []
    for rule in rules():
        if "alert" not in rule:
            continue
        notes = rule.get("annotations", {})
        path, _, anchor = notes.get("runbook", "").partition("#")
        if not notes.get("summary") or path != "docs/operations.md" or anchor not in sections:
            broken.append(rule["alert"])
    assert [] == broken


def test_prometheus_config_passes_promtool_check(tmp_path: Path) -> None:
    """`promtool check config` accepts prometheus.yml and the rules it loads (with the API
    token file it names, which an operator writes next to it)."""
    for name in (PROMETHEUS.name, RULES.name):
        (tmp_path / name).write_text((MONITORING / name).read_text())
    (tmp_path / "tidelake-api-token").write_text("token\n")
    result = run_promtool("check", "config", PROMETHEUS.name, cwd=tmp_path)
    assert 0 == result.returncode, result.stdout + result.stderr


def test_dashboard_is_valid_grafana_json() -> None:
    """The dashboard is JSON Grafana imports: a title, a uid, unique panel ids, panels with
    a grid position, every query against the dashboard's Prometheus data source."""
    board = json.loads(DASHBOARD.read_text())
    assert ("tidelake", "tidelake-pipeline") == (board["title"], board["uid"])
    ids = [p["id"] for p in board["panels"]]
    assert sorted(set(ids)) == sorted(ids)
    graphs = [p for p in board["panels"] if p["type"] != "row"]
    assert [] == [p["title"] for p in graphs if not p.get("targets") or "gridPos" not in p]
    sources = {
        t["datasource"]["uid"] for p in graphs for t in p["targets"] if "datasource" in t
    } | {p["datasource"]["uid"] for p in graphs}
    assert {"${datasource}"} == sources


def test_dashboard_covers_what_operators_watch() -> None:
    """Panels for freshness, throughput, commit duration, DLQ depth, paused tables,
    whether each process is up, and the capture's lag, retained WAL and snapshot progress."""
    exprs = " ".join(e for _, e in dashboard_queries())
    wanted = [
        "tidelake_table_freshness_seconds",
        "tidelake_ingest_events_applied_total",
        "tidelake:ingest_commit_duration_seconds:p99_5m",
        "tidelake_dlq_messages",
        "tidelake_table_paused",
        "tidelake_process_up",
        'up{job=~"tidelake.*"}',
        "tidelake_main_loop_age_seconds",
        "tidelake_capture_slot_lag_bytes",
        "tidelake_capture_retained_wal_bytes",
        "tidelake_capture_binlog_lag_bytes",
        "tidelake_capture_behind_seconds",
        "tidelake_capture_snapshot_rows_done",
    ]
    assert [] == [w for w in wanted if w not in exprs]


def test_every_dashboard_query_parses(tmp_path: Path) -> None:
    """Each panel's PromQL parses: promtool checks them as recording rules of a generated
    file (Grafana's variables replaced by what they expand to)."""
    generated = []
    for i, (_, expr) in enumerate(dashboard_queries()):
        for variable, value in GRAFANA_VARIABLES.items():
            expr = expr.replace(variable, value)
        generated.append({"record": f"dashboard:query_{i}", "expr": expr})
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": generated}]}))
    result = run_promtool("check", "rules", str(path))
    assert 0 == result.returncode, result.stdout + result.stderr


def test_every_metric_named_is_exported() -> None:
    """Every metric a rule or a panel selects is in docs/metrics.md (which a test holds to
    what the endpoints serve), a recording rule of rules.yml, or Prometheus's own `up`."""
    documented = documented_names()
    recorded = {r["record"] for r in rules() if "record" in r}
    exprs = [r["expr"] for r in rules()] + [e for _, e in dashboard_queries()]
    unknown = sorted(
        {n for e in exprs for n in metric_names(e) if not exported(n, documented, recorded)}
    )
    assert [] == unknown


def test_metric_names_reads_selectors_not_functions_or_labels() -> None:
    """The name extraction the test above relies on."""
    expr = (
        'sum by (le, table) (rate(tidelake_x_bucket{table=~"a.b"}[5m])) '
        "and on () tidelake:y:rate5m > 0 unless up == bool 1"
    )
    assert {"tidelake_x_bucket", "tidelake:y:rate5m", "up"} == metric_names(expr)
