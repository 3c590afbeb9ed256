"""The sources a chaos run drives: what produces the changes, and what the lake must equal.

* :class:`WorkloadSource` — the order workload, published by the harness itself as TiCDC
  canal-json (no producer process to kill);
* :class:`MariaDBSource` — a private MariaDB changed by the order workload as SQL, turned
  into canal-json by ``tidelake capture`` (a child of the stack, and a victim like the
  others); the lake is verified against the live tables;
* :class:`DebeziumSource` — the same MariaDB and workload captured by a real Debezium
  Server (``pipeline/debezium_server.py``), whose JVM is a victim too.

Each source says which config settings and environment it adds (:meth:`configure`,
:meth:`env`), starts producing (:meth:`start`), says when everything it produced is on the
bus (:meth:`published`), and verifies the lake (:meth:`verify`: per table the counts the
chaos result reports — lost, duplicated, unexpected, different).
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any, Protocol

# The verification modules are imported here, when the run starts, not lazily at its end:
# a run lasts long, and a lazy import then could mix module versions of a working tree
# that changed meanwhile (seen: a verify failing on a helper its newer module expected).
import tidelake.verify.lake
import tidelake.verify.source
from tidelake.bus.connection import connect
from tidelake.config import Config
from tidelake.pipeline.demo import publish_workload, verify_workload
from tidelake.workload.orders import DATABASE, SCHEMAS, OrderWorkload, WorkloadSpec


class ChaosSource(Protocol):
    """What produces the run's changes."""

    error: BaseException | None

    def configure(self) -> dict[str, Any]: ...
    def env(self) -> dict[str, str]: ...
    def start(self, cfg: Config, url: str) -> None: ...
    def finished(self) -> bool: ...
    def published(self, cfg: Config, url: str) -> bool: ...
    @property
    def events(self) -> int: ...
    def verify(self, cfg: Config) -> dict[str, dict[str, Any]]: ...
    def close(self) -> None: ...


async def stream_position(cfg: Config, url: str) -> tuple[int, int, int]:
    """(last stream sequence, consumer pending, consumer ack-pending)."""
    nc = await connect(cfg.bus, url)
    try:
        js = nc.jetstream()
        stream = await js.stream_info(cfg.bus.stream.name)
        consumer = await js.consumer_info(cfg.bus.stream.name, cfg.bus.consumer.durable)
        return (
            int(stream.state.last_seq),
            int(consumer.num_pending or 0),
            int(consumer.num_ack_pending or 0),
        )
    finally:
        await nc.close()


def _counts(
    rows_expected: int,
    rows_in_lake: int,
    missing: int,
    unexpected: int,
    different: int,
    duplicate_keys: int,
    samples: list[str],
) -> dict[str, Any]:
    """One table's verdict as the chaos result reports it."""
    return {
        "rows_expected": rows_expected,
        "rows_in_lake": rows_in_lake,
        "lost": missing,
        "duplicated": duplicate_keys,
        "unexpected": unexpected,
        "different": different,
        "mismatches": missing + unexpected + different + duplicate_keys,
        "samples": samples,
    }


class WorkloadSource:
    """The order workload, published by this process as TiCDC canal-json."""

    def __init__(self, events: int, seed: int, rate: float) -> None:
        self.workload = OrderWorkload(WorkloadSpec(events=events, seed=seed))
        self.rate = rate
        self.error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def configure(self) -> dict[str, Any]:
        """The config settings this source adds (none)."""
        return {}

    def env(self) -> dict[str, str]:
        return {}

    def start(self, cfg: Config, url: str) -> None:
        def publish() -> None:
            try:
                asyncio.run(publish_workload(cfg, url, self.workload, self.rate))
            except BaseException as exc:
                self.error = exc

        self._thread = threading.Thread(target=publish, name="workload", daemon=True)
        self._thread.start()

    def finished(self) -> bool:
        return self._thread is not None and not self._thread.is_alive()

    def published(self, cfg: Config, url: str) -> bool:
        return self.finished()  # the publisher returns once every PubAck is in

    @property
    def events(self) -> int:
        return self.workload.emitted

    def verify(self, cfg: Config) -> dict[str, dict[str, Any]]:
        return {
            c.table: _counts(
                c.rows_expected,
                c.rows_in_lake,
                c.missing,
                c.unexpected,
                c.different,
                c.duplicate_keys,
                c.samples + c.schema,
            )
            for c in verify_workload(cfg, self.workload)
        }

    def close(self) -> None:
        return None


