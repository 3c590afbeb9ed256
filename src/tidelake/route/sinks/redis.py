"""The Redis sink: the latest row of each key as a Redis hash, versioned by source position,
with the source's DDL applied in stream order.

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
* ``P:T:%schema`` — a **hash** per table the source's DDL reached: ``applied``, the last
  schema change applied to the table (its position, ``#`` and the operation's index in the
  statement), and ``cleared``, the position of the last ``TRUNCATE``/``DROP`` (or rename away
  from or onto the name) that emptied it. Both only ever grow. And ``log:<position>`` for
  each statement that changed the table's columns: its steps (``route/schema.py``), with
  which a row change of before it arriving later (a dead letter re-processed) is brought
  forward into the table's present shape before it is written.

``T`` and ``K`` are escaped so that no key can be read two ways: ``%`` becomes ``%25``, ``:``
``%3A`` and every control character (``\\x1f``, the separator of a composite key's values,
included) ``%XX``. An escaped part therefore has no ``:``, and a ``%`` in it is always
followed by two hexadecimal digits — which ``%tombstones`` and ``%schema`` are not, so no row
key is a table's own key. The prefix is written as it is (a ``:`` in it is fine: it is the same
in all keys of a sink).

The position guard runs **inside Redis**, as one Lua script call per run of rows (registered
with ``register_script``; EVALSHA, loaded again on NOSCRIPT). For each change, in stream
order, the script reads the row's ``_tl_position``, the key's tombstone and the table's
``cleared`` position, and writes only when the change's position is strictly greater than all
three, comparing byte by byte (Lua's own ``<`` on strings follows the server's locale). An
upsert then replaces the hash, sets the TTL when ``ttl_s`` is configured and drops the
tombstone; a delete removes the hash and records the tombstone. So a redelivered batch, a
replay from an older sequence and changes of one key out of order within a batch change
nothing, a replayed upsert older than a delete never brings the row back, and one older than
a ``TRUNCATE`` or ``DROP`` of its table never brings back a row the source removed. A script
runs atomically: no other client sees half a run. The script is flagged (``#!lua``, Redis ≥
7.0) so that Redis refuses it *before* it starts when it is out of memory, rather than failing
halfway; a key that holds some other type (written by someone else) is skipped by the script
and its change rejected, the rest of the batch is applied. Redis Cluster is not supported: one
script call touches keys of many hash slots.

**DDL** (a ``schema`` change, ``route/select.py``) is applied between the rows of a batch, in
stream order (:func:`~tidelake.route.change.split_at_schema`): the rows before it are written
first, the rows after it come in the new shape. Each operation of the statement at position
``S`` is applied to a table only when the table's ``applied`` is below it, and ``applied`` is
set last: a redelivery or a replay changes nothing, and an apply killed halfway is finished by
the route's retry. A table's rows are found with ``SCAN`` over ``P:T:*``.

==========================  ====================================================================
operation                   what the sink does
==========================  ====================================================================
``TRUNCATE``, ``DROP``      ``cleared`` = ``S`` first, then every row hash of the table at or
(table)                     below ``S`` is deleted (one Lua check per key, so a row a newer
                            change wrote stays) and the tombstones at or below ``S``
``DROP DATABASE``           the same for each table of the database that has keys here
``RENAME TABLE a TO b``     ``b``'s rows at or below ``S`` are stale (the name was free at the
                            source) and deleted, ``cleared`` = ``S`` on both names, then each
                            row hash of ``a`` is moved (``RENAME``) to ``b``'s key, position
                            and TTL kept; ``a``'s tombstones go
``ADD COLUMN``              each row below ``S`` gets the value existing rows read at the
                            source: the ``DEFAULT``'s text, or for ``CURRENT_TIMESTAMP`` the
                            statement's commit time as the rows' text for the type
                            (``YYYY-MM-DD HH:MM:SS`` in ``source_timezone`` — UTC for a zoned
                            PostgreSQL timestamp — with the type's fraction digits; a ``date``
                            ``YYYY-MM-DD``); a NULL default writes nothing (NULL is no field).
                            A default computed per row (``DEFAULT (a + 1)``, a generated
                            column) is **rejected**: the sink cannot know the values
``DROP COLUMN``             the field is removed from each row below ``S``
``RENAME COLUMN``           the field is moved to its new name in each row below ``S``
``MODIFY``/``CHANGE``       the new name, as a rename; a value's text stays, except a DECIMAL
                            with a scale, whose values get exactly that many decimals, rounded
                            half away from zero (``1.5`` → ``1.50``, as the source shows them)
``CREATE TABLE``            nothing (the rows bring their fields)
==========================  ====================================================================

A column operation rewrites only rows whose position is below ``S`` (a row a newer change
wrote has the new shape), all the statement's column operations on one table in one pass,
each row in one Lua call that checks the row's position is still the one read: the row's
fields change, its TTL and its ``_tl_position`` stay (a change of that key delivered late —
a redelivery after a kill comes after newer messages — still meets the row's own position),
and ``_tl_schema`` becomes ``S``, so a retry does not rewrite it twice. A schema change the
sink cannot apply is :class:`ChangesRejected` with the reason (dead-lettered alone; the rest
of the batch is applied again).

Durability: :meth:`RedisSink.apply` returns when Redis answered the scripts, and that write is
on disk only as far as the server's persistence says. Run Redis with ``appendonly yes``; with
``appendfsync always`` each write is fsynced before Redis answers (nothing acknowledged is
lost on a crash, at the cost of one fsync per script call), with ``everysec`` (Redis's
default) up to about one second of acknowledged batches can be lost on a crash of the Redis
host — they are not re-sent by the route, since it acknowledged them. The sink logs a warning
once when the server has no AOF. A replica is not waited for (no ``WAIT``): a failover may
lose the last writes the same way.

Errors: a connection refused or reset, a timeout, a server still loading its data, a read-only
replica, out of memory, MASTERDOWN/TRYAGAIN/CLUSTERDOWN, a failed background save (MISCONF),
an authentication failure: :class:`SinkUnavailable` (the route retries the batch; applying it
again is harmless). Any other error of Redis: :class:`SinkError`.

A TTL (``ttl_s``) expires a row's hash that long after its last change; once expired, the
row's version is gone too, so a replay of an older upsert can write it again. Tombstones and
the tables' schema hashes do not expire.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import redis
import redis.exceptions as rex
import structlog
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from tidelake import names
from tidelake.config import RedisSinkConfig
from tidelake.lake import ddl
from tidelake.route.change import (
    ChangesRejected,
    RowChange,
    SinkError,
    SinkUnavailable,
    scalar_text,
    split_at_schema,
)
from tidelake.route.schema import (
    COLUMN_OPS,
    ColumnStep,
    SchemaRefusedError,
    applied_mark,
    column_groups,
    column_steps,
    forward,
    rewrite_row,
    schema_refusal,
    source_zone,
    steps_from_json,
    steps_json,
)

log = structlog.get_logger(__name__)

_T = TypeVar("_T")

#: The row hash's field holding the position of the change that wrote it.
POSITION_FIELD = "_tl_position"
#: The row hash's field holding the position of the last schema change that rewrote it (a
#: rewrite keeps the row's own position: a change of that key delivered late still meets it).
SCHEMA_FIELD = "_tl_schema"
#: The last part of a table's tombstone hash (unreachable by an escaped key: module doc).
TOMBSTONES = "%tombstones"
#: The last part of a table's schema hash (unreachable by an escaped key: module doc).
SCHEMA = "%schema"
#: The schema hash's fields: the last schema change applied, the last emptying of the table.
APPLIED_FIELD = "applied"
CLEARED_FIELD = "cleared"
#: The schema hash's fields ``log:<position>``: the column steps of the change at that
#: position (route/schema.py ``steps_json``), for a row change of before it arriving later.
LOG_FIELD = "log:"
#: Keys one SCAN page hands to one script call.
_PAGE = 500

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

#: Byte-wise "a is above b" (b false: nothing to be above), shared by the scripts.
_ABOVE_LUA = """
local function above(a, b)
  if not b then return true end
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x > y end
  end
  return #a > #b
