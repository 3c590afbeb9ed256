"""The one Spark session builder: Hudi jars from the local cache, quiet logs, lake catalog.

Jars are never fetched at run time (no ``spark.jars.packages``): ``tidelake setup`` puts the
pinned Hudi bundle (``runtime/jars.txt``) into the jar cache (runtime/jars.py), and the
session loads it from there. The catalog is Spark's in-memory one, rebuilt at every session
start from the tables found under the lake root: the lake describes itself, so the catalog
is persistent by construction and no Derby metastore lock stands between a running ingest
and ``tidelake query``.

A lake on object storage (``s3a://``) goes through Hadoop's S3A filesystem (``hadoop-aws``
and the AWS SDK bundle in the jar cache), configured from ``storage.s3``. Its keys are set
on the running session's Hadoop configuration, never as Spark settings: PySpark passes
Spark settings to ``spark-submit`` on its command line, where any local user could read them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from tidelake.config import Config, S3Config, SparkConfig
from tidelake.errors import ConfigError
from tidelake.lake.catalog import register_databases, register_table
from tidelake.lake.hudi import local_dir
from tidelake.lake.ledger import Ledger
from tidelake.lake.store import discover_tables, hoodie_properties, mark_archived_timeline
from tidelake.runtime.jars import JAR_CACHE_ENV
from tidelake.runtime.jars import jar_cache_dir as _jar_cache_dir

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = structlog.get_logger(__name__)

#: The pinned bundle (runtime/jars.txt): Hudi 1.1.1 built for Spark 3.5 / Scala 2.12.
HUDI_BUNDLE_JAR = "hudi-spark3.5-bundle_2.12-1.1.1.jar"
#: S3A for lakes on object storage (runtime/jars.txt): hadoop-aws of PySpark 3.5.7's Hadoop
#: (3.3.4, pyspark/jars/hadoop-client-api-3.3.4.jar) and the AWS SDK bundle its POM names.
S3A_JARS = ("hadoop-aws-3.3.4.jar", "aws-java-sdk-bundle-1.12.262.jar")


def jar_cache_dir(spark_cfg: SparkConfig, environ: dict[str, str] | None = None) -> Path:
    """Where the jars are: ``lake.spark.jar_cache``, ``$TIDELAKE_JAR_CACHE``, the checkout's
    ``.cache/jars``, else the user cache ``tidelake setup`` fills (runtime/jars.py)."""
    return _jar_cache_dir(spark_cfg.jar_cache, environ)


def hudi_jars(spark_cfg: SparkConfig, environ: dict[str, str] | None = None) -> list[Path]:
    """The jars the session loads; raises :class:`ConfigError` when the Hudi bundle is missing."""
    cache = jar_cache_dir(spark_cfg, environ)
    bundle = cache / HUDI_BUNDLE_JAR
    if not bundle.is_file():
        raise ConfigError(
            f"the Hudi bundle {HUDI_BUNDLE_JAR} is not in the jar cache {cache}: run"
            " `tidelake setup`"
            f" (or point lake.spark.jar_cache / ${JAR_CACHE_ENV} at a directory holding it)"
        )
    return sorted(cache.glob("*.jar"))


def log4j_config() -> Path:
    """The log4j2 properties file shipped in the package."""
    return Path(str(resources.files("tidelake.lake") / "log4j2.properties"))


def log_dir(config: Config) -> Path:
    """Where Spark and Hudi warnings go: ``<state dir>/logs`` (``<lake_root>/_tidelake/logs``
    for a local lake)."""
    return (config.lake_state_dir / "logs").resolve()


def warehouse_dir(config: Config) -> Path:
    """Spark's warehouse directory, beside the lake (never the current directory)."""
    local = local_dir(config.lake_root)
    base = local.resolve().parent if local is not None else config.home.resolve()
    return base / "spark-warehouse"


#: Hadoop's S3A filesystem, for ``s3a://`` and (so that one URI works everywhere) ``s3://``.
S3A_FILESYSTEM = "org.apache.hadoop.fs.s3a.S3AFileSystem"


