"""Which subjects of the CDC stream no stager takes.

Several workers share one stream, each stager's durable consumer taking a set of subjects
(``bus.consumer.filter_subjects``, docs/deployment.md "Several workers"). A message whose
subject no stager's filters match is never staged: it stays in the stream until
``bus.stream.max_age_s`` removes it. :func:`stream_coverage` finds such subjects, with the
messages they hold now, so ``tidelake status`` and ``/metrics`` can show them.

The stagers' consumers are the ones carrying :data:`~tidelake.bus.provision.STAGER_METADATA`
(bus/provision.py); a route's and a view's consumers do not. When no consumer carries it (a
deployment provisioned before the marker, or no stager yet) coverage is unknown: None.

Cost: one consumer listing (a page holds 256 consumers) and, only when every stager filters,
one stream info with its subjects (the server lists up to 100,000 subjects in one answer).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from nats.js import JetStreamContext, api

from tidelake.bus.provision import ROLE_KEY, STAGER_METADATA

#: Consumers per page of JetStream's consumer listing (the server's ``JSApiListLimit``).
_LIST_PAGE = 256


@dataclass(frozen=True)
class Coverage:
    """What the stagers of one stream take."""

    #: The durable names of the stagers' consumers, sorted.
    stagers: tuple[str, ...]
    #: Subject → messages in the stream now, for each subject no stager's filters match.
    unstaged: dict[str, int]

    @property
    def unstaged_messages(self) -> int:
        return sum(self.unstaged.values())


def subject_matches(filter_subject: str, subject: str) -> bool:
    """Whether the NATS subject filter matches the (literal) subject: ``*`` is exactly one
    token, ``>`` (last) one or more tokens; anything else, ``a*`` included, is literal."""
    want = filter_subject.split(".")
    have = subject.split(".")
    for i, token in enumerate(want):
        if token == ">":
            return len(have) > i
        if i >= len(have) or (token != "*" and token != have[i]):
            return False
    return len(want) == len(have)


def unstaged_subjects(filters: Iterable[str], subjects: Mapping[str, int]) -> dict[str, int]:
    """The entries of ``subjects`` (subject → messages) that none of ``filters`` matches."""
    literal: set[str] = set()
    wild: list[str] = []
    for f in filters:
        if "*" in f.split(".") or f.split(".")[-1] == ">":
            wild.append(f)
        else:
            literal.add(f)
    return {
        subject: count
        for subject, count in subjects.items()
        if subject not in literal and not any(subject_matches(f, subject) for f in wild)
    }


def consumer_filters(config: api.ConsumerConfig) -> list[str] | None:
    """The subject filters a consumer takes; None when it takes every subject."""
    if config.filter_subjects:
        return list(config.filter_subjects)
    if config.filter_subject:
        return [config.filter_subject]
    return None


def is_stager(config: api.ConsumerConfig) -> bool:
    """Whether the consumer is a stager's: it carries tidelake's stager marker."""
    return (config.metadata or {}).get(ROLE_KEY) == STAGER_METADATA[ROLE_KEY]


async def _consumers(js: JetStreamContext, stream: str) -> list[api.ConsumerInfo]:
    """Every consumer of ``stream``: the listing is paged by the server."""
    out: list[api.ConsumerInfo] = []
    while True:
        page = await js.consumers_info(stream, offset=len(out) or None)
        out.extend(page)
        if len(page) < _LIST_PAGE:
            return out


async def stream_coverage(js: JetStreamContext, stream: str) -> Coverage | None:
    """The subjects of ``stream`` holding messages that no stager's consumer takes, and the
    stagers seen; None when no consumer carries the stager marker (coverage unknown)."""
    stagers = [c for c in await _consumers(js, stream) if is_stager(c.config)]
    if not stagers:
        return None
    durables = tuple(sorted(c.name for c in stagers))
    filters: list[str] = []
    for c in stagers:
        own = consumer_filters(c.config)
        if own is None:
            return Coverage(durables, {})  # one stager takes everything
        filters.extend(own)
    info = await js.stream_info(stream, subjects_filter=">")
    subjects = (info.state.subjects if info.state is not None else None) or {}
    return Coverage(durables, unstaged_subjects(filters, subjects))