end
local function kind(key)
  return redis.call('TYPE', key)['ok']
end
"""

#: KEYS: per change, its row hash, its table's tombstone hash and its table's schema hash.
#: ARGV: ttl seconds (0: none), then per change: op (u/d), key text, position, field count n,
#: then n field/value pairs.
#: Returns the 1-based indexes of changes skipped because a key holds another type.
_APPLY_LUA = (
    "#!lua"
    + _ABOVE_LUA
    + """
local function usable(key)
  local t = kind(key)
  return t == 'hash' or t == 'none'
end
local ttl = tonumber(ARGV[1])
local a = 2
local rejected = {}
for c = 1, #KEYS / 3 do
  local row, tomb, schema = KEYS[3 * c - 2], KEYS[3 * c - 1], KEYS[3 * c]
  local op, member, pos, n = ARGV[a], ARGV[a + 1], ARGV[a + 2], tonumber(ARGV[a + 3])
  local first = a + 4
  a = first + 2 * n
  if not (usable(row) and usable(tomb) and usable(schema)) then
    rejected[#rejected + 1] = c
  else
    local deleted = redis.call('HGET', tomb, member)
    if above(pos, redis.call('HGET', row, '_tl_position')) and above(pos, deleted)
        and above(pos, redis.call('HGET', schema, 'cleared')) then
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
)

