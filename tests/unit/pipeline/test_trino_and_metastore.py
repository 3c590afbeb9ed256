"""pipeline/metastore.py, pipeline/trino.py, pipeline/query_engines.py: the files they write
and the names they query, without starting a JVM (tests/e2e/test_demo_trino.py runs both)."""

from __future__ import annotations

import stat
import xml.etree.ElementTree as ET
from pathlib import Path

from pydantic import SecretStr

from tidelake.config import S3Config, merge_settings
from tidelake.pipeline.metastore import HiveMetastore, site_xml
from tidelake.pipeline.query_engines import trino_table
from tidelake.pipeline.trino import TrinoServer, rows_as_dicts, s3_catalog_settings


def test_the_site_xml_holds_every_setting_escaped(tmp_path: Path) -> None:
    text = site_xml({"a.b": "x<y&z", "c": "1"})
    props = {p.findtext("name"): p.findtext("value") for p in ET.fromstring(text)}
    assert {"a.b": "x<y&z", "c": "1"} == props


def test_the_metastore_keeps_its_database_and_warehouse_in_its_folder(tmp_path: Path) -> None:
    server = HiveMetastore(tmp_path / "hms")
    server._port = 9999
    settings = server.settings()
    assert "9999" == settings["metastore.thrift.port"]
    assert str(tmp_path / "hms" / "db") in settings["javax.jdo.option.ConnectionURL"]
    assert settings["metastore.warehouse.dir"].startswith((tmp_path / "hms").as_uri())
    assert "thrift://127.0.0.1:9999" == server.uri


def test_trino_catalogs_share_the_metastore_and_hive_redirects_to_hudi(tmp_path: Path) -> None:
    server = TrinoServer(tmp_path / "trino", "thrift://127.0.0.1:9083")
    catalogs = server.catalogs()
    assert {"hudi", "hive"} == set(catalogs)
    assert all(c["hive.metastore.uri"] == "thrift://127.0.0.1:9083" for c in catalogs.values())
    assert "hudi" == catalogs["hive"]["hive.hudi-catalog-name"]
    assert not any(k.startswith("s3.") for c in catalogs.values() for k in c)


def test_an_s3_lake_gives_trino_its_endpoint_and_keys_in_owner_only_files(
    tmp_path: Path,
) -> None:
    s3 = S3Config(
        endpoint="http://127.0.0.1:9000",
        path_style=True,
        access_key=SecretStr("AK"),
        secret_key=SecretStr("SK"),
    )
    settings = s3_catalog_settings(s3)
    assert "http://127.0.0.1:9000" == settings["s3.endpoint"]
    assert "true" == settings["s3.path-style-access"]
    assert ("AK", "SK") == (settings["s3.aws-access-key"], settings["s3.aws-secret-key"])
    assert {} == s3_catalog_settings(None)
    server = TrinoServer(tmp_path / "trino", "thrift://127.0.0.1:9083", s3=s3)
    server._port = 8080
    etc = server._write_etc()
    for path in (etc / "catalog").iterdir():
        assert 0o600 == stat.S_IMODE(path.stat().st_mode), path
        assert "s3.aws-secret-key=SK" in path.read_text()
    assert "http-server.http.port=8080" in (etc / "config.properties").read_text()


def test_trino_names_tables_as_the_catalog_sync_registered_them() -> None:
    assert 'hudi."shop"."orders"' == trino_table("shop.orders")
    # names.catalog_name escapes what Spark's catalog cannot hold (upper case here).
    assert 'hive."shop"."_orders_x1"' == trino_table("shop.Orders", "hive")


def test_rows_become_dicts_and_settings_merge_section_by_section() -> None:
    assert [{"a": 1, "b": 2}] == rows_as_dicts(["a", "b"], [[1, 2]])
    merged = merge_settings(
        {"lake": {"root": "s3a://b/lake"}, "stage": {"root": "s3://b/s"}},
        {"lake": {"catalog": {"hive_metastore_uri": "thrift://h:1"}}},
    )
    assert {
        "lake": {"root": "s3a://b/lake", "catalog": {"hive_metastore_uri": "thrift://h:1"}},
        "stage": {"root": "s3://b/s"},
    } == merged
