"""The ingest benchmark's workload: batches of 70% updates, 20% inserts and 10% deletes of an
orders table that already holds ``table_rows`` rows, staged exactly as the stager stages them.

Every change is a TiCDC canal-json message (one row, one transaction, increasing
``_tidb.commitTs``) decoded by :func:`tidelake.formats.decode` and written with
:class:`~tidelake.stage.batch.Batch`: one staged batch (files + manifest) per bench batch.
Within a batch every key appears once, so the records Hudi receives equal the batch size.

Keys: the base table holds ids ``1..table_rows``. Updates and deletes pick live keys among
the ``hot_keys`` lowest ids (all of them when ``hot_keys`` is None); inserts take fresh ids
from :data:`FIRST_NEW_ID` up, above any base table, so that the same batches apply
identically to a base of 1M and one of 10M rows (commit time vs table size).
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import orjson

from tidelake.events import ChangeEvent
from tidelake.formats import decode
from tidelake.runtime.storage import Storage
from tidelake.stage.batch import Batch, BatchLimits
from tidelake.stage.manifest import Manifest
from tidelake.workload.orders import DATABASE, PRIMARY_KEYS, SCHEMAS

TABLE = "orders"
TABLE_ID = f"{DATABASE}.{TABLE}"
COLUMNS: dict[str, str] = SCHEMAS[TABLE]
PK: tuple[str, ...] = PRIMARY_KEYS[TABLE]
#: Ids of inserted rows start here: above every base table the bench builds.
FIRST_NEW_ID = 1_000_000_000
#: ``_tidb.commitTs`` (TSO) of every base-table row: below any change's commitTs.
BASE_COMMIT_MS = 1_700_000_000_000
BASE_TSO = BASE_COMMIT_MS << 18
#: Share of each kind of change in a batch.
MIX = {"UPDATE": 0.7, "INSERT": 0.2, "DELETE": 0.1}
_STATUSES = ("new", "paid", "packed", "shipped", "delivered", "returned")
_SQL_TYPES = {"id": -5, "customer_id": -5, "order_total": 3, "status": 12, "order_date": 91,
              "updated_at": 93}  # fmt: skip


@dataclass
class BenchBatch:
    """One staged batch: its manifest and its decoded events (with stream sequences)."""

    manifest: Manifest
    events: list[ChangeEvent]
    updates: int
    inserts: int
    deletes: int


@dataclass
class ChangeStream:
    """Generates the bench batches; keeps the live keys and the stream sequence."""

    table_rows: int
    hot_keys: int | None = None
    seed: int = 11
    _rng: random.Random = field(init=False)
    _live: list[int] = field(init=False)
    _next_id: int = field(init=False, default=FIRST_NEW_ID)
    _seq: int = field(init=False, default=0)
    _tso: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        pool = self.table_rows if self.hot_keys is None else min(self.hot_keys, self.table_rows)
        self._live = list(range(1, pool + 1))
        self._tso = int(time.time() * 1000) << 18

    @property
    def live_keys(self) -> int:
        """Live keys in the update/delete pool (base keys not deleted, plus inserted ones)."""
        return len(self._live)

    def _row(self, key: int) -> dict[str, str | None]:
        r = self._rng
        return {
            "id": str(key),
            "customer_id": str(r.randint(1, 50_000)),
            "order_total": f"{r.randint(100, 99_999) / 100:.2f}",
            "status": r.choice(_STATUSES),
            "order_date": "2026-05-0" + str(r.randint(1, 9)),
            "updated_at": f"2026-05-05 12:{r.randint(0, 59):02d}:{r.randint(0, 59):02d}",
        }

    def _message(self, kind: str, row: dict[str, str | None]) -> bytes:
        self._tso += 1
        body = {
            "id": 0,
            "database": DATABASE,
            "table": TABLE,
            "pkNames": list(PK),
            "isDdl": False,
            "type": kind,
            "es": self._tso >> 18,
            "ts": int(time.time() * 1000),
            "sql": "",
            "sqlType": _SQL_TYPES,
            "mysqlType": COLUMNS,
            "old": [{"status": "new"}] if kind == "UPDATE" else None,
            "data": [row],
            "_tidb": {"commitTs": self._tso},
        }
        return orjson.dumps(body)

    def messages(self, size: int) -> Iterator[tuple[str, bytes]]:
        """``size`` canal-json messages (kind, payload), each key at most once."""
        updates = round(size * MIX["UPDATE"])
        deletes = round(size * MIX["DELETE"])
        inserts = size - updates - deletes
        if updates + deletes > len(self._live):
            raise ValueError(f"{updates + deletes} updates and deletes but {len(self._live)} keys")
        picks = self._rng.sample(range(len(self._live)), updates + deletes)
        chosen = [
            (self._live[i], "UPDATE" if n < updates else "DELETE") for n, i in enumerate(picks)
        ]
        # Remove the deleted keys (swap-remove, highest index first keeps the others valid).
        for i in sorted(picks[updates:], reverse=True):
            self._live[i] = self._live[-1]
            self._live.pop()
        new_keys = list(range(self._next_id, self._next_id + inserts))
        self._next_id += inserts
        self._live.extend(new_keys)
        kinds = chosen + [(k, "INSERT") for k in new_keys]
        self._rng.shuffle(kinds)
        for key, kind in kinds:
            yield kind, self._message(kind, self._row(key))

    def stage(self, storage: Storage, size: int) -> BenchBatch:
        """Decode ``size`` messages and stage them as one batch (files, then manifest)."""
        batch: Batch[int] = Batch(BatchLimits(max_events=size + 1, max_age_s=1e9))
        counts = {"UPDATE": 0, "INSERT": 0, "DELETE": 0}
        events: list[ChangeEvent] = []
        for kind, payload in self.messages(size):
            self._seq += 1
            decoded = decode(payload, seq=self._seq)
            batch.add_events(self._seq, self._seq, len(payload), decoded.events)
            events.extend(decoded.events)
            counts[kind] += 1
        manifest = batch.flush(storage)
        return BenchBatch(manifest, events, counts["UPDATE"], counts["INSERT"], counts["DELETE"])
