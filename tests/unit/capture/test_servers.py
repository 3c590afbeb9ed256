"""The private MariaDB server's socket path stays within the kernel's limit."""

from __future__ import annotations

import os
from pathlib import Path

from tidelake.capture.servers import MariaDBServer


def test_socket_lives_in_the_data_directory_when_the_path_is_short(tmp_path: Path) -> None:
    server = MariaDBServer(tmp_path / "m")
    assert server.socket == (tmp_path / "m").resolve() / "mysqld.sock"


def test_socket_moves_to_the_temporary_directory_when_the_path_is_too_long(
    tmp_path: Path,
) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    first, second = MariaDBServer(deep / "one"), MariaDBServer(deep / "two")
    assert len(os.fsencode(first.socket)) <= 107
    assert first.socket.name.startswith("tidelake-mariadb-")
    # Two servers never share a socket, and one server always names the same one.
    assert first.socket != second.socket
    assert MariaDBServer(deep / "one").socket == first.socket
