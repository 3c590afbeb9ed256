"""The Redis sink: the latest row of each key as a Redis hash, versioned by source position.

Data layout (``P`` is ``key_prefix``, ``T`` the source table, ``K`` :meth:`RowChange.key_text`):

* ``P:T:K`` — a **hash** holding the row: one field per column, plus ``_tl_position`` (the
  position of the change that wrote it). Each upsert replaces the whole hash, so a column the
  source dropped does not linger. A value is stored as text: a string stays as it is, a number
  or a boolean is its JSON text (``42``, ``1.5``, ``true``), an object or array its compact
  JSON (non-ASCII kept), a DECIMAL its exact decimal text, bytes ``0x`` and hex, a date or
  time ISO 8601 (the webhook sink's forms). **NULL is an absent field**: a reader takes a
  missing column as NULL, and ``null`` in a field is the text ``null``. A change with a column
  named ``_tl_position``, a NaN or infinity, or a value of any other type is rejected
  (:class:`ChangesRejected`).
* ``P:T:%tombstones`` — a **hash** per table, ``K`` → position of the delete that removed the
  row. A key's entry is removed by the first newer upsert of that key.

``T`` and ``K`` are escaped so that no key can be read two ways: ``%`` becomes ``%25``, ``:``
``%3A`` and every control character (``\\x1f``, the separator of a composite key's values,
included) ``%XX``. An escaped part therefore has no ``:``, and a ``%`` in it is always
followed by two hexadecimal digits — which ``%tombstones`` is not, so no row key is a tombstone
key. The prefix is written as it is (a ``:`` in it is fine: it is the same in all keys of a sink).

The position guard runs **inside Redis**, as one Lua script call per batch (registered with
``register_script``; EVALSHA, loaded again on NOSCRIPT). For each change, in stream order, the
script reads the row's ``_tl_position`` and the key's tombstone and writes only when the
change's position is strictly greater than both, comparing byte by byte (Lua's own ``<`` on
strings follows the server's locale). An upsert then replaces the hash, sets the TTL when
``ttl_s`` is configured and drops the tombstone; a delete removes the hash and records the
tombstone. So a redelivered batch, a replay from an older sequence and changes of one key out
of order within a batch change nothing, and a replayed upsert older than a delete never brings
the row back. A script runs atomically: no other client sees half a batch. The script is
flagged (``#!lua``, Redis ≥ 7.0) so that Redis refuses it *before* it starts when it is out of
memory, rather than failing halfway; a key that holds some other type (written by someone
else) is skipped by the script and its change rejected, the rest of the batch is applied.
Redis Cluster is not supported: one script call touches keys of many hash slots.

Durability: :meth:`RedisSink.apply` returns when Redis answered the script, and that write is
on disk only as far as the server's persistence says. Run Redis with ``appendonly yes``; with
``appendfsync always`` each write is fsynced before Redis answers (nothing acknowledged is
lost on a crash, at the cost of one fsync per batch), with ``everysec`` (Redis's default) up
to about one second of acknowledged batches can be lost on a crash of the Redis host — they
are not re-sent by the route, since it acknowledged them. The sink logs a warning once when
the server has no AOF. A replica is not waited for (no ``WAIT``): a failover may lose the last
writes the same way.

Errors: a connection refused or reset, a timeout, a server still loading its data, a read-only
replica, out of memory, MASTERDOWN/TRYAGAIN/CLUSTERDOWN, a failed background save (MISCONF),
an authentication failure: :class:`SinkUnavailable` (the route retries the batch; applying it
again is harmless). Any other error of Redis: :class:`SinkError`.

A TTL (``ttl_s``) expires a row's hash that long after its last change; once expired, the
row's version is gone too, so a replay of an older upsert can write it again. Tombstones do
not expire.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import redis
import redis.exceptions as rex
import structlog
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from tidelake.config import RedisSinkConfig
from tidelake.route.change import (
    ChangesRejected,
    RowChange,
    SinkError,
    SinkUnavailable,
    scalar_text,
)

log = structlog.get_logger(__name__)

#: The row hash's field holding the position of the change that wrote it.
POSITION_FIELD = "_tl_position"
#: The last part of a table's tombstone hash (unreachable by an escaped key: module doc).
TOMBSTONES = "%tombstones"

#: Error codes of Redis replies that mean "not now" rather than "never".
_TRANSIENT_CODES = frozenset(
    {
        "LOADING",
        "BUSY",
        "MASTERDOWN",
        "READONLY",
        "OOM",
        "TRYAGAIN",
        "CLUSTERDOWN",
        "MISCONF",
        "NOREPLICAS",
        "NOAUTH",
        "WRONGPASS",
    }
)

#: KEYS: per change, its row hash then its table's tombstone hash.
#: ARGV: ttl seconds (0: none), then per change: op (u/d), key text, position, field count n,
#: then n field/value pairs.
#: Returns the 1-based indexes of changes skipped because a key holds another type.
_APPLY_LUA = """#!lua
local function above(a, b)
  if not b then return true end
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x > y end
  end
  return #a > #b
