"""stage/admission.py: hostile names are refused with a reason (never a crash), denied and
excess tables are refused rather than created, and the count survives a restart (issue 23,
deliver 4 and 5)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tidelake.config import TablesConfig
from tidelake.events import ChangeEvent, Op, Position
from tidelake.runtime.storage import LocalStorage
from tidelake.stage.admission import REGISTRY_PATH, TableAdmission


def _row(database: str, table: str, **after: str) -> ChangeEvent:
    row = after or {"id": "1"}
    return ChangeEvent(
        source="tidb",
        database=database,
        table=table,
        op=Op.INSERT,
        position=Position((1, 1)),
        pk=("id",) if "id" in row else (next(iter(row)),),
        key={"id": "1"} if "id" in row else {next(iter(row)): "1"},
        after=row,
    )


def _reason(admission: TableAdmission, event: ChangeEvent) -> str | None:
    return admission.refusal([event])


def test_hostile_names_are_refused_with_their_reason(tmp_path: Path) -> None:
    """NUL, a 256-byte name, a reserved or case-colliding column, a name of 64 emoji (legal
    for an unknown producer, 256 bytes: no path segment holds it): each refused with its rule
    on the first delivery, nothing raised (the probe crash-looped until max_deliver)."""
    admission = TableAdmission(TablesConfig(), LocalStorage(tmp_path))
    probes = {
        "nul": _row("sh\x00op", "orders"),
        "long": _row("shop", "t" * 256),
        "reserved": _row("shop", "orders", id="1", _tl_op="x"),
        "key_reserved": _row("shop", "orders", _tl_op="1"),
        "case": _row("shop", "orders", id="1", Id="2"),
        "pathless": replace(_row("shop", "\U0001f600" * 64), source="canal"),
    }
    expected = {
        "nul": "holds a NUL character",
        "long": "is 256 characters",
        "reserved": "'_tl_op' uses a prefix reserved",
        "key_reserved": "'_tl_op' uses a prefix reserved",
        "case": "differ only in case",
        "pathless": "name too long for a path segment",
    }
    actual = {}
    for name, event in probes.items():
        reason = _reason(admission, event) or ""
        actual[name] = expected[name] if expected[name] in reason else reason
    assert (expected, 0) == (actual, admission.admitted)


def test_allow_and_deny_patterns(tmp_path: Path) -> None:
    """``deny`` wins over ``allow``; a table outside ``allow`` is refused, not created."""
    config = TablesConfig(allow=["shop.*"], deny=["shop.tmp_*"])
    admission = TableAdmission(config, LocalStorage(tmp_path))
    actual = [
        _reason(admission, _row("shop", "orders")),
        _reason(admission, _row("shop", "tmp_1")),
        _reason(admission, _row("other", "orders")),
    ]
    expected = [
        None,
        "table_denied: table shop.tmp_1 is not allowed by stage.tables.allow/deny",
        "table_denied: table other.orders is not allowed by stage.tables.allow/deny",
    ]
    assert expected == actual


def test_a_burst_of_new_tables_stops_at_the_limit_across_restarts(tmp_path: Path) -> None:
    """3,000 new table names with a limit of 50 per database and 120 in all: 120 admitted,
    the rest refused with the limit named; a restarted stager reads the count back and
    refuses a new table while still admitting the known ones."""
    config = TablesConfig(max_tables=120, max_tables_per_database=50)
    storage = LocalStorage(tmp_path)
    admission = TableAdmission(config, storage)
    refused = [
        reason
        for i in range(3000)
        if (reason := _reason(admission, _row(f"db{i % 3}", f"t{i}"))) is not None
    ]
    restarted = TableAdmission(config, storage)
    expected = (120, 2880, True, 120, None, "table_limit")
    actual = (
        admission.admitted,
        len(refused),
        all(r.startswith("table_limit:") for r in refused),
        restarted.admitted,
        _reason(restarted, _row("db0", "t0")),
        (_reason(restarted, _row("db9", "new")) or "").split(":")[0],
    )
    assert expected == actual
    assert storage.exists(REGISTRY_PATH)


def test_a_refused_message_admits_none_of_its_tables(tmp_path: Path) -> None:
    """A message whose second table passes the limit admits neither table."""
    admission = TableAdmission(TablesConfig(max_tables=1), LocalStorage(tmp_path))
    reason = admission.refusal([_row("shop", "a"), _row("shop", "b")])
    assert ("table_limit", 0) == ((reason or "").split(":")[0], admission.admitted)