def s3a_conf(s3: S3Config) -> dict[str, str]:
    """The non-secret S3A settings of ``storage.s3`` as ``spark.hadoop.*`` Spark settings.

    With keys configured, S3A reads them from the Hadoop configuration (set by
    :func:`apply_s3_credentials`); without, it asks the AWS SDK's default chain (environment,
    system properties, web identity, profiles, container and instance credentials).
    """
    provider = (
        "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        if s3.resolved_credentials() is not None
        else "com.amazonaws.auth.DefaultAWSCredentialsProviderChain"
    )
    conf = {
        "fs.s3a.impl": S3A_FILESYSTEM,
        "fs.s3.impl": S3A_FILESYSTEM,
        "fs.s3a.endpoint.region": s3.region,
        "fs.s3a.path.style.access": str(s3.path_style).lower(),
        "fs.s3a.aws.credentials.provider": provider,
        "fs.s3a.attempts.maximum": str(s3.max_attempts),
        # Hudi writes many small files per commit from several threads.
        "fs.s3a.connection.maximum": "64",
    }
    if s3.endpoint is not None:
        conf["fs.s3a.endpoint"] = s3.endpoint
        conf["fs.s3a.connection.ssl.enabled"] = str(s3.endpoint.startswith("https://")).lower()
    return {f"spark.hadoop.{k}": v for k, v in conf.items()}


def apply_s3_credentials(spark: SparkSession, s3: S3Config) -> None:
    """Put configured S3 keys on the session's Hadoop configuration (driver and tasks)."""
    credentials = s3.resolved_credentials()
    if credentials is None:
        return
    hadoop_conf = spark.sparkContext._jsc.hadoopConfiguration()
    hadoop_conf.set("fs.s3a.access.key", credentials[0])
    hadoop_conf.set("fs.s3a.secret.key", credentials[1])


def session_conf(config: Config, app_name: str = "tidelake") -> dict[str, str]:
    """Every Spark setting of the session; ``lake.spark.conf`` is merged last."""
    spark_cfg = config.lake.spark
    jars = hudi_jars(spark_cfg)
    logs = log_dir(config)
    logs.mkdir(parents=True, exist_ok=True)
    java_opts = " ".join(
        [
            f"-Dlog4j2.configurationFile={log4j_config().as_uri()}",
            f"-Dtidelake.log.dir={logs}",
            # Hudi sizes objects with JOL, whose HotSpot agent attach fails on JDK 17 after
            # a long wait (and self-attach makes the JVM print a thread dump): skip it.
            "-Djol.skipHotspotSAAttach=true",
        ]
    )
    user_java_opts = spark_cfg.conf.get("spark.driver.extraJavaOptions")
    conf = {
        "spark.master": spark_cfg.master,
        "spark.app.name": app_name,
        "spark.driver.memory": spark_cfg.driver_memory,
        "spark.jars": ",".join(str(j) for j in jars),
        "spark.serializer": "org.apache.spark.serializer.KryoSerializer",
        "spark.kryo.registrator": "org.apache.spark.HoodieSparkKryoRegistrar",
        "spark.sql.extensions": "org.apache.spark.sql.hudi.HoodieSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.hudi.catalog.HoodieCatalog",
        "spark.sql.catalogImplementation": "in-memory",
        "spark.sql.warehouse.dir": str(warehouse_dir(config)),
        "spark.sql.shuffle.partitions": str(spark_cfg.shuffle_partitions),
        "spark.default.parallelism": str(spark_cfg.shuffle_partitions),
        # Timestamps are instants in UTC everywhere (lake/schema.py).
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.extraJavaOptions": java_opts,
    }
    if local_dir(config.lake_root) is None:
        missing = [j for j in S3A_JARS if not (jar_cache_dir(spark_cfg) / j).is_file()]
        if missing:
            raise ConfigError(
                f"lake.root {config.lake_root!r} needs {', '.join(missing)} in the jar cache "
                f"{jar_cache_dir(spark_cfg)}: run `tidelake setup --s3`"
            )
    conf |= s3a_conf(config.storage.s3)
    if config.lake.catalog.hive_metastore_uri:
        # Tables registered there outlive the session (lake/catalog.py keeps them current).
        conf["spark.sql.catalogImplementation"] = "hive"
        conf["spark.hadoop.hive.metastore.uris"] = config.lake.catalog.hive_metastore_uri
    conf |= spark_cfg.conf
    if user_java_opts:
        conf["spark.driver.extraJavaOptions"] = f"{java_opts} {user_java_opts}"
    return conf


#: Settings a ``spark-submit`` command line decides (cli/submit.py): inside a submitted
#: driver the session builder leaves them as submitted.
SUBMIT_OWNED = frozenset(
    {"spark.master", "spark.driver.memory", "spark.jars", "spark.driver.extraJavaOptions"}
)


def submitted(environ: dict[str, str] | None = None) -> bool:
    """True inside a Python application started by ``spark-submit`` (its JVM already runs)."""
    env = os.environ if environ is None else environ
    return "PYSPARK_GATEWAY_PORT" in env


def local_class_path(conf: dict[str, str]) -> dict[str, str]:
    """On a ``local`` master, the jars go on the driver's class path instead of ``spark.jars``.

    With ``spark.jars`` Spark copies every jar into a new ``<tmp>/spark-*/userFiles-*``
    directory at each session start (346 MB with the S3A jars) and removes it only in a
    clean shutdown hook: each ``kill -9`` of an ingest left one behind, and a run of crash
    tests filled a 252 GB disk here. In local mode the executors are the driver's own JVM, so
    its class path is all they need; a cluster master keeps ``spark.jars`` (its executors
    fetch them)."""
    if not conf.get("spark.master", "").startswith("local") or not conf.get("spark.jars"):
        return conf
    out = dict(conf)
    jars = out.pop("spark.jars").split(",")
    user = out.get("spark.driver.extraClassPath")
    out["spark.driver.extraClassPath"] = os.pathsep.join([*jars, *([user] if user else [])])
    return out


def build_spark_session(config: Config, app_name: str = "tidelake") -> SparkSession:
    """The session every tidelake Spark job uses; registers the lake's tables in its catalog."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    inside_submit = submitted()
    conf = session_conf(config, app_name)
    if not inside_submit:
        conf = local_class_path(conf)
    for key, value in conf.items():
        if inside_submit and key in SUBMIT_OWNED:
            continue
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    apply_s3_credentials(spark, config.storage.s3)
    register_lake_tables(spark, config.lake_root, marks=config.ingest.owns)
    # A database the source created stays visible while it holds no table yet.
    register_databases(spark, Ledger(config.lake_state_dir))
    return spark


def register_lake_tables(
    spark: SparkSession, lake_root: str, marks: Callable[[str], bool] = lambda _: True
) -> list[str]:
    """Register every Hudi table under ``lake_root``; returns their ``db.table`` names.

    A table of version 8 or later also gets the marker that lets Trino read it before Hudi
    first archives (``lake/store.py`` :func:`mark_archived_timeline`): tables made before
    tidelake wrote it get it here, at the next session start, not only at their next DDL —
    only the tables ``marks`` names (an ingest worker's own, ``ingest.tables``: it never
    writes into another worker's table)."""
    names = []
    for loc in discover_tables(spark, lake_root):
        try:
            register_table(spark, loc.database, loc.table, loc.path)
            names.append(loc.table_id)
        except Exception as exc:  # a half-created table must not stop the session
            log.warning("table not registered", table=loc.table_id, error=str(exc))
            continue
        if not marks(loc.table_id):
            continue
        try:
            if int(hoodie_properties(spark, loc.path).get("hoodie.table.version", 9)) >= 8:
                mark_archived_timeline(spark, loc.path)
        except Exception as exc:  # a read-only lake (a reader's session): readers go on
            log.warning("archive marker not written", table=loc.table_id, error=str(exc)[:300])
    return names
