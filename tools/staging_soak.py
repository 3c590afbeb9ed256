"""A long run that shows staging stays bounded: ``tidelake demo`` for as long as asked, with the
staging root's size sampled while it runs.

    .venv/bin/python tools/staging_soak.py --minutes 30 --rate 400 --out /tmp/soak.csv

The demo publishes ``minutes * 60 * rate`` events at ``rate`` per second through the whole
pipeline (embedded NATS, the stager and the ingest as child processes) and verifies the lake
row by row at the end. Every ``--every`` seconds this script records the bytes and files under
``<home>/staging`` (manifests, batch files, retired totals) and under the lake; the summary
line says the first, largest and last staging size. Without retention (lake/retention.py)
staging grows with every batch; with it, staging holds only the batches not yet applied.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def _size(root: Path) -> tuple[int, int]:
    """Bytes and files under ``root``; a file removed while it is counted (retention, Hudi's
    own clean-up) is not counted."""
    total = files = 0
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                total += os.stat(os.path.join(dirpath, name)).st_size
                files += 1
    return total, files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=400.0)
    parser.add_argument("--every", type=float, default=30.0, help="seconds between samples")
    parser.add_argument("--home", type=Path, default=Path(".tidelake/soak"))
    parser.add_argument("--out", type=Path, default=Path(".tidelake/soak.csv"))
    args = parser.parse_args()
    events = int(args.minutes * 60 * args.rate)
    cmd = [sys.executable, "-m", "tidelake.cli", "demo", "--events", str(events)]
    cmd += ["--rate", str(args.rate), "--home", str(args.home), "--json"]
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    samples: list[dict[str, float]] = []
    while True:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=args.every)
        staging_bytes, staging_files = _size(args.home / "staging")
        lake_bytes, _ = _size(args.home / "lake")
        samples.append(
            {
                "elapsed_s": round(time.monotonic() - started, 1),
                "staging_bytes": staging_bytes,
                "staging_files": staging_files,
                "lake_bytes": lake_bytes,
            }
        )
        print(json.dumps(samples[-1]), file=sys.stderr, flush=True)
        if proc.poll() is not None:
            break
    summary_line = (proc.stdout.read() if proc.stdout else "").strip().splitlines()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(samples[0]))
        writer.writeheader()
        writer.writerows(samples)
    peak = max(samples, key=lambda s: s["staging_bytes"])
    result = {
        "events": events,
        "demo_exit": proc.returncode,
        "demo": json.loads(summary_line[-1]) if summary_line else None,
        "samples": len(samples),
        "staging_bytes_first": samples[0]["staging_bytes"],
        "staging_bytes_peak": peak["staging_bytes"],
        "staging_bytes_peak_at_s": peak["elapsed_s"],
        "staging_bytes_last": samples[-1]["staging_bytes"],
        "staging_files_last": samples[-1]["staging_files"],
    }
    print(json.dumps(result))
    return 0 if proc.returncode == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
