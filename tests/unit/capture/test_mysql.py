"""MySQL/MariaDB capture logic without a server: GTID bookkeeping, server identity and the
failover refusals (``capture/mysql.py``; the real-server form is
tests/integration/capture/test_gtid_failover.py)."""

from __future__ import annotations

import itertools

import pytest

from tidelake.capture.dsn import parse_dsn
from tidelake.capture.mysql import MySQLSource, _failover_dsn, _same_server
from tidelake.capture.runner import CaptureError, SourceUnavailableError
from tidelake.config import CaptureConfig

U1 = "3e11fa47-71ca-11e1-9e33-c80aa9429562"


def _source(**cfg: object) -> MySQLSource:
    dsn = parse_dsn("mysql://cap:secret@db1:3306/")
    return MySQLSource(CaptureConfig(source="mysql://cap@db1:3306/", **cfg), dsn)


def test_failover_sources_inherit_user_and_password_from_the_source() -> None:
    """A failover entry naming only host:port connects as the source's user with its
    password; one naming a user keeps it; a PostgreSQL DSN is refused."""
    src = _source(failover_sources=["mysql://db2:3307/", "mysql://other:pw@db3/"])
    assert [("db1", 3306, "cap", "secret"), ("db2", 3307, "cap", "secret"),
            ("db3", 3306, "other", "pw")] == [
        (d.host, d.port, d.user, d.password) for d in src.candidates
    ]  # fmt: skip
    with pytest.raises(CaptureError):
        _failover_dsn("postgresql://db2/x", parse_dsn("mysql://cap@db1/"))


def test_same_server_compares_address_server_id_and_uuid() -> None:
    """A state saved before identities were kept counts as read here; any of address,
    server_id or MySQL server_uuid differing means another server."""
    now = {"address": "db1:3306", "server_id": 1}
    assert _same_server(None, now)
    assert _same_server({"address": "db1:3306", "server_id": 1}, now)
    assert not _same_server({"address": "db2:3306", "server_id": 1}, now)
    assert not _same_server({"address": "db1:3306", "server_id": 2}, now)
    assert not _same_server({"address": "db1:3306", "server_id": 1, "uuid": U1}, now)


def test_mariadb_gtid_position_advances_at_each_commit() -> None:
    """The GTID of a transaction joins the saved position only once the transaction's
    commit is reached; per domain, the newest replaces the older."""
    src = _source()
    src.flavor, src.gtid_mode, src._gtid = "mariadb", True, "0-1-10,1-1-3"
    src._pending_gtid = "1-1-4"
    src._advance_gtid()
    assert "0-1-10,1-1-4" == src._gtid
    src._pending_gtid = "0-2-11"
    src._advance_gtid()
    assert "0-2-11,1-1-4" == src._gtid
    src._advance_gtid()  # a boundary without a GTID event (nothing pending) changes nothing
    assert {"epoch": 0, "server": {}, "flavor": "mariadb", "gtid": "0-2-11,1-1-4"} == (
        src._position_fields()
    )


def test_mysql_executed_set_grows_by_each_transaction() -> None:
    """MySQL: the saved position is the executed set, each committed GTID added to it; with
    no known starting set it stays unknown (a partial set would make the server resend)."""
    src = _source()
    src.flavor, src.gtid_mode, src._gtid = "mysql", True, f"{U1}:1-5"
    src._pending_gtid = f"{U1}:6"
    src._advance_gtid()
    assert f"{U1}:1-6" == src._gtid
    src._gtid, src._pending_gtid = None, f"{U1}:7"
    src._advance_gtid()
    assert src._gtid is None
    assert "gtid" not in src._position_fields()


def test_another_server_is_refused_without_a_gtid_position() -> None:
    """Resuming on another server needs GTIDs: refused in position_mode file, and when the
    saved position holds none (saved before GTID positions)."""
    src = _source(position_mode="file")
    with pytest.raises(CaptureError, match="positions carry no GTID"):
        src._switch_server({"address": "db0:3306"})
    src = _source()
    src.gtid_mode = True
    with pytest.raises(CaptureError, match="holds no GTID"):
        src._switch_server({"address": "db0:3306"})


class _Conn:
    open = True

    def close(self) -> None:
        self.open = False


def test_reconnect_waits_for_a_behind_server_to_catch_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lost server stays down; the failover source lacks transactions at first (a
    replica still applying): the capture keeps trying, round after round, and resumes there
    by GTID once it has them, instead of failing on the first look."""
    import threading

    from tidelake.capture import mysql

    src = _source(failover_sources=["mysql://db2:3306/"], failover_timeout_s=10)
    looks = []

    def connect(*, at: object = None, **_: object) -> _Conn:
        if getattr(at, "host", "") == "db1":
            raise SourceUnavailableError("db1 down")
        return _Conn()

    def probe() -> None:
        src.server = {"address": f"{src.dsn.host}:{src.dsn.port}", "server_id": 2}

    def switch(previous: object) -> str:
        looks.append(previous)
        if len(looks) < 3:
            raise mysql.ServerBehindError("behind")
        return "0-1-5"

    monkeypatch.setattr(src, "connect", connect)
    monkeypatch.setattr(src, "probe", probe)
    monkeypatch.setattr(src, "_switch_server", switch)
    monkeypatch.setattr("tidelake.capture.mysql.time.monotonic", itertools.count(0, 1).__next__)
    stop = threading.Event()
    monkeypatch.setattr(stop, "wait", lambda _s: False)
    assert "0-1-5" == src._reconnect(stop, {"address": "db1:3306", "server_id": 1})
    assert 3 == len(looks)
    assert "db2" == src.dsn.host


def test_reconnect_gives_up_after_the_timeout_with_the_last_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A failover source that never catches up: after ``failover_timeout_s`` the capture
    stops with the reason (the missing transactions), not a generic error."""
    import threading

    from tidelake.capture import mysql

    src = _source(failover_sources=["mysql://db2:3306/"], failover_timeout_s=5)

    def connect(*, at: object = None, **_: object) -> _Conn:
        if getattr(at, "host", "") == "db1":
            raise SourceUnavailableError("db1 down")
        return _Conn()

    def switch(_previous: object) -> str:
        raise mysql.ServerBehindError("db2 lacks transactions")

    monkeypatch.setattr(src, "connect", connect)
    monkeypatch.setattr(src, "probe", lambda: setattr(src, "server", {"address": "db2:3306"}))
    monkeypatch.setattr(src, "_switch_server", switch)
    monkeypatch.setattr("tidelake.capture.mysql.time.monotonic", itertools.count(0, 2).__next__)
    stop = threading.Event()
    monkeypatch.setattr(stop, "wait", lambda _s: False)
    with pytest.raises(mysql.ServerBehindError, match="db2 lacks transactions"):
        src._reconnect(stop, {"address": "db1:3306", "server_id": 1})
