"""The one place naming Hudi options, the lake layout, and the Spark session settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelake.config import LakeConfig, SparkConfig, load_config
from tidelake.errors import ConfigError
from tidelake.lake.catalog import quote_identifier
from tidelake.lake.checkpoint import TableCheckpoint
from tidelake.lake.hudi import (
    hudi_table_name,
    split_table_id,
    table_path,
    write_options,
)
from tidelake.lake.spark import (
    HUDI_BUNDLE_JAR,
    S3A_JARS,
    hudi_jars,
    local_class_path,
    session_conf,
)
from tidelake.lake.store import discover_tables
from tidelake.runtime.jars import pinned_jars

REPO = Path(__file__).resolve().parents[3]


def test_write_options_merge_on_the_position_with_event_time_ordering() -> None:
    """Explicit EVENT_TIME_ORDERING on _tl_position under both option names, upsert, COW."""
    opts = write_options(LakeConfig(), "shop", "orders", ["id"], {"tidelake.checkpoint": "{}"})
    expected = {
        "hoodie.record.merge.mode": "EVENT_TIME_ORDERING",
        "hoodie.table.ordering.fields": "_tl_position",
        "hoodie.datasource.write.precombine.field": "_tl_position",
        "hoodie.datasource.write.operation": "upsert",
        "hoodie.datasource.write.table.type": "COPY_ON_WRITE",
        "hoodie.datasource.write.recordkey.field": "id",
        "hoodie.datasource.write.keygenerator.class": (
            "org.apache.hudi.keygen.NonpartitionedKeyGenerator"
        ),
        "hoodie.datasource.write.commitmeta.key.prefix": "tidelake.",
        "tidelake.checkpoint": "{}",
        "hoodie.table.name": "shop_orders",
        "hoodie.write.table.version": "9",
    }
    assert expected == {k: opts[k] for k in expected}


def test_write_options_partitioned_composite_mor_and_user_options_last() -> None:
    """Composite keys, partitions (complex key generator, global index), MOR compaction,
    and lake.hudi_options winning over everything."""
    lake = LakeConfig(
        table_type="MERGE_ON_READ",
        partition_by={"shop.lines": ["region"]},
        hudi_options={"hoodie.compact.inline.max.delta.commits": "2"},
    )
    opts = write_options(lake, "shop", "lines", ["order_id", "line"], {})
    expected = {
        "hoodie.datasource.write.recordkey.field": "order_id,line",
        "hoodie.datasource.write.partitionpath.field": "region",
        "hoodie.datasource.write.keygenerator.class": "org.apache.hudi.keygen.ComplexKeyGenerator",
        "hoodie.index.type": "GLOBAL_SIMPLE",
        "hoodie.compact.inline": "true",
        "hoodie.compact.inline.max.delta.commits": "2",
    }
    assert expected == {k: opts[k] for k in expected}


def test_write_options_reject_metadata_keys_without_the_prefix() -> None:
    """Only ``tidelake.*`` keys may ride in the commit metadata."""
    with pytest.raises(ValueError, match="prefix"):
        write_options(LakeConfig(), "shop", "orders", ["id"], {"checkpoint": "{}"})


def test_table_layout_names_are_safe_and_reversible(tmp_path: Path) -> None:
    """Odd source names become safe paths and Hudi names; discovery gives them back."""
    path = table_path(str(tmp_path), "my db", "order/s`x")
    expected_path = f"{tmp_path}/my%20db/order%2Fs%60x"
    assert expected_path == path
    expected_name = "my_20_db__order_2f_s_60_x"  # names.hudi_table_name: reversible
    assert expected_name == hudi_table_name("my db", "order/s`x")
    expected_digit_name = "_31_db__t"
    assert expected_digit_name == hudi_table_name("1db", "t")
    (Path(path) / ".hoodie").mkdir(parents=True)
    (Path(path) / ".hoodie" / "hoodie.properties").write_text("hoodie.table.name=x\n")
    expected_ids = ["my db.`order/s``x`"]  # a backtick is quoted (names.table_id)
    assert expected_ids == [t.table_id for t in discover_tables(None, str(tmp_path))]
    expected_split = ("db", "t.x")
    assert expected_split == split_table_id("db.t.x")


def test_quote_identifier_escapes_backticks() -> None:
    """Identifiers are always backticked, inner backticks doubled."""
    expected = "`we``ird`"
    assert expected == quote_identifier("we`ird")


def test_checkpoint_round_trips_through_json() -> None:
    """What the commit metadata holds reads back equal."""
    checkpoint = TableCheckpoint(seq=42, position="00000000000000000001", schema_version=3)
    assert checkpoint == TableCheckpoint.from_json(checkpoint.to_json())


def test_missing_hudi_bundle_says_run_setup(tmp_path: Path) -> None:
    """An empty jar cache fails with a clear pointer to `tidelake setup`."""
    with pytest.raises(ConfigError, match="run `tidelake setup`"):
        hudi_jars(SparkConfig(jar_cache=tmp_path))


def test_bundle_name_matches_the_pinned_jar_list() -> None:
    """lake/spark.py loads exactly the jars runtime/jars.txt pins (Hudi, then S3A)."""
    expected = [HUDI_BUNDLE_JAR, *S3A_JARS]
    assert expected == [jar.filename for jar in pinned_jars()]


def test_session_conf_is_offline_quiet_and_uses_the_hudi_catalog(tmp_path: Path) -> None:
    """No runtime downloads, Hudi extensions, Kryo, no UI, warehouse beside the lake."""
    cache = tmp_path / "jars"
    cache.mkdir()
    (cache / HUDI_BUNDLE_JAR).write_bytes(b"")
    config = load_config(
        None,
        environ={
            "TIDELAKE_HOME": str(tmp_path / "home"),
            "TIDELAKE_LAKE__SPARK__JAR_CACHE": str(cache),
        },
    )
    conf = session_conf(config)
    expected = {
        "spark.serializer": "org.apache.spark.serializer.KryoSerializer",
        "spark.sql.extensions": "org.apache.spark.sql.hudi.HoodieSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.hudi.catalog.HoodieCatalog",
        "spark.kryo.registrator": "org.apache.spark.HoodieSparkKryoRegistrar",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.jars": str(cache / HUDI_BUNDLE_JAR),
        "spark.sql.warehouse.dir": str((tmp_path / "home" / "spark-warehouse").resolve()),
    }
    assert expected == {k: conf[k] for k in expected}
    assert "spark.jars.packages" not in conf
    assert "log4j2.properties" in conf["spark.driver.extraJavaOptions"]


def test_a_local_session_puts_the_jars_on_the_class_path_not_in_spark_jars() -> None:
    """A local master gets the jars on the driver class path (no per-session copy under
    /tmp that a killed JVM leaves behind); a user's own class path is kept after them; a
    cluster master keeps spark.jars for its executors."""
    conf = {"spark.master": "local[2]", "spark.jars": "/j/a.jar,/j/b.jar"}
    assert {"spark.master": "local[2]", "spark.driver.extraClassPath": "/j/a.jar:/j/b.jar"} == (
        local_class_path(conf)
    )
    mine = {**conf, "spark.driver.extraClassPath": "/mine.jar"}
    assert "/j/a.jar:/j/b.jar:/mine.jar" == local_class_path(mine)["spark.driver.extraClassPath"]
    cluster = {"spark.master": "spark://h:7077", "spark.jars": "/j/a.jar"}
    assert cluster == local_class_path(cluster)
