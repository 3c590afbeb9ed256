"""capture/kafka_source.py ``key_header``: what a Kafka key becomes on its way to the stager."""

from __future__ import annotations

import pytest

from tidelake.capture.kafka_source import key_header
from tidelake.errors import DecodeError
from tidelake.formats.debezium import parse_key


def test_a_key_that_cannot_be_a_header_becomes_one_the_stager_dead_letters() -> None:
    """A UTF-8 one-line key travels as it is; a binary or multi-line one is never dropped (the
    row would be keyed another way) but named in hex, which the Debezium decoder refuses, so
    the message goes to the DLQ with the key recoverable."""
    assert '{"id":1}' == key_header(b'{"id":1}')
    for bad in (b'{"id":"\xff"}', b'{\n"id": 1}'):
        header = key_header(bad)
        assert bad.hex() in header
        assert "\n" not in header
        with pytest.raises(DecodeError, match="key is not JSON"):
            parse_key(header.encode())
