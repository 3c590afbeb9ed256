"""The shipped deployments start: every tidelake service of the compose stack and of the
rendered Kubernetes kustomization runs here with its exact command, environment and config
(deploykit.py reads them from the files and maps only what exists inside a container), past
config validation, against real servers (nats-server, MinIO, MariaDB on 127.0.0.1), until the
probes the files define pass; then the API they ship reports every process up.

No Docker engine or cluster exists here, so the images are not run: the commands, environments
and configs they would run are (issue 17: three of four services crash-looped because only
`serve` had the API token that the shared config's `api.host: 0.0.0.0` demanded of everyone).

``TIDELAKE_TEST_DEPLOY_DIR`` points the test at another copy of ``deploy/`` (to show that it
fails on an older one, e.g. ``git archive <commit> deploy | tar -x -C /tmp/old``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pymysql
import pytest
import yaml
from deploykit import (
    ALL_ADDRESSES_HERE,
    REPO,
    Local,
    Service,
    blocked_modules,
    compose_services,
    env_example,
    k8s_services,
    localise,
)

from tidelake.bus.server import EmbeddedNats
from tidelake.capture.servers import MariaDBServer
from tidelake.pipeline.object_store import MinioServer
from tidelake.runtime.processes import ChildProcess, free_port

# Two ingests' JVMs and Hudi warm-ups: over a minute (about 2.5 min on a loaded 2-core box).
pytestmark = [pytest.mark.integration, pytest.mark.slow]

DEPLOY = Path(os.environ.get("TIDELAKE_TEST_DEPLOY_DIR") or REPO / "deploy")
#: The long-running tidelake services of the compose stack.
COMPOSE_SERVICES = ("capture", "stager", "ingest", "serve")
#: The container ports a tidelake process listens on: the metrics/health port, the API.
LISTEN_PORTS = (9464, 8321)
#: Long enough for two ingests' JVMs, Spark sessions and Hudi warm-ups on a loaded 2-core
#: machine (measured: 2 min under a load average of 20); only a failing run waits it out.
START_DEADLINE_S = 240.0
#: How long a service without a probe is watched, to tell whether it exits (the report only).
NO_PROBE_WATCH_S = 20.0
#: The bucket compose's `minio-bucket` job creates (an operator's job in Kubernetes).
BUCKET = "tidelake"


@dataclass
class Stack:
    """The servers a stack's hosts map to, and the mapping."""

    nats: EmbeddedNats
    minio: MinioServer
    mariadb: MariaDBServer
    hosts: dict[str, str]
    token: str
    capture_user: str


def _root(mariadb: MariaDBServer) -> Any:
    """root over the server's socket (the users the stacks name get their own passwords)."""
    return pymysql.connect(unix_socket=str(mariadb.socket), user="root", autocommit=True)


def _database_user(mariadb: MariaDBServer, user: str, password: str) -> None:
    with _root(mariadb) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE USER IF NOT EXISTS '{user}'@'127.0.0.1'")
        cur.execute(f"ALTER USER '{user}'@'127.0.0.1' IDENTIFIED BY %s", (password,))
        cur.execute(f"GRANT ALL PRIVILEGES ON *.* TO '{user}'@'127.0.0.1'")


@contextmanager
def _stack(
    root: Path, keys: tuple[str, str], names: Mapping[str, str]
) -> Iterator[tuple[EmbeddedNats, MinioServer, MariaDBServer, dict[str, str]]]:
    """A nats-server, a MinIO (with the stack's own S3 keys, its bucket) and a MariaDB (with
    the `shop` database the stacks capture) for one stack; ``names`` maps each host:port the
    files name to "nats", "nats-monitor", "minio" or "mariadb"."""
    nats = EmbeddedNats(root / "nats")
    minio = MinioServer(root / "minio" / "data")
    minio.access_key, minio.secret_key = keys
    mariadb = MariaDBServer(root / "mariadb")
    with nats, minio:
        minio.create_bucket(BUCKET)
        mariadb.start()
        try:
            with _root(mariadb) as conn, conn.cursor() as cur:
                cur.execute("CREATE DATABASE shop")
                cur.execute("CREATE TABLE shop.orders (id BIGINT PRIMARY KEY, note TEXT)")
            local = {
                "nats": f"127.0.0.1:{nats.port}",
                "nats-monitor": nats.monitor_url.removeprefix("http://"),
                "minio": f"127.0.0.1:{minio.port}",
                "mariadb": f"127.0.0.1:{mariadb.port}",
            }
            yield nats, minio, mariadb, {host: local[what] for host, what in names.items()}
        finally:
            mariadb.stop()


