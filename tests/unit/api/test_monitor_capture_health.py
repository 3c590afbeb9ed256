"""The capture's health in ``status`` (api/monitor.py), ``tidelake status`` (cli/operate.py)
and serve's /metrics (api/metrics.py): lag, retained WAL, snapshot progress, skipped tables
from the capture's heartbeat (issue 22)."""

from __future__ import annotations

import io
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from tidelake.api.monitor import capture_problems, capture_status
from tidelake.cli.operate import render_capture
from tidelake.runtime.live_metrics import capture_health_families

NOW = 1_795_542_957_298


def _record(**lag: Any) -> dict[str, Any]:
    """A capture heartbeat as capture/runner.py writes it."""
    return {
        "stage": "capture",
        "state": "running",
        "updated_at_ms": NOW,
        "source": "postgres",
        "phase": "streaming",
        "lag": {"bytes": 3 * 1024**2, "retained_wal_bytes": 5 * 1024**3, "seconds": 0.0,
                "gtid_behind": None, "wal_status": "reserved", "safe_wal_size": None,
                "at_ms": NOW, **lag},
        "snapshot": {"tables": {"shop.big": {"state": "running", "rows_done": 250,
                                             "rows_total": 1000, "chunks_done": 3,
                                             "started_ms": NOW - 60_000,
                                             "updated_ms": NOW - 1_000}}},
        "skipped": {"shop.nokey": "no primary key"},
    }  # fmt: skip


def _samples(info: dict[str, Any] | None, prefix: str = "tidelake_capture") -> dict[str, float]:
    class _C:
        def collect(self) -> Any:
            yield from capture_health_families(prefix, info)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_C())  # type: ignore[arg-type]
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


def test_status_holds_the_captures_lag_snapshots_and_skipped_tables() -> None:
    """``/api/status``'s ``capture`` section: source, phase, every lag value, the snapshot
    table and the skipped reason; None when no capture of ours wrote a heartbeat."""
    status = capture_status(_record())
    assert status is not None
    assert ("postgres", "streaming") == (status["source"], status["phase"])
    assert (3 * 1024**2, 5 * 1024**3, 0.0, "reserved") == (
        status["lag"]["bytes"],
        status["lag"]["retained_wal_bytes"],
        status["lag"]["seconds"],
        status["lag"]["wal_status"],
    )
    assert 250 == status["snapshot"]["tables"]["shop.big"]["rows_done"]
    assert {"shop.nokey": "no primary key"} == status["skipped"]
    assert capture_status(None) is None
    assert [] == capture_problems(status)


def test_a_slot_losing_wal_and_a_failed_snapshot_are_problems() -> None:
    """wal_status ``lost``/``unreserved`` (pg_replication_slots) and a failed snapshot are
    listed among the pipeline's problems."""
    record = _record(wal_status="lost")
    record["snapshot"]["tables"]["shop.big"]["state"] = "failed"
    problems = capture_problems(capture_status(record))
    assert [
        "the capture's replication slot lost WAL it needs (wal_status lost)",
        "the snapshot of shop.big failed",
    ] == problems
    unreserved = capture_problems(capture_status(_record(wal_status="unreserved")))
    assert ["the server will remove WAL the capture's slot needs (wal_status unreserved)"] == (
        unreserved
    )


def test_the_cli_prints_the_lag_line_snapshots_and_skipped_tables() -> None:
    """``tidelake status`` prints the capture's lag with units, the snapshot's progress and
    the skipped table with its reason."""
    buf = io.StringIO()
    out = Console(file=buf, force_terminal=False, width=200, color_system=None)
    status = capture_status(_record())
    assert status is not None
    render_capture(status, out)
    text = buf.getvalue()
    assert "capture (postgres, streaming): behind 0.0 s · slot lag 3.0 MiB" in text
    assert "retained WAL 5.0 GiB (reserved)" in text
    line = next(x for x in text.splitlines() if x.startswith("shop.big"))
    assert ["shop.big", "running", "250", "1,000", "25", "%", "3"] == line.split()[:7]
    assert "skipped shop.nokey: no primary key" in text


def test_a_failed_probe_is_printed_as_unknown_lag() -> None:
    """A probe error (the source is down) reads "lag unknown" with the error, no numbers."""
    buf = io.StringIO()
    out = Console(file=buf, force_terminal=False, width=200, color_system=None)
    status = capture_status(_record(bytes=None, error="connection refused"))
    assert status is not None
    render_capture(status, out)
    assert "lag unknown connection refused" in buf.getvalue()


def test_metrics_follow_the_source_kind_and_every_family_is_always_there() -> None:
    """PostgreSQL fills the slot families, MySQL the binlog one; per-table snapshot gauges
    and state counts; with no capture every family is there without samples."""
    pg = _samples(_record())
    assert pg["tidelake_capture_slot_lag_bytes"] == 3 * 1024**2
    assert pg["tidelake_capture_retained_wal_bytes"] == 5 * 1024**3
    assert pg['tidelake_capture_slot_wal_status{status="reserved"}'] == 1
    assert "tidelake_capture_binlog_lag_bytes" not in pg
    assert pg['tidelake_capture_snapshot_rows_done{table="shop.big"}'] == 250
    assert pg['tidelake_capture_snapshot_running{table="shop.big"}'] == 1
    assert pg['tidelake_capture_snapshot_tables{state="running"}'] == 1
    assert pg['tidelake_capture_snapshot_progress_timestamp_seconds{table="shop.big"}'] == (
        (NOW - 1_000) / 1000
    )
    assert pg["tidelake_capture_skipped_tables"] == 1
    assert pg["tidelake_capture_lag_probe_ok"] == 1

    mysql = _samples({**_record(gtid_behind=7), "source": "mysql"}, "tidelake_capturer")
    assert mysql["tidelake_capturer_binlog_lag_bytes"] == 3 * 1024**2
    assert mysql["tidelake_capturer_gtid_transactions_behind"] == 7
    assert "tidelake_capturer_slot_lag_bytes" not in mysql

    failed = _samples(_record(bytes=None, retained_wal_bytes=None, error="down"))
    assert failed["tidelake_capture_lag_probe_ok"] == 0
    assert "tidelake_capture_slot_lag_bytes" not in failed

    registry_text = generate_latest(_registry_of(None)).decode()
    assert "# TYPE tidelake_capture_slot_lag_bytes gauge" in registry_text
    assert "\ntidelake_capture_" not in registry_text  # no samples without a capture


def _registry_of(info: dict[str, Any] | None) -> CollectorRegistry:
    class _C:
        def collect(self) -> Any:
            yield from capture_health_families("tidelake_capture", info)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_C())  # type: ignore[arg-type]
    return registry
