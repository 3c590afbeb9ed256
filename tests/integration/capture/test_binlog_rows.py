"""The fast row image reader (``capture/binlog_rows.py``) against python-mysql-replication's
own reader, on the same real MariaDB binlog: every row of every image reads the same."""

from __future__ import annotations

from typing import Any

import pytest
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import (
    DeleteRowsEvent,
    RowsEvent,
    UpdateRowsEvent,
    WriteRowsEvent,
)

from tidelake.capture import binlog_rows
from tidelake.capture.servers import MariaDBServer

pytestmark = pytest.mark.integration

COLUMNS = (
    "id bigint PRIMARY KEY, ti tinyint, tiu tinyint unsigned, si smallint, "
    "siu smallint unsigned, i int, iu int unsigned, bi bigint, biu bigint unsigned, "
    "c char(5), vc varchar(20), long_vc varchar(300), l1 varchar(10) CHARACTER SET latin1, "
    "bin varbinary(8), d decimal(10,2), e enum('a','b')"
)
ROWS = [
    (1, -128, 255, -32768, 65535, -(2**31), 2**32 - 1, -(2**63), 2**64 - 1,
     "é", "", "x" * 300, "déjà", b"\x00\xff", "1.50", "b"),
    (2, 127, 0, 32767, 0, 2**31 - 1, 0, 2**63 - 1, 0,
     "a  ", " ", "ü" * 299, "", b"", "-0.01", "a"),
    (3, None, None, None, None, None, None, None, None,
     None, None, None, None, None, None, None),
]  # fmt: skip


def _images(server: MariaDBServer, start: tuple[str, int]) -> list[dict[str, Any]]:
    reader = BinLogStreamReader(
        connection_settings={
            "host": server.host,
            "port": server.port,
            "user": server.user,
            "password": server.password,
        },
        server_id=4_000_778,
        log_file=start[0],
        log_pos=start[1],
        resume_stream=True,
        blocking=False,
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
    )
    try:
        return [row for event in reader if event.schema == "fastrows" for row in event.rows]
    finally:
        reader.close()


def test_fast_reader_reads_what_the_library_reads(
    mariadb: MariaDBServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inserts, an update of every column and deletes over integer extremes, multi-byte and
    latin1 text, a 2-byte-length VARCHAR, NULLs and types left to the library: the row images
    (values and none_sources) are equal under both readers, and the fast one is in use."""
    conn = mariadb.connect()
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
        cur.execute("CREATE DATABASE fastrows")
        cur.execute(f"CREATE TABLE fastrows.t ({COLUMNS})")
        marks = ", ".join(["%s"] * len(ROWS[0]))
        cur.executemany(f"INSERT INTO fastrows.t VALUES ({marks})", ROWS)
        cur.execute(
            "UPDATE fastrows.t SET ti = ti - 1, tiu = 7, c = 'zz', long_vc = 'y', l1 = 'ö' "
            "WHERE id IN (2, 3)"
        )
        cur.execute("DELETE FROM fastrows.t WHERE id = 1")
    conn.close()
    start = (str(file), int(pos))

    binlog_rows.install()
    assert RowsEvent._read_column_data is binlog_rows.read_column_data
    binlog_rows._plans.clear()
    fast = _images(mariadb, start)
    # The table had a plan: the fast reader read its rows, not the library behind it.
    assert any(p[1] == binlog_rows._INT for _, plan in binlog_rows._plans.values() for p in plan)
    monkeypatch.setattr(RowsEvent, "_read_column_data", binlog_rows._library_reader)
    library = _images(mariadb, start)

    assert len(library) == 3 + 2 + 1
    assert fast == library
    assert library[0]["values"]["biu"] == 2**64 - 1
    assert library[1]["values"]["long_vc"] == "ü" * 299
