"""Which subjects no stager takes (bus/coverage.py): NATS subject matching, the stager
marker, and provisioning's comparison of it (bus/provision.py)."""

from __future__ import annotations

import pytest
from nats.js import api

from tidelake.bus.coverage import (
    Coverage,
    consumer_filters,
    is_stager,
    subject_matches,
    unstaged_subjects,
)
from tidelake.bus.provision import STAGER_METADATA, _differences, consumer_config, own_metadata
from tidelake.config import BusConfig


@pytest.mark.parametrize(
    ("filter_subject", "subject", "expected"),
    [
        ("cdc.shop.orders", "cdc.shop.orders", True),
        ("cdc.shop.orders", "cdc.shop.order", False),
        ("cdc.shop.orders", "cdc.shop.orders.x", False),
        ("cdc.shop", "cdc.shop.orders", False),
        (">", "cdc", True),
        (">", "cdc.shop.orders", True),
        ("cdc.>", "cdc.shop", True),
        ("cdc.>", "cdc.shop.orders", True),
        ("cdc.>", "cdc", False),
        ("cdc.>", "cdcx.shop", False),
        ("cdc.shop.>", "cdc.shop", False),
        ("*", "cdc", True),
        ("*", "cdc.shop", False),
        ("cdc.*", "cdc.shop", True),
        ("cdc.*", "cdc.shop.orders", False),
        ("cdc.*", "cdc", False),
        ("cdc.*.x", "cdc.a.x", True),
        ("cdc.*.x", "cdc.a.y", False),
        ("cdc.*.x", "cdc.a.b.x", False),
        ("cdc.*.x", "cdc.x", False),
        ("*.*.orders", "cdc.shop.orders", True),
        ("cdc.*.>", "cdc.shop.orders", True),
        ("cdc.*.>", "cdc.shop", False),
        ("cdc.shop*", "cdc.shops", False),  # a wildcard is a whole token; this one is literal
        ("cdc.shop*", "cdc.shop*", True),
        ("cdc.s>", "cdc.s.x", False),
    ],
)
def test_subject_matches_follows_nats_rules(
    filter_subject: str, subject: str, expected: bool
) -> None:
    """``*`` is exactly one token, a last ``>`` one or more tokens, anything else literal."""
    assert expected == subject_matches(filter_subject, subject)


def test_unstaged_subjects_keeps_what_no_filter_matches_with_its_count() -> None:
    """Literal and wildcard filters together; only the subjects none of them matches remain,
    with their message counts."""
    subjects = {
        "cdc.shop.orders": 4,
        "cdc.shop.items": 2,
        "cdc.crm.people": 7,
        "cdc.crm": 1,
        "cdc.hr.staff.x": 3,
        "cdc.hr.staff": 5,
    }
    filters = ["cdc.shop.orders", "cdc.crm.>", "cdc.*.staff"]
    expected = {"cdc.shop.items": 2, "cdc.crm": 1, "cdc.hr.staff.x": 3}
    assert expected == unstaged_subjects(filters, subjects)


def test_unstaged_subjects_of_no_filters_is_every_subject_and_of_everything_none() -> None:
    """No filter takes nothing; a ``>`` filter takes every subject."""
    subjects = {"cdc.a.b": 1, "x": 2}
    assert (subjects, {}) == (unstaged_subjects([], subjects), unstaged_subjects([">"], subjects))


def test_consumer_filters_reads_either_kind_and_none_means_every_subject() -> None:
    """filter_subjects (a worker's set), filter_subject (one), neither: every subject."""
    expected = (["cdc.a.x", "cdc.b.>"], ["cdc.a.>"], None, None)
    actual = (
        consumer_filters(api.ConsumerConfig(filter_subjects=["cdc.a.x", "cdc.b.>"])),
        consumer_filters(api.ConsumerConfig(filter_subject="cdc.a.>")),
        consumer_filters(api.ConsumerConfig()),
        consumer_filters(api.ConsumerConfig(filter_subject="", filter_subjects=[])),
    )
    assert expected == actual


def test_only_a_consumer_marked_stager_is_a_stager() -> None:
    """The stager marker decides; the server's own keys, another role or none do not."""
    server_keys = {"_nats.req.level": "0", "_nats.ver": "2.15.2"}
    expected = (True, False, False, False)
    actual = (
        is_stager(api.ConsumerConfig(metadata={**server_keys, **STAGER_METADATA})),
        is_stager(api.ConsumerConfig(metadata=server_keys)),
        is_stager(api.ConsumerConfig(metadata={"tidelake.role": "route"})),
        is_stager(api.ConsumerConfig()),
    )
    assert expected == actual


def test_coverage_counts_the_messages_of_its_unstaged_subjects() -> None:
    """``unstaged_messages`` is the sum over the unstaged subjects."""
    assert 7 == Coverage(("w1",), {"cdc.a.b": 3, "cdc.c.d": 4}).unstaged_messages


def test_the_stagers_consumer_config_carries_the_marker() -> None:
    """Provisioning asks for the stager marker in the consumer's metadata."""
    assert STAGER_METADATA == consumer_config(BusConfig()).metadata


def test_provisioning_compares_only_tidelakes_own_metadata_keys() -> None:
    """The keys nats-server 2.11+ adds (``_nats.*``) are no difference; a missing or other
    marker is."""
    want = consumer_config(BusConfig())
    server_keys = {"_nats.req.level": "0", "_nats.ver": "2.15.2", "_nats.level": "5"}
    marked = api.ConsumerConfig(metadata={**server_keys, **STAGER_METADATA})
    unmarked = api.ConsumerConfig(metadata=server_keys)
    other = api.ConsumerConfig(metadata={"tidelake.role": "route"})
    expected = ([], ["metadata"], ["metadata"], ["metadata"])
    actual = tuple(
        _differences(want, have, ("metadata",))
        for have in (marked, unmarked, other, api.ConsumerConfig())
    )
    assert expected == actual
    assert STAGER_METADATA == own_metadata(marked.metadata)
