"""Reading the machine and the tools' output: /proc files, nats bench output, timelines."""

from pathlib import Path

from tidelake_bench.ingest import completed_instants, instant_seconds
from tidelake_bench.machine import cpu_model, memory_gib
from tidelake_bench.memory import process_tree, status_kib
from tidelake_bench.stage import parse_nats_bench


def test_cpu_model_and_memory_come_from_proc_text() -> None:
    """The first model name; MemTotal in GiB."""
    cpuinfo = "processor\t: 0\nmodel name\t: Test CPU @ 2.50GHz\nprocessor\t: 1\n"
    assert "Test CPU @ 2.50GHz" == cpu_model(cpuinfo)
    assert 23.5 == memory_gib("MemTotal:       24641536 kB\nMemFree: 1 kB\n")


def test_status_fields_and_the_process_tree_from_a_proc_directory(tmp_path: Path) -> None:
    """VmRSS/VmHWM in kB, children from every thread's children list."""
    for pid, kids in ((10, "11 12"), (11, "13"), (12, ""), (13, "")):
        task = tmp_path / str(pid) / "task" / str(pid)
        task.mkdir(parents=True)
        (task / "children").write_text(kids)
        (tmp_path / str(pid) / "status").write_text(f"Name:\tx\nVmHWM:\t{pid}00 kB\nVmRSS:\t5 kB\n")
    assert 1000 == status_kib(10, "VmHWM", tmp_path)
    assert None is status_kib(99, "VmHWM", tmp_path)
    assert [10, 11, 12, 13] == sorted(process_tree(10, tmp_path))


def test_nats_bench_rate_from_csv_or_summary_line() -> None:
    """The CSV's MsgsPerSec; the summary line when there is no CSV."""
    csv_text = (
        "#RunID,ClientID,MsgCount,MsgBytes,MsgsPerSec,BytesPerSec,DurationSecs,AvgLatencyMicroSecs\n"
        "abc,S0,30000,3840000,34462,4411211.79,0.87,29.01\n"
    )
    assert 34462.0 == parse_nats_bench("", csv_text)
    summary = "NATS JetStream durable consumer (fetch) stats: 55,623 msgs/sec ~ 6.8 MiB/sec"
    assert 55623.0 == parse_nats_bench(summary, None)
    assert None is parse_nats_bench("nothing", None)


def test_completed_instants_are_read_from_hudi_1_timeline_names(tmp_path: Path) -> None:
    """``<requested>_<completed>.commit``, ordered by completion; requested/inflight ignored."""
    timeline = tmp_path / ".hoodie" / "timeline"
    timeline.mkdir(parents=True)
    for name in (
        "20260101000010000_20260101000012500.commit",
        "20260101000001000_20260101000003000.commit",
        "20260101000020000.commit.requested",
        "20260101000020000.inflight",
    ):
        (timeline / name).write_text("")
    instants = completed_instants(str(tmp_path))
    assert [("20260101000001000", "20260101000003000"),
            ("20260101000010000", "20260101000012500")] == instants  # fmt: skip
    assert 2.0 == instant_seconds("20260101000003000") - instant_seconds("20260101000001000")
