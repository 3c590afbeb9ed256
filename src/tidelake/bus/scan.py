"""Read a stream's stored messages once each, in stream order (demo and test read-backs).

An ordered push consumer re-creates itself when it sees a gap or misses a heartbeat, which
a loaded machine provokes; across such a reset a message can be delivered twice. Counting
deliveries would then stop short of the stream's last messages, so :func:`scan_stream`
keys them by stream sequence and reads until it holds ``count`` distinct ones.
"""

from __future__ import annotations

from typing import Any

from nats.aio.msg import Msg


async def scan_stream(js: Any, subject: str, count: int, timeout_s: float = 10.0) -> list[Msg]:
    """The first ``count`` distinct messages of ``subject``, by stream sequence."""
    sub = await js.subscribe(subject, ordered_consumer=True)
    seen: dict[int, Msg] = {}
    try:
        while len(seen) < count:
            msg = await sub.next_msg(timeout=timeout_s)
            seen.setdefault(int(msg.metadata.sequence.stream), msg)
    finally:
        await sub.unsubscribe()
    return [seen[seq] for seq in sorted(seen)]