def _start(local: Local, logs: Path) -> ChildProcess:
    name = local.service.name.replace("/", "_")
    child = ChildProcess(
        name,
        local.argv,
        log_path=logs / f"{name}.log",
        base_env=local.env,  # the container's environment only, nothing of this shell's
        cwd=local.cwd,
        stop_timeout_s=60.0,
    )
    return child.start()


def _probe_ok(probe: str | tuple[str, ...]) -> bool:
    if isinstance(probe, str):
        try:
            return httpx.get(probe, timeout=5).status_code == 200
        except httpx.HTTPError:
            return False
    return subprocess.run(list(probe), capture_output=True, timeout=30, check=False).returncode == 0


def _wait_for_probes(local: Local, child: ChildProcess, deadline: float) -> str | None:
    """None once every probe of the service passes; else why not (it exited, or timed out)."""
    if not local.probes:  # a failure either way; say whether it would even have run
        settle = time.monotonic() + NO_PROBE_WATCH_S
        while child.alive() and time.monotonic() < settle:
            time.sleep(0.5)
        if child.alive():
            return "no probe (alive)"
        return f"no probe; exited {child.returncode()}: {child.log_tail(3)}"
    while time.monotonic() < deadline:
        if not child.alive():
            return f"exited {child.returncode()}:\n{child.log_tail(15)}"
        if all(_probe_ok(p) for _, p in local.probes):
            return None
        time.sleep(1.0)
    return f"probes {[k for k, _ in local.probes]} not passing:\n{child.log_tail(15)}"


def _run_stack(services: list[Service], stack: Stack, tmp: Path) -> dict[str, Any]:
    """Start the services, wait for their probes, check the API's view, stop them; returns
    what the checks saw."""
    shared: dict[str, Path] = {}
    locals_ = [
        localise(s, tmp, stack.hosts, {p: free_port() for p in LISTEN_PORTS}, shared)
        for s in services
    ]
    for local in locals_:  # every stack URL mapped: none left pointing at a container name
        assert local.config is not None, local.service.name
        text = local.config.read_text()
        for host in stack.hosts:
            assert host not in text, (local.service.name, host)
    children: dict[str, ChildProcess] = {}
    seen: dict[str, Any] = {}
    try:
        for local in locals_:  # all at once, as the platform starts them
            children[local.service.name] = _start(local, tmp / "logs")
        deadline = time.monotonic() + START_DEADLINE_S
        with ThreadPoolExecutor(len(locals_)) as pool:
            waits = {
                local.service.name: pool.submit(
                    _wait_for_probes, local, children[local.service.name], deadline
                )
                for local in locals_
            }
            seen["not_started"] = {n: w.result() for n, w in waits.items() if w.result()}
        if not seen["not_started"]:
            serve = next(lc for lc in locals_ if lc.argv[1] == "serve")
            seen["api"] = _api_view(serve, stack, deadline)
            readers = _binlog_readers(stack.mariadb)
            seen["binlog_readers"] = (
                stack.capture_user if stack.capture_user in readers else readers
            )
        seen["alive"] = sorted(n for n, c in children.items() if c.alive())
    finally:
        seen["exit"] = {n: c.stop() for n, c in children.items()}
    return seen


def _api_view(serve: Local, stack: Stack, deadline: float) -> dict[str, Any]:
    """What the deployment's own API says once every probe passed: the token is required,
    the bus is up, and the stager and the ingest are up (their heartbeats reach `serve`
    through the staging store and the shared state volume) — the ingest past its warm-up
    (its JVM and Spark session started with the S3A settings, the lake on object storage)."""
    config = yaml.safe_load(serve.config.read_text()) if serve.config else {}
    base = f"http://{ALL_ADDRESSES_HERE}:{config['api']['port']}"
    anonymous = httpx.get(f"{base}/api/status", timeout=30).status_code
    auth = {"Authorization": f"Bearer {stack.token}"}
    while True:
        status = httpx.get(f"{base}/api/status", headers=auth, timeout=30).json()
        processes = status["processes"]
        view = {
            "anonymous": anonymous,
            "up": {name: p["up"] for name, p in processes.items()},
            "ingest": processes["ingest"]["state"],
            "bus_up": status["bus"]["up"],
        }
        if view["ingest"] not in ("unknown", "warming up") or time.monotonic() > deadline:
            return view
        time.sleep(1.0)


