"""Implausible positions through a real stager and nats-server: dead-lettered on the first
delivery with their reason, every other event staged (issue 23, deliver 4;
``formats/positions.py``).

Probes: one canal-json event with ``_tidb.commitTs`` = 2^64-1 moved its table's watermark
past every later real event (silent loss); an ``es`` of 10^15 made the ingest raise every
round. Both now end in the DLQ with ``implausible_position: …`` and never reach a batch.
"""

from __future__ import annotations

import time

import orjson
import pytest
from stagekit import StageEnv, canal_json, run

from tidelake.bus import dlq

pytestmark = pytest.mark.integration


def _with(payload: bytes, **fields: object) -> bytes:
    body = orjson.loads(payload)
    body.update(fields)
    return orjson.dumps(body)


def test_an_impossible_commit_ts_and_es_are_dead_lettered_with_their_reason(
    stage_env: StageEnv,
) -> None:
    """Ten valid rows (TSOs of now), then one with commitTs 2^64-1, one plain canal-json row
    with es 10^15, ten more valid rows: 20 staged, 2 in the DLQ with their reasons."""
    env = stage_env
    now_tso = time.time_ns() // 1_000_000 << 18
    subject = env.subject("shop", "orders")

    def valid(i: int) -> tuple[str, bytes]:
        return subject, canal_json("shop", "orders", i, now_tso + i)

    huge = _with(canal_json("shop", "orders", 100, 0), _tidb={"commitTs": 2**64 - 1})
    plain = orjson.loads(canal_json("shop", "orders", 101, 0))
    del plain["_tidb"]  # plain canal-json: es is the commit time
    far_es = _with(orjson.dumps(plain), es=10**15)
    messages = [valid(i) for i in range(10)]
    messages += [(subject, huge), (subject, far_es)]
    messages += [valid(i) for i in range(10, 20)]
    run(env.publish(messages))

    stager = env.spawn_stager(once=True)
    assert 0 == stager.wait(120), env.log_text()

    staged = env.staged()
    dead = {
        int(m.headers[dlq.HEADER_STREAM_SEQ]): m.headers[dlq.HEADER_REASON]
        for m in run(env.dlq_messages())
        if m.headers
    }
    assert set(range(1, 11)) | set(range(13, 23)) == set(staged.seq_counts)
    expected = {
        11: "implausible_position: shop.orders: commitTs 18446744073709551615 is not a TSO "
        "(at most 2^63-1)",
        12: "implausible_position: shop.orders: commit time 1000000000000000 ms is",
    }
    assert expected[11] == dead[11]
    assert dead[12].startswith(expected[12]), dead[12]
    assert {11, 12} == set(dead)
