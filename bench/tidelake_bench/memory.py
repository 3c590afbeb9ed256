"""Peak memory of processes, from ``/proc``: resident set size sampled, and the kernel's own
high-water mark (``VmHWM``) of each process while it lives; and the CPU seconds they used."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType

#: Seconds between two samples.
SAMPLE_INTERVAL_S = 0.2


def status_kib(pid: int, field: str, proc: Path = Path("/proc")) -> int | None:
    """A ``kB`` field (``VmRSS``, ``VmHWM``) of ``/proc/<pid>/status``; None once it is gone."""
    try:
        text = (proc / str(pid) / "status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return None


def cpu_seconds(pids: Iterable[int], proc: Path = Path("/proc")) -> float:
    """User + system CPU seconds ``pids`` have used so far (``/proc/<pid>/stat``, every
    thread), with those of their children that ended and were waited for; a process that is
    gone counts 0. Given a whole process tree, every process is counted once: while it lives
    by itself, once ended in its parent's."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            stat = (proc / str(pid) / "stat").read_text()
        except OSError:
            continue
        # Fields after the command name (which may hold spaces): utime, stime, cutime and
        # cstime are the 14th to 17th fields of the line, the 12th to 15th after ``) ``.
        fields = stat.rsplit(")", 1)[1].split()
        total += sum(int(f) for f in fields[11:15])
    return total / tick


def children(pid: int, proc: Path = Path("/proc")) -> list[int]:
    """Direct children of ``pid`` (every thread's ``children`` list)."""
    out: list[int] = []
    try:
        tasks = list((proc / str(pid) / "task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            out.extend(int(c) for c in (task / "children").read_text().split())
        except OSError:
            continue
    return out


def command_name(pid: int, proc: Path = Path("/proc")) -> str | None:
    """The executable name of ``pid`` (``/proc/<pid>/comm``); None once it is gone."""
    try:
        return (proc / str(pid) / "comm").read_text().strip()
    except OSError:
        return None


def process_tree(pid: int, proc: Path = Path("/proc")) -> list[int]:
    """``pid`` and all its descendants."""
    seen: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.append(p)
        todo.extend(children(p, proc))
    return seen


def mib(kib: int | None) -> float | None:
    return None if kib is None else round(kib / 1024, 1)


class PeakRss:
    """Samples the RSS of a set of processes in a thread; keeps the peak of their sum and
    the peak ``VmHWM`` of each process (exact, whatever the sampling missed)."""

    def __init__(
        self, pids: Callable[[], Iterable[int]], interval_s: float = SAMPLE_INTERVAL_S
    ) -> None:
        self._pids = pids
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.peak_sum_kib = 0
        self.hwm_kib: dict[int, int] = {}
        #: (monotonic seconds, sum of RSS in KiB) of every sample, in order.
        self.sums: list[tuple[float, int]] = []

    def sample(self) -> None:
        total = 0
        for pid in self._pids():
            rss = status_kib(pid, "VmRSS")
            hwm = status_kib(pid, "VmHWM")
            total += rss or 0
            if hwm is not None:
                self.hwm_kib[pid] = max(hwm, self.hwm_kib.get(pid, 0))
        self.peak_sum_kib = max(self.peak_sum_kib, total)
        self.sums.append((time.monotonic(), total))

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.sample()

    def start(self) -> PeakRss:
        self.sample()
        self._thread = threading.Thread(target=self._run, name="peak-rss", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()

    @property
    def peak_mib(self) -> float | None:
        """The larger of the sampled peak of the sum and the largest single ``VmHWM``."""
        best = max([self.peak_sum_kib, *self.hwm_kib.values()])
        return mib(best) if best else None

    def peaks_per_window(self, window_s: float) -> list[float | None]:
        """The sampled peak of the sum (MiB) in each ``window_s`` from the first sample on,
        None for a window in which nothing ran: whether memory levels off or keeps growing."""
        if not self.sums:
            return []
        first = self.sums[0][0]
        peaks: list[int] = []
        for at, total in self.sums:
            window = int((at - first) // window_s)
            peaks += [0] * (window + 1 - len(peaks))
            peaks[window] = max(peaks[window], total)
        return [mib(kib) if kib else None for kib in peaks]

    def __enter__(self) -> PeakRss:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
