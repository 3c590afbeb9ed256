"""The bench's own tools: the NATS CLI, the HoodieStreamer jar, and Hudi 0.14 with the
PySpark 3.4 it runs on, put in place by ``bench/setup`` (Go module proxy, Maven Central,
PyPI) in directories of the project's own."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tidelake.bus.connection import connect
from tidelake.config import load_config
from tidelake.lake.spark import HUDI_BUNDLE_JAR

#: Environment variables that point at the tools instead (same names as bench/setup uses).
GO_BIN_ENV = "TIDELAKE_GO_BIN"
BENCH_JARS_ENV = "TIDELAKE_BENCH_JARS"
#: HoodieStreamer's bundle (bench/jars.txt): the same Hudi version as the writer's bundle.
UTILITIES_JAR = "hudi-utilities-slim-bundle_2.12-1.1.1.jar"


#: The capture and snapshot parts' nats-server fsyncs on JetStream's default schedule, not
#: before every PubAck as the embedded server does: nats-server fsyncs each write on its own,
#: so with ``sync_interval: always`` any publisher is bounded by the disk's fsync rate (the
#: ``nats_sync`` part measures that ceiling), and those parts measure the capture.
CAPTURE_SYNC_ALWAYS = False

#: The bench lives in the source checkout, never in the wheel: ``bench/tidelake_bench/``.
BENCH_DIR = Path(__file__).resolve().parents[1]
REPO_ROOT = BENCH_DIR.parent


def subprocess_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) with ``bench/`` first on ``PYTHONPATH``, so that a
    child ``python -m tidelake_bench.…`` imports this package as the parent does."""
    out = dict(os.environ if env is None else env)
    out["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BENCH_DIR), out.get("PYTHONPATH")]))
    return out


async def stream_messages(url: str) -> int:
    """How many messages the default change stream holds on the ``nats-server`` at ``url``."""
    cfg = load_config(None, environ={})
    nc = await connect(cfg.bus, url)
    try:
        info = await nc.jetstream().stream_info(cfg.bus.stream.name)
        return int(info.state.messages)
    finally:
        await nc.close()


def run_setup() -> bool:
    """Run ``bench/setup`` (idempotent); True once it ran."""
    subprocess.run([str(BENCH_DIR / "setup")], check=False, stdout=subprocess.DEVNULL)
    return True


def go_bin() -> Path:
    if os.environ.get(GO_BIN_ENV):
        return Path(os.environ[GO_BIN_ENV])
    return REPO_ROOT / ".cache" / "bin"


def nats_cli() -> str | None:
    """The ``nats`` executable: the bench's own build first, then ``PATH``."""
    own = go_bin() / "nats"
    if own.is_file() and os.access(own, os.X_OK):
        return str(own)
    return shutil.which("nats")


def bench_jar_dir() -> Path:
    if os.environ.get(BENCH_JARS_ENV):
        return Path(os.environ[BENCH_JARS_ENV])
    return REPO_ROOT / ".cache" / "bench-jars"


def utilities_jar() -> Path | None:
    jar = bench_jar_dir() / UTILITIES_JAR
    return jar if jar.is_file() else None


def hudi_bundle_jar(jar_cache: Path) -> Path:
    return jar_cache / HUDI_BUNDLE_JAR


#: The Hudi 0.14 side-by-side (bench/setup): HoodieStreamer shaded like its bundle, the
#: bundle, and the PySpark 3.4 that Hudi 0.14 runs on, in a virtualenv of the bench's own.
HUDI014_JARS = ("hudi-spark3.4-bundle_2.12-0.14.0.jar", "hudi-utilities-shaded_2.12-0.14.0.jar")
PYSPARK34_ENV = "TIDELAKE_BENCH_PYSPARK34"


def pyspark34_python() -> Path:
    if os.environ.get(PYSPARK34_ENV):
        return Path(os.environ[PYSPARK34_ENV]) / "bin" / "python"
    return REPO_ROOT / ".cache" / "bench-pyspark3.4" / "bin" / "python"


def hudi014() -> tuple[Path, list[Path]] | str:
    """The PySpark 3.4 interpreter and the Hudi 0.14 jars, or why they are missing."""
    python = pyspark34_python()
    jars = [bench_jar_dir() / name for name in HUDI014_JARS]
    missing = [str(p) for p in (python, *jars) if not p.exists()]
    if missing:
        return f"not set up by bench/setup: {', '.join(missing)}"
    return python, jars
