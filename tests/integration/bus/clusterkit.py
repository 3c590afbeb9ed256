"""A real NATS cluster on 127.0.0.1 for tests: three (or more) ``nats-server`` processes with
JetStream, routed to each other, each an :class:`EmbeddedNats` (own port, store directory,
``sync_interval: always``), so a node can be ``kill -9``-ed and restarted on the same ports
and store. Used by the cluster test here and by the fault suite (``tests/chaos``).

``url`` is every node's client URL comma-separated: what ``bus.url`` takes for a cluster.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import nats
import nats.errors
import orjson

from tidelake.bus.server import EmbeddedNats
from tidelake.runtime.processes import free_port

#: The cluster's name in every node's ``cluster { name }``.
CLUSTER_NAME = "tidelake-test"


class NatsCluster:
    """``size`` routed nats-server nodes named ``n1``…; start them with :meth:`start`."""

    def __init__(self, root: Path, size: int = 3, *, startup_timeout_s: float = 30.0) -> None:
        self.root = root
        host = "127.0.0.1"
        self.client_ports = [free_port(host) for _ in range(size)]
        self.route_ports = [free_port(host) for _ in range(size)]
        routes = ",".join(f"nats://{host}:{p}" for p in self.route_ports)
        self.nodes = [self._node(i, routes, startup_timeout_s) for i in range(size)]

    def _node(self, i: int, routes: str, startup_timeout_s: float) -> EmbeddedNats:
        args = ["--server_name", f"n{i + 1}", "--cluster_name", CLUSTER_NAME]
        # Every node lists every route, itself included (nats-server skips its own).
        args += ["--cluster", f"nats://127.0.0.1:{self.route_ports[i]}", "--routes", routes]
        return EmbeddedNats(
            self.root / f"n{i + 1}",
            port=self.client_ports[i],
            startup_timeout_s=startup_timeout_s,
            extra_args=args,
        )

    @property
    def url(self) -> str:
        """Every node's client URL, comma-separated (``bus.url`` of a cluster)."""
        return ",".join(f"nats://127.0.0.1:{p}" for p in self.client_ports)

    def node(self, name: str) -> EmbeddedNats:
        """The node whose ``server_name`` is ``name`` (``n1``…)."""
        return self.nodes[int(name.removeprefix("n")) - 1]

    def start(self) -> NatsCluster:
        """Start every node at once: a node is ready (``/healthz``) only once a JetStream meta
        leader is elected, which needs a quorum of nodes up, so a one-by-one start would wait
        on itself."""
        with ThreadPoolExecutor(len(self.nodes)) as pool:
            for future in [pool.submit(n.start) for n in self.nodes]:
                future.result()
        return self

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()

    def kill(self, name: str) -> None:
        """``kill -9`` one node."""
        self.node(name).kill()

    def restart(self, name: str) -> None:
        """Start a killed node again on its ports and store; returns once it is healthy."""
        self.node(name).start()

    def healthy(self, timeout_s: float = 30.0) -> None:
        """Wait until every node answers ``/healthz`` (JetStream current on all)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(n.running and n._healthz_ok() for n in self.nodes):
                return
            time.sleep(0.2)
        raise AssertionError(f"the cluster is not healthy after {timeout_s}s")

    def __enter__(self) -> NatsCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def js_api(url: str, subject: str, body: bytes = b"", timeout_s: float = 30.0) -> Any:
    """One JetStream API request (``$JS.API.…``) through any node; the decoded answer.

    Asked again until ``timeout_s``: while a stream has no leader (an election after a kill
    takes seconds) its API subjects have no responder or time out.
    """
    nc = await nats.connect(url.split(","), connect_timeout=2)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                msg = await nc.request(subject, body, timeout=5.0)
                return orjson.loads(msg.data)
            except (TimeoutError, nats.errors.TimeoutError, nats.errors.NoRespondersError):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
    finally:
        await nc.close()


def stream_leader(url: str, stream: str, timeout_s: float = 20.0) -> str:
    """The server name of ``stream``'s current leader; while the stream has none (an election
    after a node was killed: its info then names no leader), asked again until ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        info = asyncio.run(js_api(url, f"$JS.API.STREAM.INFO.{stream}"))
        leader = (info.get("cluster") or {}).get("leader")
        if leader:
            return str(leader)
        if time.monotonic() > deadline:
            raise AssertionError(f"stream {stream} has no leader after {timeout_s} s: {info}")
        time.sleep(0.2)


def step_down_stream_leader(url: str, stream: str, timeout_s: float = 20.0) -> tuple[str, str]:
    """Force a leader change of ``stream`` (``$JS.API.STREAM.LEADER.STEPDOWN``); waits until
    another node leads; ``(old leader, new leader)``."""
    old = stream_leader(url, stream)
    answer = asyncio.run(js_api(url, f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}"))
    if not answer.get("success"):
        raise AssertionError(f"stream leader stepdown refused: {answer}")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            new = stream_leader(url, stream)
        except (KeyError, TimeoutError, nats.errors.Error):
            new = ""
        if new and new != old:
            return old, new
        time.sleep(0.1)
    raise AssertionError(f"{stream}: no new leader {timeout_s}s after {old} stepped down")


@contextmanager
def nats_cluster(root: Path, size: int = 3) -> Iterator[NatsCluster]:
    """A started cluster, stopped on exit (SIGTERM, then SIGKILL)."""
    cluster = NatsCluster(root, size)
    try:
        yield cluster.start()
    finally:
        cluster.stop()
