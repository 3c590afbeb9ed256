"""Failed Spark and Hudi writes report their root cause (issue 15, item 8).

Every failure here is real: Hudi refusing a write whose record key differs from the table's,
Spark refusing a decimal wider than its column, Spark's analyzer and config checks. The
message a user sees must name that cause, not py4j's "An error occurred while calling
o284.save.", in the exception text (lake/jvm_errors.py), the ``IngestError`` of a commit,
and the stderr and exit status of ``tidelake ingest --once``.
"""

from __future__ import annotations

import os
import signal
import subprocess
from decimal import Decimal
from pathlib import Path

import pytest
from lakekit import Lake, ddl_event, event
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    BooleanType,
    DecimalType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from tidelake.errors import IngestError
from tidelake.lake.checkpoint import TableCheckpoint
from tidelake.lake.hudi import DELETE_FIELD, ORDERING_FIELD, write_options
from tidelake.lake.jvm_errors import SEPARATOR, describe_error, error_causes
from tidelake.lake.ledger import Ledger
from tidelake.runtime.processes import ChildProcess, tidelake_argv

REPO = Path(__file__).resolve().parents[3]


def _frame(
    spark: SparkSession, rows: list[tuple[object, ...]], value_type: DecimalType
) -> DataFrame:
    schema = StructType(
        [
            StructField("a", LongType()),
            StructField("b", LongType()),
            StructField("v", value_type),
            StructField(ORDERING_FIELD, StringType()),
            StructField(DELETE_FIELD, BooleanType()),
        ]
    )
    return spark.createDataFrame(rows, schema)


def _save(lake: Lake, df: DataFrame, path: str, key: list[str]) -> None:
    options = write_options(lake.config.lake, "shop", "pairs", key, {})
    df.write.format("hudi").options(**options).mode("append").save(path)


def test_a_record_key_conflict_is_described_by_hudis_reason(lake: Lake, tmp_path: Path) -> None:
    """A table created with record key ``a,b`` written with ``b,a``: Hudi refuses
    (``HoodieWriterUtils.validateTableConfig``) and the description is its message, both
    lines of it (the second names the key, current and existing)."""
    path = str(tmp_path / "pairs")
    row = _frame(lake.spark, [(1, 2, Decimal("1.00"), "0001", False)], DecimalType(10, 2))
    _save(lake, row, path, ["a", "b"])
    with pytest.raises(Exception) as failed:  # noqa: PT011 -- py4j's type is what arrives
        _save(lake, row, path, ["b", "a"])

    expected = (
        "HoodieException: Config conflict(key  current value  existing value): / "
        "RecordKey:  b,a  a,b"
    )
    assert expected == describe_error(failed.value)
    assert str(failed.value).startswith("An error occurred while calling")  # what was shown


def test_a_decimal_overflow_is_described_down_to_sparks_reason(lake: Lake, tmp_path: Path) -> None:
    """A value with 12 integer digits in a ``DECIMAL(10,0)`` column fails in a Spark task:
    the chain goes from Hudi's upsert through Spark's job abort to the arithmetic error,
    which comes last."""
    path = str(tmp_path / "wide")
    wide = _frame(
        lake.spark, [(1, 2, Decimal("123456789012.37"), "0001", False)], DecimalType(10, 0)
    )
    with pytest.raises(Exception) as failed:  # noqa: PT011
        _save(lake, wide, path, ["a"])

    causes = error_causes(failed.value)
    expected_kinds = ["HoodieUpsertException", "SparkException", "SparkArithmeticException"]
    assert expected_kinds == [c.kind for c in causes]
    expected_root = (
        "[DECIMAL_PRECISION_EXCEEDS_MAX_PRECISION] Decimal precision 12 exceeds max precision 10."
    )
    assert expected_root == causes[-1].message
    text = describe_error(failed.value)
    assert text.endswith(SEPARATOR + "SparkArithmeticException: " + expected_root)
    assert "\tat " not in text
    assert "\n" not in text


def test_pysparks_analysis_exception_is_described_by_its_java_origin(lake: Lake) -> None:
    """PySpark turns an ``AnalysisException`` into its own Python exception; the description
    still comes from the Java exception it keeps."""
    with pytest.raises(Exception) as failed:  # noqa: PT011
        lake.spark.sql("SELECT * FROM no_such_db.no_such_table").collect()

    assert "AnalysisException" in type(failed.value).__name__
    root = error_causes(failed.value)[-1]
    expected = "[TABLE_OR_VIEW_NOT_FOUND] The table or view `no_such_db`.`no_such_table` cannot"
    assert (True, True) == (
        root.kind.endswith("AnalysisException"),
        root.message.startswith(expected),
    )


def test_pysparks_illegal_argument_exception_is_described(lake: Lake) -> None:
    """A Java ``IllegalArgumentException`` (PySpark's ``IllegalArgumentException``) names the
    setting and the value it refused."""
    with pytest.raises(Exception) as failed:  # noqa: PT011
        lake.spark.conf.set("spark.sql.shuffle.partitions", "many")

    assert "IllegalArgumentException" == type(failed.value).__name__
    text = describe_error(failed.value)
    assert ("spark.sql.shuffle.partitions" in text, "many" in text) == (True, True), text


def test_a_failed_commit_raises_an_ingest_error_with_the_cause_chain(lake: Lake) -> None:
    """``TableStore.commit`` of a row whose record key is null: the ``IngestError`` names the
    table, Hudi's upsert and, last, Hudi's key generator refusing the null key."""
    writer = lake.ingestor().store
    schema = StructType(
        [
            StructField("id", LongType()),
            StructField(ORDERING_FIELD, StringType()),
            StructField(DELETE_FIELD, BooleanType()),
        ]
    )
    first = lake.spark.createDataFrame([(1, "0001", False)], schema)
    writer.commit("shop.keys", first, TableCheckpoint(1, "0001", 0), pk=["id"])
    keyless = lake.spark.createDataFrame([(None, "0002", False)], schema)
    with pytest.raises(IngestError) as failed:
        writer.commit("shop.keys", keyless, TableCheckpoint(2, "0002", 0), pk=["id"])

    message = str(failed.value)
    assert message.startswith("shop.keys: the Hudi write failed: HoodieUpsertException: ")
    expected_root = 'HoodieKeyException: recordKey value: "null" for field: "id" cannot be null'
    assert expected_root in message.rsplit(SEPARATOR, 1)[-1]
    assert "An error occurred while calling" not in message


# --- through the command line ----------------------------------------------------------------


