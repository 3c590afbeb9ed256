"""HoodieStreamer's command line and properties: the same table config as tidelake's writes."""

import itertools
import os
from pathlib import Path

import pytest

from hudi014_worker import commit_seconds
from tidelake.lake.hudi import write_options as hudi_write_options
from tidelake_bench.ingest import (
    IngestPlan,
    bench_config,
    hudi014_job,
    hudi014_options,
    streamer_argv,
    streamer_props,
    streamer_source,
)
from tidelake_bench.tools import hudi014


def test_streamer_gets_tidelakes_table_config_and_one_file_per_round(tmp_path: Path) -> None:
    """Record key, ordering field, merge mode, table type and write options are tidelake's;
    the source limit makes each round take one file; it stops after a round without data."""
    cfg = bench_config(tmp_path, IngestPlan(table_rows=10, batch_events=2, large_rows=None))
    props = streamer_props(cfg, tmp_path / "in")
    assert "id" == props["hoodie.datasource.write.recordkey.field"]
    assert "EVENT_TIME_ORDERING" == props["hoodie.record.merge.mode"]
    assert "_tl_position" == props["hoodie.table.ordering.fields"]
    assert (tmp_path / "in").as_uri() == props["hoodie.streamer.source.dfs.root"]
    assert "1" == props["max.rounds.without.new.data.to.shutdown"]
    assert "hoodie.datasource.write.commitmeta.key.prefix" not in props
    jar = tmp_path / "hudi-utilities-slim-bundle_2.12-1.1.1.jar"
    argv = streamer_argv(cfg, jar, str(tmp_path / "t"), tmp_path / "p.properties", 1234)
    flags = dict(itertools.pairwise(argv))
    assert argv[0].endswith("spark-submit")
    assert "org.apache.hudi.utilities.streamer.HoodieStreamer" == flags["--class"]
    assert str(jar) == flags["org.apache.hudi.utilities.streamer.HoodieStreamer"]
    assert "COPY_ON_WRITE" == flags["--table-type"]
    assert "_tl_position" == flags["--source-ordering-fields"]
    assert "EVENT_TIME_ORDERING" == flags["--merge-mode"]
    assert "1234" == flags["--source-limit"]
    assert "shop_orders" == flags["--target-table"]
    assert "org.apache.hudi.utilities.sources.ParquetDFSSource" == flags["--source-class"]
    assert "--continuous" in argv
    assert any(a.startswith("spark.serializer=") for a in argv)


def _inputs(tmp_path: Path, sizes: list[int]) -> Path:
    inputs = tmp_path / "input"
    for i, size in enumerate(sizes):
        batch = inputs / f"batch-{i:04d}"
        batch.mkdir(parents=True)
        (batch / "part-00000-x.snappy.parquet").write_bytes(b"p" * size)
        (batch / "_SUCCESS").write_bytes(b"")
    return inputs


def test_streamer_source_takes_one_batch_per_round_in_batch_order(tmp_path: Path) -> None:
    """One file per batch, modification times rising in batch order, and a source limit
    above the largest file and below any two: ParquetDFSSource reads exactly one a round."""
    root, limit = streamer_source(_inputs(tmp_path, [300, 500, 400]), 3, "src")
    files = sorted(root.iterdir())
    assert ["batch-0000.parquet", "batch-0001.parquet", "batch-0002.parquet"] == [
        f.name for f in files
    ]
    mtimes = [f.stat().st_mtime for f in files]
    assert mtimes == sorted(mtimes)
    assert len(set(mtimes)) == 3
    assert 501 == limit
    assert limit < 300 + 400


def test_hudi_014_gets_tidelakes_table_config_in_its_own_terms(tmp_path: Path) -> None:
    """Record key, ordering field, index, table type as tidelake's; 1.x-only settings go,
    and latest-ordering-field-wins is Hudi 0.x's DefaultHoodieRecordPayload."""
    cfg = bench_config(tmp_path, IngestPlan(table_rows=10, batch_events=2, large_rows=None))
    ours = hudi_write_options(cfg.lake, "shop", "orders", ["id"], {})
    theirs = hudi014_options(ours)
    for key in (
        "hoodie.record.merge.mode",
        "hoodie.table.ordering.fields",
        "hoodie.write.table.version",
        "hoodie.datasource.write.commitmeta.key.prefix",
    ):
        assert key in ours
        assert key not in theirs
    assert (
        "org.apache.hudi.common.model.DefaultHoodieRecordPayload"
        == theirs["hoodie.datasource.write.payload.class"]
    )
    assert "_tl_position" == theirs["hoodie.payload.ordering.field"]
    assert "_tl_position" == theirs["hoodie.datasource.write.precombine.field"]
    for key in (
        "hoodie.table.name",
        "hoodie.datasource.write.table.type",
        "hoodie.datasource.write.recordkey.field",
        "hoodie.index.type",
        "hoodie.datasource.write.keygenerator.class",
    ):
        assert ours[key] == theirs[key]


def test_hudi_014_job_uses_its_own_jars_and_tidelakes_spark_settings(tmp_path: Path) -> None:
    """The worker's Spark has the ingest's settings but only the Hudi 0.14 jars; its
    HoodieStreamer reads the copied batches with the table's options."""
    cfg = bench_config(tmp_path, IngestPlan(table_rows=10, batch_events=2, large_rows=None))
    work = tmp_path / "work"
    work.mkdir()
    jars = [tmp_path / "bundle.jar", tmp_path / "utilities.jar"]
    job = hudi014_job(cfg, work, _inputs(tmp_path, [10, 20]), 2, jars)
    assert [str(j) for j in jars] == job["jars"]
    assert "spark.jars" not in job["spark_conf"]
    assert "org.apache.spark.serializer.KryoSerializer" == job["spark_conf"]["spark.serializer"]
    assert 2 == len(job["batches"])
    assert job["batches"][1].endswith("batch-0001")
    assert 21 == job["source_limit"]
    props = dict(
        line.split("=", 1) for line in Path(job["streamer_props"]).read_text().splitlines()
    )
    assert (tmp_path / "streamer-0.14-input").as_uri() == props["hoodie.streamer.source.dfs.root"]
    assert job["options"]["hoodie.index.type"] == props["hoodie.index.type"]
    assert job["datasource_path"] != job["streamer_path"]


def test_hudi_0x_commit_durations_come_from_requested_and_completed_files(tmp_path: Path) -> None:
    """Hudi 0.x's timeline: ``<instant>.commit.requested`` then ``<instant>.commit``."""
    timeline = tmp_path / ".hoodie"
    timeline.mkdir()
    commits = (("20260101000001000", 100, 102.5), ("20260101000002000", 110, 111))
    for instant, requested, done in commits:
        (timeline / f"{instant}.commit.requested").write_text("")
        (timeline / f"{instant}.commit").write_text("")
        os.utime(timeline / f"{instant}.commit.requested", (requested, requested))
        os.utime(timeline / f"{instant}.commit", (done, done))
    (timeline / "20260101000003000.commit.requested").write_text("")  # still running
    assert [2.5, 1.0] == commit_seconds(str(tmp_path))


def test_missing_hudi_014_set_up_is_a_reason_not_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without bench/setup's virtualenv and jars the pair is unavailable, and says why."""
    monkeypatch.setenv("TIDELAKE_BENCH_PYSPARK34", str(tmp_path / "venv"))
    monkeypatch.setenv("TIDELAKE_BENCH_JARS", str(tmp_path / "jars"))
    reason = hudi014()
    assert isinstance(reason, str)
    assert "bench/setup" in reason
    assert str(tmp_path / "venv" / "bin" / "python") in reason
