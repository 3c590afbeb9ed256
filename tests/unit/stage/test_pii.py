"""Per-column PII masking before staging (stage/pii.py) and its configuration."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from tidelake.config import load_config
from tidelake.errors import ConfigError
from tidelake.events import ChangeEvent, Op, Position
from tidelake.stage.pii import MASKED_TYPE, PiiMasker, PiiRefusedError, mask_value

KEY = b"k3y-only-in-the-environment"
RULES = {"shop.customers": {"email": "hash", "ssn": "mask", "birth": "null"}}


def _event(
    op: Op = Op.UPDATE, table: str = "customers", pk: tuple[str, ...] = ("id",)
) -> ChangeEvent:
    after = {"id": "7", "email": "ada@example.com", "ssn": "123-45-6789", "birth": "1815-12-10"}
    before = {**after, "email": "old@example.com"}
    return ChangeEvent(
        source="test",
        database="shop",
        table=table,
        op=op,
        position=Position((1, 0)),
        pk=pk,
        key={"id": "7"},
        before=before,
        after=None if op is Op.DELETE else after,
        column_types={"id": "bigint", "email": "varchar(64)", "ssn": "char(11)", "birth": "date"},
    )


def test_hash_mask_and_null_apply_to_every_image_before_staging() -> None:
    """email becomes the keyed HMAC (before and after), ssn keeps its last 4, birth is NULL,
    the key and other tables are untouched; masked columns are typed text."""
    masker = PiiMasker(RULES, KEY)
    (out,) = masker.apply([_event()])
    digest = hmac.new(KEY, b"ada@example.com", hashlib.sha256).hexdigest()
    assert out.after is not None
    assert out.before is not None
    expected_after = {"id": "7", "email": digest, "ssn": "*******6789", "birth": None}
    assert expected_after == out.after
    assert hmac.new(KEY, b"old@example.com", hashlib.sha256).hexdigest() == out.before["email"]
    assert {"id": "7"} == out.key
    assert MASKED_TYPE == out.column_types["email"] == out.column_types["ssn"]
    assert "bigint" == out.column_types["id"]
    (other,) = masker.apply([_event(table="orders")])
    assert _event(table="orders") == other


def test_equal_values_hash_equal_and_depend_on_the_key() -> None:
    """The same value hashes the same (joins still work); another key gives another hash."""
    a = PiiMasker(RULES, KEY).apply([_event(), _event()])
    b = PiiMasker(RULES, b"another key").apply([_event()])
    assert a[0].after is not None
    assert a[1].after is not None
    assert b[0].after is not None
    assert a[0].after["email"] == a[1].after["email"]
    assert a[0].after["email"] != b[0].after["email"]


def test_a_masked_primary_key_is_refused_with_a_clear_reason() -> None:
    """A rule on a key column refuses the message (it goes to the DLQ with this reason)."""
    masker = PiiMasker({"shop.customers": {"id": "mask"}}, None)
    with pytest.raises(PiiRefusedError) as caught:
        masker.apply([_event()])
    assert "masks id of shop.customers, its primary key" in caught.value.reason


def test_null_values_and_ddl_pass_through() -> None:
    """NULL stays NULL; a DDL event is never rewritten."""
    event = _event()
    assert event.after is not None
    event.after["ssn"] = None
    (out,) = PiiMasker(RULES, KEY).apply([event])
    assert out.after is not None
    assert None is out.after["ssn"]
    ddl = ChangeEvent("test", "shop", "customers", Op.DDL, Position((2, 0)), ddl="ALTER TABLE x")
    assert [ddl] == PiiMasker(RULES, KEY).apply([ddl])


@pytest.mark.parametrize(
    ("value", "masked"),
    [("123-45-6789", "*******6789"), ("abcd", "****"), ("", ""), (12345678, "********")],
)
def test_mask_keeps_only_the_last_four_of_long_values(value: object, masked: str) -> None:
    """Short values are masked whole so the clear tail never is most of the value."""
    assert masked == mask_value(value)


def test_config_takes_the_key_from_the_environment_only(tmp_path: object) -> None:
    """stage.pii_key in the YAML file is refused; 'hash' without the env key is refused by the
    stager;
    with TIDELAKE_STAGE__PII_KEY it loads and the key is masked when shown."""
    from pathlib import Path

    base = Path(str(tmp_path))
    rules = "stage:\n  pii:\n    shop.customers: {email: hash}\n"
    no_key = base / "a.yaml"
    no_key.write_text(rules)
    with pytest.raises(ConfigError, match="TIDELAKE_STAGE__PII_KEY"):
        PiiMasker.from_config(load_config(no_key, environ={}).stage)
    in_file = base / "b.yaml"
    in_file.write_text(rules + "  pii_key: s3cret\n")
    with pytest.raises(ConfigError, match="secrets are not read from the config file"):
        load_config(in_file, environ={})
    cfg = load_config(no_key, environ={"TIDELAKE_STAGE__PII_KEY": "s3cret"})
    assert {"shop.customers": {"email": "hash"}} == cfg.stage.pii
    assert "s3cret" not in str(cfg.masked())
    bad = base / "c.yaml"
    bad.write_text("stage:\n  pii:\n    customers: {email: scramble}\n")
    with pytest.raises(ConfigError, match=r"stage\.pii"):
        load_config(bad, environ={})
