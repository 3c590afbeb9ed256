"""The dead-letter stream's contract: its subjects and the headers that say why.

A message that cannot be staged is republished, payload untouched, to
``<dlq.subject_prefix>.<original subject>`` with these headers.
"""

from __future__ import annotations

#: Why the message was dead-lettered: the decoder's reason, or ``max_deliver``.
HEADER_REASON = "Tidelake-Reason"
#: The subject the message was originally published to.
HEADER_ORIGINAL_SUBJECT = "Tidelake-Original-Subject"
#: Its sequence in the CDC stream.
HEADER_STREAM_SEQ = "Tidelake-Stream-Seq"
#: How many times the stager's consumer had delivered it.
HEADER_DELIVERY_COUNT = "Tidelake-Delivery-Count"

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