class MariaDBSource:
    """A private MariaDB changed by the order workload as SQL; ``tidelake capture`` (a victim
    like the others) turns its binlog into canal-json. Verified against the live tables."""

    def __init__(self, events: int, seed: int, rate: float, home: Path) -> None:
        from tidelake.capture.servers import MariaDBServer

        self.spec = WorkloadSpec(events=events, seed=seed)
        self.rate = rate
        self.server = MariaDBServer(home / "mariadb")
        self.error: BaseException | None = None
        self.rows_changed = 0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    @property
    def dsn(self) -> str:
        return f"mysql://{self.server.user}@{self.server.host}:{self.server.port}/"

    def configure(self) -> dict[str, Any]:
        """Start the server, create the schema; the ``capture`` settings (the stack then runs
        ``tidelake capture``, a victim like the others)."""
        from tidelake.workload.sql import schema_statements

        self.server.start()
        conn = self.server.connect()
        try:
            with conn.cursor() as cur:
                for statement in schema_statements("mysql"):
                    cur.execute(statement)
        finally:
            conn.close()
        return {"capture": {"source": self.dsn, "tables": ["shop.*"]}}

    def env(self) -> dict[str, str]:
        return {"TIDELAKE_CAPTURE__PASSWORD": self.server.password}

    def start(self, cfg: Config, url: str) -> None:
        from tidelake.workload.sql import run_sql_workload

        def write() -> None:
            conn = self.server.connect(autocommit=False)
            try:
                run = run_sql_workload(
                    conn, self.spec, rate=self.rate, should_stop=self._stop.is_set
                )
                self.rows_changed = run.rows_changed
            except BaseException as exc:
                self.error = exc
            finally:
                conn.close()

        self._thread = threading.Thread(target=write, name="sql-workload", daemon=True)
        self._thread.start()

    def finished(self) -> bool:
        return self._thread is not None and not self._thread.is_alive()

    def published(self, cfg: Config, url: str) -> bool:
        """The workload is done and the capture has published every change it made."""
        if not self.finished():
            return False
        last, _, _ = asyncio.run(stream_position(cfg, url))
        return last >= self.rows_changed

    @property
    def events(self) -> int:
        return self.rows_changed

    def verify(self, cfg: Config) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for table in SCHEMAS:
            c = tidelake.verify.source.verify_table(
                self.dsn, cfg.lake_root, f"{DATABASE}.{table}", self.server.password
            )
            if c.error:
                raise RuntimeError(f"verify {c.table}: {c.error}")
            out[c.table] = _counts(
                c.rows_source,
                c.rows_lake,
                c.missing,
                c.unexpected,
                c.different,
                c.duplicate_keys,
                c.samples,
            )
        return out

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        self.server.stop()


#: What Debezium's ChangeEventSourceCoordinator logs once the snapshot is done and the
#: streaming source runs: the workload starts after it, so every change is streamed.
DEBEZIUM_STREAMING = "Starting streaming"


class DebeziumSource(MariaDBSource):
    """The same private MariaDB and SQL workload, captured by a real Debezium Server
    (MariaDbConnector, JSON with schemas, the ``nats-jetstream`` sink) instead of
    ``tidelake capture``. The Debezium Server JVM is a victim (:meth:`victim`): killed,
    paused, restarted from its saved offsets."""

    def __init__(self, events: int, seed: int, rate: float, home: Path) -> None:
        super().__init__(events, seed, rate, home)
        self.workdir = home / "debezium"
        self.debezium: Any = None  # pipeline.debezium_server.DebeziumServer once started

    def configure(self) -> dict[str, Any]:
        """Start the server, create the schema; Debezium's sink sends no key, so the primary
        keys come from ``lake.tables`` (no ``capture``: Debezium is the producer)."""
        from tidelake.workload.orders import PRIMARY_KEYS

        super().configure()
        tables = {f"{DATABASE}.{t}": {"primary_key": list(pk)} for t, pk in PRIMARY_KEYS.items()}
        return {"lake": {"tables": tables}}

    def env(self) -> dict[str, str]:
        return {}

    def properties(self, url: str) -> dict[str, object]:
        """Debezium Server: MariaDB binlog → tidelake's CDC stream (``cdc.dbz.shop.<table>``)."""
        from tidelake.runtime.processes import free_port

        return {
            "debezium.sink.type": "nats-jetstream",
            "debezium.sink.nats-jetstream.url": url,
            # tidelake provisions its CDC stream (subjects cdc.>); the sink must not make one
            "debezium.sink.nats-jetstream.create-stream": False,
            "debezium.source.connector.class": "io.debezium.connector.mariadb.MariaDbConnector",
            "debezium.source.offset.storage.file.filename": "data/offsets.dat",
            # Every batch's offsets saved at once: a kill -9 replays as little as it can
            # (what it does replay, the lake drops by position).
            "debezium.source.offset.flush.interval.ms": 0,
            "debezium.source.schema.history.internal": (
                "io.debezium.storage.file.history.FileSchemaHistory"
            ),
            "debezium.source.schema.history.internal.file.filename": "data/schema_history.dat",
            "debezium.source.database.hostname": self.server.host,
            "debezium.source.database.port": self.server.port,
            "debezium.source.database.user": self.server.user,
            "debezium.source.database.password": self.server.password,
            "debezium.source.database.server.id": 7301,
            "debezium.source.topic.prefix": "cdc.dbz",
            "debezium.source.database.include.list": DATABASE,
            "debezium.source.include.schema.changes": False,
            "debezium.format.value": "json",
            "debezium.format.key": "json",
            "debezium.format.value.schemas.enable": True,
            "debezium.format.key.schemas.enable": True,
            "quarkus.http.port": free_port(),
            "quarkus.log.console.json": False,
        }

    def start(self, cfg: Config, url: str) -> None:
        from tidelake.pipeline.debezium_server import DebeziumServer

        self.debezium = DebeziumServer(self.workdir, self.properties(url)).start()
        self.debezium.wait_for_log(DEBEZIUM_STREAMING, timeout_s=300)
        super().start(cfg, url)

    def close(self) -> None:
        if self.debezium is not None:
            self.debezium.stop(timeout_s=30)
        super().close()
