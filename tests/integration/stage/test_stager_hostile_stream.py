"""Issue 23, deliver 6, through the real stager: a mixed stream of hostile and valid messages
(every golden message, hundreds of them with one field at any depth replaced by an edge value,
hostile JSON text spliced into values, NaN, 1e400, BOM, empty, 10,000 columns, a column whose
type flips across events) published to a real nats-server and staged by a ``tidelake stage``
child process.

Each message must end exactly where the decoder says: staged when it decodes to events (or
dead-lettered by the stager with its own non-empty reason, e.g. a refused name), in the DLQ
with the decoder's reason when it does not decode, counted as skipped when it carries no row.
The counts reconcile (received = staged + dead-lettered + skipped), nothing stays pending,
and the stager process is never restarted and never dies.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from stagekit import StageEnv, canal_json, run, stop_process, wait_for

from golden import load_cases
from support.json_paths import json_paths, replaced
from tidelake.bus import dlq
from tidelake.errors import DecodeError
from tidelake.formats import decode
from tidelake.stage.consumer import KEY_HEADER

pytestmark = pytest.mark.integration

VALID_ROWS = 60
MUTATED = 300
SEED = 23  # the number: one fixed, reproducible stream

EDGE_VALUES: list[Any] = [
    None, True, False, 0, -1, 1.5, -0.0, 2**63 - 1, 2**63, 2**64 - 1, -(2**63), 10**15,
    1.7976931348623157e308, 5e-324, "", "x" * 3000, "NaN", "Infinity", "1e400", "ünï©ødé",
    "../../x", "\x00", ".hidden", "_tidelake", "n" * 256, "a.b",
    [], {}, [None], [[[[]]]], {"a": {"b": [1, "2", None]}}, "2024-02-30", "-1", "null",
]  # fmt: skip
HOSTILE_TOKENS = [
    b"NaN", b"Infinity", b"-Infinity", b"1e400", b"1" + b"0" * 400, b"18446744073709551616",
    b"\xef\xbb\xbf1", b'"\xff\xfe"', b'"\\ud800"', b'"\x00"', b"0x10", b"[" * 3000 + b"]" * 3000,
]  # fmt: skip

#: Source names that are data, not paths (the NAMES probes): the stager must stage them under
#: a safe name or dead-letter them with a reason on the first delivery, never crash on them.
HOSTILE_NAMES = [
    ("../../manifests/1-99999999999999999999-evil", "t"), ("shop\x00", "t"), ("shop", "t\x00"),
    (".hidden", "t"), ("_tidelake", "t"), ("n" * 256, "t"), ("shop", "n" * 256), ("a.b", "c"),
    ("a", "b.c"), ("Shop", "Orders"), ("shop", "/etc/passwd"), ("shop", ".."),
]  # fmt: skip


def _type_flips() -> list[bytes]:
    """One table's column ``v`` as an int, a string, a float, a bool, an object, a list, a
    null and a huge integer, event after event (schema-less Debezium envelopes)."""
    values: list[Any] = [1, "one", 1.5, True, {"n": 1}, [1, 2], None, 2**64 - 1]
    return [
        orjson.dumps(
            {
                "before": None,
                "after": {"id": i, "v": v},
                "source": {
                    "connector": "mysql",
                    "db": "fuzz",
                    "table": "flip",
                    "file": "binlog.000001",
                    "pos": 100 + i,
                    "row": 0,
                    "ts_ms": 1_700_000_000_000 + i,
                    "snapshot": "false",
                },
                "op": "c",
                "ts_ms": 1_700_000_000_000 + i,
            }
        )
        for i, v in enumerate(values)
    ]


def hostile_stream(env: StageEnv) -> list[tuple[str, bytes, bytes | None]]:
    """``(subject, payload, key)`` of the whole stream, in publish order, shuffled with the
    valid rows in between."""
    rnd = random.Random(SEED)
    golden = [
        (m, k) for case in load_cases() for m, k in zip(case.messages, case.keys, strict=True)
    ]
    other = env.subject("hostile", "m")
    out: list[tuple[str, bytes, bytes | None]] = [(other, m, k) for m, k in golden]
    for _ in range(MUTATED):
        message, key = rnd.choice(golden)
        parsed = orjson.loads(message)
        path = rnd.choice(list(json_paths(parsed)))
        out.append((other, orjson.dumps(replaced(parsed, path, rnd.choice(EDGE_VALUES))), key))
    marker = "\u2063tidelake-hostile\u2063"
    for token in HOSTILE_TOKENS:
        message, key = rnd.choice(golden)
        parsed = orjson.loads(message)
        path = rnd.choice([p for p in json_paths(parsed) if p])
        text = orjson.dumps(replaced(parsed, path, marker))
        out.append((other, text.replace(orjson.dumps(marker), token, 1), key))
    plain = canal_json("shop", "edge", 1, 440 * 10**15)
    columns = {f"c{i}": str(i) for i in range(10_000)}
    wide = orjson.loads(plain)
    wide["data"] = [{"id": "1", **columns}]
    wide["mysqlType"] = {"id": "bigint", **dict.fromkeys(columns, "varchar(16)")}
    wide["sqlType"] = None
    out += [
        (other, b"", None),
        (other, b" ", None),
        (other, b"null", None),
        (other, b"\xef\xbb\xbf" + plain, None),
        (other, plain.replace(b'"_tidb":{"commitTs":', b'"_tidb":{"commitTs":NaN,"x":'), None),
        (other, plain.replace(b'"id":"1"', b'"id":1e400'), None),
        (other, b"[" * 100_000 + b"]" * 100_000, None),
        (other, plain.replace(b'"name-1"', b'"\xc3\x28"'), None),
        (env.subject("shop", "edge"), orjson.dumps(wide), None),
    ]
    for i, (db, tbl) in enumerate(HOSTILE_NAMES):
        named = orjson.loads(canal_json("shop", "named", i, 442 * 10**15 + i))
        out.append((other, orjson.dumps({**named, "database": db, "table": tbl}), None))
    flip = env.subject("fuzz", "flip")
    out += [(flip, m, orjson.dumps({"id": i})) for i, m in enumerate(_type_flips())]
    rnd.shuffle(out)
    orders = env.subject("fuzz", "orders")
    for i in range(VALID_ROWS):
        out.insert(
            rnd.randrange(len(out) + 1),
            (orders, canal_json("fuzz", "orders", i, 441 * 10**15 + i), None),
        )
    return out


def predicted(subject: str, payload: bytes, key: bytes | None) -> tuple[str, str]:
    """What the decoder makes of one message: ("events" | "skipped" | "dead-letter", reason)."""
    try:
        result = decode(payload, seq=1, key_json=key, subject=subject)
    except DecodeError as exc:
        return "dead-letter", dlq.dlq_headers(exc.reason, subject, 1, 1)[dlq.HEADER_REASON]
    return ("events", "") if result.events else ("skipped", result.skipped or "")


async def _publish(env: StageEnv, stream: list[tuple[str, bytes, bytes | None]]) -> list[int]:
    nc = await env.client()
    try:
        js = nc.jetstream()
        seqs = []
        for subject, payload, key in stream:
            headers = {KEY_HEADER: key.decode()} if key else None
            seqs.append((await js.publish(subject, payload, headers=headers)).seq)
        return seqs
    finally:
        await nc.close()


@pytest.fixture
def hostile_env(stage_env_factory: Callable[..., StageEnv]) -> StageEnv:
    """Small batches, a short AckWait: a message that crashed the stager would come back
    (and count toward max_deliver) within the test's time."""
    return stage_env_factory(
        bus={"consumer": {"ack_wait_s": 5}}, stage={"max_events": 200, "max_age_s": 0.3}
    )


