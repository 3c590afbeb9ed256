"""One machine, many shells: the bus a pipeline process started on embedded defaults is
recorded in ``<home>/bus.json`` and every other process finds it there — ``bus init``,
``status``, ``dlq list``, ``serve`` and a plain nats-py producer — with a real nats-server.

The owner here is ``tidelake stage`` on embedded defaults (no ``bus.url``): it starts,
provisions and records the home's bus exactly as ``tidelake run`` does (bus/discovery.py),
without a JVM; tests/e2e/test_run.py checks the record of ``run`` itself.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import nats.js.errors
import orjson
import pytest

from tidelake.bus.discovery import (
    RECORD_FILE,
    BusRecord,
    claim_home,
    pid_alive,
    port_answers,
    read_record,
    write_record,
)
from tidelake.bus.server import EmbeddedNats
from tidelake.runtime.processes import ChildProcess, free_port, http_ok, tidelake_argv

pytestmark = pytest.mark.integration


def _env(home: Path, **extra: str) -> dict[str, str]:
    """This process's environment without any TIDELAKE_ setting, pinned to ``home``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDELAKE_")}
    if "TIDELAKE_NATS_SERVER" in os.environ:
        env["TIDELAKE_NATS_SERVER"] = os.environ["TIDELAKE_NATS_SERVER"]
    return {**env, "TIDELAKE_HOME": str(home), **extra}


def _tidelake(*args: str, env: dict[str, str], cwd: Path | None = None) -> Any:
    return subprocess.run(
        tidelake_argv(*args),
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _recorded(home: Path) -> Any:
    def ready(_p: ChildProcess) -> bool:
        record = read_record(home)
        return record is not None and port_answers(record.url)

    return ready


def _stager(tmp_path: Path, home: Path) -> ChildProcess:
    """``tidelake stage`` on embedded defaults in ``home``, ready once it recorded its bus."""
    return ChildProcess(
        "stage",
        tidelake_argv("stage"),
        log_path=tmp_path / "stage.log",
        base_env=_env(home),
        ready=_recorded(home),
        startup_timeout_s=60,
        stop_timeout_s=30,
    )


@pytest.fixture
def owner(tmp_path: Path) -> Iterator[tuple[ChildProcess, Path]]:
    """``tidelake stage`` on embedded defaults in its own home, up once it recorded its bus."""
    home = tmp_path / "home"
    stage = _stager(tmp_path, home)
    stage.start()
    try:
        yield stage, home
    finally:
        stage.stop(timeout_s=30)


async def _publish(url: str, subject: str, payload: bytes) -> int:
    nc = await nats.connect(url, connect_timeout=5, max_reconnect_attempts=0)
    try:
        ack = await nc.jetstream().publish(subject, payload, timeout=5)
        return int(ack.seq)
    finally:
        await nc.close()


def test_every_verb_of_a_second_shell_finds_the_recorded_bus(
    owner: tuple[ChildProcess, Path], tmp_path: Path
) -> None:
    """With the owner's record in the home and no bus.url anywhere: ``bus init --json`` finds
    the bus in the record and reports all three objects unchanged (the owner provisioned
    before recording); a nats-py producer at the recorded URL gets its PubAck; the stager
    dead-letters that undecodable message and ``dlq list --json`` from the second shell lists
    it; ``status --json`` shows the bus up; ``serve`` answers /api/status with the bus up.
    A SIGTERM stops the owner with 0, removes the record and the server with it."""
    stage, home = owner
    record = read_record(home)
    assert record is not None
    assert (stage.pid, str(home.resolve())) == (record.pid, record.home)
    env = _env(home)

    init = _tidelake("bus", "init", "--json", env=env)
    assert 0 == init.returncode, init.stderr
    report = orjson.loads(init.stdout)
    assert (record.url, str(home.resolve() / RECORD_FILE)) == (report["url"], report["found_in"])
    assert [
        ("stream", "TIDELAKE_CDC", "unchanged"),
        ("stream", "TIDELAKE_DLQ", "unchanged"),
        ("consumer", "tidelake-stager", "unchanged"),
    ] == [(p["kind"], p["name"], p["action"]) for p in report["provisioned"]]

    assert 1 == asyncio.run(_publish(record.url, "cdc.shop.orders", b"not canal-json"))

    def dead_lettered(_p: ChildProcess) -> bool:
        listed = _tidelake("dlq", "list", "--json", env=env)
        return listed.returncode == 0 and len(orjson.loads(listed.stdout)["messages"]) == 1

    stage.wait_until(dead_lettered, 30, "the message dead-lettered and listed")

    status = _tidelake("status", "--json", env=env)
    assert 0 == status.returncode, status.stderr
    assert (True, None) == (
        orjson.loads(status.stdout)["bus"]["up"],
        orjson.loads(status.stdout)["bus"]["error"],
    )

    port = free_port()
    serve = ChildProcess(
        "serve",
        tidelake_argv("serve", "--port", str(port)),
        log_path=tmp_path / "serve.log",
        base_env=env,
        ready=http_ok(f"http://127.0.0.1:{port}/api/health"),
        startup_timeout_s=60,
    )
    with serve, urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=10) as r:
        served = orjson.loads(r.read())
    assert (True, None) == (served["bus"]["up"], served["bus"]["error"])

    assert 0 == stage.stop(sig=signal.SIGTERM)
    assert (None, False) == (read_record(home), port_answers(record.url))


