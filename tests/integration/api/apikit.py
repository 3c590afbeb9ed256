"""A running pipeline for the API and dashboard tests: the demo's machinery, small.

An embedded nats-server, then the stager, the continuous ingest and ``tidelake serve`` as
child processes (:class:`tidelake.pipeline.processes.StageProcess`, as the stack runs them),
on one config file under a temporary home. Messages are TiCDC canal-json whose TSO is the
publish time, so freshness is measured in real seconds.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import orjson
import yaml

from tidelake.bus.connection import connect
from tidelake.bus.provision import provision
from tidelake.bus.server import EmbeddedNats, free_port
from tidelake.config import Config, load_config
from tidelake.pipeline.processes import StageProcess, tidelake_argv

T = TypeVar("T")
TSO_LOGICAL_BITS = 18
DOC = Path(__file__).resolve().parents[3] / "docs" / "metrics.md"


def canal_row(
    table: str, row_id: int, commit_ms: int, kind: str = "INSERT", name: str = ""
) -> bytes:
    """One TiCDC canal-json row message of ``db.table`` committed at ``commit_ms``."""
    database, tbl = table.split(".", 1)
    return orjson.dumps(
        {
            "id": 0,
            "database": database,
            "table": tbl,
            "pkNames": ["id"],
            "isDdl": False,
            "type": kind,
            "es": commit_ms,
            "ts": commit_ms + 1,
            "sql": "",
            "sqlType": {"id": -5, "name": 12},
            "mysqlType": {"id": "bigint", "name": "varchar(64)"},
            "data": [{"id": str(row_id), "name": name or f"name-{row_id}"}],
            "old": None,
            "_tidb": {"commitTs": (commit_ms << TSO_LOGICAL_BITS) + row_id % 1000},
        }
    )


def documented_metrics(doc: Path = DOC) -> list[str]:
    """Every metric name in docs/metrics.md: the first column of its tables, in backticks."""
    names = []
    for line in doc.read_text().splitlines():
        if line.startswith("| `tidelake_"):
            names.append(line.split("`")[1])
    return names


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion on a fresh loop in its own thread (playwright's sync API
    keeps an event loop running in the test's thread)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def wait_for(
    predicate: Callable[[], Any], timeout_s: float, what: str, every_s: float = 0.3
) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


@dataclass
class Pipeline:
    """One running pipeline; ``url`` is ``tidelake serve``'s."""

    home: Path
    cfg: Config
    config_path: Path
    server: EmbeddedNats
    url: str
    token: str | None
    children: dict[str, StageProcess] = field(default_factory=dict)
    #: Each stage process's own /metrics and /healthz (metrics.port), by child name.
    metrics_urls: dict[str, str] = field(default_factory=dict)

    @property
    def subject_prefix(self) -> str:
        return self.cfg.bus.stream.subjects[0].removesuffix(">")

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def get(self, path: str, **params: Any) -> httpx.Response:
        return httpx.get(self.url + path, params=params, headers=self.headers(), timeout=30)

    def post(self, path: str, body: Any = None) -> httpx.Response:
        # Always a JSON body: the API refuses state changes without Content-Type: application/json.
        payload = {} if body is None else body
        return httpx.post(self.url + path, json=payload, headers=self.headers(), timeout=60)

    def status(self) -> dict[str, Any]:
        resp = self.get("/api/status")
        resp.raise_for_status()
        data: dict[str, Any] = resp.json()
        return data

    def table(self, name: str) -> dict[str, Any] | None:
        return next((t for t in self.status()["tables"] if t["table"] == name), None)

    def publish(
        self, messages: list[tuple[str, bytes]], headers: dict[str, str] | None = None
    ) -> list[int]:
        """Publish ``(table or subject, payload)`` pairs; their stream sequences."""

        async def go() -> list[int]:
            nc = await connect(self.cfg.bus, self.server.url)
            try:
                js = nc.jetstream()
                seqs = []
                for target, data in messages:
                    subject = target if target.count(".") > 1 else self.subject_prefix + target
                    ack = await js.publish(subject, data, headers=headers)
                    seqs.append(ack.seq)
                return seqs
            finally:
                await nc.close()

        return run_async(go())

    def publish_rows(self, table: str, ids: range, *, commit_ms: int | None = None) -> list[int]:
        """One insert per id, each its own source transaction (commit times 1 ms apart)."""
        now = commit_ms if commit_ms is not None else int(time.time() * 1000) - len(ids)
        return self.publish([(table, canal_row(table, i, now + n)) for n, i in enumerate(ids)])

    def cli(self, *args: str) -> Any:
        import subprocess

        return subprocess.run(
            tidelake_argv(*args, "--config", str(self.config_path)),
            env={**os.environ, "COLUMNS": "200"},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def logs(self) -> str:
        return "\n".join(f"--- {n}\n{c.log_tail(40)}" for n, c in self.children.items())

    def stop(self) -> None:
        for child in self.children.values():
            child.stop(timeout_s=30)
        self.server.stop()


def write_config(home: Path, nats_url: str, port: int, **extra: Any) -> Path:
    data: dict[str, Any] = {
        "home": str(home),
        "bus": {"url": nats_url},
        "stage": {"max_age_s": 0.2},
        "ingest": {"interval_s": 0.3},
        "lake": {"spark": {"master": "local[2]", "driver_memory": "1g", "shuffle_partitions": 2}},
        "api": {"port": port},
    }
    for k, v in extra.items():
        data.setdefault(k, {}).update(v)
    home.mkdir(parents=True, exist_ok=True)
    path = home / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def start_serve(
    config_path: Path, home: Path, port: int, env: dict[str, str], *extra: str
) -> StageProcess:
    serve = StageProcess(
        "serve",
        tidelake_argv("serve", "--config", str(config_path), *extra),
        env,
        home / "logs" / "serve.log",
    )
    serve.start()
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        if not serve.alive():
            raise AssertionError("tidelake serve exited:\n" + serve.log_tail())
        try:
            return httpx.get(url + "/api/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(healthy, 60, "tidelake serve to answer")
    return serve


def start_pipeline(home: Path, *, ingest: bool = True, stale_after_s: float = 30) -> Pipeline:
    """nats-server, stager, ingest (unless ``ingest=False``) and serve, all running."""
    server = EmbeddedNats(home / "nats").start()
    port = free_port()
    config_path = write_config(home, server.url, port)
    cfg = load_config(config_path, environ={})
    env = {"TIDELAKE_CONFIG": str(config_path)}

    run_async(provision(cfg.bus, server.url))
    p = Pipeline(home, cfg, config_path, server, f"http://127.0.0.1:{port}", None)
    try:
        for name in ("stager", "ingest"):
            p.metrics_urls[name] = f"http://127.0.0.1:{free_port()}"

        def own_metrics(name: str) -> dict[str, str]:
            return {**env, "TIDELAKE_METRICS__PORT": p.metrics_urls[name].rsplit(":", 1)[1]}

        p.children["stager"] = StageProcess(
            "stager", tidelake_argv("stage"), own_metrics("stager"), home / "logs" / "stage.log"
        )
        p.children["stager"].start()
        if ingest:
            p.children["ingest"] = StageProcess(
                "ingest",
                tidelake_argv("ingest", "--continuous", "--interval", "0.3"),
                own_metrics("ingest"),
                home / "logs" / "ingest.log",
            )
            p.children["ingest"].start()
        p.children["serve"] = start_serve(
            config_path, home, port, env, "--stale-after", str(stale_after_s)
        )
        if ingest:
            state_dir = Path(cfg.lake_root) / "_tidelake"

            def ingest_ready() -> bool:
                if not p.children["ingest"].alive():
                    raise AssertionError("the ingest exited:\n" + p.logs())
                return (state_dir / "ingest.heartbeat.json").exists()

            wait_for(ingest_ready, 300, "the ingest's first heartbeat")
    except BaseException:
        p.stop()
        raise
    return p
