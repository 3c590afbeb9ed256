"""``lake.catalog.hive_metastore_uri``: the session's catalog becomes that Hive metastore.

No metastore server runs in the test suite: these tests prove the wiring of the Spark
settings, not a round trip through a metastore.
"""

from __future__ import annotations

from pathlib import Path

from tidelake.config import load_config
from tidelake.lake.spark import HUDI_BUNDLE_JAR, session_conf


def _conf(tmp_path: Path, **env: str) -> dict[str, str]:
    cache = tmp_path / "jars"
    cache.mkdir(exist_ok=True)
    (cache / HUDI_BUNDLE_JAR).write_bytes(b"")
    environ = {
        "TIDELAKE_HOME": str(tmp_path / "home"),
        "TIDELAKE_LAKE__SPARK__JAR_CACHE": str(cache),
        **env,
    }
    return session_conf(load_config(None, environ=environ))


def test_a_hive_metastore_uri_switches_the_catalog_to_hive(tmp_path: Path) -> None:
    """With the URI set, Spark uses its Hive catalog pointed at that metastore."""
    conf = _conf(tmp_path, TIDELAKE_LAKE__CATALOG__HIVE_METASTORE_URI="thrift://meta:9083")
    expected = {
        "spark.sql.catalogImplementation": "hive",
        "spark.hadoop.hive.metastore.uris": "thrift://meta:9083",
    }
    assert expected == {k: conf[k] for k in expected}


def test_without_a_metastore_the_catalog_is_in_memory(tmp_path: Path) -> None:
    """The embedded default: Spark's in-memory catalog and no metastore URI."""
    conf = _conf(tmp_path)
    assert "in-memory" == conf["spark.sql.catalogImplementation"]
    assert "spark.hadoop.hive.metastore.uris" not in conf
