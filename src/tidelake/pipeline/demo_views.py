"""``tidelake demo --views``: the two example views over the demo's order system, kept by the
ingest through the workload's deletes and schema changes and two kill -9 of the ingest — one
while a round commits, one while the views update — then checked (docs/views.md).

* ``customer_activity``: every customer (``shop.customers`` LEFT JOIN ``shop.orders``) with its
  orders, spend and last order date, an aggregate join view kept from both tables' change
  logs: a customer without orders has 0 of them. With ``--with-ddl`` ``order_total`` is
  renamed to ``total_amount`` and widened mid-stream, and ``customers`` gains and loses
  columns: the view follows the rename and is rebuilt. Checked against a full recomputation
  over the same base commits (``view verify``).
* ``order_lifecycle``: every status each order passes through and the time it spent in each,
  kept from the rounds' events. Checked against a replay of the whole stream: every orders
  message read back from JetStream, decoded by the product's own decoder, and the states and
  stays recomputed here by a separate, plain walk — plus the view's own check that each
  order's current state equals its status in the lake.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from tidelake.config import Config
from tidelake.view.keeper import read_state
from tidelake.workload.orders import DATABASE

if TYPE_CHECKING:
    from tidelake.pipeline.stack import LocalStack

ACTIVITY = "customer_activity"
LIFECYCLE = "order_lifecycle"
ORDERS = f"{DATABASE}.orders"
CUSTOMERS = f"{DATABASE}.customers"


def settings(with_ddl: bool) -> dict[str, Any]:
    """The ``views:`` the demo configures (the column as the stream first names it)."""
    return {
        "views": {
            ACTIVITY: {
                "sql": (
                    "SELECT c.id AS customer_id, c.name, COUNT(o.id) AS orders, "
                    "SUM(o.order_total) AS spend, MAX(o.order_date) AS last_order "
                    f"FROM {CUSTOMERS} c LEFT JOIN {ORDERS} o ON o.customer_id = c.id "
                    "GROUP BY c.id, c.name"
                ),
                "description": "orders, spend and last order of every customer",
            },
            LIFECYCLE: {
                "kind": "lifecycle",
                "table": ORDERS,
                "state_column": "status",
                "description": "each order's statuses and the time spent in each",
            },
        }
    }


class DemoViews:
    """The views' part of the demo: faults during the run, the wait and the checks after."""

    def __init__(self) -> None:
        self.faults: list[str] = []
        #: The kill -9 thread is between killing the ingest and starting it again.
        self.restarting = threading.Event()
        self._killer: threading.Thread | None = None

    def kill_ingest_twice(self, stack: LocalStack) -> None:
        """In a thread: kill -9 the ingest once while a round commits, once while the views
        update, and start it again at once each time (as ``tidelake run`` would)."""

        def wait_for(state: str, phase: str | None, timeout_s: float = 600) -> bool:
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                beat = stack.ingest_heartbeat() or {}
                round_info = beat.get("round") or {}
                if beat.get("state") == state and (
                    phase is None or round_info.get("phase") == phase
                ):
                    return True
                time.sleep(0.05)
            return False

        def run() -> None:
            for state, phase, what in (
                ("applying", "committing", "while a round commits"),
                ("updating views", None, "while the views update"),
            ):
                if not wait_for(state, phase):
                    self.faults.append(f"ingest not killed {what} (never seen in 600 s)")
                    continue
                self.restarting.set()
                child = stack.child("ingest")
                child.kill()
                self.faults.append(f"kill -9 ingest {what}")
                child.start()
                self.restarting.clear()
                stack.wait_healthy(300)

        self._killer = threading.Thread(target=run, daemon=True, name="view-faults")
        self._killer.start()

    def wait_faults(self, timeout_s: float = 600) -> None:
        if self._killer is not None:
            self._killer.join(timeout_s)

    def wait_views(self, cfg: Config, since_ms: int, timeout_s: float) -> None:
        """Until every view ran, after ``since_ms`` (the lake caught up), with success."""
        deadline = time.monotonic() + timeout_s
        while True:
            state = read_state(cfg)
            done = [
                n
                for n in cfg.views
                if state.get(n, {}).get("ran_at_ms", 0) > since_ms
                and state[n].get("outcome") in ("step", "rebuild", "current")
            ]
            if len(done) == len(cfg.views):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"views not updated within {timeout_s:.0f} s: {state}")
            time.sleep(0.25)

    def verify(self, cfg: Config, bus_url: str) -> list[dict[str, Any]]:
        """Each view against its recomputation (the stack stopped: this takes the lake)."""
        from tidelake.lake.spark import build_spark_session
        from tidelake.view.keeper import ViewKeeper
        from tidelake.view.table import ViewTable

        spark = build_spark_session(cfg, app_name="tidelake-demo-views")
        try:
            keeper = ViewKeeper(cfg, spark)
            out = []
            for name in cfg.views:
                result = keeper.verify(name)
                out.append(
                    {
                        "view": name,
                        "rows": result.rows,
                        "expected": result.expected,
                        "mismatches": result.extra + result.missing,
                        "check": (
                            "its current states against the lake"
                            if cfg.views[name].kind == "lifecycle"
                            else "a full recomputation from the lake"
                        ),
                    }
                )
            expected = asyncio.run(replayed_lifecycle(cfg, bus_url))
            rows = ViewTable(cfg, spark, LIFECYCLE).read().collect()
            held = {
                (str(r["id"]), r["state"]): (
                    r["times_entered"],
                    r["ms_in_state"],
                    r["is_current"],
                )
                for r in rows
            }
            differ = sorted(k for k in set(held) | set(expected) if held.get(k) != expected.get(k))
            out.append(
                {
                    "view": LIFECYCLE,
                    "rows": len(held),
                    "expected": len(expected),
                    "mismatches": len(differ),
                    "check": "a replay of every orders message in the stream",
                    "samples": [
                        f"{k}: view {held.get(k)} replay {expected.get(k)}" for k in differ[:5]
                    ],
                }
            )
            return out
        finally:
            spark.stop()