end
local function usable(key)
  local t = redis.call('TYPE', key)['ok']
  return t == 'hash' or t == 'none'
end
local ttl = tonumber(ARGV[1])
local a = 2
local rejected = {}
for c = 1, #KEYS / 2 do
  local row, tomb = KEYS[2 * c - 1], KEYS[2 * c]
  local op, member, pos, n = ARGV[a], ARGV[a + 1], ARGV[a + 2], tonumber(ARGV[a + 3])
  local first = a + 4
  a = first + 2 * n
  if not (usable(row) and usable(tomb)) then
    rejected[#rejected + 1] = c
  else
    local deleted = redis.call('HGET', tomb, member)
    if above(pos, redis.call('HGET', row, '_tl_position')) and above(pos, deleted) then
      redis.call('DEL', row)
      if op == 'u' then
        local fields = {'_tl_position', pos}
        for i = first, a - 1 do fields[#fields + 1] = ARGV[i] end
        redis.call('HSET', row, unpack(fields))
        if ttl > 0 then redis.call('EXPIRE', row, ttl) end
        if deleted then redis.call('HDEL', tomb, member) end
      else
        redis.call('HSET', tomb, member, pos)
      end
    end
  end
end
return rejected
"""


# --- key names and values (pure) --------------------------------------------------------------


def escape_part(text: str) -> str:
    """``text`` with ``%``, ``:`` and control characters as ``%XX`` (a bijection whose
    result has no ``:``)."""
    out: list[str] = []
    for ch in text:
        if ch in "%:" or ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"%{ord(ch):02X}")
        else:
            out.append(ch)
    return "".join(out)


def row_key(prefix: str, table: str, key_text: str) -> str:
    """The Redis key of one row's hash: ``prefix:table:key`` with table and key escaped."""
    return f"{prefix}:{escape_part(table)}:{escape_part(key_text)}"


def tombstone_key(prefix: str, table: str) -> str:
    """The Redis key of a table's tombstone hash (key text → position of its delete)."""
    return f"{prefix}:{escape_part(table)}:{TOMBSTONES}"


def _json_default(value: Any) -> str:
    """``json.dumps``' fallback inside an object or array value."""
    text = scalar_text(value)
    if text is None:
        raise TypeError(f"a {type(value).__name__} value cannot be stored in Redis")
    return text


def encode_value(value: Any) -> str | None:
    """A column value as stored in the hash; None (NULL) for a field left out. Raises
    :class:`TypeError` or :class:`ValueError` for a value with no text form here."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} has no JSON text")
        return json.dumps(value)
    if isinstance(value, dict | list):
        return json.dumps(
            value,
            separators=(",", ":"),
            ensure_ascii=False,
            allow_nan=False,
            default=_json_default,
        )
    return _json_default(value)


def encode_row(row: Mapping[str, Any]) -> list[str]:
    """The hash's field/value pairs of ``row``, flat (NULL columns left out). Raises
    :class:`ValueError` for a column named as the position field or a value with no text."""
    flat: list[str] = []
    for column, value in row.items():
        if column == POSITION_FIELD:
            raise ValueError(f"column {POSITION_FIELD!r} is the sink's own field")
        try:
            text = encode_value(value)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"column {column!r}: {exc}") from None
        if text is not None:
            flat += [column, text]
    return flat


def script_call(
    prefix: str, changes: Sequence[RowChange], ttl_s: int | None
) -> tuple[list[str], list[str]]:
    """The KEYS and ARGV of one script call applying ``changes``. Raises
    :class:`ChangesRejected` (nothing written) for changes that cannot be encoded."""
    keys: list[str] = []
    args: list[str] = [str(ttl_s or 0)]
    bad: list[tuple[int, str]] = []
    for change in changes:
        fields: list[str] = []
        if change.kind == "upsert":
            try:
                if change.row is None:
                    raise ValueError("an upsert without a row")
                fields = encode_row(change.row)
            except ValueError as exc:
                bad.append((change.seq, f"{change.table} seq {change.seq}: {exc}"))
                continue
        key_text = change.key_text()
        keys += [row_key(prefix, change.table, key_text), tombstone_key(prefix, change.table)]
        op = "u" if change.kind == "upsert" else "d"
        args += [op, key_text, change.position, str(len(fields) // 2), *fields]
    if bad:
        seqs = list(dict.fromkeys(seq for seq, _ in bad))
        raise ChangesRejected(seqs, "; ".join(reason for _, reason in bad))
    return keys, args


def _transient(exc: rex.RedisError) -> bool:
    """Whether a Redis error means "retry later"."""
    if isinstance(
        exc,
        rex.ConnectionError
        | rex.TimeoutError
        | rex.ReadOnlyError
        | rex.OutOfMemoryError
        | rex.TryAgainError
        | rex.ClusterDownError,
    ):
        return True
    if isinstance(exc, rex.ResponseError):
        text = str(exc)
        # Codes redis-py has no class for stay in the text (an error inside the script may
        # also come back as "ERR ... script: ...", with the original code after it).
        words = {w.strip(":,") for w in text.split()[:8]}
        return bool(words & _TRANSIENT_CODES)
    return False


# --- the sink ---------------------------------------------------------------------------------


class RedisSink:
    """A route's sink into Redis: the module doc describes the layout and the guard."""

    kind = "redis"

    def __init__(
        self,
        config: RedisSinkConfig,
        *,
        socket_timeout_s: float = 10.0,
        connect_timeout_s: float = 5.0,
    ) -> None:
        self.config = config
        # Few, quick retries of redis-py's own: the route retries a failed batch itself.
        self._client: redis.Redis = redis.Redis.from_url(
            config.url,
            password=config.password_value(),
            socket_timeout=socket_timeout_s,
            socket_connect_timeout=connect_timeout_s,
            retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), 1),
        )
        self._script = self._client.register_script(_APPLY_LUA)
        self._aof_checked = False

    def apply(self, changes: Sequence[RowChange]) -> None:
        """Apply ``changes`` (stream order) in one atomic script call; see the module doc."""
        if not changes:
            return
        keys, args = script_call(self.config.key_prefix, changes, self.config.ttl_s)
        try:
            skipped = self._script(keys=keys, args=args, client=self._client)
        except rex.RedisError as exc:
            if _transient(exc):
                raise SinkUnavailable(f"redis {self._where()}: {exc}") from exc
            raise SinkError(f"redis {self._where()}: {exc}") from exc
        self._check_aof()
        if skipped:
            seqs = list(dict.fromkeys(changes[int(i) - 1].seq for i in skipped))
            raise ChangesRejected(
                seqs, f"a key of the change holds another Redis type than a hash ({self._where()})"
            )

    def _where(self) -> str:
        """The server, for messages (no password)."""
        kwargs = self._client.connection_pool.connection_kwargs
        return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}/{kwargs.get('db', 0)}"

    def _check_aof(self) -> None:
        """Warn once when the server keeps no append-only file (module doc: durability)."""
        if self._aof_checked:
            return
        self._aof_checked = True
        try:
            info: dict[str, Any] = self._client.info("persistence")
        except rex.RedisError:
            return
        if str(info.get("aof_enabled", "1")) == "0":
            log.warning(
                "redis sink: the server has no append-only file; a crash of Redis can lose "
                "applied batches (set appendonly yes)",
                server=self._where(),
            )

    def close(self) -> None:
        """Close the client's connections."""
        self._client.close()