def test_a_stale_record_is_ignored_and_replaced_by_the_next_owner(
    owner: tuple[ChildProcess, Path], tmp_path: Path
) -> None:
    """The owner killed with SIGKILL: its nats-server, in a session of its own, gets SIGTERM
    from the kernel and goes too (die_with_parent), the record stays behind; ``status`` names
    the stale record and ignores it (bus down, exit 0); a new ``stage`` on the home starts its
    own server and records itself."""
    stage, home = owner
    old = read_record(home)
    assert old is not None
    assert old.server_pid is not None
    assert stage.pid is not None
    os.kill(stage.pid, signal.SIGKILL)  # the leader only, as `kill -9 <pid>` in a shell
    deadline = time.monotonic() + 15
    while (pid_alive(stage.pid) or pid_alive(old.server_pid)) and time.monotonic() < deadline:
        time.sleep(0.1)  # not stage.wait(): it would sweep the server itself
    assert (False, False) == (pid_alive(stage.pid), pid_alive(old.server_pid))
    assert old == read_record(home)

    status = _tidelake("status", "--json", env=_env(home))
    assert 0 == status.returncode, status.stderr
    assert f"ignoring {home.resolve() / RECORD_FILE}" in " ".join(status.stderr.split())
    assert f"(pid {old.pid}," in status.stderr
    assert False is orjson.loads(status.stdout)["bus"]["up"]

    again = ChildProcess(
        "stage-again",
        tidelake_argv("stage"),
        log_path=tmp_path / "stage-again.log",
        base_env=_env(home),
        ready=lambda _p: (r := read_record(home)) is not None and r.pid != old.pid,
        startup_timeout_s=60,
        stop_timeout_s=30,
    )
    with again:
        new = read_record(home)
        assert new is not None
        assert again.pid == new.pid
        assert (False, True) == (pid_alive(old.server_pid), port_answers(new.url))


def test_a_producer_publishing_before_any_stager_gets_its_ack_after_bus_init(
    tmp_path: Path,
) -> None:
    """A bare nats-server (no stream yet): a JetStream publish finds no stream to answer it;
    ``tidelake bus init`` (bus.url from the environment) creates the CDC and DLQ streams and
    the consumer and says so; the same publish is then acknowledged, and a second ``bus
    init`` changes nothing."""
    with EmbeddedNats(tmp_path / "nats") as server:
        with pytest.raises(nats.js.errors.NoStreamResponseError):  # "no response from stream"
            asyncio.run(_publish(server.url, "cdc.shop.orders", b"{}"))
        env = _env(tmp_path / "home", TIDELAKE_BUS__URL=server.url)
        first = _tidelake("bus", "init", env=env)
        assert 0 == first.returncode, first.stderr
        assert 3 == first.stdout.count("created"), first.stdout
        assert 1 == asyncio.run(_publish(server.url, "cdc.shop.orders", b"{}"))
        second = _tidelake("bus", "init", "--json", env=env)
        assert ["unchanged"] * 3 == [
            p["action"] for p in orjson.loads(second.stdout)["provisioned"]
        ]


