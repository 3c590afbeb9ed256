"""A lifecycle view records every state a row passes through, also two changes of one key in
one round (which the lake's commit nets), with the time spent in each by source commit
times; a SIGKILL before its commit is applied once when the round is read again, and an
event the lake dead-lettered never enters it, also then (view/lifecycle.py)."""

from __future__ import annotations

import asyncio
import datetime as dt
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lakekit import Lake, event, ingest_in_subprocess

from tidelake.bus.provision import provision
from tidelake.bus.server import EmbeddedNats
from tidelake.lake.store import applied_since
from tidelake.view.keeper import ViewKeeper, read_state
from tidelake.view.table import CRASH_HOOK_ENV, ViewTable

REPO = Path(__file__).resolve().parents[3]
TYPES = {"id": "bigint", "status": "varchar(16)", "amount": "decimal(10,2)"}
T0 = 1_714_929_186_000


def _change(op: str, oid: int, pos: int, status: str, at_s: int, amount: str = "1.00") -> Any:
    values = {"status": status, "amount": amount}
    return event(op, oid, pos, pos, values=values, types=TYPES, commit_ts_ms=T0 + at_s * 1000)


def _rows(lake: Lake) -> dict[tuple[int, str], tuple[int, int, bool]]:
    rows = ViewTable(lake.config, lake.spark, "life").read().collect()
    return {
        (r["id"], r["state"]): (r["times_entered"], r["ms_in_state"], r["is_current"]) for r in rows
    }


def _lake(lake_factory: Callable[..., Lake], **env: str) -> Lake:
    return lake_factory(
        TIDELAKE_VIEWS__LIFE__KIND="lifecycle",
        TIDELAKE_VIEWS__LIFE__TABLE="shop.orders",
        TIDELAKE_VIEWS__LIFE__STATE_COLUMN="status",
        **env,
    )


def _ingest(lake: Lake) -> ViewKeeper:
    keeper = ViewKeeper(lake.config, lake.spark)
    ingestor = lake.ingestor()
    ingestor.after_round = keeper
    ingestor.run_once()
    return keeper


def test_every_transition_and_its_time(lake_factory: Callable[..., Lake]) -> None:
    lake = _lake(lake_factory)
    lake.stage(
        [
            _change("insert", 1, 1, "new", 0),
            _change("insert", 2, 2, "new", 1),
            _change("update", 1, 3, "paid", 5),  # one round: the lake keeps only "paid"
        ]
    )
    _ingest(lake)
    lake.stage(
        [
            _change("update", 1, 4, "shipped", 9),
            _change("update", 1, 5, "shipped", 10),  # no change of state
            _change("delete", 2, 6, "new", 4),
            _change("update", 3, 7, "paid", 12),  # a row the view first sees in an update
        ]
    )
    keeper = _ingest(lake)
    assert _rows(lake) == {
        (1, "new"): (1, 5000, False),
        (1, "paid"): (1, 4000, False),
        (1, "shipped"): (1, 0, True),
        (2, "new"): (1, 3000, False),
        (3, "paid"): (1, 0, True),
    }
    lake.stage([_change("update", 1, 8, "paid", 20)])  # back to a state: entered twice
    keeper = _ingest(lake)
    assert _rows(lake)[(1, "paid")] == (2, 4000, True)
    assert _rows(lake)[(1, "shipped")] == (1, 11000, False)
    assert keeper.verify("life").ok
    assert read_state(lake.config)["life"]["outcome"] == "step"
    left = ViewTable(lake.config, lake.spark, "life").read().where("id = 2").collect()[0]
    assert left["left_at"].replace(tzinfo=None) == dt.datetime.fromtimestamp(
        (T0 + 4000) / 1000
    ).replace(microsecond=0)


def test_killed_before_the_view_commit_applies_once(
    lake_factory: Callable[..., Lake], nats_server: EmbeddedNats, tmp_path: Path
) -> None:
    """Each round also ends a row with an event the lake dead-letters (an amount its
    DECIMAL(10,2) would round): the view leaves it out as the lake does, in the round the
    ingest applies and in the round read again after the kill, when the ingest finds every
    event a duplicate and only the commit's own record says which one it dead-lettered."""
    lake = _lake(lake_factory, TIDELAKE_BUS__URL=nats_server.url)  # for the dead letters
    asyncio.run(provision(lake.config.bus))
    lake.stage([_change("insert", 1, 1, "new", 0), _change("insert", 2, 2, "new", 1, "9.999")])
    _ingest(lake)
    assert _rows(lake) == {(1, "new"): (1, 0, True)}
    lake.stage(
        [
            _change("update", 1, 3, "paid", 3),
            _change("update", 1, 4, "packed", 7),
            _change("update", 1, 5, "lost", 9, "0.001"),  # dead-lettered: 1 stays packed
        ]
    )
    log = tmp_path / "ingest.log"
    returncode = ingest_in_subprocess(lake, log, **{CRASH_HOOK_ENV: "before_commit"})
    assert -signal.SIGKILL == returncode, log.read_text()[-3000:]
    assert _rows(lake) == {(1, "new"): (1, 0, True)}  # the view did not commit
    assert lake.state() == {"1": ("packed",)}  # the lake did, without either dead letter
    [(_, applied), *_] = applied_since(lake.spark, lake.path(), 5)
    assert applied is not None
    assert {s for s, _ in applied.dead} == {5}
    keeper = _ingest(lake)  # the round is read again: the cursor had not moved
    assert _rows(lake) == {
        (1, "new"): (1, 3000, False),
        (1, "paid"): (1, 4000, False),
        (1, "packed"): (1, 0, True),
    }
    assert keeper.verify("life").ok