#: KEYS: a table's schema hash. ARGV: field/value pairs, each set only when above the stored
#: value. Returns 0 when the key holds another type.
_RECORD_LUA = (
    "#!lua"
    + _ABOVE_LUA
    + """
local t = kind(KEYS[1])
if t ~= 'hash' and t ~= 'none' then return 0 end
for i = 1, #ARGV, 2 do
  if above(ARGV[i + 1], redis.call('HGET', KEYS[1], ARGV[i])) then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  end
end
return 1
"""
)

#: KEYS: row hashes. ARGV[1]: a position. Deletes each row hash at or below it.
_CLEAR_LUA = (
    "#!lua"
    + _ABOVE_LUA
    + """
local n = 0
for i = 1, #KEYS do
  if kind(KEYS[i]) == 'hash' then
    local p = redis.call('HGET', KEYS[i], '_tl_position')
    if p and not above(p, ARGV[1]) then
      redis.call('DEL', KEYS[i])
      n = n + 1
    end
  end
end
return n
"""
)

#: KEYS[1]: a tombstone hash. ARGV[1]: a position, then members: each whose delete is at or
#: below the position is removed.
_PRUNE_LUA = (
    "#!lua"
    + _ABOVE_LUA
    + """
if kind(KEYS[1]) ~= 'hash' then return 0 end
local n = 0
for i = 2, #ARGV do
  local p = redis.call('HGET', KEYS[1], ARGV[i])
  if p and not above(p, ARGV[1]) then
    redis.call('HDEL', KEYS[1], ARGV[i])
    n = n + 1
  end
end
return n
"""
)

#: KEYS: row hashes. ARGV[1]: the schema change's position; then per key: the position read,
#: a count d and d fields to delete, a count s and s field/value pairs to set. A key whose
#: position is no longer the one read is left alone; returns their 1-based indexes.
_REWRITE_LUA = (
    "#!lua"
    + _ABOVE_LUA
    + """
local a = 2
local missed = {}
for i = 1, #KEYS do
  local expected, nd = ARGV[a], tonumber(ARGV[a + 1])
  local d0 = a + 2
  local ns = tonumber(ARGV[d0 + nd])
  local s0 = d0 + nd + 1
  a = s0 + 2 * ns
  if kind(KEYS[i]) == 'hash' and redis.call('HGET', KEYS[i], '_tl_position') == expected then
    if nd > 0 then redis.call('HDEL', KEYS[i], unpack(ARGV, d0, d0 + nd - 1)) end
    local fields = {'_tl_schema', ARGV[1]}
    for j = s0, a - 1 do fields[#fields + 1] = ARGV[j] end
    redis.call('HSET', KEYS[i], unpack(fields))
  else
    missed[#missed + 1] = i
  end
end
return missed
"""
)

