"""Poison messages go to the DLQ stream with reason headers; the counts reconcile."""

from __future__ import annotations

import orjson
import pytest
from stagekit import StageEnv, canal_json, run

from tidelake.bus import dlq
from tidelake.runtime.storage import LocalStorage
from tidelake.stage.consumer import Stager
from tidelake.stage.control import StagerStats

pytestmark = pytest.mark.integration

GOOD = 20


def _poison(env: StageEnv) -> dict[str, bytes]:
    """Subject -> payload; one of each way a message can be unreadable."""
    good = canal_json("shop", "orders", 1, 440_000_000_000_000_001)
    return {
        env.subject("shop", "truncated"): good[: len(good) // 2],
        env.subject("shop", "notjson"): b"this is not json at all",
        env.subject("shop", "nopk"): canal_json("shop", "nopk", 1, 440_000_000_000_000_002, pk=[]),
        env.subject("shop", "unknown"): orjson.dumps({"hello": "world", "n": 1}),
        env.subject("shop", "badutf8"): b'{"database": "shop", "table": "\xff\xfe"}',
    }


async def _stage_once(env: StageEnv) -> StagerStats:
    nc = await env.client()
    try:
        stager = Stager(nc, env.cfg.bus, env.cfg.stage, LocalStorage(env.cfg.stage_root))
        return await stager.run(once=True)
    finally:
        await nc.close()


def test_poison_messages_end_in_the_dlq_with_reason_headers(stage_env: StageEnv) -> None:
    """Each unreadable message is in the DLQ under dlq.<subject> with its reason, original
    subject, stream sequence and delivery count; good rows around them are staged."""
    poison = _poison(stage_env)
    watermark = orjson.dumps(
        {"database": "shop", "table": "orders", "pkNames": None, "isDdl": False,
         "type": "TIDB_WATERMARK", "es": 1, "ts": 1, "sql": "", "data": None, "old": None,
         "_tidb": {"watermarkTs": 440_000_000_000_000_100}}
    )  # fmt: skip
    messages = [
        (stage_env.subject("shop", "orders"), canal_json("shop", "orders", i, 440 * 10**15 + i))
        for i in range(GOOD // 2)
    ]
    messages += list(poison.items())
    messages.append((stage_env.subject("shop", "orders"), watermark))
    messages += [
        (stage_env.subject("shop", "orders"), canal_json("shop", "orders", i, 441 * 10**15 + i))
        for i in range(GOOD // 2, GOOD)
    ]
    run(stage_env.publish(messages))
    seq_of = {subject: i + 1 for i, (subject, _) in enumerate(messages)}

    stats = run(_stage_once(stage_env))

    dead = run(stage_env.dlq_messages())
    assert len(dead) == len(poison)
    prefix = stage_env.cfg.bus.dlq.subject_prefix
    by_original = {}
    for m in dead:
        assert m.headers is not None
        original = m.headers[dlq.HEADER_ORIGINAL_SUBJECT]
        by_original[original] = m
        assert m.subject == f"{prefix}.{original}"
        assert m.data == poison[original]
        assert m.headers[dlq.HEADER_STREAM_SEQ] == str(seq_of[original])
        assert m.headers[dlq.HEADER_DELIVERY_COUNT] == "1"
        assert m.headers[dlq.HEADER_REASON]
    assert set(by_original) == set(poison)
    reason = {s.rsplit(".", 1)[-1]: m.headers[dlq.HEADER_REASON] for s, m in by_original.items()}
    assert "UTF-8" in reason["badutf8"]
    assert "primary key" in reason["nopk"]

    staged = stage_env.staged()
    assert dict(staged.rows_by_table) == {"shop.orders": GOOD}
    received = sum(m.received for m in staged.manifests)
    dead_lettered = sum(m.dead_lettered for m in staged.manifests)
    skipped = sum(m.skipped for m in staged.manifests)
    assert received == len(messages)
    assert dead_lettered == len(poison)
    assert skipped == 1
    assert received == sum(m.staged for m in staged.manifests) + dead_lettered + skipped
    assert (stats.received, stats.staged, stats.dead_lettered, stats.skipped) == (
        len(messages),
        GOOD,
        len(poison),
        1,
    )
    assert sum(stats.dead_lettered_by_reason.values()) == len(poison)
    info = run(stage_env.consumer_info())
    assert (info.num_pending, info.num_ack_pending) == (0, 0)
