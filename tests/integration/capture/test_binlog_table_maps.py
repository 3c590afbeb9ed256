"""The table map cache (``capture/binlog_table_maps.py``) against a real MariaDB binlog: rows
decode with the schema they were written with across ALTER, RENAME COLUMN and a table dropped
and created again under the same name, while repeated table maps are served from the cache."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import TableMapEvent, WriteRowsEvent

from tidelake.capture import binlog_table_maps
from tidelake.capture.servers import MariaDBServer

pytestmark = pytest.mark.integration


def _rows_since(server: MariaDBServer, start: tuple[str, int]) -> tuple[list[dict[str, Any]], int]:
    """Every inserted row of the binlog since ``start`` (names → values), and how many table
    map events preceded them."""
    reader = BinLogStreamReader(
        connection_settings={
            "host": server.host,
            "port": server.port,
            "user": server.user,
            "password": server.password,
        },
        server_id=4_000_777,
        log_file=start[0],
        log_pos=start[1],
        resume_stream=True,
        blocking=False,
        only_events=[TableMapEvent, WriteRowsEvent],
    )
    rows: list[dict[str, Any]] = []
    maps = 0
    try:
        for event in reader:
            if isinstance(event, TableMapEvent):
                maps += event.schema == "tmc"
            elif event.schema == "tmc":
                rows += [r["values"] for r in event.rows]
    finally:
        reader.close()
    return rows, maps


def test_rows_decode_with_their_own_schema_while_table_maps_are_reused(
    mariadb: MariaDBServer,
) -> None:
    """Three inserts, ALTER (a renamed column, an added one), two inserts, DROP + CREATE with
    other columns, one insert: each row reads with the columns of its time, and six table
    maps were decoded only three times (one per distinct schema)."""
    binlog_table_maps.install()
    binlog_table_maps.clear()
    conn = mariadb.connect()
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
        cur.execute("CREATE DATABASE tmc")
        cur.execute("CREATE TABLE tmc.t (id int PRIMARY KEY, a varchar(10))")
        for i in range(3):
            cur.execute("INSERT INTO tmc.t VALUES (%s, %s)", (i, f"a{i}"))
        cur.execute("ALTER TABLE tmc.t CHANGE a a2 varchar(10), ADD COLUMN b int")
        for i in range(3, 5):
            cur.execute("INSERT INTO tmc.t VALUES (%s, %s, %s)", (i, f"a{i}", i * 10))
        cur.execute("DROP TABLE tmc.t")
        cur.execute("CREATE TABLE tmc.t (id bigint PRIMARY KEY, c datetime)")
        cur.execute("INSERT INTO tmc.t VALUES (5, '2024-01-02 03:04:05')")
    conn.close()

    rows, maps = _rows_since(mariadb, (str(file), int(pos)))

    assert rows == [
        {"id": 0, "a": "a0"},
        {"id": 1, "a": "a1"},
        {"id": 2, "a": "a2"},
        {"id": 3, "a2": "a3", "b": 30},
        {"id": 4, "a2": "a4", "b": 40},
        {"id": 5, "c": dt.datetime(2024, 1, 2, 3, 4, 5)},
    ]
    assert maps == 6
    assert binlog_table_maps.size() == 3
