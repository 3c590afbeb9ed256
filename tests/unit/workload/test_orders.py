"""The order workload: valid TiCDC canal-json, unique message ids, exact expected state."""

import itertools

import orjson

from tidelake.formats import decode
from tidelake.workload.orders import OrderWorkload, WorkloadSpec


def _messages(events: int, seed: int = 3) -> tuple[OrderWorkload, list]:  # type: ignore[type-arg]
    w = OrderWorkload(WorkloadSpec(events=events, seed=seed))
    return w, [m for txn in w.transactions() for m in txn]


def test_every_message_id_is_unique() -> None:
    """Ids are positions: JetStream's de-duplication must never drop a real change."""
    _, msgs = _messages(5_000)
    assert len(msgs) == len({m.msg_id for m in msgs})


def test_expected_state_equals_the_fold_of_the_decoded_stream() -> None:
    """Decoding every message and keeping the last event per key by position gives the
    workload's expected rows: the generator's bookkeeping and its messages agree."""
    w, msgs = _messages(5_000)
    last: dict[tuple[str, tuple[str, ...]], object] = {}
    for seq, m in enumerate(msgs, start=1):
        for ev in decode(m.payload, seq=seq).events:
            if not ev.op.is_row_change:
                continue  # the CREATE TABLE the stream opens with
            key = (ev.table_id, tuple(str(v) for v in (ev.key or {}).values()))
            prev = last.get(key)
            if prev is None or prev.position < ev.position:  # type: ignore[attr-defined]
                last[key] = ev
    actual: dict[str, list[dict[str, str | None]]] = {}
    for (table, _), ev in sorted(last.items(), key=lambda kv: kv[0]):
        if ev.op.value != "delete":  # type: ignore[attr-defined]
            actual.setdefault(table, []).append(ev.after)  # type: ignore[attr-defined]
    expected = {t: rows for t, rows in w.expected_rows().items() if rows}
    for rows in (*expected.values(), *actual.values()):
        rows.sort(key=lambda r: orjson.dumps(r))
    assert expected == actual


def test_the_mix_has_every_tricky_case() -> None:
    """Updates twice in one transaction, same-millisecond transactions, key changes; the
    stream opens with each table's CREATE TABLE."""
    _, msgs = _messages(5_000)
    commit_ts = [orjson.loads(m.payload)["_tidb"]["commitTs"] for m in msgs]
    physical = [ts >> 18 for ts in commit_ts]
    same_txn = sum(1 for a, b in itertools.pairwise(commit_ts) if a == b)
    same_ms_other_txn = sum(
        1
        for (a, pa), (b, pb) in zip(
            zip(commit_ts, physical, strict=True),
            zip(commit_ts[1:], physical[1:], strict=True),
            strict=False,
        )
        if a != b and pa == pb
    )
    kinds = {orjson.loads(m.payload)["type"] for m in msgs}
    assert {"CREATE", "INSERT", "UPDATE", "DELETE"} == kinds
    assert same_txn > 0
    assert same_ms_other_txn > 0


def test_row_messages_name_types_as_ticdc_does_by_default() -> None:
    """mysqlType without parameters (``decimal``, ``varchar``): TiCDC's default
    (``GetMySQLType`` in pingcap/tiflow, content-compatible off); the CREATE TABLE carries
    the precision and scale the lake types by."""
    _, msgs = _messages(200)
    bodies = [orjson.loads(m.payload) for m in msgs]
    creates = [b["sql"] for b in bodies if b["isDdl"]]
    rows = [b for b in bodies if not b["isDdl"] and b["table"] == "orders"]
    assert "`order_total` DECIMAL(12,2)" in next(s for s in creates if "`orders`" in s)
    assert "decimal" == rows[0]["mysqlType"]["order_total"]