def _binlog_readers(mariadb: MariaDBServer) -> list[str]:
    """The users reading the binlog (a capture's replication connection)."""
    with _root(mariadb) as conn, conn.cursor() as cur:
        cur.execute("SELECT user FROM information_schema.processlist WHERE command LIKE 'Binlog%'")
        return sorted(row[0] for row in cur.fetchall())


@dataclass(frozen=True)
class Deployment:
    """One deployment's services, where its hosts go, its secrets as the user sets them."""

    services: list[Service]
    names: dict[str, str]  # stack host:port → nats, nats-monitor, minio or mariadb
    s3_keys: tuple[str, str]
    token: str
    capture_user: str
    capture_password: str


def _compose() -> Deployment:
    env = env_example(DEPLOY / "compose")
    return Deployment(
        compose_services(DEPLOY, COMPOSE_SERVICES),
        {"nats:4222": "nats", "nats:8222": "nats-monitor", "minio:9000": "minio",
         "mariadb:3306": "mariadb"},
        (env["MINIO_ROOT_USER"], env["MINIO_ROOT_PASSWORD"]),
        env["TIDELAKE_API_TOKEN"],
        "root",  # capture.source names it; the mariadb image creates it from .env
        env["MARIADB_ROOT_PASSWORD"],
    )  # fmt: skip


def _kubernetes() -> Deployment:
    secret = yaml.safe_load((DEPLOY / "k8s" / "secret.example.yaml").read_text())["stringData"]
    return Deployment(
        k8s_services(DEPLOY),
        {"nats.nats.svc:4222": "nats", "nats.nats.svc:8222": "nats-monitor",
         "minio.minio.svc:9000": "minio", "mysql.shop.svc:3306": "mariadb"},
        (secret["s3-access-key"], secret["s3-secret-key"]),
        secret["api-token"],
        "tidelake",  # capture.source names it; the DBA creates it
        secret["capture-password"],
    )  # fmt: skip


def _run(deployment: Deployment, root: Path) -> dict[str, Any]:
    with _stack(root / "servers", deployment.s3_keys, deployment.names) as (
        nats,
        minio,
        mariadb,
        hosts,
    ):
        _database_user(mariadb, deployment.capture_user, deployment.capture_password)
        stack = Stack(nats, minio, mariadb, hosts, deployment.token, deployment.capture_user)
        seen = _run_stack(deployment.services, stack, root)
    seen["with_token"] = sorted(
        s.name for s in deployment.services if "TIDELAKE_API__TOKEN" in s.env
    )
    seen["without_pyspark"] = sorted(
        s.name for s in deployment.services if "pyspark" in blocked_modules(s)
    )
    return seen


def _expected(deployment: Deployment, serve: str, light: list[str]) -> dict[str, Any]:
    names = [s.name for s in deployment.services]
    return {
        "with_token": [serve],
        # The light image's services run without the spark extra's modules (deploykit).
        "without_pyspark": light,
        "not_started": {},
        "api": {
            "anonymous": 401,
            # The capture's heartbeat is in the staging store beside the stager's, so serve
            # lists it although the capture's own volume is elsewhere.
            "up": {"stager": True, "ingest": True, "capture": True},
            "ingest": "idle",
            "bus_up": True,
        },
        "binlog_readers": deployment.capture_user,
        "alive": sorted(names),
        # uvicorn re-raises the SIGTERM it handled once its graceful shutdown is done.
        "exit": {n: -signal.SIGTERM if n == serve else 0 for n in names},
    }


def test_the_compose_stack_and_the_kubernetes_deployments_start(tmp_path: Path) -> None:
    """compose.yaml's capture, stager, ingest and serve (.env.example's values) and every
    container of the rendered kustomization (secret.example.yaml's values), both stacks at
    once: each service passes the probes its files define (stager, capture, ingest: /healthz
    on 9464; serve: /api/health); only serve has the API token and demands it; serve sees the
    bus, the stager, the capture and the warmed-up ingest through the staging store and the
    shared state volume; the capture reads the binlog as its config's user; all are alive
    until SIGTERM and stop cleanly on it."""
    deployments = {"compose": _compose(), "k8s": _kubernetes()}
    with ThreadPoolExecutor(len(deployments)) as pool:
        runs = {name: pool.submit(_run, d, tmp_path / name) for name, d in deployments.items()}
        seen = {name: run.result() for name, run in runs.items()}
    expected = {
        "compose": _expected(deployments["compose"], "serve", ["capture", "serve", "stager"]),
        "k8s": _expected(
            deployments["k8s"],
            "tidelake-ingest/serve",
            ["tidelake-capture/capture", "tidelake-ingest/serve", "tidelake-stager/stager"],
        ),
    }
    assert expected == seen
