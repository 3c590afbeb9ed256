"""Per-column masking of personal data, applied by the stager before anything is written.

``stage.pii`` names, per source table, what happens to a column's values::

    stage:
      pii:
        shop.customers: {email: hash, ssn: mask, birth_date: "null"}

* ``hash``: ``HMAC-SHA256(key, value as text)`` in hex. The key comes from the environment
  only (``TIDELAKE_STAGE__PII_KEY``), so equal values still join and group in the lake while
  nobody without the key can test a guess;
* ``mask``: every character but the last four replaced by ``*`` (all of them up to four);
* ``null``: the value is dropped.

NULL stays NULL. A masked column becomes text in the lake (its source type no longer fits).
The rule covers every image of an event (``before`` and ``after``), so neither the staged
files nor anything downstream ever hold the clear value.

Primary-key columns cannot be masked: the lake upserts and deletes by key, so a masked key
would merge distinct rows (``mask``) or make deletes miss (a changed key). A message of a
table whose rule names a key column is refused with :class:`PiiRefusedError` and dead-lettered
with that reason; fix ``stage.pii`` and replay it from the DLQ.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
from collections.abc import Iterable, Mapping
from typing import Any

from tidelake.config import StageConfig
from tidelake.errors import ConfigError, DecodeError
from tidelake.events import ChangeEvent, Op

#: The source type a masked column gets: its values are text from here on.
MASKED_TYPE = "text"
#: ``mask`` keeps this many trailing characters in clear.
MASK_KEEP = 4


class PiiRefusedError(DecodeError):
    """A message the configured masking cannot be applied to (e.g. a masked primary key)."""


def hash_value(key: bytes, value: Any) -> str:
    """Hex HMAC-SHA256 of the value's text."""
    return hmac.new(key, _text(value).encode(), hashlib.sha256).hexdigest()


def mask_value(value: Any) -> str:
    """All but the last :data:`MASK_KEEP` characters as ``*`` (all of them when short)."""
    text = _text(value)
    keep = MASK_KEEP if len(text) > 2 * MASK_KEEP else 0
    return "*" * (len(text) - keep) + text[len(text) - keep :]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


class PiiMasker:
    """Applies ``stage.pii`` to change events."""

    def __init__(self, rules: Mapping[str, Mapping[str, str]], key: bytes | None) -> None:
        self.rules = {table: dict(cols) for table, cols in rules.items() if cols}
        self._key = key

    @classmethod
    def from_config(cls, stage: StageConfig) -> PiiMasker:
        """Raises :class:`ConfigError` when a 'hash' rule has no key (only the stager needs
        the key, so only the stager checks it)."""
        key = stage.pii_key.get_secret_value().encode() if stage.pii_key is not None else None
        hashes = any(m == "hash" for cols in stage.pii.values() for m in cols.values())
        if hashes and key is None:
            raise ConfigError("stage.pii: 'hash' needs a key: set TIDELAKE_STAGE__PII_KEY")
        return cls(stage.pii, key)

    def __bool__(self) -> bool:
        return bool(self.rules)

    def apply(self, events: Iterable[ChangeEvent]) -> list[ChangeEvent]:
        """The events with their configured columns masked; raises :class:`PiiRefusedError`."""
        return [self._event(e) for e in events]

    def _event(self, event: ChangeEvent) -> ChangeEvent:
        rules = self.rules.get(event.table_id)
        if not rules or event.op is Op.DDL:
            return event
        keyed = sorted(set(rules) & set(event.pk))
        if keyed:
            raise PiiRefusedError(
                f"pii: stage.pii masks {', '.join(keyed)} of {event.table_id}, its primary key: "
                "the lake upserts and deletes by key, so a key cannot be masked; remove the "
                "rule, then replay this message from the DLQ"
            )
        types = dict(event.column_types)
        for column in rules:
            if column in types:
                types[column] = MASKED_TYPE
        return dataclasses.replace(
            event,
            before=self._image(event.before, rules),
            after=self._image(event.after, rules),
            column_types=types,
        )

    def _image(
        self, image: dict[str, Any] | None, rules: Mapping[str, str]
    ) -> dict[str, Any] | None:
        if image is None:
            return None
        out = dict(image)
        for column, method in rules.items():
            value = out.get(column)
            if column not in out or value is None:
                continue
            if method == "hash":
                if self._key is None:  # config validation requires the key; never guess one
                    raise PiiRefusedError("pii: 'hash' without TIDELAKE_STAGE__PII_KEY")
                out[column] = hash_value(self._key, value)
            elif method == "mask":
                out[column] = mask_value(value)
            else:
                out[column] = None
        return out
