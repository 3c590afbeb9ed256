"""The per-process metrics and health endpoint: /healthz follows the main loop's last turn,
/metrics holds build info and the process collectors, a taken port is refused clearly."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

import tidelake
from support.scrape import get as _get
from tidelake.config import MetricsConfig, load_config
from tidelake.runtime.metrics_server import (
    Liveness,
    MetricsPortError,
    MetricsServer,
    assign_child_ports,
    child_env,
    health,
    serving,
)
from tidelake.runtime.processes import free_port


def test_metrics_settings_default_off_and_come_from_the_environment() -> None:
    """metrics.port is off unless set; TIDELAKE_METRICS__PORT sets it (the deployments' 9464)."""
    assert (None, "127.0.0.1", 300.0) == (
        load_config(environ={}).metrics.port,
        load_config(environ={}).metrics.host,
        load_config(environ={}).metrics.healthy_within_s,
    )
    assert 9464 == load_config(environ={"TIDELAKE_METRICS__PORT": "9464"}).metrics.port


def test_health_is_ok_within_the_bound_and_stalled_past_it() -> None:
    """A loop that turned recently is healthy (200); one that has not turned within
    healthy_within_s is reported stalled (503), with its age."""
    alive = Liveness()
    status, body = health("stager", 5.0, alive)
    assert (200, "ok", "stager") == (status, body["status"], body["process"])
    stuck = Liveness()
    stuck._last = time.monotonic() - 10  # a loop that stopped turning 10 s ago
    status, body = health("ingest", 5.0, stuck)
    assert (503, "stalled") == (status, body["status"])
    assert body["loop_age_s"] >= 10


def test_server_answers_healthz_metrics_and_404() -> None:
    """The endpoint serves /healthz as JSON, /metrics in the Prometheus text format with
    tidelake_build_info, the process/platform collectors and the loop age, 404 elsewhere;
    /healthz turns 503 when the loop stops turning."""
    port = free_port()
    liveness = Liveness()
    cfg = MetricsConfig(port=port, healthy_within_s=0.5)
    with MetricsServer(cfg, "stager", liveness=liveness) as server:
        status, body = _get(f"{server.url}/healthz")
        assert (200, "ok") == (status, orjson.loads(body)["status"])
        status, text = _get(f"{server.url}/metrics")
        families = {f.name: f for f in text_string_to_metric_families(text.decode())}
        build = families["tidelake_build_info"].samples[0]
        assert (tidelake.__version__, 1.0) == (build.labels["version"], build.value)
        assert {"python", "implementation", "platform"} <= set(build.labels)
        assert {"process_cpu_seconds", "python_info", "python_gc_objects_collected"} <= set(
            families
        )
        age = families["tidelake_main_loop_age_seconds"].samples[0]
        assert "stager" == age.labels["process"]
        assert 404 == _get(f"{server.url}/other")[0]
        time.sleep(0.7)
        status, body = _get(f"{server.url}/healthz")
        assert (503, "stalled") == (status, orjson.loads(body)["status"])
        liveness.beat()
        assert 200 == _get(f"{server.url}/healthz")[0]


def test_a_taken_port_raises_a_clear_error() -> None:
    """Binding a port another socket listens on fails at start, naming the setting."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        with pytest.raises(MetricsPortError) as err:
            MetricsServer(MetricsConfig(port=port), "ingest").start()
    assert f"metrics.port: cannot serve /metrics and /healthz on 127.0.0.1:{port}" in str(err.value)
    assert "the port is taken" in str(err.value)


def test_serving_does_nothing_without_a_port() -> None:
    """With metrics.port unset no socket is opened."""
    with serving(MetricsConfig(), "stager") as server:
        assert server is None


def test_run_gives_each_child_its_own_port() -> None:
    """Under `run` the children inherit the config: each is moved to port + its offset, so
    none collides with `run`'s own endpoint or another child's."""
    cfg = MetricsConfig(port=9464)
    envs = [child_env(cfg, stage) for stage in ("capture", "stager", "ingest")]
    assert [
        {"TIDELAKE_METRICS__PORT": "9465"},
        {"TIDELAKE_METRICS__PORT": "9466"},
        {"TIDELAKE_METRICS__PORT": "9467"},
    ] == envs
    assert {} == child_env(MetricsConfig(), "stager")


@dataclass
class _Child:
    name: str
    env: dict[str, str] = field(default_factory=dict)


def test_assign_child_ports_moves_every_stage_child_but_serve() -> None:
    """run's children (and a fault run's extra stager) each get a port of their own; serve,
    whose /metrics is on the API port, gets none; nothing changes with metrics off."""
    children = [_Child(n) for n in ("capture", "stager", "ingest", "serve", "stager-2")]
    assign_child_ports(children, MetricsConfig(port=9000))
    assert {
        "capture": "9001",
        "stager": "9002",
        "ingest": "9003",
        "serve": None,
        "stager-2": "9004",
    } == {c.name: c.env.get("TIDELAKE_METRICS__PORT") for c in children}
    untouched = [_Child("stager")]
    assign_child_ports(untouched, MetricsConfig())
    assert {} == untouched[0].env