async def replayed_lifecycle(
    cfg: Config, bus_url: str
) -> dict[tuple[str, str | None], tuple[int, int, bool]]:
    """(order id, status) → (times entered, ms in status, current), recomputed from every
    orders message of the stream in stream order, decoded by ``formats.decode``."""
    from tidelake.bus.connection import connect
    from tidelake.bus.scan import scan_stream
    from tidelake.events import Op
    from tidelake.formats import decode

    nc = await connect(cfg.bus, bus_url)
    try:
        js = nc.jetstream()
        subject = f"cdc.{DATABASE}.orders"
        info = await js.stream_info(cfg.bus.stream.name, subjects_filter=subject)
        total = int((info.state.subjects or {}).get(subject, 0))
        messages = await scan_stream(js, subject, total)
    finally:
        await nc.close()
    seen: set[str] = set()
    #: order → (status, entered at ms); per (order, status) [times, ms, current]
    current: dict[str, tuple[str | None, int]] = {}
    stays: dict[tuple[str, str | None], list[Any]] = defaultdict(lambda: [0, 0, False])
    for msg in messages:
        seq = int(msg.metadata.sequence.stream)
        for e in decode(msg.data, seq=seq, subject=msg.subject).events:
            if e.op is Op.DDL or e.position.encode() in seen:
                continue
            seen.add(e.position.encode())
            order = str((e.key or {})["id"])
            at = int(e.commit_ts_ms or 0)
            now = current.get(order)
            if e.op is Op.DELETE:
                if now is not None:
                    stays[(order, now[0])][1] += at - now[1]
                    stays[(order, now[0])][2] = False
                    del current[order]
                continue
            status = (e.after or {}).get("status")
            if now is not None and now[0] == status:
                continue
            if now is not None:
                stays[(order, now[0])][1] += at - now[1]
                stays[(order, now[0])][2] = False
            stays[(order, status)][0] += 1
            stays[(order, status)][2] = True
            current[order] = (status, at)
    return {k: (v[0], v[1], v[2]) for k, v in stays.items()}