def test_a_hostile_stream_ends_staged_or_dead_lettered_and_the_stager_lives(
    hostile_env: StageEnv,
) -> None:
    """Probe list of deliver 6 through the real stager: every message ends staged or in the
    DLQ with its reason (the decoder's exact reason when it does not decode), counts
    reconcile, the stager is never restarted and never dies."""
    env = hostile_env
    stream = hostile_stream(env)
    expected = {i + 1: predicted(s, p, k) for i, (s, p, k) in enumerate(stream)}
    stager = env.spawn_stager(once=False)
    try:
        seqs = run(_publish(env, stream))
        assert list(range(1, len(stream) + 1)) == seqs

        def settled() -> bool:
            assert stager.alive(), "the stager died:\n" + stager.log_tail(40)
            info = run(env.consumer_info())
            return info.num_pending == 0 and info.num_ack_pending == 0

        wait_for(settled, 240, "the stager to ack the whole stream")
        assert (True, 1) == (stager.alive(), stager.starts)
    finally:
        stop_process(stager)

    staged = env.staged()
    dead = {
        int(m.headers[dlq.HEADER_STREAM_SEQ]): m.headers[dlq.HEADER_REASON]
        for m in run(env.dlq_messages())
        if m.headers
    }
    received = sum(m.received for m in staged.manifests)
    skipped = sum(m.skipped for m in staged.manifests)
    dead_lettered = sum(m.dead_lettered for m in staged.manifests)
    # A DDL naming no table (CREATE DATABASE) is staged in its manifest's ddl list only.
    staged_messages = set(staged.seq_counts) | {
        int(d["seq"]) for m in staged.manifests for d in m.ddl
    }

    # Counts: every message received once, in exactly one bucket.
    assert (len(stream), len(stream), len(stream)) == (
        received,
        sum(m.staged for m in staged.manifests) + dead_lettered + skipped,
        len(staged_messages) + dead_lettered + skipped,
    )
    assert (set(), len(dead)) == (staged_messages & set(dead), dead_lettered)
    # Where each message ended, against the decoder's verdict.
    should_die = {s: r for s, (kind, r) in expected.items() if kind == "dead-letter"}
    assert should_die == {s: r for s, r in dead.items() if s in should_die}
    should_skip = {s for s, (kind, _) in expected.items() if kind == "skipped"}
    assert (set(), len(should_skip)) == ((staged_messages | set(dead)) & should_skip, skipped)
    with_events = {s for s, (kind, _) in expected.items() if kind == "events"}
    refused = {s: r for s, r in dead.items() if s in with_events}
    assert with_events == (staged_messages & with_events) | set(refused)
    # A message the stager refused after decoding says why, and never "it crashed".
    assert {} == {
        s: r for s, r in refused.items()
        if not r.strip() or r.startswith(("decoder_error", dlq.REASON_MAX_DELIVER))
    }  # fmt: skip
    # The valid rows and the type flips are all staged.
    valid = {
        s
        for s, (subj, _, _) in zip(seqs, stream, strict=True)
        if subj.endswith((".orders", ".flip"))
    }
    assert valid == valid & staged_messages
    assert ({"fuzz.orders": VALID_ROWS, "fuzz.flip": 8}) == {
        t: n for t, n in staged.rows_by_table.items() if t.startswith("fuzz.")
    }


def test_the_stream_mixes_every_outcome() -> None:
    """The stream above is not vacuous: it holds messages of all three outcomes."""

    class _Env:
        def subject(self, database: str, table: str) -> str:
            return f"cdc1.{database}.{table}"

    stream = hostile_stream(_Env())  # type: ignore[arg-type]
    kinds = {predicted(s, p, k)[0] for s, p, k in stream}
    assert {"events", "skipped", "dead-letter"} == kinds
    assert len(stream) > MUTATED + VALID_ROWS
