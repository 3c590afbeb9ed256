"""How `make test` shares the suite between its pytest-xdist workers.

`make test` runs ``pytest -n 2 --dist loadscope``: each test file goes whole to one worker, so
a file's module-scoped servers (nats-server, MariaDB, PostgreSQL, Debezium Server) start once.
Some files must also share a worker with each other, and :data:`GROUPS` names them by path:

- ``spark``: the lake, view and Debezium Server tests start a Spark JVM with the Hudi bundle
  in the test process (a session-scoped one for lake and view). On one worker it starts once,
  not once per worker, and these JVMs never run two at a time.
- ``chaos``: the fault runs mount loop devices and count processes by name; two at once would
  see each other's.

(xdist's own ``--dist loadgroup`` with ``xdist_group`` marks would say the same, but with
pytest 9 and xdist 3.8 the marks group nothing: xdist rewrites a private attribute that pytest
no longer reads the node id from.) ``TEST_WORKERS=0 make test`` runs the suite in one process.
"""

from __future__ import annotations

from typing import Any

import pytest

GROUPS: dict[str, str] = {
    "tests/integration/lake/": "spark",
    "tests/integration/view/": "spark",
    "tests/integration/debezium_server/": "spark",
    "tests/chaos/": "chaos",
}


def group_of(nodeid: str) -> str:
    """The unit of work a test goes to a worker in: its group, or else its file."""
    path = nodeid.split("::", 1)[0]
    for prefix, group in GROUPS.items():
        if path.startswith(prefix):
            return group
    return path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getoption("dist", None) != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return GroupScheduling(config, log)
