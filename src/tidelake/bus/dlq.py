"""The dead-letter stream's contract: its subjects and the headers that say why.

A message that cannot be staged is republished, payload untouched, to
``<dlq.subject_prefix>.<original subject>`` with these headers, by :func:`publish` (the
stager's and the ingest's one way to send a dead letter).

A replay (``tidelake dlq replay``) republishes the payload to its original subject: it gets
a new stream sequence and keeps its old position. The ingest applies it key by key
(``lake/deletes.py``): it lands unless its key, or its whole table (a DDL), was deleted at a
later position, and Hudi's event-time ordering keeps a newer stored row; so a replay never
moves a row back and never resurrects a delete. A dead letter older than the table's delete
log (a table written before the log existed) is still skipped as stale and counted.
"""

from __future__ import annotations

from typing import Any

from tidelake.retry import async_retrying

#: Attempts of one dead-letter publish (about 3 s of back-off in all) before the caller
#: gives up: the stager's batch is then not staged, and redelivered later.
PUBLISH_ATTEMPTS = 5
#: First pause between two attempts (doubling, with jitter).
PUBLISH_FIRST_WAIT_S = 0.2

#: Why the message was dead-lettered: the decoder's reason, or ``max_deliver``.
HEADER_REASON = "Tidelake-Reason"
#: The subject the message was originally published to.
HEADER_ORIGINAL_SUBJECT = "Tidelake-Original-Subject"
#: Its sequence in the CDC stream.
HEADER_STREAM_SEQ = "Tidelake-Stream-Seq"
#: How many times the stager's consumer had delivered it.
HEADER_DELIVERY_COUNT = "Tidelake-Delivery-Count"

#: Set when the payload did not fit in the DLQ message (original size + these headers over
#: the server's max_payload): the payload is in staging storage at this URI, the body empty.
HEADER_PAYLOAD_STORED = "Tidelake-Payload-Stored"

#: Reason given to a message dead-lettered because it was delivered ``max_deliver`` times.
REASON_MAX_DELIVER = "max_deliver"

#: Header values are single-line text; the reason is cut to this length.
_MAX_REASON_CHARS = 512


def dlq_subject(prefix: str, original_subject: str) -> str:
    return f"{prefix}.{original_subject}"


def dlq_headers(
    reason: str, original_subject: str, stream_seq: int, deliveries: int
) -> dict[str, str]:
    clean = " ".join(reason.split())[:_MAX_REASON_CHARS] or "unknown"
    return {
        HEADER_REASON: clean,
        HEADER_ORIGINAL_SUBJECT: original_subject,
        HEADER_STREAM_SEQ: str(stream_seq),
        HEADER_DELIVERY_COUNT: str(deliveries),
        # The same message dead-lettered twice (a restaged batch) is stored once.
        "Nats-Msg-Id": f"tidelake-dlq-{stream_seq}",
    }


def stored_payload_path(stream_seq: int) -> str:
    """Where the stager keeps a dead letter's payload too large to travel with its headers."""
    return f"dlq-payloads/{stream_seq:020d}.bin"


def header_bytes(headers: dict[str, str]) -> int:
    """Size of the NATS header block these headers make (``NATS/1.0`` line, ``k: v`` lines)."""
    return len(b"NATS/1.0\r\n\r\n") + sum(len(k) + len(v) + 4 for k, v in headers.items())


async def publish(
    js: Any, subject: str, payload: bytes, headers: dict[str, str], *, stream: str
) -> Any:
    """Publish one dead letter to ``stream`` and return its PubAck, retrying a transient
    failure (a timeout, no stream response, a closed connection: ``tidelake.errors``) up to
    :data:`PUBLISH_ATTEMPTS` times; the last error is raised as it is. A refusal (400/404)
    is raised at once. Retrying is safe: the ``Nats-Msg-Id`` header makes a copy stored
    twice one message."""
    async for attempt in async_retrying(
        "publish to the DLQ", attempts=PUBLISH_ATTEMPTS, first_wait_s=PUBLISH_FIRST_WAIT_S
    ):
        with attempt:
            return await js.publish(subject, payload, headers=headers, stream=stream)
    raise AssertionError("unreachable: tenacity either returns or raises")
