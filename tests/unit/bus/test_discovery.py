"""The bus record ``<home>/bus.json`` and the one resolution every verb uses: explicit
``bus.url``, else a live record (owner alive and port answering), else none with a reason."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tidelake.bus.discovery import (
    RECORD_FILE,
    BusLookup,
    BusRecord,
    claim_home,
    find_bus,
    live_record,
    new_record,
    no_bus_message,
    pid_alive,
    read_record,
    remove_record,
    use_bus,
    write_record,
)
from tidelake.bus.server import port_if_free
from tidelake.config import Config, load_config
from tidelake.errors import BusError


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP port on 127.0.0.1 that accepts connections (stands in for a bus)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield int(s.getsockname()[1])


def _dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _cfg(home: Path, **bus: object) -> Config:
    return load_config(environ={"TIDELAKE_HOME": str(home)}).model_copy(
        update={"bus": load_config(environ={}).bus.model_copy(update=bus)}
    )


def test_a_record_round_trips_through_the_home(tmp_path: Path) -> None:
    """What is written is read back field for field; the file is JSON an operator can read."""
    record = new_record(
        tmp_path, "nats://127.0.0.1:4222", monitor_url="http://127.0.0.1:8222", server_pid=7
    )
    path = write_record(tmp_path, record)
    assert tmp_path.resolve() / RECORD_FILE == path
    assert record == read_record(tmp_path)
    on_disk = orjson.loads(path.read_bytes())
    assert (os.getpid(), "nats://127.0.0.1:4222", 1) == (
        on_disk["pid"],
        on_disk["url"],
        on_disk["version"],
    )
    assert on_disk["started_at"].endswith("Z")


def test_a_record_is_removed_only_by_its_owner(tmp_path: Path) -> None:
    """Another process's record stays (it may have replaced ours meanwhile); ours goes."""
    theirs = BusRecord("nats://127.0.0.1:1", os.getpid() + 1, None, None, str(tmp_path), "t")
    write_record(tmp_path, theirs)
    assert (False, theirs) == (remove_record(tmp_path), read_record(tmp_path))
    write_record(
        tmp_path, new_record(tmp_path, "nats://127.0.0.1:1", monitor_url=None, server_pid=None)
    )
    assert (True, None) == (remove_record(tmp_path), read_record(tmp_path))


def test_an_explicit_bus_url_wins_and_the_record_is_not_read(tmp_path: Path, listener: int) -> None:
    """bus.url configured: the lookup says config, even beside a live record."""
    write_record(
        tmp_path,
        new_record(tmp_path, f"nats://127.0.0.1:{listener}", monitor_url=None, server_pid=None),
    )
    found = find_bus(_cfg(tmp_path, url="nats://elsewhere:4222"))
    assert BusLookup("nats://elsewhere:4222", "config") == found


def test_a_live_record_is_found_and_sets_url_and_monitor(tmp_path: Path, listener: int) -> None:
    """Owner alive (this process) and port answering: the record's URL and monitoring URL
    become the config's bus.url and bus.monitor_url."""
    url = f"nats://127.0.0.1:{listener}"
    write_record(
        tmp_path, new_record(tmp_path, url, monitor_url="http://127.0.0.1:9", server_pid=None)
    )
    cfg = _cfg(tmp_path)
    found = find_bus(cfg)
    assert (url, "record", None) == (found.url, found.source, found.note)
    used = use_bus(cfg, found)
    assert (url, "http://127.0.0.1:9") == (used.bus.url, used.bus.monitor_url)


def test_a_record_of_a_dead_owner_is_ignored_with_the_reason(tmp_path: Path, listener: int) -> None:
    """A kill -9'd run leaves its record: ignored, and the note names the file and the pid."""
    pid = _dead_pid()
    write_record(
        tmp_path,
        BusRecord(f"nats://127.0.0.1:{listener}", pid, None, None, str(tmp_path), "then"),
    )
    found = find_bus(_cfg(tmp_path))
    assert (None, "none") == (found.url, found.source)
    assert found.note is not None
    assert str(tmp_path.resolve() / RECORD_FILE) in found.note
    assert f"pid {pid}" in found.note
    assert "not running" in found.note


def test_a_record_whose_port_does_not_answer_is_ignored(tmp_path: Path) -> None:
    """Owner alive but nothing listening (starting or stopping): not used, said why."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    write_record(
        tmp_path,
        new_record(tmp_path, f"nats://127.0.0.1:{closed}", monitor_url=None, server_pid=None),
    )
    record, note = live_record(tmp_path)
    assert record is None
    assert note is not None
    assert "does not answer" in note


def test_no_record_means_no_bus_and_nothing_to_say(tmp_path: Path) -> None:
    """No record, no bus.url: no URL, no note; the message names the record's path."""
    cfg = _cfg(tmp_path / "empty")
    assert BusLookup(None, "none") == find_bus(cfg)
    assert str(tmp_path / "empty" / RECORD_FILE) in no_bus_message(cfg)
    assert not (tmp_path / "empty").exists()


def test_an_unreadable_record_is_ignored_with_the_reason(tmp_path: Path) -> None:
    """A torn or foreign bus.json is not trusted and not fatal."""
    (tmp_path / RECORD_FILE).write_text("{not json")
    record, note = live_record(tmp_path)
    assert record is None
    assert note is not None
    assert "not JSON" in note


def test_claim_home_refuses_a_home_whose_bus_is_live(tmp_path: Path, listener: int) -> None:
    """Two pipelines on one home would share its staging and lake: the second is refused."""
    write_record(
        tmp_path,
        new_record(tmp_path, f"nats://127.0.0.1:{listener}", monitor_url=None, server_pid=None),
    )
    with pytest.raises(BusError, match="already runs this home's bus"):
        claim_home(tmp_path, tmp_path / "nats")


def test_claim_home_accepts_a_stale_record(tmp_path: Path) -> None:
    """A dead owner's record does not block a new start (its server pid is not ours)."""
    write_record(
        tmp_path,
        BusRecord("nats://127.0.0.1:1", _dead_pid(), None, os.getpid(), str(tmp_path), "then"),
    )
    claim_home(tmp_path, tmp_path / "nats")  # no raise, and this process was not signalled
    assert pid_alive(os.getpid())


def test_pid_alive_tells_running_from_gone() -> None:
    """This process runs; a reaped child does not."""
    assert (True, False) == (pid_alive(os.getpid()), pid_alive(_dead_pid()))


def test_port_if_free_keeps_a_free_port_and_replaces_a_taken_one(listener: int) -> None:
    """NATS's default port is used only when it can be bound."""
    assert listener != port_if_free(listener)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    assert free == port_if_free(free)
