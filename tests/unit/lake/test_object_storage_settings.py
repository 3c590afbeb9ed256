"""storage.s3 as each client sees it: S3A settings, spark-submit's command line, hudi-rs
options, the ingest's state directory — and secrets never among Spark settings."""

from __future__ import annotations

from pathlib import Path

import pyspark
import pytest

from tidelake.cli.submit import SPARK_JOB, submit_argv
from tidelake.config import Config, load_config
from tidelake.errors import ConfigError
from tidelake.lake.spark import HUDI_BUNDLE_JAR, S3A_JARS, s3a_conf, session_conf, submitted
from tidelake.verify.lake import storage_options

SECRET = "s3cr3t-value-never-shown"


def _config(tmp_path: Path, *, jars: tuple[str, ...] = (), **env: str) -> Config:
    cache = tmp_path / "jars"
    cache.mkdir(exist_ok=True)
    for jar in (HUDI_BUNDLE_JAR, *jars):
        (cache / jar).write_bytes(b"")
    return load_config(
        None,
        environ={
            "TIDELAKE_HOME": str(tmp_path / "home"),
            "TIDELAKE_LAKE__SPARK__JAR_CACHE": str(cache),
            **env,
        },
    )


MINIO = {
    "TIDELAKE_LAKE__ROOT": "s3a://bucket/lake",
    "TIDELAKE_STORAGE__S3__ENDPOINT": "http://127.0.0.1:9000",
    "TIDELAKE_STORAGE__S3__PATH_STYLE": "true",
    "TIDELAKE_STORAGE__S3__ACCESS_KEY": "AKIDEXAMPLE",
    "TIDELAKE_STORAGE__S3__SECRET_KEY": SECRET,
}


def test_s3a_settings_follow_storage_s3(tmp_path: Path) -> None:
    """Endpoint, path style, plain HTTP and the key provider come from storage.s3."""
    conf = s3a_conf(_config(tmp_path, **MINIO).storage.s3)
    expected = {
        "spark.hadoop.fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:9000",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
        "spark.hadoop.fs.s3a.aws.credentials.provider": (
            "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        ),
    }
    assert expected == {k: conf[k] for k in expected}


def test_without_keys_s3a_asks_the_aws_credential_chain(tmp_path: Path) -> None:
    """No configured keys: the AWS SDK's default chain (env, profiles, web identity, roles)."""
    conf = s3a_conf(_config(tmp_path).storage.s3)
    expected = "com.amazonaws.auth.DefaultAWSCredentialsProviderChain"
    assert expected == conf["spark.hadoop.fs.s3a.aws.credentials.provider"]
    assert "spark.hadoop.fs.s3a.endpoint" not in conf


def test_keys_are_never_spark_settings_nor_on_the_submit_command_line(tmp_path: Path) -> None:
    """PySpark puts Spark settings on spark-submit's command line: the secret stays out."""
    cfg = _config(tmp_path, jars=S3A_JARS, **MINIO)
    conf = session_conf(cfg)
    assert not [k for k, v in conf.items() if SECRET in v or "secret.key" in k]
    argv = submit_argv(cfg, ["ingest", "--once"], master="spark://127.0.0.1:7077")
    assert not [a for a in argv if SECRET in a]
    assert SECRET not in str(cfg.masked())


def test_an_s3a_lake_needs_the_s3a_jars(tmp_path: Path) -> None:
    """Without hadoop-aws and the AWS SDK bundle in the cache, the session refuses to start."""
    cfg = _config(tmp_path, **MINIO)
    with pytest.raises(ConfigError, match=r"hadoop-aws-3\.3\.4\.jar"):
        session_conf(cfg)


def test_submit_command_line_carries_master_jars_and_the_job(tmp_path: Path) -> None:
    """spark-submit of the installed PySpark, the master, every cached jar, the job file."""
    cfg = _config(tmp_path, jars=S3A_JARS)
    argv = submit_argv(cfg, ["ingest", "--once"], master="spark://127.0.0.1:7077")
    assert str(Path(pyspark.__file__).parent / "bin" / "spark-submit") == argv[0]
    assert "spark://127.0.0.1:7077" == argv[argv.index("--master") + 1]
    jars = argv[argv.index("--jars") + 1].split(",")
    assert sorted([HUDI_BUNDLE_JAR, *S3A_JARS]) == sorted(Path(j).name for j in jars)
    assert [str(SPARK_JOB), "ingest", "--once"] == argv[-3:]
    settings = [argv[i + 1] for i, a in enumerate(argv) if a == "--conf"]
    assert "spark.sql.extensions=org.apache.spark.sql.hudi.HoodieSparkSessionExtension" in settings
    assert not [s for s in settings if s.startswith(("spark.master=", "spark.jars="))]


def test_inside_spark_submit_is_told_by_the_gateway_port() -> None:
    """spark-submit hands its Python driver PYSPARK_GATEWAY_PORT; a plain process has none."""
    assert (True, False) == (submitted({"PYSPARK_GATEWAY_PORT": "4242"}), submitted({}))


def test_hudi_rs_options_for_minio_and_for_the_chain(tmp_path: Path) -> None:
    """hudi-rs gets the endpoint, path style and keys; without keys, the AWS_* variables."""
    opts = storage_options(_config(tmp_path, **MINIO).storage.s3, environ={})
    expected = {
        "aws_endpoint": "http://127.0.0.1:9000",
        "aws_allow_http": "true",
        "aws_virtual_hosted_style_request": "false",
        "aws_region": "us-east-1",
        "aws_access_key_id": "AKIDEXAMPLE",
        "aws_secret_access_key": SECRET,
    }
    assert expected == opts
    chain = storage_options(
        _config(tmp_path).storage.s3,
        environ={"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "key"},
    )
    assert ("id", "key") == (chain["aws_access_key_id"], chain["aws_secret_access_key"])


def test_ingest_state_is_local_for_an_object_store_lake(tmp_path: Path) -> None:
    """<lake>/_tidelake for a local lake; <home>/state on object storage; or lake.state_dir."""
    local = _config(tmp_path)
    remote = _config(tmp_path, **MINIO)
    chosen = _config(tmp_path, TIDELAKE_LAKE__STATE_DIR=str(tmp_path / "st"), **MINIO)
    assert Path(local.lake_root) / "_tidelake" == local.lake_state_dir
    assert (tmp_path / "home" / "state").resolve() == remote.lake_state_dir
    assert (tmp_path / "st").resolve() == chosen.lake_state_dir