#: KEYS: pairs (a row hash of the old table, the same key of the new table). ARGV[1]: the
#: rename's position. A row at or below it is renamed onto the new key, unless that holds a
#: newer row (then the old one is deleted). Returns the 1-based indexes of pairs whose new key
#: holds another type (left alone).
_MOVE_LUA = (
    "#!lua"
    + _ABOVE_LUA
    + """
local refused = {}
for c = 1, #KEYS / 2 do
  local src, dst = KEYS[2 * c - 1], KEYS[2 * c]
  if kind(src) == 'hash' then
    local p = redis.call('HGET', src, '_tl_position')
    if p and not above(p, ARGV[1]) then
      local t = kind(dst)
      local q = t == 'hash' and redis.call('HGET', dst, '_tl_position')
      if q and above(q, ARGV[1]) then
        redis.call('DEL', src)
      elseif t == 'hash' or t == 'none' then
        redis.call('RENAME', src, dst)
      else
        refused[#refused + 1] = c
      end
    end
  end
end
return refused
"""
)


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


def unescape_part(text: str) -> str:
    """The inverse of :func:`escape_part`."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == "%" and i + 3 <= len(text):
            try:
                out.append(chr(int(text[i + 1 : i + 3], 16)))
                i += 3
                continue
            except ValueError:
                pass
        out.append(text[i])
        i += 1
    return "".join(out)


def glob_escape(text: str) -> str:
    """``text`` as a literal in a Redis ``MATCH`` pattern."""
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)


def row_key(prefix: str, table: str, key_text: str) -> str:
    """The Redis key of one row's hash: ``prefix:table:key`` with table and key escaped."""
    return f"{prefix}:{escape_part(table)}:{escape_part(key_text)}"


def tombstone_key(prefix: str, table: str) -> str:
    """The Redis key of a table's tombstone hash (key text → position of its delete)."""
    return f"{prefix}:{escape_part(table)}:{TOMBSTONES}"


def schema_key(prefix: str, table: str) -> str:
    """The Redis key of a table's schema hash (``applied``, ``cleared``)."""
    return f"{prefix}:{escape_part(table)}:{SCHEMA}"


