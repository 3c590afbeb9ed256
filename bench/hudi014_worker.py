"""HoodieStreamer against the Hudi datasource writer of Hudi 0.14.0, in a PySpark of its own.

The HoodieStreamer of tidelake's Hudi (1.1.1) is not served by the Maven Central reachable
here; Hudi 0.14.0's is (``hudi-utilities_2.12``, shaded by ``bench/hudi-0.14/pom.xml`` like
the bundle it runs beside). Hudi 0.14.0 needs Spark 3.4, so this script runs in the bench's
own PySpark 3.4 virtualenv (``bench/setup``) and imports nothing but the standard library
and PySpark: ``python hudi014_worker.py JOB.json``.

Both writers get the same base table (``bulk_insert`` of the same rows), the same table
config and the same Parquet batches. Per batch the datasource upserts it, then one
long-lived HoodieStreamer's ``sync()`` takes the next file of its source directory (one
file per round, like its continuous mode); the first batch warms both up. The result is
one JSON file: seconds per batch, commit durations from the timeline, rows at the end.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

STREAMER = "org.apache.hudi.utilities.streamer.HoodieStreamer"
PARQUET_SOURCE = "org.apache.hudi.utilities.sources.ParquetDFSSource"
PAYLOAD = "org.apache.hudi.common.model.DefaultHoodieRecordPayload"


def commit_seconds(base_path: str) -> list[float]:
    """Requested-to-completed seconds of the completed commits of a Hudi 0.x timeline
    (``.hoodie/<instant>.commit`` beside ``<instant>.commit.requested``), oldest first."""
    timeline = Path(base_path) / ".hoodie"
    out = []
    for done in sorted(timeline.glob("*.commit")):
        requested = timeline / f"{done.stem}.commit.requested"
        if requested.exists():
            out.append(done.stat().st_mtime - requested.stat().st_mtime)
    return out


def main(job_file: str) -> None:
    from py4j.java_gateway import set_field
    from pyspark.sql import SparkSession

    job: dict[str, Any] = json.loads(Path(job_file).read_text())
    # On the JVM's own class path, not spark.jars: Hudi 0.14 reads the delete blocks of its
    # metadata table with Avro's class loader, which cannot see spark.jars' classes (a
    # ClassCastException to HoodieDeleteRecord once the record index holds deletes).
    builder = SparkSession.builder.config("spark.driver.extraClassPath", ":".join(job["jars"]))
    for key, value in job["spark_conf"].items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    options: dict[str, str] = job["options"]
    datasource, streamer_path = job["datasource_path"], job["streamer_path"]

    started = time.perf_counter()
    spark.read.parquet(job["base"]).write.format("hudi").options(
        **(options | {"hoodie.datasource.write.operation": "bulk_insert"})
        | {"hoodie.bulkinsert.sort.mode": "NONE"}
    ).mode("overwrite").save(datasource)
    base_s = time.perf_counter() - started
    # The streamer's table is a byte copy, so both start from the very same files.
    shutil.copytree(datasource, streamer_path)

    jvm: Any = spark.sparkContext._jvm
    cfg = jvm.org.apache.hudi.utilities.streamer.HoodieStreamer.Config()
    for name, value in {
        "targetBasePath": streamer_path,
        "targetTableName": options["hoodie.table.name"],
        "tableType": options["hoodie.datasource.write.table.type"],
        "sourceClassName": PARQUET_SOURCE,
        "sourceOrderingField": options["hoodie.datasource.write.precombine.field"],
        "payloadClassName": options["hoodie.datasource.write.payload.class"],
        "propsFilePath": Path(job["streamer_props"]).as_uri(),
    }.items():
        set_field(cfg, name, value)
    set_field(cfg, "operation", jvm.org.apache.hudi.common.model.WriteOperationType.UPSERT)
    set_field(cfg, "sourceLimit", int(job["source_limit"]))
    streamer = jvm.org.apache.hudi.utilities.streamer.HoodieStreamer(cfg, spark.sparkContext._jsc)

    seconds: dict[str, list[float]] = {"hudi_datasource": [], "hoodiestreamer": []}
    for batch in job["batches"]:
        t = time.perf_counter()
        spark.read.parquet(batch).write.format("hudi").options(**options).mode("append").save(
            datasource
        )
        seconds["hudi_datasource"].append(time.perf_counter() - t)
        t = time.perf_counter()
        streamer.sync()
        seconds["hoodiestreamer"].append(time.perf_counter() - t)
    streamer.shutdownGracefully()

    def rows(path: str) -> int:
        return int(spark.read.format("hudi").load(path).count())

    result = {
        "spark": spark.version,
        "base_build_s": base_s,
        "seconds": seconds,
        "commit_s": {
            "hudi_datasource": commit_seconds(datasource)[1:],
            "hoodiestreamer": commit_seconds(streamer_path)[1:],
        },
        "rows": {"hudi_datasource": rows(datasource), "hoodiestreamer": rows(streamer_path)},
    }
    Path(job["result"]).write_text(json.dumps(result))
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
