"""A webhook receiver for ``demo --sinks`` and the route tests: what a service on the other
end of a webhook route does (route/sinks/webhook.py), in a thread of this process.

It checks each request's signature, and keeps per ``(table, key)`` the change with the
greatest position — a delete included, as a tombstone — so batches that arrive twice, late or
out of order never move a row back. ``refuse`` makes it answer ``400`` to its first requests:
a receiver's own bug, whose batches the route dead-letters and re-processes once it is fixed.
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
                slot = (change["table"], key_text(change["key"]))
                held = self.state.get(slot)
                if held is None or held[0] < change["position"]:
                    self.state[slot] = (change["position"], change["row"])
            return 200


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
