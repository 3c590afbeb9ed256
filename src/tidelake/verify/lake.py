"""JVM-free reads of the lake through hudi-rs: what ``verify`` and the demo compare.

hudi-rs (the ``hudi`` package, 0.5.0) reads table version 9 as Hudi 1.1.1 writes it; the
version is pinned in lake/hudi.py so the two stay compatible.

hudi-rs 0.5.0 does not apply schema-on-read evolution (``.hoodie/.schema``, written by Spark
SQL ``ALTER TABLE … RENAME COLUMN`` with ``hoodie.schema.on.read.enable``): it reads a
renamed column as NULL in the files written before the rename. tidelake never evolves
tables that way (``lake/evolve.py`` rewrites them), but a table evolved so by hand is read
through Spark when the caller passes a session, and refused otherwise, never read wrong.

A lake on object storage is read with the same ``storage.s3`` settings as everything else
(:func:`storage_options`).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pyarrow as pa
from hudi import HudiTableBuilder

from tidelake.config import S3Config
from tidelake.errors import IngestError
from tidelake.lake.hudi import is_hudi_table, local_dir, split_table_id, table_path
from tidelake.runtime.storage import open_storage

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Hudi's meta columns (and its delete marker) are not part of a table's data.
META_PREFIX = "_hoodie_"
#: Where Hudi keeps schema-on-read evolution (completed ``<t1>_<t2>.schemacommit`` files).
SCHEMA_ON_READ_DIR = ".hoodie/.schema"


def storage_options(s3: S3Config, environ: dict[str, str] | None = None) -> dict[str, str]:
    """hudi-rs (Rust ``object_store``) options for ``storage.s3``.

    Without configured keys, the standard ``AWS_*`` environment variables are passed on.
    """
    env = os.environ if environ is None else environ
    opts = {
        "aws_region": s3.region,
        "aws_virtual_hosted_style_request": str(not s3.path_style).lower(),
    }
    if s3.endpoint is not None:
        opts["aws_endpoint"] = s3.endpoint
        opts["aws_allow_http"] = str(s3.endpoint.startswith("http://")).lower()
    credentials = s3.resolved_credentials()
    if credentials is not None:
        opts["aws_access_key_id"], opts["aws_secret_access_key"] = credentials
    else:
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
            if env.get(name):
                opts[name.lower()] = env[name]
    return opts


def _exists(path: str, s3: S3Config) -> bool:
    if local_dir(path) is not None:
        return is_hudi_table(path)
    return open_storage(path, s3).exists(".hoodie/hoodie.properties")


def evolved_on_read(path: str, s3: S3Config | None = None) -> bool:
    """True when the table at ``path`` has completed schema-on-read evolution."""
    if local_dir(path) is not None:
        base = local_dir(path)
        return base is not None and any((base / SCHEMA_ON_READ_DIR).glob("*_*.schemacommit"))
    names = open_storage(path, s3 or S3Config()).list(SCHEMA_ON_READ_DIR)
    return any(n.endswith(".schemacommit") and "_" in n.rsplit("/", 1)[-1] for n in names)


def _read_with_spark(spark: SparkSession, path: str) -> pa.Table:
    from pyspark.sql.pandas.types import to_arrow_type

    # Spark reads the evolution only when asked to (the writer's setting, for the reader).
    df = spark.read.format("hudi").option("hoodie.schema.on.read.enable", "true").load(path)
    df = df.select(*[f"`{c}`" for c in df.columns if not c.startswith(META_PREFIX)])
    schema = pa.schema([(f.name, to_arrow_type(f.dataType)) for f in df.schema.fields])
    return pa.Table.from_pylist([row.asDict() for row in df.collect()], schema=schema)


def read_table(
    lake_root: str,
    table_id: str,
    s3: S3Config | None = None,
    spark: SparkSession | None = None,
) -> pa.Table:
    """The latest snapshot of ``db.table`` without ``_hoodie_*`` columns.

    A table that has not been written yet reads as an empty table with no columns. A table
    evolved with schema-on-read is read through ``spark`` (hudi-rs would read renamed columns
    as NULL); without a session it raises :class:`IngestError` saying so.
    """
    s3 = s3 if s3 is not None else S3Config()
    database, table = split_table_id(table_id)
    path = table_path(lake_root, database, table)
    if not _exists(path, s3):
        return pa.table({})
    if evolved_on_read(path, s3):
        if spark is None:
            raise IngestError(
                f"{table_id} was evolved with Hudi schema-on-read, which hudi-rs 0.5.0 reads "
                "wrong (renamed columns as NULL): read it through Spark"
            )
        return _read_with_spark(spark, path)
    builder = HudiTableBuilder.from_base_uri(path)
    if local_dir(path) is None:
        builder = builder.with_storage_options(storage_options(s3))
    hudi_table = builder.build()
    batches = hudi_table.read()
    data = pa.Table.from_batches(batches) if batches else hudi_table.get_schema().empty_table()
    keep = [name for name in data.column_names if not name.startswith(META_PREFIX)]
    return data.select(keep)
