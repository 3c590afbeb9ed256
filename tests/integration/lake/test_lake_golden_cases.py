"""Every golden case of tests/cases/ through the whole pipeline: published to a real
nats-server (message keys as the ``Tidelake-Key`` header), staged by a real ``tidelake stage``
process, ingested into Hudi by the real ingest, read back by hudi-rs.

The messages go in two halves, each staged and ingested on its own, so every case also
crosses a batch cut and an ingest restart (a new :class:`Ingestor` reads its checkpoints back
from Hudi). Events a case says the lake must refuse are in the dead-letter stream with their
reason; every other row is in the lake exactly as expected.
"""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import DataType, FloatType
from stagekit import StageEnv, make_stage_env, run, stop_process

from golden import Case, load_cases, sort_key
from tidelake.bus import dlq
from tidelake.bus.server import EmbeddedNats
from tidelake.config import load_config
from tidelake.lake.hudi import split_table_id, table_path
from tidelake.lake.ingest import Ingestor
from tidelake.lake.schema import TEXT_FORM, converter
from tidelake.lake.store import read_checkpoint
from tidelake.stage.consumer import KEY_HEADER
from tidelake.verify.lake import read_table

pytestmark = pytest.mark.integration

CASES = load_cases()


def _stage_once(env: StageEnv) -> None:
    proc = env.spawn_stager(once=True)
    try:
        assert 0 == proc.wait(300), env.log_text()
    except subprocess.TimeoutExpired:
        stop_process(proc)
        raise AssertionError("the stager did not drain:\n" + env.log_text()[-3000:]) from None


async def _publish(env: StageEnv, case: Case, part: range) -> None:
    prefix = env.cfg.bus.stream.subjects[0].removesuffix(">")
    nc = await env.client()
    try:
        js = nc.jetstream()
        for i in part:
            subject = case.subjects[i] if case.subjects[i] else case.name
            key = case.keys[i]
            headers = {KEY_HEADER: key.decode()} if key is not None else None
            await js.publish(
                prefix + subject.removeprefix("cdc."), case.messages[i], headers=headers
            )
    finally:
        await nc.close()


def _stored_types(spark: SparkSession, root: str, table_id: str) -> dict[str, DataType]:
    """Column → Spark type of the table as stored."""
    path = table_path(root, *split_table_id(table_id))
    return {f.name: f.dataType for f in spark.read.format("hudi").load(path).schema}


def _declared(spark: SparkSession, root: str, table_id: str) -> dict[str, str]:
    """Column → source type the table declares (its checkpoint, ``lake/definitions.py``)."""
    committed = read_checkpoint(spark, table_path(root, *split_table_id(table_id)))
    return committed.checkpoint.columns if committed else {}


def _typed(value: Any, source_type: str | None, stored: DataType, zone: str) -> Any:
    """An expected value, in the source's own text, as the lake stores it: typed by the
    table's declared type in the source's zone, into the stored type (a FLOAT as float32)."""
    fallback = {"timestamp": "datetime", "string": "text", "binary": "varbinary"}
    kind = source_type or fallback.get(stored.simpleString(), stored.simpleString())
    typed = converter(kind, zone, TEXT_FORM, stored)(value)
    if isinstance(stored, FloatType) and typed is not None:
        return struct.unpack("f", struct.pack("f", typed))[0]
    return typed


def _by_key(rows: list[dict[str, Any]], pk: list[str]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda row: sort_key(tuple(str(row[c]) for c in pk)))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_golden_case_ends_as_expected_in_the_lake(
    case: Case, nats_server: EmbeddedNats, spark: SparkSession, tmp_path: Path
) -> None:
    """The lake holds exactly the case's expected rows (typed as stored), and the events the
    case refuses are in the dead-letter stream with their reasons."""
    overrides: dict[str, Any] = {"lake": {"spark": {"master": "local[2]", "driver_memory": "1g"}}}
    for section, values in case.config.items():
        overrides.setdefault(section, {}).update(values)
    env = make_stage_env(nats_server, tmp_path / "home", overrides)
    half = len(case.messages) // 2
    for part in (range(half), range(half, len(case.messages))):
        run(_publish(env, case, part))
        _stage_once(env)
        cfg = load_config(env.config_path, environ={})
        stats = Ingestor(cfg, spark).run_once()
        assert {} == stats.refused, stats.refused

    letters = run(env.dlq_messages())
    reasons = sorted((m.headers or {}).get(dlq.HEADER_REASON, "") for m in letters)
    assert len(case.dead_letters) == len(letters), reasons
    for want in case.dead_letters:
        assert any(want["table"] in r and want.get("reason_contains", "") in r for r in reasons), (
            want,
            reasons,
        )

    for table_id, spec in sorted(case.expected.items()):
        pk = spec["pk"]
        stored = _stored_types(spark, cfg.lake_root, table_id)
        declared = _declared(spark, cfg.lake_root, table_id)
        zone = cfg.lake.source_timezone
        columns = list(spec["rows"][0]) if spec["rows"] else list(pk)
        expected = [
            {c: _typed(r.get(c), declared.get(c), stored[c], zone) for c in columns}
            for r in spec["rows"]
        ]
        actual = [
            {c: r.get(c) for c in columns} for r in read_table(cfg.lake_root, table_id).to_pylist()
        ]
        assert _by_key(expected, pk) == _by_key(actual, pk), table_id
    for table_id in case.dropped_tables:
        path = table_path(cfg.lake_root, *split_table_id(table_id))
        assert not Path(path).exists(), f"{table_id} is still in the lake"
    catalog = {db.name for db in spark.catalog.listDatabases()}
    for database in case.databases:
        assert database in catalog, f"database {database} is not in the catalog"
