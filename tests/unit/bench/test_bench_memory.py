"""CPU seconds of processes read from ``/proc``, and which ingest variants build a base."""

import os
from pathlib import Path

from tidelake_bench.ingest import fixes_layout
from tidelake_bench.memory import cpu_seconds


def _stat(proc: Path, pid: int, comm: str, *ticks: int) -> None:
    """``ticks``: utime, stime, and optionally cutime, cstime (children waited for)."""
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime
    # stime cutime cstime priority nice
    times = [*map(str, ticks), *["0"] * (4 - len(ticks))]
    fields = ["S", "1", "1", "1", "0", "-1", "0", "10", "0", "0", "0", *times, "20", "0"]
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "stat").write_text(f"{pid} ({comm}) {' '.join(fields)}\n")


def test_cpu_seconds_add_user_and_system_time_of_every_process(tmp_path: Path) -> None:
    """utime + stime in clock ticks, plus the children that ended (cutime + cstime); a
    command name with spaces and parentheses is skipped over; a process that is gone counts
    nothing."""
    tick = os.sysconf("SC_CLK_TCK")
    _stat(tmp_path, 10, "python3", 3 * tick, tick)
    _stat(tmp_path, 11, "a (b) c", tick // 2, tick // 2)
    assert 5.0 == cpu_seconds([10, 11, 12], proc=tmp_path)
    _stat(tmp_path, 13, "java", tick, 0, 2 * tick, tick)
    assert 9.0 == cpu_seconds([10, 11, 13], proc=tmp_path)


def test_a_variant_changing_the_layout_gets_a_base_of_its_own() -> None:
    """Table type and index type are fixed by a table's first write; write options are not."""
    assert fixes_layout({"TIDELAKE_LAKE__TABLE_TYPE": "MERGE_ON_READ"})
    assert fixes_layout({"hoodie.index.type": "BUCKET", "hoodie.bucket.index.num.buckets": "8"})
    assert not fixes_layout({"hoodie.clean.max.commits": "10"})
