"""bus/kafka.py: the Kafka bus's own rules, without a broker — sequences from offsets, header
round trips, the settings it refuses, what counts as pending."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelake.bus import kafka as kbus
from tidelake.config import BusConfig
from tidelake.errors import BusError, ConfigError


def test_a_records_sequence_is_its_offset_plus_one() -> None:
    assert [1, 2, 1_000_001] == [kbus.seq_of(o) for o in (0, 1, 1_000_000)]
    assert all(kbus.offset_of(kbus.seq_of(o)) == o for o in range(100))


def test_headers_round_trip_as_text_and_undecodable_bytes_are_replaced() -> None:
    headers = {kbus.SUBJECT_HEADER: "cdc.shop.orders", kbus.MSG_ID_HEADER: "kafka:t:0:7"}
    assert headers == kbus.headers_dict(kbus.headers_list(headers))
    # Kafka allows any bytes (and a null) in a header value; the last of a name wins.
    got = kbus.headers_dict([("a", b"\xff"), ("b", None), ("b", b"two")])  # type: ignore[list-item]
    assert {"a": "\ufffd", "b": "two"} == got
    assert {} == kbus.headers_dict(None)


def test_settings_refuse_another_bus_and_a_kafka_bus_without_servers() -> None:
    with pytest.raises(ConfigError, match="not kafka"):
        kbus.settings(BusConfig())
    with pytest.raises(ConfigError, match="bootstrap_servers"):
        kbus.settings(BusConfig(kind="kafka"))
    k = kbus.settings(BusConfig(kind="kafka", kafka={"bootstrap_servers": "h:9092"}))
    assert ("tidelake.cdc", "tidelake.cdc.dlq") == (k.topic, k.dlq_topic)


@pytest.mark.parametrize(
    ("first", "end", "committed", "pending"),
    [
        (0, 100, None, 100),  # a new group reads everything the topic holds
        (0, 100, 40, 60),
        (50, 100, 40, 50),  # what retention deleted is not pending (it is lost: the stager says)
        (0, 100, 100, 0),
    ],
)
def test_pending_counts_what_the_topic_holds_past_the_committed_offset(
    first: int, end: int, committed: int | None, pending: int
) -> None:
    assert pending == kbus.TopicState(first, end, committed).pending


def test_the_cdc_topic_must_have_one_partition() -> None:
    described = [{"topic": "t", "partitions": [{"partition": 0}, {"partition": 1}]}]
    assert 2 == kbus._partition_count(described, "t")
    with pytest.raises(BusError, match="does not describe"):
        kbus._partition_count(described, "other")


def test_client_options_carry_tls_and_sasl_and_read_the_password_from_the_environment(
    tmp_path: Path,
) -> None:
    from tidelake.config import load_config

    plain = BusConfig(kind="kafka", kafka={"bootstrap_servers": "h:9092"})
    assert {"bootstrap_servers": "h:9092"} == kbus.client_options(plain.kafka)

    path = tmp_path / "tidelake.yaml"
    path.write_text(
        "bus:\n  kind: kafka\n  kafka:\n    bootstrap_servers: h:9093\n"
        "    sasl: {mechanism: SCRAM-SHA-512, username: tl}\n"
    )
    cfg = load_config(path, environ={"TIDELAKE_BUS__KAFKA__SASL__PASSWORD": "pw"})
    options = kbus.client_options(cfg.bus.kafka)
    assert ("SASL_PLAINTEXT", "SCRAM-SHA-512", "tl", "pw") == (
        options["security_protocol"],
        options["sasl_mechanism"],
        options["sasl_plain_username"],
        options["sasl_plain_password"],
    )
    assert "pw" not in repr(cfg), "the password never shows in the config's text"


def test_the_sasl_password_is_refused_in_the_config_file(tmp_path: Path) -> None:
    from tidelake.config import load_config

    path = tmp_path / "tidelake.yaml"
    path.write_text(
        "bus:\n  kind: kafka\n  kafka:\n    bootstrap_servers: h:9093\n"
        "    sasl: {username: tl, password: pw}\n"
    )
    with pytest.raises(ConfigError, match="TIDELAKE_BUS__KAFKA__SASL__PASSWORD"):
        load_config(path, environ={})