def test_read_only_verbs_in_an_empty_directory_create_nothing(tmp_path: Path) -> None:
    """``status``, ``dlq list`` and ``config check`` run in an empty directory with a home
    that does not exist: no directory appears in either (``dlq list`` exits 2 naming the
    record it looked for, as there is no bus)."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    home = tmp_path / "home"
    env = _env(home)
    results = [
        _tidelake("status", env=env, cwd=cwd).returncode,
        _tidelake("dlq", "list", env=env, cwd=cwd),
        _tidelake("config", "check", env=env, cwd=cwd).returncode,
    ]
    dlq = results[1]
    assert (0, 2, 0) == (results[0], dlq.returncode, results[2])
    assert str(home / RECORD_FILE) in " ".join(dlq.stderr.split())
    assert ([], False) == (list(cwd.iterdir()), home.exists())


def test_home_option_is_honoured_before_any_verb(tmp_path: Path) -> None:
    """``tidelake --home DIR bus init`` looks for DIR's record (not TIDELAKE_HOME's)."""
    chosen = tmp_path / "chosen"
    result = _tidelake("--home", str(chosen), "bus", "init", env=_env(tmp_path / "other"))
    assert 2 == result.returncode
    assert str(chosen / RECORD_FILE) in " ".join(result.stderr.split())


def test_a_second_pipeline_on_a_live_home_is_refused(owner: tuple[ChildProcess, Path]) -> None:
    """While the home's bus has a live owner, ``tidelake run`` on that home exits 1 naming
    the owner's pid and URL (two pipelines would share one staging area and one lake), before
    it starts anything; the owner's record stays."""
    stage, home = owner
    record = read_record(home)
    assert record is not None
    result = _tidelake("run", env=_env(home))
    said = " ".join(result.stderr.split())
    assert (1, True, True) == (
        result.returncode,
        f"(pid {stage.pid}) already runs this home's bus at {record.url}" in said,
        stage.alive(),
    )
    assert record == read_record(home)


def test_serve_started_before_the_pipeline_finds_its_bus_once_recorded(tmp_path: Path) -> None:
    """``serve`` first, on a home with no bus yet: /api/status says the bus is down; once a
    ``stage`` on embedded defaults has recorded the home's bus, the same ``serve`` (not
    restarted) reports it up."""
    home = tmp_path / "home"
    port = free_port()

    def bus_up() -> bool:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=10) as r:
            return bool(orjson.loads(r.read())["bus"]["up"])

    serve = ChildProcess(
        "serve",
        tidelake_argv("serve", "--port", str(port)),
        log_path=tmp_path / "serve.log",
        base_env=_env(home),
        ready=http_ok(f"http://127.0.0.1:{port}/api/health"),
        startup_timeout_s=60,
    )
    stage = _stager(tmp_path, home)
    with serve:
        before = bus_up()
        with stage:
            serve.wait_until(lambda _p: bus_up(), 30, "the bus up in /api/status")
    assert False is before


def test_a_new_owner_stops_the_server_a_killed_owner_left_on_the_home(tmp_path: Path) -> None:
    """A stale record whose nats-server still runs on the home's store (an owner that could
    not take it along): ``claim_home`` stops that server (SIGTERM: JetStream flushes) before
    a new one opens the store, and leaves a server on another store alone."""
    home = tmp_path / "home"
    ours = EmbeddedNats(home / "nats")
    other = EmbeddedNats(tmp_path / "other")
    with ours, other:
        dead = subprocess.Popen(["true"])
        dead.wait()
        write_record(
            home,
            BusRecord(ours.url, dead.pid, ours.monitor_url, ours.pid, str(home), "then"),
        )
        claim_home(home, home / "nats")
        deadline = time.monotonic() + 15
        while ours.running and time.monotonic() < deadline:
            time.sleep(0.1)
        write_record(
            home,
            BusRecord(other.url, dead.pid, other.monitor_url, other.pid, str(home), "then"),
        )
        claim_home(home, home / "nats")
        assert (False, True) == (ours.running, other.running)