def _tidelake(lake: Lake, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        tidelake_argv(*args),
        env={**os.environ, **lake.env, "COLUMNS": "200"},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_ingest_once_shows_the_root_cause_of_a_failed_write_and_exits_1(
    lake: Lake, tmp_path: Path
) -> None:
    """A Hudi option in the config that changes the record key of an existing table: the
    second ``ingest --once`` exits 1 and its stderr (the message and the log line) carries
    Hudi's config-conflict reason instead of py4j's "An error occurred while calling"."""
    lake.stage([event("insert", 1, 10, 1, values={"status": "new", "amount": "1.00"})])
    first = _tidelake(lake, "ingest", "--once")
    assert 0 == first.returncode, first.stderr[-3000:]

    config = tmp_path / "rekeyed.yaml"
    config.write_text(
        "lake:\n  hudi_options:\n    hoodie.datasource.write.recordkey.field: status\n"
    )
    lake.stage([event("update", 1, 11, 2, values={"status": "paid", "amount": "1.00"})])
    second = _tidelake(lake, "ingest", "--once", "--config", str(config))

    assert 1 == second.returncode, second.stderr[-3000:]
    expected = (
        "shop.orders: the Hudi write failed: HoodieException: Config conflict(key  current "
        "value  existing value): / RecordKey:  status  id"
    )
    failed_lines = [line for line in second.stderr.splitlines() if "ingest failed" in line]
    assert 2 == len(failed_lines), second.stderr[-3000:]  # the message and the log line
    assert all(expected in line for line in failed_lines), failed_lines
    assert "An error occurred while calling" not in second.stderr


def test_ingest_once_exits_3_when_a_table_is_paused_unless_allowed(lake: Lake) -> None:
    """A DDL the lake cannot apply pauses its table: ``ingest --once`` names the table and the
    reason, exits 3; ``--allow-paused`` exits 0; ``status`` shows the reason whole."""
    lake.stage([event("insert", 1, 10, 1, values={"status": "new", "amount": "1.00"})])
    narrowing = "ALTER TABLE orders MODIFY COLUMN amount DECIMAL(4,1)"
    lake.stage([ddl_event("shop.orders", narrowing, "ALTER", 11, 2)])

    paused = _tidelake(lake, "ingest", "--once")
    assert 3 == paused.returncode, paused.stderr[-3000:]
    reason = Ledger(lake.config.lake_state_dir).paused()["shop.orders"]
    assert "not a safe widening" in reason
    assert f"paused shop.orders: {reason}" in paused.stderr
    assert "1 table(s) paused: shop.orders" in paused.stderr

    allowed = _tidelake(lake, "ingest", "--once", "--allow-paused")
    assert 0 == allowed.returncode, allowed.stderr[-3000:]
    assert "paused shop.orders: " in allowed.stderr

    status = _tidelake(lake, "status")
    assert f"error ingest shop.orders: paused: {reason}" in status.stdout, status.stdout


def test_continuous_ingest_shows_the_cause_while_retrying_then_pauses_with_it(
    lake: Lake, tmp_path: Path
) -> None:
    """The same failing write in continuous mode: while it retries, the heartbeat's
    ``last_error`` holds the root cause; after 3 failures the table is paused with the chain
    as its reason (``paused.json``), ``status`` prints it whole, and SIGTERM still exits 0."""
    lake.stage([event("insert", 1, 10, 1, values={"status": "new", "amount": "1.00"})])
    assert 0 == _tidelake(lake, "ingest", "--once").returncode
    config = tmp_path / "rekeyed.yaml"
    config.write_text(
        "lake:\n  hudi_options:\n    hoodie.datasource.write.recordkey.field: status\n"
    )
    lake.stage([event("update", 1, 11, 2, values={"status": "paid", "amount": "1.00"})])
    state = Path(lake.config.lake_state_dir)
    proc = ChildProcess(
        "ingest",
        tidelake_argv("ingest", "--continuous", "--interval", "0.2", "--config", str(config)),
        log_path=tmp_path / "ingest.log",
        env={**lake.env, "TIDELAKE_INGEST__WARM_UP": "false"},
        cwd=REPO,
        stop_timeout_s=120,
    ).start()
    errors_seen: set[str] = set()

    def paused(_p: ChildProcess) -> bool:
        heartbeat = Ledger(state).heartbeat() or {}
        if heartbeat.get("last_error"):
            errors_seen.add(str(heartbeat["last_error"]))
        return "shop.orders" in Ledger(state).paused()

    try:
        proc.wait_until(paused, 240, "shop.orders paused")
        proc.send_signal(signal.SIGTERM)
        assert 0 == proc.wait(120), proc.log_tail(60)
    finally:
        proc.kill()

    cause = (
        "shop.orders: the Hudi write failed: HoodieException: Config conflict(key  current "
        "value  existing value): / RecordKey:  status  id"
    )
    assert [cause] == sorted(errors_seen)
    reason = Ledger(state).paused()["shop.orders"]
    assert f"{cause} (failed 3 times in a row)" == reason
    assert "table paused" in (tmp_path / "ingest.log").read_text()
    status = _tidelake(lake, "status")
    assert f"error ingest shop.orders: paused: {reason}" in status.stdout, status.stdout
