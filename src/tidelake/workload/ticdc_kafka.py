"""TiCDC's Kafka sink layout for canal-json, laid out from the workload's messages: where each
message goes and which watermarks go with it (``demo --kafka`` and the Kafka tests). TiCDC
itself cannot run here (no TiDB), so this follows its code (pingcap/tiflow, read for
docs/kafka.md):

* rows: the partition dispatcher hashes the schema and table (``table``, the default:
  ``cdc/sink/dmlsink/mq/dispatcher/partition/table.go``) or the table and the handle-key
  values (``index-value``: ``partition/index_value.go``) modulo the partition count; the
  exact hash (``pkg/hash/position_inertia.go``) does not matter to a consumer, which never
  recomputes it, so CRC32 stands in;
* DDLs: partition 0 only (``cdc/sink/ddlsink/mq/mq_ddl_sink.go``, ``getDDLDispatchRule``);
* watermarks: ``{"type": "TIDB_WATERMARK", "_tidb": {"watermarkTs": ts}}`` with every row at or
  below ``ts`` already written, to every partition (``WriteCheckpointTs``,
  ``canal_json_row_event_encoder.go`` ``newJSONMessage4CheckpointEvent``);
* no message key (``AppendRowChangedEvent``: ``Key: nil``).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

import orjson


@dataclass(frozen=True)
class Placed:
    """One Kafka record to produce: the partition, the value."""

    partition: int
    value: bytes


def watermark(ts: int) -> bytes:
    """A TiCDC canal-json watermark message (tidb extension) for ``ts``."""
    return orjson.dumps(
        {
            "id": 0,
            "database": "",
            "table": "",
            "pkNames": None,
            "isDdl": False,
            "type": "TIDB_WATERMARK",
            "es": ts >> 18,
            "ts": 0,
            "sql": "",
            "sqlType": None,
            "mysqlType": None,
            "data": None,
            "old": None,
            "_tidb": {"watermarkTs": ts},
        }
    )


def _partition(body: dict[str, Any], partitions: int, dispatcher: str) -> int:
    if body.get("isDdl"):
        return 0
    text = f"{body['database']}.{body['table']}"
    if dispatcher == "index-value":
        row = body["data"][0]
        text += "|" + "|".join(f"{k}={row.get(k)}" for k in body["pkNames"])
    return zlib.crc32(text.encode()) % partitions


def lay_out(
    transactions: Iterable[list[bytes]],
    partitions: int,
    dispatcher: Literal["table", "index-value"] = "index-value",
    watermark_every: int = 20,
) -> list[Placed]:
    """The records of ``transactions`` (each a list of canal-json values sharing a commitTs) in
    the order TiCDC writes them, with a watermark to every partition after every
    ``watermark_every`` transactions and after the last."""
    out: list[Placed] = []
    last_ts = None
    for n, txn in enumerate(transactions, 1):
        for value in txn:
            body = orjson.loads(value)
            out.append(Placed(_partition(body, partitions, dispatcher), value))
            last_ts = body["_tidb"]["commitTs"]
        if n % watermark_every == 0 and last_ts is not None:
            out += [Placed(p, watermark(last_ts)) for p in range(partitions)]
    if last_ts is not None:
        out += [Placed(p, watermark(last_ts)) for p in range(partitions)]
    return out
