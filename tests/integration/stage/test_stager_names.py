"""Hostile and colliding names through a real stager and nats-server (issue 23, deliver 4
and 5; stage/admission.py, names.py).

Probes: `a.b`.`c` and `a`.`b.c` in one batch staged to one file, one overwriting the other
(acked); a database named ``../../manifests/1-99999999999999999999-evil`` wrote a fake
manifest; a NUL byte or a 256-character name crash-looped the stager until the message was
dead-lettered as ``max_deliver``, its reason lost; a key column ``_tl_op`` stalled the ingest.
"""

from __future__ import annotations

import time

import orjson
import pytest
from stagekit import StageEnv, canal_json, run

from tidelake.bus import dlq
from tidelake.stage.manifest import list_manifests

pytestmark = pytest.mark.integration

EVIL = "../../manifests/1-99999999999999999999-evil"


def test_names_are_staged_apart_or_refused_on_the_first_delivery(stage_env: StageEnv) -> None:
    """One batch: two dotted tables and the traversal name each staged to their own file
    (2 + 2 + 1 rows), the NUL, 256-character and ``_tl_op`` messages dead-lettered on their
    first delivery with their rule; nothing written outside the batch, one manifest."""
    env = stage_env
    tso = time.time_ns() // 1_000_000 << 18
    subject = env.subject("shop", "names")
    reserved = orjson.loads(canal_json("shop", "keyed", 9, tso + 9, pk=["_tl_op"]))
    reserved["data"][0]["_tl_op"] = "1"
    messages = [
        (subject, canal_json("a.b", "c", 1, tso + 1)),
        (subject, canal_json("a", "b.c", 1, tso + 2)),
        (subject, canal_json("a.b", "c", 2, tso + 3)),
        (subject, canal_json("a", "b.c", 2, tso + 4)),
        (subject, canal_json(EVIL, "t", 1, tso + 5)),
        (subject, canal_json("sh\x00op", "orders", 1, tso + 6)),
        (subject, canal_json("shop", "t" * 256, 1, tso + 7)),
        (subject, orjson.dumps(reserved)),
    ]
    run(env.publish(messages))
    stager = env.spawn_stager(once=True)
    assert 0 == stager.wait(120), env.log_text()

    staged = env.staged()
    dead = {
        int(m.headers[dlq.HEADER_STREAM_SEQ]): (
            m.headers[dlq.HEADER_DELIVERY_COUNT],
            m.headers[dlq.HEADER_REASON].split(":")[0],
        )
        for m in run(env.dlq_messages())
        if m.headers
    }
    expected = {
        "rows": {"`a.b`.c": 2, "a.`b.c`": 2, f"`{EVIL}`.t": 1},
        "dead": {6: ("1", "illegal_name"), 7: ("1", "illegal_name"), 8: ("1", "illegal_name")},
        "manifests": 1,
    }
    actual = {
        "rows": dict(staged.rows_by_table),
        "dead": dead,
        "manifests": len(list_manifests(env.storage)),
    }
    assert expected == actual
    reasons = {
        int(m.headers[dlq.HEADER_STREAM_SEQ]): m.headers[dlq.HEADER_REASON]
        for m in run(env.dlq_messages())
        if m.headers
    }
    wanted = {
        6: "holds a NUL character",
        7: "is 256 characters",
        8: "table shop.keyed: column '_tl_op' uses a prefix reserved",
    }
    assert wanted == {seq: text for seq, text in wanted.items() if text in reasons[seq]}, reasons
