"""HoodieStreamer's command line and properties: the same table config as tidelake's writes."""

import itertools
from pathlib import Path

from tidelake.bench.ingest import IngestPlan, bench_config, streamer_argv, streamer_props


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
