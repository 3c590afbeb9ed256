"""The scale-out part: per-worker rounds and memory, its numbers and report rows."""

from __future__ import annotations

from pathlib import Path

import yaml

from tidelake.lake.ledger import CommitRecord, Ledger
from tidelake.pipeline.demo import DemoResult
from tidelake_bench.memory import PeakRss
from tidelake_bench.report import BenchResult, render_markdown
from tidelake_bench.runner import FULL, PARTS, QUICK
from tidelake_bench.workers import CpuTotal, Sampled, WorkerRun, WorkersResult


def _worker_config(tmp_path: Path, name: str) -> Path:
    state = tmp_path / name / "state"
    path = tmp_path / name / "config.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump({"home": str(tmp_path), "lake": {"state_dir": str(state)}}))
    ledger = Ledger(state)
    ledger.state_dir.mkdir(parents=True, exist_ok=True)
    for seq, end in ((2, 10_000), (40, 20_000), (90, 30_000)):
        ledger.append_commit(
            CommitRecord(
                table=f"shop.{name}", seq=seq, seq_from=0 if seq == 2 else 1,
                committed_at_ms=end, duration_ms=2_000,
            )
        )  # fmt: skip
    return path


def _sampler(mib: float) -> PeakRss:
    """A sampler that saw ``mib`` at its peak (no process sampled)."""
    sampler = PeakRss(lambda: [])
    sampler.peak_sum_kib = int(mib * 1024)
    return sampler


def test_each_worker_counts_its_own_rounds_and_memory(tmp_path: Path) -> None:
    """Two workers' commit logs: each has one creating round (left out) and two rounds of
    rows; the run adds them up and keeps each worker's peak memory."""
    run = WorkerRun(workers=2)
    spans: list[float] = []
    for name, mib in (("w1", 4_000.0), ("w2", 3_500.0)):
        sampled = Sampled(_sampler(300.0), _sampler(mib), CpuTotal(list), CpuTotal(list))
        sampled.ingest_cpu.seconds = 30.0
        spans += run.record_worker(name, _worker_config(tmp_path, name), sampled, 25)
    run.finish(spans)
    assert 4 == run.rounds
    assert 2.0 == run.round_s_p50
    assert [("w1", 25, 3, 2, 4_000.0), ("w2", 25, 3, 2, 3_500.0)] == [
        (w["worker"], w["tables"], w["commits"], w["rounds"], w["ingest_peak_rss_mib"])
        for w in run.per_worker
    ]
    assert [10.0, 10.0] == [w["ingest_cpu_s_per_commit"] for w in run.per_worker]


def test_a_run_missing_tables_is_an_error() -> None:
    """A lake whose verification reached fewer tables than the run had is not a result."""
    run = WorkerRun(workers=2)
    run.record_demo(DemoResult(tables=48, mismatches=0), tables=50)
    assert "2 of 50 tables were not verified" == run.error


def test_the_part_is_listed_sized_and_reported() -> None:
    """``workers`` is a part with quick and full sizes, and its numbers print as rows."""
    assert "workers" in PARTS
    assert (50, 100) == (QUICK.workers_tables, FULL.workers_tables)
    result = BenchResult(quick=True)
    result.numbers = {
        "workers_tables": 50,
        "workers1_freshness_p99_s": 30.5,
        "workers2_freshness_p99_s": 12.25,
        "workers2_mismatches": 0,
    }
    text = render_markdown(result)
    assert "| workers 1: freshness p99 s | 30.5 |" in text
    assert "| workers 2: freshness p99 s | 12.25 |" in text
    assert WorkersResult(50, 10.0, 60.0).run_of(2) is None
