"""JVM-free reads of the lake through hudi-rs: what ``verify`` and the demo compare.

hudi-rs (the ``hudi`` package, 0.5.0) reads table version 9 as Hudi 1.1.1 writes it; the
version is pinned in lake/hudi.py so the two stay compatible. A lake on object storage is
read with the same ``storage.s3`` settings as everything else (:func:`storage_options`).
"""

from __future__ import annotations

import os

import pyarrow as pa
from hudi import HudiTableBuilder

from tidelake.config import S3Config
from tidelake.lake.hudi import is_hudi_table, local_dir, split_table_id, table_path
from tidelake.stage.storage import open_storage

#: Hudi's meta columns (and its delete marker) are not part of a table's data.
META_PREFIX = "_hoodie_"


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


def read_table(lake_root: str, table_id: str, s3: S3Config | None = None) -> pa.Table:
    """The latest snapshot of ``db.table`` without ``_hoodie_*`` columns.

    A table that has not been written yet reads as an empty table with no columns.
    """
    s3 = s3 if s3 is not None else S3Config()
    database, table = split_table_id(table_id)
    path = table_path(lake_root, database, table)
    if not _exists(path, s3):
        return pa.table({})
    builder = HudiTableBuilder.from_base_uri(path)
    if local_dir(path) is None:
        builder = builder.with_storage_options(storage_options(s3))
    hudi_table = builder.build()
    batches = hudi_table.read()
    data = pa.Table.from_batches(batches) if batches else hudi_table.get_schema().empty_table()
    keep = [name for name in data.column_names if not name.startswith(META_PREFIX)]
    return data.select(keep)