def table_pattern(prefix: str, table: str) -> str:
    """The ``MATCH`` pattern of every key of ``table`` (rows, tombstones, schema)."""
    return glob_escape(f"{prefix}:{escape_part(table)}:") + "*"


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
        if column in (POSITION_FIELD, SCHEMA_FIELD):
            raise ValueError(f"column {column!r} is the sink's own field")
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
    """The KEYS and ARGV of one script call applying ``changes`` (rows only). Raises
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
        elif change.kind != "delete":
            bad.append((change.seq, f"{change.table} seq {change.seq}: not a row change"))
            continue
        key_text = change.key_text()
        keys += [
            row_key(prefix, change.table, key_text),
            tombstone_key(prefix, change.table),
            schema_key(prefix, change.table),
        ]
        op = "u" if change.kind == "upsert" else "d"
        args += [op, key_text, change.position, str(len(fields) // 2), *fields]
    if bad:
        seqs = list(dict.fromkeys(seq for seq, _ in bad))
        raise ChangesRejected(seqs, "; ".join(reason for _, reason in bad))
    return keys, args


# --- schema changes (pure; the OpenSearch sink uses them too) ---------------------------------


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


def _text(value: Any) -> str:
    """A stored field value (bytes from Redis) as text."""
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)


def _raw(value: Any) -> bytes:
    """A field name or value as the bytes Redis stores."""
    if isinstance(value, bytes):
        return value
    return str(value).encode("utf-8", "surrogateescape")


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
        source_timezone: str = "UTC",
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
        self._record_script = self._client.register_script(_RECORD_LUA)
        self._clear_script = self._client.register_script(_CLEAR_LUA)
        self._prune_script = self._client.register_script(_PRUNE_LUA)
        self._rewrite_script = self._client.register_script(_REWRITE_LUA)
        self._move_script = self._client.register_script(_MOVE_LUA)
        self._zone = source_zone(source_timezone)
        self._aof_checked = False

    def apply(self, changes: Sequence[RowChange]) -> None:
        """Apply ``changes`` (stream order): each run of rows in one atomic script call, each
        schema change between them; see the module doc."""
        if not changes:
            return
        pieces = split_at_schema(changes)
        prefix, ttl = self.config.key_prefix, self.config.ttl_s
        calls: list[tuple[list[str], list[str]] | None] = []
        bad: list[tuple[Sequence[int], str]] = []
        for rows, schema in pieces:
            try:
                rows[:] = self._call(functools.partial(self._forward, rows)) if rows else rows
                calls.append(script_call(prefix, rows, ttl) if rows else None)
            except ChangesRejected as exc:
                bad.append((exc.seqs, exc.reason))
            if schema is not None:
                reason = schema_refusal(schema, self._zone)
                if reason is not None:
                    bad.append(([schema.seq], reason))
        if bad:
            # Nothing written: the route dead-letters these and applies the rest again.
            seqs = list(dict.fromkeys(seq for group, _ in bad for seq in group))
            raise ChangesRejected(seqs, "; ".join(reason for _, reason in bad))
        skipped: list[int] = []
        for (rows, schema), call in zip(pieces, calls, strict=True):
            if call is not None:
                keys, args = call
                indexes = self._call(functools.partial(self._script, keys=keys, args=args))
                skipped += [rows[int(i) - 1].seq for i in indexes]
            if schema is not None:
                try:
                    self._call(functools.partial(self._apply_schema, schema))
                except SchemaRefusedError as exc:
                    # The rest is applied again by the route, after this one is dead-lettered.
                    reason = f"{schema.table} seq {schema.seq}: {exc} ({self._where()})"
                    if skipped:
                        reason = f"{self._skipped_reason()}; {reason}"
                    raise ChangesRejected([*dict.fromkeys(skipped), schema.seq], reason) from exc
        self._check_aof()
        if skipped:
            raise ChangesRejected(list(dict.fromkeys(skipped)), self._skipped_reason())

    def _skipped_reason(self) -> str:
        return f"a key of the change holds another Redis type than a hash ({self._where()})"

    def _call(self, fn: Callable[[], _T]) -> _T:
        """``fn()`` with Redis's errors as the route's (module doc: errors)."""
        try:
            return fn()
        except rex.RedisError as exc:
            if _transient(exc):
                raise SinkUnavailable(f"redis {self._where()}: {exc}") from exc
            raise SinkError(f"redis {self._where()}: {exc}") from exc

    # -- schema changes ------------------------------------------------------------------------

    def _apply_schema(self, change: RowChange) -> None:
        """Apply a schema change's operations in order (module doc: DDL)."""
        position = change.position
        groups = column_groups(change.operations)
        for i, op in enumerate(change.operations):
            mark = applied_mark(position, i)
            if isinstance(op, COLUMN_OPS):
                table = op.table.table_id
                first, ops = groups[table]
                if first == i:
                    steps = column_steps(ops, change.commit_ts_ms, self._zone)
                    self._alter_columns(table, steps, position, mark)
            elif isinstance(op, ddl.TruncateTable | ddl.DropTable):
                self._clear(op.table.table_id, position, mark)
            elif isinstance(op, ddl.DropDatabase):
                for table in self.tables_of(op.database):
                    self._clear(table, position, mark)
            elif isinstance(op, ddl.RenameTable):
                self._rename_table(op.table.table_id, op.to.table_id, position, mark)
            # CREATE TABLE / DATABASE: nothing to store; the rows bring their fields.

    def record(self, table: str) -> tuple[str | None, str | None]:
        """The table's schema hash: (``applied``, ``cleared``), None where unset."""
        key = schema_key(self.config.key_prefix, table)
        if self._client.type(key) not in (b"hash", b"none"):
            raise SchemaRefusedError(f"{key} holds another Redis type than a hash")
        applied, cleared = self._client.hmget(key, [APPLIED_FIELD, CLEARED_FIELD])
        return (
            None if applied is None else _text(applied),
            None if cleared is None else _text(cleared),
        )

    def _set_record(self, table: str, **fields: str) -> None:
        """Raise the table's schema fields to ``fields`` (never lowers one)."""
        key = schema_key(self.config.key_prefix, table)
        args = [x for pair in fields.items() for x in pair]
        if not self._record_script(keys=[key], args=args):
            raise SchemaRefusedError(f"{key} holds another Redis type than a hash")

    def _row_pages(self, table: str) -> Iterator[list[bytes]]:
        """The keys of the table's row hashes, a page at a time (``SCAN``)."""
        prefix = self.config.key_prefix
        own = {_raw(tombstone_key(prefix, table)), _raw(schema_key(prefix, table))}
        page: list[bytes] = []
        for key in self._client.scan_iter(match=table_pattern(prefix, table), count=1000):
            raw = _raw(key)
            if raw in own:
                continue
            page.append(raw)
            if len(page) >= _PAGE:
                yield page
                page = []
        if page:
            yield page

    def tables_of(self, database: str) -> list[str]:
        """The tables of ``database`` this sink holds keys of."""
        prefix = self.config.key_prefix
        start = escape_part(names.table_id(database, "x")[:-1])
        pattern = glob_escape(f"{prefix}:{start}") + "*"
        tables: set[str] = set()
        for key in self._client.scan_iter(match=pattern, count=1000):
            part = _text(key)[len(prefix) + 1 :].split(":", 1)[0]
            table = unescape_part(part)
            try:
                if names.split_table_id(table)[0] == database:
                    tables.add(table)
            except ValueError:
                continue
        return sorted(tables)

    def _remove_rows(self, table: str, position: str) -> None:
        """Delete the table's rows and tombstones at or below ``position``."""
        for page in self._row_pages(table):
            self._clear_script(keys=page, args=[position])
        tomb = tombstone_key(self.config.key_prefix, table)
        if self._client.type(tomb) != b"hash":
            return
        members: list[bytes] = []
        for member, deleted in self._client.hscan_iter(tomb, count=1000):
            if _raw(deleted) <= _raw(position):
                members.append(_raw(member))
        for start in range(0, len(members), _PAGE):
            self._prune_script(keys=[tomb], args=[position, *members[start : start + _PAGE]])

    def _clear(self, table: str, position: str, mark: str) -> None:
        """TRUNCATE / DROP TABLE at ``position``: ``cleared`` first (the guard refuses every
        older change from then on), then the rows and tombstones at or below it go."""
        applied, _cleared = self.record(table)
        if applied is not None and applied >= mark:
            return
        self._set_record(table, **{CLEARED_FIELD: position})
        self._remove_rows(table, position)
        self._set_record(table, **{APPLIED_FIELD: mark})
        log.info("redis sink: table cleared", table=table, position=position)

    def _rename_table(self, old: str, new: str, position: str, mark: str) -> None:
        """RENAME TABLE ``old`` TO ``new`` at ``position`` (module doc)."""
        applied, _cleared = self.record(old)
        if applied is not None and applied >= mark:
            return
        _applied, new_cleared = self.record(new)
        if new_cleared is None or new_cleared < position:
            # The name was free at the source: what this sink holds under it is stale. Done
            # once: after it, ``cleared`` says so, and a retry keeps the rows moved already.
            self._remove_rows(new, position)
            self._set_record(new, **{CLEARED_FIELD: position})
        self._set_record(old, **{CLEARED_FIELD: position})
        prefix = self.config.key_prefix
        source = _raw(f"{prefix}:{escape_part(old)}:")
        target = _raw(f"{prefix}:{escape_part(new)}:")
        for page in self._row_pages(old):
            keys = [k for key in page for k in (key, target + key[len(source) :])]
            refused = self._move_script(keys=keys, args=[position])
            if refused:
                held = _text(keys[2 * int(refused[0]) - 1])
                raise SchemaRefusedError(
                    f"rename table {old} to {new}: {held} holds another Redis type than a hash"
                )
        self._remove_rows(old, position)  # its tombstones: the rows are moved
        self._set_record(new, **{APPLIED_FIELD: mark})
        self._set_record(old, **{APPLIED_FIELD: mark})
        log.info("redis sink: table renamed", table=old, to=new, position=position)

    def _alter_columns(
        self, table: str, steps: Sequence[ColumnStep], position: str, mark: str
    ) -> None:
        """The statement's column operations on ``table``: each row below ``position``
        rewritten once (module doc)."""
        applied, _cleared = self.record(table)
        if applied is not None and applied >= mark:
            return
        if steps:
            # Logged first, under the mark that says the rewrite is done: a row change of
            # before it that arrives later is brought forward once the mark is reached.
            key = schema_key(self.config.key_prefix, table)
            self._client.hset(key, LOG_FIELD + mark, steps_json(steps))
            rows = 0
            for page in self._row_pages(table):
                rows += self._rewrite_page(page, steps, position)
            log.info("redis sink: rows rewritten", table=table, rows=rows, position=position)
        self._set_record(table, **{APPLIED_FIELD: mark})

    def _forward(self, rows: Sequence[RowChange]) -> list[RowChange]:
        """``rows`` with each one older than a column change of its table brought forward
        through the steps logged since (a dead letter re-processed after the DDL)."""
        history: dict[str, list[tuple[str, list[ColumnStep]]]] = {}
        for table in dict.fromkeys(c.table for c in rows):
            key = schema_key(self.config.key_prefix, table)
            try:
                held = self._client.hgetall(key)
            except rex.ResponseError:  # another type: the row script refuses the changes
                held = {}
            fields = {_text(k): _text(v) for k, v in held.items()}
            applied = fields.get(APPLIED_FIELD, "")
            # Only a change whose rewrite is done (its mark reached): until then a row of
            # before it is written as it is, and the rewrite, when it runs again, takes it.
            history[table] = sorted(
                (name[len(LOG_FIELD) :].split("#", 1)[0], steps_from_json(value))
                for name, value in fields.items()
                if name.startswith(LOG_FIELD) and name[len(LOG_FIELD) :] <= applied
            )
        return [
            forward(c, [s for at, taken in history[c.table] if at > c.position for s in taken])
            for c in rows
        ]

    def _rewrite_page(self, keys: list[bytes], steps: Sequence[ColumnStep], position: str) -> int:
        """Rewrite the rows of ``keys`` below ``position``; the number rewritten."""
        limit = _raw(position)
        done = 0
        for _attempt in range(5):
            pipe = self._client.pipeline(transaction=False)
            for key in keys:
                pipe.hgetall(key)
            stored = pipe.execute(raise_on_error=False)
            todo: list[bytes] = []
            args: list[bytes | str | int] = [position]
            for key, fields in zip(keys, stored, strict=True):
                if not isinstance(fields, dict):
                    continue  # another type: not a row of this sink
                at = fields.pop(POSITION_FIELD.encode(), None)
                rewritten = fields.pop(SCHEMA_FIELD.encode(), None)
                if at is None or _raw(at) >= limit or (rewritten and _raw(rewritten) >= limit):
                    continue  # written after the change, or rewritten by it already
                row = {_text(name): value for name, value in fields.items()}
                new = rewrite_row(row, steps)
                gone = [_raw(name) for name in row if name not in new]
                changed = [
                    (_raw(name), _raw(value))
                    for name, value in new.items()
                    if value is not None and (name not in row or _raw(row[name]) != _raw(value))
                ]
                gone += [_raw(name) for name, value in new.items() if value is None and name in row]
                if not gone and not changed:
                    continue
                todo.append(key)
                args += [_raw(at), len(gone), *gone, len(changed)]
                args += [x for pair in changed for x in pair]
            if not todo:
                return done
            missed = self._rewrite_script(keys=todo, args=args)
            done += len(todo) - len(missed)
            if not missed:
                return done
            keys = [todo[int(i) - 1] for i in missed]  # a newer change wrote them: read again
        raise SinkUnavailable(
            f"redis {self._where()}: rows kept changing while being rewritten; retrying"
        )

    # -- plumbing ------------------------------------------------------------------------------

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
