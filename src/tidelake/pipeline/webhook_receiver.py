"""A webhook receiver for ``demo --sinks`` and the route tests: what a service on the other
end of a webhook route does (route/sinks/webhook.py), in a thread of this process.

It checks each request's signature, and keeps per ``(table, key)`` the change with the
greatest position — a delete included, as a tombstone — so batches that arrive twice, late or
out of order never move a row back. ``refuse`` makes it answer ``400`` to its first requests:
a receiver's own bug, whose batches the route dead-letters and re-processes once it is fixed.

Schema changes (``op: schema``) are applied as a receiver keeping rows must apply them:

* once per table and position (a statement at or below the last one applied to its table is a
  redelivery);
* to the rows stored at a lower position only (a row a later change wrote has the new shape
  already): an added column takes its default, a dropped one goes, a renamed one moves; a
  truncate or drop at P removes them and makes every row change below P of that table void
  (a late one must not bring a row back); a table rename moves them;
* and a row change arriving **after** a schema change of its table at a higher position (a
  dead letter re-processed later) is brought forward through those changes before it is
  stored, so it lands in the table's present shape.
"""

from __future__ import annotations

import http.server
import threading
from typing import Any

import orjson

from tidelake.route.change import key_text
from tidelake.route.sinks.webhook import verify_signature

#: How old a request's signed timestamp may be (the route signs each try afresh).
SIGNATURE_TOLERANCE_S = 600


class WebhookReceiver(http.server.ThreadingHTTPServer):
    """Listens on 127.0.0.1 (a free port) once :meth:`start` is called."""

    daemon_threads = True

    def __init__(self, signing_key: str, *, refuse: int = 0) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.signing_key = signing_key
        self.lock = threading.Lock()
        self.refuse = refuse
        self.requests = 0
        self.refused = 0
        self.bad_signatures = 0
        #: (table, key text) → (position, row; None for a delete)
        self.state: dict[tuple[str, str], tuple[str, dict[str, Any] | None]] = {}
        #: table → the schema changes applied to it, (position, operation) in order.
        self.history: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        #: table → the position of its last truncate or drop.
        self.cleared: dict[str, str] = {}
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/cdc"

    def start(self) -> WebhookReceiver:
        self._thread = threading.Thread(target=self.serve_forever, daemon=True, name="webhook")
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self.shutdown()
            self._thread.join(10)
            self._thread = None
        self.server_close()

    def rows(self, table: str) -> list[dict[str, Any]]:
        """The rows ``table`` holds now (deleted keys left out)."""
        with self.lock:
            return [row for (t, _), (_, row) in self.state.items() if t == table and row]

    def receive(self, headers: dict[str, str], body: bytes) -> int:
        """Apply one request; its HTTP status."""
        with self.lock:
            self.requests += 1
            if not verify_signature(
                self.signing_key, headers, body, tolerance_s=SIGNATURE_TOLERANCE_S
            ):
                self.bad_signatures += 1
                return 401
            if self.refuse > 0:
                self.refuse -= 1
                self.refused += 1
                return 400
            for change in orjson.loads(body)["changes"]:
                if change["op"] == "schema":
                    self._schema(change)
                    continue
                table, position = change["table"], change["position"]
                if position < self.cleared.get(table, ""):
                    continue  # the table was truncated or dropped after it
                row = change["row"]
                for at, op in self.history.get(table, ()):
                    if row is not None and at > position:
                        row = _forward(row, op)
                slot = (table, key_text(change["key"]))
                held = self.state.get(slot)
                if held is None or held[0] < position:
                    self.state[slot] = (position, row)
            return 200

    def _schema(self, change: dict[str, Any]) -> None:
        position = change["position"]
        history = self.history.setdefault(change["table"], [])
        if history and history[-1][0] >= position:
            return  # applied already
        history.append((position, {"op": "noop"}))
        for op in change["operations"]:
            table = op["table"]
            if op["op"] == "drop_database":
                tables = {t for t, _ in self.state if t.split(".", 1)[0] == op["database"]}
                for name in tables:
                    self._clear(name, position)
                continue
            if op["op"] in ("truncate_table", "drop_table"):
                self._clear(table, position)
                continue
            if op["op"] == "rename_table":
                self._clear(op["to"], position)  # what the new name held is stale
                for slot in [s for s in self.state if s[0] == table]:
                    self.state[(op["to"], slot[1])] = self.state.pop(slot)
                self.history[op["to"]] = self.history.pop(table, [])
                self.cleared[table] = position  # a late row of the old name has no table
                continue
            self.history.setdefault(table, []).append((position, op))
            for slot, (at, row) in list(self.state.items()):
                if slot[0] == table and row is not None and at < position:
                    self.state[slot] = (at, _forward(row, op))

    def _clear(self, table: str, position: str) -> None:
        for slot in [s for s, (at, _) in self.state.items() if s[0] == table and at < position]:
            del self.state[slot]
        self.cleared[table] = max(position, self.cleared.get(table, ""))


def _forward(row: dict[str, Any], op: dict[str, Any]) -> dict[str, Any]:
    """``row`` after the column operation ``op`` (a webhook body's ``operations`` item)."""
    out = dict(row)
    kind = op["op"]
    if kind == "add_column":
        column = op["column"]
        default = column["default"]
        if column["name"] not in out:
            out[column["name"]] = default["text"] if default["kind"] == "value" else None
    elif kind == "drop_column":
        out.pop(op["name"], None)
    elif kind == "rename_column" and op["old"] in out:
        out[op["new"]] = out.pop(op["old"])
    elif kind == "modify_column" and op["new_name"] and op["name"] in out:
        out[op["new_name"]] = out.pop(op["name"])
    return out


class _Handler(http.server.BaseHTTPRequestHandler):
    server: WebhookReceiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        status = self.server.receive(dict(self.headers), body)
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass
